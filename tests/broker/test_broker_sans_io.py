"""The broker core and the Kafka API handlers, sans-IO: a real QuorumController decides, its records are
replayed into each broker as metadata deltas, and requests/responses are the codec's message objects.
No sockets: followers' fetches are delivered by direct calls, as the simulator does."""

import random

import pytest

from metadata.controller import ControllerConfig, QuorumController
from metadata.image import MetadataDelta, MetadataImage, Provenance
from metadata.requests import (
    AlterableConfig,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    ConfigEntry,
    ConfigResource,
    CreatableTopic,
    CreateTopicsRequest,
    IncrementalAlterConfigsRequest,
)
from broker.core import BrokerCore
from broker.apis import Deferred, KafkaApis
from broker.handlers_cluster import AUTO_CREATE_REFUSAL_GRACE_MS, UNREADY_HELD_MAX, UNREADY_HOLD_MS, ClusterApis
from broker.handlers_data import DataPlaneApis
from net.protocol import messages
from net.protocol.codec import ApiKey, RequestHeader, decode_request, decode_response, encode_request, encode_response
from partitions.errors import ErrorCode
from partitions.records import build_batch, decode_batches
from partitions.storage import MemoryStorage
from security.acl import Authorizer, AuthorizerSettings
from security.session import Session


class Cluster:
    """Brokers 1..n over MemoryStorage, a controller, and a metadata log replayed into every broker."""

    def __init__(self, broker_count=3, min_isr=2, racks=None, replica_selector=""):
        self.now_ms = 1_000
        self.controller = QuorumController(ControllerConfig(default_replication_factor=broker_count), random.Random(7))
        self.raft_index = 0
        self.brokers = {}
        self.apis = {}
        self.images = {}
        self.completed = {}  # broker id -> deferred responses answered so far
        self.log = []  # every committed entry: (records, provenance), for a broker replaying from scratch
        for broker_id in range(1, broker_count + 1):
            broker = BrokerCore(broker_id, "127.0.0.1", 9000 + broker_id, ("broker",), MemoryStorage(),
                                incarnation_id=bytes([broker_id]) * 16, default_min_insync_replicas=min_isr,
                                rack=(racks or {}).get(broker_id), replica_selector=replica_selector)
            self.brokers[broker_id] = broker
            self.apis[broker_id] = KafkaApis(broker, "test", lambda: 1)
            self.images[broker_id] = MetadataImage()
        self.controller.become_active(self.now_ms)
        for broker_id, broker in self.brokers.items():
            epoch = self.commit(BrokerRegistrationRequest(broker_id=broker_id, incarnation_id=broker.incarnation_id,
                                                          host="127.0.0.1", port=broker.port,
                                                          rack=broker.rack)).broker_epoch
            broker.broker_epoch = epoch
        for broker_id, broker in self.brokers.items():
            self.commit(BrokerHeartbeatRequest(broker_id=broker_id, broker_epoch=broker.broker_epoch,
                                               current_metadata_offset=self.raft_index))
        for broker_id, broker in self.brokers.items():  # each learns it is unfenced: it serves from now on
            broker._on_heartbeat(self.commit(BrokerHeartbeatRequest(
                broker_id=broker_id, broker_epoch=broker.broker_epoch, current_metadata_offset=self.raft_index)),
                self.now_ms)
            assert broker.serving

    def commit(self, request, cut_off=()):
        """handle -> commit (one entry) -> replay on the controller and on every broker but those `cut_off` (their
        metadata image trails: cut off from the controllers)."""
        result = self.controller.handle(request, self.now_ms)
        if result.records:
            self.raft_index += 1
            provenance = Provenance(self.raft_index, 1)
            self.log.append((result.records, provenance))
            self.controller.replay_batch(result.records, provenance)
            for broker_id in self.brokers:
                if broker_id not in cut_off:
                    self.apply_entry(broker_id, result.records, provenance)
        return result.response

    def apply_entry(self, broker_id, records, provenance):
        """One committed entry replayed into `broker_id`'s image and applied by its broker."""
        delta = MetadataDelta(self.images[broker_id])
        for record in records:
            delta.replay(record, provenance)
        self.images[broker_id] = delta.apply()
        self.brokers[broker_id].apply_metadata(delta, self.images[broker_id], self.now_ms)

    def deliver_controller_calls(self, cut_off=()):
        for broker_id, broker in self.brokers.items():
            if broker_id in cut_off:
                continue
            for call in broker.take_controller_requests():
                call.on_response(self.commit(call.request, cut_off), self.now_ms)

    def replicate(self, rounds=3, fetching=None, cut_off=()):
        """Followers (those `fetching`, default all) fetch from leaders by direct calls into the leaders' Kafka API
        handlers; brokers `cut_off` from the controllers neither send them calls nor learn their decisions."""
        for _ in range(rounds):
            for broker_id, broker in self.brokers.items():
                if fetching is not None and broker_id not in fetching:
                    continue
                for leader_id in sorted(broker.replica_leaders()):
                    sent = broker.next_replica_request(leader_id, self.now_ms)
                    if sent is None:
                        continue
                    if sent.api_key == ApiKey.FETCH:
                        sent.request.max_wait_ms = 0  # no long poll: this pump delivers synchronously
                    response = self.call(leader_id, sent.api_key, sent.api_version, sent.request)
                    assert not isinstance(response, Deferred)
                    broker.on_replica_response(sent, response, self.now_ms)
            self.deliver_controller_calls(cut_off)
            for broker_id, apis in self.apis.items():
                self.completed.setdefault(broker_id, []).extend(apis.poll(self.now_ms))

    def call(self, broker_id, api_key, api_version, request):
        """Through the real codec both ways, as on the wire."""
        header = RequestHeader(api_key, api_version, 1, "test")
        decoded_header, decoded = decode_request(encode_request(header, request)[4:])
        result = self.apis[broker_id].handle(decoded_header, decoded, self.now_ms)
        if result is None or isinstance(result, Deferred):
            return result
        return decode_response(api_key, api_version, encode_response(decoded_header, result)[4:])[1]


def replay_from_scratch(broker, entries, now_ms):
    """Apply committed `entries` ((records, provenance), as Cluster.log holds them) to `broker` as one delta
    from an empty image: a restarted node replaying its metadata log, or a node installing a snapshot."""
    delta = MetadataDelta(MetadataImage())
    for records, provenance in entries:
        for record in records:
            delta.replay(record, provenance)
    broker.apply_metadata(delta, delta.apply(), now_ms)


