"""Dynamic broker configs with confluent-kafka's AdminClient on real nodes: incremental_alter_configs on BROKER
resources, describe_configs naming each source, and the values surviving a restart of every node."""

from __future__ import annotations

import pytest

from cli.local_cluster import LocalCluster
from tests.net.cluster_helpers import FAST_BROKER_SETTINGS, create_topic, eventually, wait_for_quorum

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
