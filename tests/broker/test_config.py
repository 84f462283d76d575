"""The config file: validated with errors naming the file and the key; nothing starts on a bad file."""

import pytest

from broker.config import ConfigError, default_config, load_config, parse_config

GOOD = """
cluster_id = "test"
[[nodes]]
id = 1
host = "127.0.0.1"
kafka_port = 19092
controller_port = 19192
roles = ["broker", "controller"]
data_dir = "data/node-1"
[[nodes]]
id = 2
kafka_port = 19093
controller_port = 19193
roles = ["broker"]
[topic_defaults]
partitions = 2
replication_factor = 2
min_insync_replicas = 1
"""


def write(tmp_path, text):
    path = tmp_path / "cluster.toml"
    path.write_text(text)
    return str(path)


def test_a_good_file_loads_with_data_dirs_relative_to_the_file(tmp_path):
    config = load_config(write(tmp_path, GOOD))
    assert [n.id for n in config.nodes] == [1, 2]
    assert config.node(1).data_dir == str(tmp_path / "data" / "node-1")
    assert config.node(2).data_dir == str(tmp_path / "flotilla-data" / "node-2")
    assert config.node(2).roles == ("broker",)
    assert config.topic_defaults.partitions == 2
    assert [n.id for n in config.controllers] == [1]
    assert config.node(1).rack is None and config.broker.replica_selector == ""
    racked = load_config(write(tmp_path, GOOD.replace('data_dir = "data/node-1"', 'data_dir = "data/node-1"\nrack = "az-1"')
                               + '[broker]\nreplica_selector = "rack"\n'))
    assert racked.node(1).rack == "az-1" and racked.broker.replica_selector == "rack"


@pytest.mark.parametrize(
    "mutation, key",
    [
        (lambda t: t.replace('cluster_id = "test"', 'cluster_id = "test"\ncolour = "red"'), "colour"),
        (lambda t: t.replace("id = 2", "id = 1"), "nodes[1].id"),
        (lambda t: t.replace("kafka_port = 19093", "kafka_port = 19092"), "nodes[1].kafka_port"),
        (lambda t: t.replace('roles = ["broker"]\n', ""), "nodes[1].roles"),
        (lambda t: t.replace('roles = ["broker"]', 'roles = ["janitor"]'), "nodes[1].roles"),
        (lambda t: t.replace("kafka_port = 19093", 'kafka_port = "x"'), "nodes[1].kafka_port"),
        (lambda t: t.replace("partitions = 2", "partitions = 0"), "topic_defaults.partitions"),
        (lambda t: t.replace("min_insync_replicas = 1", "min_insync_replicas = 3"), "topic_defaults.min_insync_replicas"),
        (lambda t: t.replace("[topic_defaults]", "[topic_defaults]\nflavour = 1"), "topic_defaults.flavour"),
        (lambda t: t.replace("[topic_defaults]", "[broker]\ntransaction_version = 3\n[topic_defaults]"),
         "broker.transaction_version"),  # the transaction.version feature: 0-2 (KIP-890)
        (lambda t: t.replace("[topic_defaults]", "[broker]\nproducer_id_expiration_ms = 0\n[topic_defaults]"),
         "broker.producer_id_expiration_ms"),  # producer.id.expiration.ms: at least 1, as Kafka's
        (lambda t: t.replace('roles = ["broker", "controller"]', 'roles = ["broker"]'), "roles"),
        (lambda t: t.replace('data_dir = "data/node-1"', 'data_dir = "data/node-1"\nrack = ""'), "nodes[0].rack"),
        (lambda t: t.replace('data_dir = "data/node-1"', 'data_dir = "data/node-1"\nrack = 3'), "nodes[0].rack"),
        (lambda t: t.replace("[topic_defaults]", '[broker]\nreplica_selector = "closest"\n[topic_defaults]'),
         "broker.replica_selector"),  # KIP-392: "" or "rack"
        (lambda t: t.replace("[topic_defaults]", "[broker]\nreplica_selector = true\n[topic_defaults]"),
         "broker.replica_selector"),
    ],
)
def test_a_bad_file_names_the_file_and_the_key(tmp_path, mutation, key):
    path = write(tmp_path, mutation(GOOD))
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert path in str(error.value)
    assert key in str(error.value)


def test_bad_toml_and_missing_file_name_the_file(tmp_path):
    path = write(tmp_path, "cluster_id = [")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config(path)
    with pytest.raises(ConfigError, match="not found"):
        load_config(str(tmp_path / "absent.toml"))


def test_the_embedded_default_is_three_local_nodes(tmp_path):
    config = default_config(str(tmp_path))
    assert [(n.id, n.kafka_port, n.controller_port) for n in config.nodes] == [
        (1, 9092, 9192),
        (2, 9093, 9193),
        (3, 9094, 9194),
    ]
    assert all(n.host == "127.0.0.1" and n.is_broker and n.is_controller for n in config.nodes)
    assert config.node(3).data_dir == str(tmp_path / "flotilla-data" / "node-3")


