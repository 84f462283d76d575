"""What the client's typed calls return: small frozen dataclasses in Kafka's nouns, and Kafka's enums for them.

Everything here is plain data (picklable, comparable), so results can cross threads and processes (Spark).
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field

from net.protocol.types import NULL_UUID
from partitions.errors import KafkaError
from partitions.records import Record

EARLIEST_TIMESTAMP = -2  # ListOffsets: the log start offset
LATEST_TIMESTAMP = -1  # ListOffsets: the high watermark (read_uncommitted) or last stable offset


class IsolationLevel(enum.IntEnum):
    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


class ConfigResourceType(enum.IntEnum):
    """org.apache.kafka.common.config.ConfigResource.Type wire values."""

    TOPIC = 2
    BROKER = 4


class ConfigSource(enum.IntEnum):
    """DescribeConfigs v1+ ConfigSource wire values."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


class AlterConfigOp(enum.IntEnum):
    """IncrementalAlterConfigs ConfigOperation wire values."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class BrokerMetadata:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    leader: int  # -1 when there is none
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    error_code: int
    is_internal: bool
    partitions: dict[int, PartitionMetadata]
    topic_id: uuid.UUID = NULL_UUID  # KIP-516 (Metadata v10+); all zeros from older brokers


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    cluster_id: str | None
    controller_id: int
    brokers: dict[int, BrokerMetadata]
    topics: dict[str, TopicMetadata]


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str
    controller_id: int
    brokers: dict[int, BrokerMetadata]


@dataclass(frozen=True, slots=True)
class FetchResult:
    """One partition's fetch: records at or after the fetch offset (control records and, under read_committed,
    aborted records left out), the partition's offsets, the partition error (None when there is none), and
    `next_offset`, where the next fetch starts (past control and aborted batches too)."""

    records: list[Record]
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int
    error: KafkaError | None
    next_offset: int


@dataclass(frozen=True, slots=True)
class OffsetAndTimestamp:
    offset: int
    timestamp: int
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create; -1 partitions or replication factor means the broker's default (CreateTopics v4)."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = field(default_factory=dict)
    assignments: dict[int, tuple[int, ...]] | None = None  # partition -> broker ids, instead of the two counts


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    read_only: bool
    source: ConfigSource
    is_default: bool
    is_sensitive: bool
