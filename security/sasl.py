"""SASL server mechanisms (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER) and SCRAM credentials, sans-IO.

Theory of operation: a `SaslExchange` is one authentication on one connection: the dispatcher feeds it the
client's SaslAuthenticate bytes (`step`) and sends back what it returns, until `principal` is set (success)
or `step` raises `AuthenticationFailed` (the connection answers SASL_AUTHENTICATION_FAILED and closes).
- PLAIN (RFC 4616: `authzid NUL authcid NUL password`) checks a password from the node's config file: for
  development, as Kafka's PlainLoginModule with users in the JAAS file;
- SCRAM (RFC 5802, through the `scramp` library) checks against credentials stored in the metadata log as
  Kafka stores them: salt, StoredKey, ServerKey and iteration count, never the password;
- OAUTHBEARER (RFC 7628, KIP-255) checks a JWT (security/oauthbearer.py); a token that fails is answered with
  RFC 7628's JSON error, and the authentication fails at the client's next message (a lone ^A), as Kafka's
  OAuthBearerSaslServer does. `credential_expires_at_ms` is the token's expiry, which bounds the session.
`scram_credential` turns what AlterUserScramCredentials carries (salt, SaltedPassword, iterations) into the
stored form, and `salted_password` computes SaltedPassword on the client side (net/client/acls.py draws the
salt).
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
from dataclasses import dataclass
from typing import Callable

import scramp

from security.oauthbearer import (
    OAUTHBEARER,
    SEPARATOR,
    InvalidClientMessage,
    InvalidToken,
    OAuthBearerSettings,
    error_message,
    parse_client_first,
    validate_token,
)

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)  # the ones clients of this package speak, and the default
SERVER_MECHANISMS = MECHANISMS + (OAUTHBEARER,)  # OAUTHBEARER when a node's config says how tokens are checked
SCRAM_ITERATIONS_MIN = 4096  # Kafka's ScramMechanism.minIterations
SCRAM_ITERATIONS_MAX = 16384  # Kafka's ScramMechanism.maxIterations
SCRAM_ITERATIONS_DEFAULT = 8192
SCRAM_SALT_BYTES = 32
SASL_MESSAGE_BYTES_MAX = 64 * 1024  # far above any real PLAIN or SCRAM message
CHANNEL_BINDING_NONE = ("biws", "eSws")  # base64 of the GS2 headers "n,," and "y,,"


class ScramMechanism(enum.IntEnum):
    """Kafka's ScramMechanism wire values (DescribeUserScramCredentials, AlterUserScramCredentials)."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        return {1: SCRAM_SHA_256, 2: SCRAM_SHA_512}[int(self)]

    @property
    def hash_name(self) -> str:
        return {1: "sha256", 2: "sha512"}[int(self)]


SCRAM_BY_NAME = {SCRAM_SHA_256: ScramMechanism.SCRAM_SHA_256, SCRAM_SHA_512: ScramMechanism.SCRAM_SHA_512}


class AuthenticationFailed(Exception):
    """The client failed to authenticate; the message is safe to send back (it names no secret)."""


