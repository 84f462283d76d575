"""SASL/OAUTHBEARER on real nodes with real clients: confluent-kafka (librdkafka's oauth_cb, and its unsecured
JWTs), kafka-python's token provider, kafkajs's oauthBearerProvider and the flotilla command. Tokens are signed
by a test issuer whose public key is the node's JWKS file; ACLs name the tokens' subjects; a session lasts its
token's lifetime, so the clients re-authenticate with fresh tokens."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from cli.local_cluster import LocalCluster
from security.oauthbearer import unsecured_token
from tests.net.cluster_helpers import FAST_BROKER_SETTINGS, eventually
from tests.net.test_metrics_endpoint import total
from tests.security.test_oauthbearer import Issuer
from tests.security.test_secured_cluster import flotilla, ok, wait_ready

pytestmark = [pytest.mark.slow, pytest.mark.external]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOPIC = "oidc"


def signed(issuer: Issuer, sub: str, life_s: int = 300, **claims) -> str:
    """A token `issuer` signs now (wall clock) for `sub`, with the audience and issuer the node expects."""
    import jwt

    now = int(time.time())
    payload = {"sub": sub, "iat": now, "exp": now + life_s, "iss": "https://idp.test", "aud": "kafka", **claims}
    return jwt.encode(payload, issuer.private, algorithm=issuer.algorithm, headers={"kid": issuer.kid})


def _start(cluster: LocalCluster) -> LocalCluster:
    cluster.start()
    wait_ready(cluster)
    ok(flotilla(cluster, "topics", "create", TOPIC, "--partitions", "1", "--replication-factor", "1"))
    for operation in ("Write", "Read", "Describe"):
        ok(flotilla(cluster, "acls", "add", "--allow-principal", "User:alice", "--operation", operation,
                    "--topic", TOPIC))
    ok(flotilla(cluster, "acls", "add", "--allow-principal", "User:alice", "--operation", "Read", "--group", "og"))
    return cluster


@pytest.fixture(scope="module")
def issuer() -> Issuer:
    return Issuer("idp-1")


@pytest.fixture(scope="module")
def oidc(tmp_path_factory, issuer):
    """One node whose SASL_SSL listener takes tokens signed by `issuer` (and PLAIN for its admin)."""
    cluster = LocalCluster(str(tmp_path_factory.mktemp("oidc")), nodes=1, secure=True, metrics=True,
                           broker=FAST_BROKER_SETTINGS, security={
                               "sasl_enabled_mechanisms": '["PLAIN", "OAUTHBEARER"]',
                               "sasl_oauthbearer_jwks_file": '"jwks.json"',
                               "sasl_oauthbearer_expected_audience": '["kafka"]',
                               "sasl_oauthbearer_expected_issuer": '"https://idp.test"'})
    with open(os.path.join(cluster.directory, "jwks.json"), "w") as jwks:
        json.dump({"keys": [issuer.jwk]}, jwks)
    try:
        yield _start(cluster)
    finally:
        cluster.stop()


def oauth_config(cluster: LocalCluster, **extra) -> dict:
    return {"bootstrap.servers": cluster.bootstrap_servers, "security.protocol": "SASL_SSL",
            "sasl.mechanism": "OAUTHBEARER", "ssl.ca.location": os.path.join(cluster.certs_dir, "ca.pem"), **extra}


def test_confluent_kafka_produces_and_consumes_with_signed_tokens_and_renews_them(oidc, issuer):
    from confluent_kafka import Consumer, Producer

    tokens = []

    def oauth_cb(_config):
        tokens.append(signed(issuer, "alice", life_s=6))
        return tokens[-1], time.time() + 6

    reauthenticated = total(oidc, "flotilla_sasl_authentications_total", kind="reauthentication", result="success")
    delivered = []
    producer = Producer(oauth_config(oidc, oauth_cb=oauth_cb, acks="all"))
    started = time.monotonic()
    index = 0
    while time.monotonic() - started < 12:  # two token lifetimes: the session expires and is renewed
        producer.produce(TOPIC, value=b"r%d" % index, on_delivery=lambda error, m: delivered.append(error))
        producer.poll(0.1)
        index += 1
    assert producer.flush(30) == 0
    assert delivered == [None] * index
    assert len(tokens) >= 2  # librdkafka fetched a new token before the first expired
    # The broker gave the session the token's lifetime, and the producer re-authenticated on its connection
    assert total(oidc, "flotilla_sasl_authentications_total", kind="reauthentication",
                 result="success") > reauthenticated
    consumer = Consumer(oauth_config(oidc, oauth_cb=oauth_cb, **{"group.id": "og", "auto.offset.reset": "earliest"}))
    consumer.subscribe([TOPIC])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(values) < index and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    assert values[:index] == [b"r%d" % i for i in range(index)]


@pytest.mark.parametrize("case", ["another issuer's key", "expired", "another audience"])
def test_confluent_kafka_is_refused_a_bad_token(oidc, issuer, case):
    from confluent_kafka import Producer

    token = {"another issuer's key": lambda: signed(Issuer("idp-1"), "alice"),
             "expired": lambda: signed(issuer, "alice", life_s=-120),
             "another audience": lambda: signed(issuer, "alice", aud="billing")}[case]()
    failures = total(oidc, "flotilla_sasl_authentications_total", kind="authentication", result="failure")
    errors: list[str] = []
    producer = Producer(oauth_config(oidc, oauth_cb=lambda _config: (token, time.time() + 300),
                                     error_cb=lambda error: errors.append(str(error)),
                                     **{"message.timeout.ms": 3000}))
    delivered = []
    producer.produce(TOPIC, value=b"x", on_delivery=lambda error, m: delivered.append(error))
    producer.flush(10)
    assert delivered and delivered[0] is not None  # never written
    assert any("invalid_token" in error for error in errors), errors  # the broker's RFC 7628 answer, passed on
    assert total(oidc, "flotilla_sasl_authentications_total", kind="authentication", result="failure") > failures


def test_a_good_token_for_a_principal_without_acls_is_denied_the_topic(oidc, issuer):
    from confluent_kafka import KafkaError, Producer

    producer = Producer(oauth_config(oidc, oauth_cb=lambda _config: (signed(issuer, "mallory"), time.time() + 300),
                                     **{"message.timeout.ms": 10000}))
    delivered = []
    producer.produce(TOPIC, value=b"x", on_delivery=lambda error, m: delivered.append(error))
    producer.flush(15)
    assert [error.code() for error in delivered] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_kafka_python_authenticates_with_its_token_provider(oidc, issuer):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    try:
        from kafka.net.sasl.oauth import AbstractTokenProvider  # kafka-python 3
    except ImportError:
        from kafka.sasl.oauth import AbstractTokenProvider  # kafka-python 2

    class Provider(AbstractTokenProvider):
        def token(self):
            return signed(issuer, "alice")

    config = {"bootstrap_servers": oidc.bootstrap_servers, "security_protocol": "SASL_SSL",
              "sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": Provider(),
              "ssl_cafile": os.path.join(oidc.certs_dir, "ca.pem")}
    producer = eventually(lambda: KafkaProducer(**config, acks="all"), 60, what="a kafka-python connection")
    metadata = producer.send(TOPIC, b"from-kafka-python").get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(**config, auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    partition = TopicPartition(TOPIC, 0)
    consumer.assign([partition])
    consumer.seek(partition, metadata.offset)
    assert next(iter(consumer)).value == b"from-kafka-python"
    consumer.close()


def test_kafkajs_authenticates_with_its_oauth_bearer_provider(oidc, issuer):
    from tests.net.test_kafkajs import kafkajs_modules

    modules = kafkajs_modules()
    script = os.path.join(ROOT, "tests", "clients", "kafkajs_oauthbearer.js")
    env = {**os.environ, "NODE_PATH": modules, "KAFKAJS_NO_PARTITIONER_WARNING": "1"}
    run = subprocess.run(["node", script, oidc.bootstrap_servers, os.path.join(oidc.certs_dir, "ca.pem"), TOPIC,
                          signed(issuer, "alice")], capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout)
    assert [(p["topicName"], p["errorCode"]) for p in result["produced"]] == [(TOPIC, 0)]


def test_the_flotilla_command_reads_its_token_from_a_file(oidc, issuer, tmp_path):
    token_file = tmp_path / "token"
    properties = tmp_path / "oauth.properties"
    properties.write_text("security.protocol=SASL_SSL\nsasl.mechanism=OAUTHBEARER\n"
                          f"sasl.oauthbearer.token.file={token_file}\n"
                          f"ssl.ca.location={os.path.join(oidc.certs_dir, 'ca.pem')}\n")
    token_file.write_text(signed(issuer, "admin") + "\n")  # the cluster's super user
    described = json.loads(ok(flotilla(oidc, "topics", "describe", TOPIC, "--json", properties=str(properties))))
    assert json.dumps(described).count(TOPIC) >= 1
    token_file.write_text(signed(Issuer("idp-1"), "admin"))
    refused = flotilla(oidc, "topics", "list", properties=str(properties), timeout=60)
    assert refused.returncode != 0 and "refused the token" in refused.stderr and "invalid_token" in refused.stderr


@pytest.fixture(scope="module")
def unsecured(tmp_path_factory):
    """One node taking unsecured tokens (development), as librdkafka's enable.sasl.oauthbearer.unsecure.jwt makes."""
    cluster = LocalCluster(str(tmp_path_factory.mktemp("unsecured-jwt")), nodes=1, secure=True,
                           broker=FAST_BROKER_SETTINGS, security={
                               "sasl_enabled_mechanisms": '["PLAIN", "OAUTHBEARER"]',
                               "sasl_oauthbearer_unsecured": "true"})
    try:
        yield _start(cluster)
    finally:
        cluster.stop()


