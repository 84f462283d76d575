"""Partition reassignment, leader elections and decommissioning on a real 3-node cluster, driven with the
`flotilla reassign|leaders|brokers` commands while a confluent-kafka producer (acks=all) and consumer run."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from broker.core import LOGS_DIRECTORY
from cli.local_cluster import LocalCluster
from tests.net.cluster_helpers import (
    FAST_BROKER_SETTINGS,
    cli,
    cli_json,
    create_topic,
    eventually,
    metadata,
    topic_of,
    wait_for_quorum,
)
from tests.net.test_failover_no_loss import assert_replicas_identical_up_to_high_watermark

pytestmark = [pytest.mark.slow, pytest.mark.external]

TOPIC = "moving"


@pytest.fixture
def cluster(tmp_path, request):
    settings = dict(FAST_BROKER_SETTINGS, leader_imbalance_check_interval_seconds=2, **getattr(request, "param", {}))
    cluster = LocalCluster(str(tmp_path / "cluster"), nodes=3, broker=settings,
                           topic_defaults={"partitions": 3, "replication_factor": 2, "min_insync_replicas": 1})
    cluster.start()
    try:
        wait_for_quorum(cluster)
        yield cluster
    finally:
        cluster.stop()


def partitions(cluster, name: str = TOPIC) -> dict[int, dict]:
    topic = topic_of(metadata(cluster), name)
    return {p["partition"]: p for p in topic["partitions"]}


def write_plan(tmp_path, name: str, plan: dict[int, list[int]]) -> str:
    path = str(tmp_path / name)
    with open(path, "w") as handle:
        json.dump({"version": 1, "partitions": [{"topic": TOPIC, "partition": p, "replicas": r}
                                                for p, r in plan.items()]}, handle)
    return path


class Load:
    """An acks=all producer and an assigned consumer in threads: what was acknowledged, what was read, and the
    longest time the consumer went without a record while records were being produced."""

    def __init__(self, cluster) -> None:
        from confluent_kafka import Consumer, Producer, TopicPartition

        self.acked: set[bytes] = set()
        self.read: set[bytes] = set()
        self.longest_gap = 0.0
        self.stop = threading.Event()
        self.producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 5,
                                  "enable.idempotence": True, "message.timeout.ms": 120_000})
        self.consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "mover-check",
                                  "enable.auto.commit": False, "fetch.wait.max.ms": 100})
        self.consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(3)])
        self.threads = [threading.Thread(target=self._produce), threading.Thread(target=self._consume)]
        for thread in self.threads:
            thread.start()

    def _produce(self) -> None:
        number = 0
        while not self.stop.is_set() and number < 200_000:
            value = b"r-%d" % number
            self.producer.produce(TOPIC, value=value, partition=number % 3,
                                  on_delivery=lambda error, m: error is None and self.acked.add(m.value()))
            number += 1
            self.producer.poll(0)
            time.sleep(0.002)
        self.producer.flush(120)

    def _consume(self) -> None:
        last = time.monotonic()
        while not self.stop.is_set():
            messages = [m for m in self.consumer.consume(500, 0.2) if m.error() is None]
            now = time.monotonic()
            if messages:
                self.read.update(m.value() for m in messages)
                last = now
            self.longest_gap = max(self.longest_gap, now - last)

    def finish(self) -> None:
        self.stop.set()
        self.threads[0].join(150)
        deadline = time.monotonic() + 60
        while not self.acked <= self.read and time.monotonic() < deadline:
            self.read.update(m.value() for m in self.consumer.consume(1000, 0.5) if m.error() is None)
        self.threads[1].join(10)
        self.consumer.close()


def test_replicas_move_under_load_with_no_acknowledged_record_lost(cluster, tmp_path):
    create_topic(cluster, TOPIC, 3, 2)
    before = eventually(lambda: partitions(cluster))
    load = Load(cluster)
    try:
        eventually(lambda: len(load.read) > 500, 30, what="the load running")
        # Every partition moves to the broker pair it does not have, leader included.
        target = {p: [b for b in (1, 2, 3) if b not in state["replicas"]] + [state["replicas"][0]]
                  for p, state in before.items()}
        plan = write_plan(tmp_path, "plan.json", target)
        result = cli("reassign", "execute", "--plan", plan, "-b", cluster.bootstrap_servers)
        assert result.returncode == 0, result.stderr
        assert result.stdout.count("started") == 3

        def complete() -> bool:
            verify = cli("reassign", "verify", "--plan", plan, "-b", cluster.bootstrap_servers, "--json")
            rows = json.loads(verify.stdout)
            return verify.returncode == 0 and all(r["state"] == "complete" for r in rows)

        eventually(complete, 60, what="every move complete")
        time.sleep(2)
    finally:
        load.finish()
    after = partitions(cluster)
    for p, state in after.items():
        assert state["replicas"] == target[p] and sorted(state["isr"]) == sorted(target[p]), state
    assert len(load.acked) > 1000
    lost = load.acked - load.read
    assert not lost, f"{len(lost)} acknowledged records not read after the move"
    assert load.longest_gap < 5.0, f"the consumer stalled {load.longest_gap:.1f} s"
    assert cli_json("reassign", "list", "-b", cluster.bootstrap_servers) == []
    # Each old replica's directory is gone from the broker that no longer hosts it.
    for p, state in before.items():
        for broker in set(state["replicas"]) - set(target[p]):
            eventually(lambda: not os.path.exists(os.path.join(cluster.directory, f"node-{broker}", LOGS_DIRECTORY, f"{TOPIC}-{p}")),
                       20, what=f"{TOPIC}-{p} deleted on broker {broker}")
    cluster.stop()
    assert_replicas_identical_up_to_high_watermark(cluster, TOPIC, target)


def test_bad_reassignments_are_refused_and_a_move_can_be_cancelled(cluster, tmp_path):
    create_topic(cluster, TOPIC, 3, 2)
    before = eventually(lambda: partitions(cluster))
    bad = write_plan(tmp_path, "bad.json", {0: [1, 9], 1: [2, 2], 2: []})
    result = cli("reassign", "execute", "--plan", bad, "-b", cluster.bootstrap_servers)
    assert result.returncode != 0
    assert "INVALID_REPLICA_ASSIGNMENT" in result.stdout and "[9]" in result.stdout
    assert "duplicate" in result.stdout and "empty" in result.stdout
    assert partitions(cluster) == before
    broken = tmp_path / "broken.json"
    broken.write_text('{"partitions": [{"topic": "moving", "partition": "zero", "replicas": [1]}]}')
    result = cli("reassign", "execute", "--plan", str(broken), "-b", cluster.bootstrap_servers)
    assert result.returncode == 2 and "broken.json: partitions[0]: key 'partition'" in result.stderr
    assert "Traceback" not in result.stderr  # one line naming the file and the key, as every CLI error
    # A move to a broker that is stopped cannot complete; cancel puts the original replicas back.
    spare = next(b for b in (1, 2, 3) if b not in before[0]["replicas"])
    cluster.kill(spare)
    target = [before[0]["replicas"][0], spare]
    plan = write_plan(tmp_path, "stuck.json", {0: target})
    assert cli("reassign", "execute", "--plan", plan, "-b", cluster.bootstrap_servers).returncode == 0
    listed = cli_json("reassign", "list", "-b", cluster.bootstrap_servers)
    assert [(r["partition"], r["adding"]) for r in listed] == [(0, [spare])]
    assert cli("reassign", "verify", "--plan", plan, "-b", cluster.bootstrap_servers).returncode == 1
    assert cli("reassign", "cancel", "--plan", plan, "-b", cluster.bootstrap_servers).returncode == 0
    state = partitions(cluster)[0]
    assert sorted(state["replicas"]) == sorted(before[0]["replicas"])
    assert cli_json("reassign", "list", "-b", cluster.bootstrap_servers) == []


def bounce_a_leader(cluster) -> None:
    victim = partitions(cluster)[0]["leader"]
    cluster.kill(victim)
    eventually(lambda: all(s["leader"] != victim for s in partitions(cluster).values()), 30, what="failover")
    cluster.start_node(victim)
    eventually(lambda: all(len(s["isr"]) == 3 for s in partitions(cluster).values()), 60, what="ISR full")


def on_preferred_leaders(cluster) -> bool:
    return all(s["leader"] == s["replicas"][0] for s in partitions(cluster).values())


@pytest.mark.parametrize("cluster", [{"auto_leader_rebalance_enable": False}], indirect=True)
def test_flotilla_leaders_elect_returns_leadership_to_the_preferred_replicas(cluster):
    create_topic(cluster, TOPIC, 3, 3)
    eventually(lambda: all(len(s["isr"]) == 3 for s in partitions(cluster).values()), 30)
    bounce_a_leader(cluster)
    time.sleep(3)  # more than the 2 s check interval: balancing is off, nothing moves by itself
    assert not on_preferred_leaders(cluster)
    result = cli("leaders", "elect", "--type", "preferred", "--topic", TOPIC, "-b", cluster.bootstrap_servers)
    assert result.returncode == 0 and "elected" in result.stdout, result.stdout + result.stderr
    eventually(lambda: on_preferred_leaders(cluster), 10, what="leaders back on their preferred replicas")
    again = cli("leaders", "elect", "--type", "preferred", "-b", cluster.bootstrap_servers)
    assert again.returncode == 0 and "No election was needed" in again.stdout
    bad = cli("leaders", "elect", "--partition", "0", "-b", cluster.bootstrap_servers)
    assert bad.returncode != 0 and "--partition needs --topic" in bad.stderr


def test_automatic_leader_balancing_returns_leadership_by_itself(cluster):
    create_topic(cluster, TOPIC, 3, 3)
    eventually(lambda: all(len(s["isr"]) == 3 for s in partitions(cluster).values()), 30)
    bounce_a_leader(cluster)
    eventually(lambda: on_preferred_leaders(cluster), 30, what="leaders back on their preferred replicas")


def test_a_broker_is_decommissioned_only_once_stopped_and_empty(cluster, tmp_path):
    create_topic(cluster, TOPIC, 3, 2)
    before = eventually(lambda: partitions(cluster))
    leaving = 3
    result = cli("brokers", "decommission", str(leaving), "-b", cluster.bootstrap_servers)
    assert result.returncode != 0 and "still running" in result.stderr
    cluster.kill(leaving)
    survivors = ",".join(cluster.bootstrap_of(n) for n in (1, 2))
    eventually(lambda: any(b["id"] == leaving and b["status"] == "fenced"
                           for b in cli_json("brokers", "-b", survivors)), 30, what="broker 3 fenced")
    hosted = sorted(p for p, state in before.items() if leaving in state["replicas"])
    result = cli("brokers", "decommission", str(leaving), "-b", survivors)
    assert result.returncode != 0 and "reassign them first" in result.stderr
    assert all(f"{TOPIC}-{p}" in result.stderr for p in hosted)
    generated = cli("reassign", "generate", "--topics", TOPIC, "--brokers", "1,2", "-b", survivors)
    assert generated.returncode == 0 and "roll back" in generated.stderr, generated.stderr
    plan = tmp_path / "off3.json"
    plan.write_text(generated.stdout)
    assert all(3 not in entry["replicas"] for entry in json.loads(generated.stdout)["partitions"])
    assert cli("reassign", "execute", "--plan", str(plan), "-b", survivors).returncode == 0
    eventually(lambda: cli("reassign", "verify", "--plan", str(plan), "-b", survivors).returncode == 0, 60,
               what="every partition off broker 3")
    result = cli("brokers", "decommission", str(leaving), "-b", survivors)
    assert result.returncode == 0, result.stderr
    assert [b["id"] for b in cli_json("brokers", "-b", survivors)] == [1, 2]


def test_a_throttled_move_sets_kafkas_throttle_configs_and_verify_removes_them(cluster, tmp_path):
    create_topic(cluster, TOPIC, 3, 2)
    before = eventually(lambda: partitions(cluster))
    spare = next(b for b in (1, 2, 3) if b not in before[0]["replicas"])
    cluster.kill(spare)  # the move cannot finish while the new replica's broker is down
    target = [before[0]["replicas"][0], spare]
    plan = write_plan(tmp_path, "throttled.json", {0: target})
    result = cli("reassign", "execute", "--plan", plan, "--throttle", "5000000", "-b", cluster.bootstrap_servers)
    assert result.returncode == 0, result.stderr
    configs = cli_json("topics", "describe", TOPIC, "-b", cluster.bootstrap_servers)["configs"]
    assert configs["follower.replication.throttled.replicas"] == f"0:{spare}"
    assert configs["leader.replication.throttled.replicas"] == ",".join(f"0:{b}" for b in before[0]["replicas"])
    assert cli("reassign", "verify", "--plan", plan, "-b", cluster.bootstrap_servers).returncode == 1
    cluster.start_node(spare)
    eventually(lambda: cli("reassign", "verify", "--plan", plan, "-b", cluster.bootstrap_servers).returncode == 0,
               60, what="the throttled move complete")
    configs = cli_json("topics", "describe", TOPIC, "-b", cluster.bootstrap_servers)["configs"]
    assert "follower.replication.throttled.replicas" not in configs
    assert "leader.replication.throttled.replicas" not in configs
    bad = cli("reassign", "execute", "--plan", plan, "--throttle", "0", "-b", cluster.bootstrap_servers)
    assert bad.returncode == 2 and "--throttle 0" in bad.stderr
