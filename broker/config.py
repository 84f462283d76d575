"""The cluster config file (TOML), validated with errors that name the file and the key.

Theory of operation: `load_config(path)` reads the file with the standard library's tomllib and turns it
into a frozen `ClusterConfig`. Every problem (missing file, bad TOML, unknown key, wrong type, duplicate node
id or port, missing role) raises `ConfigError` whose message names the file and the key; the CLI prints it
and exits with code 2 before anything starts. `default_config(base_dir)` is the embedded default used by
`flotilla up` without --config: 3 nodes on 127.0.0.1, Kafka ports 9092-9094, controller ports 9192-9194,
data under ./flotilla-data.

Layout (DESIGN.md, "The node"):

    cluster_id = "local-dev"
    secret = "..."                      # optional: authenticates the controller listener
    [[nodes]]
    id = 1
    host = "127.0.0.1"
    kafka_port = 9092
    controller_port = 9192
    roles = ["broker", "controller"]
    data_dir = "flotilla-data/node-1"   # relative to the config file
    [topic_defaults]
    partitions = 3
    replication_factor = 3
    min_insync_replicas = 2
    [topic_defaults.configs]            # optional: cluster defaults of topic configs (server.properties' log.*)
    "retention.ms" = 604800000          # by the topic configs' names, quoted; a topic's own value wins
    [broker]                            # optional broker settings (Kafka names in snake case)
    auto_create_topics_enable = true
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from typing import Any, Mapping

from broker.security_config import ConfigError, Listener, SecuritySettings, parse_listeners, parse_security
from metadata.configs import BROKER_TO_TOPIC_CONFIG, validate_topic_config, validate_topic_config_set
from partitions.errors import KafkaError

ROLES = ("broker", "controller")
__all__ = ["ConfigError", "ClusterConfig", "NodeConfig", "Listener", "SecuritySettings", "load_config",
           "parse_config", "default_config"]


@dataclass(frozen=True)
class NodeConfig:
    id: int
    host: str
    kafka_port: int
    controller_port: int
    roles: tuple[str, ...]
    data_dir: str  # absolute
    # The Kafka listeners; `kafka_port` is the inter-broker one's port (the first listener unless
    # security.inter_broker_listener_name names another).
    listeners: tuple[Listener, ...] = ()
    metrics_port: int | None = None  # Prometheus text on http://host:metrics_port/metrics; off when unset
    rack: str | None = None  # Kafka's broker.rack: rack-aware replica placement and, with
    # [broker] replica_selector = "rack", consumers fetching from a replica in their rack (KIP-392)

    @property
    def inter_broker_listener(self) -> Listener:
        return next(listener for listener in self.listeners if listener.port == self.kafka_port)

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles


@dataclass(frozen=True)
class TopicDefaults:
    partitions: int = 3
    replication_factor: int = 3
    min_insync_replicas: int = 2
    # [topic_defaults.configs]: the cluster's defaults of topic configs, for every topic without its own value, as
    # Kafka's server.properties sets them with its log.* keys (log.retention.ms for retention.ms), by the topic
    # configs' names: (("retention.ms", "604800000"), ...). DescribeConfigs shows them as STATIC_BROKER_CONFIG.
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class BrokerSettings:
    auto_create_topics_enable: bool = True
    broker_session_timeout_ms: int = 9000
    broker_heartbeat_interval_ms: int = 2000
    replica_lag_time_max_ms: int = 30000
    request_bytes_max: int = 100 * 1024 * 1024
    connections_idle_ms_max: int = 600_000
    # Kafka's max.connections over the node's Kafka listeners (None: half the process's file descriptor limit)
    # and max.connections.per.ip with its overrides ("host:count,host:count"); net/connections.py.
    connections_max: int | None = None
    connections_per_ip_max: int | None = None
    connections_per_ip_overrides: str = ""
    connection_creation_rate_max: int | None = None  # Kafka's max.connection.creation.rate (None: no limit)
    # Per listener, by name (a TOML table such as { EXTERNAL = 1000 }): Kafka's listener.name.<name>.max.connections
    # and listener.name.<name>.max.connection.creation.rate; a listener not named has no limit of its own.
    listener_connections_max: Mapping[str, int] = field(default_factory=dict)
    listener_connection_creation_rate_max: Mapping[str, int] = field(default_factory=dict)
    inflight_requests_max: int = 64
    log_flush_messages: int | None = None
    log_flush_ms: int | None = None
    # Kafka's log.retention.check.interval.ms: how often a broker applies retention and compacts the logs of
    # compacted topics (Kafka's cleaner runs on its own log.cleaner.backoff.ms; here one interval serves both).
    log_retention_check_interval_ms: int = 30_000
    # Bytes of segments the log cleaner reads per broker tick (20 ms), over all partitions (as much again in the tick
    # of a retention check that starts new passes): a compaction pass runs in steps beside the requests (Kafka runs
    # its cleaner on threads of its own, log.cleaner.threads).
    log_cleaner_step_bytes: int = 512 * 1024
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3_000
    group_max_size: int = 1_000
    group_consumer_session_timeout_ms: int = 45_000  # KIP-848 groups: the coordinator's, not the client's
    group_consumer_heartbeat_interval_ms: int = 5_000
    # KIP-848's online migration between the protocols (Kafka's group.consumer.migration.policy)
    group_consumer_migration_policy: str = "bidirectional"
    offsets_retention_minutes: int = 7 * 24 * 60
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_min_isr: int = 2
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000
    # producer.id.expiration.ms: an idle producer's state (its sequence numbers) is kept this long; None: Kafka's
    # default, a day. Dynamic too: `flotilla brokers alter-config` sets it per broker or cluster-wide.
    producer_id_expiration_ms: int | None = None
    # The level of the feature transaction.version (KIP-890) a new cluster starts at: 2 bumps the producer epoch
    # per transaction for clients that use it (Kafka 4.0's default); 0 or 1 keeps every client on the
    # transaction protocol of 3.x. The active controller writes it to the metadata log with the first broker
    # registration; from then on the log's level holds (changed with UpdateFeatures, `flotilla features`).
    transaction_version: int = 2
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_per_broker_percentage: int = 10
    leader_imbalance_check_interval_seconds: int = 300
    # KIP-392, Kafka's replica.selector.class: "" (consumers fetch from leaders only) or "rack" (Kafka's
    # RackAwareReplicaSelector: a leader names an in-sync replica in the consumer's client.rack as its preferred
    # read replica, and followers serve consumer fetches up to their high watermark).
    replica_selector: str = ""


@dataclass(frozen=True)
class ClusterConfig:
    cluster_id: str
    nodes: tuple[NodeConfig, ...]
    topic_defaults: TopicDefaults = field(default_factory=TopicDefaults)
    broker: BrokerSettings = field(default_factory=BrokerSettings)
    secret: bytes | None = None
    source: str = "<embedded default>"
    security: SecuritySettings = field(default_factory=SecuritySettings)

    def node(self, node_id: int) -> NodeConfig:
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise ConfigError(f"{self.source}: no node with id {node_id} (nodes: {[n.id for n in self.nodes]})")

    @property
    def controllers(self) -> tuple[NodeConfig, ...]:
        return tuple(n for n in self.nodes if n.is_controller)

    @property
    def brokers(self) -> tuple[NodeConfig, ...]:
        return tuple(n for n in self.nodes if n.is_broker)


_TOP_KEYS = {"cluster_id", "secret", "nodes", "topic_defaults", "broker", "security"}
_NODE_KEYS = {"id", "host", "kafka_port", "listeners", "controller_port", "roles", "data_dir", "metrics_port", "rack"}
REPLICA_SELECTORS = ("", "rack")
MIGRATION_POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")  # groupcoord.config


def load_config(path: str) -> ClusterConfig:
    """Read and validate the TOML file at `path`. Raises ConfigError naming the file and key."""
    try:
        with open(path, "rb") as config_file:
            document = tomllib.load(config_file)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a config file") from None
    except PermissionError:
        raise ConfigError(f"{path}: cannot read the config file (permission denied)") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: invalid TOML: {error}") from None
    base_dir = os.path.dirname(os.path.abspath(path))
    return parse_config(document, source=path, base_dir=base_dir)


def parse_config(document: dict[str, Any], source: str, base_dir: str) -> ClusterConfig:
    """Validate a decoded TOML document. Raises ConfigError naming `source` and the key."""
    _reject_unknown(document, _TOP_KEYS, source, "")
    cluster_id = _typed(document, "cluster_id", str, source, "", required=True)
    if not cluster_id:
        raise ConfigError(f"{source}: key 'cluster_id' must not be empty")
    secret_text = _typed(document, "secret", str, source, "", required=False)
    raw_nodes = document.get("nodes")
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise ConfigError(f"{source}: key 'nodes' must be a non-empty array of tables ([[nodes]])")
    security = parse_security(document, source, base_dir)
    nodes = tuple(_parse_node(raw, index, source, base_dir, security) for index, raw in enumerate(raw_nodes))
    _check_unique(nodes, source)
    if not any(node.is_controller for node in nodes):
        raise ConfigError(f"{source}: key 'nodes[].roles': at least one node needs the 'controller' role")
    raw_defaults = document.get("topic_defaults", {})
    default_configs: tuple[tuple[str, str], ...] = ()
    if isinstance(raw_defaults, dict) and "configs" in raw_defaults:
        default_configs = _parse_topic_default_configs(raw_defaults["configs"], source)
        document = {**document, "topic_defaults": {k: v for k, v in raw_defaults.items() if k != "configs"}}
    topic_defaults = dataclasses.replace(_parse_section(document, "topic_defaults", TopicDefaults, source),
                                         configs=default_configs)
    broker = _parse_section(document, "broker", BrokerSettings, source)
    if broker.group_consumer_migration_policy not in MIGRATION_POLICIES:
        raise ConfigError(f"{source}: key 'broker.group_consumer_migration_policy' must be one of "
                          f"{list(MIGRATION_POLICIES)}, got {broker.group_consumer_migration_policy!r}")
    if broker.replica_selector not in REPLICA_SELECTORS:
        raise ConfigError(f"{source}: key 'broker.replica_selector' must be one of {list(REPLICA_SELECTORS)}, "
                          f"got {broker.replica_selector!r}")
    if not 0 <= broker.leader_imbalance_per_broker_percentage <= 100:
        raise ConfigError(f"{source}: key 'broker.leader_imbalance_per_broker_percentage' must be between 0 and 100")
    for key, lowest in (("connections_max", 1), ("connections_per_ip_max", 0), ("connection_creation_rate_max", 1)):
        if getattr(broker, key) is not None and getattr(broker, key) < lowest:
            raise ConfigError(f"{source}: key 'broker.{key}' must be >= {lowest}, got {getattr(broker, key)}")
    _check_listener_limits(broker, nodes, source)
    try:
        parse_connection_overrides(broker.connections_per_ip_overrides)
    except ValueError as error:
        raise ConfigError(f"{source}: key 'broker.connections_per_ip_overrides': {error} "
                          f"(write \"host:count,host:count\")") from None
    if not 0 <= broker.transaction_version <= 2:
        raise ConfigError(f"{source}: key 'broker.transaction_version' must be 0, 1 or 2")
    if broker.producer_id_expiration_ms is not None and broker.producer_id_expiration_ms < 1:
        raise ConfigError(f"{source}: key 'broker.producer_id_expiration_ms' must be >= 1, "
                          f"got {broker.producer_id_expiration_ms}")
    if broker.leader_imbalance_check_interval_seconds < 1:
        raise ConfigError(f"{source}: key 'broker.leader_imbalance_check_interval_seconds' must be >= 1")
    if broker.log_cleaner_step_bytes < 1:
        raise ConfigError(f"{source}: key 'broker.log_cleaner_step_bytes' must be >= 1, got {broker.log_cleaner_step_bytes}")
    if broker.log_retention_check_interval_ms < 1:
        raise ConfigError(f"{source}: key 'broker.log_retention_check_interval_ms' must be >= 1, "
                          f"got {broker.log_retention_check_interval_ms}")
    if topic_defaults.partitions < 1:
        raise ConfigError(f"{source}: key 'topic_defaults.partitions' must be >= 1")
    if not 1 <= topic_defaults.min_insync_replicas <= max(topic_defaults.replication_factor, 1):
        raise ConfigError(
            f"{source}: key 'topic_defaults.min_insync_replicas' must be between 1 and replication_factor"
        )
    if topic_defaults.replication_factor < 1:
        raise ConfigError(f"{source}: key 'topic_defaults.replication_factor' must be >= 1")
    return ClusterConfig(
        cluster_id=cluster_id,
        nodes=nodes,
        topic_defaults=topic_defaults,
        broker=broker,
        secret=secret_text.encode() if secret_text else None,
        source=source,
        security=security,
    )


def _parse_node(raw: Any, index: int, source: str, base_dir: str, security: SecuritySettings) -> NodeConfig:
    where = f"nodes[{index}]."
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: key 'nodes[{index}]' must be a table")
    _reject_unknown(raw, _NODE_KEYS, source, where)
    node_id = _typed(raw, "id", int, source, where, required=True)
    if node_id < 0:
        raise ConfigError(f"{source}: key '{where}id' must be >= 0")
    host = _typed(raw, "host", str, source, where, required=False) or "127.0.0.1"
    roles = raw.get("roles")
    if roles is None:
        raise ConfigError(f"{source}: key '{where}roles' is missing (use [\"broker\", \"controller\"])")
    if not isinstance(roles, list) or not roles or any(role not in ROLES for role in roles):
        raise ConfigError(f"{source}: key '{where}roles' must be a non-empty list of {list(ROLES)}, got {roles!r}")
    # A controller-only node (KRaft's dedicated controller) serves no Kafka clients: its Kafka listener is
    # optional, and not opened.
    if "broker" not in roles and "kafka_port" not in raw and "listeners" not in raw:
        listeners, kafka_port = (), 0
    else:
        listeners, kafka_port = _node_listeners(raw, host, security, source, where)
    # A broker-only node (a KRaft observer) has no controller port: it fetches the metadata log from the
    # controllers' ports.
    controller_port = _port(raw, "controller_port", source, where) \
        if "controller" in roles or "controller_port" in raw else 0
    data_dir = _typed(raw, "data_dir", str, source, where, required=False) or f"flotilla-data/node-{node_id}"
    rack = _typed(raw, "rack", str, source, where, required=False)
    if rack is not None and not rack.strip():
        raise ConfigError(f"{source}: key '{where}rack' must not be empty (leave it out for no rack)")
    return NodeConfig(
        id=node_id,
        host=host,
        kafka_port=kafka_port,
        controller_port=controller_port,
        roles=tuple(dict.fromkeys(roles)),
        data_dir=os.path.normpath(os.path.join(base_dir, data_dir)),
        listeners=listeners,
        metrics_port=_port(raw, "metrics_port", source, where) if "metrics_port" in raw else None,
        rack=rack,
    )


def _node_listeners(raw: dict[str, Any], host: str, security: SecuritySettings, source: str,
                    where: str) -> tuple[tuple[Listener, ...], int]:
    """The node's listeners and the inter-broker listener's port (`kafka_port` means one PLAINTEXT listener)."""
    if "listeners" in raw and "kafka_port" in raw:
        raise ConfigError(f"{source}: keys '{where}kafka_port' and '{where}listeners' exclude each other "
                          f"(kafka_port = N is listeners = [\"PLAINTEXT://host:N\"])")
    if "listeners" not in raw:
        port = _port(raw, "kafka_port", source, where)
        return (Listener("PLAINTEXT", host, port, "PLAINTEXT"),), port
    listeners = parse_listeners(raw["listeners"], host, security, source, where)
    name = security.inter_broker_listener_name
    if name is None:
        return listeners, listeners[0].port
    for listener in listeners:
        if listener.name == name:
            return listeners, listener.port
    raise ConfigError(f"{source}: key '{where}listeners' has no listener named {name!r} "
                      f"(security.inter_broker_listener_name)")


def _check_unique(nodes: tuple[NodeConfig, ...], source: str) -> None:
    seen_ids: set[int] = set()
    seen_ports: set[tuple[str, int]] = set()
    for index, node in enumerate(nodes):
        if node.id in seen_ids:
            raise ConfigError(f"{source}: key 'nodes[{index}].id': duplicate node id {node.id}")
        seen_ids.add(node.id)
        listener_key = "kafka_port" if len(node.listeners) == 1 and node.listeners[0].name == "PLAINTEXT" else "listeners"
        ports = [(listener_key, listener.port) for listener in node.listeners]
        if node.controller_port:
            ports.append(("controller_port", node.controller_port))
        if node.metrics_port is not None:
            ports.append(("metrics_port", node.metrics_port))
        for key, port in ports:
            if (node.host, port) in seen_ports:
                raise ConfigError(f"{source}: key 'nodes[{index}].{key}': port {port} on {node.host} is used twice")
            seen_ports.add((node.host, port))


def _parse_section(document: dict[str, Any], name: str, cls: type, source: str) -> Any:
    raw = document.get(name, {})
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: key '{name}' must be a table")
    fields = cls.__dataclass_fields__
    _reject_unknown(raw, set(fields), source, name + ".")
    values = {}
    for key, value in raw.items():
        default = getattr(cls(), key)
        expected = type(default) if default is not None else int
        if expected is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise ConfigError(f"{source}: key '{name}.{key}' must be an integer, got {value!r}")
        if expected is bool and not isinstance(value, bool):
            raise ConfigError(f"{source}: key '{name}.{key}' must be true or false, got {value!r}")
        if expected is str and not isinstance(value, str):
            raise ConfigError(f"{source}: key '{name}.{key}' must be a string, got {value!r}")
        if expected is dict:
            if not isinstance(value, dict):
                raise ConfigError(f"{source}: key '{name}.{key}' must be a table of names to integers "
                                  f"(such as {{ EXTERNAL = 100 }}), got {value!r}")
            for entry, count in value.items():
                if isinstance(count, bool) or not isinstance(count, int):
                    raise ConfigError(f"{source}: key '{name}.{key}.{entry}' must be an integer, got {count!r}")
        values[key] = value
    return cls(**values)


# Topic configs whose cluster default the file sets with another key.
_DEFAULTED_ELSEWHERE = {"min.insync.replicas": "topic_defaults.min_insync_replicas",
                        "flush.messages": "broker.log_flush_messages", "flush.ms": "broker.log_flush_ms"}


def _parse_topic_default_configs(raw: Any, source: str) -> tuple[tuple[str, str], ...]:
    """[topic_defaults.configs]: topic config name -> value (a string, number or boolean), each validated as
    Kafka validates the topic config."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: key 'topic_defaults.configs' must be a table of topic config names to values "
                          f"(such as \"retention.ms\" = 86400000), got {raw!r}")
    defaultable = sorted(set(BROKER_TO_TOPIC_CONFIG.values()) - set(_DEFAULTED_ELSEWHERE))
    configs = []
    for name, value in raw.items():
        key = f'topic_defaults.configs."{name}"'
        if isinstance(value, dict):  # `retention.ms = 1` unquoted: TOML reads a table "retention" with a key "ms"
            raise ConfigError(f"{source}: key 'topic_defaults.configs.{name}' is a table: write the config name in "
                              f"quotes (\"{name}.{next(iter(value), '')}\" = ...)")
        if name in _DEFAULTED_ELSEWHERE:
            raise ConfigError(f"{source}: key '{key}': set this default with the key '{_DEFAULTED_ELSEWHERE[name]}'")
        if name not in defaultable:
            raise ConfigError(f"{source}: key '{key}': not a topic config with a cluster default "
                              f"(one of: {', '.join(defaultable)})")
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (int, float, str)):
            text = str(value)
        else:
            raise ConfigError(f"{source}: key '{key}' must be a string, a number or true/false, got {value!r}")
        try:
            validate_topic_config(name, text)
        except KafkaError as error:
            raise ConfigError(f"{source}: key '{key}': {error}") from None
        configs.append((name, text))
    try:
        validate_topic_config_set(dict(configs))
    except KafkaError as error:
        raise ConfigError(f"{source}: key 'topic_defaults.configs': {error}") from None
    return tuple(sorted(configs))


