"""Topic and broker config keys the controller accepts, and their validation (Kafka's LogConfig rules).

Theory of operation: configs are stored as strings (as Kafka stores them), but only after the key is known
and the value parses and lies in range. `validate_topic_config(name, value, replication_factor)` and
`validate_broker_config(name, value)` raise InvalidConfigError whose message names the key; they never
change anything. Types and bounds follow Kafka's `TopicConfig` / `LogConfig` ConfigDef (3.x): LONG and INT
ranges, `atLeast`, `between`, `in`, booleans "true"/"false" in any case, comma-separated LIST values.

Dynamic broker configs are the log defaults Kafka lets an operator change at runtime; a broker resource
named "" holds the cluster-wide defaults.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from partitions.errors import InvalidConfigError, InvalidRequestError

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
config_value_chars_max = 4096

CLEANUP_POLICIES = ("delete", "compact")
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


@dataclasses.dataclass(frozen=True, slots=True)
class ConfigDef:
    """One config key: how to parse it and what it may hold."""

    parse: Callable[[str, str], object]  # (key, value) -> parsed value; raises InvalidConfigError
    is_list: bool = False


def _integer(low: int, high: int, kind: str) -> Callable[[str, str], object]:
    def parse(key: str, value: str) -> int:
        try:
            number = int(value.strip())
        except ValueError:
            raise InvalidConfigError(f"Invalid value {value!r} for configuration {key}: not a {kind}") from None
        if not low <= number <= high:
            raise InvalidConfigError(
                f"Invalid value {number} for configuration {key}: value must be in [{low}, {high}]"
            )
        return number

    return parse


def long_at_least(low: int) -> Callable[[str, str], object]:
    return _integer(low, INT64_MAX, "long")


def int_at_least(low: int) -> Callable[[str, str], object]:
    return _integer(low, INT32_MAX, "int")


def _boolean(key: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise InvalidConfigError(f"Invalid value {value!r} for configuration {key}: expected true or false")
    return lowered == "true"


def _ratio(key: str, value: str) -> float:
    try:
        number = float(value.strip())
    except ValueError:
        raise InvalidConfigError(f"Invalid value {value!r} for configuration {key}: not a double") from None
    if not 0.0 <= number <= 1.0:
        raise InvalidConfigError(f"Invalid value {number} for configuration {key}: value must be in [0, 1]")
    return number


def _one_of(choices: tuple[str, ...]) -> Callable[[str, str], object]:
    def parse(key: str, value: str) -> str:
        if value.strip() not in choices:
            raise InvalidConfigError(
                f"Invalid value {value!r} for configuration {key}: must be one of {', '.join(choices)}"
            )
        return value.strip()

    return parse


def _list_of(choices: tuple[str, ...] | None) -> Callable[[str, str], object]:
    def parse(key: str, value: str) -> tuple[str, ...]:
        items = split_list(value)
        if choices is not None:
            if not items:
                raise InvalidConfigError(f"Invalid value {value!r} for configuration {key}: must not be empty")
            bad = [item for item in items if item not in choices]
            if bad:
                raise InvalidConfigError(
                    f"Invalid value {value!r} for configuration {key}: {bad[0]!r} is not one of "
                    f"{', '.join(choices)}"
                )
        return items

    return parse


def _any_string(key: str, value: str) -> str:
    return value


def split_list(value: str) -> tuple[str, ...]:
    """Kafka's LIST parsing: comma-separated, trimmed, empty items dropped."""
    return tuple(item.strip() for item in value.split(",") if item.strip())


