"""The transaction coordinator's shard over the coordinator runtime and a real partition log: Kafka's
transitions, fencing, markers only after the Prepare record commits, timeouts, reload (txn/coordinator.py)."""

from __future__ import annotations

import itertools

import pytest

from coordinator.runtime import CoordinatorRuntime
from partitions.errors import ErrorCode
from tests.coordinator.ports import LogPort
from txn.coordinator import (
    PARKED_ADD_MS_MAX,
    PARKED_PER_ID_MAX,
    AddPartitions,
    CompleteTransaction,
    DescribeTransactions,
    EndTransaction,
    InitProducerId,
    ListTransactions,
    TransactionConfig,
    TransactionCoordinatorShard,
    TxnAnswer,
)
from txn.records import TransactionLogValue, TransactionState, decode_key, decode_value, encode_key, encode_value

S = TransactionState


class Coordinator:
    """A runtime with one loaded shard; `call` submits, commits everything and returns the answer."""

    def __init__(self, port: LogPort | None = None, config: TransactionConfig | None = None) -> None:
        self.port = port or LogPort()
        self.ids = itertools.count(1000)
        self.config = config
        self.runtime = CoordinatorRuntime("__transaction_state",
                                          lambda p: TransactionCoordinatorShard(p, config), self.port)
        self.runtime.on_became_leader(0, 1, 0)
        self.runtime.poll(0)

    @property
    def shard(self) -> TransactionCoordinatorShard:
        return self.runtime.shard(0)

    def allocate(self) -> int:
        return next(self.ids)

    def call(self, request, now_ms: int = 0, commit: bool = True):
        request_id = self.runtime.submit(0, request, now_ms)
        if commit:
            self.port.commit_all()
        answers = dict(self.runtime.poll(now_ms))
        return answers.get(request_id)

    def init(self, txn_id: str = "t", now_ms: int = 0, timeout_ms: int = 60_000, **kw) -> TxnAnswer:
        return self.call(InitProducerId(txn_id, timeout_ms, self.allocate, **kw), now_ms)

    def state(self, txn_id: str = "t") -> TransactionState:
        return self.shard.metadata(txn_id).state


def test_records_round_trip_in_kafkas_layout():
    value = TransactionLogValue(7, 3, 60_000, S.ONGOING, (("a", 0), ("a", 2), ("b", 1)), 1_000, 900)
    assert decode_value(encode_value(value)) == value
    assert decode_key(encode_key("my-txn")) == "my-txn"
    # key: version int16 0, string; value starts with version 0, producer id int64, epoch int16
    assert encode_key("ab") == b"\x00\x00\x00\x02ab"
    assert encode_value(value)[:12] == b"\x00\x00" + (7).to_bytes(8, "big") + (3).to_bytes(2, "big")


def test_init_add_end_commit_and_markers_wait_for_the_prepare_record_to_commit():
    coordinator = Coordinator()
    answer = coordinator.init()
    assert answer == TxnAnswer(ErrorCode.NONE, 1000, 0)
    assert coordinator.call(AddPartitions("t", 1000, 0, (("out", 0), ("out", 1))), 10).error == ErrorCode.NONE
    assert coordinator.state() is S.ONGOING
    # EndTxn: the answer and the markers wait for the PrepareCommit record to be committed, not for the markers.
    end_id = coordinator.runtime.submit(0, EndTransaction("t", 1000, 0, True), 20)
    assert coordinator.runtime.poll(20) == []
    assert coordinator.state() is S.PREPARE_COMMIT
    retry_id = coordinator.runtime.submit(0, EndTransaction("t", 1000, 0, True), 21)  # a retry parks until Complete*
    assert coordinator.shard.markers_due(coordinator.port.high_watermark(0)) == []
    coordinator.port.commit_all()
    # EndTxn is answered with the producer id and epoch (EndTxn v5 carries them; v0-4 leave them out).
    assert dict(coordinator.runtime.poll(22)) == {end_id: TxnAnswer(ErrorCode.NONE, 1000, 0)}
    jobs = coordinator.shard.markers_due(coordinator.port.high_watermark(0))
    assert [(j.producer_id, j.producer_epoch, j.commit, j.partitions) for j in jobs] == \
        [(1000, 0, True, (("out", 0), ("out", 1)))]
    assert coordinator.port.high_watermark(0) > 0
    complete_id = coordinator.runtime.submit(0, CompleteTransaction("t", 1000, 0, True), 30)
    coordinator.port.commit_all()
    answers = dict(coordinator.runtime.poll(30))
    assert answers == {complete_id: TxnAnswer(ErrorCode.NONE), retry_id: TxnAnswer(ErrorCode.NONE, 1000, 0)}
    assert coordinator.state() is S.COMPLETE_COMMIT
    assert coordinator.shard.metadata("t").value.partitions == ()
    assert coordinator.shard.markers_due(10**9) == []
    # A retried EndTxn of the finished transaction is answered as Kafka does.
    assert coordinator.call(EndTransaction("t", 1000, 0, True), 40).error == ErrorCode.NONE
    assert coordinator.call(EndTransaction("t", 1000, 0, False), 40).error == ErrorCode.INVALID_TXN_STATE


