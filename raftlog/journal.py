"""The durable raft journal: pysyncobj's Journal interface over the Storage port, with group commit.

Theory of operation: one append-only file `<directory>/raft.journal` of records

    u32 body_length (big-endian) | u32 crc32(body) | body = CBOR list, one of
        ["E", index, term, command]        a log entry appended
        ["T", index]                       entries with index >= `index` were deleted (conflict truncation)
        ["M", current_term, voted_for, raft_commit_index]   the persistent raft state

Writes are buffered in memory during a driver step and reach the file, followed by one fsync, in `flush()`;
the driver calls `flush()` before it releases any message or completion produced by that step (group
commit), so nothing this node said or acknowledged can be forgotten by a power loss (bug C). Replay reads
records until the first torn or corrupt one and cuts the file there: only an un-fsynced tail can be torn,
and nothing in it was ever acknowledged. Torn means: a short header or body, a CRC mismatch, a zero body
length (a power loss can leave a zero-filled tail, and crc32(b"") == 0 would let an all-zero header pass),
or a body that does not decode to a known record. Clearing or compacting the head (`clear`,
`deleteEntriesTo`) rewrites the file atomically (temp file, fsync, rename, directory fsync), as does a file
that has grown to more than twice its live size; the in-memory entries change only once the rewrite is
durable, so a failed rewrite never leaves the journal empty behind pysyncobj's back.

Opening fsyncs the journal's directory and every ancestor up to the storage root: `makedirs` of a fresh
node creates directory entries that a power loss would otherwise take back, with the whole journal in them.

Invariants: the in-memory entry list is contiguous in index; the file replays to exactly that list and
that meta once flushed. Never imports os: all file access goes through `partitions.storage`.
"""

from __future__ import annotations

import posixpath
import struct
import zlib
from typing import Any

import cbor2
from pysyncobj.journal import Journal

from partitions.storage import Storage, StorageError, normalize_path, write_file_atomically
from raftlog.port import RaftStorageError

JOURNAL_FILE_NAME = "raft.journal"
_RECORD_HEADER = struct.Struct(">II")  # body length in bytes, CRC-32 of the body
record_bytes_max = 64 * 1024 * 1024

Entry = tuple[bytes, int, int]  # (command, index, term), pysyncobj's shape


def _record(body: list[Any]) -> bytes:
    payload = cbor2.dumps(body)
    assert len(payload) <= record_bytes_max, f"journal record of {len(payload)} bytes > {record_bytes_max}"
    return _RECORD_HEADER.pack(len(payload), zlib.crc32(payload)) + payload


_RECORD_ARITY = {"E": 4, "T": 2, "M": 4}  # record kind -> list length


def _decode_body(data: bytes, body_start: int, length: int, crc: int) -> list[Any] | None:
    """The record body at `body_start`, or None when it is torn: short, zero-length, CRC mismatch, or not
    a well-formed record (a zero-filled tail has length 0 and CRC 0, and crc32(b"") == 0)."""
    if length == 0 or body_start + length > len(data):
        return None
    payload = data[body_start : body_start + length]
    if zlib.crc32(payload) != crc:
        return None
    try:
        body = cbor2.loads(payload)
    except (cbor2.CBORDecodeError, ValueError, TypeError, EOFError):
        return None
    if not isinstance(body, list) or not body or not isinstance(body[0], str) or _RECORD_ARITY.get(body[0]) != len(body):
        return None
    return body


def _fsync_directory_chain(storage: Storage, directory: str) -> None:
    """Make `directory` and each of its ancestors durable entries of their parents (deepest first), then
    the directory's own entries. Raises StorageError."""
    child = directory
    while child:
        parent = posixpath.dirname(child)
        storage.fsync_dir(parent)
        child = parent
    storage.fsync_dir(directory)


