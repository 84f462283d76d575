"""Snapshots: pysyncobj's Serializer role, persisted through the Storage port, encoded with CBOR.

Theory of operation: pysyncobj dumps (last applied entry, the entry before it, the cluster) when it
compacts, ships the dump to followers that fell behind the leader's log start, and loads it at restart
and after a completed install. `SnapshotStore` does all three without fork, gzip or pickle:

    file <directory>/raft.snapshot = MAGIC | u32 crc32(body) | body = CBOR map
        {"version": 1, "last": [command, index, term], "previous": [...], "cluster": [node ids],
         "app_state": bytes, "app_pending": [[index, data], ...]}

`app_state` is the state machine's `snapshot_fn()` (its state after every entry it has already taken) and
`app_pending` the entries that raft applied but the owner has not taken yet; together they are the
application state at `last`. A dump is written to a temp file, fsynced, renamed and the directory fsynced
before pysyncobj is told it succeeded (so the journal is only compacted behind a durable snapshot). An
incoming install is assembled in memory (bounded by `snapshot_bytes_max`), validated, then persisted the
same way. With persistence switched off (bug E kept live, for tests only) the dump lives in memory, as
pysyncobj does without `fullDumpFile`.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any, Callable

import cbor2
from pysyncobj.config import SERIALIZER_STATE

from partitions.storage import Storage, normalize_path, read_file, write_file_atomically
from raftlog.port import RaftStorageError

SNAPSHOT_FILE_NAME = "raft.snapshot"
SNAPSHOT_FORMAT_VERSION = 1
_MAGIC = b"FLRS"
_HEADER = struct.Struct(">4sI")  # magic, CRC-32 of the CBOR body
snapshot_bytes_max = 512 * 1024 * 1024


def encode_snapshot(last: Any, previous: Any, cluster_ids: list[int], app_state: bytes,
                    app_pending: list[tuple[int, bytes]]) -> bytes:
    body = cbor2.dumps({
        "version": SNAPSHOT_FORMAT_VERSION,
        "last": [bytes(last[0]), last[1], last[2]],
        "previous": [bytes(previous[0]), previous[1], previous[2]],
        "cluster": sorted(cluster_ids),
        "app_state": bytes(app_state),
        "app_pending": [[index, bytes(data)] for index, data in app_pending],
    })
    return _HEADER.pack(_MAGIC, zlib.crc32(body)) + body


def decode_snapshot(blob: bytes) -> dict[str, Any]:
    """The snapshot map with entries as tuples; raises RaftStorageError when it is corrupt or unknown."""
    if len(blob) < _HEADER.size:
        raise RaftStorageError(f"snapshot of {len(blob)} bytes is truncated")
    magic, crc = _HEADER.unpack_from(blob)
    body = blob[_HEADER.size:]
    if magic != _MAGIC or zlib.crc32(body) != crc:
        raise RaftStorageError("snapshot magic or CRC mismatch")
    try:
        snapshot = cbor2.loads(body)
        if snapshot["version"] != SNAPSHOT_FORMAT_VERSION:
            raise RaftStorageError(f"snapshot format version {snapshot['version']} is not supported")
        snapshot["last"] = (bytes(snapshot["last"][0]), int(snapshot["last"][1]), int(snapshot["last"][2]))
        snapshot["previous"] = (bytes(snapshot["previous"][0]), int(snapshot["previous"][1]),
                                int(snapshot["previous"][2]))
        snapshot["cluster"] = [int(node_id) for node_id in snapshot["cluster"]]
        snapshot["app_pending"] = [(int(index), bytes(data)) for index, data in snapshot["app_pending"]]
        return snapshot
    except (KeyError, TypeError, ValueError, IndexError, cbor2.CBORDecodeError) as error:
        raise RaftStorageError(f"snapshot body is malformed: {error}") from error


class SnapshotStore:
    """Implements the methods of pysyncobj.serializer.Serializer that SyncObj calls.

    `write_fn(path, data)` / `read_fn(path)` are the conf.serializer / conf.deserializer hooks: they turn
    pysyncobj's dump tuple into file bytes (adding the application state) and back (restoring it)."""

    def __init__(self, storage: Storage, directory: str, persist: bool, chunk_bytes_max: int,
                 write_fn: Callable[[str, tuple[Any, ...]], bytes],
                 read_fn: Callable[[str, bytes], tuple[Any, ...]], defer_install: bool = True) -> None:
        self._storage = storage
        self._directory = normalize_path(directory)
        self.path = f"{self._directory}/{SNAPSHOT_FILE_NAME}" if self._directory else SNAPSHOT_FILE_NAME
        self._persist = persist
        self._chunk_bytes_max = chunk_bytes_max
        self._write_fn = write_fn
        self._read_fn = read_fn
        self._state = 0  # 0 idle, -1 finished OK, -2 failed (pysyncobj's non-fork protocol)
        self._current_id: int | None = None
        self._in_memory: bytes | None = None
        self._outgoing: dict[int, int] = {}  # node id -> bytes already sent
        self._outgoing_blob: bytes | None = None
        self._incoming: bytearray | None = None
        # Fix H (raftlog/patches.py): a completed install waits here until pysyncobj has compared its index with
        # what this node applied; only `install_received` replaces the snapshot this node holds.
        self._defer_install = defer_install
        self._received: tuple[bytes, int] | None = None  # (the snapshot, its last raft index)
        self.snapshot_index: int | None = None

    # -- what pysyncobj calls --------------------------------------------------------------------------
    def checkSerializing(self) -> tuple[int, int | None]:  # noqa: N802
        if self._state in (-1, -2):
            state = SERIALIZER_STATE.SUCCESS if self._state == -1 else SERIALIZER_STATE.FAILED
            self._state = 0
            self._outgoing.clear()
            self._outgoing_blob = None
            return state, self._current_id
        return SERIALIZER_STATE.NOT_SERIALIZING, None

    def serialize(self, data: tuple[Any, ...], id: int) -> None:  # noqa: A002
        if self._state != 0:
            return
        self._current_id = id
        blob = self._write_fn(self.path, tuple(data[1:]))
        if self._persist:
            write_file_atomically(self._storage, self.path, blob)
        else:
            self._in_memory = blob
        self.snapshot_index = data[1][1]
        self._state = -1

    def deserialize(self) -> tuple[Any, ...]:
        return (None,) + self._read_fn(self.path, self._load_blob())

    def getTransmissionData(self, transmissionID: Any) -> tuple[bytes, bool, bool] | None:  # noqa: N802,N803
        if self._state != 0:
            return None
        if self._outgoing_blob is None:
            if not self.exists():
                return None
            self._outgoing_blob = self._load_blob()
        node_id = transmissionID.id
        sent = self._outgoing.get(node_id, 0)
        chunk = self._outgoing_blob[sent:sent + self._chunk_bytes_max]
        self._outgoing[node_id] = sent + len(chunk)
        is_last = not chunk  # pysyncobj's protocol: an empty chunk closes the transfer
        if is_last:
            self._outgoing.pop(node_id, None)
        return chunk, sent == 0, is_last

    def setTransmissionData(self, data: Any) -> bool:  # noqa: N802
        if data is None:
            return False
        chunk, is_first, is_last = data
        if is_first:
            self._incoming = bytearray()
        elif self._incoming is None:
            return False  # the start of this transfer was on an older stream: wait for a new one
        self._incoming += chunk
        if len(self._incoming) > snapshot_bytes_max:
            self._incoming = None
            return False
        if not is_last:
            return False
        blob, self._incoming = bytes(self._incoming), None
        try:
            decoded = decode_snapshot(blob)  # refuse a corrupt install before it replaces anything
        except RaftStorageError:
            return False
        if self._defer_install:
            self._received = blob, decoded["last"][1]
            return True
        self._keep(blob)
        return True

    def received_index(self) -> int:
        """The raft index of the install just received (fix H), -1 when there is none."""
        return self._received[1] if self._received is not None else -1

    def install_received(self) -> bool:
        """Make the install just received this node's snapshot (fix H); False when there is none."""
        if self._received is None:
            return False
        (blob, _), self._received = self._received, None
        self._keep(blob)
        return True

    def discard_received(self) -> None:
        """Drop the install just received: it is no newer than what this node applied (fix H)."""
        self._received = None

    def _keep(self, blob: bytes) -> None:
        if self._persist:
            write_file_atomically(self._storage, self.path, blob)
        else:
            self._in_memory = blob
        self._outgoing_blob = None

    def cancelTransmisstion(self, id: Any) -> None:  # noqa: N802,A002  (pysyncobj's spelling)
        self._outgoing.pop(id.id, None)

    # -- adapter helpers -----------------------------------------------------------------------------------
    def exists(self) -> bool:
        return self._storage.exists(self.path) if self._persist else self._in_memory is not None

    def reset_incoming(self) -> None:
        self._incoming = None

    def _load_blob(self) -> bytes:
        if self._persist:
            return read_file(self._storage, self.path)
        assert self._in_memory is not None, "no in-memory snapshot to load"
        return self._in_memory
