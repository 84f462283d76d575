"""The partition log: Kafka's `UnifiedLog` (local part) over the Storage port.

Theory of operation: a partition directory holds a sequence of segments (partitions/segment.py) with
increasing base offsets; the last one is the active segment and the only one appended to. The log owns:
- log_start_offset (first offset a consumer may read; advanced by retention and DeleteRecords, persisted in
  `log-start-offset-checkpoint` when it is not a segment's base) and log_end_offset (next offset to assign);
- the leader epoch cache (partitions/leader_epoch.py);
- the flush policy (flush.messages / flush.ms; a segment is always fsynced when it is rolled);
- retention, DeleteRecords, truncation, and compaction (partitions/cleaner.py) of closed segments.

The hot path never decodes records: the leader checks each batch's header, size and CRC-32C, stamps the
base offset and leader epoch (both outside the CRC) and appends the bytes in one write; a fetch returns
(handle, position, size) slices of whole batches, read with one positional read per segment touched.

Files and crash recovery (Kafka's rules):
- `clean-shutdown` is written by `close()` after everything is fsynced and deleted on open. With it, segments
  are loaded from their indexes (rebuilt if insane). Without it, the last segment is rescanned batch by batch
  (CRC, offsets), a torn or corrupt tail is cut, and its indexes are rebuilt; older segments were fsynced
  when they were rolled and are only sanity-checked (rebuilt when a check fails).
- `*.cleaned` (an unfinished compaction), `*.deleted` (a segment whose deletion was pending) and `*.tmp`
  files are deleted. A `*.log.swap` is a finished compaction whose swap was interrupted: the segments it
  replaces are deleted and it is renamed into place (index `.swap` files are dropped and rebuilt).
- The epoch cache is truncated to the recovered log end offset and from the log start offset.

Invariants (asserted): log_start_offset <= log_end_offset; segment base offsets strictly increase; every
segment's next offset <= the next segment's base offset.
"""

from __future__ import annotations

import bisect
import posixpath
import enum
from dataclasses import dataclass, field
from typing import Any, Callable

from partitions.batch import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    TRANSACTIONAL_MASK,
    BatchHeader,
    compute_crc,
    header_from_fields,
    parse_header,
    set_log_append_time,
    stamp_batch,
    iter_batches,
)
from partitions.errors import (
    CorruptRecordError,
    FencedLeaderEpochError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
    ErrorCode,
)
from partitions.leader_epoch import LeaderEpochCache
from partitions.log_config import LogConfig
from partitions.cleaner import CleanerStats, CleaningPass, ProducerLastRecord
from partitions.compression import DECOMPRESSED_BYTES_MAX_DEFAULT
from partitions.records import NO_TIMESTAMP, decode_batch
from partitions.validation import check_client_records
from partitions.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    SWAP_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    BatchPlacement,
    LazyLogFile,
    LogSegment,
    join,
)
from partitions.storage import FileHandle, Storage, StorageError, normalize_path, read_file, write_file_atomically

CLEAN_SHUTDOWN_FILE_NAME = "clean-shutdown"
LOG_START_OFFSET_FILE_NAME = "log-start-offset-checkpoint"
CLEANER_CHECKPOINT_FILE_NAME = "cleaner-offset-checkpoint"
TEMP_SUFFIX = ".tmp"
COMPRESSION_CODEC_MAX = 4  # zstd; 5..7 are not Kafka codecs
EARLIEST_TIMESTAMP = -2  # ListOffsets special timestamps (Kafka's ListOffsetsRequest)
LATEST_TIMESTAMP = -1
# Immutable appends whose batches average at least this size are written as (stamped header copy, body view)
# pairs instead of being copied whole: a copy costs more than a second write from here up.
SPLIT_WRITE_BATCH_BYTES_MIN = 64 * 1024
# Positions in the tuple of HEADER.unpack_from (partitions/batch.py's wire layout).
(F_BASE_OFFSET, F_BATCH_LENGTH, F_PARTITION_LEADER_EPOCH, F_MAGIC, F_CRC, F_ATTRIBUTES, F_LAST_OFFSET_DELTA,
 F_BASE_TIMESTAMP, F_MAX_TIMESTAMP, F_PRODUCER_ID, F_PRODUCER_EPOCH, F_BASE_SEQUENCE, F_RECORDS_COUNT) = range(13)
assert HEADER.size == HEADER_SIZE, HEADER.size
MAX_TIMESTAMP = -3


class UnexpectedAppendOffsetError(KafkaError):
    """A follower append whose first offset is below the log end offset (Kafka's
    UnexpectedAppendOffsetException): the fetcher must truncate or refetch."""

    code = ErrorCode.UNKNOWN_SERVER_ERROR

READ_CHUNK_BYTES = 1024 * 1024  # what one read of a lookup takes at most


class AppendOrigin(enum.Enum):
    """Who appends on the leader: clients may not write control batches; coordinators may."""

    CLIENT = "client"
    COORDINATOR = "coordinator"


