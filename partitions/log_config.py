"""Per-topic log configuration: Kafka's topic config keys, in snake case, with Kafka's defaults.

Theory of operation: a `LogConfig` is an immutable value. The controller stores topic configs as Kafka's
dotted string keys ("retention.ms" -> "604800000"); `LogConfig.from_topic_configs` parses and validates them
and names the offending key in an InvalidConfigError. Unknown keys that Kafka knows but the log does not use
(e.g. "min.insync.replicas", "unclean.leader.election.enable") are accepted and ignored here; keys nobody
knows are rejected. A value of None for `flush_messages` / `flush_ms` means "never by this trigger" (Kafka's
Long.MAX_VALUE default); `retention_ms = -1` and `retention_bytes = -1` mean unbounded.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from partitions.errors import InvalidConfigError

LONG_MAX = (1 << 63) - 1
MIB = 1024 * 1024

SEGMENT_BYTES_MIN = 14  # Kafka's lower bound (LegacyRecord.RECORD_OVERHEAD_V0)
SEGMENT_INDEX_BYTES_MIN = 8  # room for one offset index entry
CLEANUP_POLICIES = frozenset({"delete", "compact"})
TIMESTAMP_TYPES = frozenset({"CreateTime", "LogAppendTime"})

# Topic config keys that other layers own (replication, transactions, the edge); valid, ignored here.
KNOWN_FOREIGN_KEYS = frozenset(
    {
        "min.insync.replicas",
        "unclean.leader.election.enable",
        "compression.type",
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.zstd.level",
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
        "preallocate",
        "message.downconversion.enable",
        "message.format.version",
        "remote.storage.enable",
        "local.retention.ms",
        "local.retention.bytes",
    }
)


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The log's topic configuration. Field names are Kafka's keys with '.' -> '_'."""

    segment_bytes: int = 1024 * MIB
    segment_ms: int = 7 * 24 * 3600 * 1000
    # Up to this much less than segment.ms for a segment to roll by time, a different amount for each segment
    # (Kafka's randomSegmentJitter), so that partitions created together do not all roll at once.
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * MIB
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    cleanup_policy: tuple[str, ...] = ("delete",)
    delete_retention_ms: int = 24 * 3600 * 1000
    min_compaction_lag_ms: int = 0
    # KIP-354: a compacted log's dirty records wait at most this long (None: no bound, Kafka's Long.MAX_VALUE):
    # its segments roll by then, and the cleaner takes it regardless of min.cleanable.dirty.ratio once its first
    # dirty segment began that long ago.
    max_compaction_lag_ms: int | None = None
    min_cleanable_dirty_ratio: float = 0.5
    flush_messages: int | None = None
    flush_ms: int | None = None
    max_message_bytes: int = MIB + 12  # Kafka's 1048588: 1 MiB plus the log overhead
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60_000

    def __post_init__(self) -> None:
        _check(self.segment_bytes >= SEGMENT_BYTES_MIN, "segment.bytes", self.segment_bytes)
        _check(self.segment_ms >= 1, "segment.ms", self.segment_ms)
        _check(self.segment_jitter_ms >= 0, "segment.jitter.ms", self.segment_jitter_ms)
        _check(self.segment_index_bytes >= SEGMENT_INDEX_BYTES_MIN, "segment.index.bytes", self.segment_index_bytes)
        _check(self.index_interval_bytes >= 0, "index.interval.bytes", self.index_interval_bytes)
        _check(self.retention_ms >= -1, "retention.ms", self.retention_ms)
        _check(self.retention_bytes >= -1, "retention.bytes", self.retention_bytes)
        _check(
            bool(self.cleanup_policy) and set(self.cleanup_policy) <= CLEANUP_POLICIES,
            "cleanup.policy",
            self.cleanup_policy,
        )
        _check(self.delete_retention_ms >= 0, "delete.retention.ms", self.delete_retention_ms)
        _check(self.min_compaction_lag_ms >= 0, "min.compaction.lag.ms", self.min_compaction_lag_ms)
        _check(self.max_compaction_lag_ms is None or self.max_compaction_lag_ms >= 1, "max.compaction.lag.ms",
               self.max_compaction_lag_ms)
        _check(
            0.0 <= self.min_cleanable_dirty_ratio <= 1.0, "min.cleanable.dirty.ratio", self.min_cleanable_dirty_ratio
        )
        _check(self.flush_messages is None or self.flush_messages >= 1, "flush.messages", self.flush_messages)
        _check(self.flush_ms is None or self.flush_ms >= 0, "flush.ms", self.flush_ms)
        _check(self.max_message_bytes >= 0, "max.message.bytes", self.max_message_bytes)
        _check(self.message_timestamp_type in TIMESTAMP_TYPES, "message.timestamp.type", self.message_timestamp_type)
        _check(self.message_timestamp_before_max_ms >= 0, "message.timestamp.before.max.ms", self.message_timestamp_before_max_ms)
        _check(self.message_timestamp_after_max_ms >= 0, "message.timestamp.after.max.ms", self.message_timestamp_after_max_ms)
        _check(self.file_delete_delay_ms >= 0, "file.delete.delay.ms", self.file_delete_delay_ms)

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        """How long a segment takes appends (Kafka's LogConfig.maxSegmentMs): segment.ms, bounded by
        max.compaction.lag.ms on a compacted log so that its records become cleanable in time."""
        if self.compact and self.max_compaction_lag_ms is not None:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    def roll_ms(self, segment_seed: int) -> int:
        """How long the segment whose `segment_seed` this is takes appends: max_segment_ms less its jitter, in
        [0, min(segment.jitter.ms, segment.ms)) as Kafka's. Kafka draws it at random when it creates the segment;
        here it is the segment's own seed (its file's checksum, LogSegment.jitter_seed), the same in every process
        and every run, so a simulation replays it."""
        if not self.segment_jitter_ms:
            return self.max_segment_ms
        return self.max_segment_ms - segment_seed % min(self.segment_jitter_ms, self.segment_ms)

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @classmethod
    def from_topic_configs(cls, configs: dict[str, str], base: LogConfig | None = None) -> LogConfig:
        """The config for Kafka-named string `configs`, on top of `base` (default: Kafka's defaults).
        Raises InvalidConfigError naming the key for an unknown key or a bad value."""
        changes: dict[str, object] = {}
        for key, raw in configs.items():
            if key in KNOWN_FOREIGN_KEYS:
                continue
            parser = _PARSERS.get(key)
            if parser is None:
                raise InvalidConfigError(f"unknown topic config {key!r}")
            try:
                changes[key.replace(".", "_")] = parser(raw)
            except (TypeError, ValueError) as error:
                raise InvalidConfigError(f"invalid value {raw!r} for topic config {key!r}: {error}") from None
        return dataclasses.replace(base or cls(), **changes)

    def to_topic_configs(self) -> dict[str, str]:
        """The Kafka-named string form (inverse of from_topic_configs), e.g. for DescribeConfigs."""
        result = {}
        for key, _ in _PARSERS.items():
            value = getattr(self, key.replace(".", "_"))
            if value is None:
                value = LONG_MAX
            result[key] = ",".join(value) if isinstance(value, tuple) else str(value)
        return result


