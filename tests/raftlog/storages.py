"""Storage fakes for the raftlog tests: power loss (page-cache semantics) and crash injection."""

from __future__ import annotations

import posixpath
from typing import Callable

from partitions.storage import FileHandle, StorageError, Volume, normalize_path


class SimulatedCrash(Exception):
    """The process dies at this storage operation."""


class _File:
    def __init__(self) -> None:
        self.data = bytearray()
        self.durable = b""


class _Handle:
    def __init__(self, storage: PowerLossStorage, path: str, file: _File) -> None:
        self.path = path
        self._storage = storage
        self._file = file

    def size(self) -> int:
        return len(self._file.data)

    def append(self, data: bytes | bytearray | memoryview) -> int:
        self._storage._before("append", self.path)
        position = len(self._file.data)
        self._file.data += data
        return position

    def write_at(self, position: int, data: bytes | bytearray | memoryview) -> None:
        self._storage._before("write_at", self.path)
        if position > len(self._file.data):
            self._file.data.extend(bytes(position - len(self._file.data)))
        self._file.data[position:position + len(data)] = data

    def read_at(self, position: int, size: int) -> bytes:
        return bytes(self._file.data[position:position + size])

    def truncate(self, size: int) -> None:
        self._storage._before("truncate", self.path)
        del self._file.data[size:]

    def fsync(self) -> None:
        self._storage._before("fsync", self.path)
        if not self._storage.fsyncs_are_lies:
            self._file.durable = bytes(self._file.data)
        self._storage.events.append(("fsync", self.path))

    def fileno(self) -> int | None:
        return None

    def close(self) -> None:
        pass


class PowerLossStorage:
    """A Storage whose power loss keeps only fsynced file contents and fsync_dir'ed names.

    `crash_when(operation, path)` returning True raises SimulatedCrash before that operation runs."""

    def __init__(self) -> None:
        self.names: dict[str, _File] = {}
        self.durable_names: dict[str, _File] = {}
        self.directories: set[str] = {""}
        self.events: list[tuple[str, str]] = []
        self.crash_when: Callable[[str, str], bool] | None = None
        self.fsyncs_are_lies = False

    def _before(self, operation: str, path: str) -> None:
        if self.crash_when is not None and self.crash_when(operation, path):
            self.crash_when = None
            raise SimulatedCrash(f"crash before {operation} {path}")

    def open(self, path: str, create: bool = True) -> FileHandle:
        path = normalize_path(path)
        self._before("open", path)
        if path not in self.names:
            if not create:
                raise StorageError(f"no such file: {path}")
            self.makedirs(posixpath.dirname(path))
            self.names[path] = _File()
        return _Handle(self, path, self.names[path])

    def exists(self, path: str) -> bool:
        path = normalize_path(path)
        return path in self.names or path in self.directories

    def list(self, directory: str) -> list[str]:
        directory = normalize_path(directory)
        return sorted({posixpath.basename(p) for p in list(self.names) + list(self.directories)
                       if p and posixpath.dirname(p) == directory})

    def makedirs(self, directory: str) -> None:
        directory = normalize_path(directory)
        while directory:
            self.directories.add(directory)
            directory = posixpath.dirname(directory)

    def rename(self, source: str, target: str) -> None:
        source, target = normalize_path(source), normalize_path(target)
        self._before("rename", target)
        if source not in self.names:
            raise StorageError(f"no such file: {source}")
        self.names[target] = self.names.pop(source)

    def delete(self, path: str) -> None:
        self.names.pop(normalize_path(path), None)

    def delete_tree(self, directory: str) -> None:
        prefix = normalize_path(directory) + "/"
        for path in [p for p in self.names if p.startswith(prefix)]:
            del self.names[path]

    def fsync_dir(self, directory: str) -> None:
        directory = normalize_path(directory)
        self._before("fsync_dir", directory)
        for path in set(self.names) | set(self.durable_names):
            if posixpath.dirname(path) == directory:
                if path in self.names:
                    self.durable_names[path] = self.names[path]
                else:
                    del self.durable_names[path]
        self.events.append(("fsync_dir", directory))

    def volume(self, directory: str) -> Volume:
        return Volume(posixpath.join("/memory", normalize_path(directory)))

    # -- test controls -----------------------------------------------------------------------------------------
    def unsynced(self) -> list[str]:
        """Paths whose current content or name would not survive a power loss right now."""
        paths = [p for p, f in self.names.items() if bytes(f.data) != f.durable or self.durable_names.get(p) is not f]
        paths += [p for p in self.durable_names if p not in self.names]
        return sorted(paths)

    def power_loss(self) -> None:
        self.names = dict(self.durable_names)
        for file in self.names.values():
            file.data = bytearray(file.durable)
