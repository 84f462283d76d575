"""Producer-id blocks on a broker (Kafka's RPCProducerIdManager): ids unique, next block prefetched at 90%."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from metadata.requests import PRODUCER_ID_BLOCK_SIZE
from txn.producer_ids import BLOCK_RETRY_BACKOFF_MS, ProducerIdManager

NOW_MS = 5_000


def take(manager: ProducerIdManager, count: int) -> list[int | None]:
    return [manager.next_id() for _ in range(count)]


def test_no_id_before_the_first_block_and_a_block_is_needed():
    manager = ProducerIdManager()
    assert manager.next_id() is None
    assert manager.needs_block(NOW_MS)


def test_ids_come_from_the_block_in_order():
    manager = ProducerIdManager()
    manager.on_block_requested(NOW_MS)
    assert manager.on_block(3000, 10)
    assert take(manager, 10) == list(range(3000, 3010))
    assert manager.next_id() is None


def test_next_block_is_prefetched_once_ninety_percent_is_used():
    manager = ProducerIdManager()
    manager.on_block_requested(NOW_MS)
    manager.on_block(0, PRODUCER_ID_BLOCK_SIZE)
    take(manager, 899)
    assert not manager.needs_block(NOW_MS)
    take(manager, 1)
    assert manager.needs_block(NOW_MS)
    manager.on_block_requested(NOW_MS)
    assert not manager.needs_block(NOW_MS), "one request in flight at a time"
    manager.on_block(PRODUCER_ID_BLOCK_SIZE, PRODUCER_ID_BLOCK_SIZE)
    assert not manager.needs_block(NOW_MS), "a waiting block is enough"
    assert take(manager, 101) == list(range(900, 1001)), "the prefetched block follows without a gap in service"


def test_an_exhausted_block_answers_none_until_the_next_arrives():
    manager = ProducerIdManager()
    manager.on_block_requested(NOW_MS)
    manager.on_block(0, 2)
    assert take(manager, 3) == [0, 1, None]
    assert manager.needs_block(NOW_MS)
    manager.on_block_requested(NOW_MS)
    manager.on_block(2000, 2)
    assert take(manager, 2) == [2000, 2001]


def test_a_failed_request_is_retried_after_the_backoff():
    manager = ProducerIdManager()
    manager.on_block_requested(NOW_MS)
    manager.on_block_failed(NOW_MS)
    assert not manager.needs_block(NOW_MS + BLOCK_RETRY_BACKOFF_MS - 1)
    assert manager.needs_block(NOW_MS + BLOCK_RETRY_BACKOFF_MS)


def test_stale_overlapping_or_empty_blocks_are_refused():
    manager = ProducerIdManager()
    manager.on_block_requested(NOW_MS)
    assert manager.on_block(1000, 1000)
    for start, length in [(1000, 1000), (500, 1000), (1999, 5), (5000, 0), (-10, 5)]:
        manager.on_block_requested(NOW_MS)
        assert not manager.on_block(start, length), (start, length)
    assert manager.next_id() == 1000


BLOCK_EVENTS = st.lists(
    st.one_of(
        st.tuples(st.just("take"), st.integers(1, 40)),
        st.tuples(st.just("block"), st.integers(-5, 60), st.integers(-1, 30)),  # gap after the last, length
        st.tuples(st.just("fail"), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(BLOCK_EVENTS)
def test_ids_are_never_handed_out_twice_and_always_come_from_accepted_blocks(events):
    manager = ProducerIdManager()
    handed_out: list[int] = []
    accepted: list[range] = []
    next_start, now_ms = 0, NOW_MS
    for event in events:
        now_ms += BLOCK_RETRY_BACKOFF_MS
        if event[0] == "take":
            handed_out += [pid for pid in take(manager, event[1]) if pid is not None]
        elif manager.needs_block(now_ms):
            manager.on_block_requested(now_ms)
            if event[0] == "fail":
                manager.on_block_failed(now_ms)
                continue
            start, length = next_start + event[1], event[2]
            if manager.on_block(start, length):
                accepted.append(range(start, start + length))
                next_start = start + length
    assert len(handed_out) == len(set(handed_out))
    assert handed_out == sorted(handed_out)
    assert all(any(pid in block for block in accepted) for pid in handed_out)
    for earlier, later in zip(accepted, accepted[1:]):
        assert earlier.stop <= later.start, f"blocks {earlier} and {later} overlap"
