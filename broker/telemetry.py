"""Client telemetry (KIP-714), sans-IO: which metrics a client pushes and how often, and what it pushed.

Theory of operation (Kafka's ClientMetricsManager): subscriptions are CLIENT_METRICS config resources in the
metadata image (`metrics`: name prefixes, `*` for all; `interval.ms`; `match`: `selector=regex` pairs over
client_instance_id, client_id, client_software_name, client_software_version, client_source_address and
client_source_port). A client asks GetTelemetrySubscriptions (with a zero instance id the first time: the
broker gives it one); the broker matches its attributes against every subscription and answers the union of
their metrics, the shortest of their intervals and a subscription id that changes with them. The client then
pushes OTLP metrics at that interval. A client instance is re-evaluated when the subscriptions changed since
it was last evaluated, and forgotten three push intervals (at least a minute) after its last request.

Errors, as Kafka answers them: a Get before the push interval is over THROTTLING_QUOTA_EXCEEDED; a push
before it (unless terminating, or the first after a Get) THROTTLING_QUOTA_EXCEEDED; a push with a stale
subscription id UNKNOWN_SUBSCRIPTION_ID; an unknown compression type UNSUPPORTED_COMPRESSION_TYPE; a payload
above TelemetryMaxBytes TELEMETRY_TOO_LARGE; anything after a terminating push INVALID_REQUEST; a payload
that does not decompress or decode as OTLP INVALID_RECORD.

What a client pushes is kept per instance, the latest value of each series (gauges and sums as numbers,
histograms as their count and sum), for the node's metrics endpoint (net/metrics.py), which Kafka leaves to
a ClientTelemetryReceiver plugin. Clients are asked for cumulative sums (DeltaTemporality false, where
Kafka asks for deltas), so that the latest value of a counter is its total, as Prometheus expects. Memory
is bounded: at most INSTANCES_MAX instances (the least recently heard from go first) and SERIES_MAX series each. The client_source_port selector never matches: the node
does not keep a connection's port.
"""

from __future__ import annotations

import collections
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any

from metadata.configs import (
    CLIENT_METRICS_INTERVAL_MS,
    CLIENT_METRICS_INTERVAL_MS_DEFAULT,
    CLIENT_METRICS_MATCH,
    CLIENT_METRICS_METRICS,
    client_match_patterns,
    split_list,
)
from metadata.records import ConfigResourceType
from partitions.compression import decompress
from partitions.errors import ErrorCode, KafkaError

ALL_METRICS = "*"
ACCEPTED_COMPRESSION_TYPES = (4, 3, 2, 1, 0)  # zstd, lz4, snappy, gzip, none: Kafka's order of preference
TELEMETRY_MAX_BYTES = 1024 * 1024  # Kafka's telemetry.max.bytes
INSTANCE_EXPIRY_MS_MIN = 60_000
INSTANCES_MAX = 16_384  # Kafka's client instance cache
SERIES_MAX = 2_000  # series kept per client instance


@dataclass(frozen=True)
class Subscription:
    name: str
    metrics: frozenset[str]
    interval_ms: int
    patterns: dict


@dataclass
class ClientInstance:
    instance_id: uuid.UUID
    attributes: dict[str, str | None]
    subscription_id: int
    subscriptions_version: int
    metrics: tuple[str, ...]
    push_interval_ms: int
    last_get_ms: int = -(2**62)
    last_push_ms: int = -(2**62)
    last_seen_ms: int = 0
    terminating: bool = False
    series: dict[tuple, float] = field(default_factory=dict)  # (metric, attributes) -> latest value