@dataclass(frozen=True)
class ScramCredential:
    """Kafka's ScramCredential: what the server stores for one user and mechanism."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's SaltedPassword := Hi(Normalize(password), salt, i) (the client side of a credential upsert)."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)


def scram_credential(mechanism: ScramMechanism, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    """The stored form of a SaltedPassword (RFC 5802: StoredKey = H(HMAC(SaltedPassword, "Client Key")),
    ServerKey = HMAC(SaltedPassword, "Server Key"))."""
    client_key = hmac.new(salted, b"Client Key", mechanism.hash_name).digest()
    stored_key = hashlib.new(mechanism.hash_name, client_key).digest()
    server_key = hmac.new(salted, b"Server Key", mechanism.hash_name).digest()
    return ScramCredential(salt, stored_key, server_key, iterations)


class SaslExchange:
    """One SASL authentication (see the module docstring)."""

    def __init__(self, mechanism: str, plain_users: dict[str, str],
                 scram_lookup: Callable[[str, ScramMechanism], ScramCredential | None],
                 oauthbearer: OAuthBearerSettings | None = None) -> None:
        assert mechanism in SERVER_MECHANISMS, mechanism
        self.mechanism = mechanism
        self.principal: str | None = None
        self.credential_expires_at_ms: int | None = None  # OAUTHBEARER: the token's expiry
        self._oauthbearer = oauthbearer
        self._token_error: bytes | None = None  # OAUTHBEARER: the error answered, awaiting the client's ^A
        self._plain_users = plain_users
        self._scram_lookup = scram_lookup
        self._scram: scramp.core.ScramServer | None = None
        self._user = ""
        self._credential: ScramCredential | None = None
        self.failure_detail = ""  # why an exchange failed, for the server's log only (never sent)

    def step(self, client_bytes: bytes, now_ms: int = 0) -> bytes:
        """The server's answer to the client's next message (`now_ms`: milliseconds since the epoch, which
        tokens are checked against). Raises AuthenticationFailed."""
        assert self.principal is None, "the exchange is complete"
        if len(client_bytes) > SASL_MESSAGE_BYTES_MAX:
            raise AuthenticationFailed("SASL message too large")
        if self.mechanism == PLAIN:
            return self._plain(client_bytes)
        if self.mechanism == OAUTHBEARER:
            return self._oauthbearer_step(client_bytes, now_ms)
        return self._scram_step(client_bytes)

    def _oauthbearer_step(self, client_bytes: bytes, now_ms: int) -> bytes:
        if self._token_error is not None:
            if client_bytes == SEPARATOR:  # the client took the error in: the authentication fails with it
                raise AuthenticationFailed(self._token_error.decode())
            self._token_error = None  # (Kafka's server forgets the error and reads a new first message)
        settings = self._oauthbearer
        if settings is None:
            raise AuthenticationFailed("Authentication failed: OAUTHBEARER tokens are not configured")
        try:
            first = parse_client_first(client_bytes)
        except InvalidClientMessage as error:
            self.failure_detail = f"invalid OAUTHBEARER client first message: {error}"
            raise AuthenticationFailed("Authentication failed during authentication due to invalid credentials "
                                       "with SASL mechanism OAUTHBEARER") from None
        try:
            token = validate_token(first.token, settings, now_ms)
        except InvalidToken as error:
            self.failure_detail = str(error)
            self._token_error = error_message()
            return self._token_error
        if first.authorization_id and first.authorization_id != token.principal_name:
            raise AuthenticationFailed(f"Authentication failed: Client requested an authorization id "
                                       f"({first.authorization_id}) that is different from the token's principal "
                                       f"name ({token.principal_name})")
        self.principal = f"User:{token.principal_name}"
        self.credential_expires_at_ms = token.expires_at_ms
        return b""

    def _plain(self, client_bytes: bytes) -> bytes:
        parts = client_bytes.split(b"\x00")
        if len(parts) != 3:
            raise AuthenticationFailed("Authentication failed: invalid SASL/PLAIN message")
        try:
            authzid, user, password = (part.decode() for part in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("Authentication failed: invalid SASL/PLAIN message") from None
        if authzid and authzid != user:
            raise AuthenticationFailed("Authentication failed: the authorization id must match the user")
        expected = self._plain_users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        self.principal = f"User:{user}"
        return b""

    def _scram_step(self, client_bytes: bytes) -> bytes:
        try:
            text = client_bytes.decode()
        except UnicodeDecodeError:
            raise AuthenticationFailed("Authentication failed: invalid SCRAM message") from None
        mechanism = SCRAM_BY_NAME[self.mechanism]
        failed = AuthenticationFailed(f"Authentication failed during authentication due to invalid credentials with "
                                      f"SASL mechanism {mechanism.mechanism_name}")
        try:
            if self._scram is None:
                self._scram = scramp.ScramMechanism(self.mechanism).make_server(self._auth_info)
                self._scram.set_client_first(text)
                return self._scram.get_server_first().encode()
        except scramp.ScramException as error:
            self.failure_detail = str(error)
            raise failed from None
        try:
            final = self._client_final(text, mechanism)
        except ValueError as error:
            self.failure_detail = str(error)
            raise failed from None
        self.principal = f"User:{self._user}"
        return final.encode()

    def _client_final(self, text: str, mechanism: ScramMechanism) -> str:
        """Check the client-final-message's proof; the server-final-message. Raises ValueError.

        Done here rather than in scramp because Kafka accepts a final nonce that only *ends with* the
        server-first nonce (librdkafka sends the client nonce followed by the whole server nonce), where
        RFC 5802 and scramp require equality; the proof is over the message as the client sent it.
        """
        without_proof, separator, proof_b64 = text.rpartition(",p=")
        attributes = dict(part.split("=", 1) for part in without_proof.split(",") if "=" in part) if separator else {}
        server = self._scram
        if not separator or attributes.get("c") not in CHANNEL_BINDING_NONE:
            raise ValueError("malformed client-final-message or channel binding requested")
        if not attributes.get("r", "").endswith(str(server.nonce)):
            raise ValueError("the final nonce does not end with the server nonce")
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except (ValueError, binascii.Error):
            raise ValueError("the proof is not base64") from None
        auth_message = f"{server.client_first_bare},{server.server_first},{without_proof}".encode()
        signature = hmac.new(self._credential.stored_key, auth_message, mechanism.hash_name).digest()
        if len(proof) != len(signature):
            raise ValueError("the proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(mechanism.hash_name, client_key).digest(), self._credential.stored_key):
            raise ValueError("the proof does not match the stored key")
        server_signature = hmac.new(self._credential.server_key, auth_message, mechanism.hash_name).digest()
        return "v=" + base64.b64encode(server_signature).decode()

    def _auth_info(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        credential = self._scram_lookup(username, SCRAM_BY_NAME[self.mechanism])
        if credential is None:
            raise scramp.ScramException("unknown user")
        self._user = username
        self._credential = credential
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations
