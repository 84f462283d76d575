"""kafkajs, a Kafka client written from scratch in JavaScript, against a real three-node cluster, unchanged
(tests/clients/kafkajs_check.js): an idempotent acks=all producer, a consumer group that reads and commits,
a transactional producer that commits, aborts and sends a group's offsets, a read_committed consumer, and
the admin client (topics with configs, partitions added, gzip with headers, group offsets set and reset,
records and topics deleted).

kafkajs comes from npm (pinned below) into build/js on first use; without node and npm the test is skipped."""

import json
import os
import subprocess

import pytest

from tests.net.cluster_helpers import clients_cluster, create_topic
from tests.net.npm import npm_package

pytestmark = [pytest.mark.slow, pytest.mark.external]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KAFKAJS = "kafkajs@2.2.4"
SCRIPT = os.path.join(ROOT, "tests", "clients", "kafkajs_check.js")


def kafkajs_modules() -> str:
    """The node_modules directory holding kafkajs (installed from npm on first use); skips without node and npm."""
    return npm_package(KAFKAJS, "kafkajs")


@pytest.fixture(scope="module")
def node_path():
    return kafkajs_modules()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with clients_cluster(str(tmp_path_factory.mktemp("kafkajs"))) as cluster:
        yield cluster


def test_kafkajs_produces_consumes_in_a_group_and_runs_transactions(cluster, node_path):
    create_topic(cluster, "kjs-plain", 3, 3, min_insync_replicas="2")
    create_topic(cluster, "kjs-txn", 3, 3)
    env = {**os.environ, "NODE_PATH": node_path, "KAFKAJS_NO_PARTITIONER_WARNING": "1"}
    run = subprocess.run(["node", SCRIPT, cluster.bootstrap_servers, "kjs"], capture_output=True, text=True,
                         timeout=240, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout)

    # The group read every record, each partition in offset order, and committed its end.
    for partition in range(3):
        values = [f"plain-{i}" for i in range(300) if i % 3 == partition]
        assert result["group_read"][str(partition)] == [[offset, value] for offset, value in enumerate(values)]
    assert result["group_offsets"] == [[0, 100], [1, 100], [2, 100]]

    # Offsets sent in a committed transaction are the group's; a read_committed reader sees the committed
    # transactions' records in order and none of the aborted ones (the markers take offsets in between).
    assert result["eos_offsets"] == [[0, 42], [1, 43], [2, 44]]
    for partition in range(3):
        committed = [value for p, value in result["committed"] if p == partition]
        read = result["read_committed"][str(partition)]
        assert [value for _, value in read] == committed
        assert all(not value.startswith(("t1-", "t4-")) for _, value in read)
        assert [offset for offset, _ in read] == sorted(offset for offset, _ in read)

    # The admin client's view (a topic it created, grew, wrote gzip batches with headers to and deleted).
    admin = result["admin"]
    assert admin["created"] is True and admin["retention_ms"] == "7200000" and admin["partitions"] == 3
    assert sorted(admin["headers"]) == [[f"g{i}", str(i)] for i in range(6)]
    assert admin["group"] == ["Stable", 1] and admin["listed"] is True
    assert admin["offsets_read"] == [[0, 2], [1, 2], [2, 2]]
    assert admin["offsets_set"] == [[0, 1], [1, 2], [2, 2]]
    # kafkajs resets to the earliest offset by committing EARLIEST_OFFSET (-2) itself, which Kafka stores as
    # sent and kafkajs resolves when a consumer of the group next starts.
    assert admin["offsets_reset"] == [[0, -2], [1, -2], [2, -2]]
    assert admin["by_timestamp"] == [[0, 2], [1, 2], [2, 2]]  # nothing after that time: the end
    assert admin["low_high"] == [[0, 1, 2], [1, 0, 2], [2, 0, 2]]
    assert admin["still_listed"] is False
