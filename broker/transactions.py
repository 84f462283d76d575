"""The transaction APIs (sans-IO): the transaction coordinator's requests, its markers, and the partition
leaders' side of WriteTxnMarkers and DescribeProducers.

Theory of operation. Transactional ids live in the shards of `__transaction_state` (txn/coordinator.py) run
by a `CoordinatorService` (broker/coordinators.py), as groups live in `__consumer_offsets`:

- InitProducerId: without a transactional id, a producer id for an idempotent producer straight from the
  broker's block (txn/producer_ids.py); with one, the shard's answer (epoch bump, fencing, KIP-360).
- AddPartitionsToTxn (v0-3 from clients; v4 batches several transactions, as brokers send them),
  AddOffsetsToTxn (the group's `__consumer_offsets` partition joins the transaction), EndTxn: shard
  requests, answered once their record is committed. Partitions of unknown topics fail the whole request
  (UNKNOWN_TOPIC_OR_PARTITION for them, OPERATION_NOT_ATTEMPTED for the others), as Kafka answers.
- Markers (`TransactionMarkers`): on every poll, each loaded shard's `markers_due(high watermark)` lists
  the transactions whose PrepareCommit/PrepareAbort is committed; a WriteTxnMarkers request goes through the
  outbox to the leader of each of their partitions (appended directly when this broker leads them), retried every
  `MARKER_RETRY_MS` on a retriable error or a leader change, until every partition answered; then the shard
  is asked to write Complete*. A partition whose topic is gone counts as done. The coordinator epoch of a
  marker is the leader epoch the shard was loaded under, so a deposed coordinator's late markers are
  refused by the leaders (TRANSACTION_COORDINATOR_FENCED).
- WriteTxnMarkers (every broker, as partition leader): each marker is appended as a control batch through
  `BrokerCore.write_txn_marker`; the answer waits until the high watermark passes every marker written
  (acks=all), at most `MARKER_WRITE_TIMEOUT_MS`.
- DescribeTransactions (per id, at its coordinator), ListTransactions (this broker's loaded shards; an admin
  client asks every broker), DescribeProducers (the producer state of partitions this broker leads).

Old clients get INVALID_PRODUCER_EPOCH where PRODUCER_FENCED did not exist yet (KIP-588), as Kafka maps it.

Transaction version 2 (KIP-890 part 2). The cluster's finalized feature `transaction.version` (in the
metadata log, set by UpdateFeatures; a new cluster starts at the broker setting `transaction_version`, default 2
as Kafka 4.0 enables it: metadata/features.py) is advertised in ApiVersions, from which Kafka 4.0 clients
decide to use it. At 2, EndTxn v5 ends a transaction with an epoch bump (answered with the producer id and
epoch to use next) and a transactional Produce v12 adds its partitions to the transaction (the leader sends
AddPartitionsToTxn v5 without VerifyOnly to the coordinator). Below 2, EndTxn and TxnOffsetCommit stop at v4
and Produce v12 only verifies, as v11 does. The level is read from the broker's metadata image, so a change
takes effect on every broker as it replays the record; the coordinator keeps each transaction's own client
version in its records, so a transaction begun under one level ends under the other. Clients that never
negotiate these versions (every TV1 client) see no change.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from broker.apis import Deferred
from broker.coordinators import CoordinatorApis, CoordinatorService
from broker.groups import TXN_OFFSET_COMMIT_VERSION_ADDS_PARTITION
from metadata.features import TRANSACTION_VERSION, TRANSACTION_VERSION_MAX, finalized_level
from net.protocol import messages
from net.protocol.codec import ApiKey, Features, RequestHeader
from security.acl import AclOperation as Op, ResourceType
from partitions.errors import ErrorCode, KafkaError
from txn.coordinator import (
    AddPartitions,
    CompleteTransaction,
    DescribeTransactions,
    EndTransaction,
    InitProducerId,
    ListTransactions,
    MarkerJob,
    TRANSACTION_VERSION_BUMPS_EPOCH,
    TransactionView,
    TxnAnswer,
)
from txn.records import TransactionState

if TYPE_CHECKING:
    from broker.apis import KafkaApis
    from broker.core import TopicPartition

MARKER_RETRY_MS = 100
MARKER_COMPLETE_RETRY_MS = 5_000
MARKER_WRITE_TIMEOUT_MS = 30_000
WRITE_TXN_MARKERS_VERSION = 1
END_TXN_VERSION_BUMPS_EPOCH = 5
ADD_PARTITIONS_VERSION_FROM_BROKERS = 4  # v4+: batched, from brokers; VerifyOnly false adds (KIP-890 part 2)
ADD_PARTITIONS_VERSION_ADDS = 5
OFFSETS_TOPIC = "__consumer_offsets"
# Errors after which a marker is retried (a leader moving, a replica catching up); any other error means this
# coordinator is stale or the request is wrong: the job is dropped (a newer coordinator finishes it).
RETRIABLE_MARKER_ERRORS = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.FENCED_LEADER_EPOCH,
}


def _fenced_for(version: int, first_version_with_fenced: int, code: ErrorCode) -> ErrorCode:
    if code == ErrorCode.PRODUCER_FENCED and version < first_version_with_fenced:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


@dataclass
class _MarkerProgress:
    job: MarkerJob
    coordinator_epoch: int
    remaining: set = field(default_factory=set)  # (topic, partition) still without a marker
    in_flight: set = field(default_factory=set)
    retry_at_ms: int = 0
    completing_until_ms: int = -1


@dataclass
class _MarkerWrite:
    """A WriteTxnMarkers request waiting for the high watermark to pass the markers it wrote."""

    request_id: int
    header: RequestHeader | None
    deadline_ms: int
    results: list  # [(producer_id, [(topic, [(partition, code)])])]
    waiting: dict = field(default_factory=dict)  # (topic, partition) -> last marker offset
    on_done: Callable[[Any, int], None] | None = None  # markers of this broker's own coordinator


class TransactionApis:
    """The transaction APIs (see the module docstring)."""

    def __init__(self, apis: "KafkaApis", coordinators: CoordinatorApis, service: CoordinatorService,
                 group_service: CoordinatorService, transaction_version: int = TRANSACTION_VERSION_MAX) -> None:
        assert 0 <= transaction_version <= TRANSACTION_VERSION_MAX, f"transaction_version={transaction_version}"
        self.configured_transaction_version = transaction_version  # until the metadata log has a level
        self._gated_features: Any = None  # the image's FeaturesImage the version gates were last set from
        self.apis = apis
        self.broker = apis.broker
        self.coordinators = coordinators
        self.service = service
        self.group_service = group_service
        self._markers: dict[tuple, _MarkerProgress] = {}
        self._scanned_generation = -1  # the coordinator runtime's generation when every shard was last scanned
        self._writes: list[_MarkerWrite] = []
        # Test-only planted bug for the simulator: a transaction is completed once its markers are sent, before
        # the leaders have written them, so the producer's next transaction may reach a partition first.
        self.bug_complete_before_markers_written = False
        # Planted for the simulator (simulations/features_sim.py): the version gates never follow the image.
        self.bug_gates_fixed = False
        apis.transaction_verifier = self.verify
        apis.features = self.features

    @property
    def transaction_version(self) -> int:
        """The finalized transaction.version (the configured one until the metadata log has a level)."""
        return finalized_level(self.broker.image, TRANSACTION_VERSION, self.configured_transaction_version)

    @property
    def bumps_epoch(self) -> bool:
        return self.transaction_version >= TRANSACTION_VERSION_BUMPS_EPOCH

    def features(self) -> Features:
        """The supported and finalized features for ApiVersions; the epoch follows the metadata log (it only
        moves forward), so a Kafka client re-reads the levels after a change."""
        self.gate_versions()
        image = self.broker.image
        finalized = image.features.finalized()
        level = self.transaction_version  # the log's level, or the configured one before the log has any
        if level > 0:
            finalized[TRANSACTION_VERSION] = level
        return Features(dict(self.broker.supported_features), finalized, max(0, image.provenance.raft_index))

    def gate_versions(self) -> None:
        """Advertise EndTxn v5 and TxnOffsetCommit v5 only at transaction.version 2 (requests of higher versions
        are then refused as unsupported); redone when the image's features change."""
        features = self.broker.image.features
        if features is self._gated_features or self.bug_gates_fixed and self._gated_features is not None:
            return
        self._gated_features = features
        bumps = self.bumps_epoch
        self.apis.limit_highest(ApiKey.END_TXN, END_TXN_VERSION_BUMPS_EPOCH if bumps else END_TXN_VERSION_BUMPS_EPOCH - 1)
        self.apis.limit_highest(ApiKey.TXN_OFFSET_COMMIT, TXN_OFFSET_COMMIT_VERSION_ADDS_PARTITION if bumps
                                else TXN_OFFSET_COMMIT_VERSION_ADDS_PARTITION - 1)

    def api_handlers(self):
        return [
            (ApiKey.INIT_PRODUCER_ID, 0, 5, self._init_producer_id),  # v5: v4, TRANSACTION_ABORTABLE known
            (ApiKey.ADD_PARTITIONS_TO_TXN, 0, 5, self._add_partitions_to_txn),
            (ApiKey.ADD_OFFSETS_TO_TXN, 0, 4, self._add_offsets_to_txn),
            (ApiKey.END_TXN, 0, END_TXN_VERSION_BUMPS_EPOCH, self._end_txn),  # v5 gated: gate_versions
            (ApiKey.WRITE_TXN_MARKERS, 0, 1, self._write_txn_markers),
            (ApiKey.DESCRIBE_TRANSACTIONS, 0, 0, self._describe_transactions),
            (ApiKey.LIST_TRANSACTIONS, 0, 1, self._list_transactions),
            (ApiKey.DESCRIBE_PRODUCERS, 0, 0, self._describe_producers),
        ]

    def poll(self, now_ms: int, changed: AbstractSet[TopicPartition]) -> None:
        self.gate_versions()
        runtime = self.service.runtime
        if runtime.has_shards() or self._markers or runtime.generation != self._scanned_generation:
            self._send_markers(now_ms, self.service.changed_partitions(changed))
        if self._writes:
            self._complete_marker_writes(now_ms)

    def next_deadline_ms(self) -> int | None:
        deadlines = [w.deadline_ms for w in self._writes]
        for progress in self._markers.values():
            deadlines.append(progress.retry_at_ms if progress.completing_until_ms < 0 else progress.completing_until_ms)
        return min(deadlines) if deadlines else None

    # --- coordinator requests ----------------------------------------------------------------------------

    def _submit(self, header: RequestHeader, transactional_id: str, request: Any, error_response, now_ms: int) -> Any:
        """Hand `request` to the shard of `transactional_id`; `error_response(code)` builds the API's answer."""
        if not transactional_id:
            return error_response(ErrorCode.INVALID_REQUEST)
        partition = self.service.partition_for(transactional_id)
        if partition is None:
            self.service.coordinator_for(transactional_id)  # creates __transaction_state
            return error_response(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return self.coordinators.submit_all(
            header, [(self.service, partition, request)],
            lambda answers: error_response(answers[0]),
            now_ms)

    def _init_producer_id(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.InitProducerIdResponse

        def respond(answer) -> Any:
            if isinstance(answer, ErrorCode):
                answer = TxnAnswer(answer)
            return response_class(throttle_time_ms=0, error_code=_fenced_for(header.api_version, 4, answer.error),
                                  producer_id=answer.producer_id, producer_epoch=answer.producer_epoch)

        if request.transactional_id is None:
            if not (self.apis.authorize_cluster(Op.IDEMPOTENT_WRITE) or self.apis.authorize_any(Op.WRITE, ResourceType.TOPIC)):
                return respond(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
            producer_id = self.broker.producer_ids.next_id()
            if producer_id is None:  # the next block is on its way from the controller
                return respond(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
            return respond(TxnAnswer(ErrorCode.NONE, producer_id, 0))
        if not self._may_write(request.transactional_id):
            return respond(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        message = InitProducerId(request.transactional_id, request.transaction_timeout_ms,
                                 self.broker.producer_ids.next_id,
                                 getattr(request, "producer_id", -1), getattr(request, "producer_epoch", -1))
        return self._submit(header, request.transactional_id, message, respond, now_ms)

    def _may_write(self, transactional_id: str | None) -> bool:
        return not transactional_id or self.apis.authorize(Op.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)

    def _unknown_partitions(self, topics: list[tuple[str, list[int]]]) -> dict[tuple[str, int], ErrorCode]:
        """Kafka's check before AddPartitionsToTxn: any unknown partition fails the whole request."""
        errors, known = {}, []
        for topic, partitions in topics:
            image_topic = self.broker.image.topics.by_name.get(topic)
            for partition in partitions:
                if image_topic is None or partition not in image_topic.partitions:
                    errors[(topic, partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    known.append((topic, partition))
        if errors:
            errors.update({key: ErrorCode.OPERATION_NOT_ATTEMPTED for key in known})
        return errors

    def _add_partitions_to_txn(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.AddPartitionsToTxnResponse
        version = header.api_version
        if version >= ADD_PARTITIONS_VERSION_FROM_BROKERS:
            return self._add_partitions_batched(header, request, now_ms)
        topics = [(t.name, list(t.partitions)) for t in request.v3_and_below_topics]

        def respond(code_or_answer) -> Any:
            code = code_or_answer.error if isinstance(code_or_answer, TxnAnswer) else code_or_answer
            code = _fenced_for(version, 2, code)
            return response_class(throttle_time_ms=0, results_by_topic_v3_and_below=_topic_results(
                response_class, {(t, p): code for t, ps in topics for p in ps}))

        if not self._may_write(request.v3_and_below_transactional_id):
            return respond(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        unknown = self._unknown_partitions(topics) or self._unwritable_partitions(topics)
        if unknown:
            return response_class(throttle_time_ms=0,
                                  results_by_topic_v3_and_below=_topic_results(response_class, unknown))
        message = AddPartitions(request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                                request.v3_and_below_producer_epoch,
                                tuple(sorted({(t, p) for t, ps in topics for p in ps})))
        return self._submit(header, request.v3_and_below_transactional_id, message, respond, now_ms)

    def _unwritable_partitions(self, topics: list[tuple[str, list[int]]]) -> dict[tuple[str, int], ErrorCode]:
        """Kafka's authorization before AddPartitionsToTxn: a topic the principal may not WRITE fails the
        whole request (its partitions TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED)."""
        denied = {t for t, _ in topics if not self.apis.authorize(Op.WRITE, ResourceType.TOPIC, t)}
        if not denied:
            return {}
        return {(t, p): ErrorCode.TOPIC_AUTHORIZATION_FAILED if t in denied else ErrorCode.OPERATION_NOT_ATTEMPTED
                for t, ps in topics for p in ps}

    def _add_partitions_batched(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        """v4+ (brokers only, KIP-890): several transactions, each answered per partition. VerifyOnly false
        is a partition leader adding a produce's partitions for a transaction.version 2 client (part 2)."""
        response_class = messages.AddPartitionsToTxnResponse
        if not self.apis.authorize_cluster(Op.CLUSTER_ACTION):
            return response_class(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                  results_by_transaction=[])
        transactions = list(request.transactions)
        items, early, partitions_of = [], {}, []
        for index, txn in enumerate(transactions):
            topics = [(t.name, list(t.partitions)) for t in txn.topics]
            partitions_of.append(topics)
            unknown = self._unknown_partitions(topics)
            partition = self.service.partition_for(txn.transactional_id) if txn.transactional_id else None
            if unknown:
                early[index] = unknown
            elif partition is None:
                early[index] = ErrorCode.COORDINATOR_NOT_AVAILABLE if txn.transactional_id else ErrorCode.INVALID_REQUEST
            else:
                items.append((self.service, partition, AddPartitions(
                    txn.transactional_id, txn.producer_id, txn.producer_epoch,
                    tuple(sorted({(t, p) for t, ps in topics for p in ps})), verify_only=txn.verify_only,
                    client_transaction_version=0 if txn.verify_only else TRANSACTION_VERSION_BUMPS_EPOCH)))

        def build(answers: list) -> Any:
            it, results = iter(answers), []
            for index, txn in enumerate(transactions):
                answer = early[index] if index in early else next(it)
                if isinstance(answer, dict):
                    codes = answer
                else:
                    code = answer.error if isinstance(answer, TxnAnswer) else answer
                    codes = {(t, p): code for t, ps in partitions_of[index] for p in ps}
                results.append(response_class.AddPartitionsToTxnResult(
                    transactional_id=txn.transactional_id, topic_results=_topic_results(response_class, codes)))
            return response_class(throttle_time_ms=0, error_code=ErrorCode.NONE, results_by_transaction=results)

        if not items:
            return build([])
        return self.coordinators.submit_all(header, items, build, now_ms)

    def _add_offsets_to_txn(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.AddOffsetsToTxnResponse

        def respond(answer) -> Any:
            code = answer.error if isinstance(answer, TxnAnswer) else answer
            return response_class(throttle_time_ms=0, error_code=_fenced_for(header.api_version, 2, code))

        if not request.group_id:
            return respond(ErrorCode.INVALID_GROUP_ID)
        if not self._may_write(request.transactional_id):
            return respond(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not self.apis.authorize(Op.READ, ResourceType.GROUP, request.group_id):
            return respond(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        group_partition = self.group_service.partition_for(request.group_id)
        if group_partition is None:
            self.group_service.coordinator_for(request.group_id)  # creates __consumer_offsets
            return respond(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        message = AddPartitions(request.transactional_id, request.producer_id, request.producer_epoch,
                                ((self.group_service.topic.name, group_partition),))
        return self._submit(header, request.transactional_id, message, respond, now_ms)

    def _end_txn(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.EndTxnResponse

        def respond(answer) -> Any:
            if isinstance(answer, ErrorCode):
                answer = TxnAnswer(answer)
            return response_class(throttle_time_ms=0, error_code=_fenced_for(header.api_version, 2, answer.error),
                                  producer_id=answer.producer_id, producer_epoch=answer.producer_epoch)

        if not self._may_write(request.transactional_id):
            return respond(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        bump = header.api_version >= END_TXN_VERSION_BUMPS_EPOCH  # registered only when transaction.version is 2
        message = EndTransaction(request.transactional_id, request.producer_id, request.producer_epoch,
                                 bool(request.committed), TRANSACTION_VERSION_BUMPS_EPOCH if bump else 0,
                                 self.broker.producer_ids.next_id)
        return self._submit(header, request.transactional_id, message, respond, now_ms)

    def _describe_transactions(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.DescribeTransactionsResponse
        ids = list(request.transactional_ids)
        items, early = [], {}
        for index, transactional_id in enumerate(ids):
            partition = self.service.partition_for(transactional_id) if transactional_id else None
            if transactional_id and not self.apis.authorize(Op.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id):
                early[index] = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            elif partition is None:
                early[index] = ErrorCode.INVALID_REQUEST if not transactional_id else ErrorCode.COORDINATOR_NOT_AVAILABLE
            else:
                items.append((self.service, partition, DescribeTransactions((transactional_id,))))

        def build(answers: list) -> Any:
            it, states = iter(answers), []
            for index, transactional_id in enumerate(ids):
                answer = early[index] if index in early else next(it)
                view = TransactionView(transactional_id, answer) if isinstance(answer, ErrorCode) else answer[0]
                states.append(_transaction_state(response_class, view))
            return response_class(throttle_time_ms=0, transaction_states=states)

        if not items:
            return build([])
        return self.coordinators.submit_all(header, items, build, now_ms)

    def _list_transactions(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.ListTransactionsResponse
        states, unknown = set(), []
        for name in request.state_filters or ():
            state = TransactionState.from_client_name(name)
            if state is None:
                unknown.append(name)
            else:
                states.add(state)
        query = ListTransactions(frozenset(states), frozenset(request.producer_id_filters or ()),
                                 getattr(request, "duration_filter", -1))
        runtime = self.service.runtime
        loading = set(runtime.led_partitions()) - set(runtime.loaded_partitions())
        listed = []
        if not (request.state_filters and not states):
            for partition in runtime.loaded_partitions():
                listed += runtime.shard(partition).handle(0, query, now_ms).response
        code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if loading else ErrorCode.NONE
        listed = [v for v in listed if self.apis.authorize(Op.DESCRIBE, ResourceType.TRANSACTIONAL_ID, v.transactional_id)]
        return response_class(throttle_time_ms=0, error_code=code, unknown_state_filters=unknown, transaction_states=[
            response_class.TransactionState(transactional_id=v.transactional_id, producer_id=v.producer_id,
                                             transaction_state=v.state.name_for_clients)
            for v in sorted(listed, key=lambda v: v.transactional_id)])

    # --- KIP-890 part 1: a partition leader verifies a transaction's first produce ----------------------------

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
               partitions: list[tuple[str, int]], on_done: Callable[[dict, int], None], now_ms: int,
               add: bool = False) -> None:
        """Ask the coordinator of `transactional_id` whether `partitions` are in the producer's ongoing
        transaction (AddPartitionsToTxn v4 with VerifyOnly, locally when this broker is the coordinator); with
        `add` on a transaction.version 2 broker, add them instead (v5 without VerifyOnly, KIP-890 part 2).
        `on_done({partition: code}, now_ms)`: NONE (verified or added), TRANSACTION_ABORTABLE (verified not to be
        in the transaction, as Kafka's coordinator answers a verification; the caller answers INVALID_TXN_STATE
        to a client whose request version predates that error: `abortable_for`), INVALID_TXN_STATE (an add the
        transaction's state refuses, or a producer id the coordinator does not know for this transactional id),
        INVALID_PRODUCER_EPOCH (an older epoch), or NOT_ENOUGH_REPLICAS while the coordinator cannot answer
        (retriable for the producer, as Kafka answers)."""
        def answer_all(code: ErrorCode) -> dict:
            return {key: code for key in partitions}

        def client_code(code: ErrorCode) -> ErrorCode:
            if code == ErrorCode.NONE:
                return code
            if code == ErrorCode.INVALID_TXN_STATE and not add:  # verified: the partition is not in it
                return ErrorCode.TRANSACTION_ABORTABLE
            if code in (ErrorCode.INVALID_TXN_STATE, ErrorCode.TRANSACTION_ABORTABLE):
                return code
            if code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH):
                return ErrorCode.INVALID_PRODUCER_EPOCH
            if code == ErrorCode.INVALID_PRODUCER_ID_MAPPING:
                return ErrorCode.INVALID_TXN_STATE
            return ErrorCode.NOT_ENOUGH_REPLICAS

        code, coordinator = self.service.coordinator_for(transactional_id)
        if code != ErrorCode.NONE:
            on_done(answer_all(ErrorCode.NOT_ENOUGH_REPLICAS), now_ms)
            return
        add = add and self.bumps_epoch
        if coordinator == self.broker.node_id:
            request = AddPartitions(transactional_id, producer_id, producer_epoch, tuple(sorted(partitions)),
                                    verify_only=not add,
                                    client_transaction_version=TRANSACTION_VERSION_BUMPS_EPOCH if add else 0)
            self.coordinators.submit_internal(
                [(self.service, self.service.partition_for(transactional_id), request)],
                lambda answers: answer_all(client_code(answers[0].error if isinstance(answers[0], TxnAnswer)
                                                       else answers[0])),
                on_done, now_ms)
            return
        request_class = messages.AddPartitionsToTxnRequest
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(partitions):
            by_topic.setdefault(topic, []).append(partition)
        request = request_class(transactions=[request_class.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            verify_only=not add, topics=[request_class.AddPartitionsToTxnTopic(name=t, partitions=ps)
                                      for t, ps in by_topic.items()])])

        def on_response(response: Any, now: int) -> None:
            if isinstance(response, KafkaError):
                on_done(answer_all(ErrorCode.NOT_ENOUGH_REPLICAS), now)
                return
            codes = answer_all(ErrorCode.NOT_ENOUGH_REPLICAS)
            for result in response.results_by_transaction:
                for topic in result.topic_results:
                    for row in topic.results_by_partition:
                        codes[(topic.name, row.partition_index)] = client_code(ErrorCode(row.partition_error_code))
            on_done(codes, now)

        version = ADD_PARTITIONS_VERSION_ADDS if add else ADD_PARTITIONS_VERSION_FROM_BROKERS
        self.broker.send_to_broker(coordinator, ApiKey.ADD_PARTITIONS_TO_TXN, version, request, on_response, now_ms)

    # --- the partition leader's side -----------------------------------------------------------------------

    def _write_txn_markers(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        if not self.apis.authorize_cluster(Op.CLUSTER_ACTION):
            response_class = messages.WriteTxnMarkersResponse
            return response_class(markers=[response_class.WritableTxnMarkerResult(
                producer_id=marker.producer_id, topics=[response_class.WritableTxnMarkerTopicResult(
                    name=topic.name, partitions=[response_class.WritableTxnMarkerPartitionResult(
                        partition_index=p, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                        for p in topic.partition_indexes]) for topic in marker.topics]) for marker in request.markers])
        write = self._append_markers(request, header, None, now_ms)
        if not write.waiting:
            return self._marker_response(write, ErrorCode.NONE)
        write.request_id = self.apis.defer()
        return Deferred(write.request_id)

    def _append_markers(self, request: Any, header: RequestHeader | None, on_done, now_ms: int) -> _MarkerWrite:
        """Append every marker of a WriteTxnMarkers request. A write with markers `waiting` for the high
        watermark is answered by `poll`; one without is the caller's to answer at once."""
        write = _MarkerWrite(0, header, now_ms + MARKER_WRITE_TIMEOUT_MS, [], on_done=on_done)
        for marker in request.markers:
            topics = []
            for topic in marker.topics:
                codes = []
                for partition in topic.partition_indexes:
                    try:
                        offset = self.broker.write_txn_marker(
                            topic.name, partition, marker.producer_id, marker.producer_epoch,
                            marker.coordinator_epoch, bool(marker.transaction_result), now_ms)
                    except KafkaError as error:
                        codes.append([partition, error.code])
                        continue
                    codes.append([partition, None])
                    key = (topic.name, partition)
                    write.waiting[key] = max(write.waiting.get(key, -1), offset)
                topics.append((topic.name, codes))
            write.results.append((marker.producer_id, topics))
        if write.waiting:
            self._writes.append(write)
        return write

    def _complete_marker_writes(self, now_ms: int) -> None:
        still, done = [], []
        for write in self._writes:
            for key, offset in list(write.waiting.items()):
                hosted = self.broker.hosted(*key)
                if hosted is None or not hosted.replica.is_leader or not self.broker.serving:
                    write.waiting[key] = None  # leadership lost before the marker committed
                elif hosted.replica.high_watermark > offset:
                    del write.waiting[key]
            lost = {key for key, offset in write.waiting.items() if offset is None}
            if not write.waiting or lost or now_ms >= write.deadline_ms:
                code = ErrorCode.NOT_LEADER_OR_FOLLOWER if lost else ErrorCode.REQUEST_TIMED_OUT
                response = self._marker_response(write, code if write.waiting else ErrorCode.NONE)
                if write.on_done is not None:
                    done.append((write.on_done, response))
                else:
                    self.apis.completed.append((write.request_id, write.header, response))
            else:
                still.append(write)
        self._writes = still
        for on_done, response in done:
            on_done(response, now_ms)

    @staticmethod
    def _marker_response(write: _MarkerWrite, pending_code: ErrorCode) -> Any:
        """The response: each partition's append error, or `pending_code` for appended markers."""
        response_class = messages.WriteTxnMarkersResponse
        return response_class(markers=[
            response_class.WritableTxnMarkerResult(producer_id=producer_id, topics=[
                response_class.WritableTxnMarkerTopicResult(name=name, partitions=[
                    response_class.WritableTxnMarkerPartitionResult(
                        partition_index=partition,
                        error_code=code if code is not None else
                        (pending_code if (name, partition) in write.waiting else ErrorCode.NONE))
                    for partition, code in codes])
                for name, codes in topics])
            for producer_id, topics in write.results])

    def _describe_producers(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.DescribeProducersResponse
        topics = []
        for topic in request.topics:
            partitions = []
            readable = self.apis.authorize(Op.READ, ResourceType.TOPIC, topic.name)
            for partition in topic.partition_indexes:
                hosted = self.broker.hosted(topic.name, partition)
                if not readable:
                    partitions.append(response_class.PartitionResponse(
                        partition_index=partition, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message=None,
                        active_producers=[]))
                    continue
                if hosted is None or not hosted.replica.is_leader or not self.broker.serving:
                    known = topic.name in self.broker.image.topics.by_name
                    code = ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    partitions.append(response_class.PartitionResponse(
                        partition_index=partition, error_code=code, error_message=None, active_producers=[]))
                    continue
                state = hosted.producer_state
                active = [response_class.ProducerState(
                    producer_id=entry.producer_id, producer_epoch=entry.producer_epoch,
                    last_sequence=entry.last_sequence, last_timestamp=entry.last_timestamp,
                    coordinator_epoch=entry.coordinator_epoch,
                    current_txn_start_offset=-1 if entry.current_txn_first_offset is None
                    else entry.current_txn_first_offset)
                    for entry in (state.producers[k] for k in sorted(state.producers))]
                partitions.append(response_class.PartitionResponse(
                    partition_index=partition, error_code=ErrorCode.NONE, error_message=None, active_producers=active))
            topics.append(response_class.TopicResponse(name=topic.name, partitions=partitions))
        return response_class(throttle_time_ms=0, topics=topics)

    # --- the coordinator's markers -------------------------------------------------------------------------

    def _send_markers(self, now_ms: int, changed: set[int]) -> None:
        """Start or advance the markers of every Prepare* transaction whose record is committed. A shard's
        markers become due only when its partition changes (a Prepare record written, the high watermark
        passing it) or it is loaded, so the shards looked at are those that changed, those with markers in
        flight, and all of them after the set of loaded shards changed."""
        runtime, port = self.service.runtime, self.service.runtime.port
        if runtime.generation != self._scanned_generation:
            self._scanned_generation = runtime.generation
            scan = runtime.loaded_partitions()
        else:
            scan = sorted(changed.union(key[0] for key in self._markers))
        due = {}
        for partition in scan:
            shard = runtime.shard(partition)
            if shard is None:
                continue  # loading, or no longer led: its jobs are dropped below
            coordinator_epoch = runtime.leader_epoch(partition)
            for job in shard.markers_due(port.high_watermark(partition)):
                due[(partition, job.transactional_id, job.producer_id, job.producer_epoch, job.commit)] = \
                    (job, coordinator_epoch)
        for key in [k for k in self._markers if k not in due]:
            del self._markers[key]  # completed, or this shard moved away
        for key, (job, coordinator_epoch) in due.items():
            progress = self._markers.get(key)
            if progress is None or progress.coordinator_epoch != coordinator_epoch:
                progress = self._markers[key] = _MarkerProgress(job, coordinator_epoch, set(job.partitions))
            self._advance(key[0], progress, now_ms)

    def _advance(self, txn_partition: int, progress: _MarkerProgress, now_ms: int) -> None:
        job = progress.job
        topics = self.broker.image.topics.by_name
        progress.remaining = {(t, p) for t, p in progress.remaining if t in topics}  # a deleted topic needs none
        if not progress.remaining:
            if progress.completing_until_ms < 0 or now_ms >= progress.completing_until_ms:
                progress.completing_until_ms = now_ms + MARKER_COMPLETE_RETRY_MS
                if self.service.runtime.status(txn_partition) == ErrorCode.NONE:
                    self.service.runtime.submit(txn_partition, CompleteTransaction(
                        job.transactional_id, job.producer_id, job.producer_epoch, job.commit), now_ms)
            return
        if now_ms < progress.retry_at_ms:
            return
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for topic, partition in sorted(progress.remaining - progress.in_flight):
            leader = self.broker.leader_of(topic, partition)
            if leader < 0:
                progress.retry_at_ms = now_ms + MARKER_RETRY_MS
                continue
            by_leader.setdefault(leader, []).append((topic, partition))
        for leader, partitions in sorted(by_leader.items()):
            progress.in_flight.update(partitions)
            by_topic: dict[str, list[int]] = {}
            for topic, partition in partitions:
                by_topic.setdefault(topic, []).append(partition)
            request = messages.WriteTxnMarkersRequest(markers=[messages.WriteTxnMarkersRequest.WritableTxnMarker(
                producer_id=job.producer_id, producer_epoch=job.producer_epoch, transaction_result=job.commit,
                coordinator_epoch=progress.coordinator_epoch,
                topics=[messages.WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                        for t, ps in sorted(by_topic.items())])])
            callback = self._marker_callback(progress, partitions)
            if self.bug_complete_before_markers_written:
                progress.remaining.difference_update(partitions)
            if leader == self.broker.node_id:  # this broker leads them: no round trip through the network
                write = self._append_markers(request, None, callback, now_ms)
                if not write.waiting:
                    callback(self._marker_response(write, ErrorCode.NONE), now_ms)
            else:
                self.broker.send_to_broker(leader, ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, request,
                                           callback, now_ms)

    def _marker_callback(self, progress: _MarkerProgress, partitions: list[tuple[str, int]]):
        def on_response(response: Any, now_ms: int) -> None:
            progress.in_flight.difference_update(partitions)
            codes = {key: ErrorCode.NETWORK_EXCEPTION for key in partitions}
            if isinstance(response, KafkaError):
                codes = {key: response.code for key in partitions}
            else:
                for marker in response.markers:
                    for topic in marker.topics:
                        for result in topic.partitions:
                            codes[(topic.name, result.partition_index)] = ErrorCode(result.error_code)
            for key, code in codes.items():
                if code == ErrorCode.NONE:
                    progress.remaining.discard(key)
                elif code in RETRIABLE_MARKER_ERRORS:
                    progress.retry_at_ms = now_ms + MARKER_RETRY_MS
                else:
                    # A newer coordinator (TRANSACTION_COORDINATOR_FENCED) or a producer that moved on: stop;
                    # the job is rebuilt if the shard still lists it after its next load.
                    progress.remaining.discard(key)
                    progress.retry_at_ms = now_ms + MARKER_COMPLETE_RETRY_MS

        return on_response


def _topic_results(response_class: Any, codes: dict[tuple[str, int], ErrorCode]) -> list:
    by_topic: dict[str, list[tuple[int, ErrorCode]]] = {}
    for (topic, partition), code in sorted(codes.items()):
        by_topic.setdefault(topic, []).append((partition, code))
    return [response_class.AddPartitionsToTxnTopicResult(name=topic, results_by_partition=[
        response_class.AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=c) for p, c in rows])
        for topic, rows in by_topic.items()]


def _transaction_state(response_class: Any, view: TransactionView) -> Any:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in view.partitions:
        by_topic.setdefault(topic, []).append(partition)
    return response_class.TransactionState(
        error_code=view.error, transactional_id=view.transactional_id,
        transaction_state=view.state.name_for_clients if view.state is not None else "",
        transaction_timeout_ms=view.timeout_ms, transaction_start_time_ms=view.start_ms,
        producer_id=view.producer_id, producer_epoch=view.producer_epoch,
        topics=[response_class.TopicData(topic=t, partitions=ps) for t, ps in sorted(by_topic.items())])