class ClientMetricsManager:
    def __init__(self, rng: Any) -> None:
        self._rng = rng  # new instance ids (a seeded one in the simulator)
        self._configs: Any = None  # the image's configs the subscriptions were read from
        self._subscriptions: tuple[Subscription, ...] = ()
        self._version = 0
        self.instances: collections.OrderedDict[uuid.UUID, ClientInstance] = collections.OrderedDict()
        # A planted bug for the simulator (simulations/telemetry_sim.py), never configured: a client instance
        # keeps the subscription it was first evaluated against when the subscriptions change.
        self.bug_stale_subscription = False

    # -- subscriptions ---------------------------------------------------------------------------------------
    def refresh(self, image: Any) -> None:
        """Read the subscriptions again when the image's configs changed."""
        if image.configs is self._configs:
            return
        self._configs = image.configs
        subscriptions = []
        for (resource_type, name), configs in sorted(image.configs.resources.items()):
            if resource_type != ConfigResourceType.CLIENT_METRICS:
                continue
            interval = configs.get(CLIENT_METRICS_INTERVAL_MS)
            subscriptions.append(Subscription(
                name, frozenset(split_list(configs.get(CLIENT_METRICS_METRICS, ""))),
                CLIENT_METRICS_INTERVAL_MS_DEFAULT if interval is None else int(interval),
                client_match_patterns(split_list(configs.get(CLIENT_METRICS_MATCH, "")))))
        if tuple(subscriptions) != self._subscriptions:
            self._subscriptions = tuple(subscriptions)
            self._version += 1

    def subscription_names(self) -> list[str]:
        return [subscription.name for subscription in self._subscriptions]

    # -- requests --------------------------------------------------------------------------------------------
    def get_subscriptions(self, instance_id: uuid.UUID, attributes: dict[str, str | None], now_ms: int
                          ) -> tuple[ErrorCode, ClientInstance]:
        """GetTelemetrySubscriptions: (error, the instance) for `instance_id` (zero: a new one)."""
        if instance_id.int == 0:
            instance_id = uuid.UUID(int=self._rng.getrandbits(128))
        instance = self._instance(instance_id, attributes, now_ms)
        if now_ms - max(instance.last_get_ms, instance.last_push_ms) < instance.push_interval_ms:
            return ErrorCode.THROTTLING_QUOTA_EXCEEDED, instance
        instance.last_get_ms = now_ms
        return ErrorCode.NONE, instance

    def push(self, instance_id: uuid.UUID, subscription_id: int, terminating: bool, compression_type: int,
             payload: bytes, attributes: dict[str, str | None], now_ms: int) -> ErrorCode:
        """PushTelemetry: the error to answer; the payload's series are kept when it is accepted."""
        if instance_id.int == 0 or instance_id == uuid.UUID(int=1):  # Kafka's reserved ids
            return ErrorCode.INVALID_REQUEST
        instance = self._instance(instance_id, attributes, now_ms)
        try:
            code = self._validate_push(instance, subscription_id, terminating, compression_type, payload, now_ms)
        finally:
            instance.terminating = instance.terminating or terminating
        if code != ErrorCode.NONE or not payload:
            return code
        try:
            self._keep(instance, decode_otlp(decompress(compression_type, payload, TELEMETRY_MAX_BYTES * 8)))
        except (KafkaError, ValueError):
            return ErrorCode.INVALID_RECORD
        return ErrorCode.NONE

    def _validate_push(self, instance: ClientInstance, subscription_id: int, terminating: bool,
                       compression_type: int, payload: bytes, now_ms: int) -> ErrorCode:
        if instance.terminating:
            return ErrorCode.INVALID_REQUEST
        # The first push after a Get may come early (the client jitters its interval), later ones not.
        if instance.last_get_ms <= instance.last_push_ms and now_ms - instance.last_push_ms < instance.push_interval_ms \
                and not terminating:
            return ErrorCode.THROTTLING_QUOTA_EXCEEDED
        instance.last_push_ms = now_ms
        if subscription_id != instance.subscription_id:
            return ErrorCode.UNKNOWN_SUBSCRIPTION_ID
        if compression_type not in ACCEPTED_COMPRESSION_TYPES:
            return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        if len(payload) > TELEMETRY_MAX_BYTES:
            return ErrorCode.TELEMETRY_TOO_LARGE
        return ErrorCode.NONE

    def _instance(self, instance_id: uuid.UUID, attributes: dict[str, str | None], now_ms: int) -> ClientInstance:
        self.expire(now_ms)
        instance = self.instances.get(instance_id)
        if instance is None or (instance.subscriptions_version != self._version and not self.bug_stale_subscription):
            kept = instance
            instance = self._evaluate(instance_id, attributes if kept is None else kept.attributes)
            if kept is not None:
                instance.series = kept.series
        instance.last_seen_ms = now_ms
        self.instances[instance_id] = instance
        self.instances.move_to_end(instance_id)
        while len(self.instances) > INSTANCES_MAX:
            self.instances.popitem(last=False)
        return instance

    def _evaluate(self, instance_id: uuid.UUID, attributes: dict[str, str | None]) -> ClientInstance:
        attributes = {**attributes, "client_instance_id": str(instance_id)}
        metrics: set[str] = set()
        interval = CLIENT_METRICS_INTERVAL_MS_DEFAULT
        for subscription in self._subscriptions:
            if all(attributes.get(selector) is not None and pattern.fullmatch(attributes[selector])
                   for selector, pattern in subscription.patterns.items()):
                metrics |= subscription.metrics
                interval = min(interval, subscription.interval_ms)
        chosen = (ALL_METRICS,) if ALL_METRICS in metrics else tuple(sorted(metrics))
        subscription_id = _signed32(zlib.crc32(f"{list(chosen)}{interval}".encode()) ^ (instance_id.int & 0xFFFFFFFF))
        return ClientInstance(instance_id, attributes, subscription_id, self._version, chosen, interval)

    def expire(self, now_ms: int) -> None:
        """Forget the instances not heard from for three push intervals (at least a minute)."""
        while self.instances:
            oldest = next(iter(self.instances.values()))
            if now_ms - oldest.last_seen_ms < max(INSTANCE_EXPIRY_MS_MIN, 3 * oldest.push_interval_ms):
                return
            self.instances.popitem(last=False)

    # -- what was pushed ---------------------------------------------------------------------------------------
    @staticmethod
    def _keep(instance: ClientInstance, points: list[tuple[str, tuple, float]]) -> None:
        series = instance.series
        for name, attributes, value in points:
            key = (name, attributes)
            if key in series or len(series) < SERIES_MAX:
                series[key] = value


