"""The transactions workload: the whole-cluster simulation plus exactly-once pipelines under faults.

Theory of operation. Everything of the cluster workload (simulations/cluster_sim.py: three real nodes,
producers writing the input topic `sim`, a reader, every node and network fault) runs as it does there; on
top, two consume-transform-produce pipelines (simulations/txn_clients.py) read the input partitions they own,
write each record to `out-a` and `out-b` (the same partition number) and commit their input offsets in the
same transaction through the real transaction coordinator (`__transaction_state`) and group coordinator
(`__consumer_offsets`), whose shards live on those same nodes, so coordinator failover, partition leader
failover, truncation and power loss all happen to them. A read_committed reader reads the outputs. The
pipelines have faults of their own (`TXN_FAULT_RATES`, per 100 ms of the fault phase): crash mid-transaction
(restarted later; its open transaction is aborted by the next InitProducerId or its timeout) and pause (a
stalled process; a pause longer than the transaction timeout gets it fenced).

Checkers: the cluster's, plus simulations/txn_checkers.py. Liveness also waits until the pipelines are idle
(everything they own consumed and committed), the outputs converged, and the reader has read every output
partition to its end (so the last stable offset reached the log end: no transaction left open).

Planted bugs (`--bugs`): "lso_ignores_open_txn" (the last stable offset is the high watermark, open
transactions or not), "txn_offsets_visible_early" (the group coordinator makes a TxnOffsetCommit's offsets
the group's at once, before the transaction's marker, so an aborted transaction still moves them) and
"markers_before_prepare_committed" (the coordinator writes markers as soon as the PrepareCommit/PrepareAbort
record is written, before the high watermark passes it: only a coordinator failover inside that window shows
it, see the README's status for how often a seed catches it), "end_txn_retry_as_new_txn" (the coordinator
takes a transaction version 2 EndTxn retried with the pre-bump epoch for a new request of a fenced producer:
a committed transaction whose answer was lost is answered PRODUCER_FENCED, so the client counts as failed a
transaction that committed), "complete_before_markers_written" (the coordinator completes a
transaction once its WriteTxnMarkers requests are sent, not once the leaders have written the markers: the
producer's next transaction, whose AddPartitionsToTxn waited for Complete*, can then put records on a
partition ahead of the previous transaction's marker, which decides them too), "end_txn_behind_parked_add" (an
EndTxn(abort) sent together with the AddPartitionsToTxn of a new transaction, as librdkafka's abort_transaction
sends it, arrives while that add is parked behind the previous transaction's markers and is refused
INVALID_TXN_STATE: `added_txn_ends`).

Transaction versions: per seed, each pipeline is a transaction version 1 or 2 client (`TV2_SHARE`, from the
seed's "txn-versions" stream), so every checker covers both protocols and their mix on one coordinator.
"""

from __future__ import annotations

from typing import Any

from coordinator.keys import partition_for_key
from partitions.records import decode_batch, parse_control_record, COMMIT
from simulations import cluster_sim
from simulations.cluster_sim import CLIENT_ID_BASE, MIN_INSYNC_REPLICAS, PARTITIONS, REPLICATION_FACTOR, TOPIC, \
    ClusterSimulation, configure_shards, log_batches
from simulations.kafka_clients import TopicCreator
from simulations.loop import US_PER_MS
from simulations.run import RunConfig, RunResult
from simulations.txn_checkers import TxnCheckers
from simulations.txn_clients import OUTPUT_TOPICS, SimTxnPipeline, SimTxnReader