TOPIC_CONFIGS: dict[str, ConfigDef] = {
    "cleanup.policy": ConfigDef(_list_of(CLEANUP_POLICIES), is_list=True),
    "compression.type": ConfigDef(_one_of(COMPRESSION_TYPES)),
    "delete.retention.ms": ConfigDef(long_at_least(0)),
    "file.delete.delay.ms": ConfigDef(long_at_least(0)),
    "flush.messages": ConfigDef(long_at_least(1)),
    "flush.ms": ConfigDef(long_at_least(0)),
    "follower.replication.throttled.replicas": ConfigDef(_list_of(None), is_list=True),
    "index.interval.bytes": ConfigDef(int_at_least(0)),
    "leader.replication.throttled.replicas": ConfigDef(_list_of(None), is_list=True),
    "max.compaction.lag.ms": ConfigDef(long_at_least(1)),
    "max.message.bytes": ConfigDef(int_at_least(0)),
    "message.downconversion.enable": ConfigDef(_boolean),
    "message.format.version": ConfigDef(_any_string),
    "message.timestamp.after.max.ms": ConfigDef(long_at_least(0)),
    "message.timestamp.before.max.ms": ConfigDef(long_at_least(0)),
    "message.timestamp.difference.max.ms": ConfigDef(long_at_least(0)),
    "message.timestamp.type": ConfigDef(_one_of(TIMESTAMP_TYPES)),
    "min.cleanable.dirty.ratio": ConfigDef(_ratio),
    "min.compaction.lag.ms": ConfigDef(long_at_least(0)),
    "min.insync.replicas": ConfigDef(int_at_least(1)),
    "preallocate": ConfigDef(_boolean),
    "retention.bytes": ConfigDef(long_at_least(INT64_MIN)),
    "retention.ms": ConfigDef(long_at_least(-1)),
    "segment.bytes": ConfigDef(int_at_least(14)),
    "segment.index.bytes": ConfigDef(int_at_least(4)),
    "segment.jitter.ms": ConfigDef(long_at_least(0)),
    "segment.ms": ConfigDef(long_at_least(1)),
    "unclean.leader.election.enable": ConfigDef(_boolean),
}

