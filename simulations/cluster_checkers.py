"""Checkers of the whole-cluster simulation: observations from outside the node processes, and verdicts.

Theory of operation. The simulation reports what it sees while it runs (a replica's high watermark and
leadership after every node step, committed metadata entries, Raft leadership, acknowledgements, records a
consumer read) and, after the liveness phase, the converged replica logs. Each checker keeps the first
violation it finds, with the values that show it. Nothing here changes the run: a checker only reads, so
adding one never moves a trace hash.

Checkers (names are the verdict names):
- acked_not_lost: every record acknowledged under acks=all (error NONE; min ISR was satisfied, or the
  broker would have answered NOT_ENOUGH_REPLICAS) is, at the end, at its acknowledged offset with its value;
  and a consumer never read another value at an acknowledged offset.
- reads_committed: a consumer never reads at or above the high watermark its fetch response reports, and
  everything it read is, at the end, in the log at the offset it was read from (data read below the HW is
  committed: it is never truncated away).
- offsets_dense: a consumer reads offsets 0, 1, 2 ... of a partition without gaps; a converged log's batches
  are contiguous from its log start offset.
- replicas_identical: below the smallest high watermark of its replicas, every replica holds the same
  batches (base offset, last offset, leader epoch, CRC).
- hw_monotonic: within one process lifetime and leader epoch, a leader's high watermark never moves back
  (a follower's moving back is a counted statistic, see `observe_replica`).
- one_leader_per_epoch: no two brokers lead the same partition in the same leader epoch.
- one_raft_leader_per_term: no two nodes lead the metadata quorum in the same Raft term.
- metadata_identical: every node replays the same metadata records at the same Raft index.
- live_brokers_kept: the controller fences no broker registration of a running process (its current broker epoch)
  that no fault has touched for longer than its session (broker_session_timeout_ms) and a margin: not down, not
  paused, and no fault begun or ended on it or on the network (which touches every node) in that time. (The
  registration of a crashed incarnation is fenced once its session runs out, before its restarted process may
  register again: that is no live broker.) A controller's failover gives every broker a
  fresh session, and a live broker's heartbeats reach the new controller well within it; a broker fenced anyway
  leaves every ISR, and partitions whose ISR it leaves to an unreachable node go offline.
- answers_in_order: every answer a client gets on a connection is to its oldest request on that connection
  still owed one, as a broker answers each connection in request order (net/server.py) and Kafka's clients
  require (reported by simulations/kafka_clients.py).
- liveness: after every fault heals, within a bound, every acknowledged record is readable and the
  replicas converge (recorded by the simulation).
- no_node_error: no core raised out of a step (an assertion is a bug, reported with where it was raised).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable

from metadata.records import BrokerRegistrationChangeRecord, decode_record

from simulations.run import CheckerVerdict

CHECKER_NAMES = (
    "acked_not_lost",
    "reads_committed",
    "offsets_dense",
    "replicas_identical",
    "hw_monotonic",
    "one_leader_per_epoch",
    "one_raft_leader_per_term",
    "metadata_identical",
    "live_brokers_kept",
    "answers_in_order",
)

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class BatchSummary:
    """What identifies a batch across replicas (its offsets and epoch are outside the CRC, so all four)."""

    base_offset: int
    last_offset: int
    leader_epoch: int
    crc: int


@dataclass
class ReplicaLog:
    """One replica's converged state at the end of a run."""

    node_id: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    batches: list[BatchSummary]
    values: dict[int, bytes]  # offset -> record value


