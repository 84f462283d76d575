"""Where each config value comes from: Kafka's config sources for topics and brokers, sans-IO.

A topic's effective value of a config is the first of: the topic's own override (TOPIC_CONFIG), this broker's
dynamic config (DYNAMIC_BROKER_CONFIG, an IncrementalAlterConfigs on BROKER resource "<id>"), the cluster-wide
dynamic default (DYNAMIC_DEFAULT_BROKER_CONFIG, BROKER resource ""), the node's config file
(STATIC_BROKER_CONFIG) and Kafka's default (DEFAULT_CONFIG). Broker-level names are Kafka's
(`log.retention.ms` for the topic's `retention.ms`, metadata/configs.py BROKER_TO_TOPIC_CONFIG). Dynamic
values live in the metadata log as ConfigRecords, so they reach every broker in log order and survive
restarts; `BrokerCore` applies the effective values to its partitions on every metadata delta.

`describe_topic` and `describe_broker` give DescribeConfigs' entries: (name, value, source, read_only,
synonyms), the synonyms being the whole chain from the winning source down, as Kafka lists them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from metadata.configs import BROKER_ONLY_CONFIGS, BROKER_ONLY_DEFAULTS, BROKER_TO_TOPIC_CONFIG
from metadata.records import ConfigResourceType
from partitions.log_config import LONG_MAX, LogConfig

TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
CLIENT_METRICS_CONFIG = 7  # a client telemetry subscription's config (KIP-714)
CLUSTER_DEFAULT = ""  # the BROKER resource name of the cluster-wide dynamic defaults

TOPIC_TO_BROKER_CONFIG = {topic: broker for broker, topic in BROKER_TO_TOPIC_CONFIG.items()}
# Kafka 3.9's default of every topic config (DescribeConfigs lists each, as Kafka's LogConfig does).
KAFKA_TOPIC_DEFAULTS = {**LogConfig().to_topic_configs(), "unclean.leader.election.enable": "false",
                        "compression.type": "producer", "min.insync.replicas": "1",
                        "leader.replication.throttled.replicas": "", "follower.replication.throttled.replicas": "",
                        "segment.jitter.ms": "0", "preallocate": "false",
                        "message.downconversion.enable": "true", "message.format.version": "3.0-IV1",
                        "message.timestamp.difference.max.ms": str(LONG_MAX)}


@dataclass(frozen=True)
class Entry:
    name: str
    value: str | None
    source: int
    read_only: bool = False
    synonyms: tuple[tuple[str, str | None, int], ...] = ()  # (name, value, source), winner first


def broker_chain(image: Any, broker_id: int, static: dict[str, str], broker_name: str) -> list[tuple[str, str, int]]:
    """(name, value, source) of a broker-level config from the most to the least specific source."""
    chain = []
    per_broker = image.configs.get(ConfigResourceType.BROKER, str(broker_id)).get(broker_name)
    if per_broker is not None:
        chain.append((broker_name, per_broker, DYNAMIC_BROKER_CONFIG))
    default = image.configs.get(ConfigResourceType.BROKER, CLUSTER_DEFAULT).get(broker_name)
    if default is not None:
        chain.append((broker_name, default, DYNAMIC_DEFAULT_BROKER_CONFIG))
    if broker_name in static:
        chain.append((broker_name, static[broker_name], STATIC_BROKER_CONFIG))
    return chain


def topic_chain(image: Any, broker_id: int, static: dict[str, str], topic: str,
                name: str, overrides: dict[str, str] | None = None) -> list[tuple[str, str, int]]:
    """(name, value, source) of a topic config from the most to the least specific source; the topic's own
    configs are `overrides` when given (a topic the image does not hold yet), else the image's."""
    chain = []
    override = (image.configs.topic(topic) if overrides is None else overrides).get(name)
    if override is not None:
        chain.append((name, override, TOPIC_CONFIG))
    broker_name = TOPIC_TO_BROKER_CONFIG.get(name)
    if broker_name is not None:
        chain += broker_chain(image, broker_id, static, broker_name)
    if name in KAFKA_TOPIC_DEFAULTS:
        chain.append((name, KAFKA_TOPIC_DEFAULTS[name], DEFAULT_CONFIG))
    return chain


def effective_topic_configs(image: Any, broker_id: int, static: dict[str, str], topic: str) -> dict[str, str]:
    """The topic's configs that differ from Kafka's defaults by some source (what LogConfig is built from)."""
    configs = {}
    for broker_name, topic_name in BROKER_TO_TOPIC_CONFIG.items():
        chain = broker_chain(image, broker_id, static, broker_name)
        if chain:
            configs[topic_name] = chain[0][1]
    configs.update(image.configs.topic(topic))
    return configs


def _entry(chain: list[tuple[str, str, int]], name: str, read_only: bool = False) -> Entry:
    winner = chain[0] if chain else (name, None, DEFAULT_CONFIG)
    return Entry(name, winner[1], winner[2], read_only, tuple(chain))


def describe_topic(image: Any, broker_id: int, static: dict[str, str], topic: str,
                   overrides: dict[str, str] | None = None) -> list[Entry]:
    """Every config of the topic with its winning source; with `overrides`, of a topic created with those
    configs that the image does not hold yet (Kafka's computeEffectiveTopicConfigs for CreateTopics v5+)."""
    own = image.configs.topic(topic) if overrides is None else overrides
    names = sorted(set(KAFKA_TOPIC_DEFAULTS) | set(own))
    return [_entry(topic_chain(image, broker_id, static, topic, name, own), name) for name in names]


def describe_broker(image: Any, broker_id: int, static: dict[str, str], resource_name: str,
                    read_only: dict[str, str]) -> list[Entry]:
    """A broker's configs (resource "<id>"): every dynamic-able config with its winning source (the topic configs'
    broker-level defaults and the replication throttle rates), plus the read-only ones; the cluster default
    resource ("") lists only the dynamic defaults that are set."""
    if resource_name == CLUSTER_DEFAULT:
        defaults = image.configs.get(ConfigResourceType.BROKER, CLUSTER_DEFAULT)
        return [Entry(name, value, DYNAMIC_DEFAULT_BROKER_CONFIG, False,
                      ((name, value, DYNAMIC_DEFAULT_BROKER_CONFIG),)) for name, value in sorted(defaults.items())]
    target = int(resource_name)
    entries = []
    for broker_name, topic_name in sorted(BROKER_TO_TOPIC_CONFIG.items()):
        chain = broker_chain(image, target, static, broker_name)
        if topic_name in KAFKA_TOPIC_DEFAULTS:
            chain.append((broker_name, KAFKA_TOPIC_DEFAULTS[topic_name], DEFAULT_CONFIG))
        entries.append(_entry(chain, broker_name))
    for name in sorted(BROKER_ONLY_CONFIGS):  # the replication throttle rates, producer.id.expiration.ms
        entries.append(_entry(broker_chain(image, target, static, name) + [(name, BROKER_ONLY_DEFAULTS[name],
                                                                            DEFAULT_CONFIG)], name))
    entries += [Entry(name, value, STATIC_BROKER_CONFIG, True, ((name, value, STATIC_BROKER_CONFIG),))
                for name, value in sorted(read_only.items())]
    return sorted(entries, key=lambda entry: entry.name)
