"""KafkaClient (trio) against the in-memory test peer: routing, retries, typed errors, records round trips."""

from __future__ import annotations

import pytest
import trio

from net.client.aio import METADATA_FRESH_SECONDS, KafkaClient, decode_fetched, parse_bootstrap_servers
from net.client.errors import NetworkError, NoBrokersAvailableError
from net.client.results import NewTopic
from cli.local_cluster import free_ports
from net.protocol import messages
from net.protocol.codec import SUPPORTED, ApiKey
from partitions.errors import (
    InvalidConfigError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from partitions.murmur2 import default_partition
from partitions.records import build_batch, build_control_batch
from tests.net.test_client_peer import PeerBroker, PeerPartition


async def started_peer(nursery, **options) -> PeerBroker:
    peer = PeerBroker(**options)
    await peer.serve(nursery)
    return peer


def fast_client(bootstrap: str, **options) -> KafkaClient:
    options = {"retry_backoff_ms": 5, "retry_backoff_ms_max": 20, "request_timeout_ms": 5000, **options}
    return KafkaClient(bootstrap, "test-client", **options)


async def test_produce_then_fetch_round_trips_keys_values_headers_and_offsets(nursery):
    peer = await started_peer(nursery)
    peer.create_topic("t", 1)
    async with fast_client(peer.bootstrap) as client:
        first = await client.produce("t", 0, build_batch([(b"k1", b"v1"), (None, b"v2", [("h", b"x")])]))
        second = await client.produce("t", 0, build_batch([(b"k3", None)]))
        result = await client.fetch("t", 0, 0)
    assert (first, second) == (0, 2)
    assert [(r.offset, r.key, r.value, r.headers) for r in result.records] == [
        (0, b"k1", b"v1", ()), (1, None, b"v2", (("h", b"x"),)), (2, b"k3", None, ())]
    assert (result.high_watermark, result.log_start_offset, result.next_offset, result.error) == (3, 0, 3, None)


async def test_fetch_from_the_middle_of_a_batch_skips_earlier_records(nursery):
    peer = await started_peer(nursery)
    peer.create_topic("t", 1)
    async with fast_client(peer.bootstrap) as client:
        await client.produce("t", 0, build_batch([(None, b"%d" % i) for i in range(5)], compression=1))
        result = await client.fetch("t", 0, 3)
    assert [r.offset for r in result.records] == [3, 4]


async def test_produce_records_partitions_keys_with_murmur2_like_java(nursery):
    peer = await started_peer(nursery)
    peer.create_topic("t", 3)
    async with fast_client(peer.bootstrap) as client:
        offsets = await client.produce_records("t", [(b"a", b"1"), (b"b", b"2"), (b"a", b"3")], compression=4)
        fetched = {p: await client.fetch("t", p, 0) for p in range(3)}
    partition_a = default_partition(b"a", 3)
    assert [r.value for r in fetched[partition_a].records if r.key == b"a"] == [b"1", b"3"]
    assert fetched[default_partition(b"b", 3)].records[-1].value == b"2"
    assert set(offsets) == {partition_a, default_partition(b"b", 3)}


async def test_unkeyed_records_of_one_call_stick_to_one_partition(nursery):
    peer = await started_peer(nursery)
    peer.create_topic("t", 4)
    async with fast_client(peer.bootstrap) as client:
        offsets = await client.produce_records("t", [(None, b"%d" % i) for i in range(10)])
    assert len(offsets) == 1


async def test_produce_records_auto_creates_the_topic_after_leader_not_available(nursery):
    peer = await started_peer(nursery, auto_create_partitions=2)
    async with fast_client(peer.bootstrap) as client:
        offsets = await client.produce_records("fresh", [(b"k", b"v")])
    assert "fresh" in peer.topics and list(offsets.values()) == [[0]]


async def test_produce_records_splits_large_input_into_batches_under_the_limit(nursery):
    peer = await started_peer(nursery)
    peer.create_topic("t", 1)
    async with fast_client(peer.bootstrap) as client:
        offsets = await client.produce_records("t", [(None, b"x" * 1000)] * 50, batch_bytes_max=10_000)
        records = (await client.fetch("t", 0, 0, max_bytes=10 << 20)).records
    assert len(offsets[0]) > 1 and offsets[0] == sorted(offsets[0]) and offsets[0][0] == 0
    assert all(len(batch) <= 10_000 for _, batch in peer.topics["t"].partitions[0].batches)
    assert [r.offset for r in records] == list(range(50))


async def test_not_leader_is_retried_after_a_metadata_refresh(nursery):
    peer = await started_peer(nursery)
    peer.create_topic("t", 1)
    async with fast_client(peer.bootstrap) as client:
        await client.metadata()
        metadata_before = sum(1 for key, _ in peer.requests_seen if key == ApiKey.METADATA)
        peer.not_leader_answers = 2
        assert await client.produce("t", 0, build_batch([(None, b"v")])) == 0
        metadata_after = sum(1 for key, _ in peer.requests_seen if key == ApiKey.METADATA)
    assert metadata_after - metadata_before == 2


async def test_not_leader_past_retries_max_raises_typed_error(nursery):
    peer = await started_peer(nursery)
    peer.create_topic("t", 1)
    peer.not_leader_answers = 10
    async with fast_client(peer.bootstrap, retries_max=2) as client:
        with pytest.raises(NotLeaderOrFollowerError) as caught:
            await client.fetch("t", 0, 0)
    assert caught.value.retriable
    assert peer.not_leader_answers == 7


async def test_fetch_out_of_range_comes_back_in_the_result(nursery):
    peer = await started_peer(nursery)
    peer.create_topic("t", 1)
    async with fast_client(peer.bootstrap) as client:
        result = await client.fetch("t", 0, 42)
    assert isinstance(result.error, OffsetOutOfRangeError) and result.records == []


async def test_fetch_of_unknown_topic_raises_after_bounded_retries(nursery):
    peer = await started_peer(nursery)
    async with fast_client(peer.bootstrap, retries_max=1) as client:
        with pytest.raises(UnknownTopicOrPartitionError):
            await client.fetch("missing", 0, 0)


async def test_long_poll_fetch_returns_when_a_record_arrives(nursery):
    peer = await started_peer(nursery)
    peer.create_topic("t", 1)
    async with fast_client(peer.bootstrap) as client:
        async with trio.open_nursery() as inner:
            inner.start_soon(_produce_later, client, 0.1)
            with trio.fail_after(3):
                result = await client.fetch("t", 0, 0, max_wait_ms=2000)
    assert [r.value for r in result.records] == [b"late"]


async def _produce_later(client: KafkaClient, delay_s: float) -> None:
    await trio.sleep(delay_s)
    async with fast_client(client.bootstrap[0][0] + f":{client.bootstrap[0][1]}") as other:
        await other.produce("t", 0, build_batch([(None, b"late")]))


async def test_pipelined_concurrent_requests_share_one_connection(nursery):
    peer = await started_peer(nursery)
    peer.create_topic("t", 1)
    async with fast_client(peer.bootstrap) as client:
        await client.produce_records("t", [(None, b"v")] * 3, partition=0)
        results = []

        async def fetch_one():
            results.append(await client.fetch("t", 0, 1))

        async with trio.open_nursery() as inner:
            for _ in range(20):
                inner.start_soon(fetch_one)
        assert len([c for c in client._connections.values() if c.alive]) <= 2  # bootstrap + node 1
    assert all([r.offset for r in result.records] == [1, 2] for result in results) and len(results) == 20


async def test_list_offsets_earliest_and_latest(nursery):
    peer = await started_peer(nursery)
    peer.create_topic("t", 2)
    async with fast_client(peer.bootstrap) as client:
        await client.produce_records("t", [(None, b"a"), (None, b"b")], partition=1)
        latest = await client.list_offsets("t", timestamp=-1)
        low = await client.delete_records("t", {1: 1})
        earliest = await client.list_offsets("t", [1], timestamp=-2)
    assert {p: o.offset for p, o in latest.items()} == {0: 0, 1: 2}
    assert low == {1: 1} and earliest[1].offset == 1


async def test_topic_administration_round_trip(nursery):
    peer = await started_peer(nursery)
    async with fast_client(peer.bootstrap) as client:
        await client.create_topics([NewTopic("a", 2, 1, {"retention.ms": "1000"})])
        with pytest.raises(TopicAlreadyExistsError, match="'a'"):
            await client.create_topics(["a"])
        with pytest.raises(InvalidConfigError, match="retention.ms"):
            await client.create_topics([NewTopic("b", 1, 1, {"retention.ms": "soon"})])
        await client.create_partitions({"a": 5})
        assert await client.partitions_for("a") == [0, 1, 2, 3, 4]
        configs = await client.describe_configs("a")
        assert configs["retention.ms"].value == "1000" and not configs["retention.ms"].is_default
        assert configs["cleanup.policy"].is_default
        await client.alter_configs("a", set={"cleanup.policy": "compact"}, delete=["retention.ms"])
        configs = await client.describe_configs("a")
        assert configs["cleanup.policy"].value == "compact" and configs["retention.ms"].is_default
        with pytest.raises(InvalidConfigError):
            await client.alter_configs("a", set={"min.insync.replicas": "two"})
        await client.delete_topics(["a"])
        with pytest.raises(UnknownTopicOrPartitionError):
            await client.delete_topics(["a"])
        cluster = await client.describe_cluster()
    assert cluster.cluster_id == "peer-cluster" and list(cluster.brokers) == [1]


async def test_admin_requests_go_to_a_reachable_broker_when_the_listed_controller_is_down(nursery):
    """The metadata names a controller (node 2) nobody listens for, as while it is down and not yet fenced: the
    client hands the request to a broker it reaches (node 1), which forwards it to the controller in a real
    cluster, rather than failing on "cannot connect" to node 2."""
    peer = await started_peer(nursery)
    peer.listed_controller = (2, free_ports(1)[0])
    async with fast_client(peer.bootstrap) as client:
        with trio.fail_after(10):
            await client.create_topics([NewTopic("a", 2, 1)])
        assert await client.partitions_for("a") == [0, 1]
    assert (ApiKey.CREATE_TOPICS, SUPPORTED[ApiKey.CREATE_TOPICS][1]) in peer.requests_seen


async def test_send_returns_the_raw_response_at_the_negotiated_version(nursery):
    peer = await started_peer(nursery, supported={**SUPPORTED, ApiKey.METADATA: (0, 4)})
    async with fast_client(peer.bootstrap) as client:
        response = await client.send(None, ApiKey.METADATA, messages.MetadataRequest(topics=None))
    assert response.brokers[0].node_id == 1
    assert (ApiKey.METADATA, 4) in peer.requests_seen


async def test_api_versions_fallback_against_an_older_peer(nursery):  # KIP-511
    peer = await started_peer(nursery, supported={**SUPPORTED, ApiKey.API_VERSIONS: (0, 2)})
    async with fast_client(peer.bootstrap) as client:
        await client.metadata()
    highest = SUPPORTED[ApiKey.API_VERSIONS][1]
    assert peer.requests_seen[:2] == [(ApiKey.API_VERSIONS, highest), (ApiKey.API_VERSIONS, 2)]


async def test_unreachable_cluster_raises_no_brokers_available():
    port = free_ports(1)[0]
    async with fast_client(f"127.0.0.1:{port}", first_contact_retries_max=1) as client:
        with trio.fail_after(2):  # not the full budget of retries_max
            with pytest.raises(NoBrokersAvailableError, match=str(port)):
                await client.metadata()


async def test_produce_retries_a_lost_acknowledgement_at_least_once(nursery):
    peer = await started_peer(nursery)
    peer.create_topic("t", 1)
    async with fast_client(peer.bootstrap) as client:
        await client.fetch("t", 0, 0)  # connected to the leader, versions negotiated
        peer.drop_next_connection_after_request = True
        assert await client.produce("t", 0, build_batch([(None, b"v")])) == 1
        # the first append happened and only its answer was lost: Kafka's non-idempotent producer duplicates
        assert [r.value for r in (await client.fetch("t", 0, 0)).records] == [b"v", b"v"]


async def test_connection_lost_past_retries_max_raises_network_error(nursery):
    peer = await started_peer(nursery)
    peer.create_topic("t", 1)
    async with fast_client(peer.bootstrap, retries_max=0) as client:
        await client.fetch("t", 0, 0)
        peer.drop_next_connection_after_request = True
        with pytest.raises(NetworkError):
            await client.produce("t", 0, build_batch([(None, b"v")]))


async def test_errors_leave_the_client_block_unwrapped(nursery):
    peer = await started_peer(nursery)
    with pytest.raises(UnknownTopicOrPartitionError):
        async with fast_client(peer.bootstrap, retries_max=0) as client:
            await client.fetch("missing", 0, 0)


def test_bootstrap_servers_parse_and_refuse_bad_entries():
    assert parse_bootstrap_servers("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap_servers(["[::1]:9092"]) == [("::1", 9092)]
    for bad in ("a", "a:b", ":1", "", "a:70000"):
        with pytest.raises(ValueError):
            parse_bootstrap_servers(bad)


def test_read_committed_decoding_drops_aborted_transactions_and_control_batches():  # KIP-98
    committed = build_batch([(None, b"c1")], base_offset=0, producer_id=7, producer_epoch=0, base_sequence=0,
                            is_transactional=True)
    commit = build_control_batch(1, 7, 0, 0, 0, base_offset=1)
    aborted = build_batch([(None, b"a1"), (None, b"a2")], base_offset=2, producer_id=8, producer_epoch=0,
                          base_sequence=0, is_transactional=True)
    plain = build_batch([(None, b"p")], base_offset=4)
    abort = build_control_batch(0, 8, 0, 0, 0, base_offset=5)
    after = build_batch([(None, b"late")], base_offset=6, producer_id=8, producer_epoch=0, base_sequence=2,
                        is_transactional=True)
    buffer = committed + commit + aborted + plain + abort + after
    records, next_offset = decode_fetched(buffer, 0, aborted=[(2, 8)])
    assert [r.value for r in records] == [b"c1", b"p", b"late"] and next_offset == 7
    records, _ = decode_fetched(buffer, 0)
    assert [r.value for r in records] == [b"c1", b"a1", b"a2", b"p", b"late"]


async def test_produce_to_a_named_partition_auto_creates_the_topic(nursery):
    peer = await started_peer(nursery, auto_create_partitions=2)
    async with fast_client(peer.bootstrap) as client:
        assert await client.produce("new", 1, build_batch([(None, b"v")])) == 0
    assert len(peer.topics["new"].partitions) == 2


async def test_fetch_names_the_topic_by_id_from_v13_and_by_name_below(nursery):  # KIP-516
    for fetch_version_max in (SUPPORTED[ApiKey.FETCH][1], 12):
        peer = await started_peer(nursery, supported={**SUPPORTED, ApiKey.FETCH: (4, fetch_version_max)})
        peer.create_topic("t", 1)
        async with fast_client(peer.bootstrap) as client:
            await client.produce("t", 0, build_batch([(None, b"v")]))
            result = await client.fetch("t", 0, 0)
        assert [r.value for r in result.records] == [b"v"] and result.error is None
        assert (ApiKey.FETCH, fetch_version_max) in peer.requests_seen


async def test_a_topic_recreated_under_its_name_is_fetched_by_its_new_id_after_a_metadata_refresh(nursery):
    peer = await started_peer(nursery)
    peer.create_topic("t", 1)
    async with fast_client(peer.bootstrap) as client:
        assert (await client.fetch("t", 0, 0)).records == []  # the old id is cached
        peer.create_topic("t", 1)  # a new topic id under the same name
        await client.produce("t", 0, build_batch([(None, b"new")]))
        result = await client.fetch("t", 0, 0)  # UNKNOWN_TOPIC_ID, then fresh metadata and the new id
    assert [r.value for r in result.records] == [b"new"]


async def test_a_partition_added_after_the_cache_was_filled_is_asked_for_before_it_is_called_unknown(nursery):
    """CreatePartitions by another client: the cached topic has one partition, the cluster two. The client asks
    the cluster again rather than answering UNKNOWN_TOPIC_OR_PARTITION from its cache (a Spark executor's pooled
    client was told of partition 1 by the driver's plan)."""
    peer = await started_peer(nursery)
    peer.create_topic("t", 1)
    async with fast_client(peer.bootstrap) as client:
        assert await client.partitions_for("t") == [0]
        peer.topics["t"].partitions.append(PeerPartition())
        await trio.sleep(METADATA_FRESH_SECONDS)
        assert (await client.leader_for("t", 1)).leader == 1
        with pytest.raises(UnknownTopicOrPartitionError, match="t-2"):
            await client.leader_for("t", 2)
