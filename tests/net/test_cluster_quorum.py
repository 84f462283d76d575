"""The metadata quorum with real `flotilla node` processes on 127.0.0.1 (issue: metadata quorum).

Each test starts three nodes from a generated config file, talks to them through the CLI and real clients,
and kills processes with SIGKILL."""

import collections
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from cli.local_cluster import LocalCluster
from tests.net.cluster_helpers import (
    FAST_BROKER_SETTINGS,
    cli,
    create_topic,
    eventually,
    metadata,
    quorum_status,
    topic_of,
    wait_for_quorum,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path):
    cluster = LocalCluster(str(tmp_path / "cluster"), nodes=3, broker=FAST_BROKER_SETTINGS)
    cluster.start()
    yield cluster
    cluster.stop()


def test_three_nodes_elect_a_leader_and_every_voter_is_at_lag_zero(cluster):
    status = wait_for_quorum(cluster)
    assert status["leader_id"] in (1, 2, 3)
    assert status["epoch"] >= 1 and status["commit_index"] > 0
    assert sorted(v["id"] for v in status["voters"]) == [1, 2, 3]
    assert all(v["lag"] == 0 for v in status["voters"])
    # Every node agrees on the leader.
    for node_id in (1, 2, 3):
        assert cli("quorum", "status", "-b", cluster.bootstrap_of(node_id)).returncode == 0


def test_a_topic_of_six_partitions_spreads_leaders_and_replicas(cluster):
    wait_for_quorum(cluster)
    create_topic(cluster, "spread", 6, 3)
    topic = eventually(lambda: topic_of(metadata(cluster), "spread"), what="topic visible")
    partitions = topic["partitions"]
    assert len(partitions) == 6
    assert collections.Counter(p["leader"] for p in partitions) == {1: 2, 2: 2, 3: 2}
    for partition in partitions:
        assert sorted(partition["replicas"]) == [1, 2, 3]
        assert sorted(partition["isr"]) == sorted(partition["replicas"])
        assert partition["leader"] == partition["replicas"][0]


def test_killing_the_quorum_leader_elects_another_and_the_node_catches_up_on_restart(cluster):
    status = wait_for_quorum(cluster)
    create_topic(cluster, "survives", 3, 3)
    old_leader = status["leader_id"]
    cluster.kill(old_leader, signal.SIGKILL)
    survivors = tuple(n for n in (1, 2, 3) if n != old_leader)

    def new_leader():
        current = quorum_status(cluster, *survivors)
        return current if current["leader_id"] in survivors else None

    current = eventually(new_leader, 30, what="a new quorum leader")
    assert current["epoch"] > status["epoch"]
    assert topic_of(metadata(cluster, *survivors), "survives") is not None
    create_topic(cluster, "after-failover", 1, 2)  # the CLI and the controller keep working
    cluster.start_node(old_leader)
    wait_for_quorum(cluster)
    restarted_view = metadata(cluster, old_leader)
    assert topic_of(restarted_view, "survives") is not None
    assert topic_of(restarted_view, "after-failover") is not None


def test_an_admin_client_made_as_the_quorum_leader_dies_is_answered_by_the_survivors(cluster):
    """The survivors named the dead leader as the controller until they had elected another, and librdkafka
    waits for the controller it was told of without asking again: DescribeConfigs failed with "Timed out
    waiting for controller" after 30 s. They name themselves now, and forward."""
    status = wait_for_quorum(cluster)
    create_topic(cluster, "described", 1, 3)
    old_leader = status["leader_id"]
    cluster.kill(old_leader, signal.SIGKILL)
    survivors = [n for n in (1, 2, 3) if n != old_leader]
    admin = AdminClient({"bootstrap.servers": ",".join(cluster.bootstrap_of(n) for n in survivors)})
    futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "described")], request_timeout=20)
    (described,) = [future.result(timeout=30) for future in futures.values()]
    assert described["cleanup.policy"].value == "delete"
    created = admin.create_topics([NewTopic("made-after", 1, 2)], request_timeout=20)
    assert [future.result(timeout=30) for future in created.values()] == [None]


def test_killing_a_partition_leader_fences_it_and_elects_new_leaders_from_the_isr(cluster):
    wait_for_quorum(cluster)
    create_topic(cluster, "failover", 3, 3)
    before = eventually(lambda: topic_of(metadata(cluster), "failover"), what="topic visible")
    victim = before["partitions"][0]["leader"]
    cluster.kill(victim, signal.SIGKILL)
    survivors = tuple(n for n in (1, 2, 3) if n != victim)

    def moved():
        document = metadata(cluster, *survivors)
        broker = next(b for b in document["brokers"] if b["id"] == victim)
        assert broker["status"] == "fenced"
        topic = topic_of(document, "failover")
        for old, new in zip(before["partitions"], topic["partitions"]):
            assert new["leader"] != victim and new["leader"] in old["isr"], (old, new)
            if old["leader"] == victim:
                assert new["leader_epoch"] > old["leader_epoch"]
        return topic

    eventually(moved, 40, what="victim fenced and partitions moved")
    cluster.start_node(victim)
    wait_for_quorum(cluster)

    def back_in_isr():
        topic = topic_of(metadata(cluster), "failover")
        return all(victim in p["isr"] for p in topic["partitions"])

    eventually(back_in_isr, 60, what="the restarted broker back in every ISR")