def committed_states(coordinator: Coordinator, txn_id: str = "t") -> list[TransactionState]:
    """The states of `txn_id`'s records in the log, in order."""
    return [decode_value(r.value).state for r in coordinator.port.read(0, 0, 1 << 20)[0]
            if r.key is not None and decode_key(r.key) == txn_id and r.value is not None]


def prepared(coordinator: Coordinator) -> None:
    """Producer 1000 epoch 0 with a committed PrepareCommit of ("out", 0)."""
    coordinator.init()
    assert coordinator.call(AddPartitions("t", 1000, 0, (("out", 0),)), 10).error == ErrorCode.NONE
    assert coordinator.call(EndTransaction("t", 1000, 0, True), 20) == TxnAnswer(ErrorCode.NONE, 1000, 0)
    assert coordinator.state() is S.PREPARE_COMMIT


def test_the_next_transactions_adds_wait_for_the_markers_and_follow_complete_in_one_batch():
    coordinator = Coordinator()
    prepared(coordinator)
    # The client's next transaction starts before the markers are written: its adds park, not
    # CONCURRENT_TRANSACTIONS (which costs a librdkafka client its retry backoff).
    first = coordinator.runtime.submit(0, AddPartitions("t", 1000, 0, (("out", 1),)), 21)
    offsets = coordinator.runtime.submit(0, AddPartitions("t", 1000, 0, (("__consumer_offsets", 3),)), 22)
    coordinator.port.commit_all()
    assert coordinator.runtime.poll(23) == []
    assert coordinator.shard.parked_request_ids() == [first, offsets]
    appends_before = coordinator.port.appends
    complete = coordinator.runtime.submit(0, CompleteTransaction("t", 1000, 0, True), 30)
    # Complete* and the next Ongoing are one batch, and the adds are answered once it is committed.
    assert coordinator.port.appends == appends_before + 1
    assert coordinator.runtime.poll(31) == []
    coordinator.port.commit_all()
    assert dict(coordinator.runtime.poll(32)) == {complete: TxnAnswer(ErrorCode.NONE), first: TxnAnswer(ErrorCode.NONE),
                                                  offsets: TxnAnswer(ErrorCode.NONE)}
    assert committed_states(coordinator)[-2:] == [S.COMPLETE_COMMIT, S.ONGOING]
    value = coordinator.shard.metadata("t").value
    assert (value.state, value.partitions, value.start_ms) == (S.ONGOING, (("__consumer_offsets", 3), ("out", 1)), 30)
    assert coordinator.shard.parked_request_ids() == []
    # The new transaction commits as any other.
    assert coordinator.call(EndTransaction("t", 1000, 0, True), 40) == TxnAnswer(ErrorCode.NONE, 1000, 0)


