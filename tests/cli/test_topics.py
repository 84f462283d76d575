"""`flotilla brokers` and `flotilla topics ...` against the test peer: tables, JSON and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cli import main as cli
from cli.local_cluster import free_ports
from tests.net.test_client_peer import peer_in_thread


@pytest.fixture
def peer():
    with peer_in_thread() as running:
        yield running


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    exit_code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return exit_code, out, err


def test_topic_lifecycle_with_json(peer, capsys):
    b = peer.bootstrap
    code, out, err = run_cli(capsys, "topics", "create", "orders", "--partitions", "3", "--replication-factor", "1",
                             "--set", "retention.ms=1000", "-b", b)
    assert code == 0 and "Created topic orders" in out, err
    code, out, _ = run_cli(capsys, "topics", "describe", "orders", "-b", b, "--json")
    document = json.loads(out)
    assert code == 0 and document == {
        "name": "orders",
        "partitions": [{"partition": p, "leader": 1, "leader_epoch": 0, "replicas": [1], "isr": [1]}
                       for p in range(3)],
        "configs": {"retention.ms": "1000"},
    }
    code, out, _ = run_cli(capsys, "topics", "alter-config", "orders", "--set", "cleanup.policy=compact",
                           "--delete", "retention.ms", "-b", b)
    assert code == 0
    code, out, _ = run_cli(capsys, "topics", "describe", "orders", "--json", "-b", b)
    assert json.loads(out)["configs"] == {"cleanup.policy": "compact"}
    code, out, _ = run_cli(capsys, "topics", "list", "--json", "-b", b)
    assert json.loads(out) == [{"name": "orders", "partitions": 3, "replication_factor": 1, "internal": False}]
    code, out, _ = run_cli(capsys, "topics", "delete", "orders", "-b", b)
    assert code == 0 and "orders" not in peer.topics


def test_tables_by_default(peer, capsys):
    peer.create_topic("a", 2, {"retention.ms": "5"})
    code, out, _ = run_cli(capsys, "topics", "list", "-b", peer.bootstrap)
    assert code == 0 and out.splitlines() == ["NAME  PARTITIONS  REPLICATION", "a     2           1"]
    code, out, _ = run_cli(capsys, "topics", "describe", "a", "-b", peer.bootstrap)
    assert out.splitlines()[0] == "Topic: a  Partitions: 2  ReplicationFactor: 1  Configs: retention.ms=5"
    assert out.splitlines()[1].split() == ["PARTITION", "LEADER", "LEADER_EPOCH", "REPLICAS", "ISR"]
    assert out.splitlines()[3].split() == ["1", "1", "0", "1", "1"]


def test_errors_are_one_line_and_non_zero(peer, capsys):
    peer.create_topic("a", 1)
    cases = [
        (("topics", "describe", "nope"), 1, "flotilla: topic 'nope' does not exist\n"),
        (("topics", "delete", "nope"), 1, "flotilla: topic 'nope' does not exist\n"),
        (("topics", "alter-config", "nope", "--set", "retention.ms=1"), 1, "flotilla: topic 'nope' does not exist\n"),
        (("topics", "create", "a"), 1, None),
        (("topics", "alter-config", "a", "--set", "retention.ms=soon"), 1, None),
        (("topics", "create", "b", "--set", "retention.ms"), 2, "flotilla: --set 'retention.ms': expected KEY=VALUE\n"),
        (("topics", "alter-config", "a"), 2, "flotilla: alter-config needs --set KEY=VALUE or --delete KEY\n"),
    ]
    for argv, expected_code, expected_err in cases:
        code, _, err = run_cli(capsys, *argv, "-b", peer.bootstrap)
        assert code == expected_code, (argv, err)
        assert err.count("\n") == 1 and err.startswith("flotilla: "), (argv, err)
        if expected_err is not None:
            assert err == expected_err, argv
    _, _, err = run_cli(capsys, "topics", "alter-config", "a", "--set", "retention.ms=soon", "-b", peer.bootstrap)
    assert "INVALID_CONFIG" in err and "retention.ms" in err
    _, _, err = run_cli(capsys, "topics", "create", "a", "-b", peer.bootstrap)
    assert "TOPIC_ALREADY_EXISTS" in err


def test_brokers_from_metadata_and_config(peer, capsys, tmp_path):
    code, out, _ = run_cli(capsys, "brokers", "--json", "-b", peer.bootstrap)
    assert json.loads(out) == [{"id": 1, "host": "127.0.0.1", "port": peer.port, "rack": None, "roles": ["broker"],
                                "epoch": None, "status": "active", "state": None}]
    controller_ports = free_ports(3)
    config = tmp_path / "cluster.toml"
    config.write_text(
        'cluster_id = "c"\n'
        f'[[nodes]]\nid = 1\nhost = "127.0.0.1"\nkafka_port = {peer.port}\ncontroller_port = {controller_ports[0]}\n'
        'roles = ["broker", "controller"]\ndata_dir = "n1"\n'
        f'[[nodes]]\nid = 2\nhost = "127.0.0.1"\nkafka_port = {controller_ports[1]}\n'
        f'controller_port = {controller_ports[2]}\nroles = ["broker"]\ndata_dir = "n2"\n')
    code, out, err = run_cli(capsys, "brokers", "--config", str(config), "--json")
    assert code == 0, err
    assert [(b["id"], b["roles"], b["status"]) for b in json.loads(out)] == [
        (1, ["broker", "controller"], "active"), (2, ["broker"], "fenced")]
    code, out, _ = run_cli(capsys, "brokers", "--config", str(config))
    assert out.splitlines()[0].split() == ["ID", "HOST", "PORT", "RACK", "ROLES", "EPOCH", "STATUS", "STATE"]
    assert out.splitlines()[2].split()[-3:] == ["-", "fenced", "-"]  # a peer without the admin API: no epoch, state


def test_unreachable_cluster_exit_code_3_as_a_process():
    port = free_ports(1)[0]
    result = subprocess.run([sys.executable, "-m", "cli.main", "topics", "list", "-b", f"127.0.0.1:{port}"],
                            capture_output=True, timeout=60)
    assert result.returncode == 3
    assert result.stderr.decode() == f"flotilla: cannot reach the cluster at 127.0.0.1:{port} (is it running?)\n"


def test_bad_bootstrap_and_both_cluster_options_are_usage_errors(capsys, tmp_path):
    code, _, err = run_cli(capsys, "brokers", "-b", "localhost")
    assert code == 2 and "HOST:PORT" in err
    code, _, err = run_cli(capsys, "brokers", "-b", "127.0.0.1:1", "--config", str(tmp_path / "c.toml"))
    assert code == 2 and "not both" in err


def test_metadata_dump_prints_a_readable_image_and_log_without_json(capsys):
    from cli.quorum import log_line, print_image

    document = {
        "raft_index": 42, "raft_term": 3, "next_producer_id": 1000,
        "brokers": [{"id": 1, "host": "127.0.0.1", "port": 9092, "roles": ["broker", "controller"], "epoch": 7,
                     "status": "active", "in_controlled_shutdown": False}],
        "topics": [{"name": "orders", "topic_id": "ab", "configs": {"cleanup.policy": "compact"},
                    "partitions": [{"partition": 0, "leader": 1, "leader_epoch": 2, "partition_epoch": 5,
                                    "replicas": [1, 2, 3], "isr": [1, 2]}]}],
    }
    print_image(document)
    out = capsys.readouterr().out
    assert out.startswith("metadata image at raft index 42 (term 3), next producer id 1000")
    assert "BROKER  HOST       PORT  RACK  ROLES" in out  # a document of before racks: "-"
    assert "1       127.0.0.1  9092  -     broker,controller  7      active" in out
    assert "orders  0          1       2             5                1,2,3     1,2" in out
    assert "orders  cleanup.policy  compact" in out
    assert log_line(9, {"type": "TopicRecord", "name": "orders"}).split() == ["9", "TopicRecord", "name=orders"]


def test_metadata_dump_turns_records_with_parts_into_json_and_shows_the_feature_levels(capsys):
    from cli.quorum import print_image, record_to_json
    from metadata.records import ClientQuotaRecord, QuotaEntityPart, RegisterBrokerRecord, SupportedFeature

    registration = RegisterBrokerRecord(1, b"\x01" * 16, 7, "127.0.0.1", 9092, None, ("broker",),
                                        features=(SupportedFeature("transaction.version", 0, 2),))
    quota = ClientQuotaRecord((QuotaEntityPart("user", None),), "producer_byte_rate", 1024.0)
    documents = json.loads(json.dumps([record_to_json(registration), record_to_json(quota)]))
    assert documents[0]["features"] == [{"name": "transaction.version", "min_level": 0, "max_level": 2}]
    assert documents[1]["entity"] == [{"entity_type": "user", "entity_name": None}]
    print_image({"raft_index": 5, "raft_term": 1, "next_producer_id": 0, "brokers": [], "topics": [],
                 "features": {"transaction.version": 1}})
    assert capsys.readouterr().out.startswith(
        "metadata image at raft index 5 (term 1), next producer id 0, features: transaction.version 1")
