"""Client telemetry (KIP-714; Kafka's ClientMetricsManager and ClientMetricsConfigs), sans-IO: subscriptions as
CLIENT_METRICS config resources committed through the real controller, GetTelemetrySubscriptions and
PushTelemetry through a real BrokerCore's handlers and the codec, OTLP payloads built with opentelemetry-proto."""

from __future__ import annotations

import gzip
import uuid

import pytest
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2

from broker.handlers_telemetry import TelemetryApis
from broker.telemetry import SERIES_MAX, TELEMETRY_MAX_BYTES, ClientMetricsManager, decode_otlp
from metadata.records import ConfigResourceType
from metadata.requests import AlterableConfig, AlterConfigOp, ConfigResource, IncrementalAlterConfigsRequest
from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode
from security.acl import AclOperation as Op
from security.acl import ResourceType as RT
from tests.broker.test_admin_versions import secure
from tests.broker.test_broker_sans_io import Cluster

ZERO = uuid.UUID(int=0)
INTERVAL_MS = 1000


class Rng:
    """Instance ids 1000, 1001, ... (the node passes its seeded random.Random)."""

    def __init__(self) -> None:
        self.next = 1000

    def getrandbits(self, bits: int) -> int:
        self.next += 1
        return self.next - 1


def subscribe(cluster, name, **configs):
    """Set (value) or delete (None) a subscription's configs; the controller's result code."""
    request = IncrementalAlterConfigsRequest(resources=(ConfigResource(ConfigResourceType.CLIENT_METRICS, name, tuple(
        AlterableConfig(key.replace("_", "."), value, AlterConfigOp.SET if value is not None else AlterConfigOp.DELETE)
        for key, value in configs.items())),))
    (result,) = cluster.commit(request).resources
    return result.error_code, result.message


def telemetry_cluster():
    cluster = Cluster()
    manager = ClientMetricsManager(Rng())
    apis = cluster.apis[1]
    apis.register(TelemetryApis(apis, manager, serve_telemetry=True))
    apis.client_host, apis.client_software = "/10.0.0.7", ("librdkafka", "2.16.0")
    return cluster, manager


def get(cluster, instance_id=ZERO, client_id="app-1"):
    request = messages.GetTelemetrySubscriptionsRequest(client_instance_id=instance_id)
    return call(cluster, ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, request, client_id)


def push(cluster, instance_id, subscription_id, payload=b"", compression=0, terminating=False):
    request = messages.PushTelemetryRequest(client_instance_id=instance_id, subscription_id=subscription_id,
                                            terminating=terminating, compression_type=compression, metrics=payload)
    return call(cluster, ApiKey.PUSH_TELEMETRY, request, "app-1").error_code


def call(cluster, api_key, request, client_id):
    from net.protocol.codec import RequestHeader, decode_request, decode_response, encode_request, encode_response

    header = RequestHeader(api_key, 0, 1, client_id)
    decoded_header, decoded = decode_request(encode_request(header, request)[4:])
    result = cluster.apis[1].handle(decoded_header, decoded, cluster.now_ms)
    return decode_response(api_key, 0, encode_response(decoded_header, result)[4:])[1]


def otlp(*points, histogram=None) -> bytes:
    """A MetricsData message: gauges (name, value, {attribute: value}) and one histogram (name, count, sum)."""
    data = metrics_pb2.MetricsData()
    metrics = data.resource_metrics.add().scope_metrics.add().metrics
    for name, value, attributes in points:
        point = metrics.add(name=name).gauge.data_points.add(as_double=value)
        for key, text in attributes.items():
            point.attributes.append(common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(string_value=text)))
    if histogram is not None:
        name, count, total = histogram
        metrics.add(name=name).histogram.data_points.add(count=count, sum=total)
    return data.SerializeToString()


