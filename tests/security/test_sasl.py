"""SASL mechanisms and the per-connection session, sans-IO (RFC 4616 PLAIN, RFC 5802 SCRAM, KIP-152)."""

import base64

import pytest
import scramp

from partitions.errors import ErrorCode
from security.sasl import (
    PLAIN,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    AuthenticationFailed,
    SaslExchange,
    ScramMechanism,
    scram_credential,
)
from net.client.acls import new_scram_upsert
from security.session import ANONYMOUS_PRINCIPAL, Session


def credentials(password="alice-secret", mechanism=ScramMechanism.SCRAM_SHA_512):
    salt, salted = new_scram_upsert(mechanism, password, 4096)
    stored = {("alice", mechanism): scram_credential(mechanism, salt, salted, 4096)}
    return lambda user, m: stored.get((user, m))


def scram(mechanism, user, password, lookup):
    exchange = SaslExchange(mechanism, {}, lookup)
    client = scramp.ScramClient([mechanism], user, password)
    client.set_server_first(exchange.step(client.get_client_first().encode()).decode())
    client.set_server_final(exchange.step(client.get_client_final().encode()).decode())  # checks ServerSignature
    return exchange


@pytest.mark.parametrize("mechanism, wire", [(SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_256),
                                             (SCRAM_SHA_512, ScramMechanism.SCRAM_SHA_512)])
def test_scram_authenticates_against_salted_credentials(mechanism, wire):
    exchange = scram(mechanism, "alice", "alice-secret", credentials(mechanism=wire))
    assert exchange.principal == "User:alice"


@pytest.mark.parametrize("user, password", [("alice", "wrong"), ("mallory", "alice-secret")])
def test_scram_refuses_a_wrong_password_and_an_unknown_user(user, password):
    with pytest.raises(AuthenticationFailed) as info:
        scram(SCRAM_SHA_512, user, password, credentials())
    assert "invalid credentials" in str(info.value) and "secret" not in str(info.value)


def test_scram_accepts_librdkafkas_final_nonce_as_kafka_does():
    # librdkafka sends r=<client nonce><server-first nonce>; Kafka's ScramSaslServer checks endsWith.
    lookup = credentials()
    exchange = SaslExchange(SCRAM_SHA_512, {}, lookup)
    client = scramp.ScramClient([SCRAM_SHA_512], "alice", "alice-secret", c_nonce="clientnonce")
    server_first = exchange.step(client.get_client_first().encode()).decode()
    client.set_server_first(server_first)
    final = client.get_client_final()
    nonce = server_first.split(",")[0][2:]
    duplicated = final.replace(f"r={nonce}", f"r=clientnonce{nonce}")
    # The proof covers the message as sent: recompute it over the duplicated nonce.
    import hashlib
    import hmac
    attributes = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac("sha512", b"alice-secret", base64.b64decode(attributes["s"]), 4096)
    without_proof = duplicated.rsplit(",p=", 1)[0]
    auth = f"n=alice,r=clientnonce,{server_first},{without_proof}".encode()
    client_key = hmac.new(salted, b"Client Key", "sha512").digest()
    signature = hmac.new(hashlib.sha512(client_key).digest(), auth, "sha512").digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    exchange.step(f"{without_proof},p={proof}".encode())
    assert exchange.principal == "User:alice"


@pytest.mark.parametrize("message", [b"n,,n=alice", b"\xff\xfe", b"x" * 70_000, b"garbage"])
def test_scram_refuses_malformed_first_messages(message):
    with pytest.raises(AuthenticationFailed):
        SaslExchange(SCRAM_SHA_512, {}, credentials()).step(message)


@pytest.mark.parametrize("message, ok", [
    (b"\x00admin\x00admin-secret", True), (b"admin\x00admin\x00admin-secret", True),
    (b"\x00admin\x00wrong", False), (b"\x00nobody\x00admin-secret", False), (b"other\x00admin\x00admin-secret", False),
    (b"\x00admin", False), (b"\xff\x00admin\x00admin-secret", False),
])
def test_plain_checks_the_users_of_the_config_file(message, ok):
    exchange = SaslExchange(PLAIN, {"admin": "admin-secret"}, credentials())
    if ok:
        assert exchange.step(message) == b"" and exchange.principal == "User:admin"
    else:
        with pytest.raises(AuthenticationFailed):
            exchange.step(message)


def test_a_sasl_listener_session_starts_unauthenticated_and_a_plain_one_does_not():
    assert not Session.open("SASL_SSL", "SASL_SSL", "127.0.0.1", None).authenticated
    plaintext = Session.open("PLAINTEXT", "PLAINTEXT", "127.0.0.1", None)
    assert plaintext.authenticated and plaintext.principal == ANONYMOUS_PRINCIPAL
    ssl = Session.open("SSL", "SSL", "127.0.0.1", "CN=client")
    assert ssl.authenticated and ssl.principal == "User:CN=client"


