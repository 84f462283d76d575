"""Client-side security: TLS and SASL settings in Kafka's client property names, and the SASL exchange.

`ClientSecurity.from_properties` reads what Kafka's tools read from `--command-config` (security.protocol,
sasl.mechanism, sasl.username / sasl.password, ssl.ca.location or ssl.truststore-free `ssl.cafile`,
ssl.certificate.location / ssl.key.location for a client certificate, ssl.endpoint.identification.algorithm),
so one file serves kcat, confluent-kafka and the `flotilla` command. `sasl_authenticate(call, security)` runs
SaslHandshake v1 and SaslAuthenticate (KIP-152) over any connection through `call(api_key, request,
api_version)`: PLAIN in one message, SCRAM in two (RFC 5802, the `scramp` library's client). It returns the
session lifetime the broker announced (KIP-368; 0 when sessions do not expire), before which the connection
runs the same exchange again (net/client/transport.py).
"""

from __future__ import annotations

import random
import ssl
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import scramp

from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode, KafkaError
from security.sasl import MECHANISMS, PLAIN

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class ClientSecurity:
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = PLAIN
    username: str = ""
    password: str = ""
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    check_hostname: bool = True

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def ssl_context(self) -> ssl.SSLContext | None:
        """A TLS 1.2+ client context trusting `ssl_cafile` (else the system's CAs), or None for plaintext."""
        if not self.uses_tls:
            return None
        context = ssl.create_default_context(cafile=self.ssl_cafile)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.check_hostname = self.check_hostname
        if self.ssl_certfile:
            context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
        return context

    @classmethod
    def from_properties(cls, properties: dict[str, str], source: str = "<properties>") -> "ClientSecurity":
        """From Kafka client properties. Raises ValueError naming `source` and the property."""
        protocol = properties.get("security.protocol", "PLAINTEXT").upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"{source}: security.protocol must be one of {list(SECURITY_PROTOCOLS)}, got {protocol!r}")
        mechanism = properties.get("sasl.mechanism", properties.get("sasl.mechanisms", PLAIN)).upper()
        if protocol.startswith("SASL") and mechanism not in MECHANISMS:
            raise ValueError(f"{source}: sasl.mechanism must be one of {list(MECHANISMS)}, got {mechanism!r}")
        identification = properties.get("ssl.endpoint.identification.algorithm", "https").lower()
        return cls(
            security_protocol=protocol,
            sasl_mechanism=mechanism,
            username=properties.get("sasl.username", ""),
            password=properties.get("sasl.password", ""),
            ssl_cafile=properties.get("ssl.ca.location") or properties.get("ssl.cafile"),
            ssl_certfile=properties.get("ssl.certificate.location") or properties.get("ssl.certfile"),
            ssl_keyfile=properties.get("ssl.key.location") or properties.get("ssl.keyfile"),
            check_hostname=identification not in ("", "none"),
        )


def read_properties(path: str) -> dict[str, str]:
    """A Java-style properties file (key=value, # comments). Raises ValueError naming the file and line."""
    try:
        with open(path) as handle:
            lines = handle.read().splitlines()
    except OSError as error:
        raise ValueError(f"{path}: cannot read the client config: {error.strerror or error}") from None
    properties = {}
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, separator, value = line.partition("=")
        if not separator:
            raise ValueError(f"{path}:{number}: expected key=value, got {line!r}")
        properties[key.strip()] = value.strip()
    return properties


Call = Callable[[int, Any, int], Awaitable[Any]]


REAUTH_SHARE_MIN, REAUTH_SHARE_MAX = 0.85, 0.95  # of a session's lifetime, as Kafka's clients (KIP-368)


def reauthenticate_at(session_lifetime_ms: int, now_s: float) -> float | None:
    """When a connection authenticated at `now_s` (seconds, any clock) re-authenticates: at a random 85-95% of
    the session lifetime the broker announced, as Kafka's clients do; None when the session does not expire."""
    if session_lifetime_ms <= 0:
        return None
    return now_s + session_lifetime_ms / 1000 * random.uniform(REAUTH_SHARE_MIN, REAUTH_SHARE_MAX)


async def sasl_authenticate(call: Call, security: ClientSecurity) -> int:
    """Authenticate the connection behind `call`; returns the session's lifetime in ms (0: unlimited). Raises
    KafkaError (SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE) with the broker's
    message."""
    handshake = await call(ApiKey.SASL_HANDSHAKE, messages.SaslHandshakeRequest(mechanism=security.sasl_mechanism), 1)
    if handshake.error_code != ErrorCode.NONE:
        raise KafkaError(f"SASL mechanism {security.sasl_mechanism} refused (broker offers "
                         f"{', '.join(handshake.mechanisms)})", ErrorCode(handshake.error_code))
    if security.sasl_mechanism == PLAIN:
        return (await _step(call, f"\x00{security.username}\x00{security.password}".encode())).session_lifetime_ms
    client = scramp.ScramClient([security.sasl_mechanism], security.username, security.password)
    server_first = await _step(call, client.get_client_first().encode())
    try:
        client.set_server_first(bytes(server_first.auth_bytes).decode())
        server_final = await _step(call, client.get_client_final().encode())
        client.set_server_final(bytes(server_final.auth_bytes).decode())
    except (scramp.ScramException, UnicodeDecodeError) as error:
        raise KafkaError(f"SCRAM exchange failed: {error}", ErrorCode.SASL_AUTHENTICATION_FAILED) from None
    return server_final.session_lifetime_ms


async def _step(call: Call, auth_bytes: bytes) -> Any:
    response = await call(ApiKey.SASL_AUTHENTICATE, messages.SaslAuthenticateRequest(auth_bytes=auth_bytes), 1)
    if response.error_code != ErrorCode.NONE:
        raise KafkaError(response.error_message or "SASL authentication failed", ErrorCode(response.error_code))
    return response
