"""Partition APIs (sans-IO): Produce, Fetch, ListOffsets, OffsetForLeaderEpoch, DeleteRecords (InitProducerId
and the other transaction APIs are in broker/transactions.py).

Produce appends on the leader and answers at once (acks 0/1) or when the high watermark passes the batch
(acks=all, a delayed produce waiting on `Partition.take_completed`); KIP-98 duplicates of the last five batches
per producer are answered with their original offsets. Fetch reads up to the high watermark (consumers) or
the log end (followers, which also move the ISR and the high watermark) and waits for min_bytes or
max_wait_ms (a delayed fetch, woken when one of its partitions is marked dirty).

Authorization (Kafka's): Produce needs WRITE on each topic (and on the transactional id for transactional
batches), a consumer Fetch READ, ListOffsets and OffsetForLeaderEpoch DESCRIBE, DeleteRecords DELETE; a
follower Fetch needs CLUSTER_ACTION. A refused partition answers TOPIC_AUTHORIZATION_FAILED (or
TRANSACTIONAL_ID_AUTHORIZATION_FAILED); the others of the request are served. Decided when the request
arrives: a delayed fetch does not re-check.

Fetch versions (Kafka 3.9's 4-17): v12 is flexible and carries each partition's LastFetchedEpoch: a fetcher
(follower or consumer) whose last fetched epoch ends here before its fetch offset, or that this log does not
hold, is answered no records and the DivergingEpoch to truncate to (KIP-320/KIP-595), at once. From v13 topics
are named by id (KIP-516): an id this broker does not know answers UNKNOWN_TOPIC_ID, an id other than the one
of the log this broker hosts under that name INCONSISTENT_TOPIC_ID, and fetch sessions keep partitions by id
(broker/fetch_session.py). v14 adds nothing on the wire. From v15 the fetcher's replica id is in ReplicaState
(KIP-903), the top-level ReplicaId is -1. From v16 a partition answered NOT_LEADER_OR_FOLLOWER or
FENCED_LEADER_EPOCH carries the CurrentLeader as this broker knows it, and the response the NodeEndpoints of
those leaders at the request's listener (KIP-951). v17 adds the follower's ReplicaDirectoryId (KIP-853), which
a broker with one log directory per node has nothing to check against.

Client quotas (broker/quotas.py): a Produce request's record bytes count against the client's
producer_byte_rate when it arrives, a consumer Fetch response's record bytes against its consumer_byte_rate
when it is answered; over the quota, the answer carries throttle_time_ms and the session is marked throttled
(the dispatcher then reads nothing more from the connection for that long), and a throttled fetch is answered
empty, its bytes unrecorded, as Kafka does.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker.apis import Deferred, abortable_for
from broker.core import HostedPartition, TopicPartition
from broker.fetch_session import FetchContext, FetchSessionCache
from broker.quotas import FETCH, PRODUCE
from net.protocol import messages
from net.protocol.codec import ApiKey, RequestHeader
from net.protocol.types import NULL_UUID
from partitions.batch import iter_batches
from partitions.errors import ErrorCode, InvalidRecordError, KafkaError
from partitions.replica import IsolationLevel
from security.acl import AclOperation as Op, ResourceType

if TYPE_CHECKING:
    from broker.apis import KafkaApis

FETCH_WAIT_MS_MAX = 30_000
FETCH_VERSION_TOPIC_IDS = 13  # KIP-516: topics named by id
FETCH_VERSION_REPLICA_STATE = 15  # KIP-903: the replica id moves into ReplicaState
FETCH_VERSION_CURRENT_LEADER = 16  # KIP-951: CurrentLeader and NodeEndpoints on a leadership error
FETCH_LEADER_ERRORS = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH})
LIST_OFFSETS_LATEST = -1
LIST_OFFSETS_EARLIEST = -2
LIST_OFFSETS_MAX_TIMESTAMP = -3  # ListOffsets v7+
LIST_OFFSETS_EARLIEST_LOCAL = -4  # v8+
LIST_OFFSETS_LATEST_TIERED = -5  # v9+
PRODUCE_VERSION_ADDS_PARTITIONS = 12  # KIP-890 part 2: a transactional produce adds its partition
PRODUCE_VERSION_TRANSACTION_ABORTABLE = 11  # KIP-890: a partition not in the transaction answers TRANSACTION_ABORTABLE


@dataclass
class _DelayedProduce:
    header: RequestHeader
    responses: dict[tuple[str, int], Any]  # PartitionProduceResponse per partition
    waiting: set[tuple[str, int]]
    throttle_ms: int = 0


@dataclass
class _HeldProduce:
    """A transactional produce request held until its partitions are verified (refused: None until then, then
    the partitions refused with their error) or until the producer's earlier requests are appended."""

    header: RequestHeader
    request: Any
    request_id: int
    throttle_ms: int
    refused: dict[tuple[str, int], ErrorCode] | None


@dataclass
class _HeldProduces:
    """One producer's held produce requests, in arrival order, and the partitions refused to those released."""

    requests: deque[_HeldProduce] = field(default_factory=deque)
    refused: dict[tuple[str, int], ErrorCode] = field(default_factory=dict)


@dataclass
class _DelayedFetch:
    header: RequestHeader
    request: Any
    deadline_ms: int
    partitions: frozenset[tuple[str, int]]
    denied: frozenset[str]  # topics the principal may not read (decided when the request arrived)
    context: FetchContext  # the partitions read and the session (KIP-227) that cuts the response
    touched: bool = False  # its arrival read found news, or one of its partitions was marked dirty since
    session: Any = None  # the connection's security.session.Session (quotas: its principal, its throttle)


def _isolation(request: Any) -> IsolationLevel:
    """A Fetch request's isolation level; a value Kafka does not define reads uncommitted."""
    if request.isolation_level in (0, 1):
        return IsolationLevel(request.isolation_level)
    return IsolationLevel.READ_UNCOMMITTED


