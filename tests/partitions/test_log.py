"""PartitionLog: appends, reads, truncation, epochs, timestamps, DeleteRecords, flush policy (Kafka UnifiedLog)."""

from __future__ import annotations

import pytest

from partitions.batch import parse_header
from partitions.errors import (
    CorruptRecordError,
    FencedLeaderEpochError,
    InvalidConfigError,
    InvalidRecordError,
    InvalidTimestampError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
)
from partitions.log import AppendOrigin, PartitionLog, UnexpectedAppendOffsetError
from partitions.log_config import LogConfig
from partitions.records import build_batch, build_control_batch, decode_batches, COMMIT
from partitions.storage import MemoryStorage
from tests.partitions.logtools import DIRECTORY, batch, batch_bases, open_log, read_all, values


def fill(log: PartitionLog, count: int, epoch: int = 0, now_ms: int = 1_000, start: int = 0) -> None:
    for i in range(start, start + count):
        log.append_as_leader(batch(b"v%d" % i, timestamp_ms=now_ms + i), epoch, now_ms + i)


def test_leader_append_assigns_offsets_and_stamps_epoch():
    log = open_log()
    first = log.append_as_leader(batch(b"a", b"b", b"c"), leader_epoch=4, now_ms=1_000)
    second = log.append_as_leader(batch(b"d"), leader_epoch=4, now_ms=1_001)
    assert (first.first_offset, first.last_offset, first.record_count) == (0, 2, 3)
    assert (second.first_offset, second.last_offset) == (3, 3)
    assert log.log_end_offset == 4
    headers = [decoded.header for decoded in decode_batches(read_all(log))]
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(0, 4), (3, 4)]
    assert values(log) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
    assert log.epoch_cache.entries() == [(4, 0)]
    assert first.batch_headers[0].base_offset == 0 and second.batch_headers[0].base_offset == 3


def test_leader_append_of_several_batches_in_one_request():
    log = open_log()
    info = log.append_as_leader(batch(b"a") + batch(b"b", b"c") + batch(b"d"), 1, 1_000)
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 3, 4)
    assert batch_bases(read_all(log)) == [0, 1, 3]


def test_leader_stamps_a_bytearray_in_place_without_copying():
    log = open_log()
    log.append_as_leader(batch(b"x"), 0, 1_000)
    data = bytearray(batch(b"y"))
    log.append_as_leader(data, 2, 1_001)
    assert parse_header(data).base_offset == 1 and parse_header(data).partition_leader_epoch == 2


def test_log_append_time_overrides_max_timestamp_and_keeps_crc_valid():
    log = open_log(message_timestamp_type="LogAppendTime")
    info = log.append_as_leader(batch(b"a", timestamp_ms=5), 0, now_ms=77_000)
    assert info.log_append_time_ms == 77_000 and info.max_timestamp == 77_000
    (decoded,) = list(decode_batches(read_all(log)))  # decode validates the CRC
    assert decoded.header.is_log_append_time and decoded.header.max_timestamp == 77_000
    assert decoded.records[0].timestamp == 77_000


@pytest.mark.parametrize(
    "mutate, error",
    [
        (lambda b: b[:-1], CorruptRecordError),  # truncated
        (lambda b: b[:30], CorruptRecordError),  # not even a header
        (lambda b: b[:-1] + bytes([b[-1] ^ 0xFF]), CorruptRecordError),  # CRC mismatch
    ],
)
def test_corrupt_batches_are_rejected_and_nothing_is_appended(mutate, error):
    log = open_log()
    good = batch(b"good")
    with pytest.raises(error):
        log.append_as_leader(good + mutate(batch(b"bad")), 0, 1_000)
    assert log.log_end_offset == 0 and log.active_segment.size == 0


def test_batch_above_max_message_bytes_is_rejected():
    log = open_log(max_message_bytes=100)
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(batch(b"x" * 200), 0, 1_000)
    assert log.log_end_offset == 0


def test_unknown_compression_codec_is_rejected():
    data = bytearray(batch(b"x"))
    data[22] |= 0x07  # codec 7 in the attributes' low byte (CRC recomputed below)
    from partitions.batch import CRC_POSITION, compute_crc
    import struct

    struct.pack_into(">I", data, CRC_POSITION, compute_crc(data))
    with pytest.raises(UnsupportedCompressionTypeError):
        open_log().append_as_leader(bytes(data), 0, 1_000)