def _check_listener_limits(broker: BrokerSettings, nodes: tuple[NodeConfig, ...], source: str) -> None:
    """Each per-listener limit names a listener some node has, and is at least 1."""
    names = {listener.name for node in nodes for listener in node.listeners}
    for key in ("listener_connections_max", "listener_connection_creation_rate_max"):
        for name, value in getattr(broker, key).items():
            if name not in names:
                raise ConfigError(f"{source}: key 'broker.{key}.{name}': no node has a listener named {name!r} "
                                  f"(listeners: {', '.join(sorted(names))})")
            if value < 1:
                raise ConfigError(f"{source}: key 'broker.{key}.{name}' must be >= 1, got {value}")


def parse_connection_overrides(text: str) -> dict[str, int]:
    """Kafka's max.connections.per.ip.overrides: "host:count,host:count" (hosts as the peer address reads).
    Raises ValueError naming the bad entry."""
    overrides: dict[str, int] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        host, separator, count = entry.rpartition(":")
        if not separator or not host or not count.isdigit():
            raise ValueError(f"{entry!r} is not host:count")
        overrides[host] = int(count)
    return overrides


def _reject_unknown(table: dict[str, Any], allowed: set[str], source: str, where: str) -> None:
    for key in table:
        if key not in allowed:
            raise ConfigError(f"{source}: unknown key '{where}{key}' (allowed: {', '.join(sorted(allowed))})")


