"""A CoordinatorPartitions port over real partition logs (MemoryStorage), with the high watermark in the
test's hand, and a small key/value shard with a timer: what the runtime tests drive."""

from __future__ import annotations

from coordinator.batches import coordinator_batch, loaded_records
from coordinator.shard import CoordinatorRecord, CoordinatorResult, LoadedRecord
from partitions.errors import ErrorCode, KafkaError
from partitions.log import AppendOrigin, PartitionLog
from partitions.log_config import LogConfig
from partitions.records import build_control_batch
from partitions.storage import MemoryStorage


class LogPort:
    """Partitions of an internal topic as real PartitionLogs; `high_watermarks` moves when the test says so,
    `fail_next` makes the next append raise that Kafka error (as a broker below min.insync.replicas does)."""

    def __init__(self, partitions: int = 3) -> None:
        self.storage = MemoryStorage()
        self.logs = {p: PartitionLog.open(self.storage, f"__internal-{p}", LogConfig(), 0) for p in range(partitions)}
        self.high_watermarks = {p: 0 for p in range(partitions)}
        self.fail_next: ErrorCode | None = None
        self.appends = 0

    def append(self, partition, leader_epoch, records, transactional, now_ms) -> int:
        if self.fail_next is not None:
            code, self.fail_next = self.fail_next, None
            raise KafkaError("injected append failure", code)
        self.appends += 1
        info = self.logs[partition].append_as_leader(coordinator_batch(records, transactional, now_ms),
                                                     leader_epoch, now_ms, AppendOrigin.COORDINATOR)
        return info.last_offset

    def append_marker(self, partition: int, producer_id: int, commit: bool, leader_epoch: int = 0) -> None:
        batch = build_control_batch(1 if commit else 0, producer_id, 0, 0, 0)
        self.logs[partition].append_as_leader(batch, leader_epoch, 0, AppendOrigin.COORDINATOR)

    def read(self, partition, offset, bytes_max):
        data = self.logs[partition].read(offset, bytes_max)
        return loaded_records(data.records, offset)

    def log_start_offset(self, partition) -> int:
        return self.logs[partition].log_start_offset

    def log_end_offset(self, partition) -> int:
        return self.logs[partition].log_end_offset

    def high_watermark(self, partition) -> int:
        return self.high_watermarks[partition]

    def commit_all(self) -> None:
        for partition, log in self.logs.items():
            self.high_watermarks[partition] = log.log_end_offset


class KvShard:
    """A key/value store as a coordinator shard: ("put", k, v) writes a record, ("get", k) reads, ("wait", k)
    parks until k is put, ("expire", k, at_ms) deletes k at a deadline. Durable state: `values` (replay only);
    volatile: waiters and deadlines. Markers: records written transactionally stay pending until a COMMIT."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.values: dict[bytes, bytes] = {}
        self.pending: dict[int, dict[bytes, bytes | None]] = {}
        self.replayed: list[int] = []
        self.waiters: dict[bytes, list[int]] = {}
        self.deadlines: dict[bytes, int] = {}
        self.loaded_at: int | None = None

    def handle(self, request_id, request, now_ms) -> CoordinatorResult:
        kind, key = request[0], request[1].encode()
        if kind == "put":
            value = request[2].encode()
            completions = [(waiter, ("ready", request[1])) for waiter in self.waiters.pop(key, [])]
            return CoordinatorResult([CoordinatorRecord(key, value)], ("ok", request[1]), completions)
        if kind == "get":
            return CoordinatorResult(response=("value", self.values.get(key)))
        if kind == "wait":
            self.waiters.setdefault(key, []).append(request_id)
            return CoordinatorResult()
        if kind == "expire":
            self.deadlines[key] = request[2]
            return CoordinatorResult(response=("armed", request[1]))
        raise AssertionError(request)

    def replay(self, record: LoadedRecord) -> None:
        self.replayed.append(record.offset)
        if record.is_control:
            staged = self.pending.pop(record.producer_id, {})
            if record.control_type == 1:
                self._apply(staged)
            return
        if record.producer_id >= 0:
            self.pending.setdefault(record.producer_id, {})[record.key] = record.value
            return
        self._apply({record.key: record.value})

    def _apply(self, changes: dict[bytes, bytes | None]) -> None:
        for key, value in changes.items():
            if value is None:
                self.values.pop(key, None)
            else:
                self.values[key] = value

    def poll(self, now_ms) -> CoordinatorResult:
        due = sorted(key for key, at in self.deadlines.items() if at <= now_ms)
        for key in due:
            del self.deadlines[key]
        return CoordinatorResult([CoordinatorRecord(key, None) for key in due if key in self.values])

    def next_deadline_ms(self):
        return min(self.deadlines.values()) if self.deadlines else None

    def on_loaded(self, now_ms) -> None:
        self.loaded_at = now_ms

    def parked_request_ids(self) -> list[int]:
        return [request_id for ids in self.waiters.values() for request_id in ids]