def test_clients_may_not_write_control_batches_but_coordinators_may():
    log = open_log()
    marker = build_control_batch(COMMIT, producer_id=7, producer_epoch=0, coordinator_epoch=1, timestamp=1_000)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(marker, 0, 1_000)
    info = log.append_as_leader(marker, 0, 1_000, origin=AppendOrigin.COORDINATOR)
    assert info.batch_headers[0].is_control


def test_timestamp_outside_the_allowed_window_is_rejected():
    log = open_log(message_timestamp_before_max_ms=1_000, message_timestamp_after_max_ms=1_000)
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(batch(b"old", timestamp_ms=1_000), 0, now_ms=10_000)
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(batch(b"future", timestamp_ms=20_000), 0, now_ms=10_000)
    log.append_as_leader(batch(b"fine", timestamp_ms=9_500), 0, now_ms=10_000)
    assert log.log_end_offset == 1


def test_leader_append_with_an_older_epoch_is_fenced():
    log = open_log()
    log.append_as_leader(batch(b"a"), 5, 1_000)
    with pytest.raises(FencedLeaderEpochError):
        log.append_as_leader(batch(b"b"), 4, 1_000)


def test_follower_append_keeps_leader_offsets_and_epochs():
    leader, follower = open_log(), open_log()
    leader.append_as_leader(batch(b"a", b"b"), 1, 1_000)
    leader.append_as_leader(batch(b"c"), 3, 1_000)
    info = follower.append_as_follower(read_all(leader), 1_000)
    assert (info.first_offset, info.last_offset) == (0, 2)
    assert read_all(follower) == read_all(leader)
    assert follower.epoch_cache.entries() == [(1, 0), (3, 2)]


def test_follower_append_below_log_end_offset_is_refused():
    leader, follower = open_log(), open_log()
    leader.append_as_leader(batch(b"a"), 1, 1_000)
    follower.append_as_follower(read_all(leader), 1_000)
    with pytest.raises(UnexpectedAppendOffsetError):
        follower.append_as_follower(read_all(leader), 1_000)
    assert follower.log_end_offset == 1


def test_follower_append_accepts_an_offset_gap_from_a_compacted_leader():
    follower = open_log()
    follower.append_as_follower(build_batch([(b"k", b"v")], base_offset=10, partition_leader_epoch=2), 1_000)
    assert follower.log_end_offset == 11
    assert values(follower, 0) == [(10, b"v")]


def test_read_returns_whole_batches_from_the_batch_holding_the_offset():
    log = open_log()
    log.append_as_leader(batch(b"a", b"b", b"c"), 0, 1_000)
    log.append_as_leader(batch(b"d"), 0, 1_000)
    assert batch_bases(log.read(1, 1 << 20).records) == [0, 3]
    assert batch_bases(log.read(3, 1 << 20).records) == [3]
    assert log.read(4, 1 << 20).records == b""


def test_read_respects_max_bytes_with_whole_batches_and_min_one_batch():
    log = open_log(index_interval_bytes=0)
    fill(log, 10)
    size = len(batch(b"v0"))
    assert batch_bases(log.read(0, size * 3 + size // 2).records) == [0, 1, 2]
    assert batch_bases(log.read(0, 5).records) == [0]  # one batch even over max_bytes
    assert log.read(0, 5, min_one_batch=False).records == b""


def test_read_never_returns_a_batch_past_max_offset():  # the high watermark
    log = open_log()
    log.append_as_leader(batch(b"a", b"b"), 0, 1_000)
    log.append_as_leader(batch(b"c", b"d"), 0, 1_000)
    log.append_as_leader(batch(b"e"), 0, 1_000)
    assert batch_bases(log.read(0, 1 << 20, max_offset=4).records) == [0, 2]
    assert batch_bases(log.read(0, 1 << 20, max_offset=3).records) == [0]  # batch 2..3 crosses the HW
    assert log.read(2, 1 << 20, max_offset=2).records == b""
    assert log.read(0, 1 << 20, max_offset=0).records == b""


def test_read_spans_segments_with_one_slice_per_segment():
    log = open_log(segment_bytes=len(batch(b"v0")) * 3)
    fill(log, 10)
    assert len(log.segments) == 4
    data = log.read(0, 1 << 20)
    assert len(data.slices) == 4
    assert [offset for offset, _ in values(log)] == list(range(10))


def test_read_outside_the_log_raises_offset_out_of_range():
    log = open_log()
    fill(log, 3)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 100)
    log.delete_records_before(2)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 100)
    assert log.read(3, 100).records == b""