@pytest.mark.parametrize("commit", [False, True])
def test_an_end_txn_behind_a_parked_add_ends_the_next_transaction_so_it_waits(commit):
    """librdkafka's abort_transaction sends EndTxn while its AddPartitionsToTxn is unanswered (parked here behind
    the markers of the commit before): that EndTxn ends the next transaction. Decided against the one being
    completed, an abort was refused INVALID_TXN_STATE (fatal for the client) and a commit taken for that one's
    retry while the next one stayed open; it is answered CONCURRENT_TRANSACTIONS and retried."""
    coordinator = Coordinator()
    prepared(coordinator)
    add = coordinator.runtime.submit(0, AddPartitions("t", 1000, 0, (("out", 1),)), 21)
    end = coordinator.runtime.submit(0, EndTransaction("t", 1000, 0, commit), 22)
    coordinator.port.commit_all()
    assert dict(coordinator.runtime.poll(23)) == {end: TxnAnswer(ErrorCode.CONCURRENT_TRANSACTIONS)}
    assert coordinator.shard.parked_request_ids() == [add]
    complete = coordinator.runtime.submit(0, CompleteTransaction("t", 1000, 0, True), 30)
    coordinator.port.commit_all()
    assert dict(coordinator.runtime.poll(31)) == {complete: TxnAnswer(ErrorCode.NONE), add: TxnAnswer(ErrorCode.NONE)}
    # The retry ends the next transaction.
    assert coordinator.call(EndTransaction("t", 1000, 0, commit), 40) == TxnAnswer(ErrorCode.NONE, 1000, 0)
    assert coordinator.state() is (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT)
    assert coordinator.shard.metadata("t").value.partitions == (("out", 1),)


def test_planted_bug_end_txn_behind_parked_add_decided_now_refuses_the_abort():
    coordinator = Coordinator()
    coordinator.shard.bug_end_txn_behind_parked_add_decided_now = True
    prepared(coordinator)
    coordinator.runtime.submit(0, AddPartitions("t", 1000, 0, (("out", 1),)), 21)
    end = coordinator.runtime.submit(0, EndTransaction("t", 1000, 0, False), 22)
    coordinator.port.commit_all()
    assert dict(coordinator.runtime.poll(23)) == {end: TxnAnswer(ErrorCode.INVALID_TXN_STATE)}


def test_a_parked_add_gets_concurrent_transactions_when_the_markers_take_too_long():
    coordinator = Coordinator()
    prepared(coordinator)
    add = coordinator.runtime.submit(0, AddPartitions("t", 1000, 0, (("out", 1),)), 100)
    assert coordinator.runtime.next_deadline_ms() == 100 + PARKED_ADD_MS_MAX
    assert coordinator.runtime.poll(100 + PARKED_ADD_MS_MAX - 1) == []
    assert dict(coordinator.runtime.poll(100 + PARKED_ADD_MS_MAX)) == {add: TxnAnswer(ErrorCode.CONCURRENT_TRANSACTIONS)}
    assert coordinator.shard.parked_request_ids() == []
    assert coordinator.state() is S.PREPARE_COMMIT


def test_parked_adds_are_bounded_and_answered_not_coordinator_on_resignation():
    coordinator = Coordinator()
    prepared(coordinator)
    parked = [coordinator.runtime.submit(0, AddPartitions("t", 1000, 0, (("out", 1),)), 21)
              for _ in range(PARKED_PER_ID_MAX)]
    assert coordinator.call(AddPartitions("t", 1000, 0, (("out", 1),)), 22).error == ErrorCode.CONCURRENT_TRANSACTIONS
    # A fenced or unknown producer is answered at once, not parked.
    assert coordinator.call(AddPartitions("t", 1000, 1, (("out", 1),)), 22).error == ErrorCode.PRODUCER_FENCED
    assert coordinator.call(AddPartitions("t", 7, 0, (("out", 1),)), 22).error == \
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    coordinator.runtime.on_resigned(0, 23)
    assert dict(coordinator.runtime.poll(23)) == {request_id: ErrorCode.NOT_COORDINATOR for request_id in parked}


