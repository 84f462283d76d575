"""Real consumer groups against a real three-node cluster: confluent-kafka (eager and cooperative-sticky
assignors of the classic protocol, and the KIP-848 consumer protocol), kafka-python and kcat's balanced consumer, each consumer in its own process so
that it can be SIGKILLed and restarted as an application would be.

What each scenario shows (issue #10's acceptance): the group shares the partitions evenly and reads each
record exactly once with synchronous commits; a SIGKILLed member's partitions are reassigned after its
session times out and their records consumed; a member that closes cleanly is replaced at once (LeaveGroup,
long before its session would expire); a member restarted in the same group resumes from the committed
offsets. Times are measured and printed, not asserted: the bounds below are liveness deadlines.

The cluster keeps a short initial rebalance delay (Kafka's group.initial.rebalance.delay.ms, 3 s by default)
instead of the 0 the other cluster tests use. Without it, the first member of a group is answered a generation
of its own before it has the topic's metadata, assigns itself nothing, and joins again when the metadata
arrives; kafka-python 3.0.12 can lose that second join. Its consumer completes a join only while poll() still
waits for it, and a leader's rejoin asked for by a metadata change stops counting as needed as soon as the
leader has assigned: if poll()'s timeout ends between the JoinGroup answer and the SyncGroup answer, the
consumer never applies the assignment, never heartbeats again, and spins in poll(). The group then expires
it after its session. That is in the client's own code, whatever the broker.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from cli.local_cluster import LocalCluster
from tests.net.cluster_helpers import (FAST_BROKER_SETTINGS, cli_json, create_topic, eventually, logged_events, metadata,
                                      topic_of, wait_for_quorum)

pytestmark = [pytest.mark.slow, pytest.mark.external]
PARTITIONS = 6
SESSION_TIMEOUT_MS = 6_000
INITIAL_REBALANCE_DELAY_MS = 1_000  # see the module docstring
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = LocalCluster(str(tmp_path_factory.mktemp("groups")), nodes=3, broker={
        **FAST_BROKER_SETTINGS, "offsets_topic_num_partitions": 10,
        "group_initial_rebalance_delay_ms": INITIAL_REBALANCE_DELAY_MS,
        "group_consumer_session_timeout_ms": SESSION_TIMEOUT_MS, "group_consumer_heartbeat_interval_ms": 500})
    cluster.start()
    wait_for_quorum(cluster)
    yield cluster
    cluster.stop()


class ConsumerProcess:
    """tests/groupcoord/consumer_process.py in a child process; its event file parsed on demand."""

    def __init__(self, cluster: LocalCluster, directory, name: str, client: str, group: str, topic: str,
                 config: dict | None = None) -> None:
        import json

        self.out_path = os.path.join(str(directory), f"{name}.events")
        self.args = [sys.executable, "-m", "tests.groupcoord.consumer_process", client, cluster.bootstrap_servers,
                     group, topic, self.out_path, json.dumps(config or {})]
        self.log = open(os.path.join(str(directory), f"{name}.log"), "ab")
        self.process: subprocess.Popen | None = None

    def start(self) -> "ConsumerProcess":
        self.process = subprocess.Popen(self.args, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT)
        return self

    def _lines(self) -> list[str]:
        if not os.path.exists(self.out_path):
            return []
        with open(self.out_path) as events:
            return [line.rstrip("\n") for line in events if line.endswith("\n")]

    def values(self) -> list[str]:
        return [line.split(" ", 3)[3] for line in self._lines() if line.startswith("R ")]

    def assignment(self) -> set[int]:
        assignments = [line[2:] for line in self._lines() if line.startswith("A ")]
        return {int(p) for p in assignments[-1].split(",") if p} if assignments else set()

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(10)

    def close(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.log.close()


def produce(cluster: LocalCluster, topic: str, start: int, count: int) -> list[str]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 5})
    failures = []
    values = [f"v-{i}" for i in range(start, start + count)]
    for i, value in enumerate(values):
        producer.produce(topic, value=value.encode(), key=str(i).encode(),
                         on_delivery=lambda error, _m: failures.append(error) if error else None)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0 and not failures, failures[:3]
    return values


def consumed(consumers) -> list[str]:
    return [value for consumer in consumers for value in consumer.values()]


def wait_all_consumed(consumers, expected: list[str], seconds: float = 120) -> None:
    wanted = set(expected)
    eventually(lambda: wanted <= set(consumed(consumers)), seconds,
               what=f"{len(wanted)} records consumed by the group")


def wait_assignment(consumers, sizes: list[int], seconds: float) -> float:
    """Wait until the members own disjoint partitions covering the topic, in these sizes; the seconds it took."""
    started = time.monotonic()

    def balanced() -> bool:
        owned = [c.assignment() for c in consumers]
        union = set().union(*owned)
        return sorted(map(len, owned)) == sorted(sizes) and union == set(range(PARTITIONS)) \
            and sum(map(len, owned)) == PARTITIONS

    eventually(balanced, seconds, what=f"assignment sizes {sizes}")
    return time.monotonic() - started


def make_topic(cluster: LocalCluster, name: str) -> None:
    create_topic(cluster, name, PARTITIONS, 3, min_insync_replicas="2")
    eventually(lambda: topic_of(metadata(cluster), name))


CONFLUENT_VARIANTS = {
    "eager": {"session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": 500},
    "cooperative-sticky": {"session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": 500,
                           "partition.assignment.strategy": "cooperative-sticky"},
}
# The KIP-848 consumer protocol: the session timeout and heartbeat interval are the broker's
# (group_consumer_session_timeout_ms in the cluster fixture); librdkafka refuses the client-side settings.
CONFLUENT_VARIANTS["consumer-protocol"] = {"group.protocol": "consumer"}


@pytest.mark.parametrize("variant", sorted(CONFLUENT_VARIANTS))
def test_confluent_group_shares_partitions_reads_once_survives_kill_close_and_restart(cluster, tmp_path, variant):
    topic, group, config = f"shared-{variant}", f"group-{variant}", CONFLUENT_VARIANTS[variant]
    make_topic(cluster, topic)
    first = produce(cluster, topic, 0, 30_000)
    members = [ConsumerProcess(cluster, tmp_path, f"c{i}", "confluent", group, topic, config).start()
               for i in range(3)]
    try:
        wait_all_consumed(members, first)
        wait_assignment(members, [2, 2, 2], 60)
        values = consumed(members)
        assert len(values) == len(set(values)) == 30_000, "each record exactly once with commits"
        described = cli_json("groups", "describe", group, "-b", cluster.bootstrap_servers)
        assert described["type"] == ("consumer" if variant == "consumer-protocol" else "classic"), described
        assert sorted(len(ps) for m in described["members"] for ps in m["assignment"].values()) == [2, 2, 2]
        assert {r["lag"] for r in described["offsets"]} == {0}, described["offsets"]

        # SIGKILL one member: after its session times out, the others take its partitions and read on.
        members[0].kill()
        took = wait_assignment(members[1:], [3, 3], 60)
        print(f"{variant}: partitions of a SIGKILLed member reassigned after {took:.1f} s")
        expired = [e for e in logged_events(cluster, "group_member_expired") if e["group_id"] == group]
        protocol = "consumer" if variant == "consumer-protocol" else "classic"
        assert [(e["protocol"], e["reason"]) for e in expired] == [(protocol, "session expired")], expired
        assert expired[0]["member_id"] not in {m["member_id"] for m in cli_json(  # who left, and why
            "groups", "describe", group, "-b", cluster.bootstrap_servers)["members"]}
        second = produce(cluster, topic, 30_000, 3_000)
        wait_all_consumed(members[1:], second)

        # A clean close leaves the group at once: the survivor owns everything long before a session timeout.
        members[1].close()
        took = wait_assignment(members[2:], [6], 60)
        print(f"{variant}: partitions of a closed member reassigned after {took:.1f} s")

        # A restarted member resumes from the committed offsets: it reads only records produced after them.
        restarted = ConsumerProcess(cluster, tmp_path, "c0-restarted", "confluent", group, topic, config).start()
        members.append(restarted)
        wait_assignment([members[2], restarted], [3, 3], 60)
        third = produce(cluster, topic, 33_000, 1_000)
        wait_all_consumed([members[2], restarted], third)
        old = set(first) | set(second)
        assert not old & set(restarted.values()), "the restarted member re-read committed records"
    finally:
        for member in members:
            member.close()


def test_kafka_python_group_shares_partitions_and_resumes_from_commits(cluster, tmp_path):
    topic, group = "shared-kafka-python", "group-kafka-python"
    make_topic(cluster, topic)
    first = produce(cluster, topic, 0, 6_000)
    config = {"session_timeout_ms": SESSION_TIMEOUT_MS, "heartbeat_interval_ms": 500}
    members = [ConsumerProcess(cluster, tmp_path, f"k{i}", "kafka-python", group, topic, config).start()
               for i in range(3)]
    try:
        wait_all_consumed(members, first)
        wait_assignment(members, [2, 2, 2], 60)
        values = consumed(members)
        assert len(values) == len(set(values)) == 6_000
        members[0].kill()
        wait_assignment(members[1:], [3, 3], 60)
        for member in members[1:]:
            member.close()
        restarted = ConsumerProcess(cluster, tmp_path, "k-restarted", "kafka-python", group, topic, config).start()
        members.append(restarted)
        second = produce(cluster, topic, 6_000, 600)
        wait_all_consumed([restarted], second)
        assert not set(first) & set(restarted.values()), "the restarted member re-read committed records"
    finally:
        for member in members:
            member.close()


def test_kcat_balanced_consumers_share_partitions(cluster, tmp_path):
    assert shutil.which("kcat"), "kcat is required (apt-get install kcat)"
    topic, group = "shared-kcat", "group-kcat"
    make_topic(cluster, topic)
    expected = produce(cluster, topic, 0, 3_000)
    outputs, logs, processes = [], [], []
    for i in range(2):
        outputs.append(tmp_path / f"kcat-{i}.out")
        logs.append(tmp_path / f"kcat-{i}.log")
        processes.append(subprocess.Popen(
            ["kcat", "-b", cluster.bootstrap_servers, "-G", group, "-u", "-f", "%p %s\n",
             "-X", "auto.offset.reset=earliest", topic],
            stdout=open(outputs[-1], "w"), stderr=open(logs[-1], "w")))
    try:
        def values() -> set[str]:
            return {line.split(" ", 1)[1] for path in outputs for line in path.read_text().split("\n")[:-1]}

        def assignments() -> list[set[str]]:
            # kcat reports each rebalance on stderr: "% Group G rebalanced (memberid ...): assigned: T [0], T [3]"
            owned = []
            for path in logs:
                assigned = [line.split("assigned:", 1)[1] for line in path.read_text().splitlines()
                            if "rebalanced" in line and "assigned:" in line]
                owned.append({part.strip() for part in assigned[-1].split(",")} if assigned else set())
            return owned

        eventually(lambda: set(expected) <= values(), 120, what="kcat group read everything")
        eventually(lambda: all(assignments()) and not set.intersection(*assignments())
                   and len(set.union(*assignments())) == PARTITIONS, 60, what=f"kcat members share: {assignments()}")
    finally:
        for process in processes:
            process.terminate()
            process.wait(30)


def test_a_group_moves_to_the_consumer_protocol_and_back_keeping_its_offsets(cluster, tmp_path):
    """The offline upgrade to group.protocol=consumer and the way back, as Kafka allows them: once every member
    of the group has left, a member of the other protocol replaces the empty group (a classic group by a
    ConsumerGroupHeartbeat, a consumer group by a JoinGroup) and resumes from the group's committed offsets."""
    topic, group = "protocol-switch", "group-protocol-switch"
    make_topic(cluster, topic)
    classic_config, consumer_config = CONFLUENT_VARIANTS["eager"], CONFLUENT_VARIANTS["consumer-protocol"]
    read: list[str] = []
    for step, (name, config) in enumerate([("classic", classic_config), ("consumer", consumer_config),
                                           ("classic-again", classic_config)]):
        values = produce(cluster, topic, step * 1_000, 1_000)
        member = ConsumerProcess(cluster, tmp_path, name, "confluent", group, topic, config).start()
        try:
            wait_all_consumed([member], values, 90)
            described = cli_json("groups", "describe", group, "-b", cluster.bootstrap_servers)
            assert described["type"] == ("consumer" if config is consumer_config else "classic"), described
        finally:
            member.close()
        assert not set(member.values()) & set(read), f"{name} re-read records committed before it"
        read += member.values()
    assert len(read) == len(set(read)) == 3_000


