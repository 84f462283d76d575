"""The client and the CLI against real `flotilla node` processes (LocalCluster): three nodes, replication
factor 3, a leader killed mid-stream."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import trio

from net.client.aio import KafkaClient
from net.client.results import NewTopic
from net.client.sync import SyncKafkaClient
from cli.local_cluster import LocalCluster
from partitions.errors import InvalidConfigError, TopicAlreadyExistsError, UnknownTopicOrPartitionError

pytestmark = pytest.mark.slow

BROKERS_UP_SECONDS_MAX = 60


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(str(tmp_path_factory.mktemp("cluster")), nodes=3) as running:
        trio.run(_wait_for_brokers, running.bootstrap_servers, 3)
        yield running


async def _wait_for_brokers(bootstrap: str, count: int) -> None:
    async with KafkaClient(bootstrap) as client:
        with trio.fail_after(BROKERS_UP_SECONDS_MAX):
            while len((await client.metadata([])).brokers) < count:
                await trio.sleep(0.2)


def flotilla(*argv: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *argv], input=stdin, capture_output=True, timeout=120)


async def test_admin_produce_fetch_and_offsets_on_a_replicated_topic(cluster):
    async with KafkaClient(cluster.bootstrap_servers, "test") as client:
        await client.create_topics([NewTopic("events", 3, 3, {"retention.ms": "3600000"})])
        with pytest.raises(TopicAlreadyExistsError):
            await client.create_topics([NewTopic("events", 3, 3)])
        records = [(b"key-%d" % (i % 7), b"value-%d" % i) for i in range(300)]
        offsets = await client.produce_records("events", records, acks=-1, compression=4)
        assert sorted(offsets) == [0, 1, 2]
        fetched = {}
        for partition in range(3):
            result = await client.fetch("events", partition, 0)
            assert result.error is None and result.high_watermark == len(result.records)
            fetched.update({(r.key, r.value): partition for r in result.records})
        assert set(fetched) == set(records)
        latest = await client.list_offsets("events", timestamp=-1)
        assert sum(o.offset for o in latest.values()) == 300
        assert await client.delete_records("events", {0: 1}) == {0: 1}
        assert (await client.list_offsets("events", [0], timestamp=-2))[0].offset == 1
        configs = await client.describe_configs("events")
        assert configs["retention.ms"].value == "3600000" and not configs["retention.ms"].is_default
        description = await client.describe_cluster()
        assert sorted(description.brokers) == [1, 2, 3]


def test_cli_round_trip_on_the_cluster(cluster):
    created = flotilla("topics", "create", "cli", "--partitions", "2", "--replication-factor", "3",
                       "--config", cluster.config_path)
    assert created.returncode == 0, created.stderr
    described = flotilla("topics", "describe", "cli", "--json", "--config", cluster.config_path)
    document = json.loads(described.stdout)
    assert [sorted(p["replicas"]) for p in document["partitions"]] == [[1, 2, 3], [1, 2, 3]]
    produced = flotilla("produce", "cli", "-b", cluster.bootstrap_servers, "--key-separator", "=",
                        stdin=b"".join(b"k%d=v%d\n" % (i, i) for i in range(100)))
    assert produced.returncode == 0, produced.stderr
    consumed = flotilla("consume", "cli", "-b", cluster.bootstrap_servers, "--from-beginning", "--exit",
                        "--format", "%k=%v\\n")
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.splitlines()) == sorted(b"k%d=v%d" % (i, i) for i in range(100))
    brokers = flotilla("brokers", "--json", "--config", cluster.config_path)
    assert [(b["id"], b["status"]) for b in json.loads(brokers.stdout)] == [(1, "active"), (2, "active"),
                                                                            (3, "active")]
    deleted = flotilla("topics", "delete", "cli", "--config", cluster.config_path)
    assert deleted.returncode == 0, deleted.stderr


def test_consume_from_a_time_starts_at_each_partitions_first_record_that_recent(cluster):
    """`flotilla consume --from-time` (kcat -o s@TS): ListOffsets by timestamp per partition; a partition with no
    record that recent starts at its end, so only later records would be printed."""
    from confluent_kafka import Producer

    assert flotilla("topics", "create", "timed", "--partitions", "2", "-b", cluster.bootstrap_servers).returncode == 0
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    base = 1_700_000_000_000  # 2023-11-14T22:13:20Z
    for second in range(10):  # partition 0: seconds 0-9; partition 1: seconds 0-4 only
        for partition in (0, 1) if second < 5 else (0,):
            producer.produce("timed", value=b"p%d-s%d" % (partition, second), partition=partition,
                             timestamp=base + second * 1000)
    assert producer.flush(30) == 0

    def consumed(*start: str) -> list[bytes]:
        result = flotilla("consume", "timed", "-b", cluster.bootstrap_servers, *start, "--exit", "--format", "%v\\n")
        assert result.returncode == 0, result.stderr
        return sorted(result.stdout.splitlines())

    assert consumed("--from-time", str(base + 3_500)) == [b"p0-s%d" % s for s in range(4, 10)] + [b"p1-s4"]
    assert consumed("--from-time", "2023-11-14T22:13:27Z") == [b"p0-s7", b"p0-s8", b"p0-s9"]  # p1: at its end
    assert consumed("--from-time", "2023-11-14T23:13:20+01:00") == consumed("--from-beginning")
    refused = flotilla("consume", "timed", "-b", cluster.bootstrap_servers, "--from-time", "soon")
    assert refused.returncode == 2 and b"neither milliseconds since the epoch nor an ISO 8601 time" in refused.stderr


def test_sync_client_on_the_cluster(cluster):
    with SyncKafkaClient(cluster.bootstrap_servers) as client:
        client.create_topics([NewTopic("sync", 1, 3)])
        client.produce_records("sync", [(None, b"a"), (None, b"b")])
        assert [r.value for r in client.fetch("sync", 0, 0).records] == [b"a", b"b"]
        client.delete_topics(["sync"])
        with pytest.raises(UnknownTopicOrPartitionError):
            client.delete_topics(["sync"])


async def test_produce_and_fetch_follow_the_new_leader_after_a_kill(cluster):  # runs last: it kills a node
    async with KafkaClient(cluster.bootstrap_servers, "failover") as client:
        await client.create_topics([NewTopic("failover", 1, 3)])
        before = await client.produce_records("failover", [(None, b"before-%d" % i) for i in range(10)], partition=0)
        old_leader = (await client.leader_for("failover", 0)).leader
        cluster.kill(old_leader)
        after = await client.produce_records("failover", [(None, b"after")], partition=0)
        new_leader = await client.leader_for("failover", 0)
        result = await client.fetch("failover", 0, 0)
    assert before == {0: [0]} and new_leader.leader != old_leader and new_leader.leader_epoch > 0
    values = [r.value for r in result.records]
    # every acknowledged record survives; "after" may be there twice if an acknowledgement was lost (at-least-once)
    assert values[:10] == [b"before-%d" % i for i in range(10)] and set(values[10:]) == {b"after"}
    assert after[0][0] >= 10


async def test_alter_configs_on_the_cluster(cluster):
    async with KafkaClient(cluster.bootstrap_servers, "alter", retries_max=5) as client:
        await client.create_topics([NewTopic("altered", 1, 2)])
        await client.alter_configs("altered", set={"cleanup.policy": "compact"})
        # The controller answers once the change is committed; the node asked next describes it once it has
        # applied the metadata log that far, as in Kafka: poll.
        with trio.fail_after(30):
            while (await client.describe_configs("altered"))["cleanup.policy"].value != "compact":
                await trio.sleep(0.2)
        with pytest.raises(InvalidConfigError):
            await client.alter_configs("altered", set={"retention.ms": "not-a-number"})