def test_a_second_init_fences_the_first_producer():
    coordinator = Coordinator()
    first = coordinator.init()
    second = coordinator.init()
    assert (second.producer_id, second.producer_epoch) == (first.producer_id, 1)
    stale = coordinator.call(AddPartitions("t", first.producer_id, 0, (("out", 0),)))
    assert stale.error == ErrorCode.PRODUCER_FENCED
    assert coordinator.call(EndTransaction("t", first.producer_id, 0, True)).error == ErrorCode.PRODUCER_FENCED


def test_init_while_a_transaction_is_open_aborts_it_under_a_bumped_epoch_then_retries_succeed():
    coordinator = Coordinator()
    first = coordinator.init()
    coordinator.call(AddPartitions("t", first.producer_id, 0, (("out", 0),)))
    assert coordinator.init().error == ErrorCode.CONCURRENT_TRANSACTIONS
    metadata = coordinator.shard.metadata("t")
    assert (metadata.state, metadata.value.producer_epoch) == (S.PREPARE_ABORT, 1)
    assert coordinator.init().error == ErrorCode.CONCURRENT_TRANSACTIONS  # markers not written yet
    [job] = coordinator.shard.markers_due(coordinator.port.high_watermark(0))
    assert (job.commit, job.producer_epoch) == (False, 1)
    coordinator.call(CompleteTransaction("t", job.producer_id, job.producer_epoch, False))
    again = coordinator.init()
    assert (again.error, again.producer_epoch) == (ErrorCode.NONE, 2)


def test_kip_360_init_with_the_current_producer_bumps_and_a_stranger_is_fenced():
    coordinator = Coordinator()
    first = coordinator.init()
    assert coordinator.init(producer_id=first.producer_id, producer_epoch=0).producer_epoch == 1
    assert coordinator.init(producer_id=first.producer_id, producer_epoch=0).error == ErrorCode.PRODUCER_FENCED
    assert coordinator.init(producer_id=999_999, producer_epoch=0).error == ErrorCode.PRODUCER_FENCED


def test_bad_requests_get_kafkas_errors_and_write_nothing():
    coordinator = Coordinator(config=TransactionConfig(transaction_max_timeout_ms=1_000))
    end_before = coordinator.port.log_end_offset(0)
    assert coordinator.init(timeout_ms=2_000).error == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert coordinator.init(txn_id="").error == ErrorCode.INVALID_REQUEST
    assert coordinator.call(EndTransaction("nope", 1, 0, True)).error == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert coordinator.port.log_end_offset(0) == end_before
    answer = coordinator.init(timeout_ms=1_000)
    end_before = coordinator.port.log_end_offset(0)
    # EndTxn without a transaction, a wrong producer id, AddPartitions from a stale epoch.
    assert coordinator.call(EndTransaction("t", answer.producer_id, 0, True)).error == ErrorCode.INVALID_TXN_STATE
    assert coordinator.call(EndTransaction("t", 5, 0, True)).error == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert coordinator.call(AddPartitions("t", answer.producer_id, 7, (("x", 0),))).error == ErrorCode.PRODUCER_FENCED
    assert coordinator.port.log_end_offset(0) == end_before


def test_an_expired_transaction_is_aborted_with_a_bumped_epoch_and_fences_its_producer():
    coordinator = Coordinator()
    answer = coordinator.init(timeout_ms=5_000)
    coordinator.call(AddPartitions("t", answer.producer_id, 0, (("out", 0),)), 1_000)
    assert coordinator.runtime.next_deadline_ms() == 6_000
    coordinator.runtime.poll(5_999)
    assert coordinator.state() is S.ONGOING
    coordinator.runtime.poll(6_000)
    coordinator.port.commit_all()
    metadata = coordinator.shard.metadata("t")
    assert (metadata.state, metadata.value.producer_epoch) == (S.PREPARE_ABORT, 1)
    assert coordinator.call(EndTransaction("t", answer.producer_id, 0, True), 6_001).error == ErrorCode.PRODUCER_FENCED
    # The node logs why its producer was fenced, once.
    assert coordinator.runtime.take_notices() == [("transaction_timed_out", dict(
        transactional_id="t", producer_id=answer.producer_id, producer_epoch=0, fencing_epoch=1, partitions=1,
        open_ms=5_000, timeout_ms=5_000))]
    assert coordinator.runtime.take_notices() == []