def test_segment_rolls_by_bytes():
    size = len(batch(b"v0"))
    log = open_log(segment_bytes=size * 2)
    fill(log, 5)
    assert [s.base_offset for s in log.segments] == [0, 2, 4]
    assert all(s.size <= size * 2 for s in log.segments)


def test_segment_rolls_by_ms():
    log = open_log(segment_ms=1_000, now_ms=0)
    log.append_as_leader(batch(b"a"), 0, now_ms=0)
    log.append_as_leader(batch(b"b"), 0, now_ms=999)
    assert len(log.segments) == 1
    log.append_as_leader(batch(b"c"), 0, now_ms=1_000)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_segment_jitter_ms_rolls_each_segment_its_own_amount_early():
    """segment.jitter.ms: a segment rolls by time at segment.ms less its own jitter, below min(jitter, segment.ms);
    the jitter is drawn from the segment's partition and base offset, so the partitions of one topic roll at
    different times and a run replays them the same."""
    jitters = []
    for partition in range(8):
        log = PartitionLog.open(MemoryStorage(), f"jittery-{partition}", LogConfig(segment_ms=1_000,
                                                                                     segment_jitter_ms=600), 0)
        log.append_as_leader(batch(b"a"), 0, now_ms=0)
        roll_ms = log.config.roll_ms(log.active_segment.jitter_seed)
        assert 400 < roll_ms <= 1_000
        log.append_as_leader(batch(b"b"), 0, now_ms=roll_ms - 1)
        assert len(log.segments) == 1
        log.append_as_leader(batch(b"c"), 0, now_ms=roll_ms)
        assert [s.base_offset for s in log.segments] == [0, 2]
        jitters.append(1_000 - roll_ms)
        again = PartitionLog.open(MemoryStorage(), f"jittery-{partition}", log.config, 0)
        assert again.config.roll_ms(again.active_segment.jitter_seed) == roll_ms  # the same draw every run
    assert len(set(jitters)) == 8, jitters
    assert LogConfig.from_topic_configs({"segment.jitter.ms": "600"}).segment_jitter_ms == 600
    with pytest.raises(InvalidConfigError, match="segment.jitter.ms"):
        LogConfig.from_topic_configs({"segment.jitter.ms": "-1"})


def test_roll_fsyncs_the_closed_segment():
    storage = MemoryStorage()
    log = open_log(storage, segment_bytes=len(batch(b"v0")))
    fill(log, 1)
    before = storage.fsync_count
    fill(log, 1, start=1)
    assert storage.fsync_count >= before + 3  # .log, .index, .timeindex of the sealed segment


def test_flush_messages_one_fsyncs_every_append():
    storage = MemoryStorage()
    log = open_log(storage, flush_messages=1)
    log.assign_epoch_start(0, 0)
    fill(log, 1)  # the first append also writes the epoch checkpoint (file and directory fsyncs)
    before = storage.fsync_count
    fill(log, 4)
    assert storage.fsync_count - before == 4  # the .log once per append
    assert log.unflushed_messages == 0


def test_flush_messages_counts_records_not_batches():
    storage = MemoryStorage()
    log = open_log(storage, flush_messages=5)
    log.assign_epoch_start(0, 0)
    before = storage.fsync_count
    log.append_as_leader(batch(b"a", b"b", b"c"), 0, 1_000)
    assert storage.fsync_count == before + 2  # the epoch checkpoint (file and directory), not the .log
    log.append_as_leader(batch(b"d", b"e"), 0, 1_000)
    assert storage.fsync_count == before + 5  # the .log, then (its first fsync) its directory and the parent


def test_no_flush_policy_never_fsyncs_on_append():
    storage = MemoryStorage()
    log = open_log(storage)
    log.assign_epoch_start(0, 0)
    fill(log, 1)  # (writes the epoch checkpoint)
    before = storage.fsync_count
    fill(log, 19, start=1)
    assert storage.fsync_count == before
    assert log.unflushed_messages == 20


def test_flush_ms_flushes_from_maybe_flush():
    storage = MemoryStorage()
    log = open_log(storage, flush_ms=500, now_ms=0)
    log.append_as_leader(batch(b"a"), 0, 100)
    before = storage.fsync_count
    assert not log.maybe_flush(499)
    assert log.maybe_flush(500)
    assert storage.fsync_count == before + 3  # the .log, then (its first fsync) its directory and the parent
    assert not log.maybe_flush(2_000)  # nothing unflushed