# Dynamic broker configs: the broker-level defaults of the topic configs above (Kafka's names).
BROKER_TO_TOPIC_CONFIG: dict[str, str] = {
    "log.cleanup.policy": "cleanup.policy",
    "compression.type": "compression.type",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "message.max.bytes": "max.message.bytes",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "min.insync.replicas": "min.insync.replicas",
    "log.retention.bytes": "retention.bytes",
    "log.retention.ms": "retention.ms",
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.roll.jitter.ms": "segment.jitter.ms",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}


def is_list_config(resource_is_topic: bool, name: str) -> bool:
    """Whether APPEND / SUBTRACT apply to this key (Kafka: only LIST-typed keys)."""
    if not resource_is_topic:
        name = BROKER_TO_TOPIC_CONFIG.get(name, name)
    definition = TOPIC_CONFIGS.get(name)
    return definition is not None and definition.is_list


def validate_topic_config(name: str, value: str, replication_factor: int | None = None) -> object:
    """The parsed value of a topic config. Raises InvalidConfigError (the message names the key)."""
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        raise InvalidConfigError(f"Unknown topic config name: {name}")
    _check_length(name, value)
    parsed = definition.parse(name, value)
    if name == "min.insync.replicas" and replication_factor is not None and parsed > replication_factor:
        raise InvalidConfigError(
            f"Invalid value {parsed} for configuration min.insync.replicas: must be at most the "
            f"replication factor {replication_factor}"
        )
    return parsed


def validate_topic_config_set(configs: dict[str, str]) -> None:
    """Kafka's LogConfig.validateValues across keys of one topic's own configs (each already valid): a
    min.compaction.lag.ms above max.compaction.lag.ms is refused. Raises InvalidConfigError."""
    low, high = configs.get("min.compaction.lag.ms"), configs.get("max.compaction.lag.ms")
    if low is not None and high is not None and int(low) > int(high):
        raise InvalidConfigError(f"conflict topic config setting min.compaction.lag.ms ({low}) > "
                                 f"max.compaction.lag.ms ({high})")


PRODUCER_ID_EXPIRATION_MS = "producer.id.expiration.ms"
PRODUCER_ID_EXPIRATION_MS_DEFAULT = 86_400_000  # Kafka's: a day

# Dynamic broker configs with no topic counterpart, and Kafka's defaults of them (the throttle rates: none).
BROKER_ONLY_CONFIGS: dict[str, ConfigDef] = {
    "follower.replication.throttled.rate": ConfigDef(long_at_least(0)),
    "leader.replication.throttled.rate": ConfigDef(long_at_least(0)),
    # How long a partition keeps an idle producer's state (KIP-854: dynamic, per broker or cluster-wide).
    PRODUCER_ID_EXPIRATION_MS: ConfigDef(int_at_least(1)),
}
BROKER_ONLY_DEFAULTS: dict[str, str] = {
    "follower.replication.throttled.rate": str(INT64_MAX),
    "leader.replication.throttled.rate": str(INT64_MAX),
    PRODUCER_ID_EXPIRATION_MS: str(PRODUCER_ID_EXPIRATION_MS_DEFAULT),
}


def validate_broker_config(name: str, value: str) -> object:
    """The parsed value of a dynamic broker config. Raises InvalidConfigError (the message names the key)."""
    if name in BROKER_ONLY_CONFIGS:
        _check_length(name, value)
        return BROKER_ONLY_CONFIGS[name].parse(name, value)
    topic_name = BROKER_TO_TOPIC_CONFIG.get(name)
    if topic_name is None:
        raise InvalidConfigError(f"Unknown or read-only broker config name: {name}")
    _check_length(name, value)
    return TOPIC_CONFIGS[topic_name].parse(name, value)


def _check_length(name: str, value: str) -> None:
    if len(value) > config_value_chars_max:
        raise InvalidConfigError(f"Invalid value for configuration {name}: longer than {config_value_chars_max}")


# Client telemetry subscriptions (KIP-714; Kafka's ClientMetricsConfigs): CLIENT_METRICS config resources.
CLIENT_METRICS_METRICS, CLIENT_METRICS_INTERVAL_MS, CLIENT_METRICS_MATCH = "metrics", "interval.ms", "match"
CLIENT_METRICS_LIST_CONFIGS = frozenset({CLIENT_METRICS_METRICS, CLIENT_METRICS_MATCH})
CLIENT_METRICS_INTERVAL_MS_DEFAULT = 5 * 60 * 1000
CLIENT_METRICS_INTERVAL_MS_RANGE = (100, 3_600_000)
CLIENT_MATCH_SELECTORS = frozenset({"client_instance_id", "client_id", "client_software_name",
                                    "client_software_version", "client_source_address", "client_source_port"})


def validate_client_metrics_config(name: str, value: str) -> object:
    """The parsed value of a subscription's config. Raises InvalidRequestError for an unknown key or an
    interval outside 100 ms - 1 h and InvalidConfigError for a bad match pattern, as Kafka does."""
    _check_length(name, value)
    if name == CLIENT_METRICS_METRICS:
        return split_list(value)
    if name == CLIENT_METRICS_INTERVAL_MS:
        try:
            interval = int(value.strip())
        except ValueError:
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}: Not a number of type INT") from None
        low, high = CLIENT_METRICS_INTERVAL_MS_RANGE
        if not low <= interval <= high:
            raise InvalidRequestError(f"Invalid value {interval} for {name}, interval must be between 100 and 3600000 (1 hour)")
        return interval
    if name == CLIENT_METRICS_MATCH:
        return client_match_patterns(split_list(value))
    raise InvalidRequestError(f"Unknown client metrics configuration: {name}")


def client_match_patterns(patterns: tuple[str, ...]) -> dict[str, re.Pattern[str]]:
    """selector -> compiled pattern (matched against the whole attribute). Raises InvalidConfigError."""
    compiled = {}
    for pattern in patterns:
        parts = pattern.split("=")
        if len(parts) != 2 or parts[0].strip() not in CLIENT_MATCH_SELECTORS:
            raise InvalidConfigError(f"Illegal client matching pattern: {pattern}")
        try:
            compiled[parts[0].strip()] = re.compile(parts[1].strip())
        except re.error:
            raise InvalidConfigError(f"Illegal client matching pattern: {pattern}") from None
    return compiled
