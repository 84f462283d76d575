"""The Storage port: the only way a core reaches a file.

Theory of operation: cores (the partition log, the raft journal, coordinator snapshots) never touch the
filesystem directly. They are handed a `Storage` and open `FileHandle`s through it. Paths are relative,
'/'-separated names below the storage's root; a storage never lets a path escape its root.

Durability contract (what an implementation must provide, and what the simulator's disk models):
- `append` and `write_at` make bytes visible to later reads at once (page cache), but only `fsync` makes them
  survive a power loss. A process crash keeps everything written.
- `rename` replaces the target atomically; it survives a power loss only after `fsync_dir` of the parent.
- `truncate` shortens a file; the bytes past the new size are gone for every later read.

Implementations: `MemoryStorage` here (pure, for unit tests), `net.filestorage.FileStorage` (real files, at
the edge), `simulations.disk.SimDisk` (page-cache and power-loss semantics, torn writes, read corruption).
"""

from __future__ import annotations

import posixpath
from typing import NamedTuple, Protocol, runtime_checkable


class Volume(NamedTuple):
    """Where a directory of a storage is and the volume it is on (DescribeLogDirs): its absolute path (a name
    for storages without one), the volume's size and the bytes still usable on it, -1 when unknown."""

    path: str
    total_bytes: int = -1
    usable_bytes: int = -1


class StorageError(Exception):
    """A storage operation failed (missing file, I/O error). Cores map it to KAFKA_STORAGE_ERROR."""


@runtime_checkable
class FileHandle(Protocol):
    """An open file. Not thread-safe; one owner."""

    path: str

    def size(self) -> int:
        """Current length in bytes (written, not necessarily fsynced)."""

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write `data` at the end; returns the position where it starts."""

    def write_at(self, position: int, data: bytes | bytearray | memoryview) -> None:
        """Overwrite (or extend) at `position`; used for fixed-layout headers only."""

    def read_at(self, position: int, size: int) -> bytes:
        """Up to `size` bytes from `position` (fewer at the end of the file)."""

    def truncate(self, size: int) -> None:
        """Cut the file to `size` bytes."""

    def fsync(self) -> None:
        """Make every write so far survive a power loss."""

    def fileno(self) -> int | None:
        """An OS file descriptor for zero-copy sends, or None when there is none (memory, simulation)."""

    def close(self) -> None:
        """Release the handle; idempotent."""


@runtime_checkable
class Storage(Protocol):
    """A directory tree of files, reached by relative '/'-separated paths."""

    def open(self, path: str, create: bool = True) -> FileHandle:
        """Open for read and append; creates the file when `create`, else raises StorageError if missing."""

    def exists(self, path: str) -> bool: ...

    def list(self, directory: str) -> list[str]:
        """Names (not paths) directly inside `directory`, sorted; [] when it does not exist."""

    def makedirs(self, directory: str) -> None: ...

    def rename(self, source: str, target: str) -> None:
        """Atomically replace `target` with `source`."""

    def delete(self, path: str) -> None:
        """Remove a file; missing is not an error."""

    def delete_tree(self, directory: str) -> None:
        """Remove a directory and everything under it; missing is not an error."""

    def fsync_dir(self, directory: str) -> None:
        """Make creations, renames and deletions in `directory` survive a power loss."""

    def volume(self, directory: str) -> Volume:
        """Where `directory` is and the size and free space of its volume; StorageError when it cannot tell."""


def normalize_path(path: str) -> str:
    """The canonical relative form of `path`; raises StorageError for a path that leaves the root."""
    normalized = posixpath.normpath(path.replace("\\", "/")).lstrip("/")
    if normalized == "." or normalized.startswith(".."):
        if normalized == ".":
            return ""
        raise StorageError(f"path escapes the storage root: {path!r}")
    return normalized


def write_file_atomically(storage: Storage, path: str, data: bytes) -> None:
    """Write `data` to `path` so that a crash leaves either the old or the new file, never a mix:
    temp file, fsync, rename, fsync of the directory."""
    temp_path = path + ".tmp"
    storage.delete(temp_path)
    handle = storage.open(temp_path)
    try:
        handle.truncate(0)
        handle.append(data)
        handle.fsync()
    finally:
        handle.close()
    storage.rename(temp_path, path)
    storage.fsync_dir(posixpath.dirname(normalize_path(path)))


def read_file(storage: Storage, path: str) -> bytes:
    """The whole content of `path`; raises StorageError when it does not exist."""
    handle = storage.open(path, create=False)
    try:
        return handle.read_at(0, handle.size())
    finally:
        handle.close()


class _MemoryFile:
    """A file of `MemoryStorage`: one shared bytearray per path."""

    def __init__(self, storage: MemoryStorage, path: str) -> None:
        self.path = path
        self._storage = storage
        self._closed = False

    @property
    def _data(self) -> bytearray:
        try:
            return self._storage.files[self.path]
        except KeyError:
            raise StorageError(f"file was deleted: {self.path}") from None

    def size(self) -> int:
        return len(self._data)

    def append(self, data: bytes | bytearray | memoryview) -> int:
        buffer = self._data
        position = len(buffer)
        buffer += data
        return position

    def write_at(self, position: int, data: bytes | bytearray | memoryview) -> None:
        buffer = self._data
        if position > len(buffer):
            buffer.extend(bytes(position - len(buffer)))
        buffer[position : position + len(data)] = data

    def read_at(self, position: int, size: int) -> bytes:
        return bytes(self._data[position : position + size])

    def truncate(self, size: int) -> None:
        del self._data[size:]

    def fsync(self) -> None:
        self._storage.fsync_count += 1

    def fileno(self) -> int | None:
        return None

    def close(self) -> None:
        self._closed = True


class MemoryStorage:
    """A `Storage` held in a dict of bytearrays: every write is durable at once. For unit tests."""

    def __init__(self) -> None:
        self.files: dict[str, bytearray] = {}
        self.directories: set[str] = {""}
        self.fsync_count = 0

    def open(self, path: str, create: bool = True) -> FileHandle:
        path = normalize_path(path)
        if path not in self.files:
            if not create:
                raise StorageError(f"no such file: {path}")
            self.makedirs(posixpath.dirname(path))
            self.files[path] = bytearray()
        return _MemoryFile(self, path)

    def exists(self, path: str) -> bool:
        path = normalize_path(path)
        return path in self.files or path in self.directories

    def list(self, directory: str) -> list[str]:
        directory = normalize_path(directory)
        names = set()
        for candidate in list(self.files) + list(self.directories):
            if candidate and posixpath.dirname(candidate) == directory:
                names.add(posixpath.basename(candidate))
        return sorted(names)

    def makedirs(self, directory: str) -> None:
        directory = normalize_path(directory)
        while directory:
            self.directories.add(directory)
            directory = posixpath.dirname(directory)

    def rename(self, source: str, target: str) -> None:
        source, target = normalize_path(source), normalize_path(target)
        if source not in self.files:
            raise StorageError(f"no such file: {source}")
        self.files[target] = self.files.pop(source)

    def delete(self, path: str) -> None:
        self.files.pop(normalize_path(path), None)

    def delete_tree(self, directory: str) -> None:
        directory = normalize_path(directory)
        prefix = directory + "/"
        for path in [p for p in self.files if p.startswith(prefix)]:
            del self.files[path]
        self.directories = {d for d in self.directories if d != directory and not d.startswith(prefix)}

    def fsync_dir(self, directory: str) -> None:
        self.fsync_count += 1

    def volume(self, directory: str) -> Volume:
        return Volume(posixpath.join("/memory", normalize_path(directory)))