def _signed32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def decode_otlp(payload: bytes) -> list[tuple[str, tuple, float]]:
    """(metric name, sorted (attribute, value) pairs, value) of every data point of an OTLP MetricsData
    message: gauges and sums as they are, histograms as `<name>.count` and `<name>.sum`. Raises ValueError
    for bytes that are not one."""
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.metrics.v1 import metrics_pb2

    data = metrics_pb2.MetricsData()
    try:
        data.ParseFromString(payload)
    except DecodeError as error:
        raise ValueError(f"not an OTLP MetricsData message: {error}") from None
    points = []
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data")
                if kind in ("gauge", "sum"):
                    for point in getattr(metric, kind).data_points:
                        value = point.as_double if point.WhichOneof("value") == "as_double" else point.as_int
                        points.append((metric.name, _attributes(point.attributes), float(value)))
                elif kind == "histogram":
                    for point in metric.histogram.data_points:
                        attributes = _attributes(point.attributes)
                        points.append((metric.name + ".count", attributes, float(point.count)))
                        points.append((metric.name + ".sum", attributes, float(point.sum)))
    return points


def _attributes(key_values: Any) -> tuple:
    pairs = []
    for key_value in key_values:
        value = key_value.value
        kind = value.WhichOneof("value")
        pairs.append((key_value.key, "" if kind is None else str(getattr(value, kind))))
    return tuple(sorted(pairs))
