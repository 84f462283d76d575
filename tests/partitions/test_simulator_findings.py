"""Regression tests for bugs the cluster simulation found."""

import struct

import pytest

from partitions.errors import CorruptRecordError
from partitions.storage import MemoryStorage
from tests.partitions.test_replica_helpers import batch, make_log
from partitions.replica import Partition


def test_a_follower_high_watermark_never_moves_back_when_a_restarted_leader_reports_a_lower_one():
    # Kafka's UnifiedLog.maybeUpdateHighWatermark only raises it; found by the simulator (follower HW 2331 -> 0).
    follower = Partition("t", 0, 2, make_log(MemoryStorage()))
    follower.become_follower(1, 0, 0, (1, 2), (1, 2))
    follower.follower_handle_fetch_response(batch(b"a", b"b", b"c"), 3, 0, None, 0)
    assert follower.high_watermark == 3
    follower.follower_handle_fetch_response(b"", 0, 0, None, 1)  # a leader that restarted and knows HW 0 yet
    assert follower.high_watermark == 3


def test_a_corrupt_batch_length_read_from_disk_is_a_corrupt_record_error_not_a_crash():
    storage = MemoryStorage()
    log = make_log(storage)
    for index in range(5):
        log.append_as_leader(batch(b"x" * 200, timestamp_ms=1_000 + index), 0, 0)
    segment = log.segments[0]
    # Flip the length of the second batch in the page cache, as a bad read would.
    second = len(batch(b"x" * 200))
    data = storage.files[segment.log.path]
    struct.pack_into(">i", data, second + 8, 0)  # a length no batch can have
    with pytest.raises(CorruptRecordError):
        segment.batch_boundary_at_or_before(segment.size, 0)
