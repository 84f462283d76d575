"""The transaction coordinator's shard (Kafka's TransactionCoordinator + TransactionStateManager), sans-IO.

Theory of operation. One `TransactionCoordinatorShard` per partition of `__transaction_state` that this
broker leads, run by the coordinator runtime (coordinator/runtime.py, whose contract coordinator/shard.py
states). Durable state is the latest TransactionLogValue of every transactional id (txn/records.py), changed
only by `replay`; every transition writes the whole metadata of its id, as Kafka does.

    Empty / CompleteCommit / CompleteAbort --AddPartitions--> Ongoing --EndTxn--> PrepareCommit | PrepareAbort
    Prepare* --markers written on every partition (the broker's TransactionMarkers)--> Complete*

- InitProducerId (transactional): a new id gets a producer id from `allocate` (the broker's block from the
  controller) at epoch 0; a known id gets its epoch bumped (fencing the older producer: its next request
  carries an older epoch and is answered PRODUCER_FENCED), or a new producer id once the epoch is exhausted.
  An Ongoing transaction is first aborted with a bumped epoch and the client told CONCURRENT_TRANSACTIONS
  (it retries; Kafka's PrepareEpochFence). With a producer id and epoch in the request (v3+, KIP-360) the
  caller must be the current producer.
- AddPartitions (AddPartitionsToTxn, and AddOffsetsToTxn with the group's `__consumer_offsets` partition):
  Ongoing with the union of partitions; the start time is set when the transaction begins.
- EndTransaction: Ongoing -> Prepare*, answered once the Prepare record is committed, as Kafka answers (the
  decision is durable; the markers follow). The client's next AddPartitionsToTxn or AddOffsetsToTxn usually
  arrives before the markers are written: Kafka answers it CONCURRENT_TRANSACTIONS and the client retries after
  a backoff (tens of ms per transaction with librdkafka); here it is parked (at most PARKED_PER_ID_MAX per id,
  each at most PARKED_ADD_MS_MAX, then CONCURRENT_TRANSACTIONS) and handled when the markers are written, its
  Ongoing record in the same batch as the Complete one. A transaction.version 2 EndTxn is answered when the
  markers are written instead: its client's next partitions are added by the partition leaders, over
  inter-broker connections that carry one request at a time, where a parked request would hold up markers
  (a leader's add during Prepare* is answered CONCURRENT_TRANSACTIONS, retried by the leader's producer). A
  retry of a Prepare* decision parks until the markers are written; retries of a finished transaction are
  answered as Kafka does.
- Markers: `markers_due(high_watermark)` lists the Prepare* transactions whose Prepare record is committed;
  the broker writes their markers on every partition and then submits `CompleteTransaction`, which writes
  Complete* with the partition set cleared. A shard loaded with a Prepare* transaction lists it again, so
  a new coordinator finishes what the old one started.
- Timers (`poll`): an Ongoing transaction older than its timeout is aborted with a bumped epoch (the
  producer is fenced, as Kafka's abortTimedOutTransactions does); an idle Empty/Complete* id older than
  `transactional_id_expiration_ms` is removed by a tombstone. Each fencing abort (a timeout, or an
  InitProducerId of a new producer) carries a notice for the node's log, as Kafka logs its rollbacks.

Transaction version 2 (KIP-890 part 2, Kafka 4.0's TransactionCoordinator.endTransaction and
TransactionMetadata.prepareAbortOrCommit / prepareComplete). A client on transaction.version 2 never sends
AddPartitionsToTxn: the partition leader adds the partition on its first transactional produce
(`AddPartitions` with client_transaction_version 2). Its EndTxn (v5, client_transaction_version 2) bumps the
epoch: Prepare* carries epoch + 1 and the markers are written with it, so a late produce of the old epoch is
refused by the partitions (INVALID_PRODUCER_EPOCH) and by the coordinator (PRODUCER_FENCED). When the epoch
would reach the last one (`epoch_exhausted`), a new producer id is allocated into next_producer_id and becomes
the producer id (epoch 0) at Complete*, the old one kept as previous_producer_id. The client is answered with
the producer id and epoch to use next. For a transaction ended this way, a same-epoch EndTxn is a new request
(PRODUCER_FENCED in Prepare*/Complete*, as Kafka answers) and an EndTxn with the pre-bump epoch is a retry:
answered as the first one (parked in Prepare*, success in Complete*), also across an epoch overflow
(previous_producer_id, epoch PRODUCER_EPOCH_MAX - 1, stored epoch 0). Fencing aborts (timeout, InitProducerId)
are recorded with client_transaction_version 0, as Kafka keeps PrepareEpochFence out of these rules.

Invariants: an id's epoch never decreases for one producer id; markers are only due for a Prepare* state
whose record is below the high watermark; a transaction's partitions only grow while it is Ongoing.
This module never imports the broker, trio, clocks or files.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from coordinator.shard import CoordinatorRecord, CoordinatorResult, LoadedRecord, Notice
from partitions.errors import ErrorCode, KafkaError
from txn.records import (
    NO_PRODUCER_ID,
    TransactionLogValue,
    TransactionState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

TRANSACTION_MAX_TIMEOUT_MS_DEFAULT = 900_000  # transaction.max.timeout.ms
TRANSACTIONAL_ID_EXPIRATION_MS_DEFAULT = 604_800_000  # transactional.id.expiration.ms
PRODUCER_EPOCH_MAX = (1 << 15) - 1
NO_PRODUCER_EPOCH = -1
TRANSACTION_VERSION_BUMPS_EPOCH = 2  # transaction.version from which EndTxn bumps the epoch (KIP-890 part 2)
TRANSACTIONAL_ID_BYTES_MAX = 32_767
PARKED_PER_ID_MAX = 16  # requests waiting for one transaction's markers; more get CONCURRENT_TRANSACTIONS
PARKED_ADD_MS_MAX = 2_000  # an add parked behind a transaction's markers longer than this: CONCURRENT_TRANSACTIONS

S = TransactionState
PREPARE_STATES = (S.PREPARE_COMMIT, S.PREPARE_ABORT)
FINISHED_STATES = (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)


def epoch_exhausted(epoch: int) -> bool:
    """Kafka's isEpochExhausted: the last epoch is kept for the fencing bump of a timed-out transaction."""
    return epoch >= PRODUCER_EPOCH_MAX - 1


