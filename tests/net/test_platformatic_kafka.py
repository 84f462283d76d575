"""@platformatic/kafka, a Kafka client written from scratch in TypeScript that implements only recent request
versions (Fetch v12-17, JoinGroup v6-9, SyncGroup v4-5, Heartbeat v4, LeaveGroup v4-5, CreateTopics v7,
DeleteTopics v6, DescribeGroups v5, DeleteGroups v2, ...), against a real three-node cluster, unchanged
(tests/clients/platformatic_check.mjs): an idempotent acks=all producer with keys and headers, a classic
consumer group and a KIP-848 consumer group that read and commit, a transactional producer that commits and
aborts, a read_committed consumer, and the admin client (topics created and deleted, groups listed, described
and deleted, configs altered both ways and described, partitions added, records deleted, offsets listed, a
group's offsets altered and deleted, log dirs described, a client quota set and described; the raw
DescribeTopicPartitions, DescribeQuorum and AlterReplicaLogDirs APIs). A broker that serves older maxima only fails it at the first request ("No usable implementation
found for API ...").

The client comes from npm (pinned below) into build/js on first use; the script runs from there, since an ES
module resolves its imports from its own directory. Without node and npm, or with a node older than the
client's engines (20.19.4), the test is skipped."""

import json
import os
import shutil
import subprocess

import pytest

from cli.local_cluster import LocalCluster
from tests.net.cluster_helpers import FAST_BROKER_SETTINGS, clients_cluster, create_topic
from tests.net.npm import npm_package

pytestmark = [pytest.mark.slow, pytest.mark.external]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLIENT = "@platformatic/kafka@1.35.0"
NODE_VERSION_MIN = (20, 19, 4)
SCRIPT = os.path.join(ROOT, "tests", "clients", "platformatic_check.mjs")
SECURE_SCRIPT = os.path.join(ROOT, "tests", "clients", "platformatic_secure.mjs")


def installed(script: str) -> str:
    """`script` copied beside the installed client (an ES module resolves its imports from its own directory)."""
    modules = npm_package(CLIENT, "@platformatic/kafka", node_min=NODE_VERSION_MIN)
    target = os.path.join(os.path.dirname(modules), os.path.basename(script))
    shutil.copyfile(script, target)
    return target


@pytest.fixture(scope="module")
def script():
    return installed(SCRIPT)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with clients_cluster(str(tmp_path_factory.mktemp("platformatic"))) as cluster:
        yield cluster