class DataPlaneApis:
    """The partition APIs (see the module docstring)."""

    def __init__(self, apis: "KafkaApis") -> None:
        self.apis = apis
        self.broker = apis.broker
        self._produces: dict[int, _DelayedProduce] = {}
        self._held: dict[int, _HeldProduces] = {}  # producer id -> its requests held for a verification
        self._waiting_partitions: dict[tuple[str, int], int] = {}  # partition -> produce requests waiting on it
        self._fetches: dict[int, _DelayedFetch] = {}
        self._fetch_deadline_ms: int | None = None  # the earliest deadline of `_fetches` (None: none parked)
        self.fetch_sessions = FetchSessionCache()
        # A planted bug for the simulator (simulations/reassign_sim.py), never configured: a parked fetch whose
        # arrival read found news without records answers empty at its deadline, and the news is never sent.
        self.bug_parked_fetch_drops_news = False

    def api_handlers(self):
        return [
            (ApiKey.PRODUCE, 3, 12, self._produce),
            (ApiKey.FETCH, 4, 17, self._fetch),
            (ApiKey.LIST_OFFSETS, 1, 10, self._list_offsets),
            (ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, 4, self._offset_for_leader_epoch),
            (ApiKey.DELETE_RECORDS, 0, 2, self._delete_records),  # v2: v1, flexible
        ]

    def poll(self, now_ms: int, changed: AbstractSet[TopicPartition]) -> None:
        self._complete_produces(now_ms)
        self._complete_fetches(changed, now_ms)

    def next_deadline_ms(self) -> int | None:
        return self._fetch_deadline_ms

    def _park_fetch(self, request_id: int, delayed: _DelayedFetch) -> None:
        self._fetches[request_id] = delayed
        if self._fetch_deadline_ms is None or delayed.deadline_ms < self._fetch_deadline_ms:
            self._fetch_deadline_ms = delayed.deadline_ms

    def _partition_error(self, topic: str, partition: int) -> ErrorCode:
        """Why this broker cannot serve (topic, partition) as leader."""
        topic_image = self.broker.image.topics.by_name.get(topic)
        if topic_image is None or partition not in topic_image.partitions:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return ErrorCode.NOT_LEADER_OR_FOLLOWER

    def _denied_topics(self, topics: list[str], operation: Op) -> frozenset[str]:
        if self.apis.authorizer is None:
            return frozenset()
        return frozenset(t for t in set(topics) if not self.apis.authorize(operation, ResourceType.TOPIC, t))

    def _produce_denied(self, request: Any) -> dict[tuple[str, int], ErrorCode]:
        """Partitions the principal may not write, with the error each answers."""
        if self.apis.authorizer is None:
            return {}
        keys = [(t.name, p.index) for t in request.topic_data for p in t.partition_data]
        if request.transactional_id and not self.apis.authorize(Op.WRITE, ResourceType.TRANSACTIONAL_ID,
                                                                request.transactional_id):
            return {key: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for key in keys}
        denied = self._denied_topics([t.name for t in request.topic_data], Op.WRITE)
        return {key: ErrorCode.TOPIC_AUTHORIZATION_FAILED for key in keys if key[0] in denied}

    def _produce(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        request_id = self.apis.defer()
        throttle_ms = 0
        if self.apis.client_quotas_enabled():
            size = sum(len(p.records) for t in request.topic_data for p in t.partition_data if p.records is not None)
            throttle_ms = self.apis.client_throttle_ms(PRODUCE, self.apis.session, header.client_id, size, now_ms)
        denied = self._produce_denied(request)
        verify = self.apis.transaction_verifier
        verification = self._verification(request, denied) if verify is not None and request.transactional_id else None
        if verification is not None:
            producer_id, producer_epoch, keys = verification
            queue = self._held.get(producer_id)
            if keys or queue is not None:
                # KIP-890 part 1: the first transactional batch of a producer on a partition waits until the
                # coordinator confirms the partition is in its ongoing transaction; a partition never added
                # (a hanging transaction in the making) is refused. Part 2: from Produce v12 (a client on
                # transaction.version 2, which sends no AddPartitionsToTxn) the coordinator adds it instead.
                # A producer's requests are appended in the order they arrived, whatever order their
                # verifications are answered in: a later batch appended first would be taken for the start of
                # the producer's sequence, and its earlier one refused as out of order (librdkafka's fatal
                # "sequence desynchronization").
                held = _HeldProduce(header, request, request_id, throttle_ms, None if keys else denied)
                if queue is None:
                    queue = self._held[producer_id] = _HeldProduces()
                queue.requests.append(held)
                if keys:
                    def on_verified(codes: dict, now: int) -> None:
                        held.refused = {key: abortable_for(header.api_version, PRODUCE_VERSION_TRANSACTION_ABORTABLE,
                                                           code)
                                        for key, code in codes.items() if code != ErrorCode.NONE} | denied
                        self._release_held(producer_id, now)

                    verify(request.transactional_id, producer_id, producer_epoch, keys, on_verified, now_ms,
                           add=header.api_version >= PRODUCE_VERSION_ADDS_PARTITIONS)
                return Deferred(request_id) if request.acks != 0 else None
        return self._produce_now(header, request, request_id, now_ms, denied, throttle_ms)

    def _release_held(self, producer_id: int, now_ms: int) -> None:
        """Append the producer's held requests whose verification is answered, in arrival order, up to the
        first still waiting. A partition refused to one of them is refused to those behind it too: they were
        sent before the producer heard of the refusal, and appending them would leave a gap in its sequence."""
        queue = self._held[producer_id]
        while queue.requests and queue.requests[0].refused is not None:
            held = queue.requests.popleft()
            refused = dict(held.refused)
            for key in _produced_partitions(held.request):
                if key not in refused and key in queue.refused:
                    refused[key] = queue.refused[key]
            queue.refused.update(refused)
            self.apis.answer_deferred(held.request_id, held.header, functools.partial(
                self._produce_now, held.header, held.request, held.request_id, now_ms, refused, held.throttle_ms))
        if not queue.requests:
            del self._held[producer_id]

    def _verification(self, request: Any, denied: dict) -> tuple[int, int, list[tuple[str, int]]] | None:
        """(producer id, epoch, partitions whose transactional batches open a transaction here) of a
        transactional request, or None when it carries no transactional batch for a partition led here."""
        keys, producer = [], None
        for key, records in _produced_partitions(request).items():
            hosted = self.broker.hosted(*key)
            if (hosted is None or not hosted.replica.is_leader or not self.broker.serving
                    or records is None or key in denied):
                continue
            try:
                headers = [h for _, h in iter_batches(records) if h.is_transactional]
            except KafkaError:
                continue  # refused by the append itself, with its own error
            if not headers:
                continue
            first = headers[0]
            producer = producer or (first.producer_id, first.producer_epoch)
            entry = hosted.producer_state.entry(first.producer_id)
            if entry is None or entry.current_txn_first_offset is None or entry.producer_epoch != first.producer_epoch:
                keys.append(key)
        return (*producer, keys) if producer is not None else None

    def _produce_now(self, header: RequestHeader, request: Any, request_id: int, now_ms: int,
                     refused: dict[tuple[str, int], ErrorCode], throttle_ms: int = 0) -> Any:
        acks = request.acks
        responses: dict[tuple[str, int], Any] = {}
        waiting: set[tuple[str, int]] = set()
        for key, records in _produced_partitions(request).items():
            if key in refused:
                responses[key] = messages.ProduceResponse.PartitionProduceResponse(
                    index=key[1], error_code=refused[key], base_offset=-1, log_append_time_ms=-1,
                    log_start_offset=-1, record_errors=[], error_message="the partition is not in the transaction"
                    if refused[key] in (ErrorCode.INVALID_TXN_STATE, ErrorCode.TRANSACTION_ABORTABLE) else None)
                continue
            partition_response, required_offset = self._produce_partition(key, records, acks, now_ms)
            responses[key] = partition_response
            if required_offset is not None:
                hosted = self.broker.hosted(*key)
                try:
                    hosted.replica.pending_produce((request_id, key), required_offset, now_ms + max(request.timeout_ms, 0))
                    waiting.add(key)
                except KafkaError as error:
                    partition_response.error_code = error.code
        if acks == 0:
            return None
        if waiting:
            self._produces[request_id] = _DelayedProduce(header, responses, waiting, throttle_ms)
            for key in waiting:
                self._waiting_partitions[key] = self._waiting_partitions.get(key, 0) + 1
            return Deferred(request_id)
        return self._produce_response(responses, throttle_ms)

    def _produce_partition(self, key: tuple[str, int], records: Any, acks: int, now_ms: int) -> tuple[Any, int | None]:
        response_class = messages.ProduceResponse
        partition_response = response_class.PartitionProduceResponse(
            index=key[1], error_code=ErrorCode.NONE, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1,
            record_errors=[], error_message=None,
        )
        hosted = self.broker.hosted(*key)
        if hosted is None or not hosted.replica.is_leader or not self.broker.serving:
            partition_response.error_code = self._partition_error(*key)
            return partition_response, None
        if records is None:
            partition_response.error_code = ErrorCode.CORRUPT_MESSAGE
            return partition_response, None
        try:
            buffer = bytearray(records)
            headers = [h for _, h in iter_batches(buffer)]
            if len(headers) != 1:  # Kafka's LogValidator: one v2 batch per partition of a produce request
                raise InvalidRecordError(f"a produce request carries one record batch per partition, not {len(headers)}")
            check = hosted.producer_state.check_append(headers, now_ms)
            if check.is_duplicate:
                # A retry of a batch already in the log (KIP-98): answer with its offsets, append nothing.
                partition_response.base_offset = check.duplicate.first_offset
                partition_response.log_start_offset = hosted.log.log_start_offset
                waiting_offset = check.duplicate.last_offset + 1 if acks == -1 else None
                return partition_response, waiting_offset
            result = hosted.replica.append_records(buffer, acks, now_ms)
        except KafkaError as error:
            partition_response.error_code = error.code
            partition_response.error_message = error.message
            partition_response.record_errors = [  # KIP-467
                messages.ProduceResponse.BatchIndexAndErrorMessage(batch_index=index, batch_index_error_message=text)
                for index, text in getattr(error, "record_errors", ())]
            return partition_response, None
        if result.append_info is not None:
            hosted.producer_state.update(result.append_info.batch_headers)
            self.broker.metrics.record_produce(key[0], result.append_info.record_count, len(buffer))
        self.broker.dirty_partitions.add(key)
        partition_response.base_offset = result.first_offset
        partition_response.log_start_offset = result.log_start_offset
        if result.append_info is not None:
            partition_response.log_append_time_ms = result.append_info.log_append_time_ms
        return partition_response, result.required_offset

    @staticmethod
    def _produce_response(responses: dict[tuple[str, int], Any], throttle_ms: int = 0) -> Any:
        response_class = messages.ProduceResponse
        by_topic: dict[str, list] = {}
        for (topic, _), partition_response in responses.items():
            by_topic.setdefault(topic, []).append(partition_response)
        return response_class(
            responses=[response_class.TopicProduceResponse(name=t, partition_responses=p) for t, p in by_topic.items()],
            throttle_time_ms=throttle_ms,
        )

    def _complete_produces(self, now_ms: int) -> None:
        for key in list(self._waiting_partitions):
            hosted = self.broker.hosted(*key)
            if hosted is None:
                self._fail_waiting(key, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                continue
            for completion in hosted.replica.take_completed(now_ms):
                request_id, completed_key = completion.request_id
                delayed = self._produces.get(request_id)
                if delayed is not None:
                    delayed.responses[completed_key].error_code = completion.error
                    self._partition_answered(request_id, delayed, completed_key)

    def _partition_answered(self, request_id: int, delayed: _DelayedProduce, key: tuple[str, int]) -> None:
        delayed.waiting.discard(key)
        remaining = self._waiting_partitions[key] - 1
        if remaining:
            self._waiting_partitions[key] = remaining
        else:
            del self._waiting_partitions[key]
        if not delayed.waiting:
            del self._produces[request_id]
            self.apis.completed.append((request_id, delayed.header,
                                        self._produce_response(delayed.responses, delayed.throttle_ms)))

    def _fail_waiting(self, key: tuple[str, int], error: ErrorCode) -> None:
        for request_id, delayed in list(self._produces.items()):
            if key in delayed.waiting:
                delayed.responses[key].error_code = error
                self._partition_answered(request_id, delayed, key)

    def _fetch(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        if header.api_version >= FETCH_VERSION_REPLICA_STATE:
            # KIP-903: the fetcher's replica id is in ReplicaState from v15 (the top-level field is -1 there).
            # What reads request.replica_id (here and the dispatcher's quota exemption of followers) reads it.
            request.replica_id = request.replica_state.replica_id
        topic_name = self._topic_name if header.api_version >= FETCH_VERSION_TOPIC_IDS else None
        context = self.fetch_sessions.context(request, now_ms, topic_name)
        if context.error != ErrorCode.NONE:
            return messages.FetchResponse(throttle_time_ms=0, error_code=context.error, session_id=0, responses=[])
        max_wait_ms = min(max(request.max_wait_ms, 0), FETCH_WAIT_MS_MAX)
        if max_wait_ms > 0 and self._still_quiet(request, context, now_ms):
            # What a walk would find: every partition quiet, so an empty answer once the wait is over, unless
            # one moves first (then the delayed fetch reads them all, as any other).
            request_id = self.apis.defer()
            self._park_fetch(request_id, _DelayedFetch(header, request, now_ms + max_wait_ms, context.partitions(),
                                                       frozenset(), context, session=self.apis.session))
            return Deferred(request_id)
        session = self.apis.session
        denied = self._fetch_denied(request, context)
        response, size, has_error = self._read_fetch(header, request, context, now_ms, denied, session)
        if max_wait_ms == 0 or size >= request.min_bytes or has_error:
            return self._answer_fetch(header, request, context, response, session, now_ms)
        request_id = self.apis.defer()
        # `touched` when the read found news other than records (a high watermark, last stable offset or log
        # start the session has not sent): the answer at the deadline must read again to carry it.
        news = bool(response.responses) and not self.bug_parked_fetch_drops_news
        self._park_fetch(request_id, _DelayedFetch(header, request, now_ms + max_wait_ms, context.partitions(),
                                                   denied, context, touched=news, session=session))
        return Deferred(request_id)

    def _topic_name(self, topic_id: Any) -> str | None:
        """The name of the topic with this id (a uuid.UUID) in the metadata image; None when unknown."""
        topic = self.broker.image.topics.by_id.get(topic_id.bytes)
        return None if topic is None else topic.name

    def _still_quiet(self, request: Any, context: FetchContext, now_ms: int) -> bool:
        """A follower's incremental fetch that names no partition, on a session whose last walk found every
        partition quiet (_read_fetch) while no partition of this broker has moved since (the generation
        holds and nothing is dirty), and that walk touched the follower's fetch states recently enough: a
        quarter of replica.lag.time.max.ms, so skipping the touches never costs the follower its ISR place."""
        session = context.session
        broker = self.broker
        return (context.unchanged and request.replica_id >= 0 and session.quiet_generation == broker.partition_generation
                and not broker.dirty_partitions and broker.serving
                and (now_ms - session.quiet_walk_ms < broker.replica_lag_time_max_ms // 4
                     or broker.bug_quiet_sessions_never_age)
                and (self.apis.authorizer is None or self.apis.authorize_cluster(Op.CLUSTER_ACTION)))

    def _answer_fetch(self, header: RequestHeader, request: Any, context: FetchContext, response: Any, session: Any,
                      now_ms: int) -> Any:
        if request.replica_id < 0 and self.apis.client_quotas_enabled() and response.responses:
            size = sum(len(p.records) for t in response.responses for p in t.partitions if p.records)
            throttle_ms = self.apis.client_throttle_ms(FETCH, session, header.client_id, size, now_ms)
            if throttle_ms:
                # Kafka's throttled fetch: an empty answer (the session unchanged, so the next fetch reads the
                # same news) and its bytes taken back.
                self.apis.client_unrecord(FETCH, session, header.client_id, size, now_ms)
                return messages.FetchResponse(throttle_time_ms=throttle_ms, error_code=ErrorCode.NONE,
                                              session_id=context.session_id, responses=[])
        context.sent(response)
        self._count_fetched(request, response)
        return response

    def _count_fetched(self, request: Any, response: Any) -> None:
        """Bytes out per topic, counted once per answered consumer fetch (replication is not client traffic)."""
        if request.replica_id >= 0:
            return
        for topic in response.responses:
            if topic.topic:  # (an unknown topic id has no name, and no records)
                size = sum(len(p.records) for p in topic.partitions if p.records)
                self.broker.metrics.record_fetch(topic.topic, size)

    def _fetch_denied(self, request: Any, context: FetchContext) -> frozenset[str]:
        if self.apis.authorizer is None:
            return frozenset()
        topics = [topic.name for topic in context.topics if topic.name is not None]
        if request.replica_id >= 0:
            return frozenset() if self.apis.authorize_cluster(Op.CLUSTER_ACTION) else frozenset(topics)
        return self._denied_topics(topics, Op.READ)

    def _complete_fetches(self, dirty: AbstractSet[TopicPartition], now_ms: int) -> None:
        """Answer the parked fetches that expired or that a moved partition completes. With nothing moved and no
        deadline reached, none can complete: the walk (one per event the node handles, over every consumer's
        and follower's long poll) is skipped."""
        if self._fetch_deadline_ms is None or (not dirty and now_ms < self._fetch_deadline_ms):
            return
        for request_id, delayed in list(self._fetches.items()):
            expired = now_ms >= delayed.deadline_ms
            moved = bool(dirty) and not delayed.partitions.isdisjoint(dirty)
            delayed.touched = delayed.touched or moved
            if not expired and not moved:
                continue
            if not expired and self._nothing_to_read(delayed):
                continue
            if expired and delayed.context.incremental and not delayed.touched:
                # Nothing it reads moved since it arrived (its read then found no news): the answer is empty.
                # An idle follower of a thousand partitions costs one read per fetch, not two.
                del self._fetches[request_id]
                empty = messages.FetchResponse(throttle_time_ms=0, error_code=ErrorCode.NONE,
                                               session_id=delayed.context.session_id, responses=[])
                self.apis.completed.append((request_id, delayed.header, empty))
                continue
            response, size, has_error = self._read_fetch(delayed.header, delayed.request, delayed.context, now_ms,
                                                         delayed.denied, delayed.session)
            if expired or size >= delayed.request.min_bytes or has_error:
                del self._fetches[request_id]
                self.apis.completed.append((request_id, delayed.header, self._answer_fetch(
                    delayed.header, delayed.request, delayed.context, response, delayed.session, now_ms)))
        self._fetch_deadline_ms = min((delayed.deadline_ms for delayed in self._fetches.values()), default=None)

    def _nothing_to_read(self, delayed: _DelayedFetch) -> bool:
        """Kafka's DelayedFetch.tryComplete for a parked fetch: True when a read now would find neither records
        nor an error in any of its partitions, so the fetch stays parked without a read. What else moved (a high
        watermark the session has not sent) is `touched`, read at the deadline.
        Neither when a partition named by topic id has another topic under its name now (recreated): the read
        answers INCONSISTENT_TOPIC_ID.
        - A consumer's: each partition led here at the epoch the request names, its fetch offset within the log
          and at or past what its isolation level may read (the high watermark or the last stable offset). The
          partitions that wake a consumer's fetch are mostly ones whose log end moved while their high
          watermark did not (an acks=all append waits for the followers): a read of every parked consumer
          fetch then found nothing.
        - A follower's: each partition led here at the epoch the request names, with the follower at our log
          end (Partition.follower_read_finds_nothing). What wakes a parked follower fetch is mostly the high
          watermark moving when the other follower's fetch arrives: its read found no records, stayed parked,
          and cost the leader a third read per replicated write."""
        request = delayed.request
        broker = self.broker
        if delayed.denied or not broker.serving or (request.replica_id < 0 and broker.replica_selector):
            return False  # (with a replica selector, a read may also name a preferred replica: read it)
        replica_id = request.replica_id
        isolation = _isolation(request)

        def finds_nothing(topic: Any, hosted: HostedPartition, fetch_partition: Any) -> bool:
            if topic.topic_id != NULL_UUID and hosted.topic_id != topic.topic_id.bytes:
                return False  # the name's topic was recreated: a read answers INCONSISTENT_TOPIC_ID
            if replica_id < 0:
                return hosted.replica.consumer_read_finds_nothing(
                    fetch_partition.fetch_offset, isolation, fetch_partition.current_leader_epoch)
            return hosted.replica.follower_read_finds_nothing(replica_id, fetch_partition.fetch_offset,
                                                              fetch_partition.last_fetched_epoch,
                                                              fetch_partition.current_leader_epoch)

        partitions = broker.partitions
        return all((hosted := partitions.get((topic.name, fetch_partition.partition))) is not None
                   and finds_nothing(topic, hosted, fetch_partition)
                   for topic in delayed.context.topics for fetch_partition in topic.partitions)

    def _read_fetch(self, header: RequestHeader, request: Any, context: FetchContext, now_ms: int,
                    denied: frozenset[str], session: Any = None) -> tuple[Any, int, bool]:
        """Read every partition of the fetch (the request's, or its session's); the response holds those the
        context keeps (all, or the ones with news for an incremental session). A consumer with a byte-rate
        quota reads no more than one response may carry without being throttled for sure."""
        response_class = messages.FetchResponse
        remaining = request.max_bytes if header.api_version >= 3 else 2**31 - 1
        if request.replica_id < 0 and self.apis.client_quotas_enabled():
            quota_bytes = self.apis.client_max_bytes(FETCH, session, header.client_id)
            if quota_bytes is not None:
                remaining = min(remaining, quota_bytes)
        size, has_error = 0, False
        topics = []
        quiet = self._quiet_follower_partition if context.incremental and request.replica_id >= 0 \
            and self.broker.serving else None
        generation = self.broker.partition_generation
        all_quiet = quiet is not None and not denied
        # KIP-392: with a replica selector, a consumer's fetch (v11+) may read from a follower here, and a leader
        # may name a replica in the consumer's rack instead of answering with records.
        follower_reads = request.replica_id < 0 and header.api_version >= 11 and bool(self.broker.replica_selector)
        for requested in context.topics:
            topic = requested.name
            partitions = []
            for fetch_partition in requested.partitions:
                if quiet is not None and topic not in denied and quiet(request.replica_id, context, requested,
                                                                       fetch_partition, now_ms):
                    continue
                all_quiet = False
                if topic is None:  # KIP-516: an id this broker does not know
                    data = self._error_fetch_partition(fetch_partition.partition, ErrorCode.UNKNOWN_TOPIC_ID)
                elif topic in denied:
                    data = self._error_fetch_partition(fetch_partition.partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                else:
                    data = self._read_fetch_partition(request, requested, fetch_partition, remaining, now_ms,
                                                      follower_reads)
                records_size = len(data.records) if data.records else 0
                remaining -= records_size
                size += records_size
                # An error, a preferred read replica or a diverging epoch answers at once (Kafka's fetchMessages).
                has_error = (has_error or data.error_code != ErrorCode.NONE or data.preferred_read_replica >= 0
                             or data.diverging_epoch.epoch >= 0)
                if context.keep(requested.key, data):
                    partitions.append(data)
            if partitions:
                topics.append(response_class.FetchableTopicResponse(topic=topic or "", topic_id=requested.topic_id,
                                                                    partitions=partitions))
        response = response_class(throttle_time_ms=0, error_code=ErrorCode.NONE, session_id=context.session_id,
                                  responses=topics)
        if header.api_version >= FETCH_VERSION_CURRENT_LEADER and has_error:
            self._name_current_leaders(response, session)
        if all_quiet:  # every partition touched and nothing to say: see _still_quiet
            context.session.quiet_generation = generation
            context.session.quiet_walk_ms = now_ms
        elif context.session is not None:
            context.session.quiet_generation = -1
        return response, size, has_error

    def _quiet_follower_partition(self, replica_id: int, context: FetchContext, requested: Any, fetch_partition: Any,
                                  now_ms: int) -> bool:
        """A partition of a follower's incremental session with nothing to say: the follower is in the ISR at our
        log end, its last fetched epoch (v12+) is our latest (so cannot diverge), and the session last told it
        the current high watermark, replicated offset (in LastStableOffset, _read_for_follower) and log start.
        Its fetch state advances (Partition.touch_caught_up_follower) without a read or a PartitionData to build
        and drop."""
        hosted = self.broker.partitions.get((requested.name, fetch_partition.partition))
        entry = context.session.partitions.get((requested.key, fetch_partition.partition))
        if hosted is None or entry is None:  # (the caller checked that the broker serves)
            return False
        if requested.topic_id != NULL_UUID and hosted.topic_id != requested.topic_id.bytes:
            return False  # read: INCONSISTENT_TOPIC_ID
        last_fetched_epoch = fetch_partition.last_fetched_epoch
        if last_fetched_epoch >= 0 and last_fetched_epoch != hosted.log.latest_epoch:
            return False  # read: the divergence check
        replica = hosted.replica
        high_watermark = replica.high_watermark
        return (entry.high_watermark == high_watermark and entry.last_stable_offset == replica.replicated_offset
                and entry.log_start_offset == hosted.log.log_start_offset
                and replica.touch_caught_up_follower(replica_id, fetch_partition.fetch_offset,
                                                     fetch_partition.current_leader_epoch,
                                                     fetch_partition.log_start_offset, now_ms))

    @staticmethod
    def _error_fetch_partition(partition: int, error: ErrorCode) -> Any:
        return messages.FetchResponse.PartitionData(
            partition_index=partition, error_code=error, high_watermark=-1,
            last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None, preferred_read_replica=-1,
            records=b"")

    def _name_current_leaders(self, response: Any, session: Any) -> None:
        """KIP-951 (v16+): each partition answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH names the leader
        and leader epoch this broker knows (its replica's, else the metadata image's, as Kafka's
        KafkaApis.getCurrentLeader), and the response lists where those leaders are, at the listener the request
        came in on (live brokers only: an unknown or fenced leader is named without an endpoint)."""
        response_class = messages.FetchResponse
        brokers = self.broker.image.cluster.brokers
        endpoints = {}
        for topic_response in response.responses:
            for data in topic_response.partitions:
                if data.error_code not in FETCH_LEADER_ERRORS:
                    continue
                leader_id, leader_epoch = self._current_leader(topic_response.topic, data.partition_index)
                data.current_leader = response_class.LeaderIdAndEpoch(leader_id=leader_id, leader_epoch=leader_epoch)
                registration = brokers.get(leader_id)
                if registration is None or registration.fenced or leader_id in endpoints:
                    continue
                endpoint = self.apis.advertised_endpoint(registration, session)
                if endpoint is not None:
                    endpoints[leader_id] = response_class.NodeEndpoint(
                        node_id=leader_id, host=endpoint[0], port=endpoint[1], rack=registration.rack)
        response.node_endpoints = [endpoints[node_id] for node_id in sorted(endpoints)]

    def _current_leader(self, topic: str, partition: int) -> tuple[int, int]:
        hosted = self.broker.hosted(topic, partition)
        if hosted is not None:
            return hosted.replica.leader, hosted.replica.leader_epoch
        topic_image = self.broker.image.topics.by_name.get(topic)
        registration = None if topic_image is None else topic_image.partitions.get(partition)
        if registration is None:
            return -1, -1
        return registration.leader, registration.leader_epoch

    def _read_fetch_partition(self, request: Any, requested: Any, fetch_partition: Any, remaining: int, now_ms: int,
                              follower_reads: bool = False) -> Any:
        """One partition of `requested` (a fetch_session.RequestedTopic whose topic this broker knows)."""
        response_class = messages.FetchResponse
        data = response_class.PartitionData(
            partition_index=fetch_partition.partition, error_code=ErrorCode.NONE, high_watermark=-1,
            last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None, preferred_read_replica=-1,
            records=b"",
        )
        topic = requested.name
        hosted = self.broker.hosted(topic, fetch_partition.partition)
        if hosted is None or not self.broker.serving:
            data.error_code = self._partition_error(topic, fetch_partition.partition)
            return data
        if requested.topic_id != NULL_UUID and hosted.topic_id != requested.topic_id.bytes:
            # Kafka's ReplicaManager.readFromLog: the id the fetcher (or its session) has is not the log's, e.g.
            # the topic was deleted and created again under its name.
            data.error_code = ErrorCode.INCONSISTENT_TOPIC_ID
            return data
        if not (hosted.replica.is_leader or follower_reads):
            data.error_code = self._partition_error(topic, fetch_partition.partition)
            return data
        max_bytes = min(fetch_partition.partition_max_bytes, remaining)
        try:
            if request.replica_id >= 0:
                self._read_for_follower(hosted, request.replica_id, fetch_partition, max_bytes, data, now_ms)
            elif not (follower_reads and request.rack_id and hosted.replica.is_leader
                      and self._redirected(hosted, fetch_partition, request.rack_id, data)):
                self._read_for_consumer(hosted, request, fetch_partition, max_bytes, data)
        except KafkaError as error:
            data.error_code = error.code
            data.records = b""
            data.high_watermark = hosted.replica.high_watermark
            data.log_start_offset = hosted.log.log_start_offset
            data.last_stable_offset = hosted.replica.last_stable_offset
        return data

    def _read_for_follower(self, hosted: HostedPartition, replica_id: int, fetch_partition: Any, max_bytes: int,
                           data: Any, now_ms: int) -> None:
        replica = hosted.replica
        high_watermark = replica.high_watermark
        result = replica.handle_follower_fetch(
            replica_id, fetch_partition.fetch_offset, fetch_partition.last_fetched_epoch, now_ms, max(max_bytes, 1),
            current_leader_epoch=fetch_partition.current_leader_epoch,
            follower_log_start_offset=fetch_partition.log_start_offset, zero_copy=True,
        )
        if result.diverging_epoch is not None:  # (v12+: the follower's state is left alone)
            data.diverging_epoch = _diverging_epoch(result.diverging_epoch)
        records = result.records if max_bytes > 0 else b""
        self.broker.after_follower_fetch(hosted, result.isr_proposal)
        # Only a fetch that moved something others wait on can complete another waiting request: the high
        # watermark (acks=all produces, consumers, coordinators) or the ISR. Marking the partition on every
        # read made a waiting follower fetch re-read itself at every poll, forever (each re-read marked the
        # partition again); marking it when only this follower's log end moved woke the other follower's
        # and the consumers' parked fetches for a read that found nothing new for them.
        if (replica.high_watermark != high_watermark or result.isr_proposal is not None
                or replica.follower_states.get(replica_id) is None):
            self.broker.dirty_partitions.add((replica.topic, replica.partition))
        data.records = records
        data.high_watermark = result.high_watermark
        data.log_start_offset = result.log_start_offset
        # Flotilla's leader tells its followers, in the LastStableOffset that Kafka's followers ignore, the offset
        # below which every replica holds the log (Partition.replicated_offset): their cleaners keep tombstones and
        # markers past their horizon above it, whatever their own metadata image says of the ISR.
        data.last_stable_offset = replica.replicated_offset

    def _redirected(self, hosted: HostedPartition, fetch_partition: Any, client_rack: str, data: Any) -> bool:
        """KIP-392 with Kafka's RackAwareReplicaSelector, at the leader: when this broker is not in the client's
        rack and an in-sync replica there holds the fetch offset (the one with the most data, then the most
        recently caught up), name it as the preferred read replica and answer no records. Kafka's leader
        checks the request's leader epoch first, as here."""
        replica = hosted.replica
        replica.require_epoch(fetch_partition.current_leader_epoch)
        brokers = self.broker.image.cluster.brokers
        local = brokers.get(self.broker.node_id)
        if local is not None and local.rack == client_rack:
            return False
        offset = fetch_partition.fetch_offset
        candidates = []
        for replica_id in replica.isr:
            state = replica.follower_states.get(replica_id)
            broker = brokers.get(replica_id)
            if (state is None or broker is None or broker.rack != client_rack or not broker.is_active
                    or not state.log_start_offset <= offset <= state.log_end_offset):
                continue
            candidates.append((state.log_end_offset, state.last_caught_up_time_ms, -replica_id))
        if not candidates:
            return False
        data.preferred_read_replica = -max(candidates)[2]
        data.high_watermark = replica.high_watermark
        data.log_start_offset = hosted.log.log_start_offset
        data.last_stable_offset = replica.last_stable_offset
        return True

    @staticmethod
    def _read_for_consumer(hosted: HostedPartition, request: Any, fetch_partition: Any, max_bytes: int, data: Any) -> None:
        isolation = _isolation(request)
        # Records stay file slices of the log (sent by os.sendfile at a plaintext edge): never copied here. A
        # follower serves only what the caller allowed (KIP-392, a replica selector).
        result = hosted.replica.read_for_consumer(
            fetch_partition.fetch_offset, max(max_bytes, 1), isolation,
            current_leader_epoch=fetch_partition.current_leader_epoch, zero_copy=True,
            leader_only=hosted.replica.is_leader, last_fetched_epoch=fetch_partition.last_fetched_epoch,
        )
        if result.diverging_epoch is not None:
            data.diverging_epoch = _diverging_epoch(result.diverging_epoch)
        data.records = result.records if max_bytes > 0 else b""
        data.high_watermark = result.high_watermark
        data.log_start_offset = result.log_start_offset
        data.last_stable_offset = result.last_stable_offset
        data.aborted_transactions = None
        if isolation == IsolationLevel.READ_COMMITTED:
            # The aborted transactions overlapping the records returned (Kafka's collectAbortedTransactions).
            upper = fetch_partition.fetch_offset
            if isinstance(data.records, (bytes, bytearray)):
                for _, header in iter_batches(data.records):
                    upper = header.next_offset
            elif data.records:  # file slices: the log read knows where it ended
                upper = max(upper, data.records.next_offset)
            aborted = hosted.producer_state.aborted_index.collect(fetch_partition.fetch_offset, upper) \
                if upper > fetch_partition.fetch_offset else []
            data.aborted_transactions = [messages.FetchResponse.AbortedTransaction(producer_id=p, first_offset=o)
                                         for p, o in aborted]

    def _list_offsets(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.ListOffsetsResponse
        topics = []
        denied = self._denied_topics([t.name for t in request.topics], Op.DESCRIBE)
        for list_topic in request.topics:
            if list_topic.name in denied:
                partitions = [response_class.ListOffsetsPartitionResponse(
                    partition_index=p.partition_index, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, timestamp=-1,
                    offset=-1, leader_epoch=-1) for p in list_topic.partitions]
                topics.append(response_class.ListOffsetsTopicResponse(name=list_topic.name, partitions=partitions))
                continue
            partitions = [self._list_offset(list_topic.name, p, request.isolation_level) for p in list_topic.partitions]
            topics.append(response_class.ListOffsetsTopicResponse(name=list_topic.name, partitions=partitions))
        return response_class(throttle_time_ms=0, topics=topics)

    def _list_offset(self, topic: str, request_partition: Any, isolation_level: int) -> Any:
        response_class = messages.ListOffsetsResponse
        result = response_class.ListOffsetsPartitionResponse(
            partition_index=request_partition.partition_index, error_code=ErrorCode.NONE, timestamp=-1, offset=-1,
            leader_epoch=-1,
        )
        hosted = self.broker.hosted(topic, request_partition.partition_index)
        if hosted is None or not hosted.replica.is_leader or not self.broker.serving:
            result.error_code = self._partition_error(topic, request_partition.partition_index)
            return result
        replica = hosted.replica
        epoch_error = _leader_epoch_error(request_partition.current_leader_epoch, replica.leader_epoch)
        if epoch_error is not None:
            result.error_code = epoch_error
            return result
        result.leader_epoch = replica.leader_epoch
        bound = replica.last_stable_offset if isolation_level == 1 else replica.high_watermark
        timestamp = request_partition.timestamp
        if timestamp in (LIST_OFFSETS_EARLIEST, LIST_OFFSETS_EARLIEST_LOCAL):  # nothing is tiered: the same
            result.offset = hosted.log.log_start_offset
        elif timestamp == LIST_OFFSETS_LATEST:
            result.offset = bound
        elif timestamp == LIST_OFFSETS_LATEST_TIERED:  # KIP-1005, and nothing is tiered: Kafka's answer
            result.offset, result.leader_epoch = -1, -1
        elif timestamp == LIST_OFFSETS_MAX_TIMESTAMP:  # KIP-734: the record with the largest timestamp
            found = hosted.log.max_timestamp_record()
            if found is not None and found[1] < bound:
                result.timestamp, result.offset = found[0], found[1]
                result.leader_epoch = found[2] if found[2] >= 0 else -1
        elif timestamp < 0:
            result.error_code = ErrorCode.INVALID_REQUEST
        else:
            found = hosted.log.offset_for_timestamp(timestamp)
            if found is not None and found[0] < bound:
                result.offset, result.timestamp = found
        return result

    def _offset_for_leader_epoch(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.OffsetForLeaderEpochResponse
        topics = []
        if getattr(request, "replica_id", -1) >= 0 and not self.apis.authorize_cluster(Op.CLUSTER_ACTION):
            denied = frozenset(t.topic for t in request.topics)
        else:
            denied = self._denied_topics([t.topic for t in request.topics], Op.DESCRIBE)
        for topic_request in request.topics:
            partitions = []
            for partition_request in topic_request.partitions:
                result = response_class.EpochEndOffset(
                    error_code=ErrorCode.NONE, partition=partition_request.partition, leader_epoch=-1, end_offset=-1
                )
                hosted = self.broker.hosted(topic_request.topic, partition_request.partition)
                if topic_request.topic in denied:
                    result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif hosted is None or not hosted.replica.is_leader or not self.broker.serving:
                    result.error_code = self._partition_error(topic_request.topic, partition_request.partition)
                else:
                    try:
                        epoch, end_offset = hosted.replica.last_offset_for_leader_epoch(
                            partition_request.leader_epoch, partition_request.current_leader_epoch
                        )
                        result.leader_epoch, result.end_offset = epoch, end_offset
                    except KafkaError as error:
                        result.error_code = error.code
                partitions.append(result)
            topics.append(response_class.OffsetForLeaderTopicResult(topic=topic_request.topic, partitions=partitions))
        return response_class(throttle_time_ms=0, topics=topics)

    def _delete_records(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.DeleteRecordsResponse
        topics = []
        denied = self._denied_topics([t.name for t in request.topics], Op.DELETE)
        for topic_request in request.topics:
            partitions = []
            for partition_request in topic_request.partitions:
                result = response_class.DeleteRecordsPartitionResult(
                    partition_index=partition_request.partition_index, low_watermark=-1, error_code=ErrorCode.NONE
                )
                hosted = self.broker.hosted(topic_request.name, partition_request.partition_index)
                if topic_request.name in denied:
                    result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif hosted is None or not hosted.replica.is_leader or not self.broker.serving:
                    result.error_code = self._partition_error(topic_request.name, partition_request.partition_index)
                else:
                    high_watermark = hosted.replica.high_watermark
                    offset = high_watermark if partition_request.offset == -1 else partition_request.offset
                    if not 0 <= offset <= high_watermark:
                        result.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                    else:
                        if offset > hosted.log.log_start_offset:
                            hosted.log.delete_records_before(offset)
                            hosted.replica.log_start_moved()
                            # Producers whose batches are all gone expire, as after retention.
                            hosted.producer_state.on_log_start_offset(hosted.log.log_start_offset)
                        result.low_watermark = hosted.log.log_start_offset
                        self.broker.dirty_partitions.add((topic_request.name, partition_request.partition_index))
                partitions.append(result)
            topics.append(response_class.DeleteRecordsTopicResult(name=topic_request.name, partitions=partitions))
        return response_class(throttle_time_ms=0, topics=topics)


def _diverging_epoch(epoch_end_offset: Any) -> Any:
    """A replica's EpochEndOffset as a Fetch response's DivergingEpoch (KIP-320)."""
    return messages.FetchResponse.EpochEndOffset(epoch=epoch_end_offset.leader_epoch,
                                                 end_offset=epoch_end_offset.end_offset)


def _leader_epoch_error(requested: int, current: int) -> ErrorCode | None:
    if requested is None or requested < 0 or requested == current:
        return None
    return ErrorCode.FENCED_LEADER_EPOCH if requested < current else ErrorCode.UNKNOWN_LEADER_EPOCH


def _produced_partitions(request: Any) -> dict[tuple[str, int], Any]:
    """A Produce request's records by partition. A partition named twice is written once, with the records of
    its last entry, and answered once, as Kafka's KafkaApis collects them into a map (appending both, and
    waiting twice on one partition for one request, had raised out of the handler)."""
    return {(topic_data.name, partition_data.index): partition_data.records
            for topic_data in request.topic_data for partition_data in topic_data.partition_data}