def _typed(table: dict[str, Any], key: str, expected: type, source: str, where: str, required: bool) -> Any:
    if key not in table:
        if required:
            raise ConfigError(f"{source}: key '{where}{key}' is missing")
        return None
    value = table[key]
    if expected is int and isinstance(value, bool) or not isinstance(value, expected):
        raise ConfigError(f"{source}: key '{where}{key}' must be a {expected.__name__}, got {value!r}")
    return value


def _port(table: dict[str, Any], key: str, source: str, where: str) -> int:
    port = _typed(table, key, int, source, where, required=True)
    if not 0 < port < 65536:
        raise ConfigError(f"{source}: key '{where}{key}' must be a port between 1 and 65535, got {port}")
    return port


EMBEDDED_NODES_MAX = 9  # Kafka ports 9092-9100, controller ports 9192-9200


def default_config(base_dir: str | None = None, nodes: int = 3) -> ClusterConfig:
    """The embedded default: `nodes` (3) broker+controller nodes on 127.0.0.1, Kafka ports from 9092,
    controller ports from 9192, data under ./flotilla-data; replication factor min(nodes, 3)."""
    assert 1 <= nodes <= EMBEDDED_NODES_MAX, nodes
    base_dir = os.path.abspath(base_dir or os.getcwd())
    replication = min(nodes, 3)
    document = {
        "cluster_id": "local-dev",
        "nodes": [
            {
                "id": node_id,
                "host": "127.0.0.1",
                "kafka_port": 9091 + node_id,
                "controller_port": 9191 + node_id,
                "roles": ["broker", "controller"],
                "data_dir": f"flotilla-data/node-{node_id}",
            }
            for node_id in range(1, nodes + 1)
        ],
        "topic_defaults": {"partitions": 3, "replication_factor": replication,
                           "min_insync_replicas": 1 if replication == 1 else 2},
        "broker": {} if replication == 3 else {"offsets_topic_replication_factor": replication,
                                               "transaction_state_log_replication_factor": replication,
                                               "transaction_state_log_min_isr": min(replication, 2)},
    }
    return parse_config(document, source="<embedded default>", base_dir=base_dir)
