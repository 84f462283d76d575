"""broker/metrics.py: histograms, error-code extraction, counters bumped by real handlers (sans-IO)."""

from broker.metrics import Histogram, response_error_codes
from metadata.requests import CreatableTopic, CreateTopicsRequest
from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode
from tests.broker.test_broker_sans_io import Cluster, fetch_request, produce_request


def test_histogram_buckets_are_cumulative_with_sum_count_and_quantile():
    histogram = Histogram()
    for value in (0.0004, 0.003, 0.003, 0.2, 30.0):
        histogram.observe(value)
    cumulative = dict(histogram.cumulative())
    assert cumulative[0.0005] == 1 and cumulative[0.005] == 3 and cumulative[0.25] == 4 and cumulative[float("inf")] == 5
    assert histogram.count == 5 and abs(histogram.total - 30.2064) < 1e-9
    assert histogram.quantile(0.5) == 0.005 and histogram.quantile(0.99) == float("inf")


def test_every_error_code_of_a_response_is_found_at_any_depth():
    response_class = messages.ProduceResponse
    response = response_class(throttle_time_ms=0, responses=[response_class.TopicProduceResponse(
        name="t", partition_responses=[
            response_class.PartitionProduceResponse(index=0, error_code=ErrorCode.NONE, base_offset=0),
            response_class.PartitionProduceResponse(index=1, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                                    base_offset=-1)])])
    assert sorted(response_error_codes(response)) == [ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER]


def test_produce_and_fetch_count_messages_and_bytes_per_topic():
    cluster = Cluster()
    cluster.commit(CreateTopicsRequest(topics=(CreatableTopic(name="t", num_partitions=1, replication_factor=3),)))
    leader = cluster.images[1].topics.by_name["t"].partitions[0].leader
    request = produce_request("t", 0, [b"a", b"bb", b"ccc"], acks=1)
    batch_bytes = len(request.topic_data[0].partition_data[0].records)
    cluster.call(leader, ApiKey.PRODUCE, 8, request)
    metrics = cluster.brokers[leader].metrics
    assert metrics.messages_in["t"] == 3 and metrics.bytes_in["t"] == batch_bytes
    cluster.replicate()  # followers fetch: replication is not client traffic
    assert metrics.bytes_out.get("t", 0) == 0
    response = cluster.call(leader, ApiKey.FETCH, 11, fetch_request("t", 0, 0))
    assert metrics.bytes_out["t"] == len(response.responses[0].partitions[0].records) == batch_bytes