def _check(condition: bool, key: str, value: object) -> None:
    if not condition:
        raise InvalidConfigError(f"invalid value {value!r} for topic config {key!r}")


def _long(raw: str) -> int:
    return int(str(raw).strip())


def _int32(raw: str) -> int:
    value = _long(raw)
    if not -(1 << 31) <= value < (1 << 31):
        raise ValueError("out of the int32 range")
    return value


def _optional_long(raw: str) -> int | None:
    value = _long(raw)
    return None if value == LONG_MAX else value


def _policy(raw: str) -> tuple[str, ...]:
    policies = tuple(sorted({part.strip() for part in str(raw).split(",") if part.strip()}))
    if not policies or not set(policies) <= CLEANUP_POLICIES:
        raise ValueError("expected delete, compact or both")
    return policies


def _timestamp_type(raw: str) -> str:
    if raw not in TIMESTAMP_TYPES:
        raise ValueError("expected CreateTime or LogAppendTime")
    return raw


_PARSERS = {
    "segment.bytes": _int32,
    "segment.ms": _long,
    "segment.jitter.ms": _long,
    "segment.index.bytes": _int32,
    "index.interval.bytes": _int32,
    "retention.ms": _long,
    "retention.bytes": _long,
    "cleanup.policy": _policy,
    "delete.retention.ms": _long,
    "min.compaction.lag.ms": _long,
    "max.compaction.lag.ms": _optional_long,
    "min.cleanable.dirty.ratio": float,
    "flush.messages": _optional_long,
    "flush.ms": _optional_long,
    "max.message.bytes": _int32,
    "message.timestamp.type": _timestamp_type,
    "message.timestamp.before.max.ms": _long,
    "message.timestamp.after.max.ms": _long,
    "file.delete.delay.ms": _long,
}
