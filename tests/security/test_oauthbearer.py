"""SASL/OAUTHBEARER, sans-IO: RFC 7628's client message, signed tokens against a JWKS and unsecured ones, the
exchange's error round, the session's lifetime from the token, the config keys and a rotated JWKS file."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os

import jwt
import pytest
from hypothesis import given
from hypothesis import settings as settings_hypothesis
from hypothesis import strategies as st
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from broker.config import ConfigError, parse_config
from net.jwks_endpoint import JwksFile
from partitions.errors import ErrorCode
from security.oauthbearer import (
    InvalidClientMessage,
    InvalidToken,
    OAuthBearerSettings,
    client_first,
    error_message,
    load_jwks,
    parse_client_first,
    unsecured_token,
    validate_token,
)
from security.sasl import AuthenticationFailed, SaslExchange
from security.session import Session, session_lifetime_ms

NOW_MS = 1_790_000_000_000
NOW_S = NOW_MS // 1000


class Issuer:
    """A token issuer: a key pair, its public JWK, and tokens signed with it."""

    def __init__(self, kid: str = "k1", kind: str = "RSA") -> None:
        self.kid = kid
        if kind == "RSA":
            self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            self.algorithm = "RS256"
            jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.private.public_key()))
        else:
            self.private = ec.generate_private_key(ec.SECP256R1())
            self.algorithm = "ES256"
            jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(self.private.public_key()))
        self.jwk = {**jwk, "kid": kid, "use": "sig"}

    def token(self, sub: str = "alice", life_s: int = 300, headers: dict | None = None, **claims) -> str:
        payload = {"sub": sub, "iat": NOW_S, "exp": NOW_S + life_s, "iss": "https://idp.test", "aud": "kafka",
                   **claims}
        payload = {key: value for key, value in payload.items() if value is not None}
        return jwt.encode(payload, self.private, algorithm=self.algorithm, headers={"kid": self.kid, **(headers or {})})


@pytest.fixture(scope="module")
def issuer() -> Issuer:
    return Issuer()


def _b64(value: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def settings(*issuers: Issuer, **overrides) -> OAuthBearerSettings:
    values = {"jwks": load_jwks({"keys": [i.jwk for i in issuers]}), "expected_audience": ("kafka",),
              "expected_issuer": "https://idp.test", **overrides}
    return OAuthBearerSettings(**values)


# ------------------------------------------------------------------------------------------ the client's message


def test_the_client_first_message_as_librdkafka_and_kafka_send_it():
    message = b"n,a=alice,\x01auth=Bearer abc.def.ghi\x01traceId=42\x01\x01"
    first = parse_client_first(message)
    assert (first.authorization_id, first.token, first.extensions) == ("alice", "abc.def.ghi", {"traceId": "42"})
    assert parse_client_first(client_first("t.o.k")).token == "t.o.k"
    assert parse_client_first(client_first("t.o.k", "a,b=c")).authorization_id == "a,b=c"  # escaped and back


@pytest.mark.parametrize("message", [
    b"", b"n,,\x01\x01", b"y,,\x01auth=Bearer t\x01\x01", b"n,,\x01auth=Bearer t\x01",  # no auth; GS2; one ^A
    b"n,,\x01auth=Basic dXNlcjpwYXNz\x01\x01", b"n,,\x01auth=Bearer a b\x01\x01",  # not a bearer token
    b"n,,\x01auth=Bearer t\x01bad key=1\x01\x01", "n,,\x01auth=Bearer é\x01\x01".encode(),
])
def test_malformed_client_messages_are_refused(message):
    with pytest.raises(InvalidClientMessage):
        parse_client_first(message)


# ------------------------------------------------------------------------------------------------- signed tokens


def test_a_signed_token_names_its_subject_until_it_expires(issuer):
    validated = validate_token(issuer.token(life_s=300), settings(issuer), NOW_MS)
    assert (validated.principal_name, validated.expires_at_ms) == ("alice", (NOW_S + 300) * 1000)
    other = Issuer("k2", "EC")
    assert validate_token(other.token(sub="bob"), settings(issuer, other), NOW_MS).principal_name == "bob"
    assert validate_token(issuer.token(sub=None, client_id="svc"), settings(issuer, sub_claim_name="client_id"),
                          NOW_MS).principal_name == "svc"
    assert validate_token(issuer.token(aud=["other", "kafka"]), settings(issuer), NOW_MS).principal_name == "alice"


def test_a_token_is_refused_for_each_of_kafkas_reasons(issuer):
    stranger = Issuer("k1")  # same key id, another key
    # The classic confusion: an HS256 token whose secret is the issuer's public key (RS256 verifiers that take
    # the algorithm from the token accept it)
    public_pem = issuer.private.public_key().public_bytes(serialization.Encoding.PEM,
                                                          serialization.PublicFormat.SubjectPublicKeyInfo)
    signing_input = _b64({"alg": "HS256", "kid": "k1"}) + "." + _b64(
        {"sub": "alice", "iat": NOW_S, "exp": NOW_S + 60, "aud": "kafka", "iss": "https://idp.test"})
    hmac_token = signing_input + "." + base64.urlsafe_b64encode(
        hmac.new(public_pem, signing_input.encode(), hashlib.sha256).digest()).rstrip(b"=").decode()
    cases = {
        "signed by another key": stranger.token(),
        "expired beyond the skew": issuer.token(life_s=-31),
        "not valid yet": issuer.token(nbf=NOW_S + 60),
        "without iat": issuer.token(iat=None),
        "without exp": issuer.token(exp=None),
        "without sub": issuer.token(sub=None),
        "another issuer": issuer.token(iss="https://evil.test"),
        "another audience": issuer.token(aud="billing"),
        "an unknown key id": issuer.token(headers={"kid": "k9"}),
        "unsecured": unsecured_token("alice", NOW_MS),
        "HMAC over the public key": hmac_token,
        "not a JWT": "abc",
    }
    for case, token in cases.items():
        with pytest.raises(InvalidToken):
            validate_token(token, settings(issuer), NOW_MS)
            pytest.fail(f"accepted a token {case}")
    assert validate_token(issuer.token(life_s=-29), settings(issuer), NOW_MS)  # within the 30 s skew


def test_a_jwks_holds_public_signing_keys_only(issuer):
    private_jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(issuer.private))
    for document, complaint in (({"keys": []}, "non-empty"), ({"keys": [{**private_jwk, "kid": "p"}]}, "private key"),
                                ({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}, "public key of type"),
                                ({"keys": [{**issuer.jwk, "alg": "HS256"}]}, "not one of a RSA key")):
        with pytest.raises(ValueError, match=complaint):
            load_jwks(document)


# ---------------------------------------------------------------------------------------------- unsecured tokens


def test_unsecured_tokens_as_librdkafka_makes_them():
    unsecured = OAuthBearerSettings(unsecured=True)
    token = unsecured_token("alice", NOW_MS, life_s=60, scope="read write")
    assert validate_token(token, unsecured, NOW_MS).expires_at_ms == NOW_MS + 60_000
    with pytest.raises(InvalidToken, match="expired"):
        validate_token(token, unsecured, NOW_MS + 91_000)
    with pytest.raises(InvalidToken, match="future"):
        validate_token(unsecured_token("alice", NOW_MS + 60_000), unsecured, NOW_MS)
    with pytest.raises(InvalidToken, match="empty signature"):
        validate_token(Issuer().token(), unsecured, NOW_MS)  # a signed token is not an unsecured one
    header_none = _b64({"alg": "RS256"}) + "." + unsecured_token("alice", NOW_MS).split(".", 1)[1]
    with pytest.raises(InvalidToken, match="'none'"):
        validate_token(header_none, unsecured, NOW_MS)


# ------------------------------------------------------------------------------------------------- the exchange


def test_a_refused_token_is_answered_with_rfc_7628s_error_then_fails_at_the_clients_acknowledgement(issuer):
    exchange = SaslExchange("OAUTHBEARER", {}, lambda user, mechanism: None, settings(issuer))
    assert exchange.step(client_first(issuer.token(life_s=-100)), NOW_MS) == error_message() == \
        b'{"status":"invalid_token"}'
    assert exchange.principal is None and "expired" in exchange.failure_detail
    with pytest.raises(AuthenticationFailed, match="invalid_token"):
        exchange.step(b"\x01", NOW_MS)


def test_a_good_token_authenticates_its_subject_and_an_authorization_id_must_match_it(issuer):
    exchange = SaslExchange("OAUTHBEARER", {}, lambda user, mechanism: None, settings(issuer))
    assert exchange.step(client_first(issuer.token(), "alice"), NOW_MS) == b""
    assert exchange.principal == "User:alice" and exchange.credential_expires_at_ms == NOW_MS + 300_000
    exchange = SaslExchange("OAUTHBEARER", {}, lambda user, mechanism: None, settings(issuer))
    with pytest.raises(AuthenticationFailed, match="authorization id"):
        exchange.step(client_first(issuer.token(), "admin"), NOW_MS)


def test_the_session_lasts_the_tokens_remaining_lifetime_capped_by_max_reauth(issuer):
    assert session_lifetime_ms(NOW_MS, 0, None) is None
    assert session_lifetime_ms(NOW_MS, 5000, None) == 5000
    assert session_lifetime_ms(NOW_MS, 0, NOW_MS + 60_000) == 60_000
    assert session_lifetime_ms(NOW_MS, 5000, NOW_MS + 60_000) == 5000
    assert session_lifetime_ms(NOW_MS, 0, NOW_MS - 10) == 0
    session = Session.open("SASL_PLAINTEXT", "SASL_PLAINTEXT", "10.0.0.1", None)
    assert session.sasl_handshake("OAUTHBEARER", ("PLAIN", "OAUTHBEARER")).error_code == ErrorCode.NONE
    answer = session.sasl_authenticate(client_first(issuer.token(life_s=120)), {}, lambda u, m: None, NOW_MS, 0,
                                       settings(issuer))
    assert answer.completed and answer.session_lifetime_ms == 120_000 and session.principal == "User:alice"
    assert session.expires_at_ms == NOW_MS + 120_000  # so it re-authenticates (KIP-368) with a fresh token
    assert session.begin_reauthentication(NOW_MS + 100_000)
    session.sasl_handshake("OAUTHBEARER", ("OAUTHBEARER",))
    again = session.sasl_authenticate(client_first(issuer.token(sub="bob")), {}, lambda u, m: None, NOW_MS + 100_000,
                                      0, settings(issuer))
    assert again.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and "principals" in again.error_message


# --------------------------------------------------------------------------------------------- config and files


def _config(tmp_path, **security):
    document = {"cluster_id": "c", "nodes": [{"id": 1, "host": "127.0.0.1", "kafka_port": 9092,
                                              "controller_port": 9192, "roles": ["broker", "controller"],
                                              "data_dir": "d"}], "security": security}
    return parse_config(document, "cluster.toml", str(tmp_path))


def test_the_config_takes_a_jwks_file_or_unsecured_tokens(tmp_path, issuer):
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [issuer.jwk]}))
    config = _config(tmp_path, sasl_enabled_mechanisms=["OAUTHBEARER", "PLAIN"], sasl_oauthbearer_jwks_file="jwks.json",
                     sasl_oauthbearer_expected_audience=["kafka"])
    assert config.security.sasl_oauthbearer_jwks_file == str(tmp_path / "jwks.json")
    assert _config(tmp_path, sasl_enabled_mechanisms=["OAUTHBEARER"], sasl_oauthbearer_unsecured=True).security.oauthbearer(
        None).unsecured
    by_url = _config(tmp_path, sasl_enabled_mechanisms=["OAUTHBEARER"],
                     sasl_oauthbearer_jwks_endpoint_url=f"file://{tmp_path}/jwks.json").security
    assert by_url.sasl_oauthbearer_jwks_file == str(tmp_path / "jwks.json") and not by_url.sasl_oauthbearer_jwks_endpoint_url
    endpoint = _config(tmp_path, sasl_enabled_mechanisms=["OAUTHBEARER"], sasl_oauthbearer_jwks_endpoint_cafile="ca.pem",
                       sasl_oauthbearer_jwks_endpoint_url="https://idp.test/jwks").security
    assert endpoint.sasl_oauthbearer_jwks_endpoint_cafile == str(tmp_path / "ca.pem")
    assert endpoint.sasl_oauthbearer_jwks_endpoint_refresh_ms == 3_600_000


@pytest.mark.parametrize("security, complaint", [
    ({"sasl_enabled_mechanisms": ["OAUTHBEARER"]}, "key 'security.sasl_enabled_mechanisms' lists OAUTHBEARER: set "
                                                   "one of 'security.sasl_oauthbearer_jwks_file'"),
    ({"sasl_enabled_mechanisms": ["OAUTHBEARER"], "sasl_oauthbearer_unsecured": True,
      "sasl_oauthbearer_jwks_file": "jwks.json"}, ", not sasl_oauthbearer_jwks_file and sasl_oauthbearer_unsecured"),
    ({"sasl_enabled_mechanisms": ["OAUTHBEARER"], "sasl_oauthbearer_jwks_endpoint_url": "http://idp/jwks"},
     "key 'security.sasl_oauthbearer_jwks_endpoint_url' must be an https:// or file: URL"),
    ({"sasl_enabled_mechanisms": ["OAUTHBEARER"], "sasl_oauthbearer_jwks_endpoint_url": "https://idp/jwks",
      "sasl_oauthbearer_jwks_endpoint_refresh_ms": 10}, "'security.sasl_oauthbearer_jwks_endpoint_refresh_ms' must"),
    ({"sasl_enabled_mechanisms": ["OAUTHBEARER"], "sasl_oauthbearer_jwks_endpoint_url": "https://idp/jwks",
      "sasl_oauthbearer_jwks_file": "jwks.json"}, ", not sasl_oauthbearer_jwks_file and "
                                                  "sasl_oauthbearer_jwks_endpoint_url"),
    ({"sasl_oauthbearer_unsecured": True}, "key 'security.sasl_oauthbearer_unsecured' is set but OAUTHBEARER is not"),
    ({"sasl_enabled_mechanisms": ["OAUTHBEARER"], "sasl_oauthbearer_jwks_file": "missing.json"},
     "key 'security.sasl_oauthbearer_jwks_file': {tmp}/missing.json: No such file"),
    ({"sasl_enabled_mechanisms": ["OAUTHBEARER"], "sasl_oauthbearer_jwks_file": "bad.json"},
     "key 'security.sasl_oauthbearer_jwks_file': {tmp}/bad.json: not JSON"),
    ({"sasl_enabled_mechanisms": ["OAUTHBEARER"], "sasl_oauthbearer_unsecured": True,
      "sasl_oauthbearer_clock_skew_seconds": -1}, "key 'security.sasl_oauthbearer_clock_skew_seconds' must be"),
    ({"sasl_enabled_mechanisms": ["OAUTHBEARER"], "sasl_oauthbearer_unsecured": True,
      "inter_broker": {"sasl_mechanism": "GSSAPI"}}, "key 'security.inter_broker.sasl_mechanism' must be one of"),
    ({"sasl_enabled_mechanisms": ["OAUTHBEARER"], "sasl_oauthbearer_unsecured": True,
      "inter_broker": {"sasl_mechanism": "OAUTHBEARER"}},
     "key 'security.inter_broker.sasl_mechanism' is \"OAUTHBEARER\": give one way to a token"),
    ({"sasl_enabled_mechanisms": ["OAUTHBEARER"], "sasl_oauthbearer_unsecured": True,
      "inter_broker": {"sasl_mechanism": "OAUTHBEARER", "oauthbearer_token_file": "t.jwt",
                       "oauthbearer_unsecured_principal": "broker"}}, "(got oauthbearer_token_file, oauthbearer_unsec"),
    ({"sasl_enabled_mechanisms": ["OAUTHBEARER"], "sasl_oauthbearer_unsecured": True,
      "inter_broker": {"sasl_mechanism": "OAUTHBEARER", "oauthbearer_token_endpoint_url": "https://idp/token",
                       "oauthbearer_client_id": "broker"}},
     "key 'security.inter_broker.oauthbearer_client_secret' is needed with the token endpoint"),
    ({"sasl_enabled_mechanisms": ["OAUTHBEARER"], "sasl_oauthbearer_unsecured": True,
      "inter_broker": {"sasl_mechanism": "OAUTHBEARER", "oauthbearer_token_endpoint_url": "idp/token",
                       "oauthbearer_client_id": "broker", "oauthbearer_client_secret": "s"}},
     "key 'security.inter_broker.oauthbearer_token_endpoint_url' must be an http(s) URL"),
    ({"sasl_enabled_mechanisms": ["OAUTHBEARER"], "sasl_oauthbearer_unsecured": True,
      "inter_broker": {"sasl_mechanism": "OAUTHBEARER", "oauthbearer_token_file": "t.jwt", "oauthbearer_scope": "k"}},
     "key 'security.inter_broker.oauthbearer_scope' is for the token endpoint"),
    ({"inter_broker": {"sasl_mechanism": "PLAIN", "username": "a", "password": "b", "oauthbearer_token_file": "t"}},
     "key 'security.inter_broker.oauthbearer_token_file' is for sasl_mechanism = \"OAUTHBEARER\""),
])
def test_bad_oauthbearer_settings_name_the_key(tmp_path, security, complaint):
    (tmp_path / "bad.json").write_text("{keys")
    with pytest.raises(ConfigError) as raised:
        _config(tmp_path, **security)
    assert str(raised.value).startswith("cluster.toml: key ") and complaint.format(tmp=tmp_path) in str(raised.value), \
        raised.value


def test_a_rotated_jwks_file_is_read_again_and_a_broken_copy_keeps_the_keys_before(tmp_path, issuer):
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [issuer.jwk]}))
    clock = [0.0]
    jwks = JwksFile(str(path), clock_s=lambda: clock[0])
    rotated = Issuer("k2")
    token = rotated.token()
    path.write_text(json.dumps({"keys": [issuer.jwk, rotated.jwk]}))
    os.utime(path, ns=(1, 10**18))  # a new stamp whatever the file system's time resolution
    assert len(jwks.current().keys) == 1  # read at most once a second
    clock[0] = 1.5
    assert validate_token(token, settings(issuer, jwks=jwks.current()), NOW_MS).principal_name == "alice"
    path.write_text("{not json")
    os.utime(path, ns=(1, 2 * 10**18))
    clock[0] = 3.0
    assert len(jwks.current().keys) == 2 and "not JSON" in jwks.last_error


# ------------------------------------------------------------------------------------------------ hostile input

_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                     lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children,
                                                                                          max_size=4), max_leaves=20)


def _part(value) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


@settings_hypothesis(max_examples=300, deadline=None)
@given(message=st.binary(max_size=600) | st.builds(
    lambda header, claims, signature: client_first(f"{_part(header)}.{_part(claims)}.{signature}"),
    _JSON, _JSON, st.sampled_from(["", "c2ln", "!!"])), unsecured_mode=st.booleans())
def test_any_client_message_is_answered_or_refused_never_raised(issuer, message, unsecured_mode):
    mode = OAuthBearerSettings(unsecured=True) if unsecured_mode else settings(issuer)
    exchange = SaslExchange("OAUTHBEARER", {}, lambda user, mechanism: None, mode)
    try:
        answer = exchange.step(message, NOW_MS)
    except AuthenticationFailed:
        return
    assert answer == error_message() and exchange.principal is None or answer == b"" and exchange.principal


def test_json_nested_thousands_deep_is_refused_not_raised():
    deep = base64.urlsafe_b64encode(b"[" * 20000 + b"]" * 20000).rstrip(b"=").decode()
    with pytest.raises(InvalidToken, match="not base64url JSON"):
        validate_token(f"e30.{deep}.", OAuthBearerSettings(unsecured=True), NOW_MS)


def test_the_inter_broker_table_takes_the_three_ways_to_a_token(tmp_path):
    """[security.inter_broker] with OAUTHBEARER: the token endpoint (client credentials; its CA relative to the
    file), a token file (relative to the file) or an unsigned token's principal."""
    endpoint = _config(tmp_path, sasl_enabled_mechanisms=["OAUTHBEARER"], sasl_oauthbearer_unsecured=True,
                       inter_broker={"sasl_mechanism": "OAUTHBEARER",
                                     "oauthbearer_token_endpoint_url": "https://idp/token",
                                     "oauthbearer_client_id": "broker", "oauthbearer_client_secret": "s",
                                     "oauthbearer_scope": "kafka", "oauthbearer_ca_file": "idp-ca.pem"})
    credentials = endpoint.security.inter_broker
    assert credentials.oauthbearer_ca_file == str(tmp_path / "idp-ca.pem")
    token_file = _config(tmp_path, sasl_enabled_mechanisms=["OAUTHBEARER"], sasl_oauthbearer_unsecured=True,
                         inter_broker={"sasl_mechanism": "OAUTHBEARER", "oauthbearer_token_file": "broker.jwt"})
    assert token_file.security.inter_broker.oauthbearer_token_file == str(tmp_path / "broker.jwt")
    unsecured = _config(tmp_path, sasl_enabled_mechanisms=["OAUTHBEARER"], sasl_oauthbearer_unsecured=True,
                        inter_broker={"sasl_mechanism": "OAUTHBEARER", "oauthbearer_unsecured_principal": "broker"})
    assert unsecured.security.inter_broker.oauthbearer_unsecured_principal == "broker"
