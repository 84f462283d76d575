"""Operating consumer groups on a real three-node cluster: coordinator failover and static membership (the
classic protocol and KIP-848's consumer protocol), and the `flotilla groups` commands (describe with exact lag, reset-offsets, list, delete) checked against what was
produced and committed."""

from __future__ import annotations

import json

import pytest

from cli.local_cluster import LocalCluster
from tests.groupcoord.test_group_clients import (
    PARTITIONS,
    ConsumerProcess,
    make_topic,
    produce,
    wait_all_consumed,
    wait_assignment,
)
from tests.net.cluster_helpers import FAST_BROKER_SETTINGS, cli, cli_json, eventually, wait_for_quorum

pytestmark = [pytest.mark.slow, pytest.mark.external]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = LocalCluster(str(tmp_path_factory.mktemp("group-ops")), nodes=3, broker={
        **FAST_BROKER_SETTINGS, "offsets_topic_num_partitions": 10, "group_consumer_session_timeout_ms": 6_000,
        "group_consumer_heartbeat_interval_ms": 500})
    cluster.start()
    wait_for_quorum(cluster)
    yield cluster
    cluster.stop()


def describe(cluster: LocalCluster, group: str) -> dict:
    return cli_json("groups", "describe", group, "-b", cluster.bootstrap_servers)


def committed_offsets(cluster: LocalCluster, group: str) -> dict[int, int]:
    return {row["partition"]: row["current_offset"] for row in describe(cluster, group)["offsets"]
            if row["current_offset"] is not None}