def test_session_handshake_then_authenticate_in_that_order():
    session = Session.open("SASL_PLAINTEXT", "SASL_PLAINTEXT", "h", None)
    early = session.sasl_authenticate(b"\x00admin\x00admin-secret", {"admin": "admin-secret"}, credentials())
    assert early.error_code == ErrorCode.ILLEGAL_SASL_STATE and early.close
    unknown = Session.open("SASL_PLAINTEXT", "SASL_PLAINTEXT", "h", None).sasl_handshake("GSSAPI", (PLAIN,))
    assert unknown.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM and unknown.close
    assert session.sasl_handshake(PLAIN, (PLAIN,)).error_code == ErrorCode.NONE
    failed = Session.open("SASL_PLAINTEXT", "SASL_PLAINTEXT", "h", None)
    failed.sasl_handshake(PLAIN, (PLAIN,))
    answer = failed.sasl_authenticate(b"\x00admin\x00nope", {"admin": "admin-secret"}, credentials())
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and answer.close and not failed.authenticated
    answer = session.sasl_authenticate(b"\x00admin\x00admin-secret", {"admin": "admin-secret"}, credentials())
    assert answer.error_code == ErrorCode.NONE and session.authenticated and session.principal == "User:admin"
    assert session.sasl_handshake(PLAIN, (PLAIN,)).error_code == ErrorCode.ILLEGAL_SASL_STATE


PLAIN_USERS = {"admin": "admin-secret", "bob": "bob-secret"}


def authenticated(max_reauth_ms: int, now_ms: int = 1000) -> Session:
    session = Session.open("SASL_PLAINTEXT", "SASL_PLAINTEXT", "h", None)
    session.sasl_handshake(PLAIN, (PLAIN, SCRAM_SHA_512))
    answer = session.sasl_authenticate(b"\x00admin\x00admin-secret", PLAIN_USERS, credentials(), now_ms, max_reauth_ms)
    assert answer.completed and answer.session_lifetime_ms == max_reauth_ms
    return session


def test_a_session_with_a_lifetime_expires_unless_it_reauthenticates():
    session = authenticated(5000)
    assert session.expires_at_ms == 6000 and not session.expired(5999) and session.expired(6000)
    assert session.begin_reauthentication(3000)
    assert session.in_exchange and session.authenticated and session.principal == "User:admin"
    assert session.sasl_handshake(PLAIN, (PLAIN,)).error_code == ErrorCode.NONE
    again = session.sasl_authenticate(b"\x00admin\x00admin-secret", PLAIN_USERS, credentials(), 3500, 5000)
    assert again.completed and again.session_lifetime_ms == 5000
    assert session.expires_at_ms == 8500 and not session.in_exchange and not session.expired(6000)
    assert not session.begin_reauthentication(3999)  # at most one start a second
    assert session.begin_reauthentication(4000)
    assert not session.begin_reauthentication(6000)  # already re-authenticating


def test_without_a_lifetime_there_is_no_reauthentication():
    session = authenticated(0)
    assert session.expires_at_ms is None and not session.expired(10**12)
    assert not session.begin_reauthentication(10**12)


def test_a_reauthentication_may_change_neither_principal_nor_mechanism():
    session = authenticated(5000)
    assert session.begin_reauthentication(2000)
    session.sasl_handshake(PLAIN, (PLAIN,))
    answer = session.sasl_authenticate(b"\x00bob\x00bob-secret", PLAIN_USERS, credentials(), 2100, 5000)
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and answer.close and not answer.completed
    assert answer.error_message == "Cannot change principals during re-authentication from User:admin: User:bob"
    assert session.principal == "User:admin"
    other = authenticated(5000)
    assert other.begin_reauthentication(2000)
    assert other.sasl_handshake(SCRAM_SHA_512, (PLAIN, SCRAM_SHA_512)).error_code == ErrorCode.NONE
    refused = other.sasl_authenticate(b"n,,n=alice,r=abc", PLAIN_USERS, credentials(), 2100, 5000)
    assert refused.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and refused.close
    assert refused.error_message == ("SASL mechanism 'SCRAM-SHA-512' requested by client is not supported for "
                                     "re-authentication of mechanism 'PLAIN'")
    wrong = authenticated(5000)
    assert wrong.begin_reauthentication(2000)
    wrong.sasl_handshake(PLAIN, (PLAIN,))
    failed = wrong.sasl_authenticate(b"\x00admin\x00nope", PLAIN_USERS, credentials(), 2100, 5000)
    assert failed.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and failed.close