def test_truncate_to_drops_the_batch_holding_the_offset_and_everything_after():  # KIP-101
    log = open_log(segment_bytes=len(batch(b"a", b"b")) * 2)
    log.append_as_leader(batch(b"a", b"b"), 1, 1_000)
    log.append_as_leader(batch(b"c", b"d"), 2, 1_000)
    log.append_as_leader(batch(b"e", b"f"), 3, 1_000)
    log.append_as_leader(batch(b"g"), 3, 1_000)
    assert [s.base_offset for s in log.segments] == [0, 4]
    log.truncate_to(5)
    assert log.log_end_offset == 4 and values(log)[-1] == (3, b"d")
    assert log.epoch_cache.entries() == [(1, 0), (2, 2)]
    log.truncate_to(3)
    assert log.log_end_offset == 2 and [s.base_offset for s in log.segments] == [0]
    log.append_as_leader(batch(b"x"), 4, 1_000)
    assert values(log) == [(0, b"a"), (1, b"b"), (2, b"x")]
    assert log.epoch_cache.entries() == [(1, 0), (4, 2)]


def test_truncate_to_past_the_end_changes_nothing():
    log = open_log()
    fill(log, 3)
    log.truncate_to(10)
    assert log.log_end_offset == 3


def test_truncate_fully_and_start_at():
    log = open_log()
    fill(log, 3, epoch=2)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset) == (100, 100)
    assert log.epoch_cache.entries() == []
    log.append_as_leader(batch(b"x"), 3, 1_000)
    assert values(log) == [(100, b"x")]


def test_end_offset_for_epoch_and_assign_epoch_start():  # KIP-101 OffsetsForLeaderEpoch
    log = open_log()
    log.append_as_leader(batch(b"a", b"b"), 1, 1_000)
    log.assign_epoch_start(3, log.log_end_offset)
    log.append_as_leader(batch(b"c"), 3, 1_000)
    assert log.end_offset_for_epoch(1) == (1, 2)
    assert log.end_offset_for_epoch(2) == (1, 2)
    assert log.end_offset_for_epoch(3) == (3, 3)
    assert log.end_offset_for_epoch(0) == (0, 0)
    assert log.end_offset_for_epoch(4) == (-1, -1)
    assert log.latest_epoch == 3


def test_offset_for_timestamp_finds_the_first_record_at_or_after():
    log = open_log(index_interval_bytes=0)
    log.append_as_leader(build_batch([(None, b"a", (), 100), (None, b"b", (), 200)]), 0, 1_000)
    log.append_as_leader(build_batch([(None, b"c", (), 300)]), 0, 1_000)
    log.append_as_leader(build_batch([(None, b"d", (), 250), (None, b"e", (), 400)]), 0, 1_000)
    assert log.offset_for_timestamp(50) == (0, 100)
    assert log.offset_for_timestamp(150) == (1, 200)
    assert log.offset_for_timestamp(300) == (2, 300)
    assert log.offset_for_timestamp(301) == (4, 400)
    assert log.offset_for_timestamp(401) is None
    assert log.offset_for_timestamp(-2) == (0, -1)
    assert log.offset_for_timestamp(-1) == (5, -1)
    assert log.offset_for_timestamp(-3) == (4, 400)


def test_offset_for_timestamp_across_segments_after_reopen():
    storage = MemoryStorage()
    log = open_log(storage, segment_bytes=len(batch(b"v0")) * 2)
    fill(log, 6, now_ms=10_000)  # timestamps 10000..10005
    log.close()
    log = open_log(storage, segment_bytes=len(batch(b"v0")) * 2)
    assert log.offset_for_timestamp(10_003) == (3, 10_003)
    assert log.offset_for_timestamp(10_006) is None


def test_delete_records_before_advances_log_start_and_deletes_whole_segments():
    storage = MemoryStorage()
    log = open_log(storage, segment_bytes=len(batch(b"v0")) * 2)
    fill(log, 6, epoch=1)
    assert log.delete_records_before(3) == 3
    assert [s.base_offset for s in log.segments] == [2, 4]
    assert log.log_start_offset == 3
    assert values(log) == [(3, b"v3"), (4, b"v4"), (5, b"v5")]
    assert log.epoch_cache.entries() == [(1, 3)]
    log.close()
    reopened = open_log(storage, segment_bytes=len(batch(b"v0")) * 2)
    assert reopened.log_start_offset == 3
    with pytest.raises(OffsetOutOfRangeError):
        reopened.delete_records_before(7)


