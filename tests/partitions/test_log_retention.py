"""Retention by time and size (Kafka's deleteRetentionMsBreachedSegments / deleteRetentionSizeBreachedSegments)."""

from __future__ import annotations

from partitions.storage import MemoryStorage
from tests.partitions.logtools import batch, open_log, values

SIZE = len(batch(b"v0"))


def fill_with_timestamps(log, timestamps, keyed=False):
    for i, timestamp in enumerate(timestamps):  # a compacted log refuses keyless records
        key = b"k%d" % i if keyed else None
        log.append_as_leader(batch(b"v%d" % i, timestamp_ms=timestamp, key=key), 0, max(timestamps))


def test_retention_ms_deletes_closed_segments_whose_largest_timestamp_expired():
    log = open_log(segment_bytes=SIZE * 2, retention_ms=1_000, now_ms=0)
    fill_with_timestamps(log, [100, 200, 300, 400, 5_000, 5_100, 5_200])
    assert [s.base_offset for s in log.segments] == [0, 2, 4, 6]
    assert log.apply_retention(now_ms=1_350) == 1  # segment 0 (max 200) expired; segment 2 (max 400) not yet
    assert [s.base_offset for s in log.segments] == [2, 4, 6]
    assert log.log_start_offset == 2
    assert log.apply_retention(now_ms=1_401) == 1
    assert log.log_start_offset == 4
    assert log.apply_retention(now_ms=100_000) == 1  # never the active segment
    assert [s.base_offset for s in log.segments] == [6]
    assert values(log) == [(6, b"v6")]


def test_retention_ms_minus_one_keeps_everything():
    log = open_log(segment_bytes=SIZE, retention_ms=-1, now_ms=0)
    fill_with_timestamps(log, [1, 2, 3])
    assert log.apply_retention(now_ms=10**12) == 0


def test_retention_stops_at_the_first_segment_that_is_not_expired():
    log = open_log(segment_bytes=SIZE, retention_ms=1_000, now_ms=0)
    fill_with_timestamps(log, [100, 9_000, 100, 9_500])
    assert log.apply_retention(now_ms=5_000) == 1  # only the oldest: the next one is young
    assert log.log_start_offset == 1


def test_retention_bytes_deletes_oldest_segments_until_under_the_limit():
    log = open_log(segment_bytes=SIZE * 2, retention_bytes=SIZE * 3, retention_ms=-1, now_ms=0)
    fill_with_timestamps(log, [1] * 7)  # segments of 2, 2, 2, 1 batches = 7 batches
    assert log.apply_retention(now_ms=10) == 2  # 7 -> 5 -> 3 batches
    assert [s.base_offset for s in log.segments] == [4, 6]
    assert log.size_bytes == SIZE * 3
    assert log.apply_retention(now_ms=10) == 0


def test_compact_only_policy_does_not_delete_by_retention():
    log = open_log(segment_bytes=SIZE + 8, retention_ms=1, cleanup_policy=("compact",), now_ms=0)
    fill_with_timestamps(log, [1, 2, 3], keyed=True)
    assert log.apply_retention(now_ms=10**9) == 0


def test_retention_survives_reopen_with_the_new_log_start_offset():
    storage = MemoryStorage()
    log = open_log(storage, segment_bytes=SIZE, retention_ms=1_000, now_ms=0)
    fill_with_timestamps(log, [100, 200, 9_000])
    log.apply_retention(now_ms=2_000)
    log.close()
    reopened = open_log(storage, segment_bytes=SIZE, retention_ms=1_000, now_ms=2_000)
    assert reopened.log_start_offset == 2
    assert values(reopened) == [(2, b"v2")]