def test_a_fencing_abort_is_noticed_only_once_its_record_is_appended():
    coordinator = Coordinator()
    answer = coordinator.init(timeout_ms=5_000)
    coordinator.call(AddPartitions("t", answer.producer_id, 0, (("out", 0),)), 1_000)
    coordinator.port.fail_next = ErrorCode.NOT_LEADER_OR_FOLLOWER
    coordinator.runtime.poll(6_000)  # the abort's append fails: nothing happened, nothing to log
    assert coordinator.state() is S.ONGOING and coordinator.runtime.take_notices() == []
    # A new producer with the same id fences the open transaction: noticed as such.
    assert coordinator.init(timeout_ms=5_000, now_ms=2_000).error == ErrorCode.CONCURRENT_TRANSACTIONS
    [(event, fields)] = coordinator.runtime.take_notices()
    assert (event, fields["producer_epoch"], fields["fencing_epoch"], fields["open_ms"]) == (
        "transaction_fenced_by_new_producer", 0, 1, 1_000)


def test_a_new_coordinator_loads_a_prepared_transaction_and_lists_its_markers_again():
    coordinator = Coordinator()
    answer = coordinator.init()
    coordinator.call(AddPartitions("t", answer.producer_id, 0, (("out", 3),)))
    coordinator.call(EndTransaction("t", answer.producer_id, 0, False))
    successor = Coordinator(port=coordinator.port)
    [job] = successor.shard.markers_due(successor.port.high_watermark(0))
    assert (job.transactional_id, job.commit, job.partitions) == ("t", False, (("out", 3),))


def test_describe_and_list_show_state_partitions_and_filters():
    coordinator = Coordinator()
    a = coordinator.init("a")
    coordinator.init("b")
    coordinator.call(AddPartitions("a", a.producer_id, 0, (("out", 0),)), 100)
    [view] = coordinator.call(DescribeTransactions(("a",)))
    assert (view.state, view.partitions, view.start_ms) == (S.ONGOING, (("out", 0),), 100)
    [missing] = coordinator.call(DescribeTransactions(("zzz",)))
    assert missing.error == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    listed = coordinator.call(ListTransactions(frozenset({S.ONGOING})))
    assert [v.transactional_id for v in listed] == ["a"]
    assert [v.transactional_id for v in coordinator.call(ListTransactions(duration_ms=50), now_ms=200)] == ["a"]
    assert coordinator.call(ListTransactions(duration_ms=500), now_ms=200) == []


def test_idle_transactional_ids_expire_by_tombstone():
    coordinator = Coordinator(config=TransactionConfig(transactional_id_expiration_ms=10_000))
    coordinator.init(now_ms=0)
    coordinator.runtime.poll(10_000)
    coordinator.port.commit_all()
    assert coordinator.shard.metadata("t") is None
    assert Coordinator(port=coordinator.port).shard.metadata("t") is None


def test_dump_log_transaction_log_decoder_prints_transaction_metadata(tmp_path, capsys):
    import json

    from cli import main as cli
    from coordinator.batches import coordinator_batch
    from coordinator.shard import CoordinatorRecord

    value = TransactionLogValue(7, 2, 60_000, S.PREPARE_COMMIT, (("orders", 0), ("orders", 4)), 1_000, 900)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(coordinator_batch([CoordinatorRecord(encode_key("payments"), encode_value(value)),
                                        CoordinatorRecord(encode_key("old"), None)], None, 1_000))
    assert cli.main(["dump-log", "--transaction-log-decoder", str(path)]) == 0
    out = capsys.readouterr().out
    assert "transaction_metadata::transactionalId=payments payload:" in out
    assert '"state": "PrepareCommit"' in out and '"partitions": ["orders-0", "orders-4"]' in out
    assert "transactionalId=old payload: <DELETE>" in out
    assert cli.main(["dump-log", "--transaction-log-decoder", "--json", str(path)]) == 0
    dumped = json.loads(capsys.readouterr().out)
    assert dumped[0]["records"][0]["decoded"]["value"]["producer_epoch"] == 2
