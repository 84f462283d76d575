"""The leader epoch cache and its checkpoint file (Kafka's LeaderEpochFileCache, KIP-101 / KIP-279)."""

from __future__ import annotations

from partitions.leader_epoch import LeaderEpochCache, format_checkpoint, parse_checkpoint
from partitions.storage import MemoryStorage


def cache_with(entries, storage=None):
    cache = LeaderEpochCache(storage or MemoryStorage(), "p")
    for epoch, offset in entries:
        cache.assign(epoch, offset)
    return cache


def test_assign_appends_new_epochs_and_ignores_repeats():
    cache = cache_with([(1, 0), (1, 5), (3, 10)])
    assert cache.entries() == [(1, 0), (3, 10)]
    assert cache.assign(3, 12) is False


def test_assign_removes_conflicting_entries():  # Kafka's maybeTruncateNonMonotonicEntries
    cache = cache_with([(1, 0), (3, 10), (5, 20)])
    cache.assign(4, 15)
    assert cache.entries() == [(1, 0), (3, 10), (4, 15)]
    cache.assign(6, 12)
    assert cache.entries() == [(1, 0), (3, 10), (6, 12)]


def test_end_offset_for_epoch():  # KIP-101 OffsetsForLeaderEpoch
    cache = cache_with([(1, 0), (3, 10), (6, 25)])
    assert cache.end_offset_for(1, 40) == (1, 10)
    assert cache.end_offset_for(2, 40) == (1, 10)  # unknown epoch: the largest epoch below it
    assert cache.end_offset_for(3, 40) == (3, 25)
    assert cache.end_offset_for(6, 40) == (6, 40)  # latest: the log end offset
    assert cache.end_offset_for(0, 40) == (0, 0)  # older than all: the first start offset
    assert cache.end_offset_for(7, 40) == (-1, -1)
    assert cache.end_offset_for(-1, 40) == (-1, -1)
    assert LeaderEpochCache(MemoryStorage(), "p").end_offset_for(3, 40) == (-1, -1)


def test_truncate_from_end_and_start():
    cache = cache_with([(1, 0), (3, 10), (6, 25)])
    cache.truncate_from_end(25)
    assert cache.entries() == [(1, 0), (3, 10)]
    cache.truncate_from_start(12)
    assert cache.entries() == [(3, 12)]
    cache.truncate_from_start(5)
    assert cache.entries() == [(3, 12)]
    assert cache.epoch_for_offset(11) is None and cache.epoch_for_offset(100) == 3


def test_checkpoint_is_kafkas_text_format_and_reloads():
    storage = MemoryStorage()
    cache_with([(2, 0), (4, 17)], storage)
    assert bytes(storage.files["p/leader-epoch-checkpoint"]) == b"0\n2\n2 0\n4 17\n"
    assert LeaderEpochCache(storage, "p").entries() == [(2, 0), (4, 17)]
    assert parse_checkpoint(format_checkpoint([(2, 0), (4, 17)])) == [(2, 0), (4, 17)]


def test_an_unparsable_checkpoint_starts_empty():
    storage = MemoryStorage()
    storage.files["p/leader-epoch-checkpoint"] = bytearray(b"0\n3\n1 0\n")
    assert LeaderEpochCache(storage, "p").entries() == []
    storage.files["p/leader-epoch-checkpoint"] = bytearray(b"0\n2\n5 10\n3 20\n")  # not increasing
    assert LeaderEpochCache(storage, "p").entries() == []
