"""A connection's security session: who the client is, and the SASL handshake that establishes it (sans-IO).

Theory of operation: the edge opens a `Session` per connection with the listener's security protocol, the
client's address and, on TLS, the verified client certificate's subject. On PLAINTEXT and SSL listeners the
session is authenticated at once (principal `User:ANONYMOUS`, or `User:<subject DN>` for a client
certificate, as Kafka's default principal builder). On SASL_PLAINTEXT and SASL_SSL listeners it is not:
until `authenticated`, only ApiVersions, SaslHandshake (v1) and SaslAuthenticate may be served, in that
order (KIP-152: handshake, then authenticate frames carrying the mechanism's messages). `sasl_handshake`
and `sasl_authenticate` return what to answer and whether the connection must close after the answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from partitions.errors import ErrorCode
from security.sasl import AuthenticationFailed, SaslExchange, ScramCredential, ScramMechanism

ANONYMOUS_PRINCIPAL = "User:ANONYMOUS"


@dataclass
class SaslAnswer:
    error_code: ErrorCode
    error_message: str | None = None
    auth_bytes: bytes = b""
    close: bool = False  # answer, then close the connection (after the failed-authentication delay)


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
    _exchange: SaslExchange | None = field(default=None, repr=False)

    @classmethod
    def open(cls, listener_name: str, security_protocol: str, host: str, certificate_subject: str | None) -> "Session":
        uses_sasl = security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")
        principal = f"User:{certificate_subject}" if certificate_subject and not uses_sasl else ANONYMOUS_PRINCIPAL
        return cls(listener_name, security_protocol, host, principal, authenticated=not uses_sasl)

    def sasl_handshake(self, mechanism: str, enabled: tuple[str, ...]) -> SaslAnswer:
        if self.authenticated or self.mechanism is not None:
            return SaslAnswer(ErrorCode.ILLEGAL_SASL_STATE, "Unexpected SaslHandshake request", close=True)
        if mechanism not in enabled:
            return SaslAnswer(ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                              f"Unsupported SASL mechanism {mechanism}", close=True)
        self.mechanism = mechanism
        return SaslAnswer(ErrorCode.NONE)

    def sasl_authenticate(self, auth_bytes: bytes, plain_users: dict[str, str],
                          scram_lookup: Callable[[str, ScramMechanism], ScramCredential | None]) -> SaslAnswer:
        if self.authenticated or self.mechanism is None:
            return SaslAnswer(ErrorCode.ILLEGAL_SASL_STATE, "Unexpected SaslAuthenticate request", close=True)
        if self._exchange is None:
            self._exchange = SaslExchange(self.mechanism, plain_users, scram_lookup)
        try:
            answer = self._exchange.step(auth_bytes)
        except AuthenticationFailed as error:
            self.failure_detail = self._exchange.failure_detail
            return SaslAnswer(ErrorCode.SASL_AUTHENTICATION_FAILED, str(error), close=True)
        if self._exchange.principal is not None:
            self.principal = self._exchange.principal
            self.authenticated = True
            self._exchange = None
        return SaslAnswer(ErrorCode.NONE, None, answer)


# The session of requests that reach the broker without a connection (tests, the simulator): an anonymous,
# authenticated PLAINTEXT client.
def anonymous_session() -> Session:
    return Session("PLAINTEXT", "PLAINTEXT", "", ANONYMOUS_PRINCIPAL, authenticated=True)