def test_a_topic_acknowledged_before_all_nodes_are_killed_survives_the_restart(cluster):
    wait_for_quorum(cluster)
    create_topic(cluster, "durable", 2, 3)
    for node_id in (1, 2, 3):
        cluster.kill(node_id, signal.SIGKILL)
    cluster.start()
    wait_for_quorum(cluster)
    topic = topic_of(metadata(cluster), "durable")
    assert topic is not None and len(topic["partitions"]) == 2


def test_a_bad_config_file_exits_2_naming_the_key_and_starts_nothing(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text('cluster_id = "x"\n[[nodes]]\nid = 1\nkafka_port = 1\ncontroller_port = 2\n')
    result = subprocess.run([sys.executable, "-m", "cli.main", "node", "--config", str(config), "--id", "1"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert str(config) in result.stderr and "nodes[0].roles" in result.stderr
    result = subprocess.run([sys.executable, "-m", "cli.main", "up", "--config", str(tmp_path / "missing.toml")],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "not found" in result.stderr


def test_flotilla_up_runs_every_node_of_the_file_and_sigterm_stops_them_all(tmp_path):
    layout = LocalCluster(str(tmp_path / "up"), nodes=3)  # only for its config file and free ports
    process = subprocess.Popen([sys.executable, "-m", "cli.main", "up", "--config", layout.config_path],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        lines = [process.stdout.readline() for _ in range(4)]
        assert [line.split(":")[0] for line in lines[:3]] == ["node 1", "node 2", "node 3"]
        assert f"127.0.0.1:{layout.kafka_ports[1]}" in lines[0] and "bootstrap servers" in lines[3]
        status = eventually(lambda: (lambda s: s if s["leader_id"] is not None else None)(quorum_status(layout)),
                            60, what="a quorum leader under flotilla up")
        assert status["leader_id"] in (1, 2, 3)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        for port in layout.kafka_ports.values():  # every node is gone
            eventually(lambda p=port: cli("quorum", "status", "-b", f"127.0.0.1:{p}").returncode == 3, 20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _children_of(parent_pid: int) -> dict[int, int]:
    """node id -> pid of `parent_pid`'s `flotilla node` children (the kernel's list of a thread's children)."""
    nodes = {}
    try:
        with open(f"/proc/{parent_pid}/task/{parent_pid}/children") as listing:
            pids = [int(pid) for pid in listing.read().split()]
    except FileNotFoundError:
        return nodes
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                argv = cmdline.read().decode().split("\0")
        except FileNotFoundError:
            continue
        if "node" in argv and "--id" in argv:
            nodes[int(argv[argv.index("--id") + 1])] = pid
    return nodes


def test_flotilla_up_starts_a_killed_node_again_and_leaves_a_cleanly_stopped_one_stopped(tmp_path):
    layout = LocalCluster(str(tmp_path / "up"), nodes=3)  # only for its config file and free ports
    process = subprocess.Popen([sys.executable, "-m", "cli.main", "up", "--config", layout.config_path,
                                "--log-level", "warning"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    said: list[str] = []
    reader = threading.Thread(target=lambda: said.extend(iter(process.stderr.readline, "")), daemon=True)
    reader.start()

    def active_brokers() -> int:
        listed = cli("brokers", "-b", f"127.0.0.1:{layout.kafka_ports[1]}")
        return listed.stdout.count("active") if listed.returncode == 0 else -1

    try:
        eventually(lambda: active_brokers() == 3, 60, what="three active brokers under flotilla up")
        first = _children_of(process.pid)
        assert sorted(first) == [1, 2, 3]
        os.kill(first[2], signal.SIGKILL)
        eventually(lambda: any("node 2 started again (restart 1)" in line for line in said), 30,
                   what="node 2 started again")
        assert any("node 2 was killed by SIGKILL after" in line and "the others run on" in line for line in said)
        again = eventually(lambda: (lambda c: c if 2 in c and c[2] != first[2] else None)(_children_of(process.pid)),
                           10, what="a new process for node 2")
        assert again[1] == first[1] and again[3] == first[3]  # the others were left alone
        eventually(lambda: active_brokers() == 3, 60, what="node 2 active again")

        os.kill(first[3], signal.SIGTERM)  # stopped on purpose: it stays stopped
        eventually(lambda: any("node 3 stopped (exited with code 0); the others run on" in line for line in said),
                   30, what="node 3 reported stopped")
        time.sleep(2)
        assert 3 not in _children_of(process.pid) and process.poll() is None
        assert not any("node 3 started again" in line for line in said)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        leftover = _children_of(process.pid)
        if process.poll() is None:
            process.kill()
            process.wait()
        for pid in leftover.values():
            os.kill(pid, signal.SIGKILL)
