"""Cluster APIs (sans-IO): ApiVersions (exactly what the registry serves), Metadata (with auto topic creation
forwarded to the controller) and DescribeCluster, answered from the metadata image; DescribeLogDirs and
AlterReplicaLogDirs, answered from this broker's replicas and its storage.

Auto-creation: a Metadata request naming a missing topic sends the controller one CreateTopics for it (one at a
time per topic) and answers LEADER_NOT_AVAILABLE, which clients retry. When the controller refuses the topic
(say INVALID_REPLICATION_FACTOR: a broker of three is down and the default replication factor is 3), the refusal
is logged (`topic_auto_create_refused`, once per topic and error). Metadata requests for that topic go on
answering LEADER_NOT_AVAILABLE for AUTO_CREATE_REFUSAL_GRACE_MS after the first refusal, long enough for a
broker to restart, then the refusal's error code while refusals keep coming (a refusal older than the grace is
forgotten: the next request starts afresh), as Kafka answered before KRaft: a client that reports
metadata errors then says why the topic never appears (the Java client logs it; kafka-python fails the send
with it) instead of timing out on "failed to update metadata" (Kafka 3.9 answers UNKNOWN_TOPIC_OR_PARTITION and
logs the refusal only at debug level). Each of those requests asks the controller again, so the topic is
created once the cause is gone. At most AUTO_CREATE_REFUSALS_MAX refusals are remembered, the oldest forgotten
first.

A node starting up (its broker not yet unfenced, `BrokerCore.serving`) that knows no active broker to name
holds a Metadata or DescribeCluster request until it does, or for UNREADY_HOLD_MS at most, then answers what it
knows (at most UNREADY_HELD_MAX requests held; past that they are answered at once). Kafka's broker accepts no
connection before it has caught up with the metadata log, so its clients never see a cluster of no brokers;
a node here listens from its start, and an answer with no brokers and no topics is one librdkafka drops as
partial, after which its admin calls wait for a controller it never looks up again (`CreateTopics` from an
`AdminClient` made as the cluster started hung until its timeout).

Authorization (Kafka's): Metadata lists only the topics the principal may DESCRIBE (a named topic it may not
gets TOPIC_AUTHORIZATION_FAILED), auto-creation needs CREATE on the cluster or the topic, DescribeCluster
and DescribeLogDirs need DESCRIBE on the cluster, AlterReplicaLogDirs ALTER on it. Brokers are advertised at
the endpoint of the listener the request came in on.

A node keeps its replicas in one log directory (the `logs` directory of its data_dir), so AlterReplicaLogDirs
moves nothing: a replica asked into that directory is already there (NONE, as Kafka answers a move to the
current directory), and any other path is LOG_DIR_NOT_FOUND, as Kafka answers a directory not in its
log.dirs."""

from __future__ import annotations

import dataclasses
import uuid

from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from broker.apis import Deferred
from broker.core import LOGS_DIRECTORY
from metadata.naming import validate_topic_name
from metadata.requests import CreatableTopic, CreateTopicsRequest as ControllerCreateTopics
from net.protocol import messages
from net.protocol.codec import ApiKey, RequestHeader, api_versions_response
from net.protocol.types import NULL_UUID
from partitions.errors import ErrorCode, KafkaError
from partitions.storage import StorageError
from security.acl import AclOperation as Op, ResourceType

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

    from broker.apis import KafkaApis
    from broker.core import TopicPartition
    from security.session import Session

# KIP-430: the operations a principal may perform on a resource, as a bitfield of Kafka's AclOperation codes
# (READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10,
# ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12). With no authorizer every operation that applies to the resource type
# is allowed, which is what Kafka answers then; AUTHORIZED_OPERATIONS_OMITTED when the client did not ask.
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
TOPIC_OPERATIONS = sum(1 << code for code in (3, 4, 5, 6, 7, 8, 10, 11))
DESCRIBE_TOPIC_PARTITIONS_MAX = 2000  # Kafka's max.request.partition.size.limit: partitions per answer at most
CLUSTER_OPERATIONS = sum(1 << code for code in (5, 7, 8, 9, 10, 11, 12))
GROUP_OPERATIONS = sum(1 << code for code in (3, 6, 8))
ENDPOINT_TYPE_BROKER, ENDPOINT_TYPE_CONTROLLER = 1, 2  # DescribeCluster v1+ (KIP-919)
FUTURE_LOG_DIR_NAME_MAX = 255  # Kafka refuses a move whose future log directory name would be longer (KAFKA-4893)
AUTO_CREATE_REFUSALS_MAX = 1000  # topics whose last auto-creation the controller refused, remembered at most
AUTO_CREATE_REFUSAL_GRACE_MS = 15_000  # refused this long before Metadata answers the refusal's error code
UNREADY_HOLD_MS = 5_000  # a Metadata or DescribeCluster request waits this long at most for a broker to name
UNREADY_HELD_MAX = 1_000  # requests held so at most


