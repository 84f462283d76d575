"""The coordinator runtime over real partition logs: loading, held answers, resignation, failed appends,
timers and transaction markers (Kafka's CoordinatorRuntime semantics, DESIGN.md "Coordinators")."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from coordinator.runtime import CoordinatorRuntime
from coordinator.shard import CoordinatorRecord, TransactionalWrite
from partitions.errors import ErrorCode, KafkaError
from tests.coordinator.ports import KvShard, LogPort


def runtime_over(port: LogPort, **options) -> CoordinatorRuntime:
    return CoordinatorRuntime("__internal", KvShard, port, **options)


def loaded(port: LogPort, partition: int = 0, epoch: int = 1, **options) -> CoordinatorRuntime:
    runtime = runtime_over(port, **options)
    runtime.on_became_leader(partition, epoch, 0)
    runtime.poll(0)
    assert runtime.status(partition) == ErrorCode.NONE
    return runtime


def test_a_response_is_held_until_the_high_watermark_passes_its_records():
    port = LogPort()
    runtime = loaded(port)
    request_id = runtime.submit(0, ("put", "a", "1"), 10)
    assert runtime.poll(10) == []  # appended and replayed, not yet committed
    assert runtime.shard(0).values == {b"a": b"1"}
    port.high_watermarks[0] = 1
    assert runtime.poll(11) == [(request_id, ("ok", "a"))]


def test_an_answer_whose_write_never_commits_times_out_as_coordinator_not_available():
    # Kafka's offsets.commit.timeout.ms: a partition whose ISR cannot commit (a dead follower still in it)
    # must not hold a client forever; it retries, and finds the coordinator again.
    port = LogPort()
    runtime = loaded(port, write_timeout_ms=5_000)
    write = runtime.submit(0, ("put", "a", "1"), 10)
    read = runtime.submit(0, ("get", "a"), 2_000)  # held behind the write: it leaves after it, in order
    assert runtime.poll(4_000) == [] and runtime.next_deadline_ms() == 5_010
    assert runtime.poll(5_010) == [(write, ErrorCode.COORDINATOR_NOT_AVAILABLE)]
    assert runtime.poll(7_000) == [(read, ErrorCode.COORDINATOR_NOT_AVAILABLE)]
    later = runtime.submit(0, ("put", "b", "2"), 8_000)
    port.commit_all()
    assert runtime.poll(8_001) == [(later, ("ok", "b"))]  # a commit in time answers as before
    assert runtime.shard(0).values == {b"a": b"1", b"b": b"2"}  # the timed-out write still took effect


def test_a_read_waits_behind_earlier_uncommitted_writes():
    port = LogPort()
    runtime = loaded(port)
    write = runtime.submit(0, ("put", "a", "1"), 10)
    read = runtime.submit(0, ("get", "a"), 10)
    assert runtime.poll(10) == []
    port.commit_all()
    assert runtime.poll(10) == [(write, ("ok", "a")), (read, ("value", b"1"))]


def test_loading_replays_the_partition_in_chunks_and_answers_load_in_progress_meanwhile():
    port = LogPort()
    writer = loaded(port)
    for i in range(200):
        writer.submit(0, ("put", f"k{i}", "x" * 100), i)
    port.commit_all()
    reader = runtime_over(port, load_bytes_per_poll=2_000)
    reader.on_became_leader(0, 2, 1_000)
    assert reader.status(0) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    with pytest.raises(KafkaError) as refused:
        reader.submit(0, ("get", "k1"), 1_000)
    assert refused.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    polls = 0
    while reader.status(0) != ErrorCode.NONE:
        reader.poll(1_000 + polls)
        polls += 1
    assert polls > 3, "a 200-record partition loads in several bounded chunks"
    assert reader.shard(0).values == writer.shard(0).values
    assert reader.shard(0).loaded_at is not None


def test_an_answer_after_a_load_waits_until_the_loaded_tail_is_committed():
    port = LogPort()
    writer = loaded(port)
    writer.submit(0, ("put", "a", "1"), 0)  # in the log, above the high watermark
    reader = loaded(port, epoch=2)
    read = reader.submit(0, ("get", "a"), 5)
    assert reader.poll(5) == []
    port.commit_all()
    assert reader.poll(6) == [(read, ("value", b"1"))]


def test_resigning_answers_parked_and_held_requests_not_coordinator():
    port = LogPort()
    runtime = loaded(port)
    parked = runtime.submit(0, ("wait", "a"), 0)
    held = runtime.submit(0, ("put", "b", "1"), 0)
    runtime.on_resigned(0, 1)
    assert sorted(runtime.poll(1)) == sorted([(held, ErrorCode.NOT_COORDINATOR), (parked, ErrorCode.NOT_COORDINATOR)])
    assert runtime.status(0) == ErrorCode.NOT_COORDINATOR


def test_a_parked_request_is_answered_by_a_later_write_once_that_write_commits():
    port = LogPort()
    runtime = loaded(port)
    parked = runtime.submit(0, ("wait", "a"), 0)
    put = runtime.submit(0, ("put", "a", "1"), 1)
    assert runtime.poll(1) == []
    port.commit_all()
    assert runtime.poll(2) == [(put, ("ok", "a")), (parked, ("ready", "a"))]


def test_a_failed_append_answers_the_mapped_error_and_reloads_the_shard():
    port = LogPort()
    runtime = loaded(port)
    runtime.submit(0, ("put", "a", "1"), 0)
    port.commit_all()
    parked = runtime.submit(0, ("wait", "b"), 0)
    port.fail_next = ErrorCode.NOT_ENOUGH_REPLICAS
    failed = runtime.submit(0, ("put", "b", "2"), 1)
    answers = runtime.poll(1)
    assert (failed, ErrorCode.COORDINATOR_NOT_AVAILABLE) in answers
    assert (parked, ErrorCode.COORDINATOR_NOT_AVAILABLE) in answers  # the write that would release it failed
    assert runtime.shard(0).values == {b"a": b"1"}  # reloaded from the log: nothing of the failed write
    port.fail_next = ErrorCode.NOT_LEADER_OR_FOLLOWER
    lost = runtime.submit(0, ("put", "c", "3"), 2)
    assert (lost, ErrorCode.NOT_COORDINATOR) in runtime.poll(2)


def test_timers_fire_by_now_ms_and_write_their_records():
    port = LogPort()
    runtime = loaded(port)
    runtime.submit(0, ("put", "a", "1"), 0)
    runtime.submit(0, ("expire", "a", 5_000), 0)
    assert runtime.next_deadline_ms() == 5_000
    runtime.poll(4_999)
    assert runtime.shard(0).values == {b"a": b"1"}
    runtime.poll(5_000)
    assert runtime.shard(0).values == {}
    assert port.logs[0].log_end_offset == 2  # the put and the timer's tombstone


def test_markers_written_by_others_reach_the_shard_in_offset_order():  # KIP-98: TxnOffsetCommit + marker
    port = LogPort()
    runtime = loaded(port)
    port.append(0, 1, [CoordinatorRecord(b"t", b"pending")], TransactionalWrite(producer_id=7, producer_epoch=0), 0)
    runtime.poll(1)
    assert runtime.shard(0).values == {}
    port.append_marker(0, producer_id=7, commit=True, leader_epoch=1)
    runtime.poll(2)
    assert runtime.shard(0).values == {b"t": b"pending"}
    assert runtime.shard(0).replayed == [0, 1]


class CountingPort(LogPort):
    """A LogPort that counts the partitions the runtime reads the log end or high watermark of."""

    def __init__(self, partitions: int = 3) -> None:
        super().__init__(partitions)
        self.looked_at: list[int] = []

    def log_end_offset(self, partition) -> int:
        self.looked_at.append(partition)
        return super().log_end_offset(partition)

    def high_watermark(self, partition) -> int:
        self.looked_at.append(partition)
        return super().high_watermark(partition)


def loaded_all(port: LogPort) -> CoordinatorRuntime:
    runtime = runtime_over(port)
    for partition in port.logs:
        runtime.on_became_leader(partition, 1, 0)
    runtime.poll(0)
    return runtime


def test_a_poll_reads_only_the_partitions_that_changed():
    # The broker polls after every request and leads dozens of these partitions: a poll must cost what moved.
    port = CountingPort()
    runtime = loaded_all(port)
    generation = runtime.generation
    port.looked_at.clear()
    assert runtime.poll(1, changed=set()) == [] and port.looked_at == []
    port.append(2, 1, [CoordinatorRecord(b"m", b"1")], None, 1)  # written by someone else (a marker)
    runtime.poll(2, changed={2})
    assert set(port.looked_at) == {2} and runtime.shard(2).values == {b"m": b"1"}
    assert runtime.generation == generation  # the loaded shards are the same ones


def test_an_answer_behind_a_committed_write_leaves_at_the_next_poll_even_if_nothing_changed():
    port = CountingPort()
    runtime = loaded_all(port)
    write = runtime.submit(1, ("put", "a", "1"), 1)
    port.commit_all()
    assert runtime.poll(2, changed={1}) == [(write, ("ok", "a"))]
    read = runtime.submit(1, ("get", "a"), 3)  # no write: held behind the committed one
    assert runtime.poll(3, changed=set()) == [(read, ("value", b"1"))]


def test_an_answer_held_for_the_high_watermark_leaves_when_its_partition_changes_and_times_out_without():
    port = CountingPort()
    runtime = loaded_all(port)
    write = runtime.submit(0, ("put", "a", "1"), 1)
    assert runtime.poll(1, changed=set()) == []
    port.commit_all()
    assert runtime.poll(2, changed={1}) == []  # another partition moved
    assert runtime.poll(3, changed={0}) == [(write, ("ok", "a"))]
    lost = runtime.submit(0, ("put", "b", "2"), 10)
    assert runtime.poll(4_000, changed=set()) == []
    assert runtime.poll(5_010, changed=set()) == [(lost, ErrorCode.COORDINATOR_NOT_AVAILABLE)]


def test_a_runtime_says_whether_it_has_shards_or_answers_to_give():
    # The broker skips the poll of a coordinator that leads none of its partitions.
    port = CountingPort()
    runtime = runtime_over(port)
    assert not runtime.has_shards() and not runtime.has_answers()
    runtime.on_became_leader(0, 1, 0)
    runtime.poll(0, changed=set())
    parked = runtime.submit(0, ("wait", "x"), 1)
    runtime.on_resigned(0, 2)
    assert not runtime.has_shards() and runtime.has_answers()
    assert runtime.poll(3, changed=set()) == [(parked, ErrorCode.NOT_COORDINATOR)]
    assert not runtime.has_answers()


def test_timers_and_loads_run_whatever_changed():
    port = CountingPort()
    runtime = loaded_all(port)
    runtime.submit(0, ("put", "a", "1"), 0)
    runtime.submit(0, ("expire", "a", 5_000), 0)
    runtime.poll(1, changed=set())
    runtime.poll(5_000, changed=set())
    assert runtime.shard(0).values == {}
    generation = runtime.generation
    runtime.on_became_leader(1, 2, 5_001)  # a newer epoch reloads it: it takes no requests until loaded
    assert runtime.generation == generation + 1 and runtime.status(1) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    runtime.poll(5_002, changed=set())
    assert runtime.status(1) == ErrorCode.NONE and runtime.generation == generation + 2
    runtime.on_resigned(2, 5_003)
    assert runtime.generation == generation + 3


def test_an_older_leader_epoch_is_ignored_and_a_newer_one_reloads():
    port = LogPort()
    runtime = loaded(port, epoch=5)
    parked = runtime.submit(0, ("wait", "x"), 0)
    runtime.on_became_leader(0, 4, 1)
    assert runtime.status(0) == ErrorCode.NONE and runtime.poll(1) == []
    runtime.on_became_leader(0, 6, 2)
    assert runtime.poll(2) == [(parked, ErrorCode.NOT_COORDINATOR)]


def test_held_answers_are_bounded():
    port = LogPort()
    runtime = loaded(port, held_answers_max=3)
    for i in range(3):
        runtime.submit(0, ("put", f"k{i}", "v"), 0)
    assert runtime.status(0) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    with pytest.raises(KafkaError):
        runtime.submit(0, ("put", "k4", "v"), 0)
    port.commit_all()
    assert len(runtime.poll(0)) == 3 and runtime.status(0) == ErrorCode.NONE


OPERATIONS = st.lists(st.one_of(
    st.tuples(st.just("put"), st.sampled_from("abcd"), st.text("xyz", max_size=3)),
    st.tuples(st.just("expire"), st.sampled_from("abcd"), st.integers(0, 50)),
    st.tuples(st.just("tick"), st.integers(0, 20)),
    st.tuples(st.just("fail"), st.sampled_from([ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.REQUEST_TIMED_OUT])),
), max_size=40)


@settings(max_examples=60, deadline=None)
@given(OPERATIONS)
def test_a_shard_reloaded_from_its_log_has_the_state_of_the_shard_that_wrote_it(operations):
    port = LogPort(partitions=1)
    runtime = loaded(port)
    now = 0
    for operation in operations:
        if operation[0] == "tick":
            now += operation[1]
        elif operation[0] == "fail":
            port.fail_next = operation[1]
            continue
        elif operation[0] == "expire":
            runtime.submit(0, ("expire", operation[1], now + operation[2]), now)
        else:
            runtime.submit(0, operation, now)
        port.fail_next = None
        runtime.poll(now)
        if runtime.status(0) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            runtime.poll(now)
    writer_state = dict(runtime.shard(0).values)
    reader = loaded(port, epoch=2)
    assert reader.shard(0).values == writer_state