def test_log_retention_check_interval_is_read_and_must_be_positive():
    document = {"cluster_id": "c", "nodes": [{"id": 1, "host": "127.0.0.1", "kafka_port": 9092,
                                              "controller_port": 9192, "roles": ["broker", "controller"],
                                              "data_dir": "d1"}]}
    assert parse_config(document, "f.toml", "/").broker.log_retention_check_interval_ms == 30_000
    document["broker"] = {"log_retention_check_interval_ms": 1_000}
    assert parse_config(document, "f.toml", "/").broker.log_retention_check_interval_ms == 1_000
    document["broker"] = {"log_retention_check_interval_ms": 0}
    with pytest.raises(ConfigError, match="f.toml: key 'broker.log_retention_check_interval_ms' must be >= 1"):
        parse_config(document, "f.toml", "/")


def test_topic_config_defaults_are_read_by_their_topic_names_and_validated_as_kafka_validates_them(tmp_path):
    """[topic_defaults.configs]: the cluster's defaults of topic configs (server.properties' log.* keys)."""
    config = load_config(write(tmp_path, GOOD + '[topic_defaults.configs]\n"retention.ms" = 3600000\n'
                               '"cleanup.policy" = "compact"\n"unclean.leader.election.enable" = true\n'
                               '"min.cleanable.dirty.ratio" = 0.25\n'))
    assert config.topic_defaults.configs == (("cleanup.policy", "compact"), ("min.cleanable.dirty.ratio", "0.25"),
                                             ("retention.ms", "3600000"), ("unclean.leader.election.enable", "true"))
    assert load_config(write(tmp_path, GOOD)).topic_defaults.configs == ()
    for table, message in (
        ('"retention.ms" = "soon"', "key 'topic_defaults.configs.\"retention.ms\"': Invalid value 'soon' for "
                                    "configuration retention.ms: not a long"),
        ("retention.ms = 1", "key 'topic_defaults.configs.retention' is a table: write the config name in quotes "
                             "(\"retention.ms\" = ...)"),
        ('"segment.index.bytes" = 4096', "key 'topic_defaults.configs.\"segment.index.bytes\"': not a topic config "
                                         "with a cluster default (one of: cleanup.policy, compression.type,"),
        ('"min.insync.replicas" = 2', "set this default with the key 'topic_defaults.min_insync_replicas'"),
        ('"flush.ms" = 1000', "set this default with the key 'broker.log_flush_ms'"),
        ('"cleanup.policy" = ["compact"]', "must be a string, a number or true/false, got ['compact']"),
        ('"min.compaction.lag.ms" = 2\n"max.compaction.lag.ms" = 1', "key 'topic_defaults.configs': conflict topic "
                                                                      "config setting min.compaction.lag.ms (2) > "
                                                                      "max.compaction.lag.ms (1)"),
    ):
        path = write(tmp_path, GOOD + "[topic_defaults.configs]\n" + table + "\n")
        with pytest.raises(ConfigError) as error:
            load_config(path)
        assert str(error.value).startswith(f"{path}: ") and message in str(error.value), str(error.value)


def test_topic_config_defaults_reach_the_broker_and_the_controller(tmp_path):
    """The broker reads them as its static configs (Kafka's names), the controller its unclean-election default."""
    import random

    from broker.node_state import NodeState
    from simulations.disk import SimDisk

    config = load_config(write(tmp_path, GOOD + '[topic_defaults.configs]\n"retention.ms" = 3600000\n'
                               '"unclean.leader.election.enable" = true\n'))
    storage = SimDisk(random.Random(1))
    storage.makedirs("metadata")
    storage.makedirs("logs")
    state = NodeState(config, 1, storage, random.Random(1), lambda: 0, incarnation_id=bytes(16))
    assert state.broker.static_configs["log.retention.ms"] == "3600000"
    assert state.broker._log_config("any").retention_ms == 3_600_000
    assert state.controller._config.unclean_leader_election_enable
    plain = NodeState(load_config(write(tmp_path, GOOD)), 1, storage, random.Random(1), lambda: 0,
                      incarnation_id=bytes(16))
    assert "log.retention.ms" not in plain.broker.static_configs
    assert not plain.controller._config.unclean_leader_election_enable


def test_a_controller_only_node_needs_no_kafka_listener(tmp_path):
    dedicated = GOOD.replace('host = "127.0.0.1"\nkafka_port = 19092\n', 'host = "127.0.0.1"\n').replace(
        'roles = ["broker", "controller"]', 'roles = ["controller"]')
    config = load_config(write(tmp_path, dedicated))
    assert (config.node(1).roles, config.node(1).listeners, config.node(1).controller_port) == (
        ("controller",), (), 19192)
    assert [n.id for n in config.brokers] == [2]
    with pytest.raises(ConfigError, match=r"key 'nodes\[1\].kafka_port' is missing"):  # a broker still needs one
        load_config(write(tmp_path, dedicated.replace("kafka_port = 19093\n", "")))
