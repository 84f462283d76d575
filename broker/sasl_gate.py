"""The SASL gate of a Kafka connection's frames, sans-IO: the first authentication, re-authentication and
expired sessions (KIP-152, KIP-368).

Theory of operation: the edge (net/dispatcher.py on real nodes, simulations/node_process.py in the simulator)
hands each frame of a connection to `SaslGate.screen(session, frame, now_ms)` before anything else when
`needs_screening(session)`. It returns None for a frame to serve as an ordinary request, or a `SaslOutcome`:
the answer's bytes, whether the connection then closes (and after how long), and what to log.

- Before a SASL session has authenticated only ApiVersions, SaslHandshake (v0: the next frames are bare
  tokens, answered as length-framed tokens) and SaslAuthenticate are served; anything else closes the
  connection unanswered. A failed authentication is answered SASL_AUTHENTICATION_FAILED and the connection
  closes after `connection_failed_authentication_delay_ms`.
- With `connections_max_reauth_ms` the session has a lifetime (security/session.py). A SaslHandshake on an
  authenticated connection then starts a re-authentication, served like the first exchange except that only
  SaslAuthenticate may follow it. Any other request once the session has expired closes the connection
  unanswered, as Kafka's SocketServer does (the handshake check comes first, so a late re-authentication is
  still served).

Planted bugs for the simulator (simulations/sasl_sim.py), never configured: `bug_expired_sessions_served`
(the expiry is never checked, so a client that stops re-authenticating keeps being served as the principal it
once was), `bug_principal_may_change` (a re-authentication may end with another principal) and
`bug_token_expiry_ignored` (an OAUTHBEARER session lasts connections_max_reauth_ms even when its token expires
sooner, so a connection is served on an expired token).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker.admin_api import peek_api_key
from net.protocol import messages
from net.protocol.codec import (
    ApiKey,
    UnsupportedRequestVersionError,
    decode_request,
    encode_api_versions_fallback,
    encode_response,
)
from partitions.errors import ErrorCode, KafkaError
from security.oauthbearer import OAuthBearerSettings
from security.sasl import ScramCredential, ScramMechanism
from security.session import SaslAnswer, Session

if TYPE_CHECKING:
    from broker.apis import KafkaApis

_PRE_AUTH_APIS = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
_REAUTH_APIS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
_RAW_LENGTH = struct.Struct(">i")


@dataclass
class SaslOutcome:
    """What to do with a frame the gate kept: send `reply` (b"": nothing), then close the connection after
    `close_delay_ms` unless that is None; log `event` with `fields`."""

    reply: bytes
    close_delay_ms: int | None = None
    event: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)


def needs_screening(session: Session) -> bool:
    """Whether the connection's frames go through the gate: during an exchange, or when the session expires."""
    return session.in_exchange or session.expires_at_ms is not None


