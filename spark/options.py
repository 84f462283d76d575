"""The options of the `flotilla` data source, parsed and checked as Spark's Kafka source does.

Theory of operation: `parse_source_options(options, streaming)` turns the string options a DataFrameReader
carries into a frozen `SourceOptions`, or raises `FlotillaOptionError` naming the option at fault, before any
connection is made. `parse_sink_options` does the same for writers. Offsets are Kafka's JSON layout
(`{"topic": {"0": 23, "1": -2}}`, -2 earliest, -1 latest); the offset dicts handed to Spark are rebuilt with
sorted topics and numerically sorted partitions, because Spark compares offsets by their JSON text.

Security: the `kafka.`-prefixed client properties of net/client/security.py (librdkafka's names:
`kafka.security.protocol`, `kafka.sasl.mechanism`, `kafka.sasl.username`, `kafka.sasl.password`,
`kafka.ssl.ca.location`, `kafka.ssl.certificate.location`, `kafka.ssl.key.location`, the OAUTHBEARER ones such
as `kafka.sasl.oauthbearer.method=oidc`) are checked here and kept as `security`, plain (name, value) pairs, so
that a task's partition stays picklable; each process builds its client's ClientSecurity from them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

EARLIEST = -2
LATEST = -1
FETCH_BYTES_MAX_DEFAULT = 4 * 1024 * 1024
ARROW_BATCH_ROWS_MAX_DEFAULT = 200_000
REQUEST_TIMEOUT_MS_DEFAULT = 30_000

SUBSCRIPTION_OPTIONS = ("subscribe", "subscribePattern", "assign")
# kafka.* options that are not client security properties (the rest are handed to ClientSecurity)
_NOT_SECURITY = frozenset({"bootstrap.servers", "request.timeout.ms", "client.rack", "isolation.level"})
_SECURITY_PREFIXES = ("security.", "sasl.", "ssl.", "enable.sasl.", "https.")


class FlotillaOptionError(ValueError):
    """An option of the flotilla data source is missing, malformed or contradicts another."""


@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None
    starting: str | dict = "latest"  # "earliest", "latest" or {topic: {partition: offset}}
    ending: str | dict = "latest"
    starting_timestamp: int | None = None
    starting_by_timestamp: dict | None = None
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    include_headers: bool = False
    fetch_bytes_max: int = FETCH_BYTES_MAX_DEFAULT
    arrow_batch_rows_max: int = ARROW_BATCH_ROWS_MAX_DEFAULT
    request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT
    isolation_level: int = 0  # 1: read_committed (up to the last stable offset, aborted records dropped)
    client_rack: str = ""  # kafka.client.rack: read from a replica in this rack where the cluster allows (KIP-392)
    security: tuple[tuple[str, str], ...] = ()  # client security properties (see the module docstring)

    def matches(self, topic: str) -> bool:
        """Whether the subscription covers `topic` (for subscribe and subscribePattern)."""
        if self.subscribe_pattern is not None:
            return re.fullmatch(self.subscribe_pattern, topic) is not None
        return topic in self.subscribe


@dataclass(frozen=True)
class SinkOptions:
    bootstrap_servers: str
    topic: str | None
    request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT
    security: tuple[tuple[str, str], ...] = ()


def _security(options: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The kafka.* client security properties, checked (see the module docstring). Raises FlotillaOptionError
    naming the option."""
    from net.client.security import ClientSecurity

    properties: dict[str, str] = {}
    for key, value in options.items():
        if not key.startswith("kafka.") or key[len("kafka."):] in _NOT_SECURITY:
            continue
        name = key[len("kafka."):]
        if name.startswith(_SECURITY_PREFIXES):  # (other kafka.* options are left alone, as before)
            properties[name] = value
    if not properties:
        return ()
    try:
        ClientSecurity.from_properties(properties, source="options")
    except ValueError as error:
        raise FlotillaOptionError(f"the kafka.* security options: {str(error).removeprefix('options: ')} (each "
                                  f"as option 'kafka.<name>')") from None
    return tuple(sorted(properties.items()))


def _lower(options) -> dict[str, str]:
    return {str(key).lower(): str(value) for key, value in dict(options).items()}