class AppendInfo:
    """What an append wrote (Kafka's LogAppendInfo). `batch_headers` are the headers as written (offsets
    and leader epoch stamped), built on first access. A plain slotted class: one is made per append."""

    __slots__ = ("first_offset", "last_offset", "max_timestamp", "offset_of_max_timestamp", "log_append_time_ms",
                 "log_start_offset", "record_count", "valid_bytes", "_header_fields", "_headers")

    def __init__(self, first_offset: int, last_offset: int, max_timestamp: int, offset_of_max_timestamp: int,
                 log_append_time_ms: int, log_start_offset: int, record_count: int, valid_bytes: int,
                 header_fields) -> None:
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.max_timestamp = max_timestamp
        self.offset_of_max_timestamp = offset_of_max_timestamp
        self.log_append_time_ms = log_append_time_ms  # -1 unless the topic uses LogAppendTime
        self.log_start_offset = log_start_offset
        self.record_count = record_count
        self.valid_bytes = valid_bytes
        self._header_fields = header_fields
        self._headers: tuple[BatchHeader, ...] | None = None

    @property
    def batch_headers(self) -> tuple[BatchHeader, ...]:
        if self._headers is None:
            self._headers = tuple(header_from_fields(fields) for fields in self._header_fields)
        return self._headers

    def __repr__(self) -> str:
        return (f"AppendInfo(first_offset={self.first_offset}, last_offset={self.last_offset}, "
                f"record_count={self.record_count}, valid_bytes={self.valid_bytes})")


@dataclass(frozen=True, slots=True)
class FileSlice:
    """`size` bytes of whole batches at `position` of an open segment file."""

    handle: FileHandle
    position: int
    size: int

    def read(self) -> bytes:
        """The slice's bytes. Raises StorageError when the file is closed or unreadable, or was cut shorter
        since the slice was taken (a truncation or a deleted replica between a response and its send)."""
        data = self.handle.read_at(self.position, self.size)
        if len(data) != self.size:
            raise StorageError(f"short read: {len(data)} of {self.size} bytes at {self.position}")
        return data

    def __len__(self) -> int:  # a chunk of an encoded response (net/protocol: records written without a copy)
        return self.size


@dataclass(slots=True)
class FetchData:
    """Whole batches for a fetch. The edge may os.sendfile each slice (handle.fileno() is not None) or use
    `records`, which reads every slice once (one pread each) and caches the bytes. Read it before the log's
    file.delete.delay.ms passes: deleted segments keep their handles open until then."""

    fetch_offset: int
    slices: tuple[FileSlice, ...]
    _end: Any = field(default=None, repr=False)  # (segment, position) where the read ended
    _records: bytes | None = field(default=None, repr=False)

    @property
    def sendable(self) -> bool:
        """Whether every slice is in a file with a descriptor (os.sendfile can send it)."""
        return all(piece.handle.fileno() is not None for piece in self.slices)

    @property
    def next_offset(self) -> int:
        """The first offset after the batches read: the next batch's base offset (one 12-byte read), or the
        end of the last segment read; `fetch_offset` when nothing was read."""
        if self._end is None:
            return self.fetch_offset
        segment, position = self._end
        return segment.next_offset if position >= segment.size else segment.base_offset_at(position)

    @property
    def size(self) -> int:
        return sum(piece.size for piece in self.slices)

    @property
    def records(self) -> bytes:
        if self._records is None:
            self._records = b"".join(piece.read() for piece in self.slices)
        return self._records

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return self.records


def _stamp_in_place(records: bytes | bytearray, checked: list[tuple[int, tuple]], first_offset: int,
                    leader_epoch: int, log_append_time_ms: int) -> tuple[list[bytearray], list[tuple]]:
    """Stamp a bytearray (the caller's, or one copy of `records`) in place: one piece to write, and the
    header fields as written."""
    buffer = records if isinstance(records, bytearray) else bytearray(records)
    next_offset, written = first_offset, []
    with memoryview(buffer) as view:
        for position, fields in checked:
            batch = view[position : position + fields[F_BATCH_LENGTH] + LOG_OVERHEAD]
            stamp_batch(batch, next_offset, leader_epoch)
            if log_append_time_ms >= 0:
                set_log_append_time(batch, log_append_time_ms)
                fields = HEADER.unpack_from(batch)
            else:
                fields = (next_offset, fields[F_BATCH_LENGTH], leader_epoch) + fields[F_MAGIC:]
            batch.release()
            written.append(fields)
            next_offset += fields[F_LAST_OFFSET_DELTA] + 1
    return [buffer], written


def _stamp_headers_only(records: bytes, checked: list[tuple[int, tuple]], first_offset: int,
                        leader_epoch: int) -> tuple[list, list[tuple]]:
    """Large immutable batches: copy and stamp only each 61-byte header; the bodies are written from the
    caller's buffer (saves a copy of every byte, at one more write per batch)."""
    view = memoryview(records)
    next_offset, pieces, written = first_offset, [], []
    for position, fields in checked:
        head = bytearray(view[position : position + HEADER_SIZE])
        stamp_batch(head, next_offset, leader_epoch)
        pieces += [head, view[position + HEADER_SIZE : position + fields[F_BATCH_LENGTH] + LOG_OVERHEAD]]
        written.append((next_offset, fields[F_BATCH_LENGTH], leader_epoch) + fields[F_MAGIC:])
        next_offset += fields[F_LAST_OFFSET_DELTA] + 1
    return pieces, written


class LogClock:
    """The time and the time-based work the logs of one owner share. The owner advances `ms` (a log's now_ms is
    the later of its own and this), and runs `maybe_flush` on the logs in `timed` only: those with segment
    files waiting for file.delete.delay.ms, or unflushed records under a flush.ms. A log enters `timed` when it
    gets such work; the owner drops it once it has none. So a tick costs nothing per idle log."""

    __slots__ = ("ms", "timed")

    def __init__(self, ms: int = 0) -> None:
        self.ms = ms
        self.timed: set[PartitionLog] = set()


