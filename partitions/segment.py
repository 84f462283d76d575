"""One log segment: Kafka's `LogSegment`, a .log file of record batches plus its two sparse indexes.

Files, named by the segment's base offset (the first offset it may hold), in the partition directory:

    00000000000000000000.log         record batches (v2), back to back, exactly as appended
    00000000000000000000.index       OffsetIndex: last offset of a batch -> its start position
    00000000000000000000.timeindex   TimeIndex: largest timestamp so far -> last offset of its batch

A suffix (".cleaned", ".swap", ".deleted") marks a segment that is being written by the cleaner, is being
swapped in, or waits for deletion (Kafka's protocol; see partitions/log.py for the recovery rules).

Theory of operation: the segment never decodes records. Appends write the already-stamped batches in one
write and add index entries every `index_interval_bytes`. Reads find the batch holding an offset through the
offset index and a forward scan of 61-byte headers, then hand out (handle, position, size) slices; the bytes
are read with one positional read per slice, or sent with os.sendfile by the edge. The positions and last
offsets of the most recently accounted batches (at least TAIL_BATCHES, at most twice that) are also kept in
memory, so a reader near the end of the log (a follower, a tailing consumer: most fetches) is placed
without a header read: `tail_span`.

Guarantees: after `recover`, the .log holds only whole batches with valid CRCs and increasing offsets, and
both indexes are consistent with it. `next_offset` is one past the last offset held (the base offset while
empty); `max_timestamp` is the largest batch max_timestamp (-1 while empty).
"""

from __future__ import annotations

import posixpath
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import crc32c

