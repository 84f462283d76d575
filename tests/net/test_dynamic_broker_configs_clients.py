"""Dynamic broker configs with confluent-kafka's AdminClient on real nodes: incremental_alter_configs on BROKER
resources, describe_configs naming each source, and the values surviving a restart of every node."""

from __future__ import annotations

import time

import pytest

from cli.local_cluster import LocalCluster
from tests.net.cluster_helpers import FAST_BROKER_SETTINGS, cli, cli_json, create_topic, eventually, wait_for_quorum

pytestmark = [pytest.mark.slow, pytest.mark.external]


def test_incremental_alter_configs_on_broker_resources_survives_restarts(tmp_path):
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                       ResourceType)

    with LocalCluster(str(tmp_path), nodes=3, broker=FAST_BROKER_SETTINGS) as cluster:
        wait_for_quorum(cluster)
        create_topic(cluster, "inherits", 1, 3)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})

        def alter(name: str, key: str, value: str) -> None:
            resource = ConfigResource(ResourceType.BROKER, name, incremental_configs=[
                ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
            admin.incremental_alter_configs([resource])[resource].result(30)

        # The cluster-wide default (resource name ""): librdkafka refuses an empty name client-side, so it
        # goes through Flotilla's own client, as kafka-configs.sh --entity-default would.
        import trio

        from metadata.records import ConfigResourceType
        from net.client.aio import KafkaClient

        async def set_default() -> None:
            async with KafkaClient(cluster.bootstrap_servers) as client:
                await client.alter_configs("", {"log.retention.ms": "3600000"},
                                           resource_type=ConfigResourceType.BROKER)

        trio.run(set_default)
        alter("2", "log.retention.ms", "60000")

        def described(resource_type, name: str) -> dict:
            resource = ConfigResource(resource_type, name)
            return admin.describe_configs([resource])[resource].result(30)

        def sources_hold() -> bool:
            broker_two = described(ResourceType.BROKER, "2")["log.retention.ms"]
            broker_three = described(ResourceType.BROKER, "3")["log.retention.ms"]
            assert (broker_two.value, broker_two.source) == ("60000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
            assert (broker_three.value, broker_three.source) == \
                ("3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
            topic = described(ResourceType.TOPIC, "inherits")["retention.ms"]
            assert topic.source in (ConfigSource.DYNAMIC_BROKER_CONFIG.value,
                                    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
            return True

        eventually(sources_hold, 30, what="dynamic broker configs described with their sources")
        for node_id in cluster.kafka_ports:
            cluster.kill(node_id, signum=15)
        cluster.start()
        wait_for_quorum(cluster)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        eventually(sources_hold, 60, what="dynamic broker configs after restarting every node")


def test_topic_config_defaults_from_the_file_apply_below_the_dynamic_ones(tmp_path):
    """[topic_defaults.configs] in the cluster file: every topic without its own value takes it (described as
    STATIC_BROKER_CONFIG under Kafka's broker name), so a default cleanup.policy=compact makes a topic created
    with no configs refuse keyless records (INVALID_RECORD, KIP-467) while one created with cleanup.policy=delete
    takes them; the cluster-wide dynamic default, set with `flotilla brokers alter-config --default`, then wins
    over the file, and `flotilla brokers configs` and `topics configs` list each config with its source."""
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType

    defaults = {"partitions": 1, "replication_factor": 1, "min_insync_replicas": 1,
                "configs": {"cleanup.policy": "compact", "retention.ms": 7_200_000}}
    with LocalCluster(str(tmp_path), nodes=1, broker=FAST_BROKER_SETTINGS, topic_defaults=defaults) as cluster:
        wait_for_quorum(cluster)
        create_topic(cluster, "compacted-by-default", 1, 1)
        create_topic(cluster, "deleting", 1, 1, **{"cleanup.policy": "delete"})
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})

        def described(resource_type, name: str) -> dict:
            resource = ConfigResource(resource_type, name)
            return {key: (entry.value, entry.source)
                    for key, entry in admin.describe_configs([resource])[resource].result(30).items()}

        static = ConfigSource.STATIC_BROKER_CONFIG.value
        topic = described(ResourceType.TOPIC, "compacted-by-default")
        assert (topic["cleanup.policy"], topic["retention.ms"]) == (("compact", static), ("7200000", static))
        assert described(ResourceType.TOPIC, "deleting")["cleanup.policy"] == \
            ("delete", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
        broker = described(ResourceType.BROKER, "1")
        assert (broker["log.cleanup.policy"], broker["log.retention.ms"]) == (("compact", static), ("7200000", static))

        outcomes = {}
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": False,
                             "retries": 0})
        for name in ("compacted-by-default", "deleting"):
            producer.produce(name, value=b"no key", on_delivery=lambda error, message: outcomes.update(
                {message.topic(): error.code() if error else None}))
        assert producer.flush(30) == 0
        assert outcomes == {"compacted-by-default": KafkaError.INVALID_RECORD, "deleting": None}

        # `flotilla brokers alter-config --default` (kafka-configs --entity-default) sets the cluster-wide dynamic
        # default, which wins over the file; `flotilla brokers configs` lists each config with its source.
        bootstrap = ("-b", cluster.bootstrap_servers)
        assert cli_json("brokers", "configs", "--default", *bootstrap) == {
            "resource": "the cluster-wide broker defaults", "configs": []}
        for target in (("--default", "--set", "log.retention.ms=60000"),
                       ("1", "--set", "follower.replication.throttled.rate=1000000")):
            assert cli("brokers", "alter-config", *target, *bootstrap).returncode == 0
        eventually(lambda: described(ResourceType.TOPIC, "compacted-by-default")["retention.ms"] == (
            "60000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value), what="the dynamic default over the file")
        listed = {row["name"]: (row["value"], row["source"])
                  for row in cli_json("brokers", "configs", "1", *bootstrap)["configs"]}
        assert (listed["log.cleanup.policy"], listed["log.retention.ms"],
                listed["follower.replication.throttled.rate"]) == (
            ("compact", "STATIC_BROKER_CONFIG"), ("60000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
            ("1000000", "DYNAMIC_BROKER_CONFIG"))
        topic = cli_json("topics", "configs", "compacted-by-default", *bootstrap)
        assert topic["resource"] == "topic compacted-by-default" and [
            (row["name"], row["value"], row["source"]) for row in topic["configs"]] == [
            ("cleanup.policy", "compact", "STATIC_BROKER_CONFIG"),
            ("min.insync.replicas", "1", "STATIC_BROKER_CONFIG"),  # the file's topic_defaults.min_insync_replicas
            ("retention.ms", "60000", "DYNAMIC_DEFAULT_BROKER_CONFIG")]
        every = {row["name"]: row for row in cli_json("topics", "configs", "compacted-by-default", "--all",
                                                      *bootstrap)["configs"]}
        assert (every["max.compaction.lag.ms"]["value"], every["max.compaction.lag.ms"]["source"]) == (
            str(2**63 - 1), "DEFAULT_CONFIG")  # Kafka lists every topic config, defaults included
        missing = cli("topics", "configs", "nope", *bootstrap)
        assert missing.returncode == 1 and missing.stderr == "flotilla: topic 'nope' does not exist\n"
        refused = cli("brokers", "alter-config", "--default", "--set", "log.segment.bytes=tiny", *bootstrap)
        assert refused.returncode == 1 and refused.stderr.startswith(
            "flotilla: alter configs of the cluster-wide broker defaults: INVALID_CONFIG: Invalid value 'tiny'")


def test_producer_id_expiration_ms_from_the_file_and_set_dynamically_forgets_idle_producers(tmp_path):
    """producer.id.expiration.ms (KIP-854, a dynamic broker config): the file's [broker] producer_id_expiration_ms
    is described as STATIC_BROKER_CONFIG; set on the broker with IncrementalAlterConfigs it applies to the
    partitions already hosted, whose idle producers DescribeProducers then no longer lists; 0 is refused."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                       ResourceType)
    from kafka import KafkaAdminClient, TopicPartition

    broker = {**FAST_BROKER_SETTINGS, "log_retention_check_interval_ms": 500, "producer_id_expiration_ms": 3_600_000}
    with LocalCluster(str(tmp_path), nodes=1, broker=broker) as cluster:
        wait_for_quorum(cluster)
        create_topic(cluster, "idle-producers", 1, 1)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True})
        for value in range(3):
            producer.produce("idle-producers", value=b"%d" % value, partition=0)
        assert producer.flush(30) == 0
        kafka_admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        try:
            partition = TopicPartition("idle-producers", 0)

            def producers() -> list:
                return kafka_admin.describe_producers([partition])[partition].active_producers

            assert [state.last_sequence for state in producers()] == [2]

            def described() -> tuple[str, int]:
                resource = ConfigResource(ResourceType.BROKER, "1")
                entry = admin.describe_configs([resource])[resource].result(30)["producer.id.expiration.ms"]
                return entry.value, entry.source

            assert described() == ("3600000", ConfigSource.STATIC_BROKER_CONFIG.value)

            def alter(value: str) -> None:
                resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
                    ConfigEntry("producer.id.expiration.ms", value, incremental_operation=AlterConfigOpType.SET)])
                admin.incremental_alter_configs([resource])[resource].result(30)

            with pytest.raises(Exception, match="producer.id.expiration.ms"):
                alter("0")
            time.sleep(2)  # the producer idle for 2 s, past the 1 s set next; the hour of the file kept it so far
            assert len(producers()) == 1
            alter("1000")
            assert described() == ("1000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
            eventually(lambda: producers() == [], 30, what="the idle producer expired")
        finally:
            kafka_admin.close()
