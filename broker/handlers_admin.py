"""Topic and config administration (sans-IO): CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs,
IncrementalAlterConfigs (forwarded to the active controller, answered when it answers) and DescribeConfigs
(answered from the metadata image), in Kafka 3.9's versions.

What the versions change (Kafka's JSON specs and its ControllerApis): CreateTopics v5 answers each created (or
validated) topic's partition count, replication factor and every config with its source, when the principal
may DESCRIBE_CONFIGS the topic (else TopicConfigErrorCode says TOPIC_AUTHORIZATION_FAILED), v7 its topic id;
DeleteTopics v5 answers an error message, v6 takes topics by name or by id (an id is looked up in this
broker's metadata image: one it does not know is UNKNOWN_TOPIC_ID) and answers their ids; DescribeConfigs v3
answers each config's type (documentation is null: Flotilla has none). CreateTopics v6+, DeleteTopics v5+ and
CreatePartitions v3+ are KIP-599's strict versions: a client whose controller mutation quota is already
exceeded is refused with THROTTLING_QUOTA_EXCEEDED (nothing is forwarded) instead of being only throttled.

Authorization (Kafka's): CreateTopics needs CREATE on the cluster or the topic, DeleteTopics DELETE,
CreatePartitions ALTER, AlterConfigs ALTER_CONFIGS and DescribeConfigs DESCRIBE_CONFIGS on the topic (on the
cluster for broker resources). Refused resources answer TOPIC_AUTHORIZATION_FAILED (CLUSTER_AUTHORIZATION_FAILED
for brokers) and are not forwarded; the rest of the request is."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from broker.apis import Deferred
from broker.quotas import CONTROLLER_MUTATION
from metadata.configs import BROKER_TO_TOPIC_CONFIG
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
    code_and_message,
)
from net.protocol import messages
from net.protocol.codec import ApiKey, RequestHeader
from net.protocol.types import NULL_UUID
from partitions.errors import ErrorCode, KafkaError
from broker import config_sources
from security.acl import AclOperation as Op, ResourceType

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

    from broker.apis import KafkaApis
    from broker.core import TopicPartition

RESOURCE_TYPE_TOPIC = 2
RESOURCE_TYPE_BROKER = 4
RESOURCE_TYPE_CLIENT_METRICS = 16  # a client telemetry subscription (KIP-714)

# KIP-599: the first version of each API whose controller mutation quota is strict (Kafka's
# strictSinceVersion): an exceeded quota refuses the mutations; older versions accept them and throttle.
STRICT_MUTATION_QUOTA_SINCE_VERSION = {ApiKey.CREATE_TOPICS: 6, ApiKey.DELETE_TOPICS: 5, ApiKey.CREATE_PARTITIONS: 3}
QUOTA_EXCEEDED_MESSAGE = "The throttling quota has been exceeded."
AUTHORIZATION_FAILED_MESSAGE = "Authorization failed."

# DescribeConfigs v3+ ConfigType ids (Kafka's DescribeConfigsResponse.ConfigType) and the type of each config
# Flotilla describes, as Kafka 3.9's LogConfig and KafkaConfig define them; a broker-level name
# (`log.retention.ms`) has the type of its topic config (`retention.ms`). Others answer UNKNOWN (0).
CONFIG_TYPE_UNKNOWN, CONFIG_TYPE_BOOLEAN, CONFIG_TYPE_STRING, CONFIG_TYPE_INT = 0, 1, 2, 3
CONFIG_TYPE_LONG, CONFIG_TYPE_DOUBLE, CONFIG_TYPE_LIST = 5, 6, 7
CLIENT_METRICS_CONFIG_TYPES = {"metrics": CONFIG_TYPE_LIST, "interval.ms": CONFIG_TYPE_INT, "match": CONFIG_TYPE_LIST}
TOPIC_CONFIG_TYPES = {
    **dict.fromkeys(("delete.retention.ms", "file.delete.delay.ms", "flush.messages", "flush.ms",
                     "max.compaction.lag.ms", "message.timestamp.after.max.ms", "message.timestamp.before.max.ms",
                     "message.timestamp.difference.max.ms", "min.compaction.lag.ms", "retention.bytes",
                     "retention.ms", "segment.jitter.ms", "segment.ms"), CONFIG_TYPE_LONG),
    **dict.fromkeys(("index.interval.bytes", "max.message.bytes", "min.insync.replicas", "segment.bytes",
                     "segment.index.bytes"), CONFIG_TYPE_INT),
    **dict.fromkeys(("message.downconversion.enable", "preallocate", "unclean.leader.election.enable"),
                    CONFIG_TYPE_BOOLEAN),
    **dict.fromkeys(("compression.type", "message.format.version", "message.timestamp.type"), CONFIG_TYPE_STRING),
    **dict.fromkeys(("cleanup.policy", "follower.replication.throttled.replicas",
                     "leader.replication.throttled.replicas"), CONFIG_TYPE_LIST),
    "min.cleanable.dirty.ratio": CONFIG_TYPE_DOUBLE,
}
BROKER_ONLY_CONFIG_TYPES = {
    "broker.id": CONFIG_TYPE_INT, "auto.create.topics.enable": CONFIG_TYPE_BOOLEAN,
    "replica.lag.time.max.ms": CONFIG_TYPE_LONG, "follower.replication.throttled.rate": CONFIG_TYPE_LONG,
    "leader.replication.throttled.rate": CONFIG_TYPE_LONG, "producer.id.expiration.ms": CONFIG_TYPE_INT,
}


def config_type(resource_type: int, name: str) -> int:
    """The DescribeConfigs ConfigType of config `name` of a TOPIC, BROKER or CLIENT_METRICS resource."""
    if resource_type == RESOURCE_TYPE_CLIENT_METRICS:
        return CLIENT_METRICS_CONFIG_TYPES.get(name, CONFIG_TYPE_UNKNOWN)
    if resource_type == RESOURCE_TYPE_BROKER:
        if name in BROKER_ONLY_CONFIG_TYPES:
            return BROKER_ONLY_CONFIG_TYPES[name]
        name = BROKER_TO_TOPIC_CONFIG.get(name, "")
    return TOPIC_CONFIG_TYPES.get(name, CONFIG_TYPE_UNKNOWN)


@dataclass
class _DelayedControllerReply:
    header: RequestHeader
    results: list[Any] = field(default_factory=list)
    expected: int = 1
    build: Callable[[list[Any]], Any] | None = None


class AdminApis:
    """Topic and config administration (see the module docstring)."""

    def __init__(self, apis: "KafkaApis") -> None:
        self.apis = apis
        self.broker = apis.broker
        self._controller_replies: dict[int, _DelayedControllerReply] = {}
        self.answered_at_ms: int | None = None  # while a forwarded request's answer is built (see `forward`)

    @property
    def auto_create_topics_enable(self) -> bool:
        return self.apis.auto_create_topics_enable

    def api_handlers(self):
        return [
            (ApiKey.CREATE_TOPICS, 0, 7, self._create_topics),
            (ApiKey.DELETE_TOPICS, 0, 6, self._delete_topics),
            (ApiKey.CREATE_PARTITIONS, 0, 3, self._create_partitions),
            (ApiKey.DESCRIBE_CONFIGS, 0, 4, self._describe_configs),
            (ApiKey.ALTER_CONFIGS, 0, 2, self._alter_configs),
            (ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1, self._incremental_alter_configs),
        ]

    def poll(self, now_ms: int, changed: AbstractSet[TopicPartition]) -> None:
        """Forwarded requests complete from the controller's callbacks, not here."""

    def next_deadline_ms(self) -> int | None:
        return None

    def forward(self, header: RequestHeader, controller_requests: list[Any], build: Callable[[list[Any]], Any]) -> Any:
        """Send `controller_requests` to the active controller; answer with build(results) once all are back
        (each result a controller response or a KafkaError). While build runs, `answered_at_ms` is the time the
        last answer came back (the request's own time when nothing was forwarded)."""
        if not controller_requests:
            return build([])
        request_id = self.apis.defer()
        delayed = _DelayedControllerReply(header, expected=len(controller_requests), build=build)
        self._controller_replies[request_id] = delayed
        for index, controller_request in enumerate(controller_requests):
            delayed.results.append(None)

            def on_response(response: Any, now_ms: int, index: int = index) -> None:
                delayed.results[index] = response
                delayed.expected -= 1
                if delayed.expected == 0:
                    self._controller_replies.pop(request_id, None)
                    self.answered_at_ms = now_ms
                    try:
                        self.apis.answer_deferred(request_id, header, lambda: build(delayed.results))
                    finally:
                        self.answered_at_ms = None

            self.broker.call_controller(controller_request, on_response, read_your_write=True)
        return Deferred(request_id)

    def _mutation_quota(self, header: RequestHeader, now_ms: int, validate_only: bool) -> Callable[[int], int]:
        """What records the partitions a request created, added or deleted (as the controller's answers count
        them) against the client's controller_mutation_rate (KIP-599) when the controller has answered, as
        Kafka's controller records them when it applies the request; it returns the throttle time (ms) for the
        answer, the connection muted for as long from then. Validation only mutates nothing."""
        session, client_id = self.apis.session, header.client_id

        def record(partitions: int) -> int:
            if validate_only or not partitions:
                return 0
            answered_ms = now_ms if self.answered_at_ms is None else self.answered_at_ms
            return self.apis.client_throttle_ms(CONTROLLER_MUTATION, session, client_id, partitions, answered_ms)

        return record

    def _quota_exceeded_ms(self, header: RequestHeader, now_ms: int, validate_only: bool) -> int:
        """At a strict version (KIP-599), the throttle time (ms) of a client whose controller mutation quota is
        already exceeded: its mutations are refused, and its connection muted for as long, as Kafka's
        StrictControllerMutationQuota does. 0 otherwise, and always for validation only (which mutates
        nothing and is never counted here)."""
        if validate_only or header.api_version < STRICT_MUTATION_QUOTA_SINCE_VERSION[header.api_key]:
            return 0
        return self.apis.client_throttle_ms(CONTROLLER_MUTATION, self.apis.session, header.client_id, 0, now_ms)

    def _topic_denied(self, name: str, operation: Op) -> bool:
        return not self.apis.authorize(operation, ResourceType.TOPIC, name)

    def _create_topics(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        may_create_any = self.apis.authorize_cluster(Op.CREATE)
        denied = [] if may_create_any else [t.name for t in request.topics if self._topic_denied(t.name, Op.CREATE)]
        validate_only = bool(request.validate_only)
        refused_ms = self._quota_exceeded_ms(header, now_ms, validate_only)
        allowed = [topic for topic in request.topics if topic.name not in denied]
        throttled = [topic.name for topic in allowed] if refused_ms else []
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
            for topic in allowed if not refused_ms
        )
        names = [topic.name for topic in topics]
        # v5+ answers a new topic's configs only to a principal that may describe them (Kafka's ControllerApis)
        describable = {name for name in names if header.api_version >= 5
                       and self.apis.authorize(Op.DESCRIBE_CONFIGS, ResourceType.TOPIC, name)}
        controller_request = ControllerCreateTopics(topics=topics, validate_only=validate_only)
        mutations = self._mutation_quota(header, now_ms, validate_only)

        def build(results: list[Any]) -> Any:
            response_class = messages.CreateTopicsResponse
            # nothing forwarded: no topic, or every one refused or denied (the planted bug indexes it anyway)
            result = results[0] if results or self.apis.bug_create_topics_forward_nothing else None
            by_name = _results_by_name(result, names, "topics")
            created = {t.name: t for t in _entries(result, "topics") if not t.error_code}
            answers = [self._created_topic_result(name, code, message, created.get(name) if header.api_version >= 5
                                                  else None, name in describable)
                       for name, (code, message) in by_name.items()]
            answers += [response_class.CreatableTopicResult(name=name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                                            error_message=AUTHORIZATION_FAILED_MESSAGE)
                        for name in denied]
            answers += [response_class.CreatableTopicResult(name=name, error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                                                            error_message=QUOTA_EXCEEDED_MESSAGE)
                        for name in throttled]
            partitions = sum(max(0, t.num_partitions) for t in created.values())
            return response_class(throttle_time_ms=refused_ms or mutations(partitions), topics=answers)

        return self.forward(header, [controller_request] if topics else [], build)

    def _created_topic_result(self, name: str, code: int, message: str, created: Any, describable: bool) -> Any:
        """A topic's CreatableTopicResult; with the controller's result for a created (or validated) topic, the
        fields of v5+ (its partition count, replication factor and configs, or TOPIC_AUTHORIZATION_FAILED as its
        TopicConfigErrorCode) and of v7 (its id): v5 and v6 leave the id out."""
        response_class = messages.CreateTopicsResponse
        answer = response_class.CreatableTopicResult(name=name, error_code=code, error_message=message or None)
        if created is None:
            return answer
        answer.topic_id = uuid.UUID(bytes=created.topic_id)
        if not describable:
            answer.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            return answer
        answer.num_partitions = created.num_partitions
        answer.replication_factor = created.replication_factor
        answer.configs = [response_class.CreatableTopicConfigs(
            name=entry.name, value=entry.value, read_only=entry.read_only, config_source=entry.source,
            is_sensitive=False) for entry in config_sources.describe_topic(
                self.broker.image, self.broker.node_id, self.broker.static_configs, name,
                overrides={entry.name: entry.value for entry in created.configs})]
        return answer

    def _delete_topics(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        """v0-5 name the topics; v6 names each by name or by id (Kafka's ControllerApis.deleteTopics rules)."""
        if header.api_version >= 6:
            asked = [(topic.name, topic.topic_id) for topic in request.topics]
        else:
            asked = [(name, NULL_UUID) for name in request.topic_names]
        refused_ms = self._quota_exceeded_ms(header, now_ms, False)
        answered: dict[int, tuple[str | None, uuid.UUID, int, str]] = {}  # index -> (name, id, code, message)
        deletions: dict[int, str] = {}  # index -> name of a topic to delete
        deletion_ids: list[bytes] = []  # the id each name must still have at the controller (b"": asked by name)
        for index, (name, topic_id) in enumerate(asked):
            answer = self._deletion_refused(name, topic_id)
            if answer is not None:
                answered[index] = answer
                continue
            name = name if name is not None else self.broker.image.topics.by_id[topic_id.bytes].name
            if refused_ms:
                answered[index] = (name, topic_id, ErrorCode.THROTTLING_QUOTA_EXCEEDED, QUOTA_EXCEEDED_MESSAGE)
            else:
                deletions[index] = name
                deletion_ids.append(topic_id.bytes if topic_id != NULL_UUID else b"")
        names = list(deletions.values())
        mutations = self._mutation_quota(header, now_ms, False)

        def build(results: list[Any]) -> Any:
            response_class = messages.DeleteTopicsResponse
            result = results[0] if results else None
            by_name = _results_by_name(result, names, "topics")
            ids = {t.name: t.topic_id for t in _entries(result, "topics") if not t.error_code}
            deleted = sum(t.num_partitions for t in _entries(result, "topics") if not t.error_code)
            answers = []
            for index, (_, asked_id) in enumerate(asked):
                if index in answered:
                    name, topic_id, code, message = answered[index]
                else:
                    name, (code, message) = deletions[index], by_name[deletions[index]]
                    topic_id = uuid.UUID(bytes=ids[name]) if name in ids else asked_id
                answers.append(response_class.DeletableTopicResult(name=name, topic_id=topic_id, error_code=code,
                                                                   error_message=message or None))
            throttle_ms = refused_ms or mutations(0 if self.apis.bug_deletions_not_counted else deleted)
            return response_class(throttle_time_ms=throttle_ms, responses=answers)

        by_id = tuple(deletion_ids) if any(deletion_ids) else ()
        return self.forward(header, [ControllerDeleteTopics(names=tuple(names), topic_ids=by_id)] if names else [],
                            build)

    def _deletion_refused(self, name: str | None, topic_id: uuid.UUID) -> tuple[str | None, uuid.UUID, int, str] | None:
        """(name, id, error code, message) of a topic that will not be deleted, or None. A topic asked for by
        id is named in the answer only if the principal may describe it (Kafka's ControllerApis)."""
        if name is not None:
            if topic_id != NULL_UUID:
                return name, topic_id, ErrorCode.INVALID_REQUEST, "You may not specify both topic name and topic id."
            if self._topic_denied(name, Op.DELETE):
                return name, topic_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED, AUTHORIZATION_FAILED_MESSAGE
            return None
        if topic_id == NULL_UUID:
            return None, topic_id, ErrorCode.INVALID_REQUEST, "Neither topic name nor id were specified."
        topic = self.broker.image.topics.by_id.get(topic_id.bytes)
        if topic is None:
            return None, topic_id, ErrorCode.UNKNOWN_TOPIC_ID, "This server does not host this topic ID."
        if self._topic_denied(topic.name, Op.DELETE):
            shown = None if self._topic_denied(topic.name, Op.DESCRIBE) else topic.name
            return shown, topic_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED, AUTHORIZATION_FAILED_MESSAGE
        return None

    def _create_partitions(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        validate_only = bool(request.validate_only)
        refused_ms = self._quota_exceeded_ms(header, now_ms, validate_only)
        controller_requests = [
            ControllerCreatePartitions(
                topic=topic.name,
                new_total_count=topic.count,
                assignments=None if topic.assignments is None else tuple(
                    ReplicaAssignment(partition=-1, broker_ids=tuple(a.broker_ids)) for a in topic.assignments
                ),
                validate_only=validate_only,
            )
            for topic in request.topics if not self._topic_denied(topic.name, Op.ALTER)
        ]
        throttled = [request.topic for request in controller_requests] if refused_ms else []
        controller_requests = [] if refused_ms else controller_requests
        names = [request.topic for request in controller_requests]
        denied = [topic.name for topic in request.topics if topic.name not in names and topic.name not in throttled]
        mutations = self._mutation_quota(header, now_ms, validate_only)

        def build(results: list[Any]) -> Any:
            response_class = messages.CreatePartitionsResponse
            entries = []
            for name, result in zip(names, results):
                code, message = code_and_message(result)
                entries.append(response_class.CreatePartitionsTopicResult(name=name, error_code=code,
                                                                         error_message=message or None))
            added = sum(r.partitions_added for r in results if not isinstance(r, KafkaError) and r is not None)
            entries += [response_class.CreatePartitionsTopicResult(
                name=name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message=AUTHORIZATION_FAILED_MESSAGE)
                for name in denied]
            entries += [response_class.CreatePartitionsTopicResult(
                name=name, error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED, error_message=QUOTA_EXCEEDED_MESSAGE)
                for name in throttled]
            return response_class(throttle_time_ms=refused_ms or mutations(added), results=entries)

        return self.forward(header, controller_requests, build)

    def _alter_configs(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        return self._forward_config_change(header, request, incremental=False)

    def _incremental_alter_configs(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        return self._forward_config_change(header, request, incremental=True)

    def _config_denied(self, resource_type: int, resource_name: str, operation: Op) -> ErrorCode | None:
        if resource_type == RESOURCE_TYPE_TOPIC:
            return None if self.apis.authorize(operation, ResourceType.TOPIC, resource_name) \
                else ErrorCode.TOPIC_AUTHORIZATION_FAILED
        if resource_type in (RESOURCE_TYPE_BROKER, RESOURCE_TYPE_CLIENT_METRICS):
            return None if self.apis.authorize_cluster(operation) else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return None

    def _forward_config_change(self, header: RequestHeader, request: Any, incremental: bool) -> Any:
        denied = {(r.resource_type, r.resource_name): code for r in request.resources
                  if (code := self._config_denied(r.resource_type, r.resource_name, Op.ALTER_CONFIGS)) is not None}
        resources = tuple(
            ConfigResource(
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=tuple(
                    AlterableConfig(name=c.name, value=c.value, op=c.config_operation if incremental else 0)
                    for c in resource.configs
                ),
            )
            for resource in request.resources if (resource.resource_type, resource.resource_name) not in denied
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
                if key in denied:
                    code, message = denied[key], AUTHORIZATION_FAILED_MESSAGE
                else:
                    code, message = by_key[key] if key in by_key else code_and_message(result)
                entries.append(response_type.AlterConfigsResourceResponse(
                    error_code=code, error_message=message or None, resource_type=key[0], resource_name=key[1]))
            return response_type(throttle_time_ms=0, responses=entries)

        return self.forward(header, [controller_request] if resources else [], build)

    def _describe_configs(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.DescribeConfigsResponse
        results = []
        for resource in request.resources:
            result = response_class.DescribeConfigsResult(
                error_code=ErrorCode.NONE, error_message=None, resource_type=resource.resource_type,
                resource_name=resource.resource_name, configs=[],
            )
            refused = self._config_denied(resource.resource_type, resource.resource_name, Op.DESCRIBE_CONFIGS)
            if refused is not None:
                result.error_code, result.error_message = refused, AUTHORIZATION_FAILED_MESSAGE
                results.append(result)
                continue
            if resource.resource_type == RESOURCE_TYPE_TOPIC:
                entries = self._topic_config_entries(resource.resource_name)
            elif resource.resource_type == RESOURCE_TYPE_BROKER:
                entries = self._broker_config_entries(resource.resource_name)
                if entries is None:
                    result.error_code = ErrorCode.INVALID_REQUEST
                    result.error_message = f"Broker resource name must be empty or a broker id, not {resource.resource_name!r}"
            elif resource.resource_type == RESOURCE_TYPE_CLIENT_METRICS:
                # A subscription's configs as set (Kafka's ConfigHelper); an unknown name has none.
                entries = [config_sources.Entry(name, value, config_sources.CLIENT_METRICS_CONFIG) for name, value in
                           sorted(self.broker.image.configs.get(RESOURCE_TYPE_CLIENT_METRICS, resource.resource_name).items())]
                if not resource.resource_name:
                    result.error_code = ErrorCode.INVALID_REQUEST
                    result.error_message = "Client metrics subscription name must not be empty"
            else:
                entries = None
                result.error_code = ErrorCode.INVALID_REQUEST
                result.error_message = f"resource type {resource.resource_type} is not supported"
            if entries is None and result.error_code == ErrorCode.NONE:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                result.error_message = f"topic {resource.resource_name!r} does not exist"
            wanted = set(resource.configuration_keys) if resource.configuration_keys else None
            synonyms = header.api_version >= 1 and bool(getattr(request, "include_synonyms", False))
            for entry in entries or ():
                if wanted is not None and entry.name not in wanted:
                    continue
                # v3+: the config's type; its documentation is null, which Kafka allows (Flotilla has none)
                result.configs.append(response_class.DescribeConfigsResourceResult(
                    name=entry.name, value=entry.value, read_only=entry.read_only, config_source=entry.source,
                    is_default=entry.source == config_sources.DEFAULT_CONFIG, is_sensitive=False,
                    synonyms=[response_class.DescribeConfigsSynonym(name=n, value=v, source=source)
                              for n, v, source in entry.synonyms] if synonyms else [],
                    config_type=config_type(resource.resource_type, entry.name), documentation=None,
                ))
            results.append(result)
        return response_class(throttle_time_ms=0, results=results)

    def _topic_config_entries(self, topic: str) -> list[config_sources.Entry] | None:
        if topic not in self.broker.image.topics.by_name:
            return None
        return config_sources.describe_topic(self.broker.image, self.broker.node_id, self.broker.static_configs, topic)

    def _broker_config_entries(self, resource_name: str) -> list[config_sources.Entry] | None:
        """A broker's configs with their sources (Kafka's dynamic broker configs), or None for a bad name."""
        if resource_name != config_sources.CLUSTER_DEFAULT and not resource_name.isdigit():
            return None
        read_only = {
            "broker.id": resource_name or str(self.broker.node_id),
            "auto.create.topics.enable": str(self.auto_create_topics_enable).lower(),
            "replica.lag.time.max.ms": str(self.broker.replica_lag_time_max_ms),
        }
        return config_sources.describe_broker(self.broker.image, self.broker.node_id, self.broker.static_configs,
                                              resource_name, read_only)


def _entries(result: Any, attribute: str) -> tuple[Any, ...]:
    """The per-resource entries of a controller response; none for a failed call (None or a KafkaError)."""
    return () if result is None or isinstance(result, KafkaError) else getattr(result, attribute)


def _results_by_name(result: Any, names: list[str], attribute: str) -> dict[str, tuple[int, str]]:
    """Per-name (error code, message) from a controller response, or the response's error for every name."""
    if result is None or isinstance(result, KafkaError):
        code, message = code_and_message(result)
        return {name: (code, message) for name in names}
    found = {entry.name: (entry.error_code, entry.message) for entry in _entries(result, attribute)}
    return {name: found.get(name, (ErrorCode.UNKNOWN_SERVER_ERROR, "no result")) for name in names}