def produce_request(topic, partition, values, acks=-1, keys=None):
    request_class = messages.ProduceRequest
    batch = build_batch(list(zip(keys or [None] * len(values), values)), base_timestamp=1_700_000_000_000)
    return request_class(
        transactional_id=None, acks=acks, timeout_ms=5_000,
        topic_data=[request_class.TopicProduceData(name=topic, partition_data=[
            request_class.PartitionProduceData(index=partition, records=batch)])],
    )


def fetch_request(topic, partition, offset, max_wait_ms=0, min_bytes=1, rack_id=""):
    request_class = messages.FetchRequest
    return request_class(
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=1 << 20, isolation_level=0,
        topics=[request_class.FetchTopic(topic=topic, partitions=[request_class.FetchPartition(
            partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20)])], rack_id=rack_id,
    )


@pytest.fixture
def cluster():
    cluster = Cluster()
    response = cluster.commit(CreateTopicsRequest(topics=(CreatableTopic(name="t", num_partitions=3, replication_factor=3),)))
    assert response.topics[0].error_code == ErrorCode.NONE
    return cluster


def leader_of(cluster, partition):
    return cluster.images[1].topics.by_name["t"].partitions[partition].leader


def test_metadata_lists_brokers_topics_leaders_and_isr(cluster):
    response = cluster.call(1, ApiKey.METADATA, 8, messages.MetadataRequest(topics=None))
    assert sorted(b.node_id for b in response.brokers) == [1, 2, 3]
    (topic,) = response.topics
    assert topic.name == "t" and topic.error_code == ErrorCode.NONE
    assert sorted(p.partition_index for p in topic.partitions) == [0, 1, 2]
    assert sorted(p.leader_id for p in topic.partitions) == [1, 2, 3]  # leaders spread
    for partition in topic.partitions:
        assert sorted(partition.isr_nodes) == [1, 2, 3] and partition.offline_replicas == []


def test_metadata_v12_carries_topic_ids_and_answers_a_topic_asked_by_id(cluster):  # KIP-516, librdkafka's v12
    import uuid

    topic_class = messages.MetadataRequest.MetadataRequestTopic
    (listed,) = cluster.call(1, ApiKey.METADATA, 12, messages.MetadataRequest(topics=None)).topics
    assert listed.topic_id == uuid.UUID(bytes=cluster.images[1].topics.by_name["t"].topic_id)
    assert [p.leader_epoch for p in listed.partitions] == [
        cluster.images[1].topics.by_name["t"].partitions[p.partition_index].leader_epoch for p in listed.partitions]
    unknown = uuid.UUID(int=12345)
    by_id = cluster.call(1, ApiKey.METADATA, 12, messages.MetadataRequest(
        topics=[topic_class(topic_id=listed.topic_id, name=None), topic_class(topic_id=unknown, name=None)]))
    assert [(t.name, t.error_code, len(t.partitions)) for t in by_id.topics] == [
        ("t", ErrorCode.NONE, 3), (None, ErrorCode.UNKNOWN_TOPIC_ID, 0)]
    old = cluster.call(1, ApiKey.METADATA, 11, messages.MetadataRequest(topics=[topic_class(topic_id=unknown, name=None)]))
    assert old.topics[0].error_code == ErrorCode.INVALID_REQUEST  # names are required before v12


def test_an_auto_creation_the_controller_refuses_is_logged_and_answered_with_its_error_until_it_succeeds(cluster):
    """Broker 3 shuts down, so the default replication factor of 3 cannot be placed: the answer is the usual
    LEADER_NOT_AVAILABLE while the controller is asked, and after its first refusal (logged once) for the grace a
    restarting broker needs; then the refusal's error until broker 3 is back, when the next request's creation
    succeeds. A refusal older than the grace is forgotten (the next request starts afresh), and so is a refused
    topic an administrator creates meanwhile."""
    topic_class = messages.MetadataRequest.MetadataRequestTopic

    def ask(version=12, name="auto"):
        (topic,) = cluster.call(1, ApiKey.METADATA, version, messages.MetadataRequest(
            topics=[topic_class(name=name)], allow_auto_topic_creation=True)).topics
        cluster.deliver_controller_calls()
        return topic.error_code

    third = cluster.brokers[3]
    cluster.commit(BrokerHeartbeatRequest(broker_id=3, broker_epoch=third.broker_epoch,
                                          current_metadata_offset=cluster.raft_index, want_shutdown=True))
    cluster.brokers[1].take_notices()
    assert [ask(), ask()] == [ErrorCode.LEADER_NOT_AVAILABLE] * 2  # asked, then refused within the grace
    cluster.now_ms += AUTO_CREATE_REFUSAL_GRACE_MS - 1
    assert ask() == ErrorCode.LEADER_NOT_AVAILABLE
    cluster.now_ms += 1
    assert [ask(), ask(version=4)] == [ErrorCode.INVALID_REPLICATION_FACTOR] * 2
    (notice,) = cluster.brokers[1].take_notices()  # once, though each request asked the controller again
    assert notice == ("topic_auto_create_refused", {
        "topic": "auto", "error": "INVALID_REPLICATION_FACTOR", "reason": "Unable to replicate the partition 3 "
        "time(s): The target replication factor of 3 cannot be reached because only 2 broker(s) are registered."})
    assert "auto" not in cluster.images[1].topics.by_name
    assert [ask(name="other"), ask(name="other")] == [ErrorCode.LEADER_NOT_AVAILABLE] * 2
    created = cluster.commit(CreateTopicsRequest(topics=(CreatableTopic(name="other", num_partitions=1,
                                                                          replication_factor=2),)))
    assert created.topics[0].error_code == ErrorCode.NONE and ask(name="other") == ErrorCode.NONE
    cluster.brokers[1].take_notices()

    cluster.now_ms += AUTO_CREATE_REFUSAL_GRACE_MS + 1  # nobody asked for "auto" meanwhile: its refusal is stale
    assert ask() == ErrorCode.LEADER_NOT_AVAILABLE
    assert [event for event, _ in cluster.brokers[1].take_notices()] == ["topic_auto_create_refused"]  # afresh
    cluster.now_ms += AUTO_CREATE_REFUSAL_GRACE_MS
    assert ask() == ErrorCode.INVALID_REPLICATION_FACTOR

    epoch = cluster.commit(BrokerRegistrationRequest(broker_id=3, incarnation_id=bytes([33]) * 16,
                                                     host="127.0.0.1", port=third.port)).broker_epoch  # restarted
    for _ in range(2):  # caught up, then unfenced
        cluster.commit(BrokerHeartbeatRequest(broker_id=3, broker_epoch=epoch, current_metadata_offset=cluster.raft_index))
    assert ask() == ErrorCode.INVALID_REPLICATION_FACTOR  # the answer of the last try, while this one is made
    assert ask() == ErrorCode.NONE and "auto" in cluster.images[1].topics.by_name
    assert ask() == ErrorCode.NONE
    assert cluster.brokers[1].take_notices() == []
    (group,) = [g for g in cluster.apis[1]._groups if isinstance(g, ClusterApis)]
    assert group._auto_create_refusals == {}  # forgotten once created