def test_deleted_segments_keep_their_files_until_file_delete_delay_ms():
    storage = MemoryStorage()
    log = open_log(storage, segment_bytes=len(batch(b"v0")), file_delete_delay_ms=1_000, now_ms=0)
    fill(log, 3, now_ms=0)
    log.delete_records_before(2)
    deleted = [name for name in storage.files if name.endswith(".deleted")]
    assert sorted(name for name in deleted if name.endswith(".log.deleted")) == [
        f"{DIRECTORY}/00000000000000000000.log.deleted", f"{DIRECTORY}/00000000000000000001.log.deleted"]
    assert {name.split("/")[-1].split(".")[0] for name in deleted} == {"00000000000000000000", "00000000000000000001"}
    log.maybe_flush(500)
    assert [name for name in storage.files if name.endswith(".deleted")] == deleted
    log.maybe_flush(1_002)
    assert not [name for name in storage.files if name.endswith(".deleted")]


def test_directory_files_are_named_as_kafka_names_them():
    storage = MemoryStorage()
    # An index entry for every batch after a segment's first, so that each segment has its index files.
    log = open_log(storage, segment_bytes=len(batch(b"v0")) * 2, index_interval_bytes=1)
    fill(log, 4, epoch=5)
    log.close()  # (the active segment's entries are buffered until then)
    names = sorted(name.split("/")[1] for name in storage.files)
    assert names == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
        "00000000000000000002.index",
        "00000000000000000002.log",
        "00000000000000000002.timeindex",
        "clean-shutdown",
        "leader-epoch-checkpoint",
    ]
    assert bytes(storage.files[f"{DIRECTORY}/leader-epoch-checkpoint"]) == b"0\n1\n5 0\n"


def test_config_from_topic_configs_drives_the_log():
    config = LogConfig.from_topic_configs({"segment.bytes": str(len(batch(b"v0"))), "flush.messages": "1"})
    storage = MemoryStorage()
    log = PartitionLog.open(storage, DIRECTORY, config, 0)
    fill(log, 2)
    assert len(log.segments) == 2
    assert log.unflushed_messages == 0


def test_large_immutable_batches_are_written_without_a_whole_copy_and_read_back_identically():
    log = open_log()
    big = [batch(bytes([i]) * 70_000, bytes([i + 1]) * 10) for i in range(3)]
    info = log.append_as_leader(b"".join(big), 6, 1_000)
    assert (info.first_offset, info.last_offset) == (0, 5)
    decoded = list(decode_batches(read_all(log)))  # CRCs still valid: only base offset and epoch changed
    assert [(d.header.base_offset, d.header.partition_leader_epoch) for d in decoded] == [(0, 6), (2, 6), (4, 6)]
    assert [d.records[1].value for d in decoded] == [b"\x01" * 10, b"\x02" * 10, b"\x03" * 10]
    assert info.batch_headers == tuple(d.header for d in decoded)


def test_a_new_leader_of_an_empty_log_writes_its_epoch_checkpoint_with_the_first_append():
    storage = MemoryStorage()
    checkpoint = f"{DIRECTORY}/leader-epoch-checkpoint"
    log = open_log(storage)
    log.assign_epoch_start(3, 0)
    assert checkpoint not in storage.files and log.latest_epoch == 3  # held, not written
    assert log.end_offset_for_epoch(3) == (3, 0)
    log.assign_epoch_start(4, 0)  # a newer leadership before any record: still only in memory
    assert checkpoint not in storage.files
    log.append_as_leader(batch(b"a"), 4, 1_000)
    assert bytes(storage.files[checkpoint]) == b"0\n1\n4 0\n"
    log.assign_epoch_start(5, 1)  # a log with records writes at once
    assert bytes(storage.files[checkpoint]) == b"0\n2\n4 0\n5 1\n"
    reopened = open_log(storage)
    assert reopened.epoch_cache.entries() == [(4, 0)]  # epoch 5 starts at the log end: no record of it yet


def test_a_follower_of_an_empty_log_writes_the_epochs_of_what_it_appends():
    storage = MemoryStorage()
    leader = open_log()
    leader.append_as_leader(batch(b"a"), 7, 1_000)
    follower = open_log(storage)
    follower.append_as_follower(read_all(leader), 1_000)
    assert bytes(storage.files[f"{DIRECTORY}/leader-epoch-checkpoint"]) == b"0\n1\n7 0\n"