def test_a_matching_subscription_names_the_metrics_and_the_shortest_interval():
    cluster, manager = telemetry_cluster()
    assert subscribe(cluster, "producers", metrics="org.apache.kafka.producer.", interval_ms="60000",
                     match="client_id=app-.*,client_software_name=librdkafka")[0] == ErrorCode.NONE
    assert subscribe(cluster, "fast", metrics="org.apache.kafka.producer.node.", interval_ms=str(INTERVAL_MS),
                     match="client_source_address=10\\.0\\.0\\..*")[0] == ErrorCode.NONE
    assert subscribe(cluster, "others", metrics="*", match="client_id=other")[0] == ErrorCode.NONE
    answer = get(cluster)
    assert answer.error_code == ErrorCode.NONE and answer.client_instance_id == uuid.UUID(int=1000)
    assert (answer.push_interval_ms, sorted(answer.requested_metrics)) == (
        INTERVAL_MS, ["org.apache.kafka.producer.", "org.apache.kafka.producer.node."])
    assert answer.accepted_compression_types == [4, 3, 2, 1, 0] and answer.telemetry_max_bytes == TELEMETRY_MAX_BYTES
    assert answer.delta_temporality is False  # cumulative sums: a counter's latest value is its total
    other = get(cluster, client_id="other")  # a new instance: "*" stands for every metric
    assert (other.client_instance_id, other.requested_metrics, other.push_interval_ms) == (
        uuid.UUID(int=1001), ["*"], INTERVAL_MS)
    cluster.apis[1].client_host = "/192.168.1.1"  # another host, another client id: no subscription matches
    nobody = get(cluster, client_id="batch-job")
    assert (nobody.requested_metrics, nobody.push_interval_ms) == ([], 5 * 60 * 1000)  # nothing to push
    # ListClientMetricsResources: the subscriptions' names
    listed = call(cluster, ApiKey.LIST_CONFIG_RESOURCES, messages.ListConfigResourcesRequest(), "admin")
    assert [r.resource_name for r in listed.config_resources] == ["fast", "others", "producers"]


def test_pushes_are_kept_and_their_errors_are_kafkas():
    cluster, manager = telemetry_cluster()
    subscribe(cluster, "all", metrics="*", interval_ms=str(INTERVAL_MS))
    answer = get(cluster)
    instance_id, subscription_id = answer.client_instance_id, answer.subscription_id
    assert get(cluster, instance_id).error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED  # before the interval
    payload = otlp(("org.apache.kafka.producer.record.queue.time.avg", 1.5, {}),
                   ("org.apache.kafka.producer.node.request.latency.avg", 0.3, {"node_id": "2"}),
                   histogram=("org.apache.kafka.producer.request.size", 4, 400.0))
    assert push(cluster, instance_id, subscription_id, gzip.compress(payload), compression=1) == ErrorCode.NONE
    series = manager.instances[instance_id].series
    assert series == {("org.apache.kafka.producer.record.queue.time.avg", ()): 1.5,
                      ("org.apache.kafka.producer.node.request.latency.avg", (("node_id", "2"),)): 0.3,
                      ("org.apache.kafka.producer.request.size.count", ()): 4.0,
                      ("org.apache.kafka.producer.request.size.sum", ()): 400.0}
    assert manager.instances[instance_id].attributes["client_software_version"] == "2.16.0"
    assert push(cluster, instance_id, subscription_id, payload) == ErrorCode.THROTTLING_QUOTA_EXCEEDED  # too soon
    cluster.now_ms += INTERVAL_MS
    assert push(cluster, instance_id, subscription_id + 1, payload) == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    cluster.now_ms += INTERVAL_MS
    assert push(cluster, instance_id, subscription_id, payload, compression=9) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    cluster.now_ms += INTERVAL_MS
    assert push(cluster, instance_id, subscription_id, b"\x00" * (TELEMETRY_MAX_BYTES + 1)) == ErrorCode.TELEMETRY_TOO_LARGE
    cluster.now_ms += INTERVAL_MS
    assert push(cluster, instance_id, subscription_id, b"\xff\xff\xff") == ErrorCode.INVALID_RECORD  # not OTLP
    cluster.now_ms += INTERVAL_MS
    assert push(cluster, instance_id, subscription_id, b"garbage", compression=4) == ErrorCode.INVALID_RECORD
    # A terminating push may come early; nothing is accepted after it.
    assert push(cluster, instance_id, subscription_id, payload, terminating=True) == ErrorCode.NONE
    cluster.now_ms += INTERVAL_MS
    assert push(cluster, instance_id, subscription_id, payload) == ErrorCode.INVALID_REQUEST
    assert push(cluster, ZERO, subscription_id, payload) == ErrorCode.INVALID_REQUEST  # a reserved instance id