def test_acks_all_produce_completes_only_after_followers_replicate(cluster):
    leader = leader_of(cluster, 0)
    result = cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"a", b"b", b"c"]))
    assert isinstance(result, Deferred)
    assert cluster.apis[leader].poll(cluster.now_ms) == []  # nobody has fetched yet
    cluster.replicate()
    followers = [b for b in (1, 2, 3) if b != leader]
    for follower in followers:
        assert cluster.brokers[follower].hosted("t", 0).log.log_end_offset == 3
    assert cluster.brokers[leader].hosted("t", 0).replica.high_watermark == 3
    fetched = cluster.call(leader, ApiKey.FETCH, 11, fetch_request("t", 0, 0))
    records = list(decode_batches(bytes(fetched.responses[0].partitions[0].records)))
    assert [r.value for batch in records for r in batch.records] == [b"a", b"b", b"c"]


def test_produce_to_a_follower_answers_not_leader(cluster):
    follower = next(b for b in (1, 2, 3) if b != leader_of(cluster, 1))
    response = cluster.call(follower, ApiKey.PRODUCE, 7, produce_request("t", 1, [b"x"], acks=1))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    unknown = cluster.call(follower, ApiKey.PRODUCE, 7, produce_request("nope", 0, [b"x"], acks=1))
    assert unknown.responses[0].partition_responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_consumers_never_read_above_the_high_watermark(cluster):
    leader = leader_of(cluster, 2)
    response = cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 2, [b"v1"], acks=1))
    assert response.responses[0].partition_responses[0].base_offset == 0
    fetched = cluster.call(leader, ApiKey.FETCH, 11, fetch_request("t", 2, 0))
    data = fetched.responses[0].partitions[0]
    assert data.high_watermark == 0 and not data.records  # appended on the leader only
    cluster.replicate()
    fetched = cluster.call(leader, ApiKey.FETCH, 11, fetch_request("t", 2, 0))
    assert fetched.responses[0].partitions[0].high_watermark == 1 and fetched.responses[0].partitions[0].records


def long_poll_then_produce(cluster, leader, value):
    """A consumer's fetch of t-0 parks at `leader`; `value` is produced (acks=1) and replicated; the values the
    parked fetch was answered with."""
    pending = cluster.call(leader, ApiKey.FETCH, 11, fetch_request("t", 0, 0, max_wait_ms=5_000))
    assert isinstance(pending, Deferred)
    cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [value], acks=1))
    cluster.replicate()
    completed = {request_id: response for request_id, _, response in cluster.completed[leader]}
    records = completed[pending.request_id].responses[0].partitions[0].records
    return [r.value for b in decode_batches(bytes(records)) for r in b.records]


def test_long_poll_fetch_completes_when_data_arrives(cluster):
    assert long_poll_then_produce(cluster, leader_of(cluster, 0), b"late") == [b"late"]


def test_a_parked_consumer_fetch_is_read_again_only_once_its_partition_has_records_to_give(cluster, monkeypatch):
    # Kafka's DelayedFetch.tryComplete: an acks=all append moves the log end, not the high watermark, so the
    # parked fetch stays parked without a read; the followers' fetches move the watermark and it is answered.
    reads = []
    original = DataPlaneApis._read_fetch
    monkeypatch.setattr(DataPlaneApis, "_read_fetch", lambda self, *args: reads.append(args[1]) or original(self, *args))
    leader = leader_of(cluster, 0)
    pending = cluster.call(leader, ApiKey.FETCH, 11, fetch_request("t", 0, 0, max_wait_ms=5_000))
    assert isinstance(pending, Deferred) and len(reads) == 1  # the read when it arrived
    assert isinstance(cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"v"])), Deferred)
    assert cluster.brokers[leader].hosted("t", 0).log.log_end_offset == 1
    assert cluster.apis[leader].poll(cluster.now_ms) == [] and len(reads) == 1
    cluster.replicate()
    completed = {request_id: response for request_id, _, response in cluster.completed[leader]}
    records = completed[pending.request_id].responses[0].partitions[0].records
    assert [r.value for b in decode_batches(bytes(records)) for r in b.records] == [b"v"]
    assert [request.replica_id for request in reads].count(-1) == 2  # arrival, and once the watermark moved


RACKS = {1: "a", 2: "b", 3: "c"}


def racked_cluster(replica_selector):
    cluster = Cluster(racks=RACKS, replica_selector=replica_selector)
    cluster.commit(CreateTopicsRequest(topics=(CreatableTopic(name="t", num_partitions=1, replication_factor=3),)))
    return cluster


def fetched_values(response):
    return [r.value for b in decode_batches(bytes(response.partitions[0].records or b"")) for r in b.records]


