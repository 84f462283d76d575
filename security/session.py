"""A connection's security session: who the client is, and the SASL handshake that establishes it (sans-IO).

Theory of operation: the edge opens a `Session` per connection with the listener's security protocol, the
client's address and, on TLS, the verified client certificate's subject. On PLAINTEXT and SSL listeners the
session is authenticated at once (principal `User:ANONYMOUS`, or `User:<subject DN>` for a client
certificate, as Kafka's default principal builder). On SASL_PLAINTEXT and SASL_SSL listeners it is not:
until `authenticated`, only ApiVersions, SaslHandshake (v1) and SaslAuthenticate may be served, in that
order (KIP-152: handshake, then authenticate frames carrying the mechanism's messages). `sasl_handshake`
and `sasl_authenticate` return what to answer and whether the connection must close after the answer.

Re-authentication (KIP-368): with `connections_max_reauth_ms` > 0 a completed authentication gives the
session a lifetime, sent to the client as SaslAuthenticate's `session_lifetime_ms`, and `expires_at_ms`.
Before it passes the client sends SaslHandshake again on the same connection; `begin_reauthentication`
(at most once a second, as Kafka) puts the session back into the exchange while it keeps its principal, and
until the exchange completes only SaslAuthenticate is served. It must use the same mechanism and end with
the same principal (Kafka's SaslServerAuthenticator); a failure closes the connection, and so does any
other request once the session has expired (broker/sasl_gate.py checks `expired`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from partitions.errors import ErrorCode
from security.oauthbearer import OAuthBearerSettings
from security.sasl import AuthenticationFailed, SaslExchange, ScramCredential, ScramMechanism

ANONYMOUS_PRINCIPAL = "User:ANONYMOUS"
REAUTH_INTERVAL_MIN_MS = 1000  # Kafka: a connection re-authenticates at most once a second


@dataclass
class SaslAnswer:
    error_code: ErrorCode
    error_message: str | None = None
    auth_bytes: bytes = b""
    close: bool = False  # answer, then close the connection (after the failed-authentication delay)
    completed: bool = False  # this answer ends a successful (re-)authentication
    session_lifetime_ms: int = 0  # KIP-368: re-authenticate within this (0: never needed)


@dataclass
class Session:
    listener_name: str
    security_protocol: str
    host: str  # the client's address, as ACL hosts name it ("127.0.0.1")
    principal: str = ANONYMOUS_PRINCIPAL
    authenticated: bool = True
    mechanism: str | None = None
    failure_detail: str = ""  # the mechanism's reason for a failed authentication (logged, never sent)
    raw_tokens: bool = False  # after a SaslHandshake v0: the next frames are bare SASL tokens
    throttled_until_ms: int = 0  # a client quota's throttle (broker/quotas.py): nothing is read before then
    expires_at_ms: int | None = None  # KIP-368: no request but a re-authentication is served from then on
    reauthenticating: bool = False  # authenticated, and in a re-authentication's exchange
    _previous_mechanism: str | None = field(default=None, repr=False)  # of the session being re-authenticated
    _reauth_started_ms: int | None = field(default=None, repr=False)
    _bad_mechanism: str | None = field(default=None, repr=False)  # the failure the next SaslAuthenticate gets
    _exchange: SaslExchange | None = field(default=None, repr=False)
    bug_principal_may_change: bool = field(default=False, repr=False)  # planted (broker/sasl_gate.py)
    bug_token_expiry_ignored: bool = field(default=False, repr=False)  # planted (broker/sasl_gate.py)

    @classmethod
    def open(cls, listener_name: str, security_protocol: str, host: str, certificate_subject: str | None) -> "Session":
        uses_sasl = security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")
        principal = f"User:{certificate_subject}" if certificate_subject and not uses_sasl else ANONYMOUS_PRINCIPAL
        return cls(listener_name, security_protocol, host, principal, authenticated=not uses_sasl)

    @property
    def in_exchange(self) -> bool:
        """Only the SASL exchange is served: before the first authentication, and during a re-authentication."""
        return not self.authenticated or self.reauthenticating

    def expired(self, now_ms: int) -> bool:
        return self.expires_at_ms is not None and now_ms >= self.expires_at_ms

    def begin_reauthentication(self, now_ms: int) -> bool:
        """A SaslHandshake arrived on an authenticated connection: start a re-authentication if the session
        has a lifetime and the last one started at least a second ago (otherwise the handshake is an
        ordinary request, answered ILLEGAL_SASL_STATE, as Kafka does)."""
        if self.expires_at_ms is None or self.reauthenticating or self.mechanism is None:
            return False
        if self._reauth_started_ms is not None and now_ms - self._reauth_started_ms < REAUTH_INTERVAL_MIN_MS:
            return False
        self._reauth_started_ms = now_ms
        self._previous_mechanism, self.mechanism = self.mechanism, None
        self._bad_mechanism = None
        self.reauthenticating = True
        return True

    def sasl_handshake(self, mechanism: str, enabled: tuple[str, ...]) -> SaslAnswer:
        if not self.in_exchange or self.mechanism is not None:
            return SaslAnswer(ErrorCode.ILLEGAL_SASL_STATE, "Unexpected SaslHandshake request", close=True)
        if mechanism not in enabled:
            return SaslAnswer(ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                              f"Unsupported SASL mechanism {mechanism}", close=True)
        if self.reauthenticating and mechanism != self._previous_mechanism:
            # Kafka answers the handshake and fails the exchange's first SaslAuthenticate
            self._bad_mechanism = (f"SASL mechanism '{mechanism}' requested by client is not supported for "
                                   f"re-authentication of mechanism '{self._previous_mechanism}'")
        self.mechanism = mechanism
        return SaslAnswer(ErrorCode.NONE)

    def sasl_authenticate(self, auth_bytes: bytes, plain_users: dict[str, str],
                          scram_lookup: Callable[[str, ScramMechanism], ScramCredential | None],
                          now_ms: int = 0, max_reauth_ms: int = 0,
                          oauthbearer: OAuthBearerSettings | None = None) -> SaslAnswer:
        """One SaslAuthenticate of the exchange (`now_ms`: milliseconds since the epoch). When the exchange
        completes, the session's lifetime is `max_reauth_ms` (the listener's connections_max_reauth_ms, 0 =
        off), or the credential's remaining lifetime (an OAUTHBEARER token's) if that is shorter, as Kafka's
        SaslServerAuthenticator computes it."""
        if not self.in_exchange or self.mechanism is None:
            return SaslAnswer(ErrorCode.ILLEGAL_SASL_STATE, "Unexpected SaslAuthenticate request", close=True)
        if self._bad_mechanism is not None:
            self.failure_detail = self._bad_mechanism
            return SaslAnswer(ErrorCode.SASL_AUTHENTICATION_FAILED, self._bad_mechanism, close=True)
        if self._exchange is None:
            self._exchange = SaslExchange(self.mechanism, plain_users, scram_lookup, oauthbearer)
        try:
            answer = self._exchange.step(auth_bytes, now_ms)
        except AuthenticationFailed as error:
            self.failure_detail = self._exchange.failure_detail
            message = str(error)
            if self.reauthenticating:
                message = message.replace("during authentication", "during re-authentication")
            return SaslAnswer(ErrorCode.SASL_AUTHENTICATION_FAILED, message, close=True)
        principal = self._exchange.principal
        if principal is None:
            return SaslAnswer(ErrorCode.NONE, None, answer)
        credential_expires_at_ms = None if self.bug_token_expiry_ignored else self._exchange.credential_expires_at_ms
        self._exchange = None
        if self.reauthenticating and principal != self.principal and not self.bug_principal_may_change:
            message = f"Cannot change principals during re-authentication from {self.principal}: {principal}"
            self.failure_detail = message
            return SaslAnswer(ErrorCode.SASL_AUTHENTICATION_FAILED, message, close=True)
        self.principal = principal
        self.authenticated = True
        self.reauthenticating = False
        lifetime_ms = session_lifetime_ms(now_ms, max_reauth_ms, credential_expires_at_ms)
        self.expires_at_ms = None if lifetime_ms is None else now_ms + lifetime_ms
        return SaslAnswer(ErrorCode.NONE, None, answer, completed=True, session_lifetime_ms=lifetime_ms or 0)


def session_lifetime_ms(now_ms: int, max_reauth_ms: int, credential_expires_at_ms: int | None) -> int | None:
    """Kafka's calcCompletionTimesAndReturnSessionLifetimeMs: the shorter of connections_max_reauth_ms (when
    set) and the credential's remaining lifetime (when it has one), never negative; None: the session does not
    expire."""
    remaining = None if credential_expires_at_ms is None else max(0, credential_expires_at_ms - now_ms)
    if max_reauth_ms <= 0:
        return remaining
    return max_reauth_ms if remaining is None else min(remaining, max_reauth_ms)


# The session of requests that reach the broker without a connection (tests, the simulator): an anonymous,
# authenticated PLAINTEXT client.
def anonymous_session() -> Session:
    return Session("PLAINTEXT", "PLAINTEXT", "", ANONYMOUS_PRINCIPAL, authenticated=True)
