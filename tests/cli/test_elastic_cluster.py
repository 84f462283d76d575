"""Broker-only nodes (KRaft observers) and live scale-out on real processes: 3 controllers + 2 broker-only
nodes from one config file, described by the CLI and by Kafka's DescribeQuorum asked of every node; a 4th node
joining a running cluster, a third of the replicas moved onto it and back off, and its decommissioning, all
under a confluent-kafka producer (acks=all) and consumer."""

from __future__ import annotations

import json
import time

import pytest

from cli.local_cluster import LocalCluster
from net.client.sync import SyncKafkaClient
from net.protocol import messages
from net.protocol.codec import ApiKey
from tests.cli.test_reassign_cluster import Load, partitions
from tests.net.cluster_helpers import (
    FAST_BROKER_SETTINGS,
    cli,
    cli_json,
    create_topic,
    eventually,
    quorum_status,
    wait_for_quorum,
)

pytestmark = [pytest.mark.slow, pytest.mark.external]

TOPIC = "moving"  # the name Load produces to


def active_brokers(cluster) -> list[int]:
    return sorted(b["id"] for b in cli_json("brokers", "-b", cluster.bootstrap_servers) if b["status"] == "active")


def describe_quorum(cluster, node_id: int, version: int):
    """DescribeQuorum of the metadata log, asked of one node (a broker forwards it to the quorum's leader)."""
    request_class = messages.DescribeQuorumRequest
    request = request_class(topics=[request_class.TopicData(topic_name="__cluster_metadata", partitions=[
        request_class.PartitionData(partition_index=0)])])
    with SyncKafkaClient(cluster.bootstrap_servers) as client:
        response = client.send(node_id, ApiKey.DESCRIBE_QUORUM, request, api_version=version)
    assert response.error_code == 0 and [t.topic_name for t in response.topics] == ["__cluster_metadata"]
    (partition,) = response.topics[0].partitions
    assert partition.error_code == 0
    return partition, response.nodes


def test_three_controllers_and_two_broker_only_nodes(tmp_path):
    cluster = LocalCluster(str(tmp_path / "cluster"), nodes=3, broker_only=2, broker=FAST_BROKER_SETTINGS)
    cluster.start()
    try:
        wait_for_quorum(cluster, (1, 2, 3))
        eventually(lambda: active_brokers(cluster) == [1, 2, 3, 4, 5], 40, what="five active brokers")
        create_topic(cluster, "spread", 10, 3)
        state = eventually(lambda: partitions(cluster, "spread"))
        assert {b for p in state.values() for b in p["replicas"]} == {1, 2, 3, 4, 5}
        assert {p["leader"] for p in state.values()} == {1, 2, 3, 4, 5}
        status = quorum_status(cluster, 1, 2, 3)
        assert [v["id"] for v in status["voters"]] == [1, 2, 3]
        assert sorted(o["id"] for o in status["observers"]) == [4, 5]
        table = cli("quorum", "status", "-b", cluster.bootstrap_servers)
        assert "observer" in table.stdout and table.returncode == 0
        # Kafka's DescribeQuorum, from a voter and from an observer alike: the leader the CLI names, the three
        # voters with their controller listeners (v2), the two broker-only nodes as observers, every replica at
        # most a few entries from the high watermark and heard from (v1+ timestamps).
        for node_id, version in ((1, 2), (2, 1), (4, 2), (5, 0)):
            partition, nodes = describe_quorum(cluster, node_id, version)
            assert partition.leader_id == status["leader_id"] and partition.leader_epoch >= status["epoch"]
            assert [v.replica_id for v in partition.current_voters] == [1, 2, 3]
            assert sorted(o.replica_id for o in partition.observers) == [4, 5]
            for replica in partition.current_voters + partition.observers:
                assert 0 < replica.log_end_offset <= partition.high_watermark + 10
                assert (replica.last_fetch_timestamp > 0) == (version >= 1)
            assert [(n.node_id, [(l.name, l.port) for l in n.listeners]) for n in nodes] == (
                [(i, [("CONTROLLER", cluster.controller_ports[i])]) for i in (1, 2, 3)] if version >= 2 else [])

        cluster.kill(4)
        eventually(lambda: all(p["leader"] != 4 for p in partitions(cluster, "spread").values()), 30,
                   what="node 4's leaderships moved")
        assert [v["id"] for v in quorum_status(cluster, 1, 2, 3)["voters"]] == [1, 2, 3]
        cluster.start_node(4)
        eventually(lambda: all(len(p["isr"]) == 3 for p in partitions(cluster, "spread").values()), 60,
                   what="node 4 back in every ISR")
        assert 4 in active_brokers(cluster)
    finally:
        cluster.stop()