def test_with_a_replica_selector_a_leader_names_the_in_sync_replica_in_the_consumers_rack():  # KIP-392
    cluster = racked_cluster("rack")
    leader = leader_of(cluster, 0)
    follower = min(b for b in RACKS if b != leader)
    cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"x", b"y"]))
    cluster.replicate()
    redirected = cluster.call(leader, ApiKey.FETCH, 11, fetch_request("t", 0, 0, rack_id=RACKS[follower]))
    data = redirected.responses[0].partitions[0]
    assert (data.preferred_read_replica, data.error_code, data.high_watermark) == (follower, ErrorCode.NONE, 2)
    assert not data.records
    for rack_id in (RACKS[leader], "", "rack-nobody-is-in"):
        served = cluster.call(leader, ApiKey.FETCH, 11, fetch_request("t", 0, 0, rack_id=rack_id)).responses[0]
        assert served.partitions[0].preferred_read_replica == -1 and fetched_values(served) == [b"x", b"y"]
    # Without a selector the rack is ignored, as Kafka's default (no replica.selector.class) does.
    plain = racked_cluster("")
    leader = leader_of(plain, 0)
    plain.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"x"]))
    plain.replicate()
    rack_id = RACKS[min(b for b in RACKS if b != leader)]
    served = plain.call(leader, ApiKey.FETCH, 11, fetch_request("t", 0, 0, rack_id=rack_id)).responses[0]
    assert served.partitions[0].preferred_read_replica == -1 and fetched_values(served) == [b"x"]


def test_a_follower_serves_consumers_only_with_a_replica_selector_and_only_below_its_high_watermark():
    for selector in ("rack", ""):
        cluster = racked_cluster(selector)
        leader = leader_of(cluster, 0)
        follower = min(b for b in RACKS if b != leader)
        cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"x", b"y"], acks=1))
        hosted = cluster.brokers[follower].hosted("t", 0)
        for _ in range(3):  # until the follower holds both records
            if hosted.log.log_end_offset < 2:
                cluster.replicate(rounds=1)
        assert hosted.log.log_end_offset == 2
        assert hosted.replica.high_watermark == 0  # what the leader had told it then
        early = cluster.call(follower, ApiKey.FETCH, 11, fetch_request("t", 0, 0)).responses[0].partitions[0]
        if not selector:
            assert early.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            continue
        assert (early.error_code, early.high_watermark, early.records) == (ErrorCode.NONE, 0, b"")
        cluster.replicate()
        served = cluster.call(follower, ApiKey.FETCH, 11, fetch_request("t", 0, 0)).responses[0]
        assert served.partitions[0].high_watermark == 2 and fetched_values(served) == [b"x", b"y"]
        # Fetch versions before 11 carry no rack and are for leaders only (Kafka's fetchOnlyFromLeader).
        old = cluster.call(follower, ApiKey.FETCH, 10, fetch_request("t", 0, 0)).responses[0].partitions[0]
        assert old.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_not_enough_replicas_when_isr_below_min_insync(cluster):
    leader = leader_of(cluster, 0)
    hosted = cluster.brokers[leader].hosted("t", 0)
    others = [b for b in (1, 2, 3) if b != leader]
    # Two followers fall behind for longer than replica.lag.time.max.ms: the leader shrinks the ISR.
    cluster.now_ms += 31_000
    cluster.brokers[leader].tick(cluster.now_ms)
    cluster.deliver_controller_calls()
    assert hosted.replica.isr == (leader,), hosted.replica.isr
    response = cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"x"]))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert hosted.log.log_end_offset == 0  # refused before the append
    assert others  # the followers are still replicas


def test_a_retried_idempotent_batch_is_answered_with_its_original_offset_and_not_appended(cluster):  # KIP-98
    leader = leader_of(cluster, 1)
    request_class = messages.ProduceRequest

    def produce_idempotent(sequence, values):
        batch = build_batch([(None, v) for v in values], base_timestamp=1_700_000_000_000, producer_id=4000,
                            producer_epoch=0, base_sequence=sequence)
        return cluster.call(leader, ApiKey.PRODUCE, 7, request_class(
            transactional_id=None, acks=1, timeout_ms=5_000,
            topic_data=[request_class.TopicProduceData(name="t", partition_data=[
                request_class.PartitionProduceData(index=1, records=batch)])])).responses[0].partition_responses[0]

    first = produce_idempotent(0, [b"a", b"b"])
    second = produce_idempotent(2, [b"c"])
    retry = produce_idempotent(0, [b"a", b"b"])
    gap = produce_idempotent(7, [b"x"])
    assert (first.error_code, first.base_offset) == (ErrorCode.NONE, 0)
    assert (second.error_code, second.base_offset) == (ErrorCode.NONE, 2)
    assert (retry.error_code, retry.base_offset) == (ErrorCode.NONE, 0)
    assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert cluster.brokers[leader].hosted("t", 1).log.log_end_offset == 3


def test_delete_records_moves_the_producer_states_start_as_retention_does(cluster):  # KIP-107, KIP-360
    leader = leader_of(cluster, 2)
    request_class = messages.ProduceRequest

    def produce(producer_id, values):
        batch = build_batch([(None, v) for v in values], base_timestamp=1_700_000_000_000, producer_id=producer_id,
                            producer_epoch=0, base_sequence=0)
        return cluster.call(leader, ApiKey.PRODUCE, 7, request_class(
            transactional_id=None, acks=1, timeout_ms=5_000,
            topic_data=[request_class.TopicProduceData(name="t", partition_data=[
                request_class.PartitionProduceData(index=2, records=batch)])])).responses[0].partition_responses[0]

    hosted = cluster.brokers[leader].hosted("t", 2)
    assert produce(5000, [b"a", b"b"]).error_code == ErrorCode.NONE
    hosted.producer_state.write_snapshot()  # at offset 2
    assert produce(6000, [b"c"]).error_code == ErrorCode.NONE
    hosted.producer_state.write_snapshot()  # at offset 3
    cluster.replicate()
    delete = messages.DeleteRecordsRequest(timeout_ms=5_000, topics=[
        messages.DeleteRecordsRequest.DeleteRecordsTopic(name="t", partitions=[
            messages.DeleteRecordsRequest.DeleteRecordsPartition(partition_index=2, offset=3)])])
    answer = cluster.call(leader, ApiKey.DELETE_RECORDS, 1, delete).topics[0].partitions[0]
    assert (answer.error_code, answer.low_watermark) == (ErrorCode.NONE, 3)
    # The snapshot below the new log start is gone, as after retention; producers stay until they expire
    # (KIP-360: a live producer must not look unknown because its old batches were deleted).
    assert hosted.producer_state.snapshot_offsets() == [3]
    assert sorted(hosted.producer_state.producers) == [5000, 6000]