def _bootstrap(options: dict[str, str]) -> str:
    servers = options.get("kafka.bootstrap.servers", "").strip()
    if not servers:
        raise FlotillaOptionError("option 'kafka.bootstrap.servers' is required (e.g. 127.0.0.1:9092)")
    return servers


def _bool(options: dict[str, str], name: str, default: bool) -> bool:
    text = options.get(name.lower())
    if text is None:
        return default
    if text.strip().lower() not in ("true", "false"):
        raise FlotillaOptionError(f"option '{name}' must be true or false, not {text!r}")
    return text.strip().lower() == "true"


def _positive_int(options: dict[str, str], name: str, default: int | None) -> int | None:
    text = options.get(name.lower())
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise FlotillaOptionError(f"option '{name}' must be a positive integer, not {text!r}") from None
    if value <= 0:
        raise FlotillaOptionError(f"option '{name}' must be a positive integer, not {value}")
    return value


def _json_object(name: str, text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise FlotillaOptionError(f"option '{name}' is not valid JSON ({error}): {text!r}") from None
    if not isinstance(value, dict):
        raise FlotillaOptionError(f"option '{name}' must be a JSON object, not {text!r}")
    return value


def parse_partition_offsets(name: str, text: str, allowed_specials: tuple[int, ...]) -> dict[str, dict[int, int]]:
    """{"topic": {"0": 23}} -> {"topic": {0: 23}}. Values >= 0 or in `allowed_specials` (-2 earliest,
    -1 latest). Raises FlotillaOptionError naming `name`."""
    parsed: dict[str, dict[int, int]] = {}
    for topic, partitions in _json_object(name, text).items():
        if not isinstance(partitions, dict):
            raise FlotillaOptionError(f"option '{name}': topic {topic!r} must map partitions to offsets: {text!r}")
        parsed[topic] = {}
        for partition, offset in partitions.items():
            if not (isinstance(partition, str) and partition.isdigit()) or type(offset) is not int:
                raise FlotillaOptionError(
                    f"option '{name}': {topic!r} partition {partition!r} offset {offset!r} is not "
                    f"\"partition\": integer: {text!r}")
            if offset < 0 and offset not in allowed_specials:
                raise FlotillaOptionError(f"option '{name}': offset {offset} of {topic}-{partition} is not allowed "
                                          f"(use >= 0 or {', '.join(map(str, allowed_specials))})")
            parsed[topic][int(partition)] = offset
    return parsed


def _subscription(options: dict[str, str]) -> dict:
    given = [name for name in SUBSCRIPTION_OPTIONS if options.get(name.lower(), "").strip()]
    if len(given) != 1:
        raise FlotillaOptionError(
            f"exactly one of the options 'subscribe', 'subscribePattern', 'assign' must be set; got "
            f"{given or 'none'}")
    name = given[0]
    text = options[name.lower()].strip()
    if name == "subscribe":
        topics = tuple(t.strip() for t in text.split(",") if t.strip())
        if not topics:
            raise FlotillaOptionError(f"option 'subscribe' names no topic: {text!r}")
        return {"subscribe": topics}
    if name == "subscribePattern":
        try:
            re.compile(text)
        except re.error as error:
            raise FlotillaOptionError(f"option 'subscribePattern' is not a valid regex ({error}): {text!r}") from None
        return {"subscribe_pattern": text}
    assigned = _json_object("assign", text)
    assign: dict[str, tuple[int, ...]] = {}
    for topic, partitions in assigned.items():
        if not isinstance(partitions, list) or not all(type(p) is int and p >= 0 for p in partitions):
            raise FlotillaOptionError(f"option 'assign' must be {{\"topic\": [0, 1]}}, not {text!r}")
        assign[topic] = tuple(sorted(set(partitions)))
    if not assign:
        raise FlotillaOptionError(f"option 'assign' names no partition: {text!r}")
    return {"assign": assign}


def _offsets_option(options: dict[str, str], name: str, default: str, specials: tuple[int, ...]) -> str | dict:
    text = options.get(name.lower())
    if text is None or not text.strip():
        return default
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        return word
    if not text.strip().startswith("{"):
        raise FlotillaOptionError(f"option '{name}' must be earliest, latest or a JSON object, not {text!r}")
    return parse_partition_offsets(name, text, specials)


def parse_source_options(options, streaming: bool) -> SourceOptions:
    """Check and parse a reader's options (streaming or batch). Raises FlotillaOptionError naming the option."""
    lowered = _lower(options)
    isolation = lowered.get("kafka.isolation.level", "read_uncommitted").strip().lower()
    if isolation not in ("read_uncommitted", "read_committed"):
        raise FlotillaOptionError(f"option 'kafka.isolation.level' must be read_uncommitted or read_committed, "
                                  f"not {isolation!r}")
    starting = _offsets_option(lowered, "startingOffsets", "latest" if streaming else "earliest", (EARLIEST, LATEST))
    ending = _offsets_option(lowered, "endingOffsets", "latest", (LATEST,))
    if streaming and "endingoffsets" in lowered:
        raise FlotillaOptionError("option 'endingOffsets' is for batch queries only")
    if not streaming and "maxoffsetspertrigger" in lowered:
        raise FlotillaOptionError("option 'maxOffsetsPerTrigger' is for streaming queries only")
    if ending == "earliest":
        raise FlotillaOptionError("option 'endingOffsets' cannot be earliest")
    if starting == "latest" and not streaming:
        raise FlotillaOptionError("option 'startingOffsets' cannot be latest for a batch query")
    by_timestamp = None
    if lowered.get("startingoffsetsbytimestamp"):
        by_timestamp = parse_partition_offsets("startingOffsetsByTimestamp", lowered["startingoffsetsbytimestamp"], ())
    starting_timestamp = None
    if lowered.get("startingtimestamp"):
        text = lowered["startingtimestamp"]
        if not text.strip().isdigit():
            raise FlotillaOptionError(f"option 'startingTimestamp' must be milliseconds since the epoch: {text!r}")
        starting_timestamp = int(text)
    return SourceOptions(
        bootstrap_servers=_bootstrap(lowered),
        **_subscription(lowered),
        starting=starting,
        ending=ending,
        starting_timestamp=starting_timestamp,
        starting_by_timestamp=by_timestamp,
        fail_on_data_loss=_bool(lowered, "failOnDataLoss", True),
        max_offsets_per_trigger=_positive_int(lowered, "maxOffsetsPerTrigger", None),
        min_partitions=_positive_int(lowered, "minPartitions", None),
        include_headers=_bool(lowered, "includeHeaders", False),
        fetch_bytes_max=_positive_int(lowered, "fetch.bytes.max", FETCH_BYTES_MAX_DEFAULT),
        arrow_batch_rows_max=_positive_int(lowered, "arrow.batch.rows.max", ARROW_BATCH_ROWS_MAX_DEFAULT),
        request_timeout_ms=_positive_int(lowered, "kafka.request.timeout.ms", REQUEST_TIMEOUT_MS_DEFAULT),
        isolation_level=1 if isolation == "read_committed" else 0,
        client_rack=lowered.get("kafka.client.rack", "").strip(),
        security=_security(lowered),
    )


def parse_include_headers(options) -> bool:
    """The includeHeaders option alone (it decides the schema). Raises FlotillaOptionError."""
    return _bool(_lower(options), "includeHeaders", False)


def parse_sink_options(options) -> SinkOptions:
    """Check and parse a writer's options. Raises FlotillaOptionError naming the option."""
    lowered = _lower(options)
    for name in ("subscribe", "subscribePattern", "assign"):
        if name.lower() in lowered:
            raise FlotillaOptionError(f"option '{name}' is for reading; a writer takes 'topic' or a topic column")
    topic = lowered.get("topic", "").strip() or None
    return SinkOptions(_bootstrap(lowered), topic,
                       _positive_int(lowered, "kafka.request.timeout.ms", REQUEST_TIMEOUT_MS_DEFAULT),
                       _security(lowered))


def offsets_json_dict(offsets: dict[str, dict[int, int]]) -> dict[str, dict[str, int]]:
    """The offset dict handed to Spark: topics sorted, partitions sorted numerically, keys as strings."""
    return {topic: {str(p): offsets[topic][p] for p in sorted(offsets[topic])} for topic in sorted(offsets)}


def offsets_from_json_dict(offsets: dict) -> dict[str, dict[int, int]]:
    """The inverse of offsets_json_dict (Spark hands offsets back as parsed JSON)."""
    return {topic: {int(p): int(o) for p, o in partitions.items()} for topic, partitions in offsets.items()}
