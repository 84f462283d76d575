"""`SimDisk`: a Storage with page-cache semantics, power loss, torn tails and read corruption.

Theory of operation. A file is an inode with two images: `data`, what reads see (the page cache), and
`durable`, what the platter holds (as of the last fsync of that file). Names are two maps as well: the live
namespace (what `open`/`list` see) and the durable one, which takes a directory's live entries only on
`fsync_dir` of that directory. Hence, as on Linux with POSIX-minimal guarantees:
- `crash()` (the process dies, the kernel survives) keeps everything written and every name; it only
  invalidates the dead process's handles (using one afterwards raises StorageError: a stale object bug).
- `power_loss()` keeps, per file, its fsynced content, plus a torn tail: a random prefix of the un-fsynced
  range may have reached the platter, and sometimes the size grew without the data (a zero-filled tail).
  Names come back as of the last `fsync_dir` of their directory: a created or renamed file whose directory
  was not fsynced is gone, or is back under its old name; a deleted one may reappear.
- with `read_corruption_probability` > 0, a read returns a copy with one flipped byte now and then (the
  disk is unchanged): what a CRC must catch. `corrupt_byte` flips a byte on the platter for targeted tests.

Writes through an unlinked name keep working (POSIX: the inode lives while open) but reach nothing durable.
Dirty tracking is the lowest offset written since the last fsync, so an fsync of an append-only journal costs
the appended bytes only. Paths follow `partitions.storage.normalize_path`. Never imports os.
"""

from __future__ import annotations

import posixpath
import random
from dataclasses import dataclass

from partitions.storage import FileHandle, StorageError, Volume, normalize_path

ZERO_TAIL_BYTES_MAX = 4096  # a power loss may leave up to a page of zeros past the surviving data


class SimulatedCrash(BaseException):
    """Raised out of a storage call when an armed crash point is reached: the process dies mid-step.
    A BaseException, so that no `except Exception` in a core mistakes it for an I/O error it may handle."""

    def __init__(self, power_loss: bool) -> None:
        super().__init__("power loss" if power_loss else "process crash")
        self.power_loss = power_loss


class _Inode:
    __slots__ = ("inode_id", "data", "durable", "dirty_from")

    def __init__(self, inode_id: int) -> None:
        self.inode_id = inode_id
        self.data = bytearray()
        self.durable = bytearray()
        self.dirty_from: int | None = None  # lowest offset whose bytes may differ from `durable`

    def mark_dirty(self, position: int) -> None:
        if self.dirty_from is None or position < self.dirty_from:
            self.dirty_from = position

    def fsync(self) -> None:
        if self.dirty_from is None:
            return
        start = min(self.dirty_from, len(self.data), len(self.durable))
        del self.durable[start:]
        self.durable += self.data[start:]
        self.dirty_from = None
        assert len(self.durable) == len(self.data), f"durable={len(self.durable)} data={len(self.data)}"


@dataclass
class DiskStats:
    fsyncs: int = 0
    dir_fsyncs: int = 0
    bytes_written: int = 0
    bytes_read: int = 0
    corrupted_reads: int = 0
    crashes: int = 0
    power_losses: int = 0


class _SimFile:
    """A handle on an inode, valid for one process generation of its disk."""

    def __init__(self, disk: SimDisk, path: str, inode: _Inode) -> None:
        self.path = path
        self._disk = disk
        self._inode = inode
        self._generation = disk.generation
        self._closed = False

    def _live(self) -> _Inode:
        if self._closed:
            raise StorageError(f"file is closed: {self.path}")
        if self._generation != self._disk.generation:
            raise StorageError(f"handle of a crashed process used: {self.path}")
        return self._inode

    def size(self) -> int:
        return len(self._live().data)

    def append(self, data: bytes | bytearray | memoryview) -> int:
        inode = self._live()
        self._disk.crash_point()
        position = len(inode.data)
        inode.mark_dirty(position)
        inode.data += data
        self._disk.stats.bytes_written += len(data)
        return position

    def write_at(self, position: int, data: bytes | bytearray | memoryview) -> None:
        inode = self._live()
        self._disk.crash_point()
        assert position >= 0, f"position={position}"
        if position > len(inode.data):
            inode.mark_dirty(len(inode.data))
            inode.data.extend(bytes(position - len(inode.data)))
        inode.mark_dirty(position)
        inode.data[position : position + len(data)] = data
        self._disk.stats.bytes_written += len(data)

    def read_at(self, position: int, size: int) -> bytes:
        inode = self._live()
        assert position >= 0 and size >= 0, f"position={position} size={size}"
        result = bytes(inode.data[position : position + size])
        self._disk.stats.bytes_read += len(result)
        return self._disk.maybe_corrupt(result)

    def truncate(self, size: int) -> None:
        inode = self._live()
        self._disk.crash_point()
        assert size >= 0, f"size={size}"
        if size < len(inode.data):
            inode.mark_dirty(size)
            del inode.data[size:]
        elif size > len(inode.data):
            inode.mark_dirty(len(inode.data))
            inode.data.extend(bytes(size - len(inode.data)))

    def fsync(self) -> None:
        inode = self._live()
        self._disk.crash_point()
        inode.fsync()
        self._disk.stats.fsyncs += 1

    def fileno(self) -> int | None:
        return None

    def close(self) -> None:
        self._closed = True