def test_list_offsets_special_timestamps_answer_as_kafka_does(cluster):  # KIP-734, KIP-405, KIP-1005
    leader = leader_of(cluster, 0)
    batch = build_batch([(None, b"a", (), 1_700_000_005_000), (None, b"b", (), 1_700_000_009_000),
                         (None, b"c", (), 1_700_000_001_000)], base_timestamp=1_700_000_005_000)
    request_class = messages.ProduceRequest
    cluster.call(leader, ApiKey.PRODUCE, 7, request_class(transactional_id=None, acks=1, timeout_ms=5_000, topic_data=[
        request_class.TopicProduceData(name="t", partition_data=[request_class.PartitionProduceData(index=0, records=batch)])]))
    cluster.replicate()

    def listed(timestamp, version=9):
        list_class = messages.ListOffsetsRequest
        request = list_class(replica_id=-1, isolation_level=0, topics=[list_class.ListOffsetsTopic(name="t", partitions=[
            list_class.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=timestamp)])],
            timeout_ms=30_000)
        answer = cluster.call(leader, ApiKey.LIST_OFFSETS, version, request).topics[0].partitions[0]
        return answer.error_code, answer.offset, answer.timestamp

    assert listed(-3) == (ErrorCode.NONE, 1, 1_700_000_009_000)  # the record, inside its batch
    assert listed(-4) == (ErrorCode.NONE, 0, -1)  # earliest local: the log start, nothing is tiered
    assert listed(-5) == (ErrorCode.NONE, -1, -1)  # latest tiered: nothing is
    assert listed(-6)[0] == ErrorCode.INVALID_REQUEST
    # v10 (Kafka 4.0, KIP-1075) carries the time a tiered-storage lookup may take: nothing is tiered, the answers
    # are v9's
    assert [listed(timestamp, 10) for timestamp in (-1, -2, -3, 1_700_000_006_000)] == [
        (ErrorCode.NONE, 3, -1), (ErrorCode.NONE, 0, -1), (ErrorCode.NONE, 1, 1_700_000_009_000),
        (ErrorCode.NONE, 1, 1_700_000_009_000)]


def test_a_restarted_broker_serves_nothing_until_this_incarnation_is_unfenced(cluster):
    """Kafka's BrokerServer enables request processing after the initial unfence: a broker restarted before the
    controller noticed replays metadata that still names it leader in the old epoch; writing there would let
    two incarnations put different batches at the same offset and epoch."""
    leader = leader_of(cluster, 0)
    old = cluster.brokers[leader]
    restarted = BrokerCore(leader, "127.0.0.1", old.port, ("broker",), old.storage,
                           incarnation_id=b"\x09" * 16, default_min_insync_replicas=2)
    replay_from_scratch(restarted, cluster.log, cluster.now_ms)  # the restarted node replays its metadata log
    cluster.brokers[leader] = restarted
    cluster.apis[leader] = KafkaApis(restarted, "test", lambda: 1)
    assert restarted.hosted("t", 0) is not None and restarted.hosted("t", 0).replica.is_leader
    answer = cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"x"], acks=1))
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    fetched = cluster.call(leader, ApiKey.FETCH, 11, fetch_request("t", 0, 0))
    assert fetched.responses[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert not restarted.serving


def test_a_starting_node_that_knows_no_broker_holds_metadata_until_it_does(cluster):
    """An answer naming no broker and no topic is one librdkafka drops as partial; its admin client then never
    looked the controller up again. A node that knows no broker yet holds Metadata and DescribeCluster until it
    does (here: it replays the log, as a new node catching up), or for UNREADY_HOLD_MS."""
    def new_node(node_id):
        broker = BrokerCore(node_id, "127.0.0.1", 9000 + node_id, ("broker",), MemoryStorage(), incarnation_id=b"\x04" * 16)
        return broker, KafkaApis(broker, "test", lambda: 1)

    def ask(apis, api_key, version, request):
        header = RequestHeader(api_key, version, 9, "test")
        decoded_header, decoded = decode_request(encode_request(header, request)[4:])
        return apis.handle(decoded_header, decoded, cluster.now_ms)

    broker, apis = new_node(4)
    metadata = messages.MetadataRequest(topics=None, allow_auto_topic_creation=True)
    describe = messages.DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=1)
    held = [ask(apis, ApiKey.METADATA, 12, metadata), ask(apis, ApiKey.DESCRIBE_CLUSTER, 1, describe)]
    assert all(isinstance(answer, Deferred) for answer in held)
    assert apis.next_deadline_ms() == cluster.now_ms + UNREADY_HOLD_MS
    cluster.now_ms += 100
    assert apis.poll(cluster.now_ms) == []  # still nothing to name
    replay_from_scratch(broker, cluster.log, cluster.now_ms)  # it catches up: brokers 1-3 are active
    answered = {request_id: response for request_id, _, response in apis.poll(cluster.now_ms)}
    assert sorted(answered) == sorted(answer.request_id for answer in held)
    assert [b.node_id for b in answered[held[0].request_id].brokers] == [1, 2, 3]
    assert [t.name for t in answered[held[0].request_id].topics] == ["t"]
    assert [b.broker_id for b in answered[held[1].request_id].brokers] == [1, 2, 3]
    assert apis.next_deadline_ms() is None
    assert not broker.serving  # not unfenced itself: it answers from what it replayed, as a restarted node does
    assert [b.node_id for b in ask(apis, ApiKey.METADATA, 12, metadata).brokers] == [1, 2, 3]  # at once now

    lonely, lonely_apis = new_node(5)  # no quorum to catch up from: answered with what it knows once time is up
    request_id = ask(lonely_apis, ApiKey.METADATA, 12, metadata).request_id
    cluster.now_ms += UNREADY_HOLD_MS - 1
    assert lonely_apis.poll(cluster.now_ms) == []
    cluster.now_ms += 1
    [(answered_id, _, response)] = lonely_apis.poll(cluster.now_ms)
    assert answered_id == request_id and response.brokers == [] and response.controller_id == 1
    for _ in range(UNREADY_HELD_MAX):
        assert isinstance(ask(lonely_apis, ApiKey.METADATA, 12, metadata), Deferred)
    assert ask(lonely_apis, ApiKey.METADATA, 12, metadata).brokers == []  # past the bound: answered at once