@dataclass(frozen=True)
class TransactionMetadata:
    """One transactional id as its latest record says, and the offset of that record."""

    transactional_id: str
    value: TransactionLogValue
    record_offset: int

    @property
    def state(self) -> TransactionState:
        return self.value.state


# --- requests (built by the broker's adapter, broker/transactions.py) ----------------------------------------


@dataclass(frozen=True)
class InitProducerId:
    transactional_id: str
    timeout_ms: int
    allocate: Callable[[], int | None]  # a fresh producer id, or None while the broker has none
    producer_id: int = NO_PRODUCER_ID  # v3+: the caller's current producer id and epoch (KIP-360)
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True)
class AddPartitions:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[tuple[str, int], ...]
    verify_only: bool = False  # KIP-890: answer whether they are in the transaction, change nothing
    client_transaction_version: int = 0  # 2: a partition leader adds it on a produce (KIP-890 part 2)


@dataclass(frozen=True)
class EndTransaction:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    client_transaction_version: int = 0  # 2 for EndTxn v5: bump the epoch (KIP-890 part 2)
    allocate: Callable[[], int | None] = lambda: None  # a producer id for an epoch overflow, None while none


@dataclass(frozen=True)
class CompleteTransaction:
    """Internal: every marker of the Prepare* transaction (producer id, epoch) is written."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool


@dataclass(frozen=True)
class DescribeTransactions:
    transactional_ids: tuple[str, ...]


@dataclass(frozen=True)
class ListTransactions:
    states: frozenset[TransactionState] = frozenset()
    producer_ids: frozenset[int] = frozenset()
    duration_ms: int = -1  # only transactions running longer than this (v1), -1 for all


# --- answers -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TxnAnswer:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True)
class TransactionView:
    """What Describe/List transactions show of one id."""

    transactional_id: str
    error: ErrorCode
    state: TransactionState | None = None
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    timeout_ms: int = 0
    start_ms: int = -1
    partitions: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class MarkerJob:
    """The markers a Prepare* transaction needs on its partitions."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: tuple[tuple[str, int], ...]