class PartitionLog:
    """One partition's segmented log in `directory` of `storage`. Not thread-safe: one owner."""

    def __init__(self, storage: Storage, directory: str, config: LogConfig, now_ms: int,
                 clock: LogClock | None = None) -> None:
        self.storage = storage
        self.directory = directory
        self.config = config
        self.segments: list[LogSegment] = []
        self.log_start_offset = 0
        self.epoch_cache = LeaderEpochCache(storage, directory)
        self.unflushed_messages = 0
        self.last_flush_ms = now_ms
        self.clock = LogClock(now_ms) if clock is None else clock
        self._now_ms = now_ms
        self.pending_deletions: list[tuple[int, LogSegment]] = []
        self.cleaner_checkpoint = 0  # first offset not yet compacted (Kafka's cleaner-offset-checkpoint)
        self.earliest_delete_horizon_ms: int | None = None  # when kept tombstones may go (KIP-534)
        self.closed = False
        self._before_first_file: Callable[[], None] | None = None  # see before_first_segment_file
        self._unsynced_parent: str | None = None  # a new directory's parent, until the first record is synced

    # ---- opening and recovery

    @classmethod
    def open(cls, storage: Storage, directory: str, config: LogConfig, now_ms: int,
             clock: LogClock | None = None) -> PartitionLog:
        """Load (and recover) the log in `directory`, creating it when empty. Raises StorageError."""
        parent = posixpath.dirname(normalize_path(directory))
        existed = storage.exists(directory)
        if not existed:
            # Its entry in the parent becomes durable with the log's first fsync (segment.LazyLogFile): until a
            # record is flushed, a power loss that drops the new directory drops the same empty log.
            storage.makedirs(directory)
        log = cls(storage, directory, config, now_ms, clock)
        log._unsynced_parent = None if existed else parent
        names = storage.list(directory)
        clean_shutdown = CLEAN_SHUTDOWN_FILE_NAME in names
        if existed and not clean_shutdown:
            # A crashed process may have created this directory or its files without the fsync that makes
            # their names durable (it died in between): what is found is made durable before it takes
            # records, or a power loss would drop flushed, acknowledged ones with the names.
            storage.fsync_dir(parent)
            storage.fsync_dir(directory)
        swap_bases = log._remove_leftovers(names)
        log._load_segments(clean_shutdown)
        for base_offset in swap_bases:
            log._complete_swap(base_offset)
        checkpointed_start = log._read_log_start_offset()
        if not log.segments:
            # No segment file yet: the first one is created with the first record (segment.LazyLogFile).
            log.segments.append(log.segment_object(
                checkpointed_start or 0,
                lazy_log=lambda path: LazyLogFile(storage, path, log._first_segment_file, log._sync_parent)))
        log.log_start_offset = max(checkpointed_start or 0, log.segments[0].base_offset)
        if log.log_start_offset > log.log_end_offset:
            log.truncate_fully_and_start_at(log.log_start_offset)
        if clean_shutdown:
            storage.delete(log._path(CLEAN_SHUTDOWN_FILE_NAME))
            storage.fsync_dir(directory)
        log.epoch_cache.truncate_from_end(log.log_end_offset)
        log.epoch_cache.truncate_from_start(log.log_start_offset)
        cleaner_checkpoint = log._read_offset_checkpoint(CLEANER_CHECKPOINT_FILE_NAME) or 0
        log.cleaner_checkpoint = min(max(cleaner_checkpoint, log.log_start_offset), log.log_end_offset)
        log._check_invariants()
        return log

    def _path(self, name: str) -> str:
        return join(self.directory, name)

    def _remove_leftovers(self, names: list[str]) -> list[int]:
        """Delete temp/cleaned/deleted files and orphan indexes; return the base offsets of .log.swap files."""
        swap_bases = []
        log_bases = {name[: -len(LOG_SUFFIX)] for name in names if name.endswith(LOG_SUFFIX)}
        for name in names:
            if name.endswith((CLEANED_SUFFIX, DELETED_SUFFIX, TEMP_SUFFIX)):
                self.storage.delete(self._path(name))
            elif name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
                swap_bases.append(int(name.split(".")[0]))
            elif name.endswith(SWAP_SUFFIX):
                self.storage.delete(self._path(name))  # index swaps are rebuilt from the swapped log
            elif name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX)) and name.split(".")[0] not in log_bases:
                self.storage.delete(self._path(name))
        return sorted(swap_bases)

    def _load_segments(self, clean_shutdown: bool) -> None:
        bases = sorted(
            int(name[: -len(LOG_SUFFIX)])
            for name in self.storage.list(self.directory)
            if name.endswith(LOG_SUFFIX) and name[: -len(LOG_SUFFIX)].isdigit()
        )
        for slot, base_offset in enumerate(bases):
            segment = self.segment_object(base_offset)
            self.segments.append(segment)
            is_last = slot == len(bases) - 1
            if (is_last and not clean_shutdown) or segment.load_after_clean_shutdown() is not None:
                result = segment.recover()
                if result.truncated_bytes and not is_last:
                    # Corruption inside an older segment: what follows it can no longer be contiguous.
                    for later in bases[slot + 1 :]:
                        self.segment_object(later).delete()
                    break
        for segment in self.segments:
            if segment.first_batch_timestamp is not None and segment.first_batch_timestamp >= 0:
                segment.created_ms = segment.first_batch_timestamp

    def segment_object(self, base_offset: int, suffix: str = "",
                       lazy_log: Callable[[str], LazyLogFile] | None = None) -> LogSegment:
        return LogSegment(
            self.storage,
            self.directory,
            base_offset,
            self.config.segment_index_bytes,
            self.config.index_interval_bytes,
            self.now_ms,
            suffix,
            lazy_log,
        )

    def _complete_swap(self, base_offset: int) -> None:
        """Finish an interrupted compaction swap: the .swap replaces every segment in its offset range."""
        swapped = self.segment_object(base_offset, SWAP_SUFFIX)
        swapped.recover()
        end_offset = max(swapped.next_offset, base_offset + 1)
        for segment in [s for s in self.segments if base_offset <= s.base_offset < end_offset]:
            self.segments.remove(segment)
            segment.delete()
        swapped.change_suffix("")
        self.storage.fsync_dir(self.directory)
        bisect.insort(self.segments, swapped, key=lambda s: s.base_offset)

    def _read_offset_checkpoint(self, name: str) -> int | None:
        """The offset in checkpoint file `name` ("0", "1", offset lines), or None when missing or unreadable."""
        path = self._path(name)
        if not self.storage.exists(path):
            return None
        try:
            lines = read_file(self.storage, path).decode("ascii").split()
            if lines[:2] != ["0", "1"] or len(lines) != 3:
                return None
            return int(lines[2])
        except (StorageError, UnicodeDecodeError, ValueError):
            return None  # unreadable: fall back as a fresh log would

    def _write_offset_checkpoint(self, name: str, offset: int) -> None:
        write_file_atomically(self.storage, self._path(name), f"0\n1\n{offset}\n".encode("ascii"))

    def _read_log_start_offset(self) -> int | None:
        return self._read_offset_checkpoint(LOG_START_OFFSET_FILE_NAME)

    def _write_log_start_offset(self) -> None:
        self._write_offset_checkpoint(LOG_START_OFFSET_FILE_NAME, self.log_start_offset)

    def save_cleaner_checkpoint(self) -> None:
        """Persist the first dirty offset (Kafka's cleaner-offset-checkpoint) after a compaction pass."""
        self._write_offset_checkpoint(CLEANER_CHECKPOINT_FILE_NAME, self.cleaner_checkpoint)

    def before_first_segment_file(self, callback: Callable[[], None]) -> None:
        """Run `callback` just before this log creates its first segment file, or now if it has one: the broker
        writes partition.metadata so, and a directory without it holds no records (BrokerCore)."""
        if len(self.segments) == 1 and isinstance(self.segments[0].log, LazyLogFile) \
                and not self.segments[0].log.created:
            self._before_first_file = callback
        else:
            callback()

    def _first_segment_file(self) -> None:
        callback, self._before_first_file = self._before_first_file, None
        if callback is not None:
            callback()

    def _sync_parent(self) -> None:
        """Make a new log directory's entry in its parent durable (once, before its first flushed record)."""
        if self._unsynced_parent is not None:
            self.storage.fsync_dir(self._unsynced_parent)
            self._unsynced_parent = None

    def _new_segment(self, base_offset: int, now_ms: int) -> LogSegment:
        self._first_segment_file()
        for file_suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            self.storage.delete(self._path(f"{base_offset:020d}{file_suffix}"))
        segment = self.segment_object(base_offset)
        segment.created_ms = now_ms
        self.storage.fsync_dir(self.directory)
        self._sync_parent()
        return segment

    def _check_invariants(self) -> None:
        assert self.segments, "a log always has an active segment"
        assert self.log_start_offset <= self.log_end_offset, f"lso={self.log_start_offset} leo={self.log_end_offset}"
        for earlier, later in zip(self.segments, self.segments[1:]):
            assert earlier.base_offset < later.base_offset, f"{earlier} before {later}"
            assert earlier.next_offset <= later.base_offset, f"{earlier} overlaps {later}"

    # ---- state

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.active_segment.next_offset

    @property
    def latest_epoch(self) -> int | None:
        return self.epoch_cache.latest_epoch

    @property
    def size_bytes(self) -> int:
        return sum(segment.size for segment in self.segments)

    @property
    def now_ms(self) -> int:
        """The latest time this log or its clock has seen."""
        own, shared = self._now_ms, self.clock.ms
        return own if own > shared else shared

    def _now(self, now_ms: int) -> None:
        if now_ms > self._now_ms:
            self._now_ms = now_ms

    @property
    def has_timed_work(self) -> bool:
        """Segment files waiting for their deletion, or unflushed records under a flush.ms."""
        return bool(self.pending_deletions) or (self.unflushed_messages > 0 and self.config.flush_ms is not None)

    # ---- appends
    #
    # The hot path keeps each header as the tuple HEADER.unpack_from returns (fields in wire order, see
    # partitions/batch.py): building frozen dataclasses per batch would cost more than the write itself.

    def append_as_leader(
        self,
        records: bytes | bytearray,
        leader_epoch: int,
        now_ms: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> AppendInfo:
        """Validate, assign offsets, stamp `leader_epoch` and append one or more v2 batches as received.
        A bytearray is stamped in place (no copy). Appends nothing when it raises CorruptRecordError,
        InvalidRecordError, RecordTooLargeError, UnsupportedCompressionTypeError, InvalidTimestampError,
        UnsupportedForMessageFormatError, or FencedLeaderEpochError (an epoch older than the latest)."""
        self._now(now_ms)
        latest = self.epoch_cache.latest_epoch
        if latest is not None and leader_epoch < latest:
            raise FencedLeaderEpochError(f"leader epoch {leader_epoch} is older than the log's {latest}")
        checked = self._validate(records, leader=True, origin=origin, now_ms=now_ms)
        if not checked:
            return self._empty_append_info()
        log_append_time_ms = now_ms if self.config.log_append_time else -1
        first_offset = self.log_end_offset
        large = len(records) >= SPLIT_WRITE_BATCH_BYTES_MIN * len(checked)
        if isinstance(records, bytes) and log_append_time_ms < 0 and large:
            pieces, written = _stamp_headers_only(records, checked, first_offset, leader_epoch)
        else:
            pieces, written = _stamp_in_place(records, checked, first_offset, leader_epoch, log_append_time_ms)
        self.epoch_cache.assign(leader_epoch, first_offset)
        return self._append(pieces, [position for position, _ in checked], written, log_append_time_ms, now_ms)

    def append_as_follower(self, records: bytes | bytearray, now_ms: int) -> AppendInfo:
        """Append batches fetched from the leader with their offsets and epochs as given. The first offset
        must be >= log_end_offset (a gap is allowed: compacted leaders skip offsets). Raises
        UnexpectedAppendOffsetError, CorruptRecordError, InvalidRecordError; appends nothing on error."""
        self._now(now_ms)
        checked = self._validate(records, leader=False, origin=AppendOrigin.CLIENT, now_ms=now_ms)
        if not checked:
            return self._empty_append_info()
        first_offset = checked[0][1][0]
        if first_offset < self.log_end_offset:
            raise UnexpectedAppendOffsetError(
                f"follower append starts at {first_offset}, below the log end offset {self.log_end_offset}"
            )
        for _, fields in checked:
            epoch, latest = fields[2], self.epoch_cache.latest_epoch
            if epoch >= 0 and (latest is None or epoch > latest):
                self.epoch_cache.assign(epoch, fields[0])
        written = [fields for _, fields in checked]
        return self._append([records], [position for position, _ in checked], written, -1, now_ms)

    def _empty_append_info(self) -> AppendInfo:
        leo = self.log_end_offset
        return AppendInfo(leo, leo - 1, -1, -1, -1, self.log_start_offset, 0, 0, ())

    def _validate(self, records: bytes | bytearray, leader: bool, origin: AppendOrigin,
                  now_ms: int) -> list[tuple[int, tuple]]:
        """[(position, header fields)] of every batch of `records`, checked without decoding records;
        raises the first problem found."""
        view = memoryview(records)
        end = len(view)
        checked: list[tuple[int, tuple]] = []
        position = 0
        previous_next_offset = -1
        while position < end:
            if end - position < HEADER_SIZE:
                raise CorruptRecordError(f"{end - position} trailing bytes are not a record batch")
            fields = HEADER.unpack_from(view, position)
            size = fields[F_BATCH_LENGTH] + LOG_OVERHEAD
            if fields[F_MAGIC] != MAGIC_V2 or size < HEADER_SIZE or fields[F_LAST_OFFSET_DELTA] < 0 or fields[F_RECORDS_COUNT] < 0:
                parse_header(view, position)  # raises the precise typed error
            if position + size > end:
                raise CorruptRecordError(f"record batch of {size} bytes truncated at {end - position}")
            if leader:
                self._check_leader_batch(fields, size, origin, now_ms)
            elif fields[F_BASE_OFFSET] < previous_next_offset:
                raise InvalidRecordError(f"batch base offset {fields[F_BASE_OFFSET]} below {previous_next_offset}")
            if compute_crc(view[position : position + size]) != fields[F_CRC]:
                raise CorruptRecordError(f"record batch CRC mismatch at position {position}")
            if fields[F_ATTRIBUTES] & COMPRESSION_MASK > COMPRESSION_CODEC_MAX:
                raise UnsupportedCompressionTypeError(f"compression codec {fields[F_ATTRIBUTES] & COMPRESSION_MASK}")
            if leader:
                check_client_records(view[position + HEADER_SIZE : position + size],
                                     fields[F_ATTRIBUTES] & COMPRESSION_MASK, fields[F_RECORDS_COUNT],
                                     fields[F_BASE_TIMESTAMP], self.config, now_ms,
                                     self.directory.rsplit("/", 1)[-1], DECOMPRESSED_BYTES_MAX_DEFAULT)
            checked.append((position, fields))
            previous_next_offset = fields[F_BASE_OFFSET] + fields[F_LAST_OFFSET_DELTA] + 1
            position += size
        return checked

    def _check_leader_batch(self, fields: tuple, size: int, origin: AppendOrigin, now_ms: int) -> None:
        config = self.config
        if size > config.max_message_bytes or size > config.segment_bytes:
            raise RecordTooLargeError(f"record batch of {size} bytes exceeds max.message.bytes={config.max_message_bytes}")
        count, last_offset_delta, attributes = fields[F_RECORDS_COUNT], fields[F_LAST_OFFSET_DELTA], fields[F_ATTRIBUTES]
        if count <= 0 or count != last_offset_delta + 1:
            raise InvalidRecordError(f"records_count={count} does not match last_offset_delta={last_offset_delta}")
        if attributes & CONTROL_MASK and origin is AppendOrigin.CLIENT:
            raise InvalidRecordError("clients may not write control batches")
        if attributes & TRANSACTIONAL_MASK and fields[F_PRODUCER_ID] < 0:
            raise InvalidRecordError("a transactional batch needs a producer id")
        if origin is AppendOrigin.CLIENT and fields[F_PRODUCER_ID] >= 0 and fields[F_BASE_SEQUENCE] < 0:
            raise InvalidRecordError(f"invalid sequence number {fields[F_BASE_SEQUENCE]} in a record batch with "
                                     f"producer id {fields[F_PRODUCER_ID]}")
        if not config.log_append_time:
            # The header's timestamps (each record's: check_client_records); -1 is "no timestamp".
            base_timestamp, max_timestamp = fields[F_BASE_TIMESTAMP], fields[F_MAX_TIMESTAMP]
            if base_timestamp != NO_TIMESTAMP and now_ms - min(base_timestamp, max_timestamp) > config.message_timestamp_before_max_ms:
                raise InvalidTimestampError(f"timestamp {base_timestamp} too far before {now_ms}")
            if max_timestamp - now_ms > config.message_timestamp_after_max_ms:
                raise InvalidTimestampError(f"timestamp {max_timestamp} too far after {now_ms}")

    def _append(self, pieces: list, positions: list[int], written: list[tuple], log_append_time_ms: int,
                now_ms: int) -> AppendInfo:
        """Write `pieces` (the stamped batches whose header fields are `written`, at `positions` of the
        concatenated pieces) to the active segment, rolling first when needed."""
        placements = [
            BatchPlacement(position, fields[F_BATCH_LENGTH] + LOG_OVERHEAD,
                           fields[F_BASE_OFFSET] + fields[F_LAST_OFFSET_DELTA], fields[F_MAX_TIMESTAMP])
            for position, fields in zip(positions, written)
        ]
        first_offset, last_offset = written[0][F_BASE_OFFSET], placements[-1].last_offset
        size = len(pieces[0]) if len(pieces) == 1 else sum(len(piece) for piece in pieces)
        config = self.config
        segment = self.active_segment
        if segment.should_roll(size, last_offset, config.segment_bytes, config.roll_ms(segment.jitter_seed), now_ms):
            self.roll(now_ms, max(first_offset, self.log_end_offset))
        self.active_segment.append(pieces, placements)
        record_count = last_offset - first_offset + 1 if len(written) == 1 else sum(f[F_LAST_OFFSET_DELTA] + 1 for f in written)
        self.unflushed_messages += record_count
        if config.flush_messages is not None and self.unflushed_messages >= config.flush_messages:
            self.flush(now_ms)
        if config.flush_ms is not None:
            self.clock.timed.add(self)
        best = placements[0] if len(placements) == 1 else max(placements, key=lambda p: p.max_timestamp)
        return AppendInfo(first_offset, last_offset, best.max_timestamp, best.last_offset, log_append_time_ms,
                          self.log_start_offset, record_count, size, written)

    def roll(self, now_ms: int, base_offset: int | None = None) -> LogSegment:
        """Seal (fsync) the active segment and start a new one at `base_offset` (default: log end offset)."""
        base_offset = self.log_end_offset if base_offset is None else base_offset
        assert base_offset >= self.log_end_offset, f"roll to {base_offset} below leo {self.log_end_offset}"
        active = self.active_segment
        if active.is_empty:
            if active.base_offset == base_offset:
                return active
            self.segments.pop()
            active.delete()
        else:
            active.seal()
        self.segments.append(self._new_segment(base_offset, now_ms))
        self.unflushed_messages = 0
        self.last_flush_ms = now_ms
        return self.active_segment

    # ---- flushing

    def flush(self, now_ms: int | None = None) -> None:
        """fsync the active segment's .log (older segments were fsynced when rolled; the active segment's
        indexes are rebuilt by recovery after a crash, so they need no fsync here)."""
        self.active_segment.log.fsync()
        self.unflushed_messages = 0
        self.last_flush_ms = self.now_ms if now_ms is None else now_ms

    def maybe_flush(self, now_ms: int) -> bool:
        """Flush when flush.ms has passed with unflushed messages; run due file deletions. True if flushed."""
        self._now(now_ms)
        self.delete_due_files(now_ms)
        due = self.config.flush_ms is not None and now_ms - self.last_flush_ms >= self.config.flush_ms
        if due and self.unflushed_messages:
            self.flush(now_ms)
            return True
        return False

    # ---- reads

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None, min_one_batch: bool = True) -> FetchData:
        """Whole batches from the one holding `offset`, at most `max_bytes` (but at least one batch when
        `min_one_batch`), none holding an offset >= `max_offset` (e.g. the high watermark). Raises
        OffsetOutOfRangeError for an offset outside [log_start_offset, log_end_offset]."""
        if not self.log_start_offset <= offset <= self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} outside [{self.log_start_offset}, {self.log_end_offset}]"
            )
        assert max_bytes >= 0, f"max_bytes={max_bytes}"
        if offset == self.log_end_offset or (max_offset is not None and offset >= max_offset):
            return FetchData(offset, ())  # a caught-up reader, the most common fetch: no index lookup, no I/O
        slices: list[FileSlice] = []
        fetch_offset, remaining = offset, max_bytes
        last_end = None
        slot = max(0, bisect.bisect_right(self.segments, offset, key=lambda s: s.base_offset) - 1)
        for segment in self.segments[slot:]:
            span = segment.tail_span(offset, max_offset, remaining)  # near the end: placed from memory
            if span is not None:
                position, end, first_end = span
                if first_end == position:
                    break
            else:
                found = segment.translate_offset(offset)
                if found is None:
                    continue
                position, header = found
                if max_offset is not None and header.last_offset >= max_offset:
                    break
                first_end = position + header.size
                limit = segment.size
                if max_offset is not None and max_offset < segment.next_offset:
                    limit = segment.translate_offset(max_offset, position)[0]
                end = segment.batch_boundary_at_or_before(min(limit, position + remaining), position)
            if end == position and min_one_batch and not slices:
                end = first_end
            if end > position:
                slices.append(FileSlice(segment.log, position, end - position))
                remaining -= min(remaining, end - position)
                last_end = (segment, end)
            if end < segment.size or remaining == 0:
                break
            offset = segment.next_offset
        return FetchData(fetch_offset, tuple(slices), last_end)

    def max_timestamp_record(self) -> tuple[int, int, int] | None:
        """(timestamp, offset, leader epoch) of the first record with the largest timestamp in the log, or None
        for an empty log: Kafka's MAX_TIMESTAMP lookup (KIP-734). The segment knows the batch (its
        `offset_of_max_timestamp` is that batch's last offset); the batch is decoded for the record."""
        segments = [segment for segment in self.segments if segment.max_timestamp >= 0 or segment.size]
        if not segments:
            return None
        best = max(segments, key=lambda segment: segment.max_timestamp)  # the first of equals, as Kafka's maxBy
        offset = max(best.base_offset, self.log_start_offset)
        while offset <= best.offset_of_max_timestamp:
            records = self.read(offset, READ_CHUNK_BYTES).records
            if not records:
                return None
            for position, header in iter_batches(records):
                if header.max_timestamp == best.max_timestamp:
                    batch = decode_batch(records[position:position + header.size])
                    record = next(r for r in batch.records if r.timestamp == header.max_timestamp)
                    return header.max_timestamp, record.offset, header.partition_leader_epoch
                offset = header.last_offset + 1
        return None

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp_ms` (ListOffsets), or None.
        Special values: -2 earliest, -1 latest (timestamp -1), -3 the record with the largest timestamp."""
        if timestamp_ms == EARLIEST_TIMESTAMP:
            return self.log_start_offset, -1
        if timestamp_ms == LATEST_TIMESTAMP:
            return self.log_end_offset, -1
        if timestamp_ms == MAX_TIMESTAMP:
            best = max(self.segments, key=lambda s: s.max_timestamp)
            return (best.offset_of_max_timestamp, best.max_timestamp) if best.max_timestamp >= 0 else None
        for segment in self.segments:
            if segment.max_timestamp < timestamp_ms:
                continue
            found = segment.find_batch_by_timestamp(timestamp_ms, self.log_start_offset)
            if found is not None:
                return self._record_at_or_after_timestamp(segment, *found, timestamp_ms)
        return None

    def _record_at_or_after_timestamp(self, segment: LogSegment, position: int, header: BatchHeader,
                                      timestamp_ms: int) -> tuple[int, int]:
        """Refine to the record: decoding is fine here (ListOffsets is not the hot path)."""
        if header.is_log_append_time:
            return max(header.base_offset, self.log_start_offset), header.max_timestamp
        for record in decode_batch(segment.read_batch(position, header)).records:
            if record.offset >= self.log_start_offset and record.timestamp >= timestamp_ms:
                return record.offset, record.timestamp
        return max(header.base_offset, self.log_start_offset), header.max_timestamp

    # ---- leader epochs

    def assign_epoch_start(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset` (a new leader does this with its log end offset); for an
        empty log the checkpoint file is written by the first append (LeaderEpochCache.assign)."""
        empty_from_here = self.log_start_offset == self.log_end_offset == start_offset
        self.epoch_cache.assign(epoch, start_offset, save=not empty_from_here)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(largest epoch <= `epoch`, its end offset) for OffsetsForLeaderEpoch (KIP-101); (-1, -1) if unknown."""
        return self.epoch_cache.end_offset_for(epoch, self.log_end_offset)

    # ---- truncation

    def truncate_to(self, offset: int) -> None:
        """Drop every offset >= `offset` (the whole batch holding it, as Kafka does); truncates segments,
        indexes and the epoch cache, durably. A no-op at or past the log end offset."""
        if offset >= self.log_end_offset:
            return
        if offset <= self.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return
        while len(self.segments) > 1 and self.active_segment.base_offset >= offset:
            self.segments.pop().delete()
        self.active_segment.truncate_to(offset)
        self.active_segment.created_ms = self.now_ms
        # Durable before anything that follows it: the epoch checkpoint (saved at once) of the epoch this
        # replica takes next would otherwise outlive a power loss that brings the truncated records back.
        self.active_segment.fsync()
        self.storage.fsync_dir(self.directory)
        self.epoch_cache.truncate_from_end(self.log_end_offset)
        self.cleaner_checkpoint = min(self.cleaner_checkpoint, self.log_end_offset)
        if self.log_start_offset > self.log_end_offset:
            self.log_start_offset = self.log_end_offset
            self._write_log_start_offset()
        self.unflushed_messages = 0
        self._check_invariants()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start empty at `offset` (a follower far behind a leader's log start)."""
        assert offset >= 0, f"offset={offset}"
        for segment in self.segments:
            segment.delete()
        self.segments = [self._new_segment(offset, self.now_ms)]
        self.log_start_offset = offset
        self._write_log_start_offset()
        self.epoch_cache.clear()
        self.cleaner_checkpoint = offset
        self.unflushed_messages = 0
        self._check_invariants()

    # ---- deletion: DeleteRecords and retention

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: advance log_start_offset to `offset` (the caller enforces <= high watermark) and
        delete whole segments below it. Returns the new log_start_offset (the response's low watermark).
        Raises OffsetOutOfRangeError past the log end offset."""
        if offset > self.log_end_offset:
            raise OffsetOutOfRangeError(f"delete before {offset} past the log end offset {self.log_end_offset}")
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self._write_log_start_offset()
            self.epoch_cache.truncate_from_start(offset)
            self._delete_prefix(lambda segment, following: following.base_offset <= self.log_start_offset)
        return self.log_start_offset

    def apply_retention(self, now_ms: int) -> int:
        """Delete closed segments past retention.ms (their largest timestamp) or beyond retention.bytes,
        oldest first and never the active one, when cleanup.policy has "delete". Returns segments deleted."""
        self._now(now_ms)
        deleted = 0
        if self.config.delete and self.config.retention_ms >= 0:
            deadline_ms = now_ms - self.config.retention_ms
            deleted += self._delete_prefix(lambda segment, following: segment.max_timestamp < deadline_ms)
        if self.config.delete and self.config.retention_bytes >= 0:
            excess = [self.size_bytes - self.config.retention_bytes]

            def over_size(segment: LogSegment, following: LogSegment) -> bool:
                if excess[0] - segment.size < 0:
                    return False
                excess[0] -= segment.size
                return True

            deleted += self._delete_prefix(over_size)
        deleted += self._delete_prefix(lambda segment, following: following.base_offset <= self.log_start_offset)
        self.delete_due_files(now_ms)
        return deleted

    def _delete_prefix(self, deletable) -> int:
        """Delete segments from the oldest while `deletable(segment, following)`; never the active one."""
        count = 0
        while len(self.segments) > 1 and deletable(self.segments[0], self.segments[1]):
            self.retire_segment(self.segments.pop(0))
            count += 1
        if count:
            self.storage.fsync_dir(self.directory)
            if self.segments[0].base_offset > self.log_start_offset:
                self.log_start_offset = self.segments[0].base_offset
                self._write_log_start_offset()
                self.epoch_cache.truncate_from_start(self.log_start_offset)
            self.cleaner_checkpoint = max(self.cleaner_checkpoint, self.log_start_offset)
            self._check_invariants()
        return count

    def retire_segment(self, segment: LogSegment) -> None:
        """Rename a segment that left the log to .deleted; its files go after file.delete.delay.ms."""
        segment.change_suffix(DELETED_SUFFIX)
        self.pending_deletions.append((self.now_ms + self.config.file_delete_delay_ms, segment))
        self.clock.timed.add(self)

    def delete_due_files(self, now_ms: int) -> int:
        """Delete the files of segments whose file.delete.delay.ms has passed. Returns how many."""
        due = [entry for entry in self.pending_deletions if entry[0] <= now_ms]
        self.pending_deletions = [entry for entry in self.pending_deletions if entry[0] > now_ms]
        for _, segment in due:
            segment.delete()
        return len(due)

    # ---- compaction

    def compact(self, now_ms: int, first_uncleanable_offset: int | None = None, force: bool = False,
                aborted: list[tuple[int, int, int]] | None = None,
                last_records: dict[int, ProducerLastRecord] | None = None,
                drop_aborted: Callable[[list[tuple[int, int]]], None] | None = None,
                all_replicas_in_sync: bool = True) -> CleanerStats:
        """Compact closed segments below `first_uncleanable_offset` (the caller passes the last stable offset
        or high watermark) when cleanup.policy has "compact" and the dirty ratio reaches
        min.cleanable.dirty.ratio (or `force`). `aborted` lists the aborted transactions as (producer id,
        first offset, marker offset), whose data is removed; `last_records` the active producers' last data
        offset and epoch, whose batches stay (possibly empty); `drop_aborted` receives the (producer id,
        marker offset) of aborted transactions whose index entries must go; `all_replicas_in_sync` whether every
        replica of the partition is in its ISR (else tombstones and markers outlive their delete horizon). The
        whole pass at once (a broker runs it in steps: `start_compaction`). See partitions/cleaner.py. Returns
        CleanerStats."""
        self._now(now_ms)
        cleaning = CleaningPass(self, now_ms, first_uncleanable_offset, force, aborted or [], last_records,
                                drop_aborted, all_replicas_in_sync=all_replicas_in_sync)
        cleaning.advance(None)
        self.delete_due_files(now_ms)
        return cleaning.stats

    def start_compaction(self, now_ms: int, first_uncleanable_offset: int | None = None,
                         aborted: list[tuple[int, int, int]] | None = None,
                         last_records: dict[int, ProducerLastRecord] | None = None,
                         drop_aborted: Callable[[list[tuple[int, int]]], None] | None = None,
                         bugs: frozenset[str] = frozenset(), all_replicas_in_sync: bool = True) -> CleaningPass:
        """`compact`'s pass, to run in steps (partitions/cleaner.py CleaningPass): the caller advances it and,
        once it is done, deletes the files due (`delete_due_files`). `all_replicas_in_sync`: whether every
        replica of the partition is in its ISR (else tombstones and markers outlive their delete horizon)."""
        self._now(now_ms)
        return CleaningPass(self, now_ms, first_uncleanable_offset, False, aborted or [], last_records, drop_aborted,
                            bugs, all_replicas_in_sync)

    # ---- closing

    def close(self) -> None:
        """fsync everything, write the clean-shutdown marker, release every handle. Idempotent."""
        if self.closed:
            return
        self.active_segment.fsync()
        # A new log that never flushed a record has not made its directory's entry in the parent durable
        # yet. The clean-shutdown marker tells the next process that everything is, so it must be: else a
        # later power loss drops the directory with the records that process flushes into it.
        self._sync_parent()
        for _, segment in self.pending_deletions:
            segment.delete()
        self.pending_deletions = []
        for segment in self.segments:
            segment.close()
        write_file_atomically(self.storage, self._path(CLEAN_SHUTDOWN_FILE_NAME), b"")
        self.closed = True

    def delete_directory(self) -> None:
        """Remove the partition entirely (topic deletion or reassignment away)."""
        for _, segment in self.pending_deletions:
            segment.close()
        for segment in self.segments:
            segment.close()
        self.storage.delete_tree(self.directory)
        self.closed = True