def test_a_changed_subscription_is_answered_at_once_and_old_pushes_are_refused():
    cluster, manager = telemetry_cluster()
    subscribe(cluster, "all", metrics="org.apache.kafka.producer.", interval_ms=str(INTERVAL_MS))
    first = get(cluster)
    subscribe(cluster, "all", metrics="org.apache.kafka.consumer.")
    # Re-evaluated: the new subscription is served even before the push interval is over
    again = get(cluster, first.client_instance_id)
    assert again.error_code == ErrorCode.NONE and again.requested_metrics == ["org.apache.kafka.consumer."]
    assert again.subscription_id != first.subscription_id
    assert push(cluster, first.client_instance_id, first.subscription_id, otlp()) == ErrorCode.UNKNOWN_SUBSCRIPTION_ID


def test_instances_expire_and_series_are_bounded():
    cluster, manager = telemetry_cluster()
    subscribe(cluster, "all", metrics="*", interval_ms=str(INTERVAL_MS))
    answer = get(cluster)
    points = [(f"m{i}", float(i), {}) for i in range(SERIES_MAX + 50)]
    assert push(cluster, answer.client_instance_id, answer.subscription_id, otlp(*points)) == ErrorCode.NONE
    assert len(manager.instances[answer.client_instance_id].series) == SERIES_MAX
    cluster.now_ms += 60_000  # three intervals, at least a minute, without a word: forgotten
    get(cluster, client_id="someone-else")
    assert list(manager.instances) == [uuid.UUID(int=1001)]


@pytest.mark.parametrize("configs, code", [
    ({"interval_ms": "99"}, ErrorCode.INVALID_REQUEST),
    ({"interval_ms": "3600001"}, ErrorCode.INVALID_REQUEST),
    ({"interval_ms": "soon"}, ErrorCode.INVALID_CONFIG),
    ({"match": "client_rack=a"}, ErrorCode.INVALID_CONFIG),
    ({"match": "client_id=("}, ErrorCode.INVALID_CONFIG),
    ({"match": "client_id"}, ErrorCode.INVALID_CONFIG),
    ({"colour": "blue"}, ErrorCode.INVALID_REQUEST),
])
def test_bad_subscriptions_are_refused_as_kafka_refuses_them(configs, code):
    cluster, _ = telemetry_cluster()
    assert subscribe(cluster, "bad", **configs)[0] == code
    assert subscribe(cluster, "", metrics="*")[0] == ErrorCode.INVALID_REQUEST  # a subscription needs a name


def test_subscriptions_are_described_with_their_source_and_need_the_cluster_acls():
    cluster, _ = telemetry_cluster()
    subscribe(cluster, "all", metrics="org.a.,org.b.", interval_ms="2000")
    request_class = messages.DescribeConfigsRequest
    request = request_class(resources=[request_class.DescribeConfigsResource(
        resource_type=16, resource_name="all", configuration_keys=None)], include_synonyms=False,
        include_documentation=False)
    (result,) = cluster.call(1, ApiKey.DESCRIBE_CONFIGS, 4, request).results
    assert result.error_code == ErrorCode.NONE
    assert [(c.name, c.value, c.config_source, c.config_type) for c in result.configs] == [
        ("interval.ms", "2000", 7, 3), ("metrics", "org.a.,org.b.", 7, 7)]  # CLIENT_METRICS_CONFIG; INT, LIST
    secure(cluster, "User:erin", (RT.TOPIC, "t", Op.DESCRIBE))
    (refused,) = cluster.call(1, ApiKey.DESCRIBE_CONFIGS, 4, request).results
    assert refused.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    listed = call(cluster, ApiKey.LIST_CONFIG_RESOURCES, messages.ListConfigResourcesRequest(), "admin")
    assert listed.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def test_decoding_reads_sums_as_numbers():
    data = metrics_pb2.MetricsData()
    metric = data.resource_metrics.add().scope_metrics.add().metrics.add(name="c.total")
    metric.sum.data_points.add(as_int=7)
    assert decode_otlp(data.SerializeToString()) == [("c.total", (), 7.0)]
