"""The compaction workload: the whole-cluster simulation over a compacted topic, whose log cleaner
(partitions/cleaner.py) runs on every replica while nodes crash, lose power and are cut off.

Theory of operation. Everything of the cluster workload (simulations/cluster_sim.py: three real nodes, an
acks=all and an acks=1 producer, a reader, every node and network fault) runs as it does there, with these
changes:
- the topic is compacted: cleanup.policy=compact, segments of `SEGMENT_BYTES` (they roll every few dozen
  batches), delete.retention.ms `DELETE_RETENTION_MS`, min.compaction.lag.ms `MIN_COMPACTION_LAG_MS`, and a
  min.cleanable.dirty.ratio drawn per seed; the brokers look for work every `CLEANUP_INTERVAL_MS`
  (log_retention_check_interval_ms) and read `CLEANER_STEP_BYTES` per tick (log_cleaner_step_bytes), so a
  pass runs over several ticks with appends, crashes, truncations and leadership changes between its steps. Each replica compacts its own log, as in Kafka, so replicas hold different
  batches below the high watermark and `replicas_identical` and `offsets_dense` do not apply here;
- both producers are keyed, half their records over `HOT_KEYS` keys and half over `COLD_KEYS` (a cold key's
  last record stays its last for seconds), and `TOMBSTONE_SHARE` of their records are tombstones (a null
  value);
- the reader reads as a consumer does over a compacted log (its position moves past a batch's last offset,
  empty batches and removed records included), and during the fault phase it goes back to offset 0 every
  `REREAD_MS`, as a consumer rebuilding its state from the topic does: it reads cleaned segments too.

Ground truth. After every event the simulation reads what moved in the replicas of the topic (never through the
fault that corrupts served reads):
- a leader's high watermark moving from a to b: the records at [a, b) of its log are committed
  (`CompactionCheckers.observe_committed`); two different records committed at one offset are a violation.
  The cleaner's range ends at the last stable offset, so a record is read here before any cleaner may remove
  it, but for one case: a high watermark that moves in the same event as a cleaning pass over a segment older
  than min.compaction.lag.ms, which can remove superseded records before they are read (the latest record of
  every key is never removed, so the checks below lose nothing they rely on);
- a follower's log end moving from a to b: the records it received at [a, b) (`observe_received`).

Checkers (the cluster's, but replicas_identical and offsets_dense, plus):
- records_genuine: every record a replica holds or receives, or the reader reads, at a committed offset is the
  record committed there (the cleaner never changes a record's offset, key or value);
- latest_value_kept: at the end, every replica holds the last committed record of each key whose last record
  is a value (compaction keeps the latest value of every key);
- tombstones_respected: at the end, a replica that holds an older record of a key whose last committed record
  is a tombstone also holds the tombstone (a deleted key never comes back). In Kafka a replica behind by more
  than delete.retention.ms may fetch past a removed tombstone and keep the older value; here the cleaner keeps
  tombstones while a replica is out of the ISR (partitions/cleaner.py), so no replica is excused;
- tombstone_horizon_kept: a follower never receives a range without a committed tombstone in it while the
  tombstone is younger than delete.retention.ms (a replica or reader that is behind by less than that sees every
  delete). A follower may receive a range without an older one (`tombstones_skipped_late` counts them): one
  that had no older record of the key, as tombstones_respected checks;
- offsets_increasing: the records of a replica's log, and those the reader reads between two rewinds, come in
  strictly increasing offsets;
- acked_not_lost: every record acknowledged under acks=all is the record committed at its offset.
Liveness is the cluster's: every replica converges and the reader reaches every high watermark.

Planted bugs (`--bugs`): "tombstone_ignores_horizon" (a tombstone goes in the first pass that may remove it,
without waiting for delete.retention.ms: followers and readers that are behind miss the delete),
"cleaned_segment_unsynced" (a cleaned segment is swapped in without being fsynced: a power loss empties it,
and the latest values it held are gone), "cleaner_past_lso" (a replica cleans up to its active segment
whatever its last stable offset: records above the high watermark supersede committed ones, then are truncated
away when the replica follows a new leader) and "cleaner_ignores_isr" (tombstones go past their horizon while a
replica is out of the ISR: one that held an older value and fetches past the removed tombstone keeps the key).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

from partitions.murmur2 import murmur2
from partitions.records import decode_batch
from simulations import cluster_sim
from simulations.cluster_checkers import ClusterCheckers, TopicPartition
from simulations.cluster_sim import CLIENT_ID_BASE, MIN_INSYNC_REPLICAS, PARTITIONS, TOPIC, ClusterSimulation, \
    log_batches
from simulations.kafka_clients import SimConsumer, SimProducer, TopicCreator
from simulations.loop import US_PER_MS
from simulations.run import CheckerVerdict, RunConfig, RunResult

DESCRIPTION = "the whole cluster over a compacted topic (keyed records, tombstones) with the log cleaner on every replica"
SEGMENT_BYTES = 2_048
DELETE_RETENTION_MS = 5_000
MIN_COMPACTION_LAG_MS = 500
CLEANUP_INTERVAL_MS = 1_000
CLEANER_STEP_BYTES = 8 * 1024  # per broker tick: a pass spans ticks, with appends, faults and truncations between
DIRTY_RATIO_CHOICES = ("0.0", "0.1", "0.5")
TOMBSTONE_SHARE = 0.1
HOT_KEYS = 16
COLD_KEYS = 1_000
REREAD_MS = 7_000
# bug -> where it is planted (partitions/cleaner.py CLEANER_BUGS, or the broker's call of the cleaner); all go
# to BrokerCore.bug_cleaner
COMPACTION_BUGS = {"tombstone_ignores_horizon": "cleaner", "cleaned_segment_unsynced": "cleaner",
                   "cleaner_past_lso": "broker", "cleaner_ignores_isr": "cleaner"}
# The cluster's checkers that assume replicas hold the same batches and every offset: not for a compacted log.
NOT_FOR_COMPACTED = ("replicas_identical", "offsets_dense")

Record = tuple[bytes | None, bytes | None]  # (key, value); a None value is a tombstone


@dataclass
class _Committed:
    key: bytes | None
    value: bytes | None
    at_ms: int  # when the simulation saw it committed (no cleaning pass may remove it before)


class CompactionCheckers(ClusterCheckers):
    """The checkers of a compacted topic (see the module docstring)."""

    extra_checker_names = ("records_genuine", "latest_value_kept", "tombstones_respected", "tombstone_horizon_kept",
                           "offsets_increasing")

    def __init__(self) -> None:
        super().__init__()
        self.committed: dict[TopicPartition, dict[int, _Committed]] = {}
        self.tombstone_offsets: dict[TopicPartition, list[int]] = {}  # sorted
        # per partition, key -> the offset of its last committed record
        self.last_offset_of_key: dict[TopicPartition, dict[bytes | None, int]] = {}
        self.acked_values: dict[TopicPartition, dict[int, bytes | None]] = {}
        self.reader_last: dict[TopicPartition, int] = {}
        self.records_checked = 0
        self.tombstones_skipped_late = 0

    # --- during the run -------------------------------------------------------------------------------------

    def observe_committed(self, node_id: int, key: TopicPartition, offset: int, record: Record, now_ms: int) -> None:
        """Leader `node_id`'s high watermark passed `offset`, where it holds `record`."""
        committed = self.committed.setdefault(key, {})
        known = committed.get(offset)
        if known is None:
            committed[offset] = _Committed(record[0], record[1], now_ms)
            last = self.last_offset_of_key.setdefault(key, {})
            last[record[0]] = max(offset, last.get(record[0], -1))
            if record[1] is None:
                bisect.insort(self.tombstone_offsets.setdefault(key, []), offset)
            acked = self.acked_values.get(key, {}).get(offset, record[1])
            if acked != record[1]:
                self.violate("acked_not_lost", f"{_tp(key)} offset {offset} acknowledged for {acked!r}, committed "
                                               f"as {record[1]!r} (leader {node_id})")
        elif (known.key, known.value) != record:
            self.violate("records_genuine", f"{_tp(key)} offset {offset} committed as {_show(known)} and, by "
                                            f"leader {node_id}, as {_show_record(record)}")

    def observe_received(self, node_id: int, key: TopicPartition, start: int, end: int, records: dict[int, Record],
                         now_ms: int) -> None:
        """Follower `node_id` holds `records` at [start, end) of the partition, newly appended and below its high
        watermark."""
        self._check_genuine(key, records, f"follower {node_id} received")
        tombstones = self.tombstone_offsets.get(key, [])
        committed = self.committed.get(key, {})
        last_offset_of_key = self.last_offset_of_key.get(key, {})
        for index in range(bisect.bisect_left(tombstones, start), bisect.bisect_left(tombstones, end)):
            offset = tombstones[index]
            if offset in records:
                continue
            tombstone = committed[offset]
            if last_offset_of_key[tombstone.key] > offset:
                continue  # a later record of its key supersedes it: any pass may remove it at once
            age_ms = now_ms - tombstone.at_ms
            if age_ms < DELETE_RETENTION_MS:
                self.violate("tombstone_horizon_kept", f"{_tp(key)} follower {node_id} received [{start}, {end}) "
                                                       f"without the tombstone of {tombstone.key!r} at {offset}, "
                                                       f"committed {age_ms} ms before (delete.retention.ms "
                                                       f"{DELETE_RETENTION_MS})")
            else:
                self.tombstones_skipped_late += 1

    def observe_ack(self, key: TopicPartition, offset: int, value: bytes | None) -> None:
        self.acked_values.setdefault(key, {})[offset] = value
        known = self.committed.get(key, {}).get(offset)
        if known is not None and known.value != value:
            self.violate("acked_not_lost", f"{_tp(key)} offset {offset} acknowledged for {value!r}, committed as "
                                           f"{known.value!r}")

    def observe_read(self, key: TopicPartition, offset: int, record: Record, high_watermark: int) -> None:
        if offset >= high_watermark:
            self.violate("reads_committed", f"{_tp(key)} reader read offset {offset} at or above the high watermark "
                                            f"{high_watermark} of the same response")
        last = self.reader_last.get(key, -1)
        if offset <= last:
            self.violate("offsets_increasing", f"{_tp(key)} reader read offset {offset} after {last}")
        self.reader_last[key] = offset
        self._check_genuine(key, {offset: record}, "the reader read")

    def reader_rewound(self) -> None:
        self.reader_last.clear()

    def _check_genuine(self, key: TopicPartition, records: dict[int, Record], who: str) -> None:
        committed = self.committed.get(key, {})
        for offset, record in records.items():
            known = committed.get(offset)
            if known is None:
                continue  # not committed yet (above the high watermark) or removed before it was read
            self.records_checked += 1
            if (known.key, known.value) != record:
                self.violate("records_genuine", f"{_tp(key)} {who} {_show_record(record)} at offset {offset}, "
                                                f"committed there as {_show(known)}")

    # --- at the end -----------------------------------------------------------------------------------------

    def check_compacted_logs(self, logs: dict[TopicPartition, list[tuple[int, int, list[tuple[int, Record]]]]]
                             ) -> None:
        """`logs`: per partition, (node, high watermark, its records in log order) of every replica."""
        for key in sorted(logs):
            committed = self.committed.get(key, {})
            for node_id, high_watermark, records in logs[key]:
                offsets = [offset for offset, _ in records]
                if any(b <= a for a, b in zip(offsets, offsets[1:])):
                    first = next(b for a, b in zip(offsets, offsets[1:]) if b <= a)
                    self.violate("offsets_increasing", f"node {node_id} {_tp(key)} holds offset {first} out of order")
                below = {offset: record for offset, record in records if offset < high_watermark}
                self._check_genuine(key, below, f"node {node_id} holds")
                latest: dict[bytes | None, int] = {}  # key -> the last committed offset of it below the HW
                for offset in sorted(o for o in committed if o < high_watermark):
                    latest[committed[offset].key] = offset
                held_latest: dict[bytes | None, int] = {}
                for offset, record in below.items():
                    held_latest[record[0]] = max(offset, held_latest.get(record[0], -1))
                for record_key, offset in sorted(latest.items(), key=lambda item: item[1]):
                    if committed[offset].value is not None:
                        if offset not in below:
                            self.violate("latest_value_kept", f"node {node_id} {_tp(key)} lacks the last record of "
                                                              f"{record_key!r}, {committed[offset].value!r} at {offset}")
                    elif held_latest.get(record_key, offset) < offset:
                        held = held_latest[record_key]
                        self.violate("tombstones_respected", f"node {node_id} {_tp(key)} holds {below[held][1]!r} of "
                                                             f"{record_key!r} at {held} but not its tombstone at "
                                                             f"{offset}")

    def verdicts(self, node_errors: list[str]) -> list[CheckerVerdict]:
        return [v for v in super().verdicts(node_errors) if v.name not in NOT_FOR_COMPACTED]


