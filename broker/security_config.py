"""The `[security]` table and the nodes' `listeners` (Kafka's listener and security settings, in TOML).

Layout (Kafka's names in snake case; every key optional; no `[security]` table = plaintext, no authorizer):

    [[nodes]]
    id = 1
    listeners = ["SASL_SSL://127.0.0.1:9093", "INTERNAL://127.0.0.1:9094"]  # instead of kafka_port
    ...
    [security]
    listener_security_protocol_map = { INTERNAL = "SSL" }   # names other than the four protocols
    inter_broker_listener_name = "INTERNAL"                  # default: each node's first listener
    sasl_enabled_mechanisms = ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]
    ssl_certfile = "certs/node-{id}.pem"                     # {id}: the node id; relative to the file
    ssl_keyfile = "certs/node-{id}.key"
    ssl_cafile = "certs/ca.pem"                              # trusted for client certificates
    ssl_client_auth = "none"                                 # none | requested | required
    authorizer = true                                        # Kafka's StandardAuthorizer on
    super_users = ["User:admin"]
    allow_everyone_if_no_acl_found = false
    connection_failed_authentication_delay_ms = 100
    connections_max_reauth_ms = 0                            # > 0: SASL sessions last this long (KIP-368)
    controller_tls = false                                   # the controller port over mutual TLS too
    sasl_oauthbearer_jwks_file = "oidc/jwks.json"            # OAUTHBEARER: the issuer's public keys (JWKS)
    sasl_oauthbearer_jwks_endpoint_url = "https://idp.example/jwks"   # or fetched from the issuer
    sasl_oauthbearer_jwks_endpoint_refresh_ms = 3600000      # and fetched again this often (and on an unknown kid)
    sasl_oauthbearer_jwks_endpoint_cafile = "idp-ca.pem"     # the endpoint's CA (default: the system's)
    sasl_oauthbearer_unsecured = false                       # OAUTHBEARER: unsigned tokens (development only)
    sasl_oauthbearer_expected_audience = ["kafka"]           # tokens must name one of these in `aud`
    sasl_oauthbearer_expected_issuer = "https://idp.example" # tokens' `iss` must be this
    sasl_oauthbearer_sub_claim_name = "sub"                  # the claim naming the principal
    sasl_oauthbearer_clock_skew_seconds = 30
    [security.plain_users]                                   # SASL/PLAIN users (development)
    admin = "admin-secret"
    [security.inter_broker]                                  # how brokers authenticate to each other
    sasl_mechanism = "PLAIN"
    username = "admin"
    password = "admin-secret"
    # or, with sasl_mechanism = "OAUTHBEARER", one way to a token:
    # oauthbearer_token_endpoint_url = "https://idp.example/token"   # client-credentials grant, with
    # oauthbearer_client_id = "broker"                       # oauthbearer_client_secret, optional
    # oauthbearer_scope and oauthbearer_ca_file (the endpoint's CA); or oauthbearer_token_file = "broker.jwt";
    # or oauthbearer_unsecured_principal = "broker" (unsigned, for nodes with sasl_oauthbearer_unsecured)

Every problem raises ConfigError naming the file and the key (see broker/config.py).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from security.oauthbearer import OAUTHBEARER, KeySet, OAuthBearerSettings, load_jwks
from security.sasl import MECHANISMS, PLAIN, SERVER_MECHANISMS

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
CLIENT_AUTH_MODES = ("none", "requested", "required")
_LISTENER = re.compile(r"^([A-Za-z0-9_]+)://([^:/\s]*):(\d+)$")


class ConfigError(Exception):
    """The config file is unusable; the message names the file and the key (re-exported by broker.config)."""


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int
    security_protocol: str

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


@dataclass(frozen=True)
class InterBrokerCredentials:
    sasl_mechanism: str = PLAIN
    username: str = ""
    password: str = ""
    # OAUTHBEARER (one of three ways): a token from the provider's token endpoint by the client-credentials grant
    # (Kafka's sasl.oauthbearer.token.endpoint.url with clientId and clientSecret), a file holding the token, or
    # an unsigned token naming this principal (development, for nodes that take unsecured tokens)
    oauthbearer_token_endpoint_url: str | None = None
    oauthbearer_client_id: str | None = None
    oauthbearer_client_secret: str | None = None
    oauthbearer_scope: str = ""
    oauthbearer_ca_file: str | None = None  # absolute; the token endpoint's CA (default: the system's)
    oauthbearer_token_file: str | None = None  # absolute
    oauthbearer_unsecured_principal: str | None = None


@dataclass(frozen=True)
class SecuritySettings:
    listener_security_protocol_map: dict[str, str] = field(default_factory=dict)
    inter_broker_listener_name: str | None = None
    sasl_enabled_mechanisms: tuple[str, ...] = MECHANISMS
    ssl_certfile: str | None = None  # absolute, may contain {id}
    ssl_keyfile: str | None = None
    ssl_cafile: str | None = None
    ssl_client_auth: str = "none"
    authorizer: bool = False
    super_users: tuple[str, ...] = ()
    allow_everyone_if_no_acl_found: bool = False
    connection_failed_authentication_delay_ms: int = 100
    connections_max_reauth_ms: int = 0  # KIP-368: a SASL session's lifetime (0: sessions never expire)
    controller_tls: bool = False
    plain_users: dict[str, str] = field(default_factory=dict)
    inter_broker: InterBrokerCredentials = InterBrokerCredentials()
    sasl_oauthbearer_jwks_file: str | None = None  # absolute
    sasl_oauthbearer_jwks_endpoint_url: str | None = None  # https:// (a file: URL is read as jwks_file)
    sasl_oauthbearer_jwks_endpoint_refresh_ms: int = 3_600_000  # Kafka's default: an hour
    sasl_oauthbearer_jwks_endpoint_cafile: str | None = None  # absolute
    sasl_oauthbearer_unsecured: bool = False
    sasl_oauthbearer_expected_audience: tuple[str, ...] = ()
    sasl_oauthbearer_expected_issuer: str | None = None
    sasl_oauthbearer_sub_claim_name: str = "sub"
    sasl_oauthbearer_clock_skew_seconds: int = 30

    def oauthbearer(self, jwks: KeySet | None, on_unknown_key: Any = None) -> OAuthBearerSettings | None:
        """How tokens are checked (with the keys of the JWKS file or endpoint, read by the caller), None without
        OAUTHBEARER."""
        if OAUTHBEARER not in self.sasl_enabled_mechanisms:
            return None
        return OAuthBearerSettings(self.sasl_oauthbearer_unsecured, jwks, self.sasl_oauthbearer_expected_audience,
                                   self.sasl_oauthbearer_expected_issuer, self.sasl_oauthbearer_sub_claim_name,
                                   self.sasl_oauthbearer_clock_skew_seconds, on_unknown_key)

    def protocol_of(self, listener_name: str) -> str | None:
        if listener_name in self.listener_security_protocol_map:
            return self.listener_security_protocol_map[listener_name]
        return listener_name if listener_name in SECURITY_PROTOCOLS else None

    def ssl_files(self, node_id: int) -> tuple[str | None, str | None, str | None]:
        """(certificate, key, CA) paths of one node."""
        def fill(path: str | None) -> str | None:
            return None if path is None else path.replace("{id}", str(node_id))
        return fill(self.ssl_certfile), fill(self.ssl_keyfile), fill(self.ssl_cafile)


_KEYS = {
    "listener_security_protocol_map", "inter_broker_listener_name", "sasl_enabled_mechanisms", "ssl_certfile",
    "ssl_keyfile", "ssl_cafile", "ssl_client_auth", "authorizer", "super_users", "allow_everyone_if_no_acl_found",
    "connection_failed_authentication_delay_ms", "connections_max_reauth_ms", "plain_users", "inter_broker",
    "controller_tls", "sasl_oauthbearer_jwks_file", "sasl_oauthbearer_unsecured", "sasl_oauthbearer_expected_audience",
    "sasl_oauthbearer_expected_issuer", "sasl_oauthbearer_sub_claim_name", "sasl_oauthbearer_clock_skew_seconds",
    "sasl_oauthbearer_jwks_endpoint_url", "sasl_oauthbearer_jwks_endpoint_refresh_ms",
    "sasl_oauthbearer_jwks_endpoint_cafile",
}


def parse_security(document: dict[str, Any], source: str, base_dir: str) -> SecuritySettings:
    raw = document.get("security", {})
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: key 'security' must be a table")
    for key in raw:
        if key not in _KEYS:
            raise ConfigError(f"{source}: unknown key 'security.{key}' (allowed: {', '.join(sorted(_KEYS))})")
    values: dict[str, Any] = {}
    protocol_map = _table(raw, "listener_security_protocol_map", source)
    for name, protocol in protocol_map.items():
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"{source}: key 'security.listener_security_protocol_map.{name}' must be one of "
                              f"{list(SECURITY_PROTOCOLS)}, got {protocol!r}")
    values["listener_security_protocol_map"] = dict(protocol_map)
    for key in ("inter_broker_listener_name", "ssl_certfile", "ssl_keyfile", "ssl_cafile", "ssl_client_auth"):
        if key in raw:
            if not isinstance(raw[key], str) or not raw[key]:
                raise ConfigError(f"{source}: key 'security.{key}' must be a non-empty string, got {raw[key]!r}")
            values[key] = raw[key]
    for key in ("ssl_certfile", "ssl_keyfile", "ssl_cafile"):
        if key in values:
            values[key] = os.path.normpath(os.path.join(base_dir, values[key]))
    if values.get("ssl_client_auth", "none") not in CLIENT_AUTH_MODES:
        raise ConfigError(f"{source}: key 'security.ssl_client_auth' must be one of {list(CLIENT_AUTH_MODES)}")
    mechanisms = _strings(raw, "sasl_enabled_mechanisms", source)
    if mechanisms is not None:
        unknown = [m for m in mechanisms if m not in SERVER_MECHANISMS]
        if unknown or not mechanisms:
            raise ConfigError(f"{source}: key 'security.sasl_enabled_mechanisms' must list some of "
                              f"{list(SERVER_MECHANISMS)}, got {mechanisms!r}")
        values["sasl_enabled_mechanisms"] = tuple(mechanisms)
    super_users = _strings(raw, "super_users", source)
    if super_users is not None:
        bad = [p for p in super_users if ":" not in p]
        if bad:
            raise ConfigError(f"{source}: key 'security.super_users' entries are principals like 'User:admin', got {bad}")
        values["super_users"] = tuple(super_users)
    values.update(_oauthbearer(raw, source, base_dir, values.get("sasl_enabled_mechanisms", MECHANISMS)))
    for key in ("authorizer", "allow_everyone_if_no_acl_found", "controller_tls"):
        if key in raw:
            if not isinstance(raw[key], bool):
                raise ConfigError(f"{source}: key 'security.{key}' must be true or false, got {raw[key]!r}")
            values[key] = raw[key]
    _integer(raw, values, "connection_failed_authentication_delay_ms", source, lambda delay: 0 <= delay <= 60_000,
             "an integer between 0 and 60000")
    # Kafka's is a long; at least a second here, since a connection re-authenticates at most once a second
    _integer(raw, values, "connections_max_reauth_ms", source, lambda reauth: reauth == 0 or 1000 <= reauth <= 2**62,
             "0 (off) or an integer of at least 1000")
    users = _table(raw, "plain_users", source)
    for user, password in users.items():
        if not isinstance(password, str) or not password:
            raise ConfigError(f"{source}: key 'security.plain_users.{user}' must be a non-empty password string")
    values["plain_users"] = dict(users)
    values["inter_broker"] = _inter_broker(raw, source, base_dir)
    settings = SecuritySettings(**values)
    if (settings.ssl_certfile is None) != (settings.ssl_keyfile is None):
        raise ConfigError(f"{source}: keys 'security.ssl_certfile' and 'security.ssl_keyfile' go together")
    if settings.controller_tls and (settings.ssl_certfile is None or settings.ssl_cafile is None):
        raise ConfigError(f"{source}: key 'security.controller_tls' needs 'security.ssl_certfile', "
                          f"'security.ssl_keyfile' and 'security.ssl_cafile' (the nodes authenticate each other)")
    if settings.ssl_client_auth != "none" and settings.ssl_cafile is None:
        raise ConfigError(f"{source}: key 'security.ssl_cafile' is needed to verify client certificates "
                          f"(ssl_client_auth = {settings.ssl_client_auth!r})")
    return settings


def _oauthbearer(raw: dict[str, Any], source: str, base_dir: str, mechanisms: tuple[str, ...]) -> dict[str, Any]:
    """The sasl_oauthbearer_* keys: with OAUTHBEARER enabled, exactly one way to check tokens (a JWKS file, read
    here so that a bad one stops the node before it starts, or unsecured tokens)."""
    values: dict[str, Any] = {}
    for key in ("sasl_oauthbearer_jwks_file", "sasl_oauthbearer_expected_issuer", "sasl_oauthbearer_sub_claim_name",
                "sasl_oauthbearer_jwks_endpoint_url", "sasl_oauthbearer_jwks_endpoint_cafile"):
        if key in raw:
            if not isinstance(raw[key], str) or not raw[key]:
                raise ConfigError(f"{source}: key 'security.{key}' must be a non-empty string, got {raw[key]!r}")
            values[key] = raw[key]
    if "sasl_oauthbearer_unsecured" in raw:
        if not isinstance(raw["sasl_oauthbearer_unsecured"], bool):
            raise ConfigError(f"{source}: key 'security.sasl_oauthbearer_unsecured' must be true or false")
        values["sasl_oauthbearer_unsecured"] = raw["sasl_oauthbearer_unsecured"]
    audience = _strings(raw, "sasl_oauthbearer_expected_audience", source)
    if audience is not None:
        values["sasl_oauthbearer_expected_audience"] = tuple(audience)
    _integer(raw, values, "sasl_oauthbearer_jwks_endpoint_refresh_ms", source, lambda refresh: refresh >= 1000,
             "an integer of at least 1000")
    url = values.get("sasl_oauthbearer_jwks_endpoint_url")
    if url is not None:
        if url.startswith("file:"):  # as Kafka takes it: the file at that path
            if "sasl_oauthbearer_jwks_file" in values:
                raise ConfigError(f"{source}: keys 'security.sasl_oauthbearer_jwks_endpoint_url' and "
                                  f"'security.sasl_oauthbearer_jwks_file' exclude each other")
            values["sasl_oauthbearer_jwks_file"] = url[len("file://"):] if url.startswith("file://") else url[5:]
            del values["sasl_oauthbearer_jwks_endpoint_url"]
        elif not url.startswith("https://"):
            raise ConfigError(f"{source}: key 'security.sasl_oauthbearer_jwks_endpoint_url' must be an https:// or "
                              f"file: URL, got {url!r}")
    if "sasl_oauthbearer_jwks_endpoint_cafile" in values:
        values["sasl_oauthbearer_jwks_endpoint_cafile"] = os.path.normpath(
            os.path.join(base_dir, values["sasl_oauthbearer_jwks_endpoint_cafile"]))
    _integer(raw, values, "sasl_oauthbearer_clock_skew_seconds", source, lambda skew: 0 <= skew <= 3600,
             "an integer between 0 and 3600")
    if OAUTHBEARER not in mechanisms:
        if values:
            raise ConfigError(f"{source}: key 'security.{next(iter(values))}' is set but OAUTHBEARER is not in "
                              f"'security.sasl_enabled_mechanisms'")
        return values
    ways = [key for key in ("sasl_oauthbearer_jwks_file", "sasl_oauthbearer_jwks_endpoint_url") if key in values]
    if values.get("sasl_oauthbearer_unsecured", False):
        ways.append("sasl_oauthbearer_unsecured")
    if len(ways) != 1:
        raise ConfigError(f"{source}: key 'security.sasl_enabled_mechanisms' lists OAUTHBEARER: set one of "
                          f"'security.sasl_oauthbearer_jwks_file' or 'security.sasl_oauthbearer_jwks_endpoint_url' "
                          f"(the token issuer's public keys) or 'security.sasl_oauthbearer_unsecured = true' "
                          f"(unsigned tokens, development only)" + (f", not {' and '.join(ways)}" if ways else ""))
    has_jwks = "sasl_oauthbearer_jwks_file" in values
    if has_jwks:
        path = values["sasl_oauthbearer_jwks_file"] = os.path.normpath(
            os.path.join(base_dir, values["sasl_oauthbearer_jwks_file"]))
        try:
            read_jwks_file(path)
        except ValueError as error:
            raise ConfigError(f"{source}: key 'security.sasl_oauthbearer_jwks_file': {error}") from None
    return values


def read_jwks_file(path: str) -> KeySet:
    """The keys of a JWKS file; raises ValueError naming the file and what is wrong."""
    try:
        with open(path, "rb") as jwks_file:
            document = json.load(jwks_file)
    except OSError as error:
        raise ValueError(f"{path}: {error.strerror}") from None
    except ValueError as error:
        raise ValueError(f"{path}: not JSON ({error})") from None
    try:
        return load_jwks(document)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


_INTER_BROKER_OIDC_KEYS = ("oauthbearer_token_endpoint_url", "oauthbearer_client_id", "oauthbearer_client_secret")


def _inter_broker(raw: dict[str, Any], source: str, base_dir: str) -> InterBrokerCredentials:
    table = dict(_table(raw, "inter_broker", source))
    allowed = set(InterBrokerCredentials.__dataclass_fields__)
    for key, value in table.items():
        if key not in allowed:
            raise ConfigError(f"{source}: unknown key 'security.inter_broker.{key}' (allowed: {', '.join(sorted(allowed))})")
        if not isinstance(value, str):
            raise ConfigError(f"{source}: key 'security.inter_broker.{key}' must be a string, got {value!r}")
    mechanism = table.get("sasl_mechanism", PLAIN)
    if mechanism not in SERVER_MECHANISMS:
        raise ConfigError(f"{source}: key 'security.inter_broker.sasl_mechanism' must be one of {list(SERVER_MECHANISMS)}")
    oauth_keys = sorted(key for key in table if key.startswith("oauthbearer_"))
    if mechanism != OAUTHBEARER:
        if oauth_keys:
            raise ConfigError(f"{source}: key 'security.inter_broker.{oauth_keys[0]}' is for sasl_mechanism = "
                              f"\"{OAUTHBEARER}\" (the table says {mechanism!r})")
        return InterBrokerCredentials(**table)
    ways = [way for way, present in (("the token endpoint", any(k in table for k in _INTER_BROKER_OIDC_KEYS)),
                                     ("oauthbearer_token_file", "oauthbearer_token_file" in table),
                                     ("oauthbearer_unsecured_principal", "oauthbearer_unsecured_principal" in table))
            if present]
    if len(ways) != 1:
        raise ConfigError(f"{source}: key 'security.inter_broker.sasl_mechanism' is \"{OAUTHBEARER}\": give one "
                          f"way to a token: oauthbearer_token_endpoint_url with oauthbearer_client_id and "
                          f"oauthbearer_client_secret, oauthbearer_token_file, or oauthbearer_unsecured_principal"
                          f" (got {', '.join(ways) if ways else 'none'})")
    if ways[0] == "the token endpoint":
        missing = [key for key in _INTER_BROKER_OIDC_KEYS if not table.get(key)]
        if missing:
            raise ConfigError(f"{source}: key 'security.inter_broker.{missing[0]}' is needed with the token endpoint")
        if not re.match(r"^https?://", table["oauthbearer_token_endpoint_url"]):
            raise ConfigError(f"{source}: key 'security.inter_broker.oauthbearer_token_endpoint_url' must be an "
                              f"http(s) URL, got {table['oauthbearer_token_endpoint_url']!r}")
    elif "oauthbearer_scope" in table or "oauthbearer_ca_file" in table:
        key = "oauthbearer_scope" if "oauthbearer_scope" in table else "oauthbearer_ca_file"
        raise ConfigError(f"{source}: key 'security.inter_broker.{key}' is for the token endpoint")
    for key in ("oauthbearer_ca_file", "oauthbearer_token_file"):
        if key in table:
            table[key] = os.path.normpath(os.path.join(base_dir, table[key]))
    if table.get("oauthbearer_unsecured_principal") == "":
        raise ConfigError(f"{source}: key 'security.inter_broker.oauthbearer_unsecured_principal' must not be empty")
    return InterBrokerCredentials(**table)


def parse_listeners(raw: Any, host: str, security: SecuritySettings, source: str, where: str) -> tuple[Listener, ...]:
    """The node's `listeners` ("NAME://host:port", Kafka's format; an empty host means the node's host)."""
    if not isinstance(raw, list) or not raw or not all(isinstance(item, str) for item in raw):
        raise ConfigError(f"{source}: key '{where}listeners' must be a non-empty list of \"NAME://host:port\" strings")
    listeners = []
    for item in raw:
        match = _LISTENER.match(item)
        if match is None:
            raise ConfigError(f"{source}: key '{where}listeners': {item!r} is not of the form NAME://host:port")
        name, listener_host, port_text = match.groups()
        port = int(port_text)
        if not 0 < port < 65536:
            raise ConfigError(f"{source}: key '{where}listeners': port {port} of {item!r} is not between 1 and 65535")
        protocol = security.protocol_of(name)
        if protocol is None:
            raise ConfigError(f"{source}: key '{where}listeners': listener name {name!r} is not a security protocol; "
                              f"map it in 'security.listener_security_protocol_map'")
        if any(listener.name == name for listener in listeners):
            raise ConfigError(f"{source}: key '{where}listeners': listener name {name!r} appears twice")
        listeners.append(Listener(name, listener_host or host, port, protocol))
    for listener in listeners:
        if listener.uses_tls and security.ssl_certfile is None:
            raise ConfigError(f"{source}: key '{where}listeners': {listener} uses TLS but 'security.ssl_certfile' and "
                              f"'security.ssl_keyfile' are not set")
    return tuple(listeners)


def _integer(raw: dict[str, Any], values: dict[str, Any], key: str, source: str, valid: Callable[[int], bool],
             expected: str) -> None:
    """Copy `key` to `values` when set: an integer (not a boolean) for which `valid` holds, else ConfigError."""
    value = raw.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not valid(value):
        raise ConfigError(f"{source}: key 'security.{key}' must be {expected}, got {value!r}")
    values[key] = value


def _table(raw: dict[str, Any], key: str, source: str) -> dict[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: key 'security.{key}' must be a table")
    return value


def _strings(raw: dict[str, Any], key: str, source: str) -> list[str] | None:
    if key not in raw:
        return None
    value = raw[key]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{source}: key 'security.{key}' must be a list of strings, got {value!r}")
    return value
