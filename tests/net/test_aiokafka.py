"""aiokafka (the asyncio Kafka client for Python, its own protocol code, versions negotiated by ApiVersions)
against a real three-node cluster, unchanged: its admin client (topics with configs, partitions added,
configs described and altered, groups listed and described, their offsets, records and topics deleted), an
idempotent acks=all producer with keys that land where Java's murmur2 puts them, two consumers sharing a
group, and an exactly-once consume-transform-produce loop (a transactional producer that sends the group's
offsets, commits and aborts) read back with read_committed and read_uncommitted."""

from __future__ import annotations

import asyncio
import time

import pytest

from partitions.murmur2 import murmur2
from tests.net.cluster_helpers import clients_cluster

aiokafka = pytest.importorskip("aiokafka")
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic, RecordsToDelete  # noqa: E402
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType  # noqa: E402
from aiokafka.structs import OffsetAndMetadata  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.external]
READ_SECONDS_MAX = 30
NOTHING_MORE_SECONDS = 2.0  # how long a reader waits to see that nothing more comes


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory):
    with clients_cluster(str(tmp_path_factory.mktemp("aiokafka"))) as cluster:
        yield cluster.bootstrap_servers


async def admin_client(bootstrap: str) -> AIOKafkaAdminClient:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    return admin


async def create(admin: AIOKafkaAdminClient, name: str, partitions: int, configs: dict | None = None) -> None:
    await admin.create_topics([NewTopic(name, partitions, 3, topic_configs=configs or {})])
    await wait_led(admin, name, partitions)


async def wait_led(admin: AIOKafkaAdminClient, name: str, partitions: int) -> dict:
    """Until the node asked describes `partitions` partitions of the topic, each with a leader (the controller
    answers once the change is committed, and the brokers learn it from the metadata log a moment later); returns
    that description."""
    deadline = time.monotonic() + READ_SECONDS_MAX  # every partition led before the first produce
    while True:
        (described,) = await admin.describe_topics([name])
        if len(described["partitions"]) == partitions and all(p["leader"] >= 0 for p in described["partitions"]):
            return described
        assert time.monotonic() < deadline, described
        await asyncio.sleep(0.2)


async def read(consumer: AIOKafkaConsumer, count: int, seconds: float = READ_SECONDS_MAX) -> list:
    """At least `count` records (all that arrive until then), or what came within `seconds`."""
    records: list = []
    deadline = time.monotonic() + seconds
    while len(records) < count and time.monotonic() < deadline:
        for messages in (await consumer.getmany(timeout_ms=500)).values():
            records.extend(messages)
    return records


def test_keyed_idempotent_records_read_by_a_group_of_two(bootstrap):
    async def scenario():
        admin = await admin_client(bootstrap)
        await create(admin, "ak-keyed", 3, {"retention.ms": "3600000"})
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
        await producer.start()
        sent = []
        for i in range(300):
            key = b"key-%d" % (i % 11)
            sent.append(await (await producer.send("ak-keyed", key=key, value=b"v-%d" % i)))
        await producer.stop()
        # Java's default partitioner: murmur2 of the key, positive, modulo the partition count.
        assert all(metadata.partition == (murmur2(b"key-%d" % (i % 11)) & 0x7FFFFFFF) % 3
                   for i, metadata in enumerate(sent))
        for partition in range(3):  # dense offsets from 0, in send order
            offsets = [m.offset for m in sent if m.partition == partition]
            assert offsets == list(range(len(offsets)))

        first, second = (AIOKafkaConsumer("ak-keyed", bootstrap_servers=bootstrap, group_id="ak-group",
                                          auto_offset_reset="earliest", enable_auto_commit=False)
                         for _ in range(2))
        await first.start()
        await second.start()
        deadline = time.monotonic() + READ_SECONDS_MAX
        while not (first.assignment() and second.assignment()):  # the group rebalanced onto both
            assert time.monotonic() < deadline, (first.assignment(), second.assignment())
            await asyncio.gather(first.getmany(timeout_ms=200), second.getmany(timeout_ms=200))
        await first.seek_to_beginning()
        await second.seek_to_beginning()
        assignments = [first.assignment(), second.assignment()]
        assert not assignments[0] & assignments[1] and len(assignments[0] | assignments[1]) == 3
        both = await asyncio.gather(read(first, sum(m.partition in {tp.partition for tp in assignments[0]} for m in sent)),
                                    read(second, sum(m.partition in {tp.partition for tp in assignments[1]} for m in sent)))
        records = both[0] + both[1]
        assert sorted((r.partition, r.offset, r.key, r.value) for r in records) == sorted(
            (m.partition, m.offset, b"key-%d" % (i % 11), b"v-%d" % i) for i, m in enumerate(sent))
        await first.commit()
        await second.commit()
        ends = await first.end_offsets([TopicPartition("ak-keyed", p) for p in range(3)])
        await first.stop()
        await second.stop()

        groups = await admin.list_consumer_groups()
        assert ("ak-group", "consumer") in [(g[0], g[1]) for g in groups]
        offsets = await admin.list_consumer_group_offsets("ak-group")
        assert {tp.partition: meta.offset for tp, meta in offsets.items()} == {tp.partition: o for tp, o in ends.items()}
        await admin.close()

    asyncio.run(scenario())


def test_exactly_once_consume_transform_produce_and_read_committed(bootstrap):
    async def scenario():
        admin = await admin_client(bootstrap)
        await create(admin, "ak-in", 1)
        await create(admin, "ak-out", 2)
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        for i in range(20):
            await producer.send_and_wait("ak-in", b"in-%d" % i)
        await producer.stop()

        source = AIOKafkaConsumer("ak-in", bootstrap_servers=bootstrap, group_id="ak-eos", auto_offset_reset="earliest",
                                  enable_auto_commit=False, isolation_level="read_committed")
        await source.start()
        inputs = await read(source, 20)
        assert [r.value for r in inputs] == [b"in-%d" % i for i in range(20)]
        transactional = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="ak-eos-1")
        await transactional.start()
        for start, commit in ((0, True), (10, False)):  # the first ten committed, the next ten aborted
            await transactional.begin_transaction()
            for record in inputs[start:start + 10]:
                await transactional.send("ak-out", record.value.replace(b"in", b"out"), partition=record.offset % 2)
            await transactional.send_offsets_to_transaction(
                {TopicPartition("ak-in", 0): OffsetAndMetadata(start + 10, "")}, "ak-eos")
            await (transactional.commit_transaction() if commit else transactional.abort_transaction())
        await transactional.stop()
        await source.stop()

        committed = await admin.list_consumer_group_offsets("ak-eos")
        assert {tp.partition: meta.offset for tp, meta in committed.items()} == {0: 10}  # the aborted ones did not move it

        async def values(isolation: str, count: int) -> list[bytes]:
            consumer = AIOKafkaConsumer("ak-out", bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                        isolation_level=isolation)
            await consumer.start()
            records = await read(consumer, count)
            if isolation == "read_committed":  # nothing more comes after the committed ten (the markers are
                records += await read(consumer, 1, NOTHING_MORE_SECONDS)  # written: the aborted ten were read above)
            await consumer.stop()
            return sorted(r.value for r in records)

        assert await values("read_committed", 10) == sorted(b"out-%d" % i for i in range(10))
        assert await values("read_uncommitted", 20) == sorted(b"out-%d" % i for i in range(20))
        await admin.close()

    asyncio.run(scenario())


def test_admin_configs_partitions_records_and_deletion(bootstrap):
    async def scenario():
        admin = await admin_client(bootstrap)
        await create(admin, "ak-admin", 2, {"cleanup.policy": "compact"})
        resource = ConfigResource(ConfigResourceType.TOPIC, "ak-admin")
        (altered,) = await admin.alter_configs([ConfigResource(
            ConfigResourceType.TOPIC, "ak-admin", configs={"cleanup.policy": "compact", "retention.ms": "7200000"})])
        assert [resource_result[0] for resource_result in altered.resources] == [0]
        # The controller answers once the change is committed; the node the client asks describes it once it has
        # applied the metadata log that far, a moment later (as in Kafka).
        deadline = time.monotonic() + READ_SECONDS_MAX
        while True:
            (described,) = await admin.describe_configs([resource])
            ((error_code, _, _, name, configs),) = described.resources
            assert (error_code, name) == (0, "ak-admin")
            entries = {entry[0]: entry[1] for entry in configs}
            if entries["retention.ms"] == "7200000" or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.2)
        assert (entries["cleanup.policy"], entries["retention.ms"]) == ("compact", "7200000")
        await admin.create_partitions({"ak-admin": NewPartitions(3)})
        topic = await wait_led(admin, "ak-admin", 3)  # a second description could come from a node that lags
        assert sorted(p["partition"] for p in topic["partitions"]) == [0, 1, 2]

        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        for i in range(10):
            await producer.send_and_wait("ak-admin", b"k%d" % i, key=b"k%d" % i, partition=0)
        await producer.stop()
        low = await admin.delete_records({TopicPartition("ak-admin", 0): RecordsToDelete(4)})
        assert {tp.partition: watermark for tp, watermark in low.items()} == {0: 4}
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
        await consumer.start()
        assert (await consumer.beginning_offsets([TopicPartition("ak-admin", 0)]))[TopicPartition("ak-admin", 0)] == 4
        await consumer.stop()

        await admin.delete_topics(["ak-admin"])
        deadline = time.monotonic() + READ_SECONDS_MAX
        while "ak-admin" in await admin.list_topics():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.2)
        await admin.close()

    asyncio.run(scenario())
