"""Checkers of the transactions simulation, on top of the whole-cluster checkers (simulations/cluster_checkers.py),
from the anomalies Jepsen-style testing found in Kafka-compatible brokers.

The pipelines report each transaction they begin (its key "txn_id|epoch|seq", its input offsets and how many
records it writes to each output partition), and how it ended for them: committed (EndTxn(commit)
answered NONE), aborted (EndTxn(abort) answered NONE) or fenced (a fatal answer made the instance start
over with a new epoch while it was open). The read_committed reader reports every record it read with the
last stable offset of the response, and every LSO it saw. After the run converged, the committed view of the
output topics is computed from the converged leader logs by an independent oracle (data batches of a
producer are held until its COMMIT marker, dropped at its ABORT marker).

- no_aborted_read: the reader never reads a record of a transaction that was aborted, and everything it read
  is, at the end, committed.
- no_torn_transaction: a transaction is committed on every output partition it wrote to, with all its
  records, or on none.
- reads_below_lso: the reader never reads at or above the LSO of the response that carried the record.
- lso_monotonic: a leader's LSO (observed after each node step) never moves back within one process lifetime
  and leader epoch.
- exactly_once: per input partition, the committed outputs of each output topic hold every input offset below
  the group's committed input offset exactly once, and none above it.
- fenced_never_commits: a transaction whose producer was fenced (or that its pipeline saw fail fatally) is
  never committed.
- added_txn_ends: once the coordinator answered a transaction's AddPartitionsToTxn NONE (it is Ongoing, durably),
  its EndTxn is never refused INVALID_TXN_STATE (librdkafka fails fatally on it): it ends, or the producer was
  fenced meanwhile (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH).
"""

from __future__ import annotations

from simulations.cluster_checkers import ClusterCheckers, TopicPartition

TXN_CHECKER_NAMES = ("no_aborted_read", "no_torn_transaction", "reads_below_lso", "lso_monotonic", "exactly_once",
                     "fenced_never_commits", "added_txn_ends")


def parse_output(value: bytes) -> tuple[str, int, int]:
    """(transaction key, input partition, input offset) of an output record's value."""
    text = value.decode()
    key, _, source = text.rpartition("|")
    partition, _, offset = source.partition(":")
    return key, int(partition), int(offset)