def test_librdkafkas_unsecured_tokens_and_the_flotilla_command_on_a_development_cluster(unsecured, tmp_path):
    from confluent_kafka import Producer

    producer = Producer(oauth_config(unsecured, **{"enable.sasl.oauthbearer.unsecure.jwt": True,
                                                  "sasl.oauthbearer.config": "principal=alice", "acks": "all"}))
    delivered = []
    for index in range(10):
        producer.produce(TOPIC, value=b"u%d" % index, on_delivery=lambda error, m: delivered.append(error))
    assert producer.flush(30) == 0 and delivered == [None] * 10
    properties = tmp_path / "dev.properties"
    properties.write_text("security.protocol=SASL_SSL\nsasl.mechanism=OAUTHBEARER\n"
                          "enable.sasl.oauthbearer.unsecure.jwt=true\nsasl.oauthbearer.config=principal=admin\n"
                          f"ssl.ca.location={os.path.join(unsecured.certs_dir, 'ca.pem')}\n")
    offsets = ok(flotilla(unsecured, "topics", "describe", TOPIC, "--json", properties=str(properties)))
    assert TOPIC in offsets
    # An unsecured token names whoever it likes: only a development cluster takes them, and the ACLs still hold
    assert unsecured_token("mallory", int(time.time() * 1000)).endswith(".")
    denied = Producer(oauth_config(unsecured, **{"enable.sasl.oauthbearer.unsecure.jwt": True,
                                                "sasl.oauthbearer.config": "principal=mallory",
                                                "message.timeout.ms": 10000}))
    refused = []
    denied.produce(TOPIC, value=b"x", on_delivery=lambda error, m: refused.append(error))
    denied.flush(15)
    assert [error.name() for error in refused] == ["TOPIC_AUTHORIZATION_FAILED"]


