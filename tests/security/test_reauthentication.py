"""SASL re-authentication (KIP-368) on a real node with `connections_max_reauth_ms`: librdkafka and Flotilla's
own clients re-authenticate on their long-lived connections and keep working; a connection that does not is
closed at its next request once the session has expired; a re-authentication may change neither the principal
nor the mechanism; a SCRAM user deleted while connected is cut off at the next re-authentication."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time

import pytest
import trio

from cli.local_cluster import LocalCluster
from net.client.aio import KafkaClient
from net.client.security import ClientSecurity
from net.protocol import messages
from net.protocol.codec import ApiKey, RequestHeader, decode_response, encode_request
from tests.net.cluster_helpers import FAST_BROKER_SETTINGS, eventually
from tests.net.test_metrics_endpoint import scrape

pytestmark = [pytest.mark.slow, pytest.mark.external]
LIFETIME_MS = 2000


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    cluster = LocalCluster(str(tmp_path_factory.mktemp("reauth")), nodes=1, secure=True,
                           client_listeners=("SASL_PLAINTEXT",), metrics=True,
                           topic_defaults={"partitions": 1, "replication_factor": 1, "min_insync_replicas": 1},
                           broker={**FAST_BROKER_SETTINGS, "offsets_topic_num_partitions": 1,
                                   "offsets_topic_replication_factor": 1},
                           security={"connections_max_reauth_ms": LIFETIME_MS,
                                     "super_users": '["User:admin", "User:dave", "User:frank"]'})
    cluster.start()
    try:
        for user in ("dave", "erin"):
            eventually(lambda: _flotilla(cluster, "users", "add", user, "--password", f"{user}-secret",
                                         "--mechanism", "SCRAM-SHA-256") is not None, 60, what=f"user {user} added")
        for topic in ("reauth", "frank"):
            _flotilla(cluster, "topics", "create", topic, "--partitions", "1", "--replication-factor", "1")
        yield cluster
    finally:
        cluster.stop()


def _flotilla(cluster: LocalCluster, *args: str) -> str:
    properties = cluster.directory + "/admin.properties"
    with open(properties, "w") as out:
        out.write("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=admin\n"
                  "sasl.password=admin-secret\n")
    result = subprocess.run([sys.executable, "-m", "cli.main", *args, "-b", cluster.bootstrap_servers,
                             "--command-config", properties], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _config(cluster: LocalCluster, user: str, mechanism: str = "SCRAM-SHA-256") -> dict:
    return {"bootstrap.servers": cluster.bootstrap_servers, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": "admin-secret" if user == "admin" else f"{user}-secret"}


def _reauthentications(cluster: LocalCluster, result: str = "success") -> float:
    samples = scrape(cluster, 1).get("flotilla_sasl_authentications_total", {})
    return samples.get((("kind", "reauthentication"), ("result", result)), 0.0)


def _expired_closed(cluster: LocalCluster) -> float:
    return scrape(cluster, 1)["flotilla_expired_sessions_closed_total"][()]


def _delivery_tracker():
    """(error names, [records delivered], the delivery callback that fills both) for a confluent-kafka producer."""
    errors: list[str] = []
    delivered = [0]

    def report(error, message):
        if error is None:
            delivered[0] += 1
        else:
            errors.append(error.name())

    return errors, delivered, report


# A raw client: one connection, requests written by hand.

class Raw:
    def __init__(self, cluster: LocalCluster) -> None:
        self.sock = socket.create_connection(("127.0.0.1", cluster.kafka_ports[1]), timeout=10)
        self.correlation_id = 0

    def call(self, api_key: int, version: int, request) -> object:
        self.correlation_id += 1
        self.sock.sendall(encode_request(RequestHeader(api_key, version, self.correlation_id, "raw"), request))
        size = struct.unpack(">i", self._exactly(4))[0]
        return decode_response(api_key, version, self._exactly(size))[1]

    def authenticate(self, user: str, password: str, mechanism: str = "PLAIN") -> object:
        handshake = self.call(ApiKey.SASL_HANDSHAKE, 1, messages.SaslHandshakeRequest(mechanism=mechanism))
        assert handshake.error_code == 0, handshake
        if mechanism == "PLAIN":
            token = f"\x00{user}\x00{password}".encode()
            return self.call(ApiKey.SASL_AUTHENTICATE, 1, messages.SaslAuthenticateRequest(auth_bytes=token))
        import scramp

        client = scramp.ScramClient([mechanism], user, password)
        first = self.call(ApiKey.SASL_AUTHENTICATE, 1,
                          messages.SaslAuthenticateRequest(auth_bytes=client.get_client_first().encode()))
        if first.error_code:
            return first
        client.set_server_first(bytes(first.auth_bytes).decode())
        return self.call(ApiKey.SASL_AUTHENTICATE, 1,
                         messages.SaslAuthenticateRequest(auth_bytes=client.get_client_final().encode()))

    def metadata(self) -> object:
        return self.call(ApiKey.METADATA, 8, messages.MetadataRequest(topics=None))

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except (ConnectionError, OSError):
            return True

    def _exactly(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError("closed by the broker")
            data += chunk
        return data

    def __enter__(self) -> "Raw":
        return self

    def __exit__(self, *exc_info) -> None:
        self.sock.close()


def test_the_session_lifetime_is_announced_and_an_expired_session_is_closed_at_its_next_request(node):
    expired_before = _expired_closed(node)
    with Raw(node) as raw:
        answer = raw.authenticate("admin", "admin-secret")
        assert answer.error_code == 0 and answer.session_lifetime_ms == LIFETIME_MS
        assert raw.metadata().brokers
        time.sleep(LIFETIME_MS / 1000 + 0.3)
        with pytest.raises(ConnectionError):
            raw.metadata()
    assert _expired_closed(node) == expired_before + 1
    # Re-authenticating in time keeps the connection: the new session has a new lifetime.
    with Raw(node) as raw:
        raw.authenticate("admin", "admin-secret")
        time.sleep(LIFETIME_MS / 1000 * 0.6)
        again = raw.authenticate("admin", "admin-secret")
        assert again.error_code == 0 and again.session_lifetime_ms == LIFETIME_MS
        time.sleep(LIFETIME_MS / 1000 * 0.6)  # past the first session's end, within the second's
        assert raw.metadata().brokers
    assert _expired_closed(node) == expired_before + 1


def test_a_reauthentication_keeps_its_principal_and_its_mechanism(node):
    failures_before = _reauthentications(node, "failure")
    with Raw(node) as raw:
        raw.authenticate("dave", "dave-secret", "SCRAM-SHA-256")
        time.sleep(1.1)  # at most one re-authentication a second
        answer = raw.authenticate("erin", "erin-secret", "SCRAM-SHA-256")
        assert answer.error_code == 58  # SASL_AUTHENTICATION_FAILED
        assert "Cannot change principals during re-authentication from User:dave: User:erin" in answer.error_message
        assert raw.closed()
    with Raw(node) as raw:
        raw.authenticate("admin", "admin-secret", "PLAIN")
        time.sleep(1.1)
        handshake = raw.call(ApiKey.SASL_HANDSHAKE, 1, messages.SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
        assert handshake.error_code == 0  # as Kafka: the handshake passes, its first authenticate fails
        answer = raw.call(ApiKey.SASL_AUTHENTICATE, 1, messages.SaslAuthenticateRequest(auth_bytes=b"n,,n=admin"))
        assert answer.error_code == 58 and "not supported for re-authentication of mechanism 'PLAIN'" in (
            answer.error_message)
        assert raw.closed()
    assert _reauthentications(node, "failure") == failures_before + 2
    # Within a second of the last start, a handshake is an ordinary request: refused, the session goes on.
    with Raw(node) as raw:
        raw.authenticate("admin", "admin-secret")
        time.sleep(1.1)
        assert raw.authenticate("admin", "admin-secret").error_code == 0
        refused = raw.call(ApiKey.SASL_HANDSHAKE, 1, messages.SaslHandshakeRequest(mechanism="PLAIN"))
        assert refused.error_code == 34  # ILLEGAL_SASL_STATE
        assert raw.metadata().brokers
        # During a re-authentication nothing but its SaslAuthenticate is served.
        time.sleep(1.1)
        assert raw.call(ApiKey.SASL_HANDSHAKE, 1, messages.SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
        with pytest.raises(ConnectionError):
            raw.metadata()


def test_librdkafka_producer_and_consumer_reauthenticate_and_keep_working(node):
    from confluent_kafka import Consumer, Producer

    before = _reauthentications(node)
    expired_before = _expired_closed(node)
    errors, delivered, report = _delivery_tracker()
    producer = Producer({**_config(node, "dave"), "acks": "all", "linger.ms": 0,
                         "error_cb": lambda error: errors.append(error.name())})
    consumer = Consumer({**_config(node, "admin", "PLAIN"), "group.id": "reauth", "auto.offset.reset": "earliest",
                         "error_cb": lambda error: errors.append(error.name())})
    consumer.subscribe(["reauth"])
    sent, received = 0, 0
    deadline = time.monotonic() + 3 * LIFETIME_MS / 1000 + 1
    try:
        while time.monotonic() < deadline:
            producer.produce("reauth", value=f"r{sent}".encode(), callback=report)
            sent += 1
            producer.poll(0)
            message = consumer.poll(0.1)
            if message is not None and not message.error():
                received += 1
        assert producer.flush(15) == 0
        end = time.monotonic() + 15
        while received < sent and time.monotonic() < end:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                received += 1
    finally:
        consumer.close()
    assert errors == [] and delivered[0] == sent and received == sent, (errors, delivered, sent, received)
    # Over three lifetimes every connection of both clients re-authenticated at least twice, and none expired.
    assert _reauthentications(node) >= before + 4
    assert _expired_closed(node) == expired_before


def test_flotilla_clients_reauthenticate_on_their_connections(node):
    security = ClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-256", "dave", "dave-secret")

    async def main() -> int:
        async with KafkaClient(node.bootstrap_servers, security=security) as client:
            deadline = trio.current_time() + 2.5 * LIFETIME_MS / 1000
            while trio.current_time() < deadline:
                await client.metadata()
                await trio.sleep(0.1)
            return sum(connection.reauthentications for connection in client._connections.values())

    expired_before = _expired_closed(node)
    assert trio.run(main) >= 2
    assert _expired_closed(node) == expired_before


def test_a_deleted_scram_user_is_cut_off_at_its_next_reauthentication(node):
    from confluent_kafka import Producer

    _flotilla(node, "users", "add", "frank", "--password", "frank-secret", "--mechanism", "SCRAM-SHA-256")
    errors, delivered, report = _delivery_tracker()
    producer = Producer({**_config(node, "frank"), "acks": "all", "linger.ms": 0, "message.timeout.ms": 4000,
                         "error_cb": lambda error: errors.append(error.name())})
    eventually(lambda: producer.produce("frank", b"before", callback=report) or producer.flush(10) == 0
               and delivered[0] >= 1, 30, what="frank's first record")
    assert errors == []
    _flotilla(node, "users", "delete", "frank", "--mechanism", "SCRAM-SHA-256")
    time.sleep(LIFETIME_MS / 1000 + 0.5)  # the session frank opened ends; its re-authentication is refused
    for index in range(5):
        producer.produce("frank", f"after{index}".encode(), callback=report)
    producer.flush(10)
    assert delivered[0] == 1, delivered
    assert "_AUTHENTICATION" in errors, errors


def test_kafka_python_reauthenticates_too(node):
    from kafka import KafkaProducer

    before = _reauthentications(node)
    expired_before = _expired_closed(node)
    producer = KafkaProducer(bootstrap_servers=node.bootstrap_servers, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="dave",
                             sasl_plain_password="dave-secret", acks="all")
    futures = []
    deadline = time.monotonic() + 2.5 * LIFETIME_MS / 1000
    while time.monotonic() < deadline:
        futures.append(producer.send("reauth", b"kafka-python"))
        time.sleep(0.05)
    producer.flush(15)
    producer.close()
    assert all(future.get(timeout=1).offset >= 0 for future in futures)
    assert _reauthentications(node) >= before + 2
    assert _expired_closed(node) == expired_before
