"""The controller's config requests (Kafka's ConfigurationControlManager): AlterConfigs and
IncrementalAlterConfigs for topics, brokers (per broker id, or the cluster default "") and client telemetry
subscriptions (CLIENT_METRICS resources, KIP-714), and the validated configs of a new topic.

Pure functions of the current image, as metadata/security_control.py: each validates a request and returns
the records to commit and the response. A resource's changes are the ConfigRecords that take its current
configs to the requested ones (a record with value None deletes a key); validate_only answers without records.
"""

from __future__ import annotations

from metadata.configs import (
    CLIENT_METRICS_LIST_CONFIGS,
    is_list_config,
    split_list,
    validate_broker_config,
    validate_client_metrics_config,
    validate_topic_config,
    validate_topic_config_set,
)
from metadata.image import MetadataImage
from metadata.records import ConfigRecord, ConfigResourceType, MetadataRecord
from metadata.requests import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsRequest,
    AlterConfigsResponse,
    ConfigEntry,
    ConfigResource,
    ConfigResourceResult,
    IncrementalAlterConfigsRequest,
)
from partitions.errors import ErrorCode, InvalidConfigError, InvalidRequestError, KafkaError, UnknownTopicOrPartitionError

BROKER_ID_MAX = 2**31 - 1
CLUSTER_DEFAULT_RESOURCE = ""  # the broker resource holding cluster-wide dynamic defaults


def alter_configs(image: MetadataImage, request: AlterConfigsRequest | IncrementalAlterConfigsRequest
                  ) -> tuple[list[MetadataRecord], AlterConfigsResponse]:
    incremental = isinstance(request, IncrementalAlterConfigsRequest)
    keys = [(r.resource_type, r.resource_name) for r in request.resources]
    records: list[MetadataRecord] = []
    results = []
    for resource in request.resources:
        try:
            if keys.count((resource.resource_type, resource.resource_name)) > 1:
                raise InvalidRequestError(f"Duplicate resource {resource.resource_name!r} in the request")
            changes = _config_changes(image, resource, incremental)
            if not request.validate_only:
                records.extend(changes)
            results.append(ConfigResourceResult(resource.resource_type, resource.resource_name, ErrorCode.NONE))
        except KafkaError as error:
            results.append(
                ConfigResourceResult(resource.resource_type, resource.resource_name, error.code, error.message)
            )
    return records, AlterConfigsResponse(tuple(results))


def _config_changes(image: MetadataImage, resource: ConfigResource, incremental: bool) -> list[ConfigRecord]:
    """The ConfigRecords that take `resource` to its requested configs. Raises KafkaError."""
    is_topic, replication_factor = _config_resource(image, resource)
    client_metrics = resource.resource_type == ConfigResourceType.CLIENT_METRICS
    current = dict(image.configs.get(resource.resource_type, resource.resource_name))
    if incremental:
        wanted = _apply_config_ops(current, resource.configs, is_topic, client_metrics)
    else:
        wanted = _replacement_configs(resource.configs)
    for name, value in wanted.items():
        if current.get(name) != value:
            if is_topic:
                validate_topic_config(name, value, replication_factor)
            elif client_metrics:
                validate_client_metrics_config(name, value)
            else:
                validate_broker_config(name, value)
    if is_topic and wanted != current:
        validate_topic_config_set(wanted)
    changed = sorted(set(current) | set(wanted))
    return [
        ConfigRecord(resource.resource_type, resource.resource_name, name, wanted.get(name))
        for name in changed
        if current.get(name) != wanted.get(name)
    ]


def _config_resource(image: MetadataImage, resource: ConfigResource) -> tuple[bool, int | None]:
    """(is it a topic, its replication factor). Raises KafkaError for an unknown or bad resource."""
    if resource.resource_type == ConfigResourceType.TOPIC:
        topic = image.topics.by_name.get(resource.resource_name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"Topic '{resource.resource_name}' does not exist")
        return True, min((len(p.replicas) for p in topic.partitions.values()), default=None)
    if resource.resource_type == ConfigResourceType.BROKER:
        name = resource.resource_name
        if name != CLUSTER_DEFAULT_RESOURCE and not (name.isdigit() and int(name) <= BROKER_ID_MAX):
            raise InvalidRequestError(f"Broker resource name must be empty or a broker id, not {name!r}")
        return False, None
    if resource.resource_type == ConfigResourceType.CLIENT_METRICS:  # a telemetry subscription (KIP-714)
        if not resource.resource_name:
            raise InvalidRequestError("Subscription name can't be empty")
        return False, None
    raise InvalidRequestError(f"Unsupported config resource type {resource.resource_type}")


def topic_configs(entries: tuple[ConfigEntry, ...], replication_factor: int) -> list[tuple[str, str]]:
    """The validated configs of a new topic. Raises InvalidConfigError / InvalidRequestError."""
    names = [entry.name for entry in entries]
    configs = []
    for entry in entries:
        if names.count(entry.name) > 1:
            raise InvalidRequestError(f"Duplicate config {entry.name} in the request")
        if entry.value is None:
            raise InvalidConfigError(f"Null value not supported for topic config {entry.name}")
        validate_topic_config(entry.name, entry.value, replication_factor)
        configs.append((entry.name, entry.value))
    validate_topic_config_set(dict(configs))
    return sorted(configs)


def _replacement_configs(entries: tuple[AlterableConfig, ...]) -> dict[str, str]:
    wanted = {}
    for entry in entries:
        if entry.name in wanted:
            raise InvalidRequestError(f"Duplicate config {entry.name} in the request")
        if entry.value is None:
            raise InvalidConfigError(f"Null value not supported for config {entry.name}")
        wanted[entry.name] = entry.value
    return wanted


def _apply_config_ops(current: dict[str, str], entries: tuple[AlterableConfig, ...], is_topic: bool,
                      client_metrics: bool = False) -> dict[str, str]:
    """Kafka's IncrementalAlterConfigs: SET, DELETE, and APPEND / SUBTRACT for LIST keys."""
    wanted = dict(current)
    seen: set[str] = set()
    for entry in entries:
        if entry.name in seen:
            raise InvalidRequestError(f"Duplicate config {entry.name} in the request")
        seen.add(entry.name)
        if entry.op == AlterConfigOp.DELETE:
            wanted.pop(entry.name, None)
            continue
        if entry.op not in (AlterConfigOp.SET, AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT):
            raise InvalidRequestError(f"Unknown config operation {entry.op} for {entry.name}")
        if entry.value is None:
            raise InvalidConfigError(f"Null value not supported for config {entry.name}")
        if entry.op == AlterConfigOp.SET:
            wanted[entry.name] = entry.value
            continue
        if not (entry.name in CLIENT_METRICS_LIST_CONFIGS if client_metrics else is_list_config(is_topic, entry.name)):
            raise InvalidConfigError(
                f"Can't {AlterConfigOp(entry.op).name} to key {entry.name} because its type is not LIST."
            )
        items = list(split_list(wanted.get(entry.name, "")))
        if entry.op == AlterConfigOp.APPEND:
            items += [item for item in split_list(entry.value) if item not in items]
        else:
            items = [item for item in items if item not in split_list(entry.value)]
        wanted[entry.name] = ",".join(items)
    return wanted
