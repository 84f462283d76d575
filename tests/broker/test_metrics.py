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


def _every_slot_walk(message):
    """The reference: every error_code found by a getattr of every slot of every item."""
    stack, codes = [message], []
    while stack:
        item = stack.pop()
        code = getattr(item, "error_code", None)
        if isinstance(code, int):
            codes.append(code)
        for name in getattr(item, "__slots__", ()):
            value = getattr(item, name, None)
            if isinstance(value, list) and value and hasattr(value[0], "__slots__"):
                stack.extend(value)
    return sorted(codes)


class _SlottedAnswer:
    __slots__ = ("error_code", "parts")

    def __init__(self, error_code, parts):
        self.error_code, self.parts = error_code, parts


def test_error_codes_three_levels_deep_and_of_a_class_that_is_not_generated():
    response_class = messages.WriteTxnMarkersResponse
    response = response_class(markers=[response_class.WritableTxnMarkerResult(producer_id=7, topics=[
        response_class.WritableTxnMarkerTopicResult(name=name, partitions=[
            response_class.WritableTxnMarkerPartitionResult(partition_index=index, error_code=code)
            for index, code in enumerate(codes)])
        for name, codes in (("a", [ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER]),
                            ("b", [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]))])])
    assert sorted(response_error_codes(response)) == _every_slot_walk(response) == sorted(
        [ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION])
    group_class = messages.DescribeGroupsResponse
    groups = group_class(groups=[group_class.DescribedGroup(group_id="g", error_code=ErrorCode.GROUP_ID_NOT_FOUND)])
    assert list(response_error_codes(groups)) == _every_slot_walk(groups) == [ErrorCode.GROUP_ID_NOT_FOUND]
    other = _SlottedAnswer(ErrorCode.INVALID_REQUEST, [_SlottedAnswer(ErrorCode.NONE, [])])
    assert sorted(response_error_codes(other)) == _every_slot_walk(other) == [ErrorCode.NONE, ErrorCode.INVALID_REQUEST]
    plain = type("PlainAnswer", (), {})()  # no slots, the code set on the instance only
    plain.error_code = ErrorCode.NOT_CONTROLLER
    assert list(response_error_codes(plain)) == _every_slot_walk(plain) == [ErrorCode.NOT_CONTROLLER]


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
