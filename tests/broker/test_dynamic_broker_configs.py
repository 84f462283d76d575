"""Dynamic broker configs (Kafka's BROKER resources): a per-broker value beats the cluster-wide dynamic
default, which beats the file, which beats Kafka's default; topics inherit them; DescribeConfigs names the
source of each value (sans-IO, real BrokerCores and controller)."""

from broker import config_sources as cs
from metadata.records import ConfigResourceType
from metadata.requests import (
    AlterableConfig,
    ConfigResource,
    CreatableTopic,
    CreateTopicsRequest,
    IncrementalAlterConfigsRequest,
)
from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode
from tests.broker.test_broker_sans_io import Cluster


def alter(cluster, resource_name, name, value):
    response = cluster.commit(IncrementalAlterConfigsRequest(resources=(ConfigResource(
        ConfigResourceType.BROKER, resource_name, (AlterableConfig(name, value),)),)))
    assert response.resources[0].error_code == ErrorCode.NONE, response


def describe(cluster, broker_id, resource_type, name, synonyms=True):
    request = messages.DescribeConfigsRequest(resources=[messages.DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=resource_type, resource_name=name, configuration_keys=None)], include_synonyms=synonyms)
    result = cluster.call(broker_id, ApiKey.DESCRIBE_CONFIGS, 2, request).results[0]
    assert result.error_code == ErrorCode.NONE, result.error_message
    return {c.name: c for c in result.configs}


def test_per_broker_beats_cluster_default_beats_file_beats_kafka_default():
    cluster = Cluster()
    cluster.commit(CreateTopicsRequest(topics=(CreatableTopic(name="t", num_partitions=1, replication_factor=3),)))
    retention = describe(cluster, 1, ConfigResourceType.TOPIC, "t")["retention.ms"]
    assert (retention.value, retention.config_source) == ("604800000", cs.DEFAULT_CONFIG)
    alter(cluster, "", "log.retention.ms", "3600000")
    alter(cluster, "1", "log.retention.ms", "60000")
    on_one = describe(cluster, 1, ConfigResourceType.TOPIC, "t")["retention.ms"]
    on_two = describe(cluster, 2, ConfigResourceType.TOPIC, "t")["retention.ms"]
    assert (on_one.value, on_one.config_source) == ("60000", cs.DYNAMIC_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in on_one.synonyms] == [
        ("log.retention.ms", "60000", cs.DYNAMIC_BROKER_CONFIG),
        ("log.retention.ms", "3600000", cs.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("retention.ms", "604800000", cs.DEFAULT_CONFIG)]
    assert (on_two.value, on_two.config_source) == ("3600000", cs.DYNAMIC_DEFAULT_BROKER_CONFIG)
    # The partitions follow: each broker's replica of t runs with its effective retention.
    assert cluster.brokers[1].partitions[("t", 0)].log.config.retention_ms == 60000
    assert cluster.brokers[2].partitions[("t", 0)].log.config.retention_ms == 3600000
    # A topic override wins over everything.
    cluster.commit(IncrementalAlterConfigsRequest(resources=(ConfigResource(
        ConfigResourceType.TOPIC, "t", (AlterableConfig("retention.ms", "5000"),)),)))
    assert cluster.brokers[1].partitions[("t", 0)].log.config.retention_ms == 5000
    assert describe(cluster, 1, ConfigResourceType.TOPIC, "t")["retention.ms"].config_source == cs.TOPIC_CONFIG


def test_describing_broker_resources_names_each_source():
    cluster = Cluster()
    alter(cluster, "", "log.segment.bytes", "2000000")
    alter(cluster, "2", "min.insync.replicas", "1")
    broker_two = describe(cluster, 1, ConfigResourceType.BROKER, "2")
    assert (broker_two["min.insync.replicas"].value, broker_two["min.insync.replicas"].config_source) == \
        ("1", cs.DYNAMIC_BROKER_CONFIG)
    assert broker_two["log.segment.bytes"].config_source == cs.DYNAMIC_DEFAULT_BROKER_CONFIG
    assert broker_two["log.retention.ms"].config_source == cs.DEFAULT_CONFIG
    assert broker_two["broker.id"].read_only and broker_two["broker.id"].value == "2"
    defaults = describe(cluster, 1, ConfigResourceType.BROKER, "")
    assert {name: c.value for name, c in defaults.items()} == {"log.segment.bytes": "2000000"}
    # The file's min.insync.replicas (the cluster's topic_defaults) is a static broker config.
    broker_one = describe(cluster, 1, ConfigResourceType.BROKER, "1")
    assert broker_one["min.insync.replicas"].config_source == cs.STATIC_BROKER_CONFIG


def test_unknown_and_read_only_broker_configs_are_refused():
    cluster = Cluster()
    for name in ("broker.id", "no.such.config"):
        response = cluster.commit(IncrementalAlterConfigsRequest(resources=(ConfigResource(
            ConfigResourceType.BROKER, "", (AlterableConfig(name, "1"),)),)))
        assert response.resources[0].error_code == ErrorCode.INVALID_CONFIG
    request = messages.DescribeConfigsRequest(resources=[messages.DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=ConfigResourceType.BROKER, resource_name="x", configuration_keys=None)])
    assert cluster.call(1, ApiKey.DESCRIBE_CONFIGS, 2, request).results[0].error_code == ErrorCode.INVALID_REQUEST