class StorageJournal(Journal):
    """pysyncobj `Journal` backed by a Storage file; see the module docstring for format and durability."""

    def __init__(self, storage: Storage, directory: str, rewrite_bytes_min: int) -> None:
        self._storage = storage
        self._directory = normalize_path(directory)
        self._path = f"{self._directory}/{JOURNAL_FILE_NAME}" if self._directory else JOURNAL_FILE_NAME
        self._rewrite_bytes_min = rewrite_bytes_min
        self._entries: list[Entry] = []
        self._entry_bytes: list[int] = []
        self._current_term = 0
        self._voted_for: int | None = None
        self._raft_commit_index = 1
        self._pending = bytearray()
        self._meta_dirty = False
        self._file_bytes = 0
        storage.makedirs(self._directory)
        self._handle = storage.open(self._path)
        _fsync_directory_chain(storage, self._directory)
        self._replay()

    # -- replay ----------------------------------------------------------------------------------------
    def _replay(self) -> None:
        size = self._handle.size()
        data = self._handle.read_at(0, size)
        position = 0
        while position + _RECORD_HEADER.size <= size:
            length, crc = _RECORD_HEADER.unpack_from(data, position)
            body_start = position + _RECORD_HEADER.size
            body = _decode_body(data, body_start, length, crc)
            if body is None:
                break
            self._replay_record(body, _RECORD_HEADER.size + length)
            position = body_start + length
        if position != size:
            # A torn tail: never fsynced, hence never acknowledged; cut it so appends follow valid records.
            self._handle.truncate(position)
            self._handle.fsync()
        self._file_bytes = position

    def _replay_record(self, body: list[Any], record_size: int) -> None:
        kind = body[0]
        if kind == "E":
            _, index, term, command = body
            if self._entries and index != self._entries[-1][1] + 1:
                raise RaftStorageError(f"journal {self._path}: entry {index} after {self._entries[-1][1]}")
            self._entries.append((bytes(command), index, term))
            self._entry_bytes.append(record_size)
        elif kind == "T":
            self._drop_from_index(body[1])
        elif kind == "M":
            _, self._current_term, self._voted_for, self._raft_commit_index = body
        else:
            raise RaftStorageError(f"journal {self._path}: unknown record kind {kind!r}")

    def _drop_from_index(self, index: int) -> None:
        if self._entries:
            keep = max(0, index - self._entries[0][1])
            del self._entries[keep:]
            del self._entry_bytes[keep:]

    # -- pysyncobj Journal interface -------------------------------------------------------------------
    def add(self, command: bytes, idx: int, term: int) -> None:
        command = bytes(command)
        if self._entries:
            assert idx == self._entries[-1][1] + 1, f"journal add idx={idx} after {self._entries[-1][1]}"
        record = _record(["E", idx, term, command])
        self._entries.append((command, idx, term))
        self._entry_bytes.append(len(record))
        self._pending += record

    def clear(self) -> None:
        self._rewrite([], [])

    def deleteEntriesFrom(self, entryFrom: int) -> None:  # noqa: N802,N803  (pysyncobj's names)
        if entryFrom >= len(self._entries):
            return
        first_deleted = self._entries[entryFrom][1]
        del self._entries[entryFrom:]
        del self._entry_bytes[entryFrom:]
        self._pending += _record(["T", first_deleted])

    def deleteEntriesTo(self, entryTo: int) -> None:  # noqa: N802,N803
        self._rewrite(self._entries[entryTo:], self._entry_bytes[entryTo:])

    def __getitem__(self, item: int | slice) -> Any:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def _destroy(self) -> None:
        self._handle.close()

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:  # noqa: N802,N803
        if raftCommitIndex != self._raft_commit_index:
            self._raft_commit_index = raftCommitIndex
            self._meta_dirty = True

    def getRaftCommitIndex(self) -> int:  # noqa: N802
        return self._raft_commit_index

    def setCurrentTerm(self, term: int, votedForNodeId: int | None) -> None:  # noqa: N802,N803
        self._current_term = term
        self._voted_for = votedForNodeId
        self._meta_dirty = True

    def getCurrentTerm(self) -> int:  # noqa: N802
        return self._current_term

    def getVotedForNodeId(self) -> int | None:  # noqa: N802
        return self._voted_for

    # -- durability --------------------------------------------------------------------------------------
    @property
    def path(self) -> str:
        return self._path

    def has_unflushed_writes(self) -> bool:
        return bool(self._pending) or self._meta_dirty

    def flush(self) -> bool:
        """Write buffered records and fsync once. Returns True when an fsync happened.
        Raises StorageError when the storage fails (the node must stop: nothing may be released)."""
        if self._meta_dirty:
            self._pending += _record(["M", self._current_term, self._voted_for, self._raft_commit_index])
            self._meta_dirty = False
        if not self._pending:
            return False
        self._handle.append(bytes(self._pending))
        self._file_bytes += len(self._pending)
        self._pending.clear()
        self._handle.fsync()
        live_bytes = sum(self._entry_bytes)
        if self._file_bytes > max(self._rewrite_bytes_min, 2 * live_bytes):
            self._rewrite(self._entries, self._entry_bytes)
        return True

    def _rewrite(self, entries: list[Entry], entry_bytes: list[int]) -> None:
        """Replace the file by `entries` and the meta, atomically and durably; only then do `entries`
        become the journal's. Raises StorageError (the journal is then unchanged in memory, and the node
        must stop: the file may be either version)."""
        parts = [_record(["M", self._current_term, self._voted_for, self._raft_commit_index])]
        parts.extend(_record(["E", index, term, command]) for command, index, term in entries)
        content = b"".join(parts)
        self._handle.close()
        try:
            write_file_atomically(self._storage, self._path, content)
        finally:
            self._handle = self._storage.open(self._path)
        self._entries, self._entry_bytes = list(entries), list(entry_bytes)
        self._meta_dirty = False
        self._pending.clear()
        self._file_bytes = len(content)


__all__ = ["StorageJournal", "JOURNAL_FILE_NAME", "StorageError"]