def commit_directly(cluster: LocalCluster, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit as a consumer that is assigned partitions by hand (no group membership), as Kafka allows."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


PROTOCOLS = {
    "classic": {"session.timeout.ms": 6_000, "heartbeat.interval.ms": 500},
    "consumer": {"group.protocol": "consumer"},  # KIP-848: the session timeout is the broker's (6 s above)
}


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_coordinator_failover_keeps_every_acknowledged_commit_and_consumption_resumes(cluster, tmp_path, protocol):
    topic, group = f"failover-input-{protocol}", f"failover-group-{protocol}"
    make_topic(cluster, topic)
    first = produce(cluster, topic, 0, 6_000)
    config = PROTOCOLS[protocol]
    members = [ConsumerProcess(cluster, tmp_path, f"f{i}", "confluent", group, topic, config).start() for i in range(2)]
    try:
        wait_all_consumed(members, first)
        before = committed_offsets(cluster, group)
        assert sum(before.values()) == 6_000, before  # every record consumed was committed synchronously
        described = describe(cluster, group)
        coordinator = described["coordinator"]
        cluster.kill(coordinator)
        second = produce(cluster, topic, 6_000, 2_000)
        wait_all_consumed(members, second, seconds=60)
        after = eventually(lambda: committed_offsets(cluster, group) if describe(cluster, group)["coordinator"]
                           != coordinator else None, 30, what="a new coordinator answers")
        assert all(after[p] >= before[p] for p in before), (before, after)
        assert sum(after.values()) == 8_000, after
        if protocol == "consumer":
            # The coordinator that loaded the group found the subscribed topics' partition metadata in the log:
            # nothing changed, so no epoch moved (a bump would fail every commit in flight, STALE_MEMBER_EPOCH).
            epochs = {m["member_id"]: m["member_epoch"] for m in described["members"]}
            reloaded = describe(cluster, group)
            assert (reloaded["group_epoch"], {m["member_id"]: m["member_epoch"] for m in reloaded["members"]}) == \
                (described["group_epoch"], epochs)
            group_epoch = described["group_epoch"]
            assert len(epochs) == 2 and set(epochs.values()) == {group_epoch} and group_epoch >= 2, described
    finally:
        for member in members:
            member.close()
        cluster.start_node(coordinator)
        wait_for_quorum(cluster)


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_static_member_restarted_within_its_session_gets_its_partitions_back_without_a_rebalance(
        cluster, tmp_path, protocol):
    topic, group = f"static-input-{protocol}", f"static-group-{protocol}"
    make_topic(cluster, topic)
    produce(cluster, topic, 0, 600)
    config = {"session.timeout.ms": 30_000, "heartbeat.interval.ms": 500} if protocol == "classic" else \
        {"group.protocol": "consumer"}

    def member(i: int) -> ConsumerProcess:
        return ConsumerProcess(cluster, tmp_path, f"s{i}-{protocol}", "confluent", group, topic,
                               {"group.instance.id": f"instance-{i}", **config}).start()

    members = [member(i) for i in range(3)]
    try:
        wait_assignment(members, [2, 2, 2], 90)
        owned_before = [m.assignment() for m in members]
        events_before = [len(m._lines()) for m in members[1:]]
        if protocol == "classic":
            members[0].kill()  # a static member leaves no LeaveGroup: its session keeps its place
        else:
            # KIP-848: a static member that closes leaves with epoch -2 and keeps its place for its session; one
            # that crashed holds its instance id (UNRELEASED_INSTANCE_ID) until that session expires.
            members[0].close()
        members[0] = member(0)
        eventually(lambda: members[0].assignment() == owned_before[0], 30, what="instance-0 gets its partitions back")
        # The others saw no revocation or new assignment: the group did not rebalance.
        assert [m.assignment() for m in members[1:]] == owned_before[1:]
        assert all(not any(line.startswith("A ") for line in m._lines()[count:])
                   for m, count in zip(members[1:], events_before))
    finally:
        for m in members:
            m.close()


def test_groups_describe_shows_members_assignments_and_exact_lag(cluster, tmp_path):
    topic, group = "lag-input", "lag-group"
    make_topic(cluster, topic)
    produce(cluster, topic, 0, 1_200)
    ends = _log_end_offsets(cluster, topic)
    commit_directly(cluster, group, topic, {p: min(40, ends[p]) for p in range(PARTITIONS)})
    document = describe(cluster, group)
    rows = {row["partition"]: row for row in document["offsets"]}
    for partition in range(PARTITIONS):
        committed = min(40, ends[partition])
        assert rows[partition]["current_offset"] == committed
        assert rows[partition]["log_end_offset"] == ends[partition]
        assert rows[partition]["lag"] == ends[partition] - committed
    assert document["members"] == [] and document["state"] == "Empty"

    member = ConsumerProcess(cluster, tmp_path, "lag-member", "confluent", group, topic,
                             {"client.id": "lag-reader"}).start()
    try:
        wait_assignment([member], [PARTITIONS], 60)
        eventually(lambda: sum(r["lag"] for r in describe(cluster, group)["offsets"]) == 0, 60, what="lag 0")
        document = describe(cluster, group)
        assert document["state"] == "Stable" and len(document["members"]) == 1
        assert document["members"][0]["client_id"] == "lag-reader"
        assert document["members"][0]["assignment"] == {topic: list(range(PARTITIONS))}
        table = cli("groups", "describe", group, "-b", cluster.bootstrap_servers)
        assert table.returncode == 0 and "LOG-END-OFFSET" in table.stdout and "lag-reader" in table.stdout
    finally:
        member.close()


def _log_end_offsets(cluster: LocalCluster, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "watermarks"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
    finally:
        consumer.close()


def test_reset_offsets_is_a_dry_run_by_default_refused_with_members_and_moves_an_empty_group(cluster, tmp_path):
    topic, group = "reset-input", "reset-group"
    make_topic(cluster, topic)
    produce(cluster, topic, 0, 1_200)
    first = ConsumerProcess(cluster, tmp_path, "r0", "confluent", group, topic).start()
    try:
        eventually(lambda: sum(committed_offsets(cluster, group).values()) == 1_200, 90, what="all committed")
        refused = cli("groups", "reset-offsets", group, "--topic", topic, "--to-offset", "10", "--execute",
                      "-b", cluster.bootstrap_servers)
        assert refused.returncode == 1 and "active members" in refused.stderr, refused
    finally:
        first.close()
    eventually(lambda: describe(cluster, group)["state"] == "Empty", 30, what="group empty after close")

    plan = cli_json("groups", "reset-offsets", group, "--topic", topic, "--to-offset", "10", "-b",
                    cluster.bootstrap_servers)
    assert not plan["executed"] and {row["new_offset"] for row in plan["plan"]} == {10}
    assert sum(committed_offsets(cluster, group).values()) == 1_200  # a dry run changes nothing

    done = cli_json("groups", "reset-offsets", group, "--topic", topic, "--to-offset", "10", "--execute", "-b",
                    cluster.bootstrap_servers)
    assert done["executed"]
    assert committed_offsets(cluster, group) == {p: 10 for p in range(PARTITIONS)}

    restarted = ConsumerProcess(cluster, tmp_path, "r1", "confluent", group, topic).start()
    try:
        eventually(lambda: len(restarted.values()) >= 1_200 - 10 * PARTITIONS, 90, what="re-read from offset 10")
        first_offsets = {}
        for line in restarted._lines():
            if line.startswith("R "):
                _, partition, offset, _ = line.split(" ", 3)
                first_offsets.setdefault(int(partition), int(offset))
        assert first_offsets == {p: 10 for p in range(PARTITIONS)}
    finally:
        restarted.close()


def test_groups_list_and_delete(cluster, tmp_path):
    topic, group = "listed-input", "listed-group"
    make_topic(cluster, topic)
    produce(cluster, topic, 0, 60)
    member = ConsumerProcess(cluster, tmp_path, "l0", "confluent", group, topic).start()
    try:
        eventually(lambda: any(g["group"] == group and g["state"] == "Stable"
                               for g in cli_json("groups", "list", "-b", cluster.bootstrap_servers)), 60,
                   what="group listed as Stable")
        refused = cli("groups", "delete", group, "-b", cluster.bootstrap_servers)
        assert refused.returncode == 1 and "NON_EMPTY_GROUP" in refused.stderr, refused
    finally:
        member.close()
    eventually(lambda: cli("groups", "delete", group, "-b", cluster.bootstrap_servers).returncode == 0, 30,
               what="delete once empty")
    listed = cli_json("groups", "list", "-b", cluster.bootstrap_servers)
    assert group not in {g["group"] for g in listed}
    assert json.loads(cli("groups", "describe", group, "-b", cluster.bootstrap_servers, "--json").stdout or "{}")\
        .get("state", "Dead") == "Dead"
