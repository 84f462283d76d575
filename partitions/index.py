"""Sparse segment indexes: Kafka's `OffsetIndex` (.index) and `TimeIndex` (.timeindex).

File layouts (big-endian, fixed-size entries, Kafka's formats; offsets are relative to the segment's base):

    .index       relative_offset u32 | position u32         8 bytes per entry
    .timeindex   timestamp i64       | relative_offset u32  12 bytes per entry

Theory of operation: a segment adds one offset index entry per `index.interval.bytes` of log appended; the
entry maps the *last* offset of the batch to the batch's start position (as Kafka does, so kafka-dump-log's
index check holds). Lookup returns the greatest entry whose offset is <= the target; the segment then scans
batch headers forward from that position. The time index maps the largest timestamp seen so far to the last
offset of the batch that carried it; it only grows when the timestamp grows.

Invariants: entries are strictly increasing in offset (and position / timestamp); the file holds exactly
the entries in memory (no preallocation, so no trailing zeros to trim). The file is created with its first
entry (Kafka's LazyIndex creates it on first use): a missing file is an empty index, so a new replica costs
one file (its .log) rather than three, and a segment without entries never has one. An index is only a hint:
when it is missing, torn or insane (`sanity_error`), the segment rebuilds it from the log. Entries are kept in memory
as well, so lookups never touch the file.
"""

from __future__ import annotations

import bisect
import struct

from partitions.storage import FileHandle, Storage

OFFSET_ENTRY = struct.Struct(
    ">I"  # relative_offset
    "I"  # position in the .log file
)
TIME_ENTRY = struct.Struct(
    ">q"  # timestamp_ms
    "I"  # relative_offset
)
RELATIVE_OFFSET_MAX = (1 << 31) - 1  # Kafka keeps relative offsets in an int
# New entries are buffered and written in blocks of this size (Kafka writes its indexes through mmap): an
# index is flushed to its file on fsync, close, rename and truncation, and the active segment's indexes
# are rebuilt from the log after a crash anyway.
INDEX_WRITE_BUFFER_BYTES = 4096


