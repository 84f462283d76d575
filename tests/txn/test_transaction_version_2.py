"""Transaction version 2 (KIP-890 part 2) in the coordinator's shard and a partition's producer state: the epoch
bumped by every EndTxn v5 and carried by the markers, retries of EndTxn recognised by the bumped epoch, the
epoch overflow to a new producer id, partitions added by the produce itself, the zombie's late produce fenced,
TransactionLogValue v1, and transaction version 1 clients unchanged (Kafka's TransactionCoordinator.
endTransaction, TransactionMetadata.prepareAbortOrCommit / prepareComplete, TransactionLogValue.json)."""

from __future__ import annotations

import pytest

from coordinator.shard import CoordinatorRecord
from partitions.errors import ErrorCode
from tests.txn.harness import Partition, producer_batch
from tests.txn.test_coordinator_shard import Coordinator
from txn.coordinator import (
    PRODUCER_EPOCH_MAX,
    AddPartitions,
    CompleteTransaction,
    EndTransaction,
    TxnAnswer,
)
from txn.errors import InvalidProducerEpochError
from txn.records import TransactionLogValue, TransactionState, decode_value, encode_key, encode_value

S = TransactionState
TV2 = 2
OUT = (("out", 0), ("out", 1))


def _end(coordinator: Coordinator, producer_id: int, epoch: int, commit: bool = True, now_ms: int = 20,
         version: int = TV2) -> tuple[int, list]:
    """Submit an EndTxn, commit the Prepare record: (request id, the marker jobs now due)."""
    request_id = coordinator.runtime.submit(0, EndTransaction("t", producer_id, epoch, commit, version,
                                                              coordinator.allocate), now_ms)
    coordinator.port.commit_all()
    coordinator.runtime.poll(now_ms)
    return request_id, coordinator.shard.markers_due(coordinator.port.high_watermark(0))


def _complete(coordinator: Coordinator, job, now_ms: int = 30) -> dict:
    """The broker's CompleteTransaction once every marker of `job` is written: the answers it releases."""
    coordinator.runtime.submit(0, CompleteTransaction("t", job.producer_id, job.producer_epoch, job.commit), now_ms)
    coordinator.port.commit_all()
    return dict(coordinator.runtime.poll(now_ms))


def _tv2_transaction(coordinator: Coordinator, producer_id: int, epoch: int, commit: bool = True) -> TxnAnswer:
    """One transaction of a TV2 client: the produce adds the partitions, EndTxn v5, markers, Complete."""
    assert coordinator.call(AddPartitions("t", producer_id, epoch, OUT, client_transaction_version=TV2)).error \
        == ErrorCode.NONE
    end_id, [job] = _end(coordinator, producer_id, epoch, commit)
    return _complete(coordinator, job)[end_id]


def test_end_txn_v5_bumps_the_epoch_and_the_markers_carry_the_bumped_epoch():
    coordinator = Coordinator()
    init = coordinator.init()
    coordinator.call(AddPartitions("t", init.producer_id, 0, OUT, client_transaction_version=TV2))
    end_id, [job] = _end(coordinator, init.producer_id, 0)
    assert (job.producer_id, job.producer_epoch, job.partitions) == (init.producer_id, 1, OUT)
    metadata = coordinator.shard.metadata("t")
    assert (metadata.state, metadata.value.producer_epoch, metadata.value.client_transaction_version) == \
        (S.PREPARE_COMMIT, 1, TV2)
    answers = _complete(coordinator, job)
    assert answers[end_id] == TxnAnswer(ErrorCode.NONE, init.producer_id, 1)  # EndTxn v5: the id and epoch to use
    value = coordinator.shard.metadata("t").value
    assert (value.state, value.producer_epoch, value.previous_producer_id) == (S.COMPLETE_COMMIT, 1, init.producer_id)
    # The next transaction runs at the bumped epoch; the one after that at the next.
    assert _tv2_transaction(coordinator, init.producer_id, 1, commit=False) == \
        TxnAnswer(ErrorCode.NONE, init.producer_id, 2)


def test_retried_end_txn_with_the_pre_bump_epoch_is_answered_as_the_first_one():
    coordinator = Coordinator()
    init = coordinator.init()
    coordinator.call(AddPartitions("t", init.producer_id, 0, OUT, client_transaction_version=TV2))
    end_id, [job] = _end(coordinator, init.producer_id, 0)
    retry_id, _ = _end(coordinator, init.producer_id, 0, now_ms=21)  # Prepare*: parked with the first one
    answers = _complete(coordinator, job)
    assert answers[end_id] == answers[retry_id] == TxnAnswer(ErrorCode.NONE, init.producer_id, 1)
    # Complete*: a retry (the response was lost) succeeds with the bumped epoch, an abort of it is refused.
    assert coordinator.call(EndTransaction("t", init.producer_id, 0, True, TV2), 40) == \
        TxnAnswer(ErrorCode.NONE, init.producer_id, 1)
    assert coordinator.call(EndTransaction("t", init.producer_id, 0, False, TV2), 40).error == \
        ErrorCode.INVALID_TXN_STATE


