"""[security] and listeners in the cluster file: every mistake names the file and the key."""

import pytest

from broker.config import ConfigError, parse_config

NODE = {"id": 1, "controller_port": 9192, "roles": ["broker", "controller"]}


def parse(node_extra=None, security=None, drop_kafka_port=False):
    node = dict(NODE, **(node_extra or {}))
    if not drop_kafka_port and "listeners" not in node:
        node["kafka_port"] = 9092
    document = {"cluster_id": "c", "nodes": [node]}
    if security is not None:
        document["security"] = security
    return parse_config(document, "cluster.toml", "/base")


def test_listeners_with_protocol_map_and_inter_broker_listener():
    config = parse({"listeners": ["SASL_SSL://:9093", "INTERNAL://127.0.0.1:9094"]},
                   {"listener_security_protocol_map": {"INTERNAL": "SSL"}, "inter_broker_listener_name": "INTERNAL",
                    "ssl_certfile": "certs/node-{id}.pem", "ssl_keyfile": "certs/node-{id}.key"})
    node = config.nodes[0]
    assert [(l.name, l.host, l.port, l.security_protocol) for l in node.listeners] == [
        ("SASL_SSL", "127.0.0.1", 9093, "SASL_SSL"), ("INTERNAL", "127.0.0.1", 9094, "SSL")]
    assert node.kafka_port == 9094 and node.inter_broker_listener.name == "INTERNAL"
    assert config.security.ssl_files(1) == ("/base/certs/node-1.pem", "/base/certs/node-1.key", None)


def test_kafka_port_alone_is_one_plaintext_listener():
    node = parse().nodes[0]
    assert [(l.name, l.port, l.security_protocol) for l in node.listeners] == [("PLAINTEXT", 9092, "PLAINTEXT")]


@pytest.mark.parametrize("node_extra, security, fragment", [
    ({"listeners": ["SSL://:9093"]}, {}, "'nodes[0].listeners': SSL://127.0.0.1:9093 uses TLS"),
    ({"listeners": ["FOO://:9093"]}, {}, "map it in 'security.listener_security_protocol_map'"),
    ({"listeners": ["PLAINTEXT:9093"]}, {}, "is not of the form NAME://host:port"),
    ({"listeners": ["PLAINTEXT://:9093", "PLAINTEXT://:9094"]}, {}, "appears twice"),
    ({"listeners": ["PLAINTEXT://:9093"], "kafka_port": 9092}, {}, "exclude each other"),
    ({"listeners": ["PLAINTEXT://:9093"]}, {"inter_broker_listener_name": "X"}, "no listener named 'X'"),
    ({}, {"sasl_enabled_mechanisms": ["GSSAPI"]}, "security.sasl_enabled_mechanisms"),
    ({}, {"ssl_client_auth": "always"}, "security.ssl_client_auth"),
    ({}, {"ssl_client_auth": "required"}, "security.ssl_cafile"),
    ({}, {"super_users": ["admin"]}, "security.super_users"),
    ({}, {"authorizer": "yes"}, "security.authorizer"),
    ({}, {"plain_users": {"admin": 7}}, "security.plain_users.admin"),
    ({}, {"inter_broker": {"sasl_mechanism": "KERBEROS"}}, "security.inter_broker.sasl_mechanism"),
    ({}, {"bogus": 1}, "unknown key 'security.bogus'"),
    ({}, {"controller_tls": True}, "'security.controller_tls' needs"),
    ({}, {"listener_security_protocol_map": {"X": "TLS"}}, "security.listener_security_protocol_map.X"),
    ({}, {"connections_max_reauth_ms": 500}, "'security.connections_max_reauth_ms' must be 0 (off) or"),
    ({}, {"connections_max_reauth_ms": "1h"}, "'security.connections_max_reauth_ms' must be 0 (off) or"),
    ({}, {"connections_max_reauth_ms": -1}, "'security.connections_max_reauth_ms' must be 0 (off) or"),
])
def test_bad_security_settings_name_the_file_and_the_key(node_extra, security, fragment):
    with pytest.raises(ConfigError) as info:
        parse(node_extra, security)
    assert str(info.value).startswith("cluster.toml: ") and fragment in str(info.value)


def test_connections_max_reauth_ms_is_off_by_default():
    assert parse({}, {}).security.connections_max_reauth_ms == 0
    assert parse({}, {"connections_max_reauth_ms": 3_600_000}).security.connections_max_reauth_ms == 3_600_000