class TxnCheckers(ClusterCheckers):
    """The cluster's checkers plus the transaction ones (see the module docstring)."""

    extra_checker_names = TXN_CHECKER_NAMES

    def __init__(self) -> None:
        super().__init__()
        self.begun: dict[str, dict[TopicPartition, int]] = {}  # txn key -> output partition -> record count
        self.committed_keys: set[str] = set()
        self.aborted_keys: set[str] = set()
        self.fenced_keys: set[str] = set()
        self.read: dict[TopicPartition, dict[int, bytes]] = {}
        self.lso_seen: dict[tuple, int] = {}
        self.inits = 0


    # --- observations ---------------------------------------------------------------------------------

    def observe_init(self, transactional_id: str, epoch: int) -> None:
        self.inits += 1

    def observe_txn_begin(self, key: str, partition: int, input_offsets: list[int],
                          outputs: dict[TopicPartition, int]) -> None:
        self.begun[key] = dict(outputs)

    def observe_txn_committed(self, key: str) -> None:
        self.committed_keys.add(key)

    def observe_txn_aborted(self, key: str) -> None:
        self.aborted_keys.add(key)

    def observe_txn_fenced(self, key: str) -> None:
        self.fenced_keys.add(key)

    def observe_end_txn_refused(self, key: str, commit: bool) -> None:
        """An EndTxn of a transaction whose partitions the coordinator had added was refused INVALID_TXN_STATE."""
        self.violate("added_txn_ends", f"EndTxn({'commit' if commit else 'abort'}) of transaction {key}, whose "
                                       f"AddPartitionsToTxn was answered NONE, refused INVALID_TXN_STATE")

    def observe_output_record(self, tp: TopicPartition, offset: int, value: bytes, last_stable_offset: int) -> None:
        key, _, _ = parse_output(value)
        if key in self.aborted_keys:
            self.violate("no_aborted_read", f"{tp[0]}-{tp[1]} offset {offset}: read a record of transaction {key}, "
                                            f"which was aborted")
        if offset >= last_stable_offset:
            self.violate("reads_below_lso", f"{tp[0]}-{tp[1]}: read offset {offset} at or above the last stable "
                                            f"offset {last_stable_offset}")
        self.read.setdefault(tp, {})[offset] = value

    def observe_last_stable_offset(self, node_id: int, incarnation: int, tp: TopicPartition, leader_epoch: int,
                                   last_stable_offset: int) -> None:
        """A leader's LSO after a node step: it never moves back within one process lifetime and leader epoch
        (a restarted leader starts again from its checkpointed high watermark, as hw_monotonic allows)."""
        key = (tp, node_id, incarnation, leader_epoch)
        previous = self.lso_seen.get(key, -1)
        if last_stable_offset < previous:
            self.violate("lso_monotonic", f"{tp[0]}-{tp[1]} leader {node_id} (incarnation {incarnation}) epoch "
                                          f"{leader_epoch}: LSO went from {previous} back to {last_stable_offset}")
        self.lso_seen[key] = max(previous, last_stable_offset)

    # --- final checks ---------------------------------------------------------------------------------

    def check_final_transactions(self, committed_view: dict[TopicPartition, list[tuple[int, bytes]]],
                                 committed_inputs: dict[int, int], output_topics: tuple[str, ...]) -> None:
        """`committed_view`: the committed records of each output partition (offset, value), from the oracle;
        `committed_inputs`: the group's committed input offset per input partition."""
        per_txn: dict[str, dict[TopicPartition, int]] = {}
        inputs: dict[tuple[str, int], list[int]] = {}  # (output topic, input partition) -> input offsets
        for tp, records in sorted(committed_view.items()):
            for offset, value in records:
                key, partition, input_offset = parse_output(value)
                counts = per_txn.setdefault(key, {})
                counts[tp] = counts.get(tp, 0) + 1
                inputs.setdefault((tp[0], partition), []).append(input_offset)
        for key, counts in sorted(per_txn.items()):
            if key in self.aborted_keys:
                self.violate("no_aborted_read", f"transaction {key} was aborted but is committed in {sorted(counts)}")
            if key in self.fenced_keys:
                self.violate("fenced_never_commits", f"transaction {key} failed fatally for its producer but is "
                                                     f"committed in {sorted(counts)}")
            expected = self.begun.get(key)
            if expected is not None and counts != expected:
                self.violate("no_torn_transaction", f"transaction {key} committed {counts}, it wrote {expected}")
        for key in sorted(self.committed_keys):
            if key not in per_txn and self.begun.get(key):
                self.violate("no_torn_transaction", f"transaction {key} was acknowledged committed but none of its "
                                                    f"records is committed")
        committed_values = {tp: dict(records) for tp, records in committed_view.items()}
        for tp, read in sorted(self.read.items()):
            for offset, value in sorted(read.items()):
                if committed_values.get(tp, {}).get(offset) != value:
                    self.violate("no_aborted_read", f"{tp[0]}-{tp[1]} offset {offset}: the reader read {value!r}, "
                                                    f"which is not committed at the end")
                    break
        for topic in output_topics:
            for partition, end in sorted(committed_inputs.items()):
                offsets = sorted(inputs.get((topic, partition), []))
                if offsets != list(range(end)):
                    duplicates = sorted({o for o in offsets if offsets.count(o) > 1})[:3]
                    missing = sorted(set(range(end)) - set(offsets))[:3]
                    beyond = sorted(o for o in offsets if o >= end)[:3]
                    self.violate("exactly_once", f"{topic} from input partition {partition} (committed input "
                                                 f"offset {end}): duplicates {duplicates}, missing {missing}, "
                                                 f"beyond the committed input {beyond}")