def test_live_scale_out_and_decommission_under_load(tmp_path):
    cluster = LocalCluster(str(tmp_path / "cluster"), nodes=3, broker=FAST_BROKER_SETTINGS)
    cluster.start()
    try:
        wait_for_quorum(cluster)
        create_topic(cluster, TOPIC, 3, 3)
        eventually(lambda: all(len(p["isr"]) == 3 for p in partitions(cluster).values()), 30)
        load = Load(cluster)
        try:
            eventually(lambda: len(load.read) > 500, 30, what="the load running")
            new = cluster.add_broker()
            eventually(lambda: new in active_brokers(cluster), 30, what="the new broker registered")
            generated = cli("reassign", "generate", "--topics", TOPIC, "--brokers", f"1,2,3,{new}",
                            "-b", cluster.bootstrap_servers)
            assert generated.returncode == 0, generated.stderr
            plan = tmp_path / "onto-new.json"
            plan.write_text(generated.stdout)
            moved = sum(new in entry["replicas"] for entry in json.loads(generated.stdout)["partitions"])
            assert moved >= 2  # 9 replicas over 4 brokers: the new one takes its share
            assert cli("reassign", "execute", "--plan", str(plan), "-b", cluster.bootstrap_servers).returncode == 0
            eventually(lambda: cli("reassign", "verify", "--plan", str(plan), "-b",
                                   cluster.bootstrap_servers).returncode == 0, 60, what="moves onto the new broker")
            assert sum(new in p["replicas"] for p in partitions(cluster).values()) == moved

            # And back off, so the new broker can be decommissioned.
            generated = cli("reassign", "generate", "--topics", TOPIC, "--brokers", "1,2,3",
                            "-b", cluster.bootstrap_servers)
            plan = tmp_path / "off-new.json"
            plan.write_text(generated.stdout)
            assert cli("reassign", "execute", "--plan", str(plan), "-b", cluster.bootstrap_servers).returncode == 0
            eventually(lambda: cli("reassign", "verify", "--plan", str(plan), "-b",
                                   cluster.bootstrap_servers).returncode == 0, 60, what="moves off the new broker")
            time.sleep(1)
        finally:
            load.finish()
        assert len(load.acked) > 1000
        lost = load.acked - load.read
        assert not lost, f"{len(lost)} acknowledged records not read"
        assert load.longest_gap < 5.0, f"the consumer stalled {load.longest_gap:.1f} s"
        refused = cli("brokers", "decommission", str(new), "-b", cluster.bootstrap_servers)
        assert refused.returncode != 0 and "still running" in refused.stderr
        cluster.kill(new)
        eventually(lambda: new not in active_brokers(cluster), 30, what="the new broker fenced")
        result = cli("brokers", "decommission", str(new), "-b", cluster.bootstrap_servers)
        assert result.returncode == 0, result.stderr
        assert [b["id"] for b in cli_json("brokers", "-b", cluster.bootstrap_servers)] == [1, 2, 3]
        assert [v["id"] for v in quorum_status(cluster, 1, 2, 3)["voters"]] == [1, 2, 3]
    finally:
        cluster.stop()
