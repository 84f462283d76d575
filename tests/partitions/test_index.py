"""OffsetIndex and TimeIndex: Kafka's sparse, relative, rebuildable index files."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from partitions.index import OffsetIndex, TimeIndex
from partitions.storage import MemoryStorage


def test_offset_index_file_layout_is_kafkas():
    storage = MemoryStorage()
    index = OffsetIndex(storage, "p/00000000000000000100.index", 100, 1024)
    index.append(104, 0)
    index.append(110, 4_200)
    assert "p/00000000000000000100.index" not in storage.files  # buffered until flushed, created with them
    index.fsync()
    assert bytes(storage.files["p/00000000000000000100.index"]) == struct.pack(">IIII", 4, 0, 10, 4_200)


def test_an_index_file_is_created_with_its_first_entry_and_a_missing_one_is_empty():
    storage = MemoryStorage()
    index = OffsetIndex(storage, "p/00000000000000000000.index", 0, 1024)
    index.fsync()
    index.truncate_to(0)
    index.close()
    assert "p/00000000000000000000.index" not in storage.files  # never an entry: never a file
    reopened = OffsetIndex(storage, "p/00000000000000000000.index", 0, 1024)
    assert len(reopened) == 0 and reopened.sanity_error(log_size=500) is None
    storage.files["p/00000000000000000000.index.swap"] = bytearray(b"stale entries of an older segment")
    reopened.rename("p/00000000000000000000.index.swap")  # an empty index renamed over a stale file
    assert "p/00000000000000000000.index.swap" not in storage.files
    reopened.append(7, 100)
    reopened.close()
    assert bytes(storage.files["p/00000000000000000000.index.swap"]) == struct.pack(">II", 7, 100)


def test_offset_index_lookup_returns_the_floor_entry():
    index = OffsetIndex(MemoryStorage(), "i.index", 100, 1024)
    for offset, position in [(104, 0), (110, 4_200), (130, 9_000)]:
        index.append(offset, position)
    assert index.lookup(99) == (100, 0)
    assert index.lookup(104) == (104, 0)
    assert index.lookup(129) == (110, 4_200)
    assert index.lookup(10**9) == (130, 9_000)
    assert index.position_floor(9_000) == 9_000 and index.position_floor(8_999) == 4_200


def test_offset_index_reloads_and_truncates():
    storage = MemoryStorage()
    index = OffsetIndex(storage, "i.index", 0, 1024)
    for offset in range(5):
        index.append(offset * 10, offset * 100)
    index.truncate_to(25)
    assert index.keys == [0, 10, 20]
    reloaded = OffsetIndex(storage, "i.index", 0, 1024)
    assert (reloaded.keys, reloaded.values) == ([0, 10, 20], [0, 100, 200])
    assert reloaded.sanity_error(log_size=201) is None


def test_torn_or_insane_offset_index_is_detected():
    storage = MemoryStorage()
    index = OffsetIndex(storage, "i.index", 0, 1024)
    index.append(5, 100)
    index.append(9, 200)
    index.close()
    storage.files["i.index"] += b"\x00\x00\x00"
    assert "multiple" in OffsetIndex(storage, "i.index", 0, 1024).sanity_error(1_000)
    del storage.files["i.index"][-3:]
    assert OffsetIndex(storage, "i.index", 0, 1024).sanity_error(150) is not None  # points past the log
    storage.files["i.index"][8:16] = struct.pack(">II", 1, 300)  # offsets go backwards
    assert "increasing" in OffsetIndex(storage, "i.index", 0, 1024).sanity_error(1_000)


def test_index_is_full_at_segment_index_bytes():
    index = OffsetIndex(MemoryStorage(), "i.index", 0, 24)
    for offset in range(3):
        index.append(offset, offset)
    assert index.is_full and index.entries_max == 3


def test_time_index_grows_only_with_the_timestamp():
    storage = MemoryStorage()
    index = TimeIndex(storage, "t.timeindex", 50, 1200)
    index.maybe_append(1_000, 52)
    index.maybe_append(900, 55)  # older timestamp: ignored
    index.maybe_append(1_000, 57)  # same timestamp: ignored
    index.maybe_append(2_000, 60)
    assert index.keys == [1_000, 2_000] and index.values == [52, 60]
    index.write_pending()
    assert bytes(storage.files["t.timeindex"]) == struct.pack(">qIqI", 1_000, 2, 2_000, 10)
    assert index.lookup(999) is None and index.lookup(1_500) == (1_000, 52)
    index.truncate_to(55)
    assert index.last_entry == (1_000, 52)
    assert index.sanity_error(next_offset=53) is None
    assert index.sanity_error(next_offset=52) is not None


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 50), st.integers(1, 5_000)), min_size=1, max_size=60), st.integers(0, 3_000))
def test_offset_index_lookup_matches_a_linear_scan(steps, target):
    index = OffsetIndex(MemoryStorage(), "i.index", 0, 10_000)
    offset = position = 0
    entries = []
    for offset_step, position_step in steps:
        offset += offset_step
        position += position_step
        index.append(offset, position)
        entries.append((offset, position))
    floor = [entry for entry in entries if entry[0] <= target]
    assert index.lookup(target) == (floor[-1] if floor else (0, 0))