from partitions.batch import HEADER_SIZE, BatchHeader, parse_header, peek_offset_and_length, validate_batch
from partitions.errors import CorruptRecordError, KafkaError
from partitions.index import RELATIVE_OFFSET_MAX, OffsetIndex, TimeIndex
from partitions.storage import FileHandle, Storage, StorageError

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
FILE_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)
CLEANED_SUFFIX = ".cleaned"  # being written by the cleaner; deleted on recovery
SWAP_SUFFIX = ".swap"  # fully written replacement; recovery completes the swap
DELETED_SUFFIX = ".deleted"  # waiting for file.delete.delay.ms; deleted on recovery
RECOVERY_READ_BYTES_MAX = 8 * 1024 * 1024  # recovery reads the log in chunks of this size (or one batch)
NO_TIMESTAMP = -1
TAIL_BATCHES = 64  # batches placed from memory: kept between this and twice this (16 bytes each)


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def join(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory else name


class LazyLogFile:
    """The .log handle of a log's first segment in a directory without segments: the file is created with its
    first write. Until then it is an empty file that is not there, and a restart finds a directory without
    segments, which is the same empty log. A new replica costs one file creation less (partitions/log.py
    PartitionLog.open).

    `before_create` runs just before the file is created (the broker writes partition.metadata then). The
    name of the file becomes durable with the first fsync, which also fsyncs its directory and then calls
    `after_first_sync` (the log syncs a new directory's entry in its parent then): a flushed record never
    sits in a file whose name, or whose directory's, a power loss can drop."""

    def __init__(self, storage: Storage, path: str, before_create: Callable[[], None] | None = None,
                 after_first_sync: Callable[[], None] | None = None) -> None:
        self.path = path
        self._storage = storage
        self._handle: FileHandle | None = None
        self._before_create = before_create
        self._after_first_sync = after_first_sync
        self._name_unsynced = False
        self._closed = False

    @property
    def created(self) -> bool:
        return self._handle is not None

    def _file(self) -> FileHandle:
        if self._handle is None:
            if self._closed:
                raise StorageError(f"file is closed: {self.path}")
            if self._before_create is not None:
                self._before_create()
            self._handle = self._storage.open(self.path)
            self._name_unsynced = True
        return self._handle

    def size(self) -> int:
        return 0 if self._handle is None else self._handle.size()

    def append(self, data: bytes | bytearray | memoryview) -> int:
        return self._file().append(data)

    def write_at(self, position: int, data: bytes | bytearray | memoryview) -> None:
        self._file().write_at(position, data)

    def read_at(self, position: int, size: int) -> bytes:
        return b"" if self._handle is None else self._handle.read_at(position, size)

    def truncate(self, size: int) -> None:
        if self._handle is not None:
            self._handle.truncate(size)

    def fsync(self) -> None:
        if self._handle is None:
            return
        self._handle.fsync()
        if self._name_unsynced:
            self._storage.fsync_dir(posixpath.dirname(self.path))
            if self._after_first_sync is not None:
                self._after_first_sync()
            self._name_unsynced = False

    def fileno(self) -> int | None:
        return None if self._handle is None else self._handle.fileno()

    def close(self) -> None:
        self._closed = True
        if self._handle is not None:
            self._handle.close()


class BatchPlacement(NamedTuple):
    """Where one batch of an append lands: its place in the appended buffer and its key numbers."""

    buffer_position: int
    size: int
    last_offset: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    valid_bytes: int
    truncated_bytes: int
    batch_count: int
    reason: str | None  # why the scan stopped early, None when the whole file was valid


class LogSegment:
    """A .log file and its indexes. Owned by one PartitionLog; not thread-safe."""

    def __init__(
        self,
        storage: Storage,
        directory: str,
        base_offset: int,
        index_bytes_max: int,
        index_interval_bytes: int,
        created_ms: int,
        suffix: str = "",
        lazy_log: Callable[[str], LazyLogFile] | None = None,
    ) -> None:
        self.storage = storage
        self.directory = directory
        self.base_offset = base_offset
        self.suffix = suffix
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = created_ms
        # segment.jitter.ms's draw for this segment (LogConfig.roll_ms): its partition and base offset's checksum
        self.jitter_seed = crc32c.crc32c(f"{directory}/{base_offset}".encode())
        # `lazy_log` makes the .log handle for this segment's path when the file is to wait for its first write
        log_path = self.path(LOG_SUFFIX)
        self.log: FileHandle = storage.open(log_path) if lazy_log is None else lazy_log(log_path)
        self.offset_index = OffsetIndex(storage, self.path(INDEX_SUFFIX), base_offset, index_bytes_max)
        self.time_index = TimeIndex(storage, self.path(TIME_INDEX_SUFFIX), base_offset, index_bytes_max)
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self.first_batch_timestamp: int | None = None
        self.bytes_since_last_index_entry = 0
        # The tail window: start positions and last offsets of the latest batches, contiguous, ending at _tail_end.
        self._tail_positions = array("q")
        self._tail_last_offsets = array("q")
        self._tail_end = 0
        # Handles replaced by a rename stay open until delete/close: a fetch may still be sending from them.
        self.retired_handles: list[FileHandle] = []

    def path(self, file_suffix: str, suffix: str | None = None) -> str:
        name = segment_file_name(self.base_offset, file_suffix + (self.suffix if suffix is None else suffix))
        return join(self.directory, name)

    @property
    def size(self) -> int:
        return self.log.size()

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    @property
    def last_offset(self) -> int:
        return self.next_offset - 1

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, next={self.next_offset}, size={self.size}{self.suffix})"

    # ---- appending

    def append(self, pieces: list[bytes | bytearray | memoryview], placements: list[BatchPlacement]) -> None:
        """Write already-stamped batches (the concatenation of `pieces`, one write each) and index them.
        The caller checked should_roll."""
        assert placements, "append of nothing"
        assert placements[0].last_offset >= self.next_offset, f"{placements[0]} behind {self}"
        position = self.log.append(pieces[0])
        for piece in pieces[1:]:
            self.log.append(piece)
        for placement in placements:
            self._account_batch(position + placement.buffer_position, placement)

    def _account_batch(self, position: int, placement: BatchPlacement) -> None:
        if placement.max_timestamp > self.max_timestamp:
            self.max_timestamp = placement.max_timestamp
            self.offset_of_max_timestamp = placement.last_offset
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = placement.max_timestamp
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(placement.last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += placement.size
        self.next_offset = placement.last_offset + 1
        positions = self._tail_positions  # batches are accounted in file order, each where the last one ended
        if len(positions) >= 2 * TAIL_BATCHES:
            del positions[:TAIL_BATCHES], self._tail_last_offsets[:TAIL_BATCHES]
        positions.append(position)
        self._tail_last_offsets.append(placement.last_offset)
        self._tail_end = position + placement.size

    def should_roll(self, incoming_bytes: int, incoming_last_offset: int, segment_bytes: int, segment_ms: int,
                    now_ms: int) -> str | None:
        """Why a new segment must take an append of `incoming_bytes`, or None (Kafka's shouldRoll)."""
        if self.is_empty:
            if incoming_last_offset - self.base_offset > RELATIVE_OFFSET_MAX:
                return "offset overflow"
            return None
        if self.size > segment_bytes - incoming_bytes:
            return "segment.bytes"
        if now_ms - self.rolling_base_ms >= segment_ms:
            return "segment.ms"
        if self.offset_index.is_full or self.time_index.is_full:
            return "index full"
        if incoming_last_offset - self.base_offset > RELATIVE_OFFSET_MAX:
            return "offset overflow"
        return None

    @property
    def rolling_base_ms(self) -> int:
        """The time segment.ms counts from: when the segment was created in this process, else when recovered."""
        return self.created_ms

    # ---- reading

    def batch_headers(self, position: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from `position` (a batch start), one 61-byte read per batch."""
        end = self.size if end is None else end
        while end - position >= HEADER_SIZE:
            header = parse_header(self.log.read_at(position, HEADER_SIZE))
            yield position, header
            position += header.size

    def translate_offset(self, offset: int, start_position: int = 0) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch whose last offset is >= `offset`, or None."""
        _, indexed_position = self.offset_index.lookup(offset)
        for position, header in self.batch_headers(max(indexed_position, start_position)):
            if header.last_offset >= offset:
                return position, header
        return None

    def tail_span(self, offset: int, max_offset: int | None, max_bytes: int) -> tuple[int, int, int] | None:
        """From the in-memory tail window, without I/O: (start, end, first_end) where `start` is the position
        of the batch holding `offset`, `first_end` where that batch ends, and `end` the greatest batch boundary
        at most `max_bytes` past `start` below the first batch holding an offset >= `max_offset` (end == start:
        not even the first batch fits; start == first_end == end: the first batch is at or past `max_offset`).
        None when the window cannot tell (`offset` not past the window's first batch, or past its end): the
        caller scans as `translate_offset` does."""
        lasts = self._tail_last_offsets
        if not lasts or offset <= lasts[0] or offset > lasts[-1] or self._tail_end != self.log.size():
            return None
        positions, tail_end = self._tail_positions, self._tail_end
        count = len(lasts)
        first = bisect_left(lasts, offset)  # >= 1: the batch before it ends below `offset`
        start = positions[first]
        first_end = positions[first + 1] if first + 1 < count else tail_end
        if max_offset is not None and lasts[first] >= max_offset:
            return start, start, start
        limit = tail_end
        if max_offset is not None:
            stop = bisect_left(lasts, max_offset, first)
            if stop < count:
                limit = positions[stop]
        cap = min(limit, start + max_bytes)
        end = tail_end if tail_end <= cap else positions[bisect_right(positions, cap, first) - 1]
        return start, end, first_end

    def base_offset_at(self, position: int) -> int:
        """The base offset of the batch starting at `position` (a batch start below the segment's size)."""
        return peek_offset_and_length(self.log.read_at(position, 12))[0]

    def batch_boundary_at_or_before(self, limit: int, start: int) -> int:
        """The greatest batch start (or end of the log) b with start <= b <= `limit`; `start` is a batch start."""
        limit = min(limit, self.size)
        position = max(start, self.offset_index.position_floor(limit) or 0)
        while limit - position >= 12:
            _, size = peek_offset_and_length(self.log.read_at(position, 12))
            if size < HEADER_SIZE:
                # A length no valid batch has: the bytes on disk changed under us (read corruption).
                raise CorruptRecordError(f"{self.log.path}: batch length {size} at position {position}")
            if position + size > limit:
                break
            position += size
        return position

    def find_batch_by_timestamp(self, timestamp_ms: int, start_offset: int) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch at or after `start_offset` with max_timestamp >= `timestamp_ms`."""
        entry = self.time_index.lookup(timestamp_ms)
        from_offset = max(entry[1] if entry else self.base_offset, start_offset)
        _, position = self.offset_index.lookup(from_offset)
        for position, header in self.batch_headers(position):
            if header.last_offset >= start_offset and header.max_timestamp >= timestamp_ms:
                return position, header
        return None

    def read_batch(self, position: int, header: BatchHeader) -> bytes:
        return self.log.read_at(position, header.size)

    # ---- recovery and truncation

    def recover(self, max_offset_hint: int | None = None) -> RecoveryResult:
        """Rebuild both indexes from the log, validating every batch (header, CRC, increasing offsets), and
        cut the log after the last valid batch. Returns what was kept and dropped."""
        self.offset_index.reset()
        self.time_index.reset()
        self._reset_stats()
        size = self.size
        position, count, reason = 0, 0, None
        for position_or_end, header_or_reason in self._scan_valid(size):
            if header_or_reason is None or isinstance(header_or_reason, str):
                position, reason = position_or_end, header_or_reason
                break
            header = header_or_reason
            count += 1
            placement = BatchPlacement(0, header.size, header.last_offset, header.max_timestamp)
            self._account_batch(position_or_end, placement)
        if position < size:
            self.log.truncate(position)
        return RecoveryResult(position, size - position, count, reason)

    def _scan_valid(self, size: int) -> Iterator[tuple[int, BatchHeader | str | None]]:
        """Yield (position, header) per valid batch, then (end_position, reason-or-None) once."""
        position = 0
        while position < size:
            chunk = self.log.read_at(position, min(RECOVERY_READ_BYTES_MAX, size - position))
            consumed = 0
            while len(chunk) - consumed >= HEADER_SIZE:
                try:
                    header = parse_header(chunk, consumed)
                except KafkaError as error:
                    yield position + consumed, f"bad header: {error}"
                    return
                if consumed + header.size > len(chunk):
                    if consumed == 0 and position + header.size <= size:
                        chunk, consumed = self.log.read_at(position, header.size), 0
                        continue
                    break
                reason = self._batch_problem(memoryview(chunk)[consumed : consumed + header.size], header)
                if reason:
                    yield position + consumed, reason
                    return
                yield position + consumed, header
                consumed += header.size
            if consumed == 0:
                yield position, f"torn batch: {size - position} trailing bytes"
                return
            position += consumed
        yield position, None

    def _batch_problem(self, batch: memoryview, header: BatchHeader) -> str | None:
        try:
            validate_batch(batch)
        except KafkaError as error:
            return f"invalid batch: {error}"
        if header.base_offset < self.next_offset:
            return f"batch base offset {header.base_offset} below the segment's next offset {self.next_offset}"
        if header.last_offset - self.base_offset > RELATIVE_OFFSET_MAX:
            return f"batch last offset {header.last_offset} too far from base {self.base_offset}"
        return None

    def _reset_stats(self) -> None:
        del self._tail_positions[:], self._tail_last_offsets[:]
        self._tail_end = 0
        self.next_offset = self.base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = self.base_offset
        self.first_batch_timestamp = None
        self.bytes_since_last_index_entry = 0

    def load_after_clean_shutdown(self) -> str | None:
        """Trust the files (clean shutdown): take the stats from the indexes plus a header scan of the tail.
        Returns why the segment needs a full `recover` instead (an insane index or a torn tail), or None."""
        problem = self.offset_index.sanity_error(self.size)
        if problem is None:
            self._reset_stats()
            last = self.time_index.last_entry
            if last is not None:
                self.max_timestamp, self.offset_of_max_timestamp = last
            problem = self._scan_tail()
        if problem is None:
            problem = self.time_index.sanity_error(self.next_offset)
        return problem

    def _scan_tail(self) -> str | None:
        start = self.offset_index.values[-1] if len(self.offset_index) else 0
        if len(self.offset_index):
            self.next_offset = self.offset_index.keys[-1]
        end = start
        try:
            for position, header in self.batch_headers(start):
                if position + header.size > self.size:
                    return "torn tail"
                if position == 0:
                    self.first_batch_timestamp = header.max_timestamp
                self._account_batch(position, BatchPlacement(0, header.size, header.last_offset, header.max_timestamp))
                end = position + header.size
        except KafkaError as error:
            return f"bad header in tail: {error}"
        if end != self.size:
            return "torn tail"
        if self.first_batch_timestamp is None and self.size:
            self.first_batch_timestamp = parse_header(self.log.read_at(0, HEADER_SIZE)).max_timestamp
        return None

    def truncate_to(self, offset: int) -> int:
        """Drop the batch holding `offset` and everything after it. Returns the bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position, header = found
        size = self.size
        self.offset_index.truncate_to_position(position)
        self.time_index.truncate_to(header.base_offset)
        self.log.truncate(position)
        problem = self.load_after_clean_shutdown()
        assert problem is None, f"{self} inconsistent after truncation: {problem}"
        self.bytes_since_last_index_entry = 0
        return size - position

    # ---- files

    def seal(self) -> None:
        """The segment stops being active: record its largest timestamp in the time index, fsync everything."""
        if self.max_timestamp != NO_TIMESTAMP and not self.time_index.is_full:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.fsync()

    def fsync(self) -> None:
        self.log.fsync()
        self.offset_index.fsync()
        self.time_index.fsync()

    def change_suffix(self, suffix: str) -> None:
        """Rename the three files to carry `suffix` (atomically each; the caller fsyncs the directory)."""
        if suffix == self.suffix:
            return
        uncreated = isinstance(self.log, LazyLogFile) and not self.log.created
        if uncreated:
            self.storage.delete(self.path(LOG_SUFFIX, suffix))  # what an old file there held is not this log
        else:
            self.retired_handles.append(self.log)
            self.storage.rename(self.path(LOG_SUFFIX), self.path(LOG_SUFFIX, suffix))
        self.offset_index.rename(self.path(INDEX_SUFFIX, suffix))
        self.time_index.rename(self.path(TIME_INDEX_SUFFIX, suffix))
        self.suffix = suffix
        path = self.path(LOG_SUFFIX)
        if uncreated:
            self.log.path = path
        else:
            self.log = self.storage.open(path)

    def close(self) -> None:
        for handle in self.retired_handles:
            handle.close()
        self.retired_handles.clear()
        self.log.close()
        self.offset_index.close()
        self.time_index.close()

    def delete(self) -> None:
        self.close()
        for file_suffix in FILE_SUFFIXES:
            self.storage.delete(self.path(file_suffix))
