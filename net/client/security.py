"""Client-side security: TLS and SASL settings in Kafka's client property names, and the SASL exchange.

`ClientSecurity.from_properties` reads what Kafka's tools read from `--command-config` (security.protocol,
sasl.mechanism, sasl.username / sasl.password, ssl.ca.location or ssl.truststore-free `ssl.cafile`,
ssl.certificate.location / ssl.key.location for a client certificate, ssl.endpoint.identification.algorithm),
so one file serves kcat, confluent-kafka and the `flotilla` command. For OAUTHBEARER, one of:
- librdkafka's OIDC client-credentials flow (KIP-768): `sasl.oauthbearer.method=oidc` with
  `sasl.oauthbearer.token.endpoint.url`, `sasl.oauthbearer.client.id`, `sasl.oauthbearer.client.secret`,
  optionally `sasl.oauthbearer.scope` and `https.ca.location` (the provider's CA). The token is fetched with
  HTTP Basic credentials (`grant_type=client_credentials`, RFC 6749 section 4.4) and used until 80% of its
  `expires_in`, as librdkafka refreshes it;
- librdkafka's `enable.sasl.oauthbearer.unsecure.jwt=true` with `sasl.oauthbearer.config=principal=NAME
  [lifeSeconds=N] [scope=S]` (an unsigned token, for development clusters);
- `sasl.oauthbearer.token.file` (Flotilla's own: a file holding a signed JWT, read at each authentication so
  that whatever renews it can rewrite it).
`sasl_authenticate(call, security)` runs SaslHandshake v1 and SaslAuthenticate (KIP-152) over any connection
through `call(api_key, request, api_version)`: PLAIN in one message, SCRAM in two (RFC 5802, the `scramp`
library's client), OAUTHBEARER in one (RFC 7628; a refused token is acknowledged with ^A, then fails). It returns the
session lifetime the broker announced (KIP-368; 0 when sessions do not expire), before which the connection
runs the same exchange again (net/client/transport.py).
"""

from __future__ import annotations

import random
import ssl
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import scramp

from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode, KafkaError
from security.oauthbearer import OAUTHBEARER, SEPARATOR, client_first, unsecured_token
from security.sasl import MECHANISMS, PLAIN

CLIENT_MECHANISMS = MECHANISMS + (OAUTHBEARER,)

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
    oauthbearer_token_file: str | None = None  # OAUTHBEARER: a file holding the token
    oauthbearer_unsecured: dict[str, str] | None = None  # OAUTHBEARER: sasl.oauthbearer.config, for unsigned ones
    oauthbearer_oidc: "OidcClientCredentials | None" = None  # OAUTHBEARER: a token from the provider

    async def oauthbearer_token(self) -> str:
        """The token to authenticate with now. Raises ValueError when there is none to give."""
        if self.oauthbearer_oidc is not None:
            return await self.oauthbearer_oidc.token()
        if self.oauthbearer_token_file is not None:
            try:
                with open(self.oauthbearer_token_file) as token_file:
                    return token_file.read().strip()
            except OSError as error:
                raise ValueError(f"{self.oauthbearer_token_file}: cannot read the token: {error.strerror}") from None
        assert self.oauthbearer_unsecured is not None, "from_properties checks that one way is given"
        config = self.oauthbearer_unsecured
        return unsecured_token(config["principal"], int(time.time() * 1000), int(config.get("lifeSeconds", 3600)),
                               config.get("scope", ""))

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
        if protocol.startswith("SASL") and mechanism not in CLIENT_MECHANISMS:
            raise ValueError(f"{source}: sasl.mechanism must be one of {list(CLIENT_MECHANISMS)}, got {mechanism!r}")
        token_file, unsecured, oidc = None, None, None
        if protocol.startswith("SASL") and mechanism == OAUTHBEARER:
            token_file, unsecured, oidc = _oauthbearer_properties(properties, source)
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
            oauthbearer_token_file=token_file,
            oauthbearer_unsecured=unsecured,
            oauthbearer_oidc=oidc,
        )


