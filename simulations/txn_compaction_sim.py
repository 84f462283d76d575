"""The txn-compaction workload: the transactions workload with compacted output topics, so the log cleaner
removes aborted transactions' data and then their markers while read_committed readers read the cleaned logs.

Theory of operation. Everything of the transactions workload (simulations/txn_sim.py: exactly-once pipelines
writing `out-a` and `out-b` under every fault, the coordinators' nodes killed at EndTxn, a read_committed reader)
runs as it does there, with these changes:
- the output topics are compacted, with the compaction workload's settings (simulations/compaction_sim.py:
  min.compaction.lag.ms 0.5 s, a dirty ratio per seed, the brokers looking for work every second) but
  segments of 32 KiB, room for a transaction's batch, cleaning steps of 64 KiB a tick and delete.retention.ms
  30 s (`TXN_DELETE_RETENTION_MS`: markers go in the second half of a 60 s run);
- each output record is keyed by its value (its transaction and its input), so no record is ever superseded:
  the cleaner may remove only aborted transactions' data and, once no data of theirs is left and
  delete.retention.ms has passed, their markers and aborted-index entries;
- the read_committed reader goes back to offset 0 every `REREAD_MS` during the fault phase, so it reads what
  the cleaner rewrote, with the aborted transactions the leader's index still lists.
The checkers are the transactions workload's, unchanged: no_aborted_read (now also over cleaned segments),
no_torn_transaction, exactly_once (the cleaner never removes a committed output), reads_below_lso and the
others. The final oracle reads the leaders' cleaned logs.

Planted bug (`--bugs`): "cleaner_forgets_aborted" (the cleaner is handed no aborted transactions: their data is
kept as if committed, their ABORT markers go as markers with nothing to decide once delete.retention.ms has
passed, and their index entries with them, so read_committed readers see aborted records; a run needs more
than 30 s to show it). The transactions workload's planted bugs work here too.
"""

from __future__ import annotations

from typing import Any

from simulations import cluster_sim
from simulations.compaction_sim import (
    CLEANUP_INTERVAL_MS,
    DIRTY_RATIO_CHOICES,
    MIN_COMPACTION_LAG_MS,
    rewind_during_faults,
)
from simulations.run import RunConfig, RunResult
from simulations.txn_sim import INTERNAL_PARTITIONS, TXN_BUGS, TransactionsSimulation

DESCRIPTION = "the transactions workload with compacted output topics, read again from offset 0 by a read_committed reader"
TXN_COMPACTION_BUGS = {**TXN_BUGS, "cleaner_forgets_aborted": "broker",
                       "cleaner_ignores_isr": "cleaner"}
CLEANER_SWITCHES = frozenset({"cleaner_forgets_aborted", "cleaner_ignores_isr"})  # to BrokerCore.bug_cleaner
# A transaction writes up to 500 records (some 20 KB) to an output partition in one batch, and a batch larger
# than segment.bytes is refused (MESSAGE_TOO_LARGE, as in Kafka): segments of a couple of such batches.
SEGMENT_BYTES = 32 * 1024
TXN_CLEANER_STEP_BYTES = 64 * 1024  # per broker tick: a pass over the outputs spans a few ticks
# Shorter than a replica stays behind under this workload's faults (a node is down for up to 9 s): the cleaner
# keeps markers past their horizon while a replica is out of the ISR (partitions/cleaner.py), where Kafka's
# would let a follower fetch past a removed ABORT marker, keep the aborted data as an open transaction and
# commit it with its producer's next COMMIT (seed 72 at 60 s, planted bug "cleaner_ignores_isr").
TXN_DELETE_RETENTION_MS = 5_000


class TxnCompactionSimulation(TransactionsSimulation):
    """The transactions simulation with compacted outputs (see the module docstring)."""

    extra_bugs = TXN_COMPACTION_BUGS
    keyed_outputs = True
    broker_settings_extra = {
        "offsets_topic_num_partitions": INTERNAL_PARTITIONS,
        "transaction_state_log_num_partitions": INTERNAL_PARTITIONS,
        "log_retention_check_interval_ms": CLEANUP_INTERVAL_MS,
        "log_cleaner_step_bytes": TXN_CLEANER_STEP_BYTES,
    }

    def configure_node(self, state: Any) -> None:
        super().configure_node(state)
        switches = CLEANER_SWITCHES & self.workload_bugs
        if switches:
            state.broker.bug_cleaner = frozenset(switches)

    def _build_clients(self) -> None:
        dirty_ratio = self.loop.derive_rng("compaction").choice(DIRTY_RATIO_CHOICES)
        self.trace("compaction", dirty_ratio)
        self.output_topic_configs = {
            "cleanup.policy": "compact", "segment.bytes": str(SEGMENT_BYTES),
            "delete.retention.ms": str(TXN_DELETE_RETENTION_MS), "min.compaction.lag.ms": str(MIN_COMPACTION_LAG_MS),
            "min.cleanable.dirty.ratio": dirty_ratio}
        super()._build_clients()

    def _start_clients(self) -> None:
        super()._start_clients()
        rewind_during_faults(self, self.txn_reader)

    def _final_logs(self) -> dict:
        """The cluster's final log checks (replicas identical, offsets dense) for the input topic and the internal
        ones only: each replica compacts the outputs on its own."""
        return {key: logs for key, logs in super()._final_logs().items() if not key[0].startswith("out-")}

    def _result(self) -> RunResult:
        result = super()._result()
        markers = 0
        for process in self.processes.values():
            for (topic, _), hosted in process.broker.partitions.items():
                if topic.startswith("out-"):
                    markers += len(hosted.producer_state.aborted_index.entries)
        result.stats.update({"txn_reader_rewinds": self.txn_reader.rewinds, "aborted_index_entries_left": markers})
        return result


def run(config: RunConfig) -> RunResult:
    """One txn-compaction simulation of `config` (see the module docstring). Raises ValueError for an unknown
    bug."""
    return cluster_sim.run(config, simulation_class=TxnCompactionSimulation)