def test_a_node_refuses_to_start_with_a_jwks_file_holding_a_private_key(tmp_path, issuer):
    import jwt

    cluster = LocalCluster(str(tmp_path), nodes=1, secure=True, security={
        "sasl_enabled_mechanisms": '["PLAIN", "OAUTHBEARER"]', "sasl_oauthbearer_jwks_file": '"jwks.json"'})
    private = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(issuer.private))
    with open(os.path.join(cluster.directory, "jwks.json"), "w") as jwks:
        json.dump({"keys": [{**private, "kid": "idp-1"}]}, jwks)
    run = subprocess.run([sys.executable, "-m", "cli.main", "node", "--config", cluster.config_path, "--id", "1"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "key 'security.sasl_oauthbearer_jwks_file'" in run.stderr and "private key" in run.stderr


class JwksServer:
    """An identity provider on 127.0.0.1 over HTTPS (a trustme CA): its JWKS endpoint serves `document` (None:
    answering 503) and counts the GETs; its token endpoint (POST /token) gives the clients of `clients` (id ->
    secret, HTTP Basic) tokens signed by `issuer` whose subject is the client id, by the client-credentials
    grant, and counts them."""

    def __init__(self, directory: str, issuer: Issuer | None = None, clients: dict | None = None) -> None:
        import http.server
        import ssl
        import threading

        import trustme

        authority = trustme.CA()
        authority.cert_pem.write_to_path(os.path.join(directory, "idp-ca.pem"))
        self.document: dict | None = None
        self.gets = 0
        self.tokens = 0
        self.issuer, self.clients = issuer, clients or {}
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                server.gets += 1
                body = json.dumps(server.document).encode() if server.document is not None else b"down"
                self.send_response(200 if server.document is not None else 503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):  # noqa: N802
                import base64
                from urllib.parse import parse_qs

                form = parse_qs(self.rfile.read(int(self.headers.get("Content-Length", 0))).decode())
                scheme, _, credentials = (self.headers.get("Authorization") or "").partition(" ")
                client_id, _, secret = base64.b64decode(credentials or "").decode().partition(":")
                if (self.path != "/token" or scheme != "Basic" or form.get("grant_type") != ["client_credentials"]
                        or server.clients.get(client_id) != secret):
                    status, body = 401, {"error": "invalid_client"}
                else:
                    server.tokens += 1
                    status, body = 200, {"access_token": signed(server.issuer, client_id), "token_type": "bearer",
                                         "expires_in": 300}
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        authority.issue_cert("127.0.0.1").configure_cert(context)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.httpd.server_address[1]}/jwks"
        self.token_url = f"https://127.0.0.1:{self.httpd.server_address[1]}/token"
        self.ca_file = os.path.join(directory, "idp-ca.pem")
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _produce_one(cluster: LocalCluster, token_of, timeout_s: float) -> list:
    """Produce one record with confluent-kafka authenticating with `token_of()` (asked again at each attempt);
    the delivery errors (None: delivered)."""
    from confluent_kafka import Producer

    producer = Producer(oauth_config(cluster, oauth_cb=lambda _config: (token_of(), time.time() + 300),
                                     **{"message.timeout.ms": int(timeout_s * 1000), "reconnect.backoff.max.ms": 1000}))
    delivered: list = []
    producer.produce(TOPIC, value=b"k", on_delivery=lambda error, m: delivered.append(error))
    producer.flush(timeout_s + 5)
    return delivered


def test_keys_from_a_jwks_endpoint_that_starts_late_and_rotates(tmp_path, issuer):
    directory = str(tmp_path / "cluster")
    os.makedirs(directory)
    idp = JwksServer(directory)  # down at first: the node serves, and takes no token until it has the keys
    cluster = LocalCluster(directory, nodes=1, secure=True, broker=FAST_BROKER_SETTINGS, security={
        "sasl_enabled_mechanisms": '["PLAIN", "OAUTHBEARER"]', "sasl_oauthbearer_jwks_endpoint_url": f'"{idp.url}"',
        "sasl_oauthbearer_jwks_endpoint_cafile": '"idp-ca.pem"', "sasl_oauthbearer_expected_audience": '["kafka"]'})
    try:
        _start(cluster)
        assert idp.gets >= 1
        # No keys yet: refused (asked with the flotilla command: confluent-kafka 2.16's oauth_cb path can leave a
        # stray TypeError set after a producer whose every authentication failed, raised at a later import)
        token_file, properties = tmp_path / "token", tmp_path / "oauth.properties"
        token_file.write_text(signed(issuer, "admin"))
        properties.write_text("security.protocol=SASL_SSL\nsasl.mechanism=OAUTHBEARER\n"
                              f"sasl.oauthbearer.token.file={token_file}\n"
                              f"ssl.ca.location={os.path.join(cluster.certs_dir, 'ca.pem')}\n")
        refused = flotilla(cluster, "topics", "list", properties=str(properties))
        assert refused.returncode != 0 and "invalid_token" in refused.stderr, refused.stderr
        idp.document = {"keys": [issuer.jwk]}  # the provider comes up: fetched again within the retry backoff
        assert _produce_one(cluster, lambda: signed(issuer, "alice"), 30) == [None]
        rotated = Issuer("idp-2")
        idp.document = {"keys": [issuer.jwk, rotated.jwk]}  # a new signing key: the node learns it when a token
        gets = idp.gets  # names it (a fetch at most every 10 s), long before the hourly refresh
        assert _produce_one(cluster, lambda: signed(rotated, "alice"), 40) == [None]
        assert idp.gets > gets
    finally:
        cluster.stop()
        idp.close()


def test_clients_take_their_tokens_from_the_providers_token_endpoint(tmp_path, issuer):
    """The OIDC client-credentials flow end to end: librdkafka (sasl.oauthbearer.method=oidc) and the flotilla
    command fetch tokens from the provider's token endpoint; the node checks them against its JWKS endpoint."""
    directory = str(tmp_path / "cluster")
    os.makedirs(directory)
    idp = JwksServer(directory, issuer, clients={"alice": "alice-secret", "admin": "admin-secret"})
    idp.document = {"keys": [issuer.jwk]}
    cluster = LocalCluster(directory, nodes=1, secure=True, broker=FAST_BROKER_SETTINGS, security={
        "sasl_enabled_mechanisms": '["PLAIN", "OAUTHBEARER"]', "sasl_oauthbearer_jwks_endpoint_url": f'"{idp.url}"',
        "sasl_oauthbearer_jwks_endpoint_cafile": '"idp-ca.pem"', "sasl_oauthbearer_expected_audience": '["kafka"]',
        "sasl_oauthbearer_expected_issuer": '"https://idp.test"'})
    oidc = {"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.token.endpoint.url": idp.token_url,
            "https.ca.location": idp.ca_file}
    try:
        _start(cluster)
        from confluent_kafka import Producer

        producer = Producer(oauth_config(cluster, **oidc, **{"sasl.oauthbearer.client.id": "alice",
                                                              "sasl.oauthbearer.client.secret": "alice-secret",
                                                              "acks": "all"}))
        delivered: list = []
        producer.produce(TOPIC, value=b"oidc", on_delivery=lambda error, m: delivered.append(error))
        assert producer.flush(30) == 0 and delivered == [None]
        assert idp.tokens >= 1
        properties = tmp_path / "oidc.properties"
        lines = {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
                 "ssl.ca.location": os.path.join(cluster.certs_dir, "ca.pem"), **oidc,
                 "sasl.oauthbearer.client.id": "admin", "sasl.oauthbearer.client.secret": "admin-secret"}
        properties.write_text("".join(f"{key}={value}\n" for key, value in lines.items()))
        tokens = idp.tokens
        assert TOPIC in ok(flotilla(cluster, "topics", "describe", TOPIC, "--json", properties=str(properties)))
        assert idp.tokens > tokens  # the command's own token, as admin
        properties.write_text(properties.read_text().replace("admin-secret", "wrong"))
        refused = flotilla(cluster, "topics", "list", properties=str(properties))
        assert refused.returncode != 0 and "token endpoint answered HTTP 401" in refused.stderr, refused.stderr
    finally:
        cluster.stop()
        idp.close()


def test_brokers_replicate_with_tokens_from_the_providers_token_endpoint(tmp_path, issuer):
    """OAUTHBEARER between brokers (Kafka's sasl.mechanism.inter.broker.protocol=OAUTHBEARER): three nodes whose
    [security.inter_broker] names the provider's token endpoint and their client credentials (no password to
    fall back on) take tokens by the client-credentials grant, and replicate a topic with RF=3 and
    min.insync.replicas=3 over their SASL_SSL listener as the super user the tokens name."""
    directory = str(tmp_path / "cluster")
    os.makedirs(directory)
    idp = JwksServer(directory, issuer, clients={"broker": "broker-secret"})
    idp.document = {"keys": [issuer.jwk]}
    cluster = LocalCluster(directory, nodes=3, secure=True, broker=FAST_BROKER_SETTINGS, security={
        "sasl_enabled_mechanisms": '["PLAIN", "OAUTHBEARER"]', "sasl_oauthbearer_jwks_endpoint_url": f'"{idp.url}"',
        "sasl_oauthbearer_jwks_endpoint_cafile": '"idp-ca.pem"', "sasl_oauthbearer_expected_audience": '["kafka"]',
        "super_users": '["User:admin", "User:broker"]'}, inter_broker={
        "sasl_mechanism": '"OAUTHBEARER"', "oauthbearer_token_endpoint_url": f'"{idp.token_url}"',
        "oauthbearer_client_id": '"broker"', "oauthbearer_client_secret": '"broker-secret"',
        "oauthbearer_ca_file": '"idp-ca.pem"'})
    try:
        cluster.start()
        wait_ready(cluster)
        ok(flotilla(cluster, "topics", "create", "replicated", "--partitions", "2", "--replication-factor", "3",
                    "--set", "min.insync.replicas=3"))
        from confluent_kafka import Producer

        producer = Producer({**cluster.client_properties(), "acks": "all"})
        delivered: list = []
        for i in range(100):
            producer.produce("replicated", value=b"%d" % i, partition=i % 2,
                             on_delivery=lambda error, m: delivered.append(error))
        assert producer.flush(60) == 0 and delivered == [None] * 100  # every replica in the ISR wrote them
        described = json.loads(ok(flotilla(cluster, "topics", "describe", "replicated", "--json")))
        assert [sorted(p["isr"]) for p in described["partitions"]] == [[1, 2, 3]] * 2
        assert idp.tokens >= 2  # the followers' fetchers took tokens (at least two nodes follow a leader)
    finally:
        cluster.stop()
        idp.close()