def test_end_txn_with_the_bumped_epoch_of_a_finished_transaction_is_fenced_as_kafka_answers():
    coordinator = Coordinator()
    init = coordinator.init()
    _tv2_transaction(coordinator, init.producer_id, 0)
    # Epoch 1 is the next transaction's, which never started: not a retry, not a valid transition.
    assert coordinator.call(EndTransaction("t", init.producer_id, 1, True, TV2), 40).error == \
        ErrorCode.PRODUCER_FENCED
    assert coordinator.call(EndTransaction("t", init.producer_id, 5, True, TV2), 40).error == \
        ErrorCode.PRODUCER_FENCED


def test_planted_bug_end_txn_retry_as_new_transaction_fences_a_committed_transaction():
    coordinator = Coordinator()
    coordinator.shard.bug_end_txn_retry_as_new_transaction = True
    init = coordinator.init()
    _tv2_transaction(coordinator, init.producer_id, 0)
    assert coordinator.call(EndTransaction("t", init.producer_id, 0, True, TV2), 40).error == \
        ErrorCode.PRODUCER_FENCED


def _at_last_epochs(epoch: int) -> Coordinator:
    """A coordinator that loaded id "t" as producer 77, Empty at `epoch` (written straight into its log)."""
    first = Coordinator()
    value = TransactionLogValue(77, epoch, 60_000, S.EMPTY, (), 0, -1)
    first.port.append(0, 1, [CoordinatorRecord(encode_key("t"), encode_value(value))], None, 0)
    first.port.commit_all()
    return Coordinator(port=first.port)


def test_epoch_overflow_at_end_txn_allocates_the_next_producer_id_used_after_the_markers():
    coordinator = _at_last_epochs(PRODUCER_EPOCH_MAX - 1)
    coordinator.call(AddPartitions("t", 77, PRODUCER_EPOCH_MAX - 1, OUT, client_transaction_version=TV2))
    end_id, [job] = _end(coordinator, 77, PRODUCER_EPOCH_MAX - 1)
    prepared = coordinator.shard.metadata("t").value
    # Prepare: the old producer id at the last epoch (the markers'), the new id waiting in next_producer_id.
    assert (job.producer_id, job.producer_epoch) == (77, PRODUCER_EPOCH_MAX)
    assert (prepared.producer_id, prepared.next_producer_id) == (77, 1000)
    answers = _complete(coordinator, job)
    assert answers[end_id] == TxnAnswer(ErrorCode.NONE, 1000, 0)
    value = coordinator.shard.metadata("t").value
    assert (value.producer_id, value.producer_epoch, value.previous_producer_id, value.next_producer_id) == \
        (1000, 0, 77, -1)
    # A retry with the old producer id at its last usable epoch is still recognised.
    assert coordinator.call(EndTransaction("t", 77, PRODUCER_EPOCH_MAX - 1, True, TV2), 40) == \
        TxnAnswer(ErrorCode.NONE, 1000, 0)
    assert coordinator.call(EndTransaction("t", 77, PRODUCER_EPOCH_MAX - 2, True, TV2), 40).error == \
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert _tv2_transaction(coordinator, 1000, 0) == TxnAnswer(ErrorCode.NONE, 1000, 1)


def test_epoch_overflow_waits_for_a_producer_id_block():
    coordinator = _at_last_epochs(PRODUCER_EPOCH_MAX - 1)
    coordinator.call(AddPartitions("t", 77, PRODUCER_EPOCH_MAX - 1, OUT, client_transaction_version=TV2))
    request = EndTransaction("t", 77, PRODUCER_EPOCH_MAX - 1, True, TV2, lambda: None)
    assert coordinator.call(request).error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert coordinator.state() is S.ONGOING


def test_a_produce_adds_its_partitions_and_a_stale_epoch_is_fenced_by_the_coordinator():
    coordinator = Coordinator()
    init = coordinator.init()
    _tv2_transaction(coordinator, init.producer_id, 0)
    # The zombie still at epoch 0: its produce asks to add a partition and is fenced.
    late = AddPartitions("t", init.producer_id, 0, (("out", 2),), client_transaction_version=TV2)
    assert coordinator.call(late).error == ErrorCode.PRODUCER_FENCED
    assert coordinator.call(EndTransaction("t", init.producer_id, 0, False, TV2)).error == ErrorCode.INVALID_TXN_STATE
    fresh = AddPartitions("t", init.producer_id, 1, (("out", 2),), client_transaction_version=TV2)
    assert coordinator.call(fresh).error == ErrorCode.NONE
    value = coordinator.shard.metadata("t").value
    assert (value.state, value.partitions, value.client_transaction_version) == (S.ONGOING, (("out", 2),), TV2)


