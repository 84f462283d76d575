"""Idempotent producer state on the leader's produce path (KIP-98, KIP-360), through a real PartitionLog."""

from __future__ import annotations

import pytest

from partitions.batch import parse_header
from partitions.errors import ErrorCode, InvalidRecordError
from partitions.records import build_batch
from tests.txn.harness import DIRECTORY, NOW_MS, Partition, producer_batch
from txn.errors import InvalidProducerEpochError, InvalidTxnStateError, OutOfOrderSequenceError
from txn.producer_state import (
    PRODUCER_BATCHES_RETAINED,
    PRODUCER_ID_EXPIRATION_MS_DEFAULT,
    SEQUENCE_MAX,
    CompletedTxn,
    ProducerStateManager,
)

PRODUCER = 4001


def seven_batches(partition: Partition) -> list[tuple[int, int]]:
    """Seven batches of 2 records (sequences 0-1, 2-3, ... 12-13); their (first, last) offsets."""
    return [partition.produce(producer_batch(PRODUCER, 0, 2 * index, count=2)) for index in range(7)]


@pytest.mark.parametrize("age", range(PRODUCER_BATCHES_RETAINED))
def test_retry_of_each_of_the_last_five_batches_gets_its_original_offsets(age):
    partition = Partition()
    offsets = seven_batches(partition)
    log_end_offset = partition.log.log_end_offset
    index = 6 - age
    assert partition.produce(producer_batch(PRODUCER, 0, 2 * index, count=2)) == offsets[index]
    assert partition.log.log_end_offset == log_end_offset, "a duplicate must not be appended"


def test_retry_of_the_sixth_oldest_batch_is_out_of_order():
    partition = Partition()
    seven_batches(partition)
    with pytest.raises(OutOfOrderSequenceError) as raised:
        partition.produce(producer_batch(PRODUCER, 0, 2 * 1, count=2))
    assert raised.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and not raised.value.retriable
    assert partition.log.log_end_offset == 14


def test_duplicate_answer_carries_the_original_timestamp():
    partition = Partition()
    partition.produce(producer_batch(PRODUCER, 0, 0, timestamp_ms=NOW_MS - 5))
    check = partition.state.check_append([parse_header(producer_batch(PRODUCER, 0, 0, timestamp_ms=NOW_MS))], NOW_MS)
    assert check.is_duplicate and check.duplicate.timestamp == NOW_MS - 5


def test_a_retry_with_the_same_first_but_another_last_sequence_is_not_a_duplicate():
    partition = Partition()
    partition.produce(producer_batch(PRODUCER, 0, 0, count=3))
    with pytest.raises(OutOfOrderSequenceError):
        partition.produce(producer_batch(PRODUCER, 0, 0, count=2))


@pytest.mark.parametrize("next_sequence", [4, 5, 1, 0])  # gaps, then sequences overlapping cached batches
def test_sequence_gap_or_reordering_is_refused_and_nothing_is_appended(next_sequence):
    partition = Partition()
    partition.produce(producer_batch(PRODUCER, 0, 0, count=2))
    partition.produce(producer_batch(PRODUCER, 0, 2, count=1))
    with pytest.raises(OutOfOrderSequenceError):
        partition.produce(producer_batch(PRODUCER, 0, next_sequence))
    assert partition.log.log_end_offset == 3
    assert partition.produce(producer_batch(PRODUCER, 0, 3)) == (3, 3)


def test_epoch_bump_resets_sequences_to_zero():
    partition = Partition()
    partition.produce(producer_batch(PRODUCER, 0, 0, count=4))
    with pytest.raises(OutOfOrderSequenceError):
        partition.produce(producer_batch(PRODUCER, 1, 4))
    assert partition.produce(producer_batch(PRODUCER, 1, 0, count=2)) == (4, 5)
    assert partition.produce(producer_batch(PRODUCER, 1, 2)) == (6, 6)
    entry = partition.state.entry(PRODUCER)
    assert entry.producer_epoch == 1 and [b.first_sequence for b in entry.batches] == [0, 2]


def test_older_epoch_is_fenced_even_for_a_former_duplicate():
    partition = Partition()
    partition.produce(producer_batch(PRODUCER, 0, 0))
    partition.produce(producer_batch(PRODUCER, 1, 0))
    for sequence in (0, 1):
        with pytest.raises(InvalidProducerEpochError) as raised:
            partition.produce(producer_batch(PRODUCER, 0, sequence))
        assert raised.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert partition.log.log_end_offset == 2