def test_log_cleanup_removes_aborted_data_then_its_marker_and_index_entry(cluster):  # KIP-98, KIP-534
    configs = (ConfigEntry("cleanup.policy", "compact"), ConfigEntry("delete.retention.ms", "0"),
               ConfigEntry("min.cleanable.dirty.ratio", "0.01"))
    response = cluster.commit(CreateTopicsRequest(topics=(CreatableTopic(name="c", num_partitions=1,
                                                                         replication_factor=3, configs=configs),)))
    assert response.topics[0].error_code == ErrorCode.NONE
    leader = cluster.images[1].topics.by_name["c"].partitions[0].leader
    broker = cluster.brokers[leader]
    hosted = broker.hosted("c", 0)
    request_class = messages.ProduceRequest

    def produce(sequence, key, value, transactional):
        batch = build_batch([(key, value)], base_timestamp=1_700_000_000_000, producer_id=7, producer_epoch=0,
                            base_sequence=sequence, is_transactional=transactional)
        answer = cluster.call(leader, ApiKey.PRODUCE, 7, request_class(
            transactional_id=None, acks=1, timeout_ms=5_000,
            topic_data=[request_class.TopicProduceData(name="c", partition_data=[
                request_class.PartitionProduceData(index=0, records=batch)])])).responses[0].partition_responses[0]
        assert answer.error_code == ErrorCode.NONE

    produce(0, b"k", b"aborted", transactional=True)                     # 0
    broker.write_txn_marker("c", 0, 7, 0, 0, False, cluster.now_ms)       # 1: abort
    produce(1, b"k", b"kept", transactional=False)                        # 2
    cluster.replicate()
    hosted.log.roll(cluster.now_ms)  # closed segments only are cleaned
    assert [(e.first_offset, e.last_offset) for e in hosted.producer_state.aborted_index.entries] == [(0, 1)]

    def cleanup_tick():
        cluster.now_ms += 60_000  # past the retention check interval
        broker.tick(cluster.now_ms)
        batches = list(decode_batches(hosted.log.read(0, 1 << 20).records))
        return [(b.header.base_offset, b.header.is_control, len(b.records)) for b in batches]

    # The aborted data goes (the abort marker stays: this pass read its transaction's data); then the
    # entry goes and the marker gets its horizon; then the marker goes. Producer 7's last batch stays.
    assert cleanup_tick() == [(1, True, 1), (2, False, 1)]
    assert hosted.producer_state.aborted_index.entries != []
    produce(2, b"other", b"v", transactional=False)  # a pass is due when something is dirty
    cluster.replicate()
    hosted.log.roll(cluster.now_ms)
    assert cleanup_tick() == [(1, True, 1), (2, False, 1), (3, False, 1)]
    assert hosted.producer_state.aborted_index.entries == []
    assert cleanup_tick() == [(2, False, 1), (3, False, 1)]


@pytest.mark.parametrize("planted_bug", [False, True])
def test_a_follower_whose_image_trails_keeps_a_tombstone_a_replica_out_of_the_isr_lacks(planted_bug):
    """partitions/cleaner.py: a tombstone past its horizon goes only where every replica holds it. A follower cut
    off from the controllers keeps an image in which every replica is in sync while the leader has shrunk the
    ISR and moved its high watermark past what the missing replica holds: the follower takes its leader's word
    (Partition.replicated_offset, in the LastStableOffset of the leader's answers). Planted bug
    "cleaner_trusts_own_image" (the follower judges by its own image): the tombstone goes there."""
    cluster = Cluster(min_isr=1)
    configs = (ConfigEntry("cleanup.policy", "compact"), ConfigEntry("delete.retention.ms", "0"),
               ConfigEntry("min.cleanable.dirty.ratio", "0.01"), ConfigEntry("min.compaction.lag.ms", "0"))
    response = cluster.commit(CreateTopicsRequest(topics=(CreatableTopic(name="c", num_partitions=1,
                                                                         replication_factor=3, configs=configs),)))
    assert response.topics[0].error_code == ErrorCode.NONE
    partition = cluster.images[1].topics.by_name["c"].partitions[0]
    leader = partition.leader
    trailing, behind = [b for b in partition.replicas if b != leader]

    def produce(key, value):
        answer = cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("c", 0, [value], acks=1, keys=[key]))
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.NONE

    produce(b"k", b"old")  # 0: every replica holds it
    cluster.replicate()
    produce(b"k", None)  # 1: the tombstone, which `behind` never fetches
    produce(b"x", b"y")  # 2
    cluster.replicate(fetching={trailing}, cut_off={trailing})
    # The leader shrinks the ISR to drop `behind`; the controller commits it; `trailing` never hears of it.
    cluster.now_ms += 31_000
    cluster.brokers[leader].tick(cluster.now_ms)
    cluster.replicate(fetching={trailing}, cut_off={trailing})
    assert cluster.images[leader].topics.by_name["c"].partitions[0].isr == tuple(sorted((leader, trailing)))
    follower = cluster.brokers[trailing].hosted("c", 0)
    assert set(follower.replica.isr) == {1, 2, 3}, "its image trails: every replica in sync"
    assert follower.replica.high_watermark == 3, "past the tombstone `behind` lacks"
    assert follower.replica.replicated_offset == -1, "the leader's word: a replica is out of the ISR"
    if planted_bug:
        cluster.brokers[trailing].bug_cleaner = frozenset({"cleaner_trusts_own_image"})
    follower.log.roll(cluster.now_ms)  # closed segments only are cleaned

    def cleanup_tick():
        cluster.now_ms += 60_000  # past the retention check interval and the tombstone's horizon
        cluster.brokers[trailing].tick(cluster.now_ms)
        return [(record.offset, record.key, record.value)
                for batch in decode_batches(follower.log.read(0, 1 << 20).records) for record in batch.records]

    assert cleanup_tick() == [(1, b"k", None), (2, b"x", b"y")], "the old value goes, the tombstone gets its horizon"
    kept = cleanup_tick()
    if planted_bug:
        assert kept == [(2, b"x", b"y")], "the follower trusted its own image and removed the tombstone"
    else:
        assert kept == [(1, b"k", None), (2, b"x", b"y")]


