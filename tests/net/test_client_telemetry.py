"""Client telemetry (KIP-714) on a real node with its metrics endpoint: a subscription created, described and
listed with kafka-python's admin client (CLIENT_METRICS config resources) and with `flotilla client-metrics`,
a confluent-kafka producer
(librdkafka 2.16 pushes OTLP metrics) whose metrics appear on the node's /metrics under its client id, and
a producer the subscription does not match that pushes nothing; a node without a metrics endpoint does not
offer the telemetry APIs, so clients push nothing there."""

from __future__ import annotations

import contextlib
import time
import urllib.request

import pytest

from cli.local_cluster import LocalCluster
from net.client.sync import SyncKafkaClient
from net.protocol import messages
from net.protocol.codec import ApiKey
from tests.net.cluster_helpers import cli, cli_json, create_topic, wait_for_quorum

pytestmark = [pytest.mark.slow, pytest.mark.external]
SECONDS_MAX = 30
SINGLE = {"partitions": 1, "replication_factor": 1, "min_insync_replicas": 1}


@contextlib.contextmanager
def single_node(tmp_path, metrics: bool = False):
    with LocalCluster(str(tmp_path / "cluster"), nodes=1, metrics=metrics, topic_defaults=SINGLE) as cluster:
        wait_for_quorum(cluster)
        yield cluster


def scrape(cluster: LocalCluster) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{cluster.metrics_ports[1]}/metrics", timeout=10).read().decode()


def api_keys(cluster: LocalCluster) -> set[int]:
    with SyncKafkaClient(cluster.bootstrap_servers) as client:
        response = client.send(1, ApiKey.API_VERSIONS, messages.ApiVersionsRequest(
            client_software_name="test", client_software_version="1"))
    return {api.api_key for api in response.api_keys}


def test_a_subscribed_producer_pushes_its_metrics_to_the_nodes_endpoint(tmp_path):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    kafka_admin = pytest.importorskip("kafka.admin")
    with single_node(tmp_path, metrics=True) as cluster:
        assert {71, 72, 74} <= api_keys(cluster)
        create_topic(cluster, "tel", 1, 1)
        admin = kafka_admin.KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        resource = kafka_admin.ConfigResource(kafka_admin.ConfigResourceType.CLIENT_METRICS, "producers", configs={
            "metrics": "org.apache.kafka.producer.", "interval.ms": "1000", "match": "client_id=tel-.*"})
        assert admin.alter_configs([resource], raise_on_unknown=False, incremental=True) == {
            "client_metrics": {"producers": "OK"}}
        described = admin.describe_configs([kafka_admin.ConfigResource(
            kafka_admin.ConfigResourceType.CLIENT_METRICS, "producers")])["client_metrics"]["producers"]
        assert {name: (entry["value"], entry["config_source"]) for name, entry in described.items()} == {
            "metrics": ("org.apache.kafka.producer.", "DYNAMIC_CLIENT_METRICS_CONFIG"),
            "interval.ms": ("1000", "DYNAMIC_CLIENT_METRICS_CONFIG"),
            "match": ("client_id=tel-.*", "DYNAMIC_CLIENT_METRICS_CONFIG")}
        assert admin.list_config_resources() == {"client_metrics": ["producers"]}
        admin.close()

        matched = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers, "client.id": "tel-app"})
        unmatched = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers, "client.id": "other"})
        wanted = 'org_apache_kafka_producer_record_queue_time_avg{client_id="tel-app"'
        deadline = time.monotonic() + SECONDS_MAX
        text = ""
        while wanted not in text:
            assert time.monotonic() < deadline, "no telemetry from the subscribed producer on /metrics"
            for producer in (matched, unmatched):
                producer.produce("tel", b"x" * 100)
                producer.poll(0.2)
            text = scrape(cluster)
        for producer in (matched, unmatched):
            assert producer.flush(10) == 0
        lines = [line for line in text.splitlines() if line.startswith("org_apache_kafka_")]
        assert all('client_id="tel-app"' in line for line in lines), lines  # the unmatched one pushes nothing
        assert all('client_software_name="confluent-kafka-python"' in line for line in lines)
        assert any(line.startswith("org_apache_kafka_producer_node_request_latency_avg{") and 'node_id="1"' in line
                   for line in lines)  # a data point's own attributes become labels
        (count,) = [line.split()[-1] for line in text.splitlines() if line.startswith("flotilla_client_telemetry_instances ")]
        assert float(count) >= 1  # the subscribed producer, and the other once it has asked


def test_a_node_without_a_metrics_endpoint_offers_no_telemetry(tmp_path):
    with single_node(tmp_path) as cluster:
        keys = api_keys(cluster)
        assert 74 in keys and not {71, 72} & keys


def test_flotilla_client_metrics_manages_subscriptions(tmp_path):
    with single_node(tmp_path) as cluster:
        servers = ("-b", cluster.bootstrap_servers)
        assert cli("client-metrics", "alter", "producers", "--metrics", "org.apache.kafka.producer.",
                   "--interval-ms", "1000", "--match", "client_id=tel-.*", *servers).returncode == 0
        assert cli("client-metrics", "alter", "all", "--metrics", "*", *servers).returncode == 0
        assert cli_json("client-metrics", "list", *servers) == {
            "all": {"metrics": "*"},
            "producers": {"interval.ms": "1000", "match": "client_id=tel-.*", "metrics": "org.apache.kafka.producer."}}
        table = cli("client-metrics", "list", *servers).stdout.splitlines()
        assert table[0].split() == ["NAME", "METRICS", "INTERVAL_MS", "MATCH"]
        assert table[1].split() == ["all", "*", "300000", "(default)", "(every", "client)"]
        refused = cli("client-metrics", "alter", "bad", "--interval-ms", "5", *servers)
        assert refused.returncode == 1 and "interval must be between 100 and 3600000" in refused.stderr
        assert cli("client-metrics", "alter", "producers", "--reset", "match", *servers).returncode == 0
        assert cli("client-metrics", "delete", "all", *servers).returncode == 0
        assert cli_json("client-metrics", "describe", "producers", *servers) == {
            "interval.ms": "1000", "metrics": "org.apache.kafka.producer."}
        assert list(cli_json("client-metrics", "list", *servers)) == ["producers"]
        missing = cli("client-metrics", "describe", "all", *servers)
        assert missing.returncode == 1 and "no subscription named 'all'" in missing.stderr
        assert cli("client-metrics", "alter", "x", *servers).returncode == 2  # nothing to change