def test_a_rolling_upgrade_to_the_consumer_protocol_and_back_with_members_of_both(cluster, tmp_path):
    """KIP-848's online migration with librdkafka on both sides: a classic group of two consumers becomes a
    consumer group when a consumer-protocol member joins (the classic members go on inside it), a classic member
    leaves, and when the last consumer-protocol member leaves the group is a classic group again; the members
    share the partitions at every step and every record is read."""
    topic, group = "rolling-upgrade", "group-rolling-upgrade"
    make_topic(cluster, topic)
    classic_config, consumer_config = CONFLUENT_VARIANTS["eager"], CONFLUENT_VARIANTS["consumer-protocol"]

    def group_type() -> str:
        return cli_json("groups", "describe", group, "-b", cluster.bootstrap_servers)["type"]

    def start(name: str, config: dict) -> ConsumerProcess:
        process = ConsumerProcess(cluster, tmp_path, name, "confluent", group, topic, config).start()
        everyone.append(process)
        live[name] = process
        return process

    everyone: list[ConsumerProcess] = []
    live: dict[str, ConsumerProcess] = {}
    values: list[str] = []
    try:
        start("classic-1", classic_config)
        start("classic-2", classic_config)
        values += produce(cluster, topic, 0, 2_000)
        wait_all_consumed(everyone, values)
        wait_assignment(list(live.values()), [3, 3], 60)
        assert group_type() == "classic"

        start("new-1", consumer_config)
        wait_assignment(list(live.values()), [2, 2, 2], 90)
        assert group_type() == "consumer"
        values += produce(cluster, topic, 2_000, 2_000)
        wait_all_consumed(everyone, values)

        live.pop("classic-1").close()  # a classic member leaves the consumer group
        wait_assignment(list(live.values()), [3, 3], 90)
        values += produce(cluster, topic, 4_000, 2_000)
        wait_all_consumed(everyone, values)

        live.pop("new-1").close()  # the last consumer-protocol member: a classic group again
        eventually(lambda: group_type() == "classic", 30, what="the group back to classic")
        wait_assignment(list(live.values()), [6], 90)
        values += produce(cluster, topic, 6_000, 2_000)
        wait_all_consumed(everyone, values)
        read = consumed(everyone)
        print(f"rolling upgrade: {len(read)} records read for {len(values)} produced")
        assert sorted(read) == sorted(values), "each record once: commits on revocation, in both protocols"
    finally:
        for member in everyone:
            member.close()
