"""Crash recovery of the partition log: torn tails, corrupt bytes, insane indexes, leftover files."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partitions.batch import CRC_POSITION, HEADER_SIZE, iter_batches
from partitions.log import PartitionLog
from partitions.storage import MemoryStorage
from tests.partitions.logtools import DIRECTORY, batch, open_log, read_all, values

appends = st.lists(
    st.tuples(st.integers(1, 4), st.integers(0, 40), st.integers(0, 2)),  # records, value bytes, epoch bump
    min_size=1,
    max_size=25,
)


def split_batches(data: bytes) -> list[bytes]:
    return [data[position : position + header.size] for position, header in iter_batches(data)]


def assert_indexes_valid(log: PartitionLog) -> None:
    for segment in log.segments:
        assert segment.offset_index.sanity_error(segment.size) is None
        assert segment.time_index.sanity_error(segment.next_offset) is None
        for offset, position in zip(segment.offset_index.keys, segment.offset_index.values):
            found = segment.translate_offset(offset)
            assert found is not None and found[0] == position and found[1].last_offset == offset


def assert_every_offset_readable(log: PartitionLog) -> None:
    for offset in range(log.log_start_offset, log.log_end_offset):
        (first, *_) = [header for _, header in iter_batches(log.read(offset, 1).records)]
        assert first.base_offset <= offset <= first.last_offset, (offset, first)


def build_log(storage: MemoryStorage, plan, segment_bytes: int, index_interval_bytes: int) -> list[bytes]:
    log = open_log(storage, segment_bytes=segment_bytes, index_interval_bytes=index_interval_bytes)
    epoch = 0
    for count, value_bytes, epoch_bump in plan:
        epoch += epoch_bump
        log.append_as_leader(batch(*[bytes([count]) * value_bytes] * count, timestamp_ms=1_000 + epoch), epoch, 1_000)
    return split_batches(read_all(log))  # no close(): the process "crashes" here


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plan=appends,
    segment_bytes=st.integers(300, 1_500),
    index_interval_bytes=st.integers(0, 300),
    crash=st.tuples(st.sampled_from(["truncate", "flip"]), st.floats(0, 1), st.integers(0, 7)),
)
def test_crash_at_any_byte_of_the_active_segment_recovers_a_prefix(plan, segment_bytes, index_interval_bytes, crash):
    storage = MemoryStorage()
    appended = build_log(storage, plan, segment_bytes, index_interval_bytes)
    active_path = max(path for path in storage.files if path.endswith(".log"))
    data = storage.files[active_path]
    kind, where, bit = crash
    if kind == "truncate":
        del data[int(where * len(data)) :]
    elif data:
        # Flip a bit the format protects: the CRC covers attributes..end, the header checks length and magic.
        # base_offset and partition_leader_epoch sit outside the CRC by design (stamped by the leader).
        protected = [p for b_start, h in iter_batches(bytes(data)) for p in range(b_start + 8, b_start + h.size)
                     if not b_start + 12 <= p < b_start + 16]
        position = protected[int(where * (len(protected) - 1))]
        data[position] ^= 1 << bit
    recovered = open_log(storage, segment_bytes=segment_bytes, index_interval_bytes=index_interval_bytes)
    kept = split_batches(read_all(recovered))
    assert kept == appended[: len(kept)]
    expected_end = int.from_bytes(kept[-1][:8], "big") + int.from_bytes(kept[-1][23:27], "big") + 1 if kept else 0
    assert recovered.log_end_offset == expected_end
    assert_indexes_valid(recovered)
    assert_every_offset_readable(recovered)
    assert recovered.epoch_cache.start_offsets == sorted(set(recovered.epoch_cache.start_offsets))
    assert all(start < recovered.log_end_offset for start in recovered.epoch_cache.start_offsets)
    info = recovered.append_as_leader(batch(b"after"), (recovered.latest_epoch or 0) + 1, 2_000)
    assert info.first_offset == expected_end


def test_torn_tail_is_cut_and_the_log_continues():
    storage = MemoryStorage()
    log = open_log(storage)
    for i in range(3):
        log.append_as_leader(batch(b"v%d" % i), 0, 1_000)
    path = f"{DIRECTORY}/00000000000000000000.log"
    full = len(storage.files[path])
    del storage.files[path][full - 5 :]
    recovered = open_log(storage)
    assert recovered.log_end_offset == 2
    assert len(storage.files[path]) == full - len(batch(b"v2"))
    recovered.append_as_leader(batch(b"new"), 0, 1_000)
    assert values(recovered) == [(0, b"v0"), (1, b"v1"), (2, b"new")]


def test_corrupt_crc_in_the_middle_truncates_from_that_batch():
    storage = MemoryStorage()
    log = open_log(storage)
    for i in range(4):
        log.append_as_leader(batch(b"v%d" % i), 0, 1_000)
    path = f"{DIRECTORY}/00000000000000000000.log"
    size = len(batch(b"v0"))
    storage.files[path][size + CRC_POSITION] ^= 0xFF  # second batch's stored CRC
    recovered = open_log(storage)
    assert values(recovered) == [(0, b"v0")]


def test_clean_shutdown_skips_the_scan_and_keeps_everything():
    storage = MemoryStorage()
    log = open_log(storage, segment_bytes=200, index_interval_bytes=0)
    for i in range(10):
        log.append_as_leader(batch(b"v%d" % i, timestamp_ms=1_000 + i), 1, 1_000 + i)
    before = read_all(log)
    log.close()
    assert f"{DIRECTORY}/clean-shutdown" in storage.files
    reopened = open_log(storage, segment_bytes=200, index_interval_bytes=0)
    assert f"{DIRECTORY}/clean-shutdown" not in storage.files
    assert read_all(reopened) == before and reopened.log_end_offset == 10
    assert reopened.active_segment.max_timestamp == 1_009
    assert_indexes_valid(reopened)


def test_insane_index_is_rebuilt_after_clean_shutdown():
    storage = MemoryStorage()
    log = open_log(storage, index_interval_bytes=0)
    for i in range(6):
        log.append_as_leader(batch(b"v%d" % i), 0, 1_000)
    entries_before = list(log.active_segment.offset_index.keys)
    log.close()
    index_path = f"{DIRECTORY}/00000000000000000000.index"
    storage.files[index_path][4:8] = (10**6).to_bytes(4, "big")  # first entry points past the log
    reopened = open_log(storage, index_interval_bytes=0)
    assert reopened.active_segment.offset_index.keys == entries_before
    assert_indexes_valid(reopened)
    assert_every_offset_readable(reopened)


def test_missing_index_is_rebuilt():
    storage = MemoryStorage()
    log = open_log(storage, index_interval_bytes=0, segment_bytes=300)
    for i in range(8):
        log.append_as_leader(batch(b"v%d" % i), 0, 1_000)
    log.close()
    del storage.files[f"{DIRECTORY}/00000000000000000000.index"]
    reopened = open_log(storage, index_interval_bytes=0, segment_bytes=300)
    assert len(reopened.segments[0].offset_index) > 0
    assert_indexes_valid(reopened)
    assert [offset for offset, _ in values(reopened)] == list(range(8))


def test_leftover_cleaned_deleted_and_tmp_files_are_removed():
    storage = MemoryStorage()
    log = open_log(storage, index_interval_bytes=1)  # an index entry (and files) for the second batch
    log.append_as_leader(batch(b"a"), 0, 1_000)
    log.append_as_leader(batch(b"b"), 0, 1_000)
    log.close()
    for name in ("00000000000000000000.log.cleaned", "00000000000000000000.index.cleaned",
                 "00000000000000000005.log.deleted", "leader-epoch-checkpoint.tmp", "00000000000000000009.index"):
        storage.files[f"{DIRECTORY}/{name}"] = bytearray(b"junk")
    reopened = open_log(storage)
    names = sorted(path.split("/")[1] for path in storage.files)
    assert names == ["00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex",
                     "leader-epoch-checkpoint"]
    assert values(reopened) == [(0, b"a"), (1, b"b")]


def test_interrupted_swap_is_completed_on_recovery():
    """A .log.swap is a finished cleaning: it replaces the segments in its range (Kafka's swap rule)."""
    storage = MemoryStorage()
    log = open_log(storage, segment_bytes=len(batch(b"v0")) * 2)
    for i in range(5):
        log.append_as_leader(batch(b"v%d" % i), 0, 1_000)
    log.close()
    replacement = split_batches(bytes(storage.files[f"{DIRECTORY}/00000000000000000000.log"]))[1]
    replacement += bytes(storage.files[f"{DIRECTORY}/00000000000000000002.log"])[: len(batch(b"v2"))]
    storage.files[f"{DIRECTORY}/00000000000000000000.log.swap"] = bytearray(replacement)
    storage.files[f"{DIRECTORY}/00000000000000000000.index.swap"] = bytearray(b"junk")
    reopened = open_log(storage, segment_bytes=len(batch(b"v0")) * 2)
    assert [s.base_offset for s in reopened.segments] == [0, 4]
    assert values(reopened) == [(1, b"v1"), (2, b"v2"), (4, b"v4")]
    assert not [path for path in storage.files if path.endswith(".swap")]
    assert_indexes_valid(reopened)


def test_epoch_cache_is_truncated_to_the_recovered_log_end():
    storage = MemoryStorage()
    log = open_log(storage)
    log.append_as_leader(batch(b"a"), 1, 1_000)
    log.append_as_leader(batch(b"b"), 2, 1_000)
    path = f"{DIRECTORY}/00000000000000000000.log"
    del storage.files[path][len(batch(b"a")) + HEADER_SIZE - 1 :]
    recovered = open_log(storage)
    assert recovered.log_end_offset == 1
    assert recovered.epoch_cache.entries() == [(1, 0)]


def test_a_log_directory_found_after_a_crash_is_made_durable_before_it_takes_records():
    """A process crash right after a new log's directory was created (before the parent's fsync made it
    durable): the restarted node finds the directory, so it is not new any more. Its flushed records must
    still survive a power loss, so opening a log after an unclean shutdown syncs the directory's own entry."""
    import random

    from simulations.disk import SimDisk

    disk = SimDisk(random.Random(1))
    disk.makedirs("logs")
    disk.fsync_dir("")
    open_log(disk, flush_messages=1)  # a new log: its directory's entry waits for its first flush
    disk.crash()  # ... which this process never reached
    assert disk.exists(DIRECTORY)  # created, not durable
    log = open_log(disk, flush_messages=1)  # the restarted process
    log.append_as_leader(batch(b"acknowledged"), 0, 1_000)  # fsynced before an acknowledgement
    disk.power_loss()
    assert values(open_log(disk)) == [(0, b"acknowledged")]


def test_a_log_directory_closed_cleanly_before_its_first_record_is_durable():
    """A new replica whose node shuts down cleanly before it holds a record (found by the groups simulation,
    seed 146 of `--duration 60`: a broker stopped 0.6 s after its replica of an offsets partition was
    created). The clean-shutdown marker says everything is durable, so the restarted node does not sync what
    it finds; the directory's entry in its parent must then already be durable, or a power loss drops the
    directory with the records the restarted node flushed and acknowledged into it."""
    import random

    from simulations.disk import SimDisk

    disk = SimDisk(random.Random(1))
    disk.makedirs("logs")
    disk.fsync_dir("")
    open_log(disk, flush_messages=1).close()  # created, never written, closed cleanly
    log = open_log(disk, flush_messages=1)  # the restarted process
    log.append_as_leader(batch(b"acknowledged"), 0, 1_000)  # fsynced before an acknowledgement
    disk.power_loss()
    assert values(open_log(disk)) == [(0, b"acknowledged")]


@pytest.mark.parametrize("crash_at", range(1, 8))
def test_a_new_logs_first_segment_file_is_durable_with_the_first_flush(crash_at):
    """The first segment file of a new log is created by its first record (segment.LazyLogFile); the flush that
    precedes an acknowledgement also makes the file's name durable. A crash at any step of the first append
    and a power loss after it leave the log empty or with the record, never a flushed record lost."""
    import random

    from simulations.disk import SimDisk, SimulatedCrash

    disk = SimDisk(random.Random(crash_at))
    log = open_log(disk, flush_messages=1)
    log.epoch_cache.assign(0, 0)  # saved already: the append writes no checkpoint whose directory fsync helps
    disk.arm_crash(crash_at)
    try:
        log.append_as_leader(batch(b"acknowledged"), 0, 1_000)
        flushed = True
    except SimulatedCrash:
        flushed = False
    disk.power_loss()
    found = values(open_log(disk))
    assert found == [(0, b"acknowledged")] if flushed else found in ([], [(0, b"acknowledged")])


def test_a_truncation_is_durable_before_the_epochs_that_follow_it():
    """A follower truncates the records its old leadership appended (KIP-101), then takes the new leader's
    epoch from the truncation point; the epoch checkpoint is durable at once. A power loss must not bring the
    truncated records back under that checkpoint: the replica would then believe them to be the new epoch's,
    never truncate them again, and refuse every fetch that continues the leader's log (the transactions
    simulation, seed 3169 of `--duration 60`: a follower fetched the same batch 29,000 times)."""
    import random

    from simulations.disk import SimDisk

    disk = SimDisk(random.Random(1))
    disk.makedirs("logs")
    disk.fsync_dir("")
    log = open_log(disk, flush_messages=1)
    for index in range(5):
        log.append_as_leader(batch(b"old-leader-%d" % index), 5, 1_000)  # flushed: durable
    log.truncate_to(2)
    log.epoch_cache.assign(7, 2)  # the new leader's first batch, fetched: its checkpoint is saved first
    disk.power_loss()
    reopened = open_log(disk)
    assert reopened.log_end_offset == 2 and values(reopened) == [(0, b"old-leader-0"), (1, b"old-leader-1")]