GROUP = "txn-group"
INTERNAL_PARTITIONS = 3
PIPELINES = (("pipe-0", [0, 2]), ("pipe-1", [1]))
TV2_SHARE = 0.5  # per seed, each pipeline is a transaction version 2 client (KIP-890 part 2) with this chance
TXN_FAULT_STEP_MS = 100
TXN_FAULT_RATES = {"crash": 0.003, "pause": 0.004}
# Per EndTxn sent: SIGKILL the coordinator's node 0-2 ms later (inside its Prepare write, its markers or its
# Complete write), as a Jepsen nemesis aims at the commit protocol; the node restarts after an episode. Half
# the time the pipeline dies with it, so the decision is not simply retried: its transaction must then end
# the same way on every partition whatever the next coordinator finds.
KILL_COORDINATOR_AT_END_TXN_RATE = 0.05
KILL_DELAY_US_MAX = 2_000
KILL_PIPELINE_TOO_SHARE = 0.5
PIPELINE_DOWN_MS_MIN, PIPELINE_DOWN_MS_MAX = 500, 6_000
TXN_BUGS = {"lso_ignores_open_txn": "bug_lso_ignores_open_transactions",
            "markers_before_prepare_committed": "bug_markers_before_prepare_committed",
            "txn_offsets_visible_early": "bug_txn_offsets_visible_early",
            "end_txn_retry_as_new_txn": "bug_end_txn_retry_as_new_transaction",
            "complete_before_markers_written": "bug_complete_before_markers_written",
            "poll_ignores_changes": "bug_poll_ignores_changes",
            "end_txn_behind_parked_add": "bug_end_txn_behind_parked_add_decided_now"}