def test_a_timed_out_tv2_transaction_is_fenced_not_taken_for_a_retry():
    coordinator = Coordinator()
    init = coordinator.init(timeout_ms=5_000)
    coordinator.call(AddPartitions("t", init.producer_id, 0, OUT, client_transaction_version=TV2), 1_000)
    coordinator.runtime.poll(6_000)
    coordinator.port.commit_all()
    value = coordinator.shard.metadata("t").value
    assert (value.state, value.producer_epoch, value.client_transaction_version) == (S.PREPARE_ABORT, 1, 0)
    for commit in (True, False):
        assert coordinator.call(EndTransaction("t", init.producer_id, 0, commit, TV2), 6_001).error == \
            ErrorCode.PRODUCER_FENCED


def test_transaction_version_1_clients_keep_their_epoch_and_value_version_0():
    coordinator = Coordinator()
    init = coordinator.init()
    coordinator.call(AddPartitions("t", init.producer_id, 0, OUT))
    # A version 1 EndTxn is answered once its PrepareCommit record is committed, with the same epoch.
    end_id = coordinator.runtime.submit(0, EndTransaction("t", init.producer_id, 0, True, 0, coordinator.allocate), 20)
    coordinator.port.commit_all()
    assert dict(coordinator.runtime.poll(20))[end_id] == TxnAnswer(ErrorCode.NONE, init.producer_id, 0)
    [job] = coordinator.shard.markers_due(coordinator.port.high_watermark(0))
    assert job.producer_epoch == 0
    _complete(coordinator, job)
    assert coordinator.call(EndTransaction("t", init.producer_id, 0, True), 40).error == ErrorCode.NONE
    assert coordinator.call(AddPartitions("t", init.producer_id, 0, OUT)).error == ErrorCode.NONE
    records, _ = coordinator.port.read(0, 0, 1 << 20)
    assert records and all(record.value[:2] == b"\x00\x00" for record in records if record.value is not None)


def test_a_shard_rebuilt_from_its_log_equals_the_one_that_wrote_it():
    coordinator = _at_last_epochs(PRODUCER_EPOCH_MAX - 2)
    _tv2_transaction(coordinator, 77, PRODUCER_EPOCH_MAX - 2)
    _tv2_transaction(coordinator, 77, PRODUCER_EPOCH_MAX - 1, commit=False)  # overflows to producer 1000
    coordinator.call(AddPartitions("t", 1000, 0, OUT, client_transaction_version=TV2))
    _end(coordinator, 1000, 0)  # left in PrepareCommit
    rebuilt = Coordinator(port=coordinator.port)
    assert rebuilt.shard.transactions == coordinator.shard.transactions
    assert rebuilt.shard.preparing == coordinator.shard.preparing
    value = rebuilt.shard.metadata("t").value
    assert (value.producer_id, value.producer_epoch, value.previous_producer_id) == (1000, 1, 77)


def test_transaction_log_value_v1_golden_bytes():  # TransactionLogValue.json: tags 0, 1, 2 after the fields
    value = TransactionLogValue(5, 2, 60_000, S.PREPARE_COMMIT, (("a", 1),), 7, 3, previous_producer_id=4,
                                next_producer_id=9, client_transaction_version=2)
    expected = bytes.fromhex(
        "0001"                   # version 1 (flexible)
        "0000000000000005" "0002" "0000ea60" "02"  # producer id, epoch, timeout, status PrepareCommit
        "02" "0261" "02" "00000001" "00"  # compact array of 1 topic "a" with partitions [1], its tag section
        "0000000000000007" "0000000000000003"  # last update, start
        "03" "00" "08" "0000000000000004" "01" "08" "0000000000000009" "02" "02" "0002")  # three tagged fields
    assert encode_value(value) == expected
    assert decode_value(expected) == value
    default = TransactionLogValue(5, 2, 60_000, S.EMPTY, (), 7, -1)
    assert encode_value(default)[:2] == b"\x00\x00" and decode_value(encode_value(default)) == default


@pytest.mark.parametrize("commit", [True, False])
def test_markers_with_the_bumped_epoch_fence_a_late_produce_of_the_old_epoch(commit):
    partition = Partition()
    partition.produce(producer_batch(9, 0, 0, count=2, transactional=True))
    partition.write_marker(9, 1, committed=commit)  # TV2: the marker carries epoch + 1
    with pytest.raises(InvalidProducerEpochError):  # the zombie's late batch of the finished transaction
        partition.produce(producer_batch(9, 0, 2, transactional=True))
    first, _ = partition.produce(producer_batch(9, 1, 0, transactional=True))  # the next transaction, sequence 0
    assert partition.state.entry(9).current_txn_first_offset == first
    reopened = partition.reopened_state()
    assert reopened.producers == partition.state.producers


def test_end_txn_v5_at_the_last_epoch_is_fenced_not_bumped_past_it():
    coordinator = _at_last_epochs(PRODUCER_EPOCH_MAX)  # only a fencing abort writes it; a hostile client sends it
    coordinator.call(AddPartitions("t", 77, PRODUCER_EPOCH_MAX, OUT, client_transaction_version=TV2))
    assert coordinator.call(EndTransaction("t", 77, PRODUCER_EPOCH_MAX, True, TV2, coordinator.allocate)).error == \
        ErrorCode.PRODUCER_FENCED
    assert coordinator.shard.metadata("t").value.producer_epoch == PRODUCER_EPOCH_MAX
