"""transaction.version as a finalized cluster feature (KIP-584) on a real three-node cluster over sockets:
kafka-python's describe_features / update_features and `flotilla features` read and change it, every broker's
ApiVersions follows the metadata log (EndTxn and TxnOffsetCommit v5 only at level 2), a confluent-kafka
transactional producer commits at either level, and a restarted node keeps the log's level over its own
setting."""

from __future__ import annotations

import json

import pytest

from cli.local_cluster import LocalCluster
from net.client.sync import SyncKafkaClient
from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode
from tests.net.cluster_helpers import FAST_BROKER_SETTINGS, cli, create_topic, eventually, wait_for_quorum

pytestmark = [pytest.mark.slow, pytest.mark.external]
TV = "transaction.version"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = LocalCluster(str(tmp_path_factory.mktemp("features")), nodes=3, broker={
        **FAST_BROKER_SETTINGS, "offsets_topic_num_partitions": 3, "transaction_state_log_num_partitions": 3})
    cluster.start()
    wait_for_quorum(cluster)
    create_topic(cluster, "feat", 2, 3)
    yield cluster
    cluster.stop()


def api_versions(cluster: LocalCluster, node_id: int):
    """(finalized features, EndTxn max version, TxnOffsetCommit max version) as node `node_id` answers."""
    with SyncKafkaClient(cluster.bootstrap_of(node_id)) as client:
        response = client.send(None, ApiKey.API_VERSIONS, messages.ApiVersionsRequest(
            client_software_name="flotilla-test", client_software_version="1"), api_version=4)
    versions = {key.api_key: key.max_version for key in response.api_keys}
    return ({f.name: f.max_version_level for f in response.finalized_features},
            versions[ApiKey.END_TXN], versions[ApiKey.TXN_OFFSET_COMMIT])


def every_node_at(cluster: LocalCluster, expected: tuple) -> None:
    def check():
        for node_id in (1, 2, 3):
            assert api_versions(cluster, node_id) == expected, node_id
        return True
    eventually(check, seconds=30, what=f"every node at {expected}")


def transact(cluster: LocalCluster, transactional_id: str, values: list[str]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": transactional_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    for number, value in enumerate(values):
        producer.produce("feat", value.encode(), partition=number % 2)
    producer.commit_transaction(30)


def read_committed(cluster: LocalCluster, expected: int) -> set[str]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, isolation_level="read_committed",
                             enable_auto_commit=False, consumer_timeout_ms=3_000)
    consumer.assign([TopicPartition("feat", p) for p in (0, 1)])
    consumer.seek_to_beginning()
    try:
        return {message.value.decode() for message in consumer}
    finally:
        consumer.close()


def test_kafka_python_downgrades_and_upgrades_transaction_version_on_every_broker(cluster):
    from kafka.admin import KafkaAdminClient
    from kafka.errors import InvalidUpdateVersionError

    every_node_at(cluster, ({TV: 2}, 5, 5))
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        described = admin.describe_features()
        assert (described[TV]["supported"], described[TV]["finalized"]) == ((0, 2), (2, 2))
        with pytest.raises(InvalidUpdateVersionError):  # a lower level is a downgrade, not an upgrade
            admin.update_features({TV: 1})
        with pytest.raises(InvalidUpdateVersionError):
            admin.update_features({TV: 3})
        assert admin.update_features({TV: ("SAFE_DOWNGRADE", 1)}, validate_only=True) == {TV: "OK"}
        every_node_at(cluster, ({TV: 2}, 5, 5))  # validated only: nothing changed
        assert admin.update_features({TV: ("SAFE_DOWNGRADE", 1)}) == {TV: "OK"}
        every_node_at(cluster, ({TV: 1}, 4, 4))
        transact(cluster, "feat-tv1", [f"tv1-{i}" for i in range(10)])
        assert admin.update_features({TV: 2}) == {TV: "OK"}
        every_node_at(cluster, ({TV: 2}, 5, 5))
        transact(cluster, "feat-tv2", [f"tv2-{i}" for i in range(10)])
        assert eventually(lambda: read_committed(cluster, 20) >= {f"tv{v}-{i}" for v in (1, 2) for i in range(10)},
                          seconds=30, what="both transactions' records")
    finally:
        admin.close()


def test_flotilla_features_describes_and_changes_the_level_and_a_restart_keeps_it(cluster):
    b = cluster.bootstrap_servers
    result = cli("features", "describe", "-b", b, "--json")
    document = json.loads(result.stdout)
    assert result.returncode == 0 and {"feature": TV, "supported_min": 0, "supported_max": 2, "finalized": 2} in \
        document["features"], result.stderr
    refused = cli("features", "upgrade", "--feature", f"{TV}=1", "-b", b)
    assert refused.returncode == 1 and "downgrade" in refused.stderr, refused.stderr
    bad = cli("features", "upgrade", "--feature", "transaction.version", "-b", b)
    assert bad.returncode == 2 and "NAME=LEVEL" in bad.stderr
    done = cli("features", "downgrade", "--feature", f"{TV}=1", "-b", b)
    assert done.returncode == 0, done.stderr
    every_node_at(cluster, ({TV: 1}, 4, 4))
    # node 2's own setting says 2; the metadata log says 1, and the log wins after a restart
    cluster.kill(2)
    cluster.start_node(2)
    wait_for_quorum(cluster)
    every_node_at(cluster, ({TV: 1}, 4, 4))
    off = cli("features", "disable", "--feature", TV, "-b", b)
    assert off.returncode == 0, off.stderr
    every_node_at(cluster, ({}, 4, 4))  # level 0: not finalized at all
    assert cli("features", "upgrade", "--feature", f"{TV}=2", "-b", b).returncode == 0
    every_node_at(cluster, ({TV: 2}, 5, 5))


def test_update_features_v0_reads_allow_downgrade_and_answers_per_feature_until_v2(cluster):
    request_class = messages.UpdateFeaturesRequest

    def update(version: int, level: int, **fields):
        request = request_class(feature_updates=[request_class.FeatureUpdateKey(
            feature=TV, max_version_level=level, **fields)])
        with SyncKafkaClient(cluster.bootstrap_servers) as client:
            return client.send(None, ApiKey.UPDATE_FEATURES, request, api_version=version)

    refused = update(0, 1)  # v0 without AllowDowngrade: an upgrade only
    assert refused.error_code == ErrorCode.INVALID_UPDATE_VERSION and refused.results == []  # none per feature
    done = update(0, 1, allow_downgrade=True)
    assert done.error_code == ErrorCode.NONE and [(r.feature, r.error_code) for r in done.results] == [(TV, 0)]
    every_node_at(cluster, ({TV: 1}, 4, 4))
    again = update(2, 2)
    assert again.error_code == ErrorCode.NONE and again.results == []  # v2: the top-level answer alone
    every_node_at(cluster, ({TV: 2}, 5, 5))