class ClusterCheckers:
    """Observations and first violations of one run (see the module docstring)."""

    # A workload's own checkers (simulations/quota_sim.py and the others): `violate` takes them too, and
    # `verdicts` reports them after the cluster's, before liveness and node errors.
    extra_checker_names: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.violations: dict[str, str] = {}
        self.acked: dict[TopicPartition, dict[int, bytes]] = {}  # acks=all acknowledgements
        self.consumed: dict[TopicPartition, dict[int, bytes]] = {}
        self.consumer_next_offset: dict[TopicPartition, int] = {}
        self.high_watermarks: dict[tuple[int, int, TopicPartition, int], int] = {}  # (node, incarnation, tp, epoch)
        self.follower_high_watermarks: dict[tuple[int, int, TopicPartition], int] = {}
        self.follower_hw_regressions = 0
        self.leader_of_epoch: dict[tuple[TopicPartition, int], int] = {}
        self.raft_leader_of_term: dict[int, int] = {}
        self.metadata_at_index: dict[int, tuple[str, int]] = {}  # raft index -> (records digest, first node)
        self.liveness_ok = False
        self.liveness_detail = "not checked"
        # Set by the simulation: why fencing (broker id, broker epoch) now is not explained by faults (None: it is).
        self.unexplained_fence: Callable[[int, int], str | None] | None = None

    def violate(self, checker: str, detail: str) -> None:
        assert checker in CHECKER_NAMES or checker in self.extra_checker_names, f"unknown checker {checker}"
        self.violations.setdefault(checker, detail)

    # --- during the run ---------------------------------------------------------------------------------

    def observe_ack(self, key: TopicPartition, offset: int, value: bytes) -> None:
        """A record acknowledged under acks=all at `offset`."""
        acked = self.acked.setdefault(key, {})
        known = acked.get(offset)
        if known is not None and known != value:
            self.violate("acked_not_lost", f"{_tp(key)} offset {offset} acknowledged for {value!r}, "
                                           f"earlier for {known!r}: the first acknowledged write was lost")
        acked[offset] = value
        read = self.consumed.get(key, {}).get(offset)
        if read is not None and read != value:
            self.violate("acked_not_lost", f"{_tp(key)} offset {offset} acknowledged for {value!r} "
                                           f"but a consumer read {read!r} there")

    def observe_consumed(self, key: TopicPartition, offset: int, value: bytes, high_watermark: int) -> None:
        """A consumer read `value` at `offset`, from a fetch response reporting `high_watermark`."""
        if offset >= high_watermark:
            self.violate("reads_committed", f"{_tp(key)} consumer read offset {offset} at or above the "
                                            f"high watermark {high_watermark} of the same response")
        expected = self.consumer_next_offset.get(key, 0)
        if offset != expected:
            self.violate("offsets_dense", f"{_tp(key)} consumer read offset {offset}, expected {expected}")
        self.consumer_next_offset[key] = offset + 1
        consumed = self.consumed.setdefault(key, {})
        known = consumed.get(offset)
        if known is not None and known != value:
            self.violate("reads_committed", f"{_tp(key)} offset {offset} read as {known!r} and later as {value!r}")
        consumed[offset] = value
        acked = self.acked.get(key, {}).get(offset)
        if acked is not None and acked != value:
            self.violate("acked_not_lost", f"{_tp(key)} offset {offset} acknowledged for {acked!r} "
                                           f"but a consumer read {value!r} there")

    def observe_replica(self, node_id: int, incarnation: int, key: TopicPartition, high_watermark: int,
                        is_leader: bool, leader_epoch: int, topic_id: bytes = b"") -> None:
        """A replica's state after a node step. The leader's high watermark (the one acks=all and consumers
        depend on) must not move back within a process lifetime and leader epoch; a follower's moving back
        is counted (`follower_hw_regressions`): Kafka's follower only ever raises it (maybeUpdateHighWatermark).
        A topic deleted and created again under its name is another topic (`topic_id`): its epochs start over."""
        if is_leader:
            hw_key = (node_id, incarnation, key, topic_id, leader_epoch)
            previous = self.high_watermarks.get(hw_key)
            if previous is not None and high_watermark < previous:
                self.violate("hw_monotonic", f"node {node_id} (incarnation {incarnation}) leading {_tp(key)} in "
                                             f"epoch {leader_epoch}: high watermark went from {previous} back to "
                                             f"{high_watermark}")
            self.high_watermarks[hw_key] = high_watermark
            leader = self.leader_of_epoch.setdefault((key, topic_id, leader_epoch), node_id)
            if leader != node_id:
                self.violate("one_leader_per_epoch", f"{_tp(key)} leader epoch {leader_epoch} led by nodes "
                                                     f"{leader} and {node_id}")
        else:
            follower_key = (node_id, incarnation, key, topic_id)
            previous = self.follower_high_watermarks.get(follower_key)
            if previous is not None and high_watermark < previous:
                self.follower_hw_regressions += 1
            self.follower_high_watermarks[follower_key] = high_watermark

    def observe_raft_leader(self, node_id: int, term: int) -> None:
        leader = self.raft_leader_of_term.setdefault(term, node_id)
        if leader != node_id:
            self.violate("one_raft_leader_per_term", f"nodes {leader} and {node_id} both led Raft term {term}")

    def observe_metadata(self, node_id: int, raft_index: int, encoded_records: list[bytes]) -> None:
        """Metadata records a node replayed for the committed entry at `raft_index`."""
        digest = hashlib.sha256(b"".join(len(r).to_bytes(4, "big") + r for r in encoded_records)).hexdigest()
        if raft_index not in self.metadata_at_index and self.unexplained_fence is not None:
            self._check_fences(raft_index, encoded_records)
        known = self.metadata_at_index.setdefault(raft_index, (digest, node_id))
        if known[0] != digest:
            self.violate("metadata_identical", f"node {node_id} replayed other records at Raft index {raft_index} "
                                               f"than node {known[1]} ({digest[:12]} != {known[0][:12]})")

    def _check_fences(self, raft_index: int, encoded_records: list[bytes]) -> None:
        """At the first replay of an entry (its commit, as far as the run can tell)."""
        for encoded in encoded_records:
            record = decode_record(encoded)
            if isinstance(record, BrokerRegistrationChangeRecord) and record.fenced is True:
                why = self.unexplained_fence(record.broker_id, record.broker_epoch)
                if why is not None:
                    self.violate("live_brokers_kept", f"broker {record.broker_id} (epoch {record.broker_epoch}) "
                                                      f"fenced at Raft index {raft_index}: {why}")

    # --- at the end -------------------------------------------------------------------------------------

    def check_final_logs(self, logs: dict[TopicPartition, list[ReplicaLog]]) -> None:
        """Compare converged replicas with each other and with what was acknowledged and read."""
        for key in sorted(logs):
            replicas = logs[key]
            for replica in replicas:
                self._check_dense(key, replica)
            self._check_identical(key, replicas)
            reference = max(replicas, key=lambda r: (r.high_watermark, -r.node_id))
            self._check_against(key, reference, self.acked.get(key, {}), "acked_not_lost", "acknowledged")
            self._check_against(key, reference, self.consumed.get(key, {}), "reads_committed", "read")
        for key in sorted(set(self.acked) - set(logs)):
            self.violate("acked_not_lost", f"{_tp(key)} has acknowledged records but no replica at the end")

    def _check_dense(self, key: TopicPartition, replica: ReplicaLog) -> None:
        expected = replica.log_start_offset
        if replica.batches and replica.batches[0].base_offset < expected:
            # DeleteRecords moves the log start offset without removing what its segment still holds: the
            # batches below it stay until the segment goes, as in Kafka
            expected = replica.batches[0].base_offset
        for batch in replica.batches:
            if batch.base_offset != expected:
                self.violate("offsets_dense", f"node {replica.node_id} {_tp(key)} batch at {batch.base_offset}, "
                                              f"expected {expected}")
                return
            expected = batch.last_offset + 1
        if expected != replica.log_end_offset:
            self.violate("offsets_dense", f"node {replica.node_id} {_tp(key)} batches end at {expected}, "
                                          f"log end offset {replica.log_end_offset}")

    def _check_identical(self, key: TopicPartition, replicas: list[ReplicaLog]) -> None:
        common_hw = min(r.high_watermark for r in replicas)
        start = max(r.log_start_offset for r in replicas)
        reference = replicas[0]
        wanted = [b for b in reference.batches if b.base_offset >= start and b.last_offset < common_hw]
        for replica in replicas[1:]:
            have = [b for b in replica.batches if b.base_offset >= start and b.last_offset < common_hw]
            if have != wanted:
                first = next((i for i, (a, b) in enumerate(zip(wanted, have)) if a != b), min(len(wanted), len(have)))
                mine = wanted[first] if first < len(wanted) else None
                theirs = have[first] if first < len(have) else None
                self.violate("replicas_identical", f"{_tp(key)} below high watermark {common_hw}: node "
                                                   f"{reference.node_id} has {mine}, node {replica.node_id} has {theirs}")
                return

    def _check_against(self, key: TopicPartition, reference: ReplicaLog, expected: dict[int, bytes],
                       checker: str, what: str) -> None:
        for offset in sorted(expected):
            held = reference.values.get(offset)
            if held != expected[offset]:
                self.violate(checker, f"{_tp(key)} offset {offset} {what} as {expected[offset]!r}; at the end node "
                                      f"{reference.node_id} holds {held!r} there (high watermark "
                                      f"{reference.high_watermark})")
                return

    def verdicts(self, node_errors: list[str]) -> list[CheckerVerdict]:
        verdicts = [CheckerVerdict(name, name not in self.violations, self.violations.get(name, ""))
                    for name in (*CHECKER_NAMES, *self.extra_checker_names)]
        verdicts.append(CheckerVerdict("liveness", self.liveness_ok, "" if self.liveness_ok else self.liveness_detail))
        verdicts.append(CheckerVerdict("no_node_error", not node_errors, node_errors[0] if node_errors else ""))
        return verdicts


def _tp(key: TopicPartition) -> str:
    return f"{key[0]}-{key[1]}"