class _SparseIndex:
    """Entries (key, value) with strictly increasing keys, mirrored in an append-only file."""

    entry: struct.Struct

    def __init__(self, storage: Storage, path: str, base_offset: int, index_bytes_max: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.entries_max = max(1, index_bytes_max // self.entry.size)
        self._storage = storage
        self._handle: FileHandle | None = storage.open(path) if storage.exists(path) else None
        self.keys: list[int] = []
        self.values: list[int] = []
        self.torn = False
        self._pending = bytearray()
        if self._handle is not None:
            self._load(self._handle)

    def _load(self, handle: FileHandle) -> None:
        size = handle.size()
        data = handle.read_at(0, size)
        whole = size - size % self.entry.size
        self.torn = whole != size
        for key, value in self.entry.iter_unpack(memoryview(data)[:whole]):
            self._add(*self._from_entry(key, value))

    def _from_entry(self, first: int, second: int) -> tuple[int, int]:
        raise NotImplementedError

    def _to_entry(self, key: int, value: int) -> bytes:
        raise NotImplementedError

    def _add(self, key: int, value: int) -> None:
        self.keys.append(key)
        self.values.append(value)

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def is_full(self) -> bool:
        return len(self.keys) >= self.entries_max

    @property
    def size_bytes(self) -> int:
        return len(self.keys) * self.entry.size

    def append(self, key: int, value: int) -> None:
        assert not self.is_full, f"index {self.path} full at {len(self.keys)} entries"
        assert not self.keys or key > self.keys[-1], f"index {self.path} key {key} after {self.keys[-1]}"
        self._pending += self._to_entry(key, value)
        self._add(key, value)
        if len(self._pending) >= INDEX_WRITE_BUFFER_BYTES:
            self.write_pending()

    def write_pending(self) -> None:
        """Write buffered entries to the file (not fsynced), creating it with the first ones."""
        if self._pending:
            if self._handle is None:
                self._handle = self._storage.open(self.path)
            self._handle.append(self._pending)
            self._pending = bytearray()

    def floor(self, key: int) -> int | None:
        """Position in the entry lists of the greatest key <= `key`, or None."""
        slot = bisect.bisect_right(self.keys, key) - 1
        return slot if slot >= 0 else None

    def _truncate_entries(self, count: int) -> None:
        self.write_pending()
        del self.keys[count:]
        del self.values[count:]
        if self._handle is not None:
            self._handle.truncate(count * self.entry.size)

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self._truncate_entries(0)
        self.torn = False

    def fsync(self) -> None:
        self.write_pending()
        if self._handle is not None:  # no file: an empty index, nothing to make durable
            self._handle.fsync()

    def close(self) -> None:
        self.write_pending()
        if self._handle is not None:
            self._handle.close()

    def rename(self, path: str) -> None:
        """Rename the file and keep using it (the storage's rename keeps the bytes)."""
        self.write_pending()
        if self._handle is None:
            self._storage.delete(path)  # what an old file there held is not this empty index
        else:
            self._handle.close()
            self._storage.rename(self.path, path)
            self._handle = self._storage.open(path)
        self.path = path

    def delete(self) -> None:
        self._pending = bytearray()
        if self._handle is not None:
            self._handle.close()
        self._storage.delete(self.path)


class OffsetIndex(_SparseIndex):
    """Offset -> .log position. `keys` are absolute offsets, `values` positions."""

    entry = OFFSET_ENTRY

    def _from_entry(self, first: int, second: int) -> tuple[int, int]:
        return self.base_offset + first, second

    def _to_entry(self, key: int, value: int) -> bytes:
        relative = key - self.base_offset
        assert 0 <= relative <= RELATIVE_OFFSET_MAX, f"offset {key} not relative to {self.base_offset}"
        return OFFSET_ENTRY.pack(relative, value)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the greatest entry with offset <= `offset`; (base_offset, 0) if none."""
        slot = self.floor(offset)
        if slot is None:
            return self.base_offset, 0
        return self.keys[slot], self.values[slot]

    def position_floor(self, position: int) -> int | None:
        """The greatest indexed batch start position <= `position` (a batch boundary), or None."""
        slot = bisect.bisect_right(self.values, position) - 1
        return self.values[slot] if slot >= 0 else None

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset >= `offset`."""
        self._truncate_entries(bisect.bisect_left(self.keys, offset))

    def truncate_to_position(self, position: int) -> None:
        """Remove every entry pointing at or past `position` of the log."""
        self._truncate_entries(bisect.bisect_left(self.values, position))

    def sanity_error(self, log_size: int) -> str | None:
        """Why this index cannot be trusted for a log of `log_size` bytes, or None when it is sane."""
        if self.torn:
            return f"{self.path}: size is not a multiple of {self.entry.size}"
        for slot in range(len(self.keys)):
            if self.keys[slot] < self.base_offset or self.values[slot] >= max(log_size, 1):
                return f"{self.path}: entry {slot} ({self.keys[slot]}, {self.values[slot]}) outside the segment"
            if slot and (self.keys[slot] <= self.keys[slot - 1] or self.values[slot] <= self.values[slot - 1]):
                return f"{self.path}: entry {slot} is not increasing"
        return None


class TimeIndex(_SparseIndex):
    """Timestamp -> offset. `keys` are timestamps (ms), `values` absolute offsets."""

    entry = TIME_ENTRY

    def _from_entry(self, first: int, second: int) -> tuple[int, int]:
        return first, self.base_offset + second

    def _to_entry(self, key: int, value: int) -> bytes:
        relative = value - self.base_offset
        assert 0 <= relative <= RELATIVE_OFFSET_MAX, f"offset {value} not relative to {self.base_offset}"
        return TIME_ENTRY.pack(key, relative)

    def maybe_append(self, timestamp_ms: int, offset: int) -> None:
        """Add (timestamp, offset) if the timestamp grew (Kafka's maybeAppend) and there is room."""
        if (not self.keys or timestamp_ms > self.keys[-1]) and not self.is_full:
            if self.values and offset <= self.values[-1]:
                return
            self.append(timestamp_ms, offset)

    def lookup(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the greatest entry with timestamp <= `timestamp_ms`, or None."""
        slot = self.floor(timestamp_ms)
        return None if slot is None else (self.keys[slot], self.values[slot])

    @property
    def last_entry(self) -> tuple[int, int] | None:
        return (self.keys[-1], self.values[-1]) if self.keys else None

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset >= `offset`."""
        self._truncate_entries(bisect.bisect_left(self.values, offset))

    def sanity_error(self, next_offset: int) -> str | None:
        """Why this index cannot be trusted for a segment ending before `next_offset`, or None."""
        if self.torn:
            return f"{self.path}: size is not a multiple of {self.entry.size}"
        for slot in range(len(self.keys)):
            if not self.base_offset <= self.values[slot] < max(next_offset, self.base_offset + 1):
                return f"{self.path}: entry {slot} offset {self.values[slot]} outside the segment"
            if slot and (self.keys[slot] <= self.keys[slot - 1] or self.values[slot] < self.values[slot - 1]):
                return f"{self.path}: entry {slot} is not increasing"
        return None