class SaslGate:
    """The SASL side of the connections of one broker (see the module docstring). `security` is the node's
    broker.security_config.SecuritySettings."""

    def __init__(self, apis: "KafkaApis", security: Any) -> None:
        self.apis = apis
        self.security = security
        # OAUTHBEARER's keys: a source with current() (and unknown_key()) the node sets, net/jwks_endpoint.py
        self.jwks_source: Any = None
        self.bug_expired_sessions_served = False
        self.bug_principal_may_change = False
        self.bug_token_expiry_ignored = False

    def screen(self, session: Session, frame: Any, now_ms: int) -> SaslOutcome | None:
        if not session.in_exchange:
            api_key = peek_api_key(frame)
            if api_key == ApiKey.SASL_HANDSHAKE and session.begin_reauthentication(now_ms):
                return self._exchange(session, frame, now_ms)
            if session.expired(now_ms) and not self.bug_expired_sessions_served:
                self.apis.broker.metrics.record_expired_session()
                return SaslOutcome(b"", 0, "session_expired", {"principal": session.principal, "api_key": api_key})
            return None
        if session.raw_tokens:
            return self._raw_token(session, bytes(frame), now_ms)
        return self._exchange(session, frame, now_ms)

    def _exchange(self, session: Session, frame: Any, now_ms: int) -> SaslOutcome:
        """ApiVersions, SaslHandshake and SaslAuthenticate (KIP-152); during a re-authentication only the
        handshake that began it and SaslAuthenticate."""
        try:
            header, request = decode_request(frame)
        except UnsupportedRequestVersionError as error:
            if error.header.api_key == ApiKey.API_VERSIONS and not session.reauthenticating:
                return SaslOutcome(encode_api_versions_fallback(error.header, self.apis.supported_apis))
            return SaslOutcome(b"", 0, "unsupported_request_during_authentication",
                               {"api_key": error.header.api_key, "api_version": error.header.api_version})
        except KafkaError as error:
            return SaslOutcome(b"", 0, "malformed_request", {"error": error.message})
        allowed = _REAUTH_APIS if session.reauthenticating else _PRE_AUTH_APIS
        if header.api_key not in allowed:
            event = "request_during_reauthentication" if session.reauthenticating else "request_before_authentication"
            return SaslOutcome(b"", 0, event, {"api_key": header.api_key})
        if header.api_key == ApiKey.API_VERSIONS:
            return SaslOutcome(encode_response(header, self.apis.handle(header, request, now_ms)))
        reauthenticating = session.reauthenticating
        if header.api_key == ApiKey.SASL_HANDSHAKE:
            answer = session.sasl_handshake(request.mechanism, self.security.sasl_enabled_mechanisms)
            session.raw_tokens = header.api_version == 0 and answer.error_code == ErrorCode.NONE
            response = messages.SaslHandshakeResponse(error_code=answer.error_code,
                                                      mechanisms=list(self.security.sasl_enabled_mechanisms))
        else:
            answer = self._step(session, bytes(request.auth_bytes), now_ms)
            response = messages.SaslAuthenticateResponse(
                error_code=answer.error_code, error_message=answer.error_message, auth_bytes=answer.auth_bytes,
                session_lifetime_ms=answer.session_lifetime_ms)
        return self._outcome(session, answer, reauthenticating, encode_response(header, response))

    def _raw_token(self, session: Session, token: bytes, now_ms: int) -> SaslOutcome:
        reauthenticating = session.reauthenticating
        answer = self._step(session, token, now_ms)
        if answer.completed:
            session.raw_tokens = False
        reply = b"" if answer.close else _RAW_LENGTH.pack(len(answer.auth_bytes)) + answer.auth_bytes
        return self._outcome(session, answer, reauthenticating, reply)

    def _step(self, session: Session, auth_bytes: bytes, now_ms: int) -> SaslAnswer:
        session.bug_principal_may_change = self.bug_principal_may_change
        session.bug_token_expiry_ignored = self.bug_token_expiry_ignored
        return session.sasl_authenticate(auth_bytes, self.security.plain_users, self._scram_lookup, now_ms,
                                         self.security.connections_max_reauth_ms, self.oauthbearer)

    def _outcome(self, session: Session, answer: SaslAnswer, reauthenticating: bool, reply: bytes) -> SaslOutcome:
        """Count the end of an exchange; a failure is answered, then the connection closes after the
        failed-authentication delay."""
        kind = "reauthentication" if reauthenticating else "authentication"
        metrics = self.apis.broker.metrics
        if answer.completed:
            metrics.record_authentication(kind, True)
            return SaslOutcome(reply, None, "reauthenticated" if reauthenticating else "authenticated",
                               {"principal": session.principal, "mechanism": session.mechanism,
                                "session_lifetime_ms": answer.session_lifetime_ms})
        if not answer.close:
            return SaslOutcome(reply)
        fields = {"error": answer.error_message, "detail": session.failure_detail, "client": session.host}
        if answer.error_code != ErrorCode.SASL_AUTHENTICATION_FAILED:
            return SaslOutcome(reply, 0, f"{kind}_failed", fields)
        metrics.record_authentication(kind, False)
        return SaslOutcome(reply, self.security.connection_failed_authentication_delay_ms, f"{kind}_failed", fields)

    @property
    def oauthbearer(self) -> OAuthBearerSettings | None:
        """How OAUTHBEARER tokens are checked now (None: the mechanism is not enabled)."""
        oauthbearer = getattr(self.security, "oauthbearer", None)
        if oauthbearer is None:
            return None
        source = self.jwks_source
        if source is None:
            return oauthbearer(None)
        return oauthbearer(source.current(), getattr(source, "unknown_key", None))

    def _scram_lookup(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        record = self.apis.broker.image.scram.credentials.get((user, int(mechanism)))
        if record is None:
            return None
        return ScramCredential(record.salt, record.stored_key, record.server_key, record.iterations)