class SimDisk:
    """A `partitions.storage.Storage` for one simulated node. `rng` drives torn tails and read corruption."""

    def __init__(self, rng: random.Random, read_corruption_probability: float = 0.0) -> None:
        assert 0.0 <= read_corruption_probability <= 1.0, f"{read_corruption_probability=}"
        self.rng = rng
        self.read_corruption_probability = read_corruption_probability
        self.generation = 0  # bumped by crash/power loss: older handles are dead
        self.stats = DiskStats()
        self._next_inode_id = 0
        self._files: dict[str, _Inode] = {}
        # directory -> the paths of `_files` in it, and of `_durable_files` in it (fsync_dir visits one directory,
        # not every file of the disk: a compacted log's many small segments made that scan the run's hot spot)
        self._children: dict[str, set[str]] = {}
        self._durable_children: dict[str, set[str]] = {}
        self._directories: set[str] = {""}
        self._durable_files: dict[str, _Inode] = {}
        self._durable_directories: set[str] = {""}
        self._crash_countdown: int | None = None  # mutating operations left before an armed crash
        self._crash_is_power_loss = False

    # --- Storage ----------------------------------------------------------------------------------------

    def open(self, path: str, create: bool = True) -> FileHandle:
        """Open `path`; raises StorageError when it is missing and not `create`."""
        path = normalize_path(path)
        inode = self._files.get(path)
        if inode is None:
            if not create:
                raise StorageError(f"no such file: {path}")
            if path in self._directories:
                raise StorageError(f"is a directory: {path}")
            self.makedirs(posixpath.dirname(path))
            self._next_inode_id += 1
            inode = _Inode(self._next_inode_id)
            self._add_file(path, inode)
        return _SimFile(self, path, inode)

    def exists(self, path: str) -> bool:
        path = normalize_path(path)
        return path in self._files or path in self._directories

    def list(self, directory: str) -> list[str]:
        directory = normalize_path(directory)
        names = {posixpath.basename(p) for p in self._children.get(directory, ())}
        names.update(posixpath.basename(d) for d in self._directories if d and posixpath.dirname(d) == directory)
        return sorted(names)

    def makedirs(self, directory: str) -> None:
        directory = normalize_path(directory)
        while directory:
            if directory in self._files:
                raise StorageError(f"not a directory: {directory}")
            self._directories.add(directory)
            directory = posixpath.dirname(directory)

    def rename(self, source: str, target: str) -> None:
        """Atomically replace `target`; raises StorageError when `source` is missing."""
        source, target = normalize_path(source), normalize_path(target)
        self.crash_point()
        if source not in self._files:
            raise StorageError(f"no such file: {source}")
        if posixpath.dirname(target) not in self._directories:
            raise StorageError(f"no such directory: {posixpath.dirname(target)}")
        inode = self._files[source]
        self._remove_file(source)
        self._remove_file(target)
        self._add_file(target, inode)

    def delete(self, path: str) -> None:
        self.crash_point()
        self._remove_file(normalize_path(path))

    def delete_tree(self, directory: str) -> None:
        directory = normalize_path(directory)
        prefix = directory + "/" if directory else ""
        for path in [p for p in self._files if p.startswith(prefix)]:
            self._remove_file(path)
        self._directories = {d for d in self._directories if not (d == directory or d.startswith(prefix))}
        self._directories.add("")

    def fsync_dir(self, directory: str) -> None:
        """Make the entries of `directory` (files and subdirectories) durable as they are now."""
        directory = normalize_path(directory)
        if directory not in self._directories:
            raise StorageError(f"no such directory: {directory}")
        self.crash_point()
        self.stats.dir_fsyncs += 1
        durable_files = self._durable_files
        for path in self._durable_children.pop(directory, ()):
            del durable_files[path]
        children = self._children.get(directory)
        if children:
            files = self._files
            self._durable_children[directory] = set(children)
            for path in children:
                durable_files[path] = files[path]
        self._durable_directories = {
            d for d in self._durable_directories if not d or posixpath.dirname(d) != directory
        }
        self._durable_directories.update(d for d in self._directories if d and posixpath.dirname(d) == directory)

    def _add_file(self, path: str, inode: _Inode) -> None:
        self._files[path] = inode
        self._children.setdefault(posixpath.dirname(path), set()).add(path)

    def _remove_file(self, path: str) -> None:
        if self._files.pop(path, None) is not None:
            siblings = self._children[posixpath.dirname(path)]
            siblings.discard(path)
            if not siblings:
                del self._children[posixpath.dirname(path)]

    def volume(self, directory: str) -> Volume:
        return Volume(posixpath.join("/simulated", normalize_path(directory)))

    # --- faults -----------------------------------------------------------------------------------------

    def arm_crash(self, operations: int, power_loss: bool = False) -> None:
        """Crash (or lose power) just before the `operations`-th next mutating call (write, truncate, fsync,
        rename, delete, fsync_dir): that call raises SimulatedCrash and does nothing. Models a process
        dying between any two of its writes, e.g. after a snapshot is renamed into place but before the
        journal is compacted."""
        assert operations >= 1, f"operations={operations}"
        self._crash_countdown = operations
        self._crash_is_power_loss = power_loss

    def disarm_crash(self) -> None:
        self._crash_countdown = None

    def crash_point(self) -> None:
        """Called before every mutating operation; raises SimulatedCrash when the armed countdown ends."""
        if self._crash_countdown is None:
            return
        self._crash_countdown -= 1
        if self._crash_countdown > 0:
            return
        self._crash_countdown = None
        power_loss = self._crash_is_power_loss
        if power_loss:
            self.power_loss()
        else:
            self.crash()
        raise SimulatedCrash(power_loss)

    def crash(self) -> None:
        """The process died: every handle is dead, every byte written and every name stays."""
        self.generation += 1
        self.stats.crashes += 1
        self._crash_countdown = None

    def power_loss(self) -> None:
        """The machine lost power: only fsynced data and fsync_dir'ed names survive, plus torn tails."""
        self.generation += 1
        self.stats.power_losses += 1
        self._crash_countdown = None
        surviving_directories = {""}
        for directory in sorted(self._durable_directories):
            # A directory survives only if every ancestor's entry for it was made durable too.
            if posixpath.dirname(directory) in surviving_directories:
                surviving_directories.add(directory)
        self._directories = surviving_directories
        self._durable_directories = set(surviving_directories)
        inodes = {}
        for path in sorted(self._durable_files):
            if posixpath.dirname(path) in surviving_directories:
                inodes[path] = self._durable_files[path]
        self._files = {}
        self._children = {}
        for path, inode in inodes.items():
            self._add_file(path, inode)
        self._durable_files = dict(inodes)
        self._durable_children = {directory: set(paths) for directory, paths in self._children.items()}
        seen: set[int] = set()
        for path in sorted(inodes):
            inode = inodes[path]
            if inode.inode_id not in seen:  # two durable names may share one inode
                seen.add(inode.inode_id)
                self._lose_unsynced(inode)

    def _lose_unsynced(self, inode: _Inode) -> None:
        if inode.dirty_from is None:
            return
        rng = self.rng
        start = min(inode.dirty_from, len(inode.durable))
        end = len(inode.data)
        # A random prefix of the written-but-unsynced range reached the platter (writeback is in page order
        # often enough that a prefix is the interesting case); the rest is the old durable content.
        cut = rng.randint(start, max(start, end)) if end > start else start
        survived = bytearray(inode.data[:cut])
        if len(inode.durable) > cut:
            survived += inode.durable[cut:]
        elif rng.random() < 0.25 and end > cut:
            # The size reached the journal but the data did not: a zero-filled tail.
            survived += bytes(rng.randint(1, min(ZERO_TAIL_BYTES_MAX, end - cut)))
        inode.data = survived
        inode.durable = bytearray(survived)
        inode.dirty_from = None

    def maybe_corrupt(self, data: bytes) -> bytes:
        """`data`, with one byte flipped with probability `read_corruption_probability`."""
        if not data or not self.read_corruption_probability:
            return data
        if self.rng.random() >= self.read_corruption_probability:
            return data
        self.stats.corrupted_reads += 1
        position = self.rng.randrange(len(data))
        flipped = bytearray(data)
        flipped[position] ^= 1 << self.rng.randrange(8)
        return bytes(flipped)

    def corrupt_byte(self, path: str, position: int) -> None:
        """Flip one bit of `path` at `position`, in the page cache and on the platter (bit rot)."""
        inode = self._files[normalize_path(path)]
        assert 0 <= position < len(inode.data), f"position={position} size={len(inode.data)}"
        inode.data[position] ^= 0x01
        if position < len(inode.durable):
            inode.durable[position] ^= 0x01

    # --- inspection (tests and checkers) ----------------------------------------------------------------

    def durable_content(self, path: str) -> bytes | None:
        """What `path` would hold after a power loss with no torn tail; None when its name is not durable."""
        inode = self._durable_files.get(normalize_path(path))
        return None if inode is None else bytes(inode.durable)

    def paths(self) -> list[str]:
        """Every live file path, sorted."""
        return sorted(self._files)