class _Held(NamedTuple):
    """A Metadata or DescribeCluster request held while the node knows no broker to name."""

    deadline_ms: int
    request_id: int
    header: RequestHeader
    request: Any
    session: "Session"
    handler: Callable[[RequestHeader, Any, int], Any]


class ClusterApis:
    """ApiVersions, Metadata, DescribeCluster, DescribeLogDirs (see the module docstring)."""

    def __init__(self, apis: "KafkaApis") -> None:
        self.apis = apis
        self.broker = apis.broker
        self._auto_create_requested: set[str] = set()
        # topic -> (the error code of the controller's last refusal, when the refusals began, when the last came)
        self._auto_create_refusals: dict[str, tuple[int, int, int]] = {}
        self._held: list[_Held] = []  # oldest first, so deadlines ascend

    def api_handlers(self):
        return [
            (ApiKey.API_VERSIONS, 0, 4, self._api_versions),
            (ApiKey.METADATA, 0, 12, self._held_until_ready(self._metadata)),
            (ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, 0, self._describe_topic_partitions),
            (ApiKey.DESCRIBE_CLUSTER, 0, 2, self._held_until_ready(self._describe_cluster)),
            (ApiKey.DESCRIBE_LOG_DIRS, 0, 4, self._describe_log_dirs),
            (ApiKey.ALTER_REPLICA_LOG_DIRS, 0, 2, self._alter_replica_log_dirs),
        ]

    def poll(self, now_ms: int, changed: AbstractSet[TopicPartition]) -> None:
        """Answer the held requests that now have a broker to name, or whose time is up."""
        if not self._held:
            return
        apis, kept = self.apis, []
        current = apis.session
        try:
            for held in self._held:
                apis.session = held.session  # the answer names brokers at the endpoints of the request's listener
                if now_ms >= held.deadline_ms or not self._unready():
                    apis.answer_deferred(held.request_id, held.header,
                                         lambda held=held: held.handler(held.header, held.request, now_ms))
                else:
                    kept.append(held)
        finally:
            apis.session = current
        self._held = kept

    def next_deadline_ms(self) -> int | None:
        return self._held[0].deadline_ms if self._held else None

    def _unready(self) -> bool:
        """This node is not yet unfenced and knows no active broker to name (at the current request's listener)."""
        return not self.broker.serving and not self._active_brokers()

    def _held_until_ready(self, handler: Callable[[RequestHeader, Any, int], Any]) -> Callable[[RequestHeader, Any, int], Any]:
        """`handler`, answered at once unless the node is unready (see the module docstring)."""
        def hold_or_handle(header: RequestHeader, request: Any, now_ms: int) -> Any:
            if len(self._held) >= UNREADY_HELD_MAX or not self._unready():
                return handler(header, request, now_ms)
            request_id = self.apis.defer()
            self._held.append(_Held(now_ms + UNREADY_HOLD_MS, request_id, header, request, self.apis.session, handler))
            return Deferred(request_id)
        return hold_or_handle

    def _api_versions(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        """Before v4 a supported feature whose lowest level is 0 is left out: clients before Kafka 3.9 cannot
        read such a range (KAFKA-17011; Kafka's ApiVersionsResponse leaves them out so too)."""
        features = self.apis.features()
        if features is not None and header.api_version < 4:
            features = dataclasses.replace(features, supported={
                name: levels for name, levels in features.supported.items() if levels[0] != 0})
        return api_versions_response(ErrorCode.NONE, self.apis.supported_apis, features=features)

    def _active_brokers(self, include_fenced: bool = False) -> list[tuple[Any, str, int]]:
        """(registration, host, port) of each active broker (and each fenced one with `include_fenced`), at the
        endpoint of the request's listener."""
        active = []
        for b in sorted(self.broker.image.cluster.brokers.values(), key=lambda b: b.broker_id):
            if (include_fenced or not b.fenced) and "broker" in b.roles:
                endpoint = self.apis.advertised_endpoint(b)
                if endpoint is not None:
                    active.append((b, *endpoint))
        return active

    def _active_broker_ids(self) -> set[int]:
        """The brokers a partition's leader or replicas may be on right now (not fenced; a leader elsewhere is
        answered -1, a replica elsewhere offline)."""
        return {b.broker_id for b in self.broker.image.cluster.brokers.values() if not b.fenced and "broker" in b.roles}

    @staticmethod
    def _missing_topic_code(name: str) -> ErrorCode:
        """The error of a topic the image does not hold: INVALID_TOPIC_EXCEPTION (or another naming error) for
        a name no topic may have, else UNKNOWN_TOPIC_OR_PARTITION."""
        try:
            validate_topic_name(name)
        except KafkaError as error:
            return error.code
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    def _operations(self, resource_type: ResourceType, name: str, default: int) -> int:
        bits = self.apis.authorized_operations(resource_type, name)
        return default if bits is None else bits

    def _metadata(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.MetadataResponse
        image = self.broker.image
        brokers = [response_class.MetadataResponseBroker(node_id=b.broker_id, host=host, port=port, rack=b.rack)
                   for b, host, port in self._active_brokers()]
        if request.topics is None or (header.api_version == 0 and not request.topics):
            names = [name for name in sorted(image.topics.by_name) if self.apis.authorize(Op.DESCRIBE, ResourceType.TOPIC, name)]
        else:
            names = [topic.name for topic in request.topics]
        allow_auto_create = self.apis.auto_create_topics_enable and (header.api_version < 4 or request.allow_auto_topic_creation)
        topics = []
        for index, name in enumerate(names):
            if name is None:  # v10+: a topic asked for by its id (v12+)
                topics.append(self._metadata_topic_by_id(header.api_version, request.topics[index].topic_id, now_ms))
            else:
                topics.append(self._metadata_topic(name, allow_auto_create and request.topics is not None, now_ms))
        if getattr(request, "include_topic_authorized_operations", False):
            for topic in topics:
                if topic.error_code == ErrorCode.NONE:
                    topic.topic_authorized_operations = self._operations(ResourceType.TOPIC, topic.name, TOPIC_OPERATIONS)
        return response_class(
            throttle_time_ms=0,
            brokers=brokers,
            cluster_id=self.apis.cluster_id,
            controller_id=self.apis.controller_id(),
            topics=topics,
            cluster_authorized_operations=self._cluster_operations()
            if getattr(request, "include_cluster_authorized_operations", False) else AUTHORIZED_OPERATIONS_OMITTED,
        )

    def _describe_topic_partitions(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        """KIP-966, as Kafka's DescribeTopicPartitionsRequestHandler: the named topics (every topic the principal
        may describe when none is named) from the cursor on, in name order, at most ResponsePartitionLimit
        partitions (1-2,000) per answer, and NextCursor where the next answer starts. A named topic the principal
        may not describe answers TOPIC_AUTHORIZATION_FAILED without its id, an unknown one
        UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an invalid name). A cursor on a topic that is not
        named, or on a negative partition, makes every named topic INVALID_REQUEST. A leader that is not an
        active broker is -1; Flotilla keeps no eligible leader replicas (KIP-966's ELR), so those lists are empty."""
        response_class = messages.DescribeTopicPartitionsResponse
        image = self.broker.image
        cursor = request.cursor
        cursor_topic = cursor.topic_name if cursor is not None else ""
        every_topic = not request.topics
        names = set(image.topics.by_name) if every_topic else {topic.name for topic in request.topics}
        names = {name for name in names if name >= cursor_topic}
        if cursor is not None and (cursor.partition_index < 0 or (not every_topic and cursor.topic_name not in names)):
            return response_class(throttle_time_ms=0, topics=[
                response_class.DescribeTopicPartitionsResponseTopic(
                    error_code=ErrorCode.INVALID_REQUEST, name=topic.name, topic_id=NULL_UUID, partitions=[])
                for topic in request.topics])
        refused, topics, next_cursor = [], [], None
        remaining = max(min(DESCRIBE_TOPIC_PARTITIONS_MAX, request.response_partition_limit), 1)
        active = self._active_broker_ids()
        for name in sorted(names):
            if not self.apis.authorize(Op.DESCRIBE, ResourceType.TOPIC, name):
                if not every_topic:  # (nothing tells that the topic exists)
                    refused.append(response_class.DescribeTopicPartitionsResponseTopic(
                        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=NULL_UUID,
                        partitions=[]))
                continue
            if remaining == 0:
                next_cursor = response_class.Cursor(topic_name=name, partition_index=0)
                break
            topic = image.topics.by_name.get(name)
            if topic is None:
                if not every_topic:
                    topics.append(response_class.DescribeTopicPartitionsResponseTopic(
                        error_code=self._missing_topic_code(name), name=name, topic_id=NULL_UUID,
                        is_internal=name.startswith("__"), partitions=[]))
                continue
            start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
            end = min(len(topic.partitions), start + remaining)
            partitions = [
                response_class.DescribeTopicPartitionsResponsePartition(
                    error_code=ErrorCode.NONE, partition_index=index,
                    leader_id=state.leader if state.leader in active else -1, leader_epoch=state.leader_epoch,
                    replica_nodes=list(state.replicas), isr_nodes=list(state.isr), eligible_leader_replicas=[],
                    last_known_elr=[], offline_replicas=[r for r in state.replicas if r not in active])
                for index in range(start, end) if (state := topic.partitions.get(index)) is not None]
            topics.append(response_class.DescribeTopicPartitionsResponseTopic(
                error_code=ErrorCode.NONE, name=name, topic_id=uuid.UUID(bytes=topic.topic_id),
                is_internal=name.startswith("__"), partitions=partitions,
                topic_authorized_operations=self._operations(ResourceType.TOPIC, name, TOPIC_OPERATIONS)))
            if end < len(topic.partitions):
                next_cursor = response_class.Cursor(topic_name=name, partition_index=end)
                break
            remaining -= len(partitions)
        return response_class(throttle_time_ms=0, topics=topics + refused, next_cursor=next_cursor)

    def _cluster_operations(self) -> int:
        from security.acl import CLUSTER_RESOURCE_NAME

        return self._operations(ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME, CLUSTER_OPERATIONS)

    def _metadata_topic(self, name: str, auto_create: bool, now_ms: int) -> Any:
        response_class = messages.MetadataResponse
        topic = self.broker.image.topics.by_name.get(name)
        if not self.apis.authorize(Op.DESCRIBE, ResourceType.TOPIC, name):
            return response_class.MetadataResponseTopic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name,
                                                        partitions=[])
        if topic is None:
            code = self._missing_topic_code(name)
            if code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:  # a name no topic may have
                return response_class.MetadataResponseTopic(error_code=code, name=name, partitions=[])
            if auto_create and not (self.apis.authorize_cluster(Op.CREATE)
                                    or self.apis.authorize(Op.CREATE, ResourceType.TOPIC, name)):
                return response_class.MetadataResponseTopic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                                            name=name, partitions=[])
            if auto_create:
                self._auto_create(name)
                code, since_ms, last_ms = self._auto_create_refusals.get(name, (ErrorCode.NONE, now_ms, now_ms))
                if not since_ms + AUTO_CREATE_REFUSAL_GRACE_MS <= now_ms <= last_ms + AUTO_CREATE_REFUSAL_GRACE_MS:
                    code = ErrorCode.LEADER_NOT_AVAILABLE
                return response_class.MetadataResponseTopic(error_code=code, name=name, partitions=[])
            return response_class.MetadataResponseTopic(error_code=code, name=name, partitions=[])
        if self._auto_create_refusals:  # created another way since (a topic deleted later starts afresh)
            self._auto_create_refusals.pop(name, None)
        active = self._active_broker_ids()
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
            error_code=ErrorCode.NONE, name=name, topic_id=uuid.UUID(bytes=topic.topic_id),
            is_internal=name.startswith("__"), partitions=partitions
        )

    def _metadata_topic_by_id(self, version: int, topic_id: uuid.UUID, now_ms: int) -> Any:
        """Kafka's rules for a topic without a name: its id is looked up from v12; before that the request
        is invalid (names are required). An unknown id, or one the principal may not describe, is
        UNKNOWN_TOPIC_ID: the error does not tell that the topic exists."""
        response_class = messages.MetadataResponse
        if version < 12:
            return response_class.MetadataResponseTopic(error_code=ErrorCode.INVALID_REQUEST, name="",  # not nullable
                                                        topic_id=topic_id, partitions=[])
        topic = self.broker.image.topics.by_id.get(topic_id.bytes)
        if topic is None or not self.apis.authorize(Op.DESCRIBE, ResourceType.TOPIC, topic.name):
            return response_class.MetadataResponseTopic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None,
                                                        topic_id=topic_id, partitions=[])
        return self._metadata_topic(topic.name, False, now_ms)

    def _auto_create(self, name: str) -> None:
        if name in self._auto_create_requested:
            return
        self._auto_create_requested.add(name)

        def on_response(response: Any, now_ms: int) -> None:
            self._auto_create_requested.discard(name)
            if isinstance(response, KafkaError) or len(response.topics) != 1:  # no answer: ask again, as before
                return
            (result,) = response.topics
            if result.error_code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS, ErrorCode.REQUEST_TIMED_OUT):
                self._auto_create_refusals.pop(name, None)  # created, or not refused (Kafka's ZK-era mapping)
                return
            code, since_ms, last_ms = self._auto_create_refusals.pop(name, (None, now_ms, now_ms))
            if now_ms - last_ms > AUTO_CREATE_REFUSAL_GRACE_MS:  # an old refusal: the refusals begin afresh
                code, since_ms = None, now_ms
            if code != result.error_code:
                self.broker.notices.append(("topic_auto_create_refused", {
                    "topic": name, "error": ErrorCode(result.error_code).name, "reason": result.message}))
            self._auto_create_refusals[name] = (result.error_code, since_ms, now_ms)  # the newest last
            if len(self._auto_create_refusals) > AUTO_CREATE_REFUSALS_MAX:
                del self._auto_create_refusals[next(iter(self._auto_create_refusals))]

        self.broker.call_controller(ControllerCreateTopics(topics=(CreatableTopic(name=name),)), on_response)

    def _describe_cluster(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        """DescribeCluster: the active brokers at this listener; from v1 the endpoint type asked for (KIP-919: a
        broker describes brokers, so asking it for controllers answers MISMATCHED_ENDPOINT_TYPE, an unknown type
        UNSUPPORTED_ENDPOINT_TYPE, v0 INVALID_REQUEST for either, as Kafka's brokers answer); from v2 the fenced
        brokers too when asked, each with IsFenced (KIP-1073)."""
        response_class = messages.DescribeClusterResponse
        if request.endpoint_type != ENDPOINT_TYPE_BROKER:
            known = request.endpoint_type == ENDPOINT_TYPE_CONTROLLER
            code = ErrorCode.INVALID_REQUEST if header.api_version == 0 else (
                ErrorCode.MISMATCHED_ENDPOINT_TYPE if known else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE)
            message = ("The request was sent to an endpoint of type brokers, but it wanted controllers" if known
                       else f"Unsupported endpoint type {request.endpoint_type}")
            return response_class(throttle_time_ms=0, error_code=code, error_message=message, cluster_id="",
                                  brokers=[], cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
        if not self.apis.authorize_cluster(Op.DESCRIBE):
            return response_class(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                  error_message="Cluster authorization failed.", cluster_id=self.apis.cluster_id,
                                  controller_id=-1, brokers=[], cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
        brokers = [response_class.DescribeClusterBroker(broker_id=b.broker_id, host=host, port=port, rack=b.rack,
                                                        is_fenced=b.fenced)
                   for b, host, port in self._active_brokers(include_fenced=request.include_fenced_brokers)]
        return response_class(
            throttle_time_ms=0,
            error_code=ErrorCode.NONE,
            error_message=None,
            endpoint_type=ENDPOINT_TYPE_BROKER,
            cluster_id=self.apis.cluster_id,
            controller_id=self.apis.controller_id(),
            brokers=brokers,
            cluster_authorized_operations=self._cluster_operations()
            if request.include_cluster_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED,
        )

    def _describe_log_dirs(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        """DescribeLogDirs: the broker's one log directory with the replicas it holds (all of them, or those of
        the partitions asked for), each with its size in bytes and its offset lag, which is the high watermark
        minus the log end offset floored at 0, as Kafka reports a current (not future) replica; from v4 the
        size of the directory's volume and the bytes still usable on it (KIP-827). Without DESCRIBE on the
        cluster: no directory, and from v3 CLUSTER_AUTHORIZATION_FAILED, as Kafka answers."""
        response_class = messages.DescribeLogDirsResponse
        if not self.apis.authorize_cluster(Op.DESCRIBE):
            return response_class(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=[])
        hosted = self.broker.partitions
        if request.topics is None:
            keys = sorted(hosted)
        else:
            keys = sorted({(t.topic, p) for t in request.topics for p in t.partitions} & hosted.keys())
        by_topic: dict[str, list] = {}
        for topic, partition in keys:
            here = hosted[(topic, partition)]
            by_topic.setdefault(topic, []).append(response_class.DescribeLogDirsPartition(
                partition_index=partition, partition_size=here.log.size_bytes,
                offset_lag=max(0, here.replica.high_watermark - here.log.log_end_offset), is_future_key=False))
        topics = [response_class.DescribeLogDirsTopic(name=name, partitions=partitions)
                  for name, partitions in by_topic.items()]
        try:
            volume = self.broker.storage.volume(LOGS_DIRECTORY)
        except StorageError:
            return response_class(throttle_time_ms=0, error_code=ErrorCode.NONE, results=[
                response_class.DescribeLogDirsResult(error_code=ErrorCode.KAFKA_STORAGE_ERROR, log_dir=LOGS_DIRECTORY,
                                                     topics=[])])
        return response_class(throttle_time_ms=0, error_code=ErrorCode.NONE, results=[
            response_class.DescribeLogDirsResult(error_code=ErrorCode.NONE, log_dir=volume.path, topics=topics,
                                                 total_bytes=volume.total_bytes, usable_bytes=volume.usable_bytes)])

    def _alter_replica_log_dirs(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        """Kafka's ReplicaManager.alterReplicaLogDirs for a broker of one log directory, each partition in turn
        (a partition named under two paths takes the last): a topic name too long for a future log's directory
        INVALID_TOPIC_EXCEPTION, a path that is not this node's log directory LOG_DIR_NOT_FOUND, its volume
        unreadable KAFKA_STORAGE_ERROR, a partition this broker holds no replica of REPLICA_NOT_AVAILABLE (or
        UNKNOWN_TOPIC_OR_PARTITION when the topic is unknown), and else NONE: the replica is in that directory."""
        response_class = messages.AlterReplicaLogDirsResponse
        destinations: dict[tuple[str, int], str] = {}
        for directory in request.dirs:
            for topic in directory.topics:
                for partition in topic.partitions:
                    destinations[(topic.name, partition)] = directory.path
        if not self.apis.authorize_cluster(Op.ALTER):
            errors = dict.fromkeys(destinations, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        else:
            try:
                own = self.broker.storage.volume(LOGS_DIRECTORY).path
            except StorageError:
                own = None
            errors = {key: self._log_dir_error(key, path, own) for key, path in destinations.items()}
        by_topic: dict[str, list] = {}
        for (topic, partition), code in errors.items():
            by_topic.setdefault(topic, []).append(
                response_class.AlterReplicaLogDirPartitionResult(partition_index=partition, error_code=code))
        return response_class(throttle_time_ms=0, results=[
            response_class.AlterReplicaLogDirTopicResult(topic_name=name, partitions=partitions)
            for name, partitions in by_topic.items()])

    def _log_dir_error(self, key: tuple[str, int], path: str, own: str | None) -> ErrorCode:
        topic, partition = key
        if len(f"{topic}-{partition}.{NULL_UUID.hex}-future") > FUTURE_LOG_DIR_NAME_MAX:
            return ErrorCode.INVALID_TOPIC_EXCEPTION
        if own is None:
            return ErrorCode.KAFKA_STORAGE_ERROR
        if path != own:
            return ErrorCode.LOG_DIR_NOT_FOUND
        if key in self.broker.partitions:
            return ErrorCode.NONE
        topic_image = self.broker.image.topics.by_name.get(topic)
        known = topic_image is not None and partition in topic_image.partitions
        return ErrorCode.REPLICA_NOT_AVAILABLE if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