class TransactionsSimulation(ClusterSimulation):
    """The cluster simulation with exactly-once pipelines (see the module docstring)."""

    checkers_class = TxnCheckers
    extra_bugs = TXN_BUGS
    idle_phase_ms = 0  # the cluster workload's idle phase (its traces stay as they were)
    output_topic_configs: dict[str, str] = {}  # more configs of the output topics (simulations/txn_compaction_sim.py)
    keyed_outputs = False  # output records keyed by their input, for compacted outputs
    broker_settings_extra = {
        "offsets_topic_num_partitions": INTERNAL_PARTITIONS,
        "transaction_state_log_num_partitions": INTERNAL_PARTITIONS,
    }

    def configure_node(self, state: Any) -> None:
        if "lso_ignores_open_txn" in self.workload_bugs:
            state.broker.bug_lso_ignores_open_transactions = True
        if "markers_before_prepare_committed" in self.workload_bugs:
            configure_shards(state.coordinators.services[1].runtime,
                             lambda shard: setattr(shard, "bug_markers_before_prepare_committed", True))
        if "end_txn_retry_as_new_txn" in self.workload_bugs:
            configure_shards(state.coordinators.services[1].runtime,
                             lambda shard: setattr(shard, "bug_end_txn_retry_as_new_transaction", True))
        if "end_txn_behind_parked_add" in self.workload_bugs:
            configure_shards(state.coordinators.services[1].runtime,
                             lambda shard: setattr(shard, "bug_end_txn_behind_parked_add_decided_now", True))
        if "complete_before_markers_written" in self.workload_bugs:
            state.transactions.bug_complete_before_markers_written = True
        if "poll_ignores_changes" in self.workload_bugs:
            state.coordinators.bug_poll_ignores_changes = True
        if "txn_offsets_visible_early" in self.workload_bugs:
            configure_shards(state.coordinators.services[0].runtime,
                             lambda shard: setattr(shard.offsets, "bug_txn_offsets_visible_early", True))

    def _build_clients(self) -> None:
        super()._build_clients()
        configs = {"min.insync.replicas": str(min(MIN_INSYNC_REPLICAS, len(self.node_ids))), "flush.messages": "1",
                   **self.output_topic_configs}
        replication_factor = min(REPLICATION_FACTOR, len(self.node_ids))
        self.output_admins = [TopicCreator(self, CLIENT_ID_BASE + 30 + i, topic, PARTITIONS, replication_factor, configs)
                              for i, topic in enumerate(OUTPUT_TOPICS)]
        versions_rng = self.loop.derive_rng("txn-versions")
        self.transaction_versions = [2 if versions_rng.random() < TV2_SHARE else 1 for _ in PIPELINES]
        self.pipelines = [SimTxnPipeline(self, CLIENT_ID_BASE + 40 + i, name, name, GROUP, TOPIC, PARTITIONS, owned,
                                         self.checkers, version)
                          for i, ((name, owned), version) in enumerate(zip(PIPELINES, self.transaction_versions))]
        for pipeline in self.pipelines:
            pipeline.keyed_outputs = self.keyed_outputs
        self.txn_reader = SimTxnReader(self, CLIENT_ID_BASE + 49, "txn-reader", OUTPUT_TOPICS, PARTITIONS,
                                       self.checkers.observe_output_record)
        self.clients = [*self.clients, *self.output_admins, *self.pipelines, self.txn_reader]
        self._txn_rng = self.loop.derive_rng("txn-faults")
        self._pipelines_down: set[int] = set()

    def _start_clients(self) -> None:
        super()._start_clients()
        for client in (*self.output_admins, self.txn_reader):
            client.start()
        self.loop.call_later(1_000 * US_PER_MS, self._start_pipelines)
        if self._faults_on:
            self.loop.call_later(TXN_FAULT_STEP_MS * US_PER_MS, self._txn_fault_step)

    def _start_pipelines(self) -> None:
        if not all(admin.created for admin in self.output_admins):
            self.loop.call_later(200 * US_PER_MS, self._start_pipelines)
            return
        for pipeline in self.pipelines:
            if not pipeline.running or pipeline.state == "find_txn":
                pipeline.start()

    # --- the pipelines' faults -------------------------------------------------------------------------------

    def _txn_fault_step(self) -> None:
        if not self._fault_phase:
            return
        rng = self._txn_rng
        for kind, rate in TXN_FAULT_RATES.items():
            if rng.random() < rate:
                candidates = [i for i, p in enumerate(self.pipelines) if p.running and not p.paused]
                if candidates:
                    self._pipeline_fault(kind, rng.choice(candidates))
        self.loop.call_later(TXN_FAULT_STEP_MS * US_PER_MS, self._txn_fault_step)

    def _pipeline_fault(self, kind: str, index: int) -> None:
        pipeline = self.pipelines[index]
        down_us = self._txn_rng.randint(PIPELINE_DOWN_MS_MIN, PIPELINE_DOWN_MS_MAX) * US_PER_MS
        if kind == "pause":
            pipeline.pause()
            self.loop.call_later(down_us, self._resume_pipeline, index)
            return
        pipeline.crash()
        self._pipelines_down.add(index)
        self.loop.call_later(down_us, self._restart_pipeline, index)

    def end_txn_sent(self, pipeline: SimTxnPipeline, coordinator: int) -> None:
        """A pipeline sent EndTxn to `coordinator` (called by SimTxnPipeline)."""
        if not self._faults_on or not self._fault_phase or self._txn_rng.random() >= KILL_COORDINATOR_AT_END_TXN_RATE:
            return
        if any(not self.is_up(n) for n in self.node_ids):
            return  # one node down at a time for this fault: the others keep the quorum and the ISR
        delay_us = self._txn_rng.randint(0, KILL_DELAY_US_MAX)
        with_pipeline = self._txn_rng.random() < KILL_PIPELINE_TOO_SHARE
        self.loop.call_later(delay_us, self._kill_coordinator, coordinator,
                             self.pipelines.index(pipeline) if with_pipeline else None)

    def _kill_coordinator(self, node_id: int, pipeline_index: int | None) -> None:
        if not self._fault_phase or not self.is_up(node_id):
            return
        self.extra_fault_counts["kill_coordinator_at_end_txn"] = self.extra_fault_counts.get(
            "kill_coordinator_at_end_txn", 0) + 1
        self.trace("fault.kill_coordinator_at_end_txn", node_id, "-" if pipeline_index is None else pipeline_index)
        self.crash(node_id)
        self._restart_later(node_id)
        if pipeline_index is not None and self.pipelines[pipeline_index].running:
            self._pipeline_fault("crash", pipeline_index)

    def _resume_pipeline(self, index: int) -> None:
        if self.pipelines[index].paused:
            self.pipelines[index].resume()

    def _restart_pipeline(self, index: int) -> None:
        if index in self._pipelines_down:
            self._pipelines_down.discard(index)
            self.pipelines[index].restart()

    def _heal_everything(self) -> None:
        super()._heal_everything()
        for index, pipeline in enumerate(self.pipelines):
            if pipeline.paused:
                pipeline.resume()
            if index in self._pipelines_down:
                self._pipelines_down.discard(index)
                pipeline.restart()

    # --- convergence and final checks ------------------------------------------------------------------------

    def _lagging(self) -> str | None:
        lagging = super()._lagging()
        if lagging is not None:
            return lagging
        for pipeline in self.pipelines:
            if not pipeline.running or not pipeline.idle():
                return f"pipeline {pipeline.name} in state {pipeline.state}, committed {pipeline.committed}, " \
                       f"input end {pipeline.input_end}"
        ends = {}
        for topic in OUTPUT_TOPICS:
            for partition in range(PARTITIONS):
                lagging = self._replicas_lagging(topic, partition)
                if lagging is not None:
                    return lagging
                ends[(topic, partition)] = self._leader_replica(topic, partition).log_end_offset
        return self.txn_reader.caught_up(ends)

    def _final_checks(self) -> None:
        super()._final_checks()
        self.checkers.check_final_transactions(self._committed_view(), self._committed_inputs(), OUTPUT_TOPICS)

    def _committed_view(self) -> dict[tuple[str, int], list[tuple[int, bytes]]]:
        """The committed records of each output partition, from its leader's log: an independent oracle of
        read_committed (data of a producer held until its COMMIT marker, dropped at its ABORT marker)."""
        view = {}
        for topic in OUTPUT_TOPICS:
            for partition in range(PARTITIONS):
                replica = self._leader_replica(topic, partition)
                committed: list[tuple[int, bytes]] = []
                open_txns: dict[int, list[tuple[int, bytes]]] = {}
                batches = log_batches(replica.log, replica.log.log_start_offset, replica.log.log_end_offset) \
                    if replica is not None else ()
                for header, data in batches:
                    batch = decode_batch(data)
                    if header.is_control:
                        if batch.records:  # (a control batch the cleaner emptied decides nothing any more)
                            kind, _ = parse_control_record(batch.records[0])
                            done = open_txns.pop(header.producer_id, [])
                            if kind == COMMIT:
                                committed += done
                    elif header.is_transactional:
                        open_txns.setdefault(header.producer_id, []).extend(
                            (r.offset, bytes(r.value or b"")) for r in batch.records)
                    else:
                        committed += [(r.offset, bytes(r.value or b"")) for r in batch.records]
                view[(topic, partition)] = sorted(committed)
        return view

    def _committed_inputs(self) -> dict[int, int]:
        """The group's committed input offsets, read from the shard that coordinates it now."""
        shard_partition = partition_for_key(GROUP, INTERNAL_PARTITIONS)
        for process in self.processes.values():
            shard = process.state.coordinators.services[0].runtime.shard(shard_partition)
            if shard is not None:
                offsets = shard.offsets.committed.get(GROUP, {})
                found = {partition: value.offset for (topic, partition), value in offsets.items() if topic == TOPIC}
                return {p: found.get(p, 0) for p in range(PARTITIONS)}
        return {p: 0 for p in range(PARTITIONS)}

    def _result(self) -> RunResult:
        result = super()._result()
        result.stats.update({
            "txn_committed": sum(p.committed_txns for p in self.pipelines),
            "txn_aborted": sum(p.aborted_txns for p in self.pipelines),
            "txn_fenced": len(self.checkers.fenced_keys),
            "txn_reader_records": self.txn_reader.records,
            "producer_inits": self.checkers.inits,
            "txn_tv2_pipelines": sum(version >= 2 for version in self.transaction_versions),
        })
        return result


def run(config: RunConfig) -> RunResult:
    """One transactions simulation of `config` (see the module docstring). Raises ValueError for an unknown bug."""
    return cluster_sim.run(config, simulation_class=TransactionsSimulation)