def _oauthbearer_properties(properties: dict[str, str], source: str) -> tuple[
        str | None, dict[str, str] | None, "OidcClientCredentials | None"]:
    """(the token file, the unsecured token's sasl.oauthbearer.config, or the OIDC provider's client). Raises
    ValueError naming the property."""
    token_file = properties.get("sasl.oauthbearer.token.file")
    unsecure = properties.get("enable.sasl.oauthbearer.unsecure.jwt", "false").lower() == "true"
    oidc = properties.get("sasl.oauthbearer.method", "default").lower() == "oidc"
    if (token_file is not None) + unsecure + oidc != 1:
        raise ValueError(f"{source}: sasl.mechanism=OAUTHBEARER needs one of sasl.oauthbearer.method=oidc (with "
                         f"sasl.oauthbearer.token.endpoint.url, .client.id and .client.secret), "
                         f"sasl.oauthbearer.token.file (a file holding the token) or "
                         f"enable.sasl.oauthbearer.unsecure.jwt=true with sasl.oauthbearer.config=principal=NAME")
    if oidc:
        missing = [key for key in ("sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.client.id",
                                   "sasl.oauthbearer.client.secret") if not properties.get(key)]
        if missing:
            raise ValueError(f"{source}: sasl.oauthbearer.method=oidc needs {', '.join(missing)}")
        url = properties["sasl.oauthbearer.token.endpoint.url"]
        if not url.startswith(("https://", "http://")):
            raise ValueError(f"{source}: sasl.oauthbearer.token.endpoint.url must be an http(s) URL, got {url!r}")
        return None, None, OidcClientCredentials(url, properties["sasl.oauthbearer.client.id"],
                                                 properties["sasl.oauthbearer.client.secret"],
                                                 properties.get("sasl.oauthbearer.scope", ""),
                                                 properties.get("https.ca.location"))
    if token_file is not None:
        return token_file, None, None
    config = dict(item.partition("=")[::2] for item in properties.get("sasl.oauthbearer.config", "").split())
    if not config.get("principal"):
        raise ValueError(f"{source}: sasl.oauthbearer.config must name the principal (principal=NAME) of the "
                         f"unsecured token")
    if not config.get("lifeSeconds", "3600").isdigit():
        raise ValueError(f"{source}: sasl.oauthbearer.config: lifeSeconds must be a number of seconds")
    return None, config, None


TOKEN_REFRESH_SHARE = 0.8  # of a fetched token's expires_in: librdkafka's refresh point
TOKEN_RESPONSE_BYTES_MAX = 1 << 20


class OidcClientCredentials:
    """A token from an OIDC provider's token endpoint by the client-credentials grant, kept until
    TOKEN_REFRESH_SHARE of its lifetime (see the module docstring)."""

    def __init__(self, url: str, client_id: str, client_secret: str, scope: str, cafile: str | None) -> None:
        self.url, self.client_id, self.client_secret, self.scope, self.cafile = url, client_id, client_secret, scope, cafile
        self._token: str | None = None
        self._refresh_at = 0.0  # time.monotonic()

    async def token(self) -> str:
        """The current token, fetched again when due. Raises ValueError saying why none could be had."""
        if self._token is None or time.monotonic() >= self._refresh_at:
            self._token, expires_in = await self._fetch()
            self._refresh_at = time.monotonic() + expires_in * TOKEN_REFRESH_SHARE
        return self._token

    async def _fetch(self) -> tuple[str, float]:
        import httpx

        form = {"grant_type": "client_credentials", **({"scope": self.scope} if self.scope else {})}
        verify: Any = ssl.create_default_context(cafile=self.cafile) if self.url.startswith("https://") else True
        try:
            async with httpx.AsyncClient(verify=verify, timeout=30) as client:
                response = await client.post(self.url, data=form, auth=(self.client_id, self.client_secret),
                                             headers={"Accept": "application/json"})
        except httpx.HTTPError as error:
            raise ValueError(f"{self.url}: the token endpoint did not answer: {error}") from None
        if response.status_code != 200:
            raise ValueError(f"{self.url}: the token endpoint answered HTTP {response.status_code}: "
                             f"{response.text[:200]}")
        if len(response.content) > TOKEN_RESPONSE_BYTES_MAX:
            raise ValueError(f"{self.url}: the token endpoint's answer is over {TOKEN_RESPONSE_BYTES_MAX} bytes")
        try:
            body = response.json()
            token, expires_in = body["access_token"], float(body.get("expires_in", 3600))
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"{self.url}: the token endpoint's answer has no access_token") from None
        if not isinstance(token, str) or not token:
            raise ValueError(f"{self.url}: the token endpoint's access_token is not a string")
        return token, expires_in


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
    if security.sasl_mechanism == OAUTHBEARER:
        try:
            token = await security.oauthbearer_token()
        except ValueError as error:
            raise KafkaError(str(error), ErrorCode.SASL_AUTHENTICATION_FAILED) from None
        answer = await _step(call, client_first(token))
        if answer.auth_bytes:  # the server's error (RFC 7628): acknowledge it, and the authentication fails
            refusal = bytes(answer.auth_bytes).decode(errors="replace")
            try:
                await _step(call, SEPARATOR)
            except KafkaError:
                pass  # the failure the acknowledgement brings: the same error
            raise KafkaError(f"the broker refused the token: {refusal}", ErrorCode.SASL_AUTHENTICATION_FAILED)
        return answer.session_lifetime_ms
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
