"""The Kafka API handlers (Kafka's KafkaApis), sans-IO: decoded request in, response message out.

Theory of operation: `handle(header, request, now_ms)` answers at once (a response message), not at all
(None: an acks=0 produce), or later (a `Deferred` carrying a request id): an acks=all produce waits for the
high watermark, a fetch waits for min_bytes or max_wait_ms, and requests forwarded to the controller wait
for its answer. Whoever drives this object calls `poll(now_ms)` after every event that may complete a deferred
request (a produce, a follower fetch, a controller answer, a metadata change, time passing) and sends what
it returns. Errors are per partition (or per topic) Kafka error codes, as the protocol wants; an exception
escaping `handle` is a bug, and the connection is closed.

What is implemented is what ApiVersions advertises (`SUPPORTED_APIS`): the data plane, topic and config
administration, and InitProducerId for idempotent producers (KIP-98: duplicates of the last five batches per
producer are answered with their original offsets). Consumer groups and transactions are not implemented
yet, so their APIs are not advertised and get UNSUPPORTED_VERSION / a closed connection.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable

from metadata.naming import validate_topic_name
from metadata.records import ConfigResourceType
from metadata.requests import (
    AlterableConfig,
    AlterConfigsRequest as ControllerAlterConfigs,
    ConfigEntry,
    ConfigResource,
    CreatableTopic,
    CreatePartitionsRequest as ControllerCreatePartitions,
    CreateTopicsRequest as ControllerCreateTopics,
    DeleteTopicsRequest as ControllerDeleteTopics,
    IncrementalAlterConfigsRequest as ControllerIncrementalAlterConfigs,
    ReplicaAssignment,
)
from broker.core import BrokerCore, HostedPartition
from net.protocol import messages
from net.protocol.codec import SUPPORTED, ApiKey, RequestHeader, api_versions_response
from partitions.batch import iter_batches
from partitions.errors import ErrorCode, KafkaError
from partitions.log_config import LogConfig
from partitions.replica import IsolationLevel

# What this broker serves: (lowest, highest) versions, a subset of what the codec implements.
SUPPORTED_APIS: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 8),
    ApiKey.FETCH: (4, 11),
    ApiKey.LIST_OFFSETS: (1, 5),
    ApiKey.METADATA: (0, 8),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.CREATE_TOPICS: (0, 4),
    ApiKey.DELETE_TOPICS: (0, 3),
    ApiKey.DELETE_RECORDS: (0, 1),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (0, 3),
    ApiKey.DESCRIBE_CONFIGS: (0, 2),
    ApiKey.ALTER_CONFIGS: (0, 1),
    ApiKey.CREATE_PARTITIONS: (0, 1),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 0),
    ApiKey.DESCRIBE_CLUSTER: (0, 0),
    ApiKey.INIT_PRODUCER_ID: (0, 1),
}
for _api_key, (_low, _high) in SUPPORTED_APIS.items():
    assert SUPPORTED[_api_key][0] <= _low <= _high <= SUPPORTED[_api_key][1], (_api_key, SUPPORTED[_api_key])

FETCH_WAIT_MS_MAX = 30_000
CONFIG_SOURCE_DYNAMIC_TOPIC = 1
CONFIG_SOURCE_DEFAULT = 5
RESOURCE_TYPE_TOPIC = 2
RESOURCE_TYPE_BROKER = 4
LIST_OFFSETS_LATEST = -1
LIST_OFFSETS_EARLIEST = -2


@dataclass(frozen=True)
class Deferred:
    """The answer to this request comes later, out of `poll`."""

    request_id: int


@dataclass
class _DelayedProduce:
    header: RequestHeader
    responses: dict[tuple[str, int], Any]  # PartitionProduceResponse per partition
    waiting: set[tuple[str, int]]


@dataclass
class _DelayedFetch:
    header: RequestHeader
    request: Any
    deadline_ms: int
    partitions: frozenset[tuple[str, int]]


@dataclass
class _DelayedControllerReply:
    header: RequestHeader
    results: list[Any] = field(default_factory=list)
    expected: int = 1
    build: Callable[[list[Any]], Any] | None = None


class KafkaApis:
    """Handlers for the Kafka APIs this broker implements (see the module docstring)."""

    def __init__(
        self,
        broker: BrokerCore,
        cluster_id: str,
        controller_id: Callable[[], int],
        *,
        auto_create_topics_enable: bool = True,
    ) -> None:
        self.broker = broker
        self.cluster_id = cluster_id
        self.controller_id = controller_id
        self.auto_create_topics_enable = auto_create_topics_enable
        self._request_ids = itertools.count(1)
        self._produces: dict[int, _DelayedProduce] = {}
        self._waiting_partitions: dict[tuple[str, int], int] = {}  # partition -> produce requests waiting on it
        self._fetches: dict[int, _DelayedFetch] = {}
        self._controller_replies: dict[int, _DelayedControllerReply] = {}
        self._completed: list[tuple[int, RequestHeader, Any]] = []
        self._auto_create_requested: set[str] = set()
        self._handlers: dict[int, Callable] = {
            ApiKey.API_VERSIONS: self._api_versions,
            ApiKey.METADATA: self._metadata,
            ApiKey.PRODUCE: self._produce,
            ApiKey.FETCH: self._fetch,
            ApiKey.LIST_OFFSETS: self._list_offsets,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self._offset_for_leader_epoch,
            ApiKey.CREATE_TOPICS: self._create_topics,
            ApiKey.DELETE_TOPICS: self._delete_topics,
            ApiKey.CREATE_PARTITIONS: self._create_partitions,
            ApiKey.DESCRIBE_CONFIGS: self._describe_configs,
            ApiKey.ALTER_CONFIGS: self._alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self._incremental_alter_configs,
            ApiKey.DELETE_RECORDS: self._delete_records,
            ApiKey.DESCRIBE_CLUSTER: self._describe_cluster,
            ApiKey.INIT_PRODUCER_ID: self._init_producer_id,
        }
        assert set(self._handlers) == set(SUPPORTED_APIS), set(self._handlers) ^ set(SUPPORTED_APIS)

    # ------------------------------------------------------------------ entry points

    @staticmethod
    def is_supported(api_key: int, api_version: int) -> bool:
        versions = SUPPORTED_APIS.get(api_key)
        return versions is not None and versions[0] <= api_version <= versions[1]

    def handle(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        """The response message, None (no response), or a Deferred. Callers check `is_supported` first."""
        return self._handlers[header.api_key](header, request, now_ms)

    def poll(self, now_ms: int) -> list[tuple[int, RequestHeader, Any]]:
        """Deferred requests that are now answered: (request id, header, response)."""
        for _ in range(4):  # a completion may move a high watermark that completes another request
            dirty = self.broker.dirty_partitions
            self.broker.dirty_partitions = set()
            self._complete_produces(now_ms)
            self._complete_fetches(dirty, now_ms)
            if not self.broker.dirty_partitions:
                break
        completed, self._completed = self._completed, []
        return completed

    def next_deadline_ms(self) -> int | None:
        deadlines = [delayed.deadline_ms for delayed in self._fetches.values()]
        return min(deadlines) if deadlines else None

    def _defer(self) -> int:
        return next(self._request_ids)

    # ------------------------------------------------------------------ ApiVersions, Metadata, DescribeCluster

    def _api_versions(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        return api_versions_response(ErrorCode.NONE, SUPPORTED_APIS)

    def _active_brokers(self):
        return [b for b in self.broker.image.cluster.brokers.values() if not b.fenced and "broker" in b.roles]

    def _metadata(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.MetadataResponse
        image = self.broker.image
        brokers = [
            response_class.MetadataResponseBroker(node_id=b.broker_id, host=b.host, port=b.port, rack=b.rack)
            for b in sorted(self._active_brokers(), key=lambda b: b.broker_id)
        ]
        if request.topics is None or (header.api_version == 0 and not request.topics):
            names = sorted(image.topics.by_name)
        else:
            names = [topic.name for topic in request.topics]
        allow_auto_create = self.auto_create_topics_enable and (header.api_version < 4 or request.allow_auto_topic_creation)
        topics = [self._metadata_topic(name, allow_auto_create and request.topics is not None, now_ms) for name in names]
        return response_class(
            throttle_time_ms=0,
            brokers=brokers,
            cluster_id=self.cluster_id,
            controller_id=self.controller_id(),
            topics=topics,
            cluster_authorized_operations=-2147483648,
        )

    def _metadata_topic(self, name: str, auto_create: bool, now_ms: int) -> Any:
        response_class = messages.MetadataResponse
        topic = self.broker.image.topics.by_name.get(name)
        if topic is None:
            try:
                validate_topic_name(name)
            except KafkaError as error:
                return response_class.MetadataResponseTopic(error_code=error.code, name=name, partitions=[])
            if auto_create:
                self._auto_create(name)
                return response_class.MetadataResponseTopic(error_code=ErrorCode.LEADER_NOT_AVAILABLE, name=name,
                                                            partitions=[])
            return response_class.MetadataResponseTopic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name,
                                                        partitions=[])
        active = {b.broker_id for b in self._active_brokers()}
        partitions = []
        for index, state in sorted(topic.partitions.items()):
            partitions.append(
                response_class.MetadataResponsePartition(
                    error_code=ErrorCode.NONE if state.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
                    partition_index=index,
                    leader_id=state.leader,
                    leader_epoch=state.leader_epoch,
                    replica_nodes=list(state.replicas),
                    isr_nodes=list(state.isr),
                    offline_replicas=[r for r in state.replicas if r not in active],
                )
            )
        return response_class.MetadataResponseTopic(
            error_code=ErrorCode.NONE, name=name, is_internal=name.startswith("__"), partitions=partitions
        )

    def _auto_create(self, name: str) -> None:
        if name in self._auto_create_requested:
            return
        self._auto_create_requested.add(name)

        def on_response(response: Any, now_ms: int) -> None:
            self._auto_create_requested.discard(name)

        self.broker.call_controller(ControllerCreateTopics(topics=(CreatableTopic(name=name),)), on_response)

    def _describe_cluster(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.DescribeClusterResponse
        return response_class(
            throttle_time_ms=0,
            error_code=ErrorCode.NONE,
            error_message=None,
            cluster_id=self.cluster_id,
            controller_id=self.controller_id(),
            brokers=[
                response_class.DescribeClusterBroker(broker_id=b.broker_id, host=b.host, port=b.port, rack=b.rack)
                for b in sorted(self._active_brokers(), key=lambda b: b.broker_id)
            ],
            cluster_authorized_operations=-2147483648,
        )

    # ------------------------------------------------------------------ Produce

    def _partition_error(self, topic: str, partition: int) -> ErrorCode:
        """Why this broker cannot serve (topic, partition) as leader."""
        topic_image = self.broker.image.topics.by_name.get(topic)
        if topic_image is None or partition not in topic_image.partitions:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return ErrorCode.NOT_LEADER_OR_FOLLOWER

    def _produce(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.ProduceResponse
        acks = request.acks
        request_id = self._defer()
        responses: dict[tuple[str, int], Any] = {}
        waiting: set[tuple[str, int]] = set()
        for topic_data in request.topic_data:
            for partition_data in topic_data.partition_data:
                key = (topic_data.name, partition_data.index)
                partition_response, required_offset = self._produce_partition(key, partition_data.records, acks, now_ms)
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
            self._produces[request_id] = _DelayedProduce(header, responses, waiting)
            for key in waiting:
                self._waiting_partitions[key] = self._waiting_partitions.get(key, 0) + 1
            return Deferred(request_id)
        return self._produce_response(responses)

    def _produce_partition(self, key: tuple[str, int], records: Any, acks: int, now_ms: int) -> tuple[Any, int | None]:
        response_class = messages.ProduceResponse
        partition_response = response_class.PartitionProduceResponse(
            index=key[1], error_code=ErrorCode.NONE, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1,
            record_errors=[], error_message=None,
        )
        hosted = self.broker.hosted(*key)
        if hosted is None or not hosted.replica.is_leader:
            partition_response.error_code = self._partition_error(*key)
            return partition_response, None
        if records is None:
            partition_response.error_code = ErrorCode.CORRUPT_MESSAGE
            return partition_response, None
        try:
            buffer = bytearray(records)
            check = hosted.producer_state.check_append([h for _, h in iter_batches(buffer)], now_ms)
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
            return partition_response, None
        if result.append_info is not None:
            hosted.producer_state.update(result.append_info.batch_headers)
        self.broker.dirty_partitions.add(key)
        partition_response.base_offset = result.first_offset
        partition_response.log_start_offset = result.log_start_offset
        if result.append_info is not None:
            partition_response.log_append_time_ms = result.append_info.log_append_time_ms
        return partition_response, result.required_offset

    @staticmethod
    def _produce_response(responses: dict[tuple[str, int], Any]) -> Any:
        response_class = messages.ProduceResponse
        by_topic: dict[str, list] = {}
        for (topic, _), partition_response in responses.items():
            by_topic.setdefault(topic, []).append(partition_response)
        return response_class(
            responses=[response_class.TopicProduceResponse(name=t, partition_responses=p) for t, p in by_topic.items()],
            throttle_time_ms=0,
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
            self._completed.append((request_id, delayed.header, self._produce_response(delayed.responses)))

    def _fail_waiting(self, key: tuple[str, int], error: ErrorCode) -> None:
        for request_id, delayed in list(self._produces.items()):
            if key in delayed.waiting:
                delayed.responses[key].error_code = error
                self._partition_answered(request_id, delayed, key)

    # ------------------------------------------------------------------ Fetch

    def _fetch(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response, size, has_error = self._read_fetch(header, request, now_ms)
        max_wait_ms = min(max(request.max_wait_ms, 0), FETCH_WAIT_MS_MAX)
        if max_wait_ms == 0 or size >= request.min_bytes or has_error:
            return response
        request_id = self._defer()
        partitions = frozenset((t.topic, p.partition) for t in request.topics for p in t.partitions)
        self._fetches[request_id] = _DelayedFetch(header, request, now_ms + max_wait_ms, partitions)
        return Deferred(request_id)

    def _complete_fetches(self, dirty: set[tuple[str, int]], now_ms: int) -> None:
        for request_id, delayed in list(self._fetches.items()):
            expired = now_ms >= delayed.deadline_ms
            if not expired and not (delayed.partitions & dirty):
                continue
            response, size, has_error = self._read_fetch(delayed.header, delayed.request, now_ms)
            if expired or size >= delayed.request.min_bytes or has_error:
                del self._fetches[request_id]
                self._completed.append((request_id, delayed.header, response))

    def _read_fetch(self, header: RequestHeader, request: Any, now_ms: int) -> tuple[Any, int, bool]:
        response_class = messages.FetchResponse
        remaining = request.max_bytes if header.api_version >= 3 else 2**31 - 1
        size, has_error = 0, False
        topics = []
        for fetch_topic in request.topics:
            partitions = []
            for fetch_partition in fetch_topic.partitions:
                data = self._read_fetch_partition(request, fetch_topic.topic, fetch_partition, remaining, now_ms)
                records_size = len(data.records) if data.records else 0
                remaining -= records_size
                size += records_size
                has_error = has_error or data.error_code != ErrorCode.NONE
                partitions.append(data)
            topics.append(response_class.FetchableTopicResponse(topic=fetch_topic.topic, partitions=partitions))
        response = response_class(throttle_time_ms=0, error_code=ErrorCode.NONE, session_id=0, responses=topics)
        return response, size, has_error

    def _read_fetch_partition(self, request: Any, topic: str, fetch_partition: Any, remaining: int, now_ms: int) -> Any:
        response_class = messages.FetchResponse
        data = response_class.PartitionData(
            partition_index=fetch_partition.partition, error_code=ErrorCode.NONE, high_watermark=-1,
            last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None, preferred_read_replica=-1,
            records=b"",
        )
        hosted = self.broker.hosted(topic, fetch_partition.partition)
        if hosted is None or not hosted.replica.is_leader:
            data.error_code = self._partition_error(topic, fetch_partition.partition)
            return data
        max_bytes = min(fetch_partition.partition_max_bytes, remaining)
        try:
            if request.replica_id >= 0:
                self._read_for_follower(hosted, request.replica_id, fetch_partition, max_bytes, data, now_ms)
            else:
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
        follower = replica.follower_states.get(replica_id)
        follower_log_end_offset = follower.log_end_offset if follower is not None else None
        result = replica.handle_follower_fetch(
            replica_id, fetch_partition.fetch_offset, None, now_ms, max(max_bytes, 1),
            current_leader_epoch=fetch_partition.current_leader_epoch,
            follower_log_start_offset=fetch_partition.log_start_offset,
        )
        records = result.records if max_bytes > 0 else b""
        self.broker.after_follower_fetch(hosted, result.isr_proposal)
        # Only a fetch that moved something can complete another waiting request. Marking the partition on
        # every read made a waiting follower fetch re-read itself at every poll, forever (each re-read
        # marked the partition again).
        follower = replica.follower_states.get(replica_id)
        if (replica.high_watermark != high_watermark or result.isr_proposal is not None
                or follower is None or follower.log_end_offset != follower_log_end_offset):
            self.broker.dirty_partitions.add((replica.topic, replica.partition))
        data.records = records
        data.high_watermark = result.high_watermark
        data.log_start_offset = result.log_start_offset
        data.last_stable_offset = result.high_watermark

    @staticmethod
    def _read_for_consumer(hosted: HostedPartition, request: Any, fetch_partition: Any, max_bytes: int, data: Any) -> None:
        isolation = IsolationLevel(request.isolation_level) if request.isolation_level in (0, 1) else IsolationLevel.READ_UNCOMMITTED
        result = hosted.replica.read_for_consumer(
            fetch_partition.fetch_offset, max(max_bytes, 1), isolation,
            current_leader_epoch=fetch_partition.current_leader_epoch,
        )
        data.records = result.records if max_bytes > 0 else b""
        data.high_watermark = result.high_watermark
        data.log_start_offset = result.log_start_offset
        data.last_stable_offset = result.last_stable_offset
        data.aborted_transactions = [] if isolation == IsolationLevel.READ_COMMITTED else None

    # ------------------------------------------------------------------ InitProducerId (idempotence only)

    def _init_producer_id(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        """A producer id for an idempotent producer (KIP-98). Transactions are not implemented yet: a
        transactional id is refused with UNSUPPORTED_VERSION and a message saying so."""
        response_class = messages.InitProducerIdResponse
        if request.transactional_id is not None:
            return response_class(throttle_time_ms=0, error_code=ErrorCode.UNSUPPORTED_VERSION,
                                  producer_id=-1, producer_epoch=-1)
        producer_id = self.broker.producer_ids.next_id()
        if producer_id is None:  # the next block is on its way from the controller
            return response_class(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                  producer_id=-1, producer_epoch=-1)
        return response_class(throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=producer_id, producer_epoch=0)

    # ------------------------------------------------------------------ ListOffsets, OffsetForLeaderEpoch

    def _list_offsets(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.ListOffsetsResponse
        topics = []
        for list_topic in request.topics:
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
        if hosted is None or not hosted.replica.is_leader:
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
        if timestamp == LIST_OFFSETS_EARLIEST:
            result.offset = hosted.log.log_start_offset
        elif timestamp == LIST_OFFSETS_LATEST:
            result.offset = bound
        elif timestamp < 0:
            result.error_code = ErrorCode.INVALID_REQUEST  # -3 (max timestamp) needs ListOffsets v7
        else:
            found = hosted.log.offset_for_timestamp(timestamp)
            if found is not None and found[0] < bound:
                result.offset, result.timestamp = found
        return result

    def _offset_for_leader_epoch(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.OffsetForLeaderEpochResponse
        topics = []
        for topic_request in request.topics:
            partitions = []
            for partition_request in topic_request.partitions:
                result = response_class.EpochEndOffset(
                    error_code=ErrorCode.NONE, partition=partition_request.partition, leader_epoch=-1, end_offset=-1
                )
                hosted = self.broker.hosted(topic_request.topic, partition_request.partition)
                if hosted is None or not hosted.replica.is_leader:
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

    # ------------------------------------------------------------------ DeleteRecords

    def _delete_records(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.DeleteRecordsResponse
        topics = []
        for topic_request in request.topics:
            partitions = []
            for partition_request in topic_request.partitions:
                result = response_class.DeleteRecordsPartitionResult(
                    partition_index=partition_request.partition_index, low_watermark=-1, error_code=ErrorCode.NONE
                )
                hosted = self.broker.hosted(topic_request.name, partition_request.partition_index)
                if hosted is None or not hosted.replica.is_leader:
                    result.error_code = self._partition_error(topic_request.name, partition_request.partition_index)
                else:
                    high_watermark = hosted.replica.high_watermark
                    offset = high_watermark if partition_request.offset == -1 else partition_request.offset
                    if not 0 <= offset <= high_watermark:
                        result.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                    else:
                        if offset > hosted.log.log_start_offset:
                            hosted.log.delete_records_before(offset)
                        result.low_watermark = hosted.log.log_start_offset
                        self.broker.dirty_partitions.add((topic_request.name, partition_request.partition_index))
                partitions.append(result)
            topics.append(response_class.DeleteRecordsTopicResult(name=topic_request.name, partitions=partitions))
        return response_class(throttle_time_ms=0, topics=topics)

    # ------------------------------------------------------------------ requests forwarded to the controller

    def _forward(self, header: RequestHeader, controller_requests: list[Any], build: Callable[[list[Any]], Any]) -> Any:
        """Send `controller_requests` to the active controller; answer with build(results) once all are back
        (each result a controller response or a KafkaError)."""
        if not controller_requests:
            return build([])
        request_id = self._defer()
        delayed = _DelayedControllerReply(header, expected=len(controller_requests), build=build)
        self._controller_replies[request_id] = delayed
        for index, controller_request in enumerate(controller_requests):
            delayed.results.append(None)

            def on_response(response: Any, now_ms: int, index: int = index) -> None:
                delayed.results[index] = response
                delayed.expected -= 1
                if delayed.expected == 0:
                    self._controller_replies.pop(request_id, None)
                    self._completed.append((request_id, header, build(delayed.results)))

            self.broker.call_controller(controller_request, on_response)
        return Deferred(request_id)

    def _create_topics(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        topics = tuple(
            CreatableTopic(
                name=topic.name,
                num_partitions=topic.num_partitions,
                replication_factor=topic.replication_factor,
                assignments=tuple(
                    ReplicaAssignment(partition=a.partition_index, broker_ids=tuple(a.broker_ids))
                    for a in topic.assignments
                ) or None,
                configs=tuple(ConfigEntry(name=c.name, value=c.value) for c in topic.configs),
            )
            for topic in request.topics
        )
        names = [topic.name for topic in request.topics]
        controller_request = ControllerCreateTopics(topics=topics, validate_only=bool(request.validate_only))

        def build(results: list[Any]) -> Any:
            response_class = messages.CreateTopicsResponse
            by_name = _results_by_name(results[0], names, "topics")
            return response_class(
                throttle_time_ms=0,
                topics=[
                    response_class.CreatableTopicResult(name=name, error_code=code, error_message=message or None)
                    for name, (code, message) in by_name.items()
                ],
            )

        return self._forward(header, [controller_request] if topics else [], build)

    def _delete_topics(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        names = list(request.topic_names)

        def build(results: list[Any]) -> Any:
            response_class = messages.DeleteTopicsResponse
            by_name = _results_by_name(results[0] if results else None, names, "topics")
            return response_class(
                throttle_time_ms=0,
                responses=[response_class.DeletableTopicResult(name=n, error_code=c) for n, (c, _) in by_name.items()],
            )

        return self._forward(header, [ControllerDeleteTopics(names=tuple(names))] if names else [], build)

    def _create_partitions(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        controller_requests = [
            ControllerCreatePartitions(
                topic=topic.name,
                new_total_count=topic.count,
                assignments=None if topic.assignments is None else tuple(
                    ReplicaAssignment(partition=-1, broker_ids=tuple(a.broker_ids)) for a in topic.assignments
                ),
                validate_only=bool(request.validate_only),
            )
            for topic in request.topics
        ]
        names = [topic.name for topic in request.topics]

        def build(results: list[Any]) -> Any:
            response_class = messages.CreatePartitionsResponse
            entries = []
            for name, result in zip(names, results):
                code, message = _code_and_message(result)
                entries.append(response_class.CreatePartitionsTopicResult(name=name, error_code=code,
                                                                         error_message=message or None))
            return response_class(throttle_time_ms=0, results=entries)

        return self._forward(header, controller_requests, build)

    def _alter_configs(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        return self._forward_config_change(header, request, incremental=False)

    def _incremental_alter_configs(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        return self._forward_config_change(header, request, incremental=True)

    def _forward_config_change(self, header: RequestHeader, request: Any, incremental: bool) -> Any:
        resources = tuple(
            ConfigResource(
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=tuple(
                    AlterableConfig(name=c.name, value=c.value, op=c.config_operation if incremental else 0)
                    for c in resource.configs
                ),
            )
            for resource in request.resources
        )
        request_type = ControllerIncrementalAlterConfigs if incremental else ControllerAlterConfigs
        controller_request = request_type(resources=resources, validate_only=bool(request.validate_only))
        response_type = messages.IncrementalAlterConfigsResponse if incremental else messages.AlterConfigsResponse
        keys = [(r.resource_type, r.resource_name) for r in request.resources]

        def build(results: list[Any]) -> Any:
            entries = []
            result = results[0] if results else None
            by_key = {}
            if result is not None and not isinstance(result, KafkaError):
                by_key = {(r.resource_type, r.resource_name): (r.error_code, r.message) for r in result.resources}
            for key in keys:
                code, message = by_key[key] if key in by_key else _code_and_message(result)
                entries.append(response_type.AlterConfigsResourceResponse(
                    error_code=code, error_message=message or None, resource_type=key[0], resource_name=key[1]))
            return response_type(throttle_time_ms=0, responses=entries)

        return self._forward(header, [controller_request] if resources else [], build)

    # ------------------------------------------------------------------ DescribeConfigs

    def _describe_configs(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.DescribeConfigsResponse
        results = []
        for resource in request.resources:
            result = response_class.DescribeConfigsResult(
                error_code=ErrorCode.NONE, error_message=None, resource_type=resource.resource_type,
                resource_name=resource.resource_name, configs=[],
            )
            if resource.resource_type == RESOURCE_TYPE_TOPIC:
                entries = self._topic_config_entries(resource.resource_name)
            elif resource.resource_type == RESOURCE_TYPE_BROKER:
                entries = self._broker_config_entries()
            else:
                entries = None
                result.error_code = ErrorCode.INVALID_REQUEST
                result.error_message = f"resource type {resource.resource_type} is not supported"
            if entries is None and result.error_code == ErrorCode.NONE:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                result.error_message = f"topic {resource.resource_name!r} does not exist"
            wanted = set(resource.configuration_keys) if resource.configuration_keys else None
            for name, (value, is_dynamic) in sorted((entries or {}).items()):
                if wanted is not None and name not in wanted:
                    continue
                result.configs.append(response_class.DescribeConfigsResourceResult(
                    name=name, value=value, read_only=False,
                    config_source=CONFIG_SOURCE_DYNAMIC_TOPIC if is_dynamic else CONFIG_SOURCE_DEFAULT,
                    is_default=not is_dynamic, is_sensitive=False, synonyms=[],
                ))
            results.append(result)
        return response_class(throttle_time_ms=0, results=results)

    def _topic_config_entries(self, topic: str) -> dict[str, tuple[str, bool]] | None:
        if topic not in self.broker.image.topics.by_name:
            return None
        entries = {name: (value, False) for name, value in LogConfig().to_topic_configs().items()}
        entries["min.insync.replicas"] = (str(self.broker.default_min_insync_replicas), False)
        entries["unclean.leader.election.enable"] = ("false", False)
        entries["compression.type"] = ("producer", False)
        for name, value in self.broker.image.configs.get(ConfigResourceType.TOPIC, topic).items():
            entries[name] = (value, True)
        return entries

    def _broker_config_entries(self) -> dict[str, tuple[str, bool]]:
        return {
            "broker.id": (str(self.broker.node_id), False),
            "auto.create.topics.enable": (str(self.auto_create_topics_enable).lower(), False),
            "min.insync.replicas": (str(self.broker.default_min_insync_replicas), False),
            "replica.lag.time.max.ms": (str(self.broker.replica_lag_time_max_ms), False),
        }


def _leader_epoch_error(requested: int, current: int) -> ErrorCode | None:
    if requested is None or requested < 0 or requested == current:
        return None
    return ErrorCode.FENCED_LEADER_EPOCH if requested < current else ErrorCode.UNKNOWN_LEADER_EPOCH


def _code_and_message(result: Any) -> tuple[int, str]:
    if result is None:
        return ErrorCode.REQUEST_TIMED_OUT, "no answer from the controller"
    if isinstance(result, KafkaError):
        return result.code, result.message
    return result.error_code, getattr(result, "message", "")


def _results_by_name(result: Any, names: list[str], attribute: str) -> dict[str, tuple[int, str]]:
    """Per-name (error code, message) from a controller response, or the response's error for every name."""
    if result is None or isinstance(result, KafkaError):
        code, message = _code_and_message(result)
        return {name: (code, message) for name in names}
    found = {entry.name: (entry.error_code, entry.message) for entry in getattr(result, attribute)}
    return {name: found.get(name, (ErrorCode.UNKNOWN_SERVER_ERROR, "no result")) for name in names}
