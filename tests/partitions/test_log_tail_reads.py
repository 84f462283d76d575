"""Reads placed from a segment's in-memory tail window (LogSegment.tail_span) against the header scan they
replace: the same slices for every offset, max_offset and max_bytes, after appends, truncations, rolls and a
reopen; and a read at the end of the log that needs no header read."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partitions.log import PartitionLog
from partitions.segment import TAIL_BATCHES, LogSegment
from partitions.storage import MemoryStorage
from tests.partitions.logtools import batch, open_log


def spans(log: PartitionLog, offset: int, max_bytes: int, max_offset: int | None, min_one: bool) -> list:
    data = log.read(offset, max_bytes, max_offset=max_offset, min_one_batch=min_one)
    return [(s.handle, s.position, s.size) for s in data.slices]


def scanned(log: PartitionLog, *args) -> list:
    """The same read with the tail window switched off (the header scan only)."""
    original = LogSegment.tail_span
    LogSegment.tail_span = lambda self, *a: None
    try:
        return spans(log, *args)
    finally:
        LogSegment.tail_span = original


def assert_reads_agree(log: PartitionLog, max_bytes_choices: list[int]) -> int:
    """Every read of the log agrees with the scan; returns how many reads the window placed."""
    placed = 0
    end = log.log_end_offset
    for offset in range(log.log_start_offset, end + 1):
        for max_offset in (None, offset, offset + 1, offset + 3, end):
            for max_bytes in max_bytes_choices:
                for min_one in (True, False):
                    expected = scanned(log, offset, max_bytes, max_offset, min_one)
                    assert spans(log, offset, max_bytes, max_offset, min_one) == expected, \
                        (offset, max_offset, max_bytes, min_one)
        placed += any(s.tail_span(offset, None, 1 << 20) is not None for s in log.segments)
    return placed


operation = st.one_of(
    st.tuples(st.just("leader"), st.integers(1, 4), st.integers(0, 300)),  # records, value bytes
    st.tuples(st.just("follower"), st.integers(1, 3), st.integers(0, 200)),  # batches in one append
    st.tuples(st.just("truncate"), st.integers(0, 40), st.just(0)),
    st.tuples(st.just("roll"), st.just(0), st.just(0)),
    st.tuples(st.just("reopen"), st.just(0), st.just(0)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, min_size=1, max_size=30), st.sampled_from([0, 200, 4096]))
def test_tail_reads_equal_the_header_scan(operations, index_interval_bytes):
    storage = MemoryStorage()
    config = {"index_interval_bytes": index_interval_bytes, "segment_bytes": 2_000}
    log = open_log(storage, **config)
    for kind, count, size in operations:
        if kind == "leader":
            log.append_as_leader(batch(*[b"v" * size] * count), 0, 1_000)
        elif kind == "follower":
            source = open_log(MemoryStorage())
            source.truncate_fully_and_start_at(log.log_end_offset)
            for _ in range(count):
                source.append_as_leader(batch(b"f" * size), 0, 1_000)
            log.append_as_follower(source.read(log.log_end_offset, 1 << 20).records, 1_000)
        elif kind == "truncate":
            log.truncate_to(max(log.log_start_offset, log.log_end_offset - count))
        elif kind == "roll":
            if log.active_segment.size:
                log.roll(1_000)
        else:
            log.close()
            log = PartitionLog.open(storage, log.directory, log.config, 1_000)
    assert_reads_agree(log, [0, 1, 150, 700, 1 << 20])


def test_many_small_batches_are_placed_from_memory_and_agree():
    log = open_log(index_interval_bytes=4096, segment_bytes=1 << 30)
    for i in range(3 * TAIL_BATCHES):
        log.append_as_leader(batch(b"x" * (i % 7)), 0, 1_000)
    placed = assert_reads_agree(log, [1, 100, 1 << 20])
    assert TAIL_BATCHES <= placed < 2 * TAIL_BATCHES  # the window holds between one and two windows' batches


class CountingStorage(MemoryStorage):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def open(self, path, create=True):
        handle = super().open(path, create)
        storage, read_at = self, handle.read_at

        def counted(position, size):
            storage.reads += 1
            return read_at(position, size)

        handle.read_at = counted
        return handle


def test_a_follower_read_of_the_newest_batch_reads_no_header():
    """A follower fetching the newest small batch, 40 batches after the last offset index entry: without the
    window this scans 40 headers (one read each) twice and walks the batch lengths again."""
    storage = CountingStorage()
    log = open_log(storage, index_interval_bytes=1 << 20)
    for _ in range(41):
        log.append_as_leader(batch(b"v" * 100), 0, 1_000)
    storage.reads = 0
    data = log.read(40, 1 << 20, max_offset=41)
    size = len(batch(b"v" * 100))
    assert [(s.position, s.size) for s in data.slices] == [(log.active_segment.size - size, size)]
    assert storage.reads == 0