def test_unknown_producer_may_start_at_any_sequence():  # KIP-360: no UNKNOWN_PRODUCER_ID from produce
    partition = Partition()
    assert partition.produce(producer_batch(PRODUCER, 5, 1234, count=2)) == (0, 1)
    assert partition.produce(producer_batch(PRODUCER, 5, 1236)) == (2, 2)
    with pytest.raises(OutOfOrderSequenceError):
        partition.produce(producer_batch(PRODUCER, 5, 1240))


def test_sequence_wraps_from_int32_max_to_zero():
    partition = Partition()
    partition.produce(producer_batch(PRODUCER, 0, SEQUENCE_MAX - 1, count=2))
    assert partition.state.entry(PRODUCER).last_sequence == SEQUENCE_MAX
    assert partition.produce(producer_batch(PRODUCER, 0, 0, count=2)) == (2, 3)


def test_a_batch_spanning_the_wrap_has_a_wrapped_last_sequence():
    partition = Partition()
    partition.produce(producer_batch(PRODUCER, 0, SEQUENCE_MAX, count=3))
    assert partition.state.entry(PRODUCER).last_sequence == 1
    assert partition.produce(producer_batch(PRODUCER, 0, SEQUENCE_MAX, count=3)) == (0, 2)  # duplicate
    assert partition.produce(producer_batch(PRODUCER, 0, 2)) == (3, 3)


def test_producer_id_without_a_sequence_is_an_invalid_record():
    partition = Partition()
    with pytest.raises(InvalidRecordError):
        partition.produce(producer_batch(PRODUCER, 0, -1))


def test_batches_without_a_producer_id_are_not_tracked():
    partition = Partition()
    plain = build_batch([(None, b"x")], base_timestamp=NOW_MS)
    assert partition.produce(plain) == (0, 0)
    assert partition.produce(plain) == (1, 1)
    assert partition.state.producers == {} and partition.state.map_end_offset == 2


def test_batches_of_one_request_are_checked_in_order():
    partition = Partition()
    assert partition.produce(producer_batch(PRODUCER, 0, 0, count=2), producer_batch(PRODUCER, 0, 2)) == (0, 2)
    with pytest.raises(OutOfOrderSequenceError):
        partition.produce(producer_batch(PRODUCER, 0, 3), producer_batch(PRODUCER, 0, 5))
    assert partition.log.log_end_offset == 3
    assert partition.produce(producer_batch(PRODUCER, 0, 3), producer_batch(PRODUCER + 1, 0, 0)) == (3, 4)


def test_a_request_holding_a_duplicate_is_answered_with_the_duplicate_and_appends_nothing():  # as Kafka
    partition = Partition()
    partition.produce(producer_batch(PRODUCER, 0, 0))
    assert partition.produce(producer_batch(PRODUCER + 1, 0, 0), producer_batch(PRODUCER, 0, 0)) == (0, 0)
    assert partition.log.log_end_offset == 1 and partition.state.entry(PRODUCER + 1) is None


def test_check_append_changes_nothing():
    partition = Partition()
    partition.produce(producer_batch(PRODUCER, 0, 0))
    before = dict(partition.state.producers), partition.state.map_end_offset
    partition.state.check_append([parse_header(producer_batch(PRODUCER, 0, 1)),
                                  parse_header(producer_batch(PRODUCER + 9, 0, 0))], NOW_MS)
    assert (dict(partition.state.producers), partition.state.map_end_offset) == before


def test_only_the_last_five_batches_are_cached():
    partition = Partition()
    seven_batches(partition)
    batches = partition.state.entry(PRODUCER).batches
    assert [(b.first_sequence, b.last_sequence) for b in batches] == [(4, 5), (6, 7), (8, 9), (10, 11), (12, 13)]
    assert [(b.first_offset, b.last_offset) for b in batches] == [(4, 5), (6, 7), (8, 9), (10, 11), (12, 13)]


def test_follower_appends_build_the_leader_state():
    leader = Partition()
    seven_batches(leader)
    leader.produce(producer_batch(PRODUCER + 1, 2, 0, count=3))
    follower = Partition()
    fetched = leader.log.read(0, 1 << 20).records
    info = follower.log.append_as_follower(fetched, NOW_MS)
    follower.state.update(info.batch_headers)
    assert follower.state.producers == leader.state.producers
    assert follower.state.map_end_offset == leader.state.map_end_offset == 17


