"""The aborted-transaction index of a partition (Kafka's TransactionIndex, one `.txnindex` file per segment).

Theory of operation. Every transaction that ends with an ABORT marker is one entry: producer id, the
transaction's first offset, the marker's offset (last offset) and the partition's last stable offset once
the transaction was decided. A read_committed consumer fetching [start, upper) gets the entries with
`last_offset >= start and first_offset < upper` (Kafka's collectAbortedTransactions) and drops those
producers' records between first and last offset.

Files: `{segment_base:020d}.txnindex` beside the segment holding the marker, each entry in Kafka's layout
(34 bytes, big-endian): version int16 (0), producer_id int64, first_offset int64, last_offset int64,
last_stable_offset int64. Entries are appended as markers are written (leader, follower, recovery scan);
`flush` fsyncs what was appended (before a producer-state snapshot, so a snapshot never covers an entry a
power loss could drop). `sync` follows the log's segments: entries of deleted segments go (retention,
DeleteRecords), entries move with compaction's merged segments, files of vanished segments are deleted.
`remove` drops the entries compaction names: aborted transactions with no data left in the log, whose
markers the cleaner may then delete (partitions/cleaner.py), so no entry outlives its marker.
`truncate_to(offset)` drops entries whose marker is at or past `offset`.

Recovery (`load`): every file is read; a file whose size is not a whole number of entries, or holding an
entry of another version, is reported corrupt (`load` returns False) and the caller rebuilds the index by
scanning the log from its start; entries at or past the log end are dropped. Entries are unique by
(producer_id, last_offset): a rescan re-adds nothing twice.

This module never imports I/O modules: files go through the Storage port.
"""

from __future__ import annotations

import bisect
import posixpath
import struct
from dataclasses import dataclass
from typing import Callable

from partitions.storage import Storage, StorageError, read_file, write_file_atomically

SUFFIX = ".txnindex"
ENTRY = struct.Struct(">hqqqq")
ENTRY_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return ENTRY.pack(ENTRY_VERSION, self.producer_id, self.first_offset, self.last_offset,
                          self.last_stable_offset)


def decode_entries(data: bytes) -> list[AbortedTxn] | None:
    """The entries of a file's bytes, or None when they are not whole entries of version 0."""
    if len(data) % ENTRY.size:
        return None
    entries = []
    for position in range(0, len(data), ENTRY.size):
        version, producer_id, first_offset, last_offset, last_stable_offset = ENTRY.unpack_from(data, position)
        if version != ENTRY_VERSION or first_offset > last_offset or producer_id < 0:
            return None
        entries.append(AbortedTxn(producer_id, first_offset, last_offset, last_stable_offset))
    return entries


