"""A partition for the producer-state tests: a real PartitionLog over MemoryStorage plus its
ProducerStateManager, driven the way the broker drives them (check, append, update). No mocks."""

from __future__ import annotations

from partitions.batch import parse_header
from partitions.log import AppendOrigin, PartitionLog
from partitions.log_config import LogConfig
from partitions.records import ABORT, COMMIT, build_batch, build_control_batch
from partitions.storage import MemoryStorage
from txn.producer_state import ProducerStateManager

DIRECTORY = "payments-0"
NOW_MS = 1_700_000_000_000
LEADER_EPOCH = 3


def producer_batch(producer_id: int, producer_epoch: int, base_sequence: int, count: int = 1,
                   timestamp_ms: int = NOW_MS, transactional: bool = False) -> bytes:
    """One batch as an idempotent producer sends it (base offset 0, sequences base..base+count-1)."""
    return build_batch([(None, b"record-%d" % index) for index in range(count)], base_timestamp=timestamp_ms,
                       producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
                       is_transactional=transactional)


class Partition:
    """The leader's produce path for one partition: check, append, update."""

    def __init__(self, storage: MemoryStorage | None = None, now_ms: int = NOW_MS, **config) -> None:
        self.storage = MemoryStorage() if storage is None else storage
        self.config = LogConfig(**config)
        self.log = PartitionLog.open(self.storage, DIRECTORY, self.config, now_ms)
        self.state = ProducerStateManager(self.storage, DIRECTORY, segment_bases=self.segment_bases)
        self.state.rebuild(self.log, now_ms)

    def segment_bases(self) -> list[int]:
        return [segment.base_offset for segment in self.log.segments]

    def produce(self, *batches: bytes, now_ms: int = NOW_MS) -> tuple[int, int]:
        """(first offset, last offset) the broker answers: the original ones for a duplicate.
        Raises what check_append raises, appending nothing."""
        check = self.state.check_append([parse_header(batch) for batch in batches], now_ms)
        if check.is_duplicate:
            return check.duplicate.first_offset, check.duplicate.last_offset
        info = self.log.append_as_leader(b"".join(batches), LEADER_EPOCH, now_ms)
        self.state.update(info.batch_headers)
        return info.first_offset, info.last_offset

    def write_marker(self, producer_id: int, producer_epoch: int, now_ms: int = NOW_MS, committed: bool = True,
                     coordinator_epoch: int = 0):
        """A marker written by the transaction coordinator: (its offset, what update returned)."""
        marker = build_control_batch(COMMIT if committed else ABORT, producer_id, producer_epoch,
                                     coordinator_epoch=coordinator_epoch, timestamp=now_ms)
        info = self.log.append_as_leader(marker, LEADER_EPOCH, now_ms, origin=AppendOrigin.COORDINATOR)
        headers = info.batch_headers
        return info.first_offset, self.state.update(headers, {headers[0].base_offset: (committed, coordinator_epoch)})

    def reopened_state(self, now_ms: int = NOW_MS, use_snapshot: bool = True) -> ProducerStateManager:
        """The state a restarted broker rebuilds from this partition's files."""
        log = PartitionLog.open(self.storage, DIRECTORY, self.config, now_ms)
        state = ProducerStateManager(self.storage, DIRECTORY,
                                     segment_bases=lambda: [segment.base_offset for segment in log.segments])
        state.rebuild(log, now_ms, use_snapshot=use_snapshot)
        return state