class TombstoneProducer(SimProducer):
    """A keyed producer over `HOT_KEYS` keys written often and `COLD_KEYS` written seldom (half the records
    each), `TOMBSTONE_SHARE` of its records tombstones: a cold key's last record stays its last for seconds,
    long enough for cleaning passes and lagging followers to meet it."""

    def __init__(self, host: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(host, *args, **kwargs)
        self._compaction_rng = host.loop.derive_rng(f"compaction-producer-{self.client_id}")
        self._keys = [(key, (murmur2(key) & 0x7FFFFFFF) % self.partitions)
                      for key in (f"k{index}".encode() for index in range(HOT_KEYS + COLD_KEYS))]

    def _key_index(self) -> int:
        rng = self._compaction_rng
        return rng.randrange(HOT_KEYS) if rng.random() < 0.5 else HOT_KEYS + rng.randrange(COLD_KEYS)

    def _next_value(self) -> bytes | None:
        value = super()._next_value()
        return None if self._compaction_rng.random() < TOMBSTONE_SHARE else value


class CompactedTopicReader(SimConsumer):
    """Reads as a consumer of a compacted topic does: the position moves past each batch's last offset, so
    empty batches and removed records are stepped over. `rewind()` starts it over from offset 0."""

    def __init__(self, host: Any, client_id: int, name: str, checkers: CompactionCheckers) -> None:
        super().__init__(host, client_id, name, TOPIC, PARTITIONS, lambda *_: None)
        self.checkers = checkers
        self.past_batch_ends = True
        self.rewinds = 0

    def rewind(self) -> None:
        for state in self.state.values():
            state.position = 0
            state.last_epoch = -1
        self.rewinds += 1
        self.checkers.reader_rewound()
        self.host.trace("client.rewind", self.name)

    def _report(self, key: TopicPartition, record: Any, high_watermark: int) -> None:
        value = None if record.value is None else bytes(record.value)
        self.checkers.observe_read(key, record.offset, (bytes(record.key or b""), value), high_watermark)


class CompactionSimulation(ClusterSimulation):
    """The cluster simulation over a compacted topic (see the module docstring)."""

    checkers_class = CompactionCheckers
    extra_bugs = COMPACTION_BUGS
    idle_phase_ms = 0
    broker_settings_extra = {"log_retention_check_interval_ms": CLEANUP_INTERVAL_MS,
                             "log_cleaner_step_bytes": CLEANER_STEP_BYTES}

    def configure_node(self, state: Any) -> None:
        if self.workload_bugs and state.broker is not None:
            state.broker.bug_cleaner = frozenset(self.workload_bugs)

    def _build_clients(self) -> None:
        replication_factor = min(self.replication_factor, len(self.node_ids))
        dirty_ratio = self.loop.derive_rng("compaction").choice(DIRTY_RATIO_CHOICES)
        self.trace("compaction", dirty_ratio)
        configs = {"min.insync.replicas": str(min(MIN_INSYNC_REPLICAS, replication_factor)), "flush.messages": "1",
                   "cleanup.policy": "compact", "segment.bytes": str(SEGMENT_BYTES),
                   "delete.retention.ms": str(DELETE_RETENTION_MS),
                   "min.compaction.lag.ms": str(MIN_COMPACTION_LAG_MS), "min.cleanable.dirty.ratio": dirty_ratio}
        self.admin = TopicCreator(self, CLIENT_ID_BASE, TOPIC, PARTITIONS, replication_factor, configs)
        self.producers = [
            TombstoneProducer(self, CLIENT_ID_BASE + 1, "all", TOPIC, PARTITIONS, -1, True, self.shape.records_per_s,
                              self.checkers.observe_ack),
            TombstoneProducer(self, CLIENT_ID_BASE + 2, "one", TOPIC, PARTITIONS, 1, True, self.shape.records_per_s,
                              lambda key, offset, value: None),
        ][: self.shape.producers]
        self.consumer = CompactedTopicReader(self, CLIENT_ID_BASE + 9, "reader", self.checkers)
        self.clients = [self.admin, *self.producers, self.consumer]
        self._seen_end: dict[tuple[int, int, int], int] = {}  # (node, incarnation, partition) -> read up to
        self._seen_hw: dict[tuple[int, int, int, int], int] = {}  # (node, incarnation, partition, epoch) -> HW
        chained = self.loop.observer
        self.loop.observer = self._observe_logs if chained is None else (
            lambda now_us: (chained(now_us), self._observe_logs(now_us)))

    def _start_clients(self) -> None:
        super()._start_clients()
        rewind_during_faults(self, self.consumer)

    # --- ground truth ---------------------------------------------------------------------------------------

    def _observe_logs(self, now_us: int) -> None:
        now_ms = now_us // US_PER_MS
        checkers = self.checkers
        for node_id, process in self.processes.items():
            partitions = process.broker.partitions
            for partition in range(PARTITIONS):
                hosted = partitions.get((TOPIC, partition))
                if hosted is None:
                    continue
                log, replica = hosted.log, hosted.replica
                mark = (node_id, process.incarnation, partition)
                key = (TOPIC, partition)
                high_watermark = replica.high_watermark
                if replica.is_leader:
                    hw_mark = (*mark, replica.leader_epoch)
                    seen_hw = self._seen_hw.setdefault(hw_mark, high_watermark)
                    if high_watermark > seen_hw:
                        self._seen_hw[hw_mark] = high_watermark
                        for offset, record in _records(log, seen_hw, high_watermark).items():
                            checkers.observe_committed(node_id, key, offset, record, now_ms)
                # A follower: what it holds below its high watermark, read once. Above it, it may hold what a
                # deposed leader served it (a follower with stale metadata), which it truncates later.
                upto = min(log.log_end_offset, high_watermark)
                seen = self._seen_end.get(mark)
                self._seen_end[mark] = upto
                if seen is not None and upto > seen and not replica.is_leader:
                    checkers.observe_received(node_id, key, seen, upto, _records(log, seen, upto), now_ms)

    # --- the end --------------------------------------------------------------------------------------------

    def _final_checks(self) -> None:
        logs: dict[TopicPartition, list[tuple[int, int, list[tuple[int, Record]]]]] = {}
        for node_id, process in sorted(self.processes.items()):
            for partition in range(PARTITIONS):
                hosted = process.broker.partitions.get((TOPIC, partition))
                if hosted is None:
                    continue
                log = hosted.log
                records = sorted(_records(log, log.log_start_offset, log.log_end_offset).items())
                logs.setdefault((TOPIC, partition), []).append((node_id, hosted.replica.high_watermark, records))
        self.checkers.check_compacted_logs(logs)

    def _result(self) -> RunResult:
        result = super()._result()
        cleaned = [hosted.log for process in self.processes.values()
                   for (topic, _), hosted in process.broker.partitions.items() if topic == TOPIC]
        result.stats.update({
            "records_checked": self.checkers.records_checked,
            "committed_offsets": sum(len(c) for c in self.checkers.committed.values()),
            "tombstones_skipped_late": self.checkers.tombstones_skipped_late,
            "rewinds": self.consumer.rewinds,
            "final_records": sum(len(_records(log, log.log_start_offset, log.log_end_offset)) for log in cleaned),
        })
        return result


def rewind_during_faults(sim: ClusterSimulation, reader: Any) -> None:
    """`reader.rewind()` every REREAD_MS while the fault phase of `sim` lasts (a consumer rebuilding its state
    from offset 0, over what the cleaner rewrote meanwhile)."""

    def rewind() -> None:
        if sim._fault_phase:
            reader.rewind()
            sim.loop.call_later(REREAD_MS * US_PER_MS, rewind)

    sim.loop.call_later(REREAD_MS * US_PER_MS, rewind)


def _records(log: Any, start: int, end: int) -> dict[int, Record]:
    """(key, value) of each record the log holds at [start, end), by offset (control batches skipped)."""
    found: dict[int, Record] = {}
    for header, batch in log_batches(log, start, end):
        if not header.is_control:
            for record in decode_batch(batch).records:
                if start <= record.offset < end:
                    found[record.offset] = (bytes(record.key or b""),
                                            None if record.value is None else bytes(record.value))
    return found


def _tp(key: TopicPartition) -> str:
    return f"{key[0]}-{key[1]}"


def _show(committed: _Committed) -> str:
    return _show_record((committed.key, committed.value))


def _show_record(record: Record) -> str:
    return f"{record[0]!r}={record[1]!r}"


def run(config: RunConfig) -> RunResult:
    """One compaction simulation of `config` (see the module docstring). Raises ValueError for an unknown bug."""
    return cluster_sim.run(config, simulation_class=CompactionSimulation)
