"""A partition leader's KIP-890 verification of transactional produce requests (broker/handlers_data.py), sans-IO:
the coordinator's answers may come back in any order (another node's answers over the outbox, a local one at
once, a failed connection's before a later request's), and a producer's batches must still be appended in the
order its requests arrived. A later batch appended first would be taken for the start of the producer's
sequence and the earlier one refused as out of order: librdkafka's fatal "sequence desynchronization"."""

from __future__ import annotations

import pytest

from broker.apis import Deferred
from metadata.requests import CreatableTopic, CreateTopicsRequest
from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode
from partitions.records import build_batch, decode_batches
from tests.broker.test_broker_sans_io import Cluster, leader_of

PRODUCER_ID = 7


@pytest.fixture
def cluster():
    cluster = Cluster()
    response = cluster.commit(CreateTopicsRequest(topics=(CreatableTopic(name="t", num_partitions=3,
                                                                         replication_factor=3),)))
    assert response.topics[0].error_code == ErrorCode.NONE
    return cluster


def transactional_produce(partition: int, sequence: int, transactional_id: str = "tx"):
    batch = build_batch([(None, f"r{sequence}".encode())], base_timestamp=1_700_000_000_000,
                        producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=sequence, is_transactional=True)
    request_class = messages.ProduceRequest
    return request_class(transactional_id=transactional_id, acks=1, timeout_ms=5_000, topic_data=[
        request_class.TopicProduceData(name="t", partition_data=[
            request_class.PartitionProduceData(index=partition, records=batch)])])


def held_verifications(cluster, broker_id):
    """Replace the broker's verifier with one that keeps the questions: [(partitions, on_done)]."""
    asked = []
    cluster.apis[broker_id].transaction_verifier = \
        lambda transactional_id, producer_id, epoch, keys, on_done, now_ms, add=False: asked.append((keys, on_done))
    return asked


def answered(cluster, broker_id, deferred):
    """{request id: (error code, base offset)} of the deferred produce requests answered so far."""
    done = {request_id: response for request_id, _, response in cluster.apis[broker_id].poll(cluster.now_ms)}
    rows = {}
    for d in deferred:
        if d.request_id in done:
            partition = done[d.request_id].responses[0].partition_responses[0]
            rows[d.request_id] = (partition.error_code, partition.base_offset)
    return rows


def log_values(cluster, broker_id, partition):
    hosted = cluster.brokers[broker_id].hosted("t", partition)
    data = hosted.log.read(0, 1 << 20).records
    return [record.value.decode() for batch in decode_batches(bytes(data)) for record in batch.records]


def test_a_producers_requests_are_appended_in_arrival_order_when_verifications_answer_in_reverse(cluster):
    leader = leader_of(cluster, 0)
    asked = held_verifications(cluster, leader)
    deferred = [cluster.call(leader, ApiKey.PRODUCE, 9, transactional_produce(0, sequence)) for sequence in range(3)]
    assert all(isinstance(d, Deferred) for d in deferred)
    assert [keys for keys, _ in asked] == [[("t", 0)]] * 3  # none appended yet: each one asks
    asked[2][1]({("t", 0): ErrorCode.NONE}, cluster.now_ms)
    asked[1][1]({("t", 0): ErrorCode.NONE}, cluster.now_ms)
    assert answered(cluster, leader, deferred) == {} and log_values(cluster, leader, 0) == []  # behind the first
    asked[0][1]({("t", 0): ErrorCode.NONE}, cluster.now_ms)
    rows = answered(cluster, leader, deferred)
    assert [rows[d.request_id] for d in deferred] == [(ErrorCode.NONE, 0), (ErrorCode.NONE, 1), (ErrorCode.NONE, 2)]
    assert log_values(cluster, leader, 0) == ["r0", "r1", "r2"]
    # Nothing is held any more: the open transaction's next batch is appended at once, unasked.
    response = cluster.call(leader, ApiKey.PRODUCE, 9, transactional_produce(0, 3))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.NONE and len(asked) == 3


def test_a_partition_refused_to_a_held_request_is_refused_to_the_producers_requests_behind_it(cluster):
    leader = leader_of(cluster, 0)
    asked = held_verifications(cluster, leader)
    deferred = [cluster.call(leader, ApiKey.PRODUCE, 9, transactional_produce(0, sequence)) for sequence in range(3)]
    asked[1][1]({("t", 0): ErrorCode.NONE}, cluster.now_ms)
    asked[0][1]({("t", 0): ErrorCode.NOT_ENOUGH_REPLICAS}, cluster.now_ms)  # the coordinator could not answer
    asked[2][1]({("t", 0): ErrorCode.NONE}, cluster.now_ms)
    rows = answered(cluster, leader, deferred)
    # Sent before the producer heard of the refusal: appending them would leave a gap at sequence 0.
    assert [rows[d.request_id][0] for d in deferred] == [ErrorCode.NOT_ENOUGH_REPLICAS] * 3
    assert log_values(cluster, leader, 0) == []
    # The producer retries from sequence 0: verified again and appended in order.
    deferred = [cluster.call(leader, ApiKey.PRODUCE, 9, transactional_produce(0, sequence)) for sequence in range(3)]
    for _, on_done in asked[3:]:
        on_done({("t", 0): ErrorCode.NONE}, cluster.now_ms)
    rows = answered(cluster, leader, deferred)
    assert [rows[d.request_id] for d in deferred] == [(ErrorCode.NONE, 0), (ErrorCode.NONE, 1), (ErrorCode.NONE, 2)]
    assert log_values(cluster, leader, 0) == ["r0", "r1", "r2"]