def test_time_based_log_work_runs_on_the_logs_that_have_some_and_follows_a_dynamic_flush_ms(cluster):
    """A broker's tick visits only the logs with time-based work (broker/core.py, partitions/log.py LogClock):
    segment files waiting out file.delete.delay.ms, unflushed records under a flush.ms. The work still happens,
    a flush.ms set later over records not yet flushed included, and a log without work is dropped again."""
    configs = (ConfigEntry("file.delete.delay.ms", "5000"), ConfigEntry("retention.bytes", "1"))
    response = cluster.commit(CreateTopicsRequest(topics=(CreatableTopic(name="d", num_partitions=1,
                                                                         replication_factor=3, configs=configs),)))
    assert response.topics[0].error_code == ErrorCode.NONE
    leader = cluster.images[1].topics.by_name["d"].partitions[0].leader
    broker = cluster.brokers[leader]
    log = broker.hosted("d", 0).log
    assert broker.log_clock.timed == set()  # nothing pending anywhere: a tick visits no log

    def tick(advance_ms):
        cluster.now_ms += advance_ms
        broker.tick(cluster.now_ms)

    # Retention retires the closed segment; its files stay for file.delete.delay.ms, then go.
    for _ in range(2):
        answer = cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("d", 0, [b"x" * 100], acks=1))
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        log.roll(cluster.now_ms)
    tick(30_000)  # the retention check
    retired = [segment for _, segment in log.pending_deletions]
    assert retired and broker.log_clock.timed == {log}
    names_before = set(broker.storage.list(log.directory))
    tick(1_000)
    assert set(broker.storage.list(log.directory)) == names_before  # not yet due
    tick(5_000)
    assert log.pending_deletions == [] and broker.log_clock.timed == set()
    assert set(broker.storage.list(log.directory)) < names_before

    # Records appended without a flush.ms stay unflushed and the log stays out of the tick; a flush.ms set
    # afterwards brings it in, and the tick flushes them once flush.ms has passed.
    answer = cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("d", 0, [b"y"], acks=1))
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    tick(200)
    assert log.unflushed_messages == 1 and broker.log_clock.timed == set()
    cluster.commit(IncrementalAlterConfigsRequest((ConfigResource(2, "d", (AlterableConfig("flush.ms", "1000"),)),)))
    assert log.config.flush_ms == 1000 and broker.log_clock.timed == {log}
    tick(1_100)
    assert log.unflushed_messages == 0 and broker.log_clock.timed == set()
    assert log.now_ms >= cluster.now_ms - 100  # the shared clock moved the log's time with the ticks


def test_a_replica_directory_gets_partition_metadata_with_its_first_segment_file(cluster):
    """A new replica is one directory and nothing in it: the segment file comes with the first record, and
    partition.metadata (the topic id, KIP-516) just before it, so a directory holding records always names its
    topic while a directory without it holds none (BrokerCore._ensure_partition)."""
    from broker.core import PARTITION_METADATA_FILE, partition_directory
    from partitions.storage import read_file

    topic_id = cluster.images[1].topics.by_name["t"].topic_id.hex().encode()
    for broker in cluster.brokers.values():
        assert [broker.storage.list(partition_directory("t", p)) for p in range(3)] == [[], [], []]
    cluster.call(leader_of(cluster, 0), ApiKey.PRODUCE, 7, produce_request("t", 0, [b"a"]))
    cluster.replicate()
    for broker in cluster.brokers.values():
        names = broker.storage.list(partition_directory("t", 0))
        assert "00000000000000000000.log" in names and PARTITION_METADATA_FILE in names
        assert read_file(broker.storage, f"{partition_directory('t', 0)}/{PARTITION_METADATA_FILE}") == topic_id
        assert broker.storage.list(partition_directory("t", 1)) == []


def test_a_controlled_shutdown_waits_for_its_grant_only_while_another_broker_can_take_over(cluster):
    """The whole cluster stopping at once: brokers 1 and 2 are granted their shutdowns and leave with the quorum
    before broker 3's is committed, which then never is. Broker 3 stops waiting as soon as the metadata says
    every other broker is shutting down (or fenced): nobody could take its leaderships anyway."""
    def want_shutdown(broker_id):
        broker = cluster.brokers[broker_id]
        cluster.commit(BrokerHeartbeatRequest(broker_id=broker_id, broker_epoch=broker.broker_epoch,
                                              current_metadata_offset=cluster.raft_index, want_shutdown=True))

    last = cluster.brokers[3]
    last.request_controlled_shutdown(cluster.now_ms)
    assert not last.controlled_shutdown_done(cluster.now_ms)  # brokers 1 and 2 can lead its partitions
    want_shutdown(1)
    assert cluster.images[3].cluster.brokers[1].in_controlled_shutdown
    assert not last.controlled_shutdown_done(cluster.now_ms)  # broker 2 still can
    want_shutdown(2)
    assert not last.shutdown_granted
    assert last.controlled_shutdown_done(cluster.now_ms)


def test_describe_log_dirs_lists_the_replicas_here_with_their_sizes(cluster):
    leader = leader_of(cluster, 0)
    assert cluster.call(leader, ApiKey.PRODUCE, 8, produce_request("t", 0, [b"a", b"b"], acks=1)) \
        .responses[0].partition_responses[0].error_code == ErrorCode.NONE
    request_class = messages.DescribeLogDirsRequest
    (log_dir,) = cluster.call(leader, ApiKey.DESCRIBE_LOG_DIRS, 4, request_class(topics=None)).results
    assert log_dir.error_code == ErrorCode.NONE and log_dir.log_dir == "/memory/logs"
    assert (log_dir.total_bytes, log_dir.usable_bytes) == (-1, -1)  # a memory storage has no volume
    (topic,) = log_dir.topics
    sizes = {p.partition_index: p.partition_size for p in topic.partitions}
    assert topic.name == "t" and sizes.keys() == {0, 1, 2}  # RF 3: every partition has a replica here
    assert sizes[0] == cluster.brokers[leader].hosted("t", 0).log.size_bytes > 0 and sizes[1] == sizes[2] == 0
    assert all(p.offset_lag == 0 and not p.is_future_key for p in topic.partitions)
    asked = request_class(topics=[request_class.DescribableLogDirTopic(topic="t", partitions=[0, 7]),
                                  request_class.DescribableLogDirTopic(topic="absent", partitions=[0])])
    (only,) = cluster.call(leader, ApiKey.DESCRIBE_LOG_DIRS, 1, asked).results
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in only.topics] == [("t", [0])]