def test_follower_applies_an_older_epoch_the_log_holds():  # Kafka's REPLICATION origin: the log is the truth
    state = ProducerStateManager(Partition().storage, DIRECTORY)
    newer = parse_header(build_batch([(None, b"a")], base_offset=0, base_timestamp=NOW_MS, producer_id=PRODUCER,
                                     producer_epoch=2, base_sequence=0))
    older = parse_header(build_batch([(None, b"b")], base_offset=1, base_timestamp=NOW_MS, producer_id=PRODUCER,
                                     producer_epoch=1, base_sequence=7))
    state.update([newer, older])
    assert state.entry(PRODUCER).producer_epoch == 1 and state.entry(PRODUCER).last_sequence == 7


# ---- transactions hook


def test_transactional_batch_opens_a_transaction_and_a_marker_closes_it():
    partition = Partition()
    partition.produce(producer_batch(PRODUCER, 0, 0))
    partition.produce(producer_batch(PRODUCER + 1, 0, 0, transactional=True))
    partition.produce(producer_batch(PRODUCER + 1, 0, 1, count=2, transactional=True))
    assert partition.state.entry(PRODUCER + 1).current_txn_first_offset == 1
    assert partition.state.entry(PRODUCER).current_txn_first_offset is None
    with pytest.raises(InvalidTxnStateError):
        partition.produce(producer_batch(PRODUCER + 1, 0, 3))
    marker, completed = partition.write_marker(PRODUCER + 1, 0)
    assert completed == [CompletedTxn(PRODUCER + 1, 1, marker, committed=True)]
    entry = partition.state.entry(PRODUCER + 1)
    assert entry.current_txn_first_offset is None and entry.last_sequence == 2
    assert partition.produce(producer_batch(PRODUCER + 1, 0, 3)) == (marker + 1, marker + 1)


def test_marker_with_a_bumped_epoch_forgets_the_cached_batches():
    partition = Partition()
    partition.produce(producer_batch(PRODUCER, 0, 0, transactional=True))
    partition.write_marker(PRODUCER, 1)
    entry = partition.state.entry(PRODUCER)
    assert entry.producer_epoch == 1 and entry.batches == ()
    with pytest.raises(OutOfOrderSequenceError):
        partition.produce(producer_batch(PRODUCER, 1, 1))
    assert partition.produce(producer_batch(PRODUCER, 1, 0)) == (2, 2)


# ---- expiry


def test_idle_producers_expire_after_producer_id_expiration_ms():
    partition = Partition()
    partition.produce(producer_batch(PRODUCER, 0, 0, timestamp_ms=NOW_MS))
    partition.produce(producer_batch(PRODUCER + 1, 0, 0, timestamp_ms=NOW_MS + 1000))
    state = partition.state
    assert state.remove_expired(NOW_MS + PRODUCER_ID_EXPIRATION_MS_DEFAULT - 1) == 0
    assert state.remove_expired(NOW_MS + PRODUCER_ID_EXPIRATION_MS_DEFAULT) == 1
    assert set(state.producers) == {PRODUCER + 1}


def test_a_producer_with_an_open_transaction_does_not_expire():
    partition = Partition()
    partition.produce(producer_batch(PRODUCER, 0, 0, transactional=True))
    assert partition.state.remove_expired(NOW_MS + 10 * PRODUCER_ID_EXPIRATION_MS_DEFAULT) == 0


def test_an_expired_producer_is_unknown_to_check_append_before_the_sweep():
    partition = Partition()
    partition.produce(producer_batch(PRODUCER, 0, 0, count=3))
    later_ms = NOW_MS + PRODUCER_ID_EXPIRATION_MS_DEFAULT
    assert partition.produce(producer_batch(PRODUCER, 0, 50, timestamp_ms=later_ms), now_ms=later_ms) == (3, 3)
    assert partition.state.entry(PRODUCER).batches[-1].first_sequence == 50


def test_rebuild_drops_expired_producers():
    partition = Partition()
    partition.produce(producer_batch(PRODUCER, 0, 0))
    assert partition.reopened_state(now_ms=NOW_MS + PRODUCER_ID_EXPIRATION_MS_DEFAULT).producers == {}
    assert set(partition.reopened_state(now_ms=NOW_MS + 1).producers) == {PRODUCER}


def test_reopened_log_recovers_the_state_without_snapshots():
    partition = Partition(segment_bytes=300)
    seven_batches(partition)
    partition.log.close()
    assert partition.reopened_state().producers == partition.state.producers