def test_a_client_of_recent_versions_only_produces_consumes_in_both_group_protocols_and_runs_transactions(
        cluster, script):
    create_topic(cluster, "pk-plain", 3, 3, min_insync_replicas="2")
    create_topic(cluster, "pk-txn", 3, 3)
    run = subprocess.run(["node", script, cluster.bootstrap_servers, "pk"], capture_output=True, text=True,
                         timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])

    # One batch per partition, each from offset 0 (the client reports a batch's base offset).
    assert result["sent_offsets"] == [[0, 0], [1, 0], [2, 0]]

    # Both groups read every record, each partition in offset order, and committed its end.
    for read, offsets in (("classic_read", "classic_offsets"), ("consumer_protocol_read", "consumer_protocol_offsets")):
        for partition in range(3):
            values = [f"plain-{i}" for i in range(300) if i % 3 == partition]
            assert result[read][str(partition)] == [[offset, value] for offset, value in enumerate(values)], read
        assert result[offsets] == [[0, 100], [1, 100], [2, 100]], offsets

    # A read_committed reader sees the two committed transactions and nothing of the aborted one.
    assert result["committed"] == ["t0-0", "t0-1", "t0-2", "t2-0", "t2-1", "t2-2"]
    assert result["read_committed"] == sorted(result["committed"])

    # Consume-transform-produce: the 30 records read went out once each, and the group's committed offsets are
    # those the transaction carried (the next offset after the last record read of each partition).
    read = result["eos_read"]
    assert len(read) == 30 and len(set(map(tuple, read))) == 30
    last = {}
    for partition, offset in read:
        last[partition] = max(last.get(partition, -1), offset)
    assert result["eos_offsets"] == [[p, last[p] + 1] for p in sorted(last)]
    assert result["eos_output"] == sorted(f"eos-plain-{offset * 3 + partition}" for partition, offset in read)

    # The admin client's view.
    assert result["admin_created"] == [["pk-admin", 2, 3]]
    assert result["admin_topics"] == ["pk-admin", "pk-plain", "pk-txn"]
    assert result["admin_topics_after_delete"] == ["pk-plain", "pk-txn"]
    assert result["groups"] == [["pk-848", "consumer"], ["pk-classic", "consumer"], ["pk-eos", "consumer"],
                                ["pk-rc", "consumer"], ["pk-rc2", "consumer"]]
    assert result["consumer_groups"] == ["pk-848"]  # ListGroups v5's TypesFilter
    assert result["described"] == [["pk-classic", "EMPTY", "consumer"]]  # (the client upper-cases states)
    assert result["groups_after_delete"] == ["pk-848", "pk-eos", "pk-rc", "pk-rc2"]

    # Configs: the legacy AlterConfigs set retention.ms, the incremental one added cleanup.policy; DescribeConfigs
    # v4 names each value's source (1 dynamic topic config, 5 default) and type (7 LIST, 5 LONG, 3 INT).
    assert result["configs"] == [["cleanup.policy", "compact,delete", 1, 7], ["retention.ms", "7200000", 1, 5],
                                 ["segment.bytes", "1073741824", 5, 3]]
    assert result["partitions_after_create"] == 4
    assert result["low_watermark"] == [[[0, 10]]]  # DeleteRecords v2
    assert result["end_offsets"] == [[0, 100], [1, 100], [3, 0]]  # ListOffsets, the new partition empty
    assert result["altered_offsets"] == [[0, 100], [1, 42]]  # one offset set, one deleted (OffsetDelete)
    assert result["log_dir_replicas"] == 12  # DescribeLogDirs: 4 partitions x 3 replicas over the 3 brokers
    assert result["quotas"] == [[[["client-id", "pk-app"]], [["producer_byte_rate", 1048576]]]]
    # DescribeTopicPartitions (KIP-966) in pages of three: the cursor carries the fourth partition over.
    assert result["describe_pages"] == [[[["pk-plain", [0, 1, 2]]], ["pk-plain", 3]], [[["pk-plain", [3]]], None]]
    # DescribeQuorum v2, asked of the first node and answered by the quorum's leader: the three voters, each
    # holding the whole metadata log or close behind, each heard from, with their controller listeners.
    quorum = result["quorum"]
    assert (quorum["errorCode"], quorum["topic"], quorum["partitionError"]) == (0, "__cluster_metadata", 0)
    assert quorum["leader"] in (1, 2, 3) and quorum["epoch"] >= 1 and quorum["observers"] == []
    assert [voter[0] for voter in quorum["voters"]] == [1, 2, 3]
    # (int64 fields arrive as BigInt, which the script writes as strings)
    high_watermark = int(quorum["highWatermark"])
    assert all(0 < int(offset) <= high_watermark + 10 and int(fetched) > 0 for _, offset, fetched, _ in quorum["voters"])
    assert quorum["nodes"] == [[node, [["CONTROLLER", "127.0.0.1", cluster.controller_ports[node]]]] for node in (1, 2, 3)]
    # AlterReplicaLogDirs: into the node's own log directory a replica stays (0); another path is not one (57).
    assert result["alter_log_dirs"] == [[True, 0, 0], [True, 1, 57]]


def test_the_client_over_sasl_ssl_with_scram_sha_512(tmp_path):
    """TLS with the cluster's CA and SCRAM-SHA-512 (SaslHandshake v1, the flexible SaslAuthenticate v2) on a
    secured node where erin may write and read one topic and its group (Kafka's authorizer: an idempotent producer
    needs WRITE on a topic, KIP-679): records produced, read back in a group, only that topic listed; a wrong
    password is refused."""
    import sys

    secure_script = installed(SECURE_SCRIPT)
    cluster = LocalCluster(str(tmp_path / "secure"), nodes=1, secure=True,
                           topic_defaults={"partitions": 1, "replication_factor": 1, "min_insync_replicas": 1},
                           broker={**FAST_BROKER_SETTINGS, "offsets_topic_num_partitions": 1,
                                   "offsets_topic_replication_factor": 1})
    cluster.start()
    try:
        properties = cluster.write_client_properties("admin.properties")

        def flotilla(*args: str) -> None:
            run = subprocess.run([sys.executable, "-m", "cli.main", *args, "-b", cluster.bootstrap_servers,
                                  "--command-config", properties], capture_output=True, text=True, timeout=120)
            assert run.returncode == 0, run.stderr

        flotilla("users", "add", "erin", "--password", "erin-secret", "--mechanism", "SCRAM-SHA-512")
        flotilla("topics", "create", "secured", "--partitions", "1", "--replication-factor", "1")
        flotilla("topics", "create", "hidden", "--partitions", "1", "--replication-factor", "1")
        for operation, resource in (("Write", ("--topic", "secured")), ("Read", ("--topic", "secured")),
                                    ("Read", ("--group", "secured-group"))):
            flotilla("acls", "add", "--allow-principal", "User:erin", "--operation", operation, *resource)
        run = subprocess.run(["node", secure_script, cluster.bootstrap_servers,
                              os.path.join(cluster.certs_dir, "ca.pem"), "erin", "erin-secret", "secured"],
                             capture_output=True, text=True, timeout=180)
        assert run.returncode == 0, run.stderr[-3000:]
        result = json.loads(run.stdout.strip().splitlines()[-1])
    finally:
        cluster.stop()
    assert result["read"] == [f"s-{i}" for i in range(50)]
    assert result["topics"] == ["secured"]  # not "hidden", which erin may not describe
    assert result["wrong_password"] != "accepted" and "auth" in result["wrong_password"].lower(), result
