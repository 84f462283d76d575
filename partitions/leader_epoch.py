"""The leader epoch cache: Kafka's `LeaderEpochFileCache` and its `leader-epoch-checkpoint` file.

Theory of operation: the cache records, for each leader epoch, the first offset written in it:
[(epoch, start_offset), ...], strictly increasing in both. The leader assigns its epoch when it becomes
leader (or on its first append); followers assign the epoch of each appended batch. From it,
`end_offset_for` answers OffsetsForLeaderEpoch (KIP-101 / KIP-279): the end offset of an epoch is the start
offset of the next higher epoch, or the log end offset for the latest epoch. Truncating the log truncates
the cache from the end; advancing the log start offset truncates it from the start.

Every change is written through `write_file_atomically` in Kafka's checkpoint text format:

    0                 <- version
    2                 <- number of entries
    3 0               <- "epoch start_offset"
    5 120

Invariant: entries strictly increase in epoch and in start offset (asserted after every change).
"""

from __future__ import annotations

import bisect

from partitions.storage import Storage, StorageError, read_file, write_file_atomically

CHECKPOINT_FILE_NAME = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class CheckpointFormatError(ValueError):
    """A checkpoint file that does not parse (torn by a crash mid-write of an older tool, or edited)."""


def parse_checkpoint(text: str) -> list[tuple[int, int]]:
    """[(epoch, start_offset)] from checkpoint text. Raises CheckpointFormatError."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    try:
        if int(lines[0]) != CHECKPOINT_VERSION:
            raise CheckpointFormatError(f"unsupported checkpoint version {lines[0]!r}")
        count = int(lines[1])
        entries = [tuple(int(part) for part in line.split()) for line in lines[2:]]
    except (IndexError, ValueError) as error:
        raise CheckpointFormatError(f"malformed leader epoch checkpoint: {error}") from None
    if count != len(entries) or any(len(entry) != 2 for entry in entries):
        raise CheckpointFormatError(f"checkpoint declares {count} entries, holds {len(entries)}")
    for (epoch_a, offset_a), (epoch_b, offset_b) in zip(entries, entries[1:]):
        if not (epoch_a < epoch_b and offset_a < offset_b):
            raise CheckpointFormatError(f"checkpoint entries not increasing: {entries}")
    return [(epoch, offset) for epoch, offset in entries]


def format_checkpoint(entries: list[tuple[int, int]]) -> str:
    lines = [str(CHECKPOINT_VERSION), str(len(entries))] + [f"{epoch} {offset}" for epoch, offset in entries]
    return "\n".join(lines) + "\n"


class LeaderEpochCache:
    """The (epoch, start_offset) entries of one partition, persisted in `directory`."""

    def __init__(self, storage: Storage, directory: str) -> None:
        self._storage = storage
        self.path = f"{directory}/{CHECKPOINT_FILE_NAME}" if directory else CHECKPOINT_FILE_NAME
        self.epochs: list[int] = []
        self.start_offsets: list[int] = []
        self.unsaved = False  # entries assigned to an empty log and not written yet (see `assign`)
        if storage.exists(self.path):
            try:
                entries = parse_checkpoint(read_file(storage, self.path).decode("ascii", "replace"))
            except (CheckpointFormatError, StorageError):
                # Kafka fails the log dir here; the cache is only a hint rebuilt by the next fetches, so an
                # unreadable file starts empty instead (the follower path re-assigns epochs from batches).
                entries = []
            self._replace(entries, flush=False)

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self.epochs, self.start_offsets))

    @property
    def latest_epoch(self) -> int | None:
        return self.epochs[-1] if self.epochs else None

    @property
    def earliest_entry(self) -> tuple[int, int] | None:
        return (self.epochs[0], self.start_offsets[0]) if self.epochs else None

    def assign(self, epoch: int, start_offset: int, save: bool = True) -> bool:
        """Record that `epoch` starts at `start_offset`; True when the cache changed.
        Entries that conflict (epoch >= `epoch` or start >= `start_offset`) are removed first, as in Kafka.
        With `save` False (a new leader of an empty log) the file is written by the next assign instead, which
        the first append makes: until a record exists, an epoch's start protects nothing, and a power loss
        that drops it leaves what a restart rebuilds anyway (the leader assigns its epoch again). A new
        replica is thus created without this file and its two fsyncs (BrokerCore.apply_metadata)."""
        assert epoch >= 0 and start_offset >= 0, f"epoch={epoch} start_offset={start_offset}"
        if self.epochs and epoch == self.epochs[-1] and start_offset >= self.start_offsets[-1]:
            if self.unsaved and save:
                self._replace(self.entries())
            return False
        kept = [(e, o) for e, o in self.entries() if e < epoch and o < start_offset]
        self._replace(kept + [(epoch, start_offset)], flush=save)
        self.unsaved = not save
        return True

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose range holds `offset`, or None before the first entry."""
        slot = bisect.bisect_right(self.start_offsets, offset) - 1
        return self.epochs[slot] if slot >= 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end_offset) for OffsetsForLeaderEpoch: the largest known epoch <= `requested_epoch` and
        the start offset of the next higher epoch (the log end offset for the latest epoch);
        (-1, -1) when the requested epoch is undefined or above every known epoch (Kafka's endOffsetFor)."""
        if requested_epoch == UNDEFINED_EPOCH or not self.epochs:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if requested_epoch == self.epochs[-1]:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self.epochs, requested_epoch)
        if higher == len(self.epochs):
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if higher == 0:
            # Older than anything we hold: the requester must truncate to our first epoch's start.
            return requested_epoch, self.start_offsets[0]
        return self.epochs[higher - 1], self.start_offsets[higher]

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove entries starting at or after `end_offset` (the log was truncated to it)."""
        if self.start_offsets and self.start_offsets[-1] >= end_offset:
            self._replace([(e, o) for e, o in self.entries() if o < end_offset])

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries wholly before `start_offset`; the entry holding it now starts at `start_offset`."""
        slot = bisect.bisect_right(self.start_offsets, start_offset) - 1
        if slot < 0 or (slot == 0 and self.start_offsets[0] == start_offset):
            return
        kept = self.entries()[slot:]
        kept[0] = (kept[0][0], start_offset)
        self._replace(kept)

    def clear(self) -> None:
        self._replace([])

    def _replace(self, entries: list[tuple[int, int]], flush: bool = True) -> None:
        for (epoch_a, offset_a), (epoch_b, offset_b) in zip(entries, entries[1:]):
            assert epoch_a < epoch_b and offset_a < offset_b, f"epoch cache not increasing: {entries}"
        self.epochs = [epoch for epoch, _ in entries]
        self.start_offsets = [offset for _, offset in entries]
        if flush:
            self.unsaved = False
            write_file_atomically(self._storage, self.path, format_checkpoint(entries).encode("ascii"))
