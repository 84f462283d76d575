"""`FileStorage`: the Storage port over real files (the edge; cores never import this module).

Each handle keeps one O_RDWR|O_APPEND-free descriptor; appends use os.pwrite at the cached end so reads
(os.pread) and writes never move a shared file position. fsync is os.fsync; directory fsync opens the
directory with O_RDONLY and fsyncs it, which is what makes renames and creations durable on Linux.
"""

from __future__ import annotations

import os
import shutil

from partitions.storage import FileHandle, StorageError, Volume, normalize_path


class _RealFile:
    def __init__(self, path: str, absolute_path: str, create: bool) -> None:
        self.path = path
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        try:
            self._fd: int | None = os.open(absolute_path, flags, 0o644)
        except FileNotFoundError:
            raise StorageError(f"no such file: {absolute_path}") from None
        except OSError as error:
            raise StorageError(f"cannot open {absolute_path}: {error}") from error
        self._size = os.fstat(self._fd).st_size

    def _descriptor(self) -> int:
        if self._fd is None:
            raise StorageError(f"file is closed: {self.path}")
        return self._fd

    def size(self) -> int:
        return self._size

    def append(self, data: bytes | bytearray | memoryview) -> int:
        position = self._size
        self.write_at(position, data)
        return position

    def write_at(self, position: int, data: bytes | bytearray | memoryview) -> None:
        descriptor = self._descriptor()
        view = memoryview(data)
        written = 0
        try:
            while written < len(view):
                written += os.pwrite(descriptor, view[written:], position + written)
        except OSError as error:
            raise StorageError(f"write to {self.path} failed: {error}") from error
        self._size = max(self._size, position + len(view))

    def read_at(self, position: int, size: int) -> bytes:
        try:
            return os.pread(self._descriptor(), size, position)
        except OSError as error:
            raise StorageError(f"read from {self.path} failed: {error}") from error

    def truncate(self, size: int) -> None:
        os.ftruncate(self._descriptor(), size)
        self._size = size

    def fsync(self) -> None:
        try:
            os.fdatasync(self._descriptor())
        except OSError as error:
            raise StorageError(f"fsync of {self.path} failed: {error}") from error

    def fileno(self) -> int | None:
        return self._fd

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class FileStorage:
    """Real files below `root` (created if missing)."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)

    def _absolute(self, path: str) -> str:
        relative = normalize_path(path)
        return os.path.join(self.root, relative) if relative else self.root

    def open(self, path: str, create: bool = True) -> FileHandle:
        absolute_path = self._absolute(path)
        if create:
            os.makedirs(os.path.dirname(absolute_path), exist_ok=True)
        return _RealFile(normalize_path(path), absolute_path, create)

    def exists(self, path: str) -> bool:
        return os.path.exists(self._absolute(path))

    def list(self, directory: str) -> list[str]:
        try:
            return sorted(os.listdir(self._absolute(directory)))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def makedirs(self, directory: str) -> None:
        os.makedirs(self._absolute(directory), exist_ok=True)

    def rename(self, source: str, target: str) -> None:
        try:
            os.replace(self._absolute(source), self._absolute(target))
        except OSError as error:
            raise StorageError(f"rename {source} -> {target} failed: {error}") from error

    def delete(self, path: str) -> None:
        try:
            os.unlink(self._absolute(path))
        except FileNotFoundError:
            pass

    def delete_tree(self, directory: str) -> None:
        shutil.rmtree(self._absolute(directory), ignore_errors=True)

    def fsync_dir(self, directory: str) -> None:
        descriptor = os.open(self._absolute(directory), os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def volume(self, directory: str) -> Volume:
        path = self._absolute(directory)
        try:
            stats = os.statvfs(path if os.path.exists(path) else self.root)
        except OSError as error:
            raise StorageError(f"statvfs {path} failed: {error}") from error
        return Volume(path, stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize)