def test_alter_replica_log_dirs_on_a_broker_of_one_log_directory(cluster):
    """Kafka's ReplicaManager.alterReplicaLogDirs: a replica asked into the directory it is in stays (NONE);
    another path is not a log directory of this broker; no replica here, or no such topic, each its error; a
    partition named under two paths takes the last; ALTER on the cluster is required."""
    request_class = messages.AlterReplicaLogDirsRequest
    cluster.commit(CreateTopicsRequest(topics=(CreatableTopic(name="single", num_partitions=1, replication_factor=1),)))
    single_leader = cluster.images[1].topics.by_name["single"].partitions[0].leader
    elsewhere = next(b for b in cluster.brokers if b != single_leader)

    def alter(broker_id, version, *dirs):
        response = cluster.call(broker_id, ApiKey.ALTER_REPLICA_LOG_DIRS, version, request_class(dirs=[
            request_class.AlterReplicaLogDir(path=path, topics=[
                request_class.AlterReplicaLogDirTopic(name=name, partitions=list(indexes)) for name, indexes in topics])
            for path, topics in dirs]))
        assert response.throttle_time_ms == 0
        return [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in response.results]

    assert alter(elsewhere, 2, ("/memory/logs", [("t", [0, 1]), ("single", [0]), ("absent", [0])]),
                 ("/elsewhere", [("t", [2])])) == [
        ("t", [(0, ErrorCode.NONE), (1, ErrorCode.NONE), (2, ErrorCode.LOG_DIR_NOT_FOUND)]),
        ("single", [(0, ErrorCode.REPLICA_NOT_AVAILABLE)]), ("absent", [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)])]
    assert alter(single_leader, 0, ("/elsewhere", [("single", [0])]), ("/memory/logs", [("single", [0])])) == [
        ("single", [(0, ErrorCode.NONE)])]  # the last path named wins
    assert alter(single_leader, 1, ("/memory/logs", [("x" * 220, [0])])) == [
        ("x" * 220, [(0, ErrorCode.INVALID_TOPIC_EXCEPTION)])]  # its future log's directory name would be too long
    cluster.apis[single_leader].authorizer = Authorizer(AuthorizerSettings(frozenset({"User:admin"})))
    cluster.apis[single_leader].session = Session("SASL_SSL", "SASL_SSL", "127.0.0.1", "User:erin", authenticated=True)
    assert alter(single_leader, 2, ("/memory/logs", [("single", [0])])) == [
        ("single", [(0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)])]

def test_a_stale_leadership_replayed_after_the_leader_moved_leaves_the_truncation_owed(cluster):
    """An older metadata snapshot installed on a live broker replays a leadership it has lost since (the
    replica, knowing a newer epoch, ignores it). Its truncation against the new leader stays owed: were it
    cleared, the old leader would keep a record it alone appended and fetch the new leader's log on top."""
    old_leader = leader_of(cluster, 0)
    log_before = list(cluster.log)
    broker = cluster.brokers[old_leader]
    cluster.commit(BrokerHeartbeatRequest(broker_id=old_leader, broker_epoch=broker.broker_epoch,
                                          current_metadata_offset=cluster.raft_index, want_shutdown=True))
    hosted = broker.hosted("t", 0)
    assert leader_of(cluster, 0) != old_leader and not hosted.replica.is_leader and hosted.needs_epoch_check
    for entries in (log_before, cluster.log):  # the stale snapshot, then the entries after it once more
        replay_from_scratch(broker, entries, cluster.now_ms)
        assert not hosted.replica.is_leader and hosted.needs_epoch_check


@pytest.mark.parametrize("acks", [-1, 1])
def test_a_produce_naming_a_partition_twice_writes_and_answers_it_once(cluster, acks):
    # As Kafka's KafkaApis collects a request's partitions into a map: the last entry's records are written and
    # the partition answered once. Appending both (and, with acks=all, waiting twice on one partition for one
    # request) raised out of the handler; the fuzz simulation found it.
    leader = leader_of(cluster, 0)
    request_class = messages.ProduceRequest
    first, last = (build_batch([(None, v)], base_timestamp=1_700_000_000_000) for v in (b"first", b"last"))
    request = request_class(transactional_id=None, acks=acks, timeout_ms=5_000, topic_data=[
        request_class.TopicProduceData(name="t", partition_data=[request_class.PartitionProduceData(
            index=0, records=records)]) for records in (first, last)])
    result = cluster.call(leader, ApiKey.PRODUCE, 7, request)
    if acks == -1:
        assert isinstance(result, Deferred)
        cluster.replicate()
        ((_, _, result),) = cluster.completed[leader]  # answered once
    (topic,) = result.responses
    assert [(p.index, p.error_code, p.base_offset) for p in topic.partition_responses] == [(0, ErrorCode.NONE, 0)]
    assert cluster.brokers[leader].hosted("t", 0).log.log_end_offset == 1
    cluster.replicate()
    fetched = cluster.call(leader, ApiKey.FETCH, 11, fetch_request("t", 0, 0))
    batches = list(decode_batches(bytes(fetched.responses[0].partitions[0].records)))
    assert [r.value for batch in batches for r in batch.records] == [b"last"]


def test_a_registration_refused_for_good_is_kept_for_the_log_and_cleared_once_registered():
    from metadata.requests import BrokerRegistrationResponse
    from partitions.errors import KafkaError

    broker = BrokerCore(9, "127.0.0.1", 9009, ("broker",), MemoryStorage(), incarnation_id=b"\x09" * 16)

    def answer(response):
        broker._maybe_register_or_heartbeat(broker._next_heartbeat_ms)
        [call] = broker.take_controller_requests()
        assert isinstance(call.request, BrokerRegistrationRequest)
        call.on_response(response, broker._next_heartbeat_ms)

    answer(KafkaError("not the controller", ErrorCode.NOT_CONTROLLER))  # no quorum leader yet: retried quietly
    assert broker.registration_refused is None and broker.broker_epoch is None
    # An older controller that cannot read this release's request: the node's log says so (net/node.py).
    answer(KafkaError("BrokerRegistrationRequest: unknown field(s) ['x']", ErrorCode.INVALID_REQUEST))
    assert broker.registration_refused == ("INVALID_REQUEST", "BrokerRegistrationRequest: unknown field(s) ['x']")
    answer(BrokerRegistrationResponse(ErrorCode.UNSUPPORTED_VERSION, "transaction.version 3 is not supported"))
    assert broker.registration_refused == ("UNSUPPORTED_VERSION", "transaction.version 3 is not supported")
    assert broker.broker_epoch is None
    answer(BrokerRegistrationResponse(ErrorCode.NONE, broker_epoch=4))
    assert broker.registration_refused is None and broker.broker_epoch == 4