@dataclass
class TransactionConfig:
    transaction_max_timeout_ms: int = TRANSACTION_MAX_TIMEOUT_MS_DEFAULT
    transactional_id_expiration_ms: int = TRANSACTIONAL_ID_EXPIRATION_MS_DEFAULT


class TransactionCoordinatorShard:
    """The transactions of one `__transaction_state` partition (see the module docstring)."""

    handle_changes_state = False  # `handle` is a pure function of the replayed state: a failed write needs no reload

    def __init__(self, partition: int, config: TransactionConfig | None = None) -> None:
        self.partition = partition
        self.config = config or TransactionConfig()
        self.transactions: dict[str, TransactionMetadata] = {}
        self.preparing: set[str] = set()  # transactional ids in a Prepare* state (what markers_due looks at)
        self._order: dict[str, int] = {}  # a transactional id's place in `transactions` (its insertion order)
        self._inserted = 0
        self.parked: dict[str, list[int]] = {}  # volatile: EndTxn requests waiting for Complete*
        # volatile: the next transaction's adds waiting for Complete*: (request id, request, deadline)
        self.parked_adds: dict[str, list[tuple[int, AddPartitions, int]]] = {}
        # Test-only planted bug for the simulator's checkers: markers are listed as soon as the Prepare record
        # is written, before the high watermark passes it (a failover can then lose the decision).
        self.bug_markers_before_prepare_committed = False
        # Test-only planted bug: a retried transaction.version 2 EndTxn (the pre-bump epoch) is taken for a new
        # request of a fenced producer, so a committed transaction is answered PRODUCER_FENCED.
        self.bug_end_txn_retry_as_new_transaction = False
        # Test-only planted bug: an EndTxn that arrives behind a parked add of the next transaction is decided
        # against the transaction whose markers are being written (an abort is refused INVALID_TXN_STATE, a
        # commit is answered as that one's retry while the next one stays open).
        self.bug_end_txn_behind_parked_add_decided_now = False

    # --- the shard contract ----------------------------------------------------------------------------

    def handle(self, request_id: int, request: Any, now_ms: int) -> CoordinatorResult:
        if isinstance(request, InitProducerId):
            return self._init_producer_id(request, now_ms)
        if isinstance(request, AddPartitions):
            return self._add_partitions(request_id, request, now_ms)
        if isinstance(request, EndTransaction):
            return self._end_transaction(request_id, request, now_ms)
        if isinstance(request, CompleteTransaction):
            return self._complete_transaction(request, now_ms)
        if isinstance(request, DescribeTransactions):
            return CoordinatorResult.answer([self._describe(t) for t in request.transactional_ids])
        if isinstance(request, ListTransactions):
            return CoordinatorResult.answer(self._list(request, now_ms))
        raise TypeError(f"not a transaction coordinator request: {request!r}")

    def replay(self, record: LoadedRecord) -> None:
        if record.is_control or record.key is None:
            return
        try:
            transactional_id = decode_key(record.key)
            value = None if record.value is None else decode_value(record.value)
        except KafkaError:
            return  # a record of a newer writer: skipped, as Kafka's loader does
        if value is None:
            self.transactions.pop(transactional_id, None)
            self.preparing.discard(transactional_id)
            self._order.pop(transactional_id, None)
        else:
            if transactional_id not in self.transactions:
                self._inserted += 1
                self._order[transactional_id] = self._inserted
            self.transactions[transactional_id] = TransactionMetadata(transactional_id, value, record.offset)
            if value.state in PREPARE_STATES:
                self.preparing.add(transactional_id)
            else:
                self.preparing.discard(transactional_id)

    def poll(self, now_ms: int) -> CoordinatorResult:
        completions = []
        for transactional_id, waiting in list(self.parked_adds.items()):
            expired = [(request_id, TxnAnswer(ErrorCode.CONCURRENT_TRANSACTIONS))
                       for request_id, _, deadline_ms in waiting if deadline_ms <= now_ms]
            if expired:
                completions.extend(expired)
                kept = [entry for entry in waiting if entry[2] > now_ms]
                if kept:
                    self.parked_adds[transactional_id] = kept
                else:
                    del self.parked_adds[transactional_id]
        records, notices = [], []
        for metadata in self.transactions.values():
            value = metadata.value
            if value.state is S.ONGOING and value.start_ms + value.timeout_ms <= now_ms:
                fenced = _fence_abort(value, now_ms)
                records.append(self._record(metadata.transactional_id, fenced))
                notices.append(_fence_notice("transaction_timed_out", metadata.transactional_id, value, fenced,
                                             open_ms=now_ms - value.start_ms, timeout_ms=value.timeout_ms))
            elif value.state in FINISHED_STATES and \
                    value.last_update_ms + self.config.transactional_id_expiration_ms <= now_ms:
                records.append(CoordinatorRecord(encode_key(metadata.transactional_id), None))
        return CoordinatorResult(records=records, completions=completions, notices=notices)

    def next_deadline_ms(self) -> int | None:
        deadlines = [deadline_ms for waiting in self.parked_adds.values() for _, _, deadline_ms in waiting]
        for metadata in self.transactions.values():
            value = metadata.value
            if value.state is S.ONGOING:
                deadlines.append(value.start_ms + value.timeout_ms)
            elif value.state in FINISHED_STATES:
                deadlines.append(value.last_update_ms + self.config.transactional_id_expiration_ms)
        return min(deadlines) if deadlines else None

    def on_loaded(self, now_ms: int) -> None:
        pass  # every deadline and marker job derives from durable state

    def parked_request_ids(self) -> list[int]:
        return [request_id for waiting in self.parked.values() for request_id in waiting] + \
            [request_id for waiting in self.parked_adds.values() for request_id, _, _ in waiting]

    # --- read-only views for the broker ----------------------------------------------------------------

    def markers_due(self, high_watermark: int) -> list[MarkerJob]:
        """The Prepare* transactions whose Prepare record is committed (below `high_watermark`). Looks only at
        the transactions in a Prepare* state (the broker asks after every request)."""
        jobs = []
        for transactional_id in sorted(self.preparing, key=self._order.__getitem__):  # in `transactions` order
            metadata = self.transactions[transactional_id]
            value = metadata.value
            if value.state not in PREPARE_STATES:
                continue
            if metadata.record_offset >= high_watermark and not self.bug_markers_before_prepare_committed:
                continue
            jobs.append(MarkerJob(metadata.transactional_id, value.producer_id, value.producer_epoch,
                                  value.state is S.PREPARE_COMMIT, value.partitions))
        return jobs

    def metadata(self, transactional_id: str) -> TransactionMetadata | None:
        return self.transactions.get(transactional_id)

    # --- handlers ----------------------------------------------------------------------------------------

    @staticmethod
    def _record(transactional_id: str, value: TransactionLogValue) -> CoordinatorRecord:
        return CoordinatorRecord(encode_key(transactional_id), encode_value(value))

    def _write(self, transactional_id: str, value: TransactionLogValue, answer: Any) -> CoordinatorResult:
        return CoordinatorResult.answer(answer, [self._record(transactional_id, value)])

    def _init_producer_id(self, request: InitProducerId, now_ms: int) -> CoordinatorResult:
        transactional_id = request.transactional_id
        if not transactional_id or len(transactional_id.encode()) > TRANSACTIONAL_ID_BYTES_MAX:
            return CoordinatorResult.answer(TxnAnswer(ErrorCode.INVALID_REQUEST))
        if not 0 < request.timeout_ms <= self.config.transaction_max_timeout_ms:
            return CoordinatorResult.answer(TxnAnswer(ErrorCode.INVALID_TRANSACTION_TIMEOUT))
        metadata = self.transactions.get(transactional_id)
        if metadata is None:
            producer_id = request.allocate()
            if producer_id is None:
                return CoordinatorResult.answer(TxnAnswer(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS))
            value = TransactionLogValue(producer_id, 0, request.timeout_ms, S.EMPTY, (), now_ms, -1)
            return self._write(transactional_id, value, TxnAnswer(ErrorCode.NONE, producer_id, 0))
        value = metadata.value
        expected = request.producer_id != NO_PRODUCER_ID
        if expected and request.producer_id != value.producer_id:
            return CoordinatorResult.answer(TxnAnswer(ErrorCode.PRODUCER_FENCED))
        if value.state in PREPARE_STATES:
            return CoordinatorResult.answer(TxnAnswer(ErrorCode.CONCURRENT_TRANSACTIONS))
        if value.state is S.ONGOING:
            # Fence the open transaction: abort it under a bumped epoch; the client retries after the abort.
            fenced = _fence_abort(value, now_ms)
            result = self._write(transactional_id, fenced, TxnAnswer(ErrorCode.CONCURRENT_TRANSACTIONS))
            result.notices.append(_fence_notice("transaction_fenced_by_new_producer", transactional_id, value,
                                                fenced, open_ms=now_ms - value.start_ms))
            return result
        if value.state not in FINISHED_STATES:
            return CoordinatorResult.answer(TxnAnswer(ErrorCode.INVALID_TXN_STATE))
        if expected and request.producer_epoch != value.producer_epoch:
            return CoordinatorResult.answer(TxnAnswer(ErrorCode.PRODUCER_FENCED))
        if epoch_exhausted(value.producer_epoch):
            producer_id = request.allocate()
            if producer_id is None:
                return CoordinatorResult.answer(TxnAnswer(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS))
            new_value = replace(value, producer_id=producer_id, producer_epoch=0, timeout_ms=request.timeout_ms,
                                state=S.EMPTY, partitions=(), last_update_ms=now_ms, start_ms=-1,
                                next_producer_id=NO_PRODUCER_ID, client_transaction_version=0)
        else:
            new_value = replace(value, producer_epoch=value.producer_epoch + 1, timeout_ms=request.timeout_ms,
                                state=S.EMPTY, partitions=(), last_update_ms=now_ms, start_ms=-1,
                                next_producer_id=NO_PRODUCER_ID, client_transaction_version=0)
        return self._write(transactional_id, new_value,
                           TxnAnswer(ErrorCode.NONE, new_value.producer_id, new_value.producer_epoch))

    def _known(self, transactional_id: str) -> tuple[TransactionMetadata | None, ErrorCode]:
        """The id's metadata, or the error for an empty (INVALID_REQUEST) or unknown one."""
        if not transactional_id:
            return None, ErrorCode.INVALID_REQUEST
        metadata = self.transactions.get(transactional_id)
        return metadata, ErrorCode.NONE if metadata is not None else ErrorCode.INVALID_PRODUCER_ID_MAPPING

    def _check_producer(self, transactional_id: str, producer_id: int, producer_epoch: int
                        ) -> tuple[TransactionMetadata | None, ErrorCode]:
        metadata, error = self._known(transactional_id)
        if metadata is None:
            return None, error
        if metadata.value.producer_id != producer_id:
            return None, ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if metadata.value.producer_epoch != producer_epoch:
            return None, ErrorCode.PRODUCER_FENCED
        return metadata, ErrorCode.NONE

    def _add_partitions(self, request_id: int, request: AddPartitions, now_ms: int) -> CoordinatorResult:
        metadata, error = self._check_producer(request.transactional_id, request.producer_id, request.producer_epoch)
        if metadata is None:
            return CoordinatorResult.answer(TxnAnswer(error))
        value = metadata.value
        if request.verify_only:
            ok = value.state is S.ONGOING and set(request.partitions) <= set(value.partitions)
            return CoordinatorResult.answer(TxnAnswer(ErrorCode.NONE if ok else ErrorCode.INVALID_TXN_STATE))
        if value.state in PREPARE_STATES:
            parked = len(self.parked_adds.get(request.transactional_id, ())) + \
                len(self.parked.get(request.transactional_id, ()))
            if (value.client_transaction_version >= TRANSACTION_VERSION_BUMPS_EPOCH
                    or request.client_transaction_version >= TRANSACTION_VERSION_BUMPS_EPOCH
                    or parked >= PARKED_PER_ID_MAX):
                return CoordinatorResult.answer(TxnAnswer(ErrorCode.CONCURRENT_TRANSACTIONS))
            self.parked_adds.setdefault(request.transactional_id, []).append(
                (request_id, request, now_ms + PARKED_ADD_MS_MAX))
            return CoordinatorResult()  # handled when the markers are written (_complete_transaction)
        new_value = _added(value, request, now_ms)
        if isinstance(new_value, ErrorCode):
            return CoordinatorResult.answer(TxnAnswer(new_value))
        if new_value is value:
            return CoordinatorResult.answer(TxnAnswer(ErrorCode.NONE))
        return self._write(request.transactional_id, new_value, TxnAnswer(ErrorCode.NONE))

    def _end_transaction(self, request_id: int, request: EndTransaction, now_ms: int) -> CoordinatorResult:
        metadata, error = self._known(request.transactional_id)
        if metadata is None:
            return CoordinatorResult.answer(TxnAnswer(error))
        value, commit = metadata.value, request.commit
        error = self._end_txn_producer_error(value, request)
        if error != ErrorCode.NONE:
            return CoordinatorResult.answer(TxnAnswer(error))
        if value.state in PREPARE_STATES and self.parked_adds.get(request.transactional_id) \
                and not self.bug_end_txn_behind_parked_add_decided_now:
            # It came after an add of the producer's next transaction (parked until the markers of this one are
            # written), so it ends that next one, not this one: librdkafka's abort_transaction sends EndTxn while
            # its AddPartitionsToTxn is unanswered. Retriable, as Kafka answers an EndTxn during Prepare*.
            return CoordinatorResult.answer(TxnAnswer(ErrorCode.CONCURRENT_TRANSACTIONS))
        if value.state is S.ONGOING:
            new_value = _prepared(value, request, now_ms)
            if isinstance(new_value, ErrorCode):
                return CoordinatorResult.answer(TxnAnswer(new_value))
            if new_value.client_transaction_version >= TRANSACTION_VERSION_BUMPS_EPOCH:
                self.parked.setdefault(request.transactional_id, []).append(request_id)
                return CoordinatorResult(records=[self._record(request.transactional_id, new_value)])
            return self._write(request.transactional_id, new_value,
                               TxnAnswer(ErrorCode.NONE, new_value.producer_id, new_value.producer_epoch))
        same = {S.COMPLETE_COMMIT: commit, S.COMPLETE_ABORT: not commit,
                S.PREPARE_COMMIT: commit, S.PREPARE_ABORT: not commit}.get(value.state)
        if same is None or not same:
            return CoordinatorResult.answer(TxnAnswer(ErrorCode.INVALID_TXN_STATE))
        if value.state in PREPARE_STATES:
            if len(self.parked.get(request.transactional_id, ())) >= PARKED_PER_ID_MAX:
                return CoordinatorResult.answer(TxnAnswer(ErrorCode.CONCURRENT_TRANSACTIONS))
            self.parked.setdefault(request.transactional_id, []).append(request_id)
            return CoordinatorResult()  # answered with the first one, when the markers are written
        # A retry of a finished EndTxn: the producer id and epoch to use next.
        return CoordinatorResult.answer(TxnAnswer(ErrorCode.NONE, value.producer_id, value.producer_epoch))

    def _end_txn_producer_error(self, value: TransactionLogValue, request: EndTransaction) -> ErrorCode:
        """Kafka's producer checks of endTransaction: INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED or NONE.
        A transaction ended by a transaction.version 2 EndTxn carries the bumped epoch: there, only a retry
        (the pre-bump epoch, or the old producer id at the last epoch after an overflow) is valid."""
        bumped = value.client_transaction_version >= TRANSACTION_VERSION_BUMPS_EPOCH
        retry_on_epoch_bump = bumped and value.producer_epoch == request.producer_epoch + 1
        retry_on_overflow = (bumped and value.previous_producer_id == request.producer_id
                             and request.producer_epoch == PRODUCER_EPOCH_MAX - 1 and value.producer_epoch == 0)
        if self.bug_end_txn_retry_as_new_transaction:
            retry_on_epoch_bump = retry_on_overflow = False
        if value.producer_id != request.producer_id and not retry_on_overflow:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if not bumped or value.state in (S.ONGOING, S.EMPTY):
            valid = request.producer_epoch == value.producer_epoch
        elif value.state in PREPARE_STATES:
            valid = retry_on_epoch_bump
        else:
            valid = retry_on_epoch_bump or retry_on_overflow
        return ErrorCode.NONE if valid else ErrorCode.PRODUCER_FENCED

    def _complete_transaction(self, request: CompleteTransaction, now_ms: int) -> CoordinatorResult:
        metadata = self.transactions.get(request.transactional_id)
        expected_state = S.PREPARE_COMMIT if request.commit else S.PREPARE_ABORT
        if (metadata is None or metadata.value.state is not expected_state
                or metadata.value.producer_id != request.producer_id
                or metadata.value.producer_epoch != request.producer_epoch):
            return CoordinatorResult.answer(TxnAnswer(ErrorCode.NONE))  # already completed (a stale job)
        value = metadata.value
        new_value = replace(value, state=S.COMPLETE_COMMIT if request.commit else S.COMPLETE_ABORT,
                            partitions=(), last_update_ms=now_ms)
        if value.client_transaction_version >= TRANSACTION_VERSION_BUMPS_EPOCH:
            # The markers carry the bumped epoch; after an overflow the next producer id takes over at epoch 0.
            if value.next_producer_id != NO_PRODUCER_ID:
                new_value = replace(new_value, producer_id=value.next_producer_id, producer_epoch=0,
                                    next_producer_id=NO_PRODUCER_ID)
            new_value = replace(new_value, previous_producer_id=value.producer_id)
        answer = TxnAnswer(ErrorCode.NONE, new_value.producer_id, new_value.producer_epoch)
        completions = [(parked, answer) for parked in self.parked.pop(request.transactional_id, [])]
        records = [self._record(request.transactional_id, new_value)]
        # The next transaction's parked adds, in arrival order, on top of Complete*: one Ongoing record after it.
        next_value = new_value
        # Only transaction.version 1 adds park, checked against the producer id and epoch that Complete* keeps.
        for request_id, add, _ in self.parked_adds.pop(request.transactional_id, []):
            next_value = _added(next_value, add, now_ms)  # from Complete* or Ongoing: never an error
            completions.append((request_id, TxnAnswer(ErrorCode.NONE)))
        if next_value is not new_value:
            records.append(self._record(request.transactional_id, next_value))
        result = CoordinatorResult(records=records, response=TxnAnswer(ErrorCode.NONE), completions=completions)
        # The outcome was durable with the Prepare record and every marker is written: a parked EndTxn retry
        # need not wait for the Complete record (a new coordinator would redo the markers and complete it). An
        # add waits for its Ongoing record.
        result.completions_precede_records = next_value is new_value
        return result

    def _describe(self, transactional_id: str) -> TransactionView:
        if not transactional_id:
            return TransactionView(transactional_id, ErrorCode.INVALID_REQUEST)
        metadata = self.transactions.get(transactional_id)
        if metadata is None:
            return TransactionView(transactional_id, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
        value = metadata.value
        return TransactionView(transactional_id, ErrorCode.NONE, value.state, value.producer_id,
                               value.producer_epoch, value.timeout_ms, value.start_ms, value.partitions)

    def _list(self, request: ListTransactions, now_ms: int) -> list[TransactionView]:
        views = []
        for transactional_id, metadata in self.transactions.items():
            value = metadata.value
            if request.states and value.state not in request.states:
                continue
            if request.producer_ids and value.producer_id not in request.producer_ids:
                continue
            if request.duration_ms >= 0 and (value.start_ms < 0 or now_ms - value.start_ms <= request.duration_ms):
                continue
            views.append(self._describe(transactional_id))
        return views


def _added(value: TransactionLogValue, request: AddPartitions, now_ms: int) -> TransactionLogValue | ErrorCode:
    """The Ongoing value once `request`'s partitions are in the transaction of `value` (Ongoing, or finished:
    a new transaction starts), `value` itself when they all are already, or the error that answers it."""
    wanted = set(request.partitions)
    if value.state is S.ONGOING and wanted <= set(value.partitions):
        return value
    if value.state not in FINISHED_STATES and value.state is not S.ONGOING:
        return ErrorCode.INVALID_TXN_STATE
    starting = value.state is not S.ONGOING
    start_ms = now_ms if starting else value.start_ms
    version = request.client_transaction_version if starting else \
        max(value.client_transaction_version, request.client_transaction_version)
    return replace(value, state=S.ONGOING, partitions=tuple(sorted(wanted | set(value.partitions))),
                   last_update_ms=now_ms, start_ms=start_ms, client_transaction_version=version)


def _fence_notice(event: str, transactional_id: str, value: TransactionLogValue, fenced: TransactionLogValue,
                  **fields: int) -> Notice:
    """The log line of an open transaction aborted to fence its producer (Kafka logs the timeout's rollback):
    the producer gets PRODUCER_FENCED or INVALID_PRODUCER_EPOCH at its next call with the old epoch."""
    return event, dict(transactional_id=transactional_id, producer_id=value.producer_id,
                       producer_epoch=value.producer_epoch, fencing_epoch=fenced.producer_epoch,
                       partitions=len(value.partitions), **fields)


def _fence_abort(value: TransactionLogValue, now_ms: int) -> TransactionLogValue:
    """An Ongoing transaction aborted to fence its producer (timeout, InitProducerId) under a bumped epoch (the
    same one once exhausted): Kafka's PrepareEpochFence, outside the transaction.version 2 retry rules
    (client_transaction_version 0)."""
    epoch = value.producer_epoch if epoch_exhausted(value.producer_epoch) else value.producer_epoch + 1
    return replace(value, producer_epoch=epoch, state=S.PREPARE_ABORT, last_update_ms=now_ms,
                   next_producer_id=NO_PRODUCER_ID, client_transaction_version=0)


def _prepared(value: TransactionLogValue, request: EndTransaction, now_ms: int) -> TransactionLogValue | ErrorCode:
    """The Prepare* value an EndTxn writes for the Ongoing `value` (Kafka's prepareAbortOrCommit), or the error
    that answers it. Transaction version 2 bumps the epoch, with a new producer id waiting once it overflows."""
    prepared = replace(value, state=S.PREPARE_COMMIT if request.commit else S.PREPARE_ABORT, last_update_ms=now_ms,
                       client_transaction_version=request.client_transaction_version)
    if request.client_transaction_version < TRANSACTION_VERSION_BUMPS_EPOCH:
        return prepared
    if value.producer_epoch >= PRODUCER_EPOCH_MAX:
        return ErrorCode.PRODUCER_FENCED  # only a fencing bump reaches the last epoch: no client holds it
    next_producer_id = NO_PRODUCER_ID
    if epoch_exhausted(value.producer_epoch):
        next_producer_id = request.allocate()
        if next_producer_id is None:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    return replace(prepared, producer_epoch=value.producer_epoch + 1, next_producer_id=next_producer_id)
