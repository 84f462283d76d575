"""Log compaction (Kafka's LogCleaner): last record per key, offsets preserved, tombstones, atomic swap."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partitions.errors import CorruptRecordError
from partitions.records import build_batch, decode_batches
from partitions.storage import MemoryStorage
from tests.partitions.logtools import DIRECTORY, key_values, keyed, open_log, read_all

DAY_MS = 24 * 3600 * 1000


def compacted_log(storage=None, **config):
    options = dict(cleanup_policy=("compact",), segment_bytes=300, now_ms=0, min_cleanable_dirty_ratio=0.0)
    options.update(config)
    return open_log(storage, **options)


def append_pairs(log, pairs, now_ms=1_000):
    for key, value in pairs:
        log.append_as_leader(keyed([(key, value)], timestamp_ms=now_ms), 0, now_ms)


def test_compaction_keeps_the_last_record_per_key_with_offsets_preserved():
    log = compacted_log()
    append_pairs(log, [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1"), (b"b", b"2"), (b"a", b"3")] * 2)
    log.roll(1_000)
    stats = log.compact(now_ms=2_000)
    assert key_values(log) == [(9, b"c", b"1"), (10, b"b", b"2"), (11, b"a", b"3")]
    assert stats.records_read == 12 and stats.records_retained == 3
    assert log.log_end_offset == 12
    log.append_as_leader(keyed([(b"d", b"1")]), 0, 2_000)
    assert key_values(log)[-1] == (12, b"d", b"1")


def test_compaction_never_touches_the_active_segment():
    log = compacted_log(segment_bytes=10**6)
    append_pairs(log, [(b"a", b"1"), (b"a", b"2")])
    stats = log.compact(now_ms=2_000)
    assert stats.skipped_reason is not None
    assert key_values(log) == [(0, b"a", b"1"), (1, b"a", b"2")]


def test_compaction_inside_a_batch_keeps_the_batch_offset_range():  # Kafka's buildRetainedRecordsInto
    log = compacted_log()
    log.append_as_leader(keyed([(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1")]), 0, 1_000)
    log.append_as_leader(keyed([(b"c", b"2")]), 0, 1_000)
    log.roll(1_000)
    log.compact(now_ms=2_000)
    first, second = list(decode_batches(read_all(log)))
    assert (first.header.base_offset, first.header.last_offset, first.header.records_count) == (0, 3, 2)
    assert [(r.offset, r.key) for r in first.records] == [(1, b"b"), (2, b"a")]
    assert second.header.base_offset == 4


def test_tombstones_survive_delete_retention_ms_then_disappear():  # KIP-534 delete horizon
    log = compacted_log(delete_retention_ms=DAY_MS)
    append_pairs(log, [(b"a", b"1"), (b"b", b"1"), (b"a", None)])
    log.roll(1_000)
    log.compact(now_ms=10_000)
    assert key_values(log) == [(1, b"b", b"1"), (2, b"a", None)]
    tombstone_batch = list(decode_batches(read_all(log)))[-1]
    assert tombstone_batch.header.has_delete_horizon
    assert tombstone_batch.header.base_timestamp == 10_000 + DAY_MS
    log.compact(now_ms=10_000 + DAY_MS - 1, force=True)
    assert key_values(log) == [(1, b"b", b"1"), (2, b"a", None)]
    stats = log.compact(now_ms=10_000 + DAY_MS, force=True)
    assert stats.tombstones_removed == 1
    assert key_values(log) == [(1, b"b", b"1")]


def test_records_without_a_key_are_removed():
    # A keyless record written while the topic's cleanup.policy was still "delete": a compacted topic refuses
    # new ones on produce (LogValidator), the cleaner drops the old ones.
    log = compacted_log(cleanup_policy=("delete",))
    append_pairs(log, [(None, b"x")])
    log.config = dataclasses.replace(log.config, cleanup_policy=("compact",))
    append_pairs(log, [(b"a", b"1")])
    log.roll(1_000)
    log.compact(now_ms=2_000)
    assert key_values(log) == [(1, b"a", b"1")]


def test_min_compaction_lag_protects_young_segments():
    log = compacted_log(min_compaction_lag_ms=5_000, segment_bytes=10**6)
    append_pairs(log, [(b"a", b"1"), (b"a", b"2")], now_ms=1_000)
    log.roll(1_000)
    append_pairs(log, [(b"a", b"3")], now_ms=4_000)
    log.roll(4_000)
    log.compact(now_ms=6_500)  # the first segment (max ts 1000) is old enough, the second (4000) is not
    assert key_values(log) == [(1, b"a", b"2"), (2, b"a", b"3")]
    log.compact(now_ms=9_000, force=True)
    assert key_values(log) == [(2, b"a", b"3")]


def test_dirty_ratio_below_the_minimum_skips_the_pass():
    log = compacted_log(min_cleanable_dirty_ratio=0.5, segment_bytes=10**6)
    append_pairs(log, [(bytes([i]), b"v") for i in range(10)])
    log.roll(1_000)
    assert log.compact(now_ms=2_000).skipped_reason is None  # all dirty: ratio 1.0
    append_pairs(log, [(b"\x00", b"w")])
    log.roll(2_000)
    stats = log.compact(now_ms=3_000)  # one small dirty segment against ten clean records
    assert stats.skipped_reason is not None and "ratio" in stats.skipped_reason
    assert log.compact(now_ms=3_000, force=True).records_retained == 10


def test_compaction_respects_first_uncleanable_offset():
    log = compacted_log(segment_bytes=len(keyed([(b"a", b"1")])) * 2)
    append_pairs(log, [(b"a", b"1"), (b"a", b"2"), (b"a", b"3"), (b"a", b"4"), (b"a", b"5")])
    log.compact(now_ms=2_000, first_uncleanable_offset=2)  # only segment [0, 2) may be cleaned
    assert key_values(log) == [(1, b"a", b"2"), (2, b"a", b"3"), (3, b"a", b"4"), (4, b"a", b"5")]


def test_compaction_swaps_atomically_and_leaves_no_temporary_files():
    storage = MemoryStorage()
    log = compacted_log(storage, file_delete_delay_ms=0)
    append_pairs(log, [(b"k", b"%d" % i) for i in range(10)])
    log.roll(1_000)
    log.compact(now_ms=2_000)
    suffixes = {path.rsplit(".", 1)[-1] for path in storage.files if "/0" in path}
    assert suffixes == {"log", "index", "timeindex"}
    log.close()
    reopened = compacted_log(storage)
    assert key_values(reopened) == [(9, b"k", b"9")]


def test_a_crash_before_the_swap_leaves_the_old_log():
    storage = MemoryStorage()
    log = compacted_log(storage)
    append_pairs(log, [(b"k", b"%d" % i) for i in range(4)])
    log.roll(1_000)
    before = read_all(log)
    log.close()
    storage.files[f"{DIRECTORY}/00000000000000000000.log.cleaned"] = bytearray(keyed([(b"k", b"3")]))
    reopened = compacted_log(storage)
    assert read_all(reopened) == before


def test_corrupt_batch_aborts_compaction_without_changing_the_log():
    storage = MemoryStorage()
    log = compacted_log(storage)
    append_pairs(log, [(b"k", b"%d" % i) for i in range(3)])
    log.roll(1_000)
    path = f"{DIRECTORY}/00000000000000000000.log"
    storage.files[path][-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        log.compact(now_ms=2_000)
    assert not [p for p in storage.files if p.endswith(".cleaned")]
    assert len(log.segments) == 2


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=1, max_size=40), st.integers(150, 600))
def test_compaction_equals_the_last_value_per_key(writes, segment_bytes):
    log = compacted_log(segment_bytes=segment_bytes, delete_retention_ms=0)
    expected: dict[bytes, tuple[int, bytes | None]] = {}
    for offset, (key_number, is_tombstone) in enumerate(writes):
        key, value = b"k%d" % key_number, None if is_tombstone else b"v%d" % offset
        log.append_as_leader(keyed([(key, value)]), 0, 1_000)
        expected[key] = (offset, value)
    log.roll(1_000)
    log.compact(now_ms=2_000, force=True)
    log.compact(now_ms=3_000, force=True)  # second pass: tombstone horizons (0 ms) have passed
    survivors = sorted((offset, key, value) for key, (offset, value) in expected.items() if value is not None)
    assert key_values(log) == survivors
    assert log.log_end_offset == len(writes)


def test_compaction_preserves_compression_and_producer_fields():
    log = compacted_log()
    data = build_batch([(b"a", b"1"), (b"a", b"2")], compression=4, producer_id=42, producer_epoch=3, base_sequence=0,
                       base_timestamp=1_000)
    log.append_as_leader(data, 7, 1_000)
    log.roll(1_000)
    log.compact(now_ms=2_000)
    (decoded,) = list(decode_batches(read_all(log)))
    header = decoded.header
    assert (header.compression, header.producer_id, header.producer_epoch, header.base_sequence) == (4, 42, 3, 0)
    assert (header.partition_leader_epoch, header.last_offset_delta) == (7, 1)
    assert [(r.offset, r.value) for r in decoded.records] == [(1, b"2")]


def test_cleaner_checkpoint_survives_reopen_so_a_clean_log_is_not_recleaned():
    storage = MemoryStorage()
    log = compacted_log(storage, min_cleanable_dirty_ratio=0.5, segment_bytes=10**6)
    append_pairs(log, [(bytes([i]), b"v") for i in range(10)])
    log.roll(1_000)
    assert log.compact(now_ms=2_000).end_offset == 10
    log.close()
    assert bytes(storage.files[f"{DIRECTORY}/cleaner-offset-checkpoint"]) == b"0\n1\n10\n"
    reopened = compacted_log(storage, min_cleanable_dirty_ratio=0.5, segment_bytes=10**6)
    assert reopened.cleaner_checkpoint == 10
    assert reopened.compact(now_ms=3_000).skipped_reason == "nothing dirty to clean"


def test_compaction_removes_aborted_transactions_and_compacts_committed_ones_keeping_markers():
    """The cleanable range ends at the last stable offset, so every transaction in it is decided: an aborted
    one's data goes whole (its keys never shadow older records), a committed one's records compact by key and
    keep their transactional flag, markers stay."""
    from partitions.log import AppendOrigin
    from partitions.records import ABORT, COMMIT, build_control_batch

    log = compacted_log(segment_bytes=10**6)

    def txn(producer_id, sequence, pairs):
        batch = build_batch(pairs, base_timestamp=1_000, producer_id=producer_id, producer_epoch=0,
                            base_sequence=sequence, is_transactional=True)
        return log.append_as_leader(batch, 0, 1_000).first_offset

    def marker(producer_id, kind):
        batch = build_control_batch(kind, producer_id, 0, 0, 1_000)
        return log.append_as_leader(batch, 0, 1_000, origin=AppendOrigin.COORDINATOR).first_offset

    append_pairs(log, [(b"a", b"plain-1"), (b"b", b"plain-1")])                 # 0, 1
    aborted_first = txn(7, 0, [(b"a", b"aborted"), (b"c", b"aborted")])        # 2-3
    aborted_marker = marker(7, ABORT)                                           # 4
    txn(8, 0, [(b"b", b"committed-old"), (b"d", b"committed")])                 # 5-6
    marker(8, COMMIT)                                                           # 7
    txn(8, 2, [(b"b", b"committed-new")])                                       # 8
    marker(8, COMMIT)                                                           # 9
    log.roll(1_000)
    log.compact(now_ms=2_000, aborted=[(7, aborted_first, aborted_marker)])
    batches = list(decode_batches(read_all(log)))
    data = [(r.offset, r.key, r.value) for b in batches if not b.header.is_control for r in b.records]
    assert data == [(0, b"a", b"plain-1"), (6, b"d", b"committed"), (8, b"b", b"committed-new")]
    assert [b.header.base_offset for b in batches if b.header.is_control] == [4, 7, 9]
    assert all(b.header.is_transactional for b in batches if b.header.producer_id == 8)
    assert not any(b.header.producer_id == 7 and not b.header.is_control for b in batches)
    assert log.log_end_offset == 10