class AbortedTxnIndex:
    """The aborted transactions of one partition (see the module docstring). `segment_bases()` returns the
    base offsets of the log's segments, ascending."""

    def __init__(self, storage: Storage, directory: str, segment_bases: Callable[[], list[int]]) -> None:
        self.storage = storage
        self.directory = directory
        self.segment_bases = segment_bases
        self.entries: list[AbortedTxn] = []  # sorted by last_offset
        self._keys: set[tuple[int, int]] = set()
        self._files: dict[int, int] = {}  # segment base -> entries in its file
        self._dirty: set[int] = set()
        self._synced_bases: tuple[int, ...] = ()

    def path(self, base: int) -> str:
        return posixpath.join(self.directory, f"{base:020d}{SUFFIX}")

    # --- reading -------------------------------------------------------------------------------------------

    def collect(self, start_offset: int, upper_bound_offset: int) -> list[tuple[int, int]]:
        """(producer_id, first_offset) of the aborted transactions that overlap [start, upper)."""
        index = bisect.bisect_left(self.entries, start_offset, key=lambda e: e.last_offset)
        return [(e.producer_id, e.first_offset) for e in self.entries[index:] if e.first_offset < upper_bound_offset]

    # --- writing -------------------------------------------------------------------------------------------

    def add(self, entry: AbortedTxn) -> None:
        """Record an aborted transaction whose marker was just appended (in log order). A repeat is ignored."""
        key = (entry.producer_id, entry.last_offset)
        if key in self._keys:
            return
        if self.entries and entry.last_offset < self.entries[-1].last_offset:
            # A rescan found one that a crash lost while later ones survived: rewrite in order.
            self._replace(sorted([*self.entries, entry], key=lambda e: e.last_offset))
            return
        self._keys.add(key)
        self.entries.append(entry)
        base = self._base_for(entry.last_offset)
        handle = self.storage.open(self.path(base))
        try:
            handle.append(entry.encode())
        finally:
            handle.close()
        self._files[base] = self._files.get(base, 0) + 1
        self._dirty.add(base)

    def flush(self) -> None:
        for base in sorted(self._dirty):
            if self.storage.exists(self.path(base)):
                handle = self.storage.open(self.path(base), create=False)
                try:
                    handle.fsync()
                finally:
                    handle.close()
        self._dirty.clear()

    def _base_for(self, offset: int) -> int:
        bases = self.segment_bases()
        index = bisect.bisect_right(bases, offset) - 1
        return bases[max(index, 0)]

    # --- following the log ---------------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or past `offset` (the log was truncated there)."""
        kept = [e for e in self.entries if e.last_offset < offset]
        if len(kept) != len(self.entries):
            self._replace(kept)
        else:
            self.sync()

    def remove(self, keys: list[tuple[int, int]]) -> None:
        """Drop the entries (producer_id, last_offset) of aborted transactions that compaction left without
        data (Kafka's cleaner rebuilds a cleaned segment's index without them), rewriting their files now."""
        gone = set(keys) & self._keys
        if gone:
            self._replace([e for e in self.entries if (e.producer_id, e.last_offset) not in gone])

    def clear(self) -> None:
        self._replace([])

    def sync(self) -> None:
        """Follow segment deletions and merges: rewrite the files whose entries moved or went."""
        bases = tuple(self.segment_bases())
        if bases == self._synced_bases:
            return
        self._synced_bases = bases
        first = bases[0] if bases else 0
        self._replace([e for e in self.entries if e.last_offset >= first])

    def _replace(self, entries: list[AbortedTxn]) -> None:
        bases = self.segment_bases()
        self._synced_bases = tuple(bases)
        grouped: dict[int, list[AbortedTxn]] = {}
        for entry in entries:
            index = bisect.bisect_right(bases, entry.last_offset) - 1
            grouped.setdefault(bases[max(index, 0)], []).append(entry)
        on_disk = set(self._list_files())
        for base in sorted(on_disk | set(grouped)):
            wanted = grouped.get(base)
            if not wanted:
                self.storage.delete(self.path(base))
            elif base not in on_disk or self._files.get(base) != len(wanted) or self._file_entries(base) != wanted:
                write_file_atomically(self.storage, self.path(base), b"".join(e.encode() for e in wanted))
        self.entries = list(entries)
        self._keys = {(e.producer_id, e.last_offset) for e in entries}
        self._files = {base: len(wanted) for base, wanted in grouped.items()}
        self._dirty.clear()

    def _list_files(self) -> list[int]:
        bases = []
        for name in self.storage.list(self.directory):
            stem = name[: -len(SUFFIX)]
            if name.endswith(SUFFIX) and len(stem) == 20 and stem.isdigit():
                bases.append(int(stem))
        return sorted(bases)

    def _file_entries(self, base: int) -> list[AbortedTxn] | None:
        try:
            return decode_entries(read_file(self.storage, self.path(base)))
        except StorageError:
            return None

    # --- recovery ------------------------------------------------------------------------------------------

    def load(self, log_start_offset: int, log_end_offset: int) -> bool:
        """Read every file; False (and nothing loaded, the files deleted) when one is corrupt, so the caller
        rebuilds from a scan of the whole log. Entries outside the log are dropped."""
        loaded: list[AbortedTxn] = []
        for base in self._list_files():
            entries = self._file_entries(base)
            if entries is None:
                for other in self._list_files():
                    self.storage.delete(self.path(other))
                self.entries, self._keys, self._files = [], set(), {}
                return False
            loaded += entries
        loaded.sort(key=lambda e: e.last_offset)
        unique, seen = [], set()
        for entry in loaded:
            key = (entry.producer_id, entry.last_offset)
            if key not in seen and entry.last_offset < log_end_offset:
                seen.add(key)
                unique.append(entry)
        self.entries = unique
        self._replace(unique)
        return True
