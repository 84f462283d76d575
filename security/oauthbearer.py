"""SASL/OAUTHBEARER on the server side (KIP-255, KIP-768), sans-IO: the client's message and the token it carries.

Theory of operation: the client's first message is RFC 7628's `n,[a=authzid],^Aauth=Bearer <token>^A[k=v^A]*^A`
(^A is the byte 0x01). `parse_client_first` takes it apart as Kafka's OAuthBearerClientInitialResponse does;
`validate_token` checks the token at `now_ms` (milliseconds since the epoch, given, never read from a clock) and
returns who it names and until when. Two kinds of token, chosen by the node's config (never both):
- signed JWTs (Kafka's default validator for OIDC since KIP-768, jose4j there, PyJWT here) checked against the
  public keys of a JWKS document: the signature with the key the header's `kid` names (or the only key), an
  algorithm of that key's type (RS*, PS*, ES*, EdDSA; never `none` nor an HMAC); `exp` and `iat` present; `exp`
  and `nbf` held to the clock within the allowed skew; `iss` and `aud` when the config names them; the
  principal from the `sub` claim (or the claim the config names).
- unsecured JWTs (`alg: none`, Kafka's OAuthBearerUnsecuredValidatorCallbackHandler, for development only, as
  librdkafka's `enable.sasl.oauthbearer.unsecure.jwt` makes them): no signature; `exp` present and not passed,
  `iat` not in the future (within the skew), the principal claim a non-empty string.
Extensions the client sends are accepted and ignored, as Kafka ignores those no validator claims. The scope
claim is not checked: Kafka's validators only check its shape, and no authorization here depends on it.

A token that fails is answered as RFC 7628 and Kafka do: the server's message is the JSON error
`{"status":"invalid_token"}`, the client then sends a lone ^A, and only then does the authentication fail with
that error (security/sasl.py). The session's lifetime (security/session.py) is the token's remaining one,
capped by connections_max_reauth_ms, as Kafka's SaslServerAuthenticator computes it (KIP-368).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any

import jwt

OAUTHBEARER = "OAUTHBEARER"
SEPARATOR = b"\x01"
INVALID_TOKEN_STATUS = "invalid_token"
_AUTH = re.compile(r"^([A-Za-z0-9_]+) +([-_~+/.a-zA-Z0-9]+=*)$")  # Kafka's AUTH_PATTERN: scheme, then the token
_KEY = re.compile(r"^[A-Za-z]+$")
_VALUE = re.compile(r"^[\x21-\x7E \t\r\n]+$")
# The algorithms a JWKS key of each type may verify (RFC 7518); an HMAC is never taken from a public key set.
ALGORITHMS_BY_KEY_TYPE = {
    "RSA": ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512"),
    "EC": ("ES256", "ES384", "ES512"),
    "OKP": ("EdDSA",),
}


class InvalidClientMessage(Exception):
    """The client's message is not RFC 7628's client-first message."""


class InvalidToken(Exception):
    """The token does not authenticate anyone; the message says why (logged by the server, never sent)."""


@dataclass(frozen=True)
class ClientFirst:
    authorization_id: str
    token: str
    extensions: dict[str, str]


@dataclass(frozen=True)
class OAuthBearerSettings:
    """How a node validates tokens: `jwks` (a parsed JWKS document) for signed ones, or `unsecured`."""

    unsecured: bool = False
    jwks: "KeySet | None" = None
    expected_audience: tuple[str, ...] = ()
    expected_issuer: str | None = None
    sub_claim_name: str = "sub"
    clock_skew_s: int = 30
    # Told the key id of a token no key of `jwks` has (a JWKS endpoint then fetches the keys again: a rotation)
    on_unknown_key: Any = None


@dataclass(frozen=True)
class ValidatedToken:
    principal_name: str
    expires_at_ms: int  # the token's `exp`, in milliseconds since the epoch


def parse_client_first(message: bytes) -> ClientFirst:
    """RFC 7628's client-first message, as Kafka parses it. Raises InvalidClientMessage."""
    try:
        text = message.decode("ascii")
    except UnicodeDecodeError:
        raise InvalidClientMessage("the message is not ASCII") from None
    header, separator, rest = text.partition("\x01")
    if not separator or not rest.endswith("\x01\x01") and rest != "\x01":
        raise InvalidClientMessage("the message does not end with two ^A separators")
    gs2 = header.split(",")
    if len(gs2) != 3 or gs2[0] != "n" or gs2[2] != "" or (gs2[1] and not gs2[1].startswith("a=")):
        raise InvalidClientMessage("the GS2 header is not 'n,[a=authzid],'")
    authorization_id = gs2[1][2:].replace("=2C", ",").replace("=3D", "=")
    pairs: dict[str, str] = {}
    for pair in rest[:-2].split("\x01") if rest != "\x01" else []:
        key, equals, value = pair.partition("=")
        if not equals or not _KEY.match(key) or not _VALUE.match(value):
            raise InvalidClientMessage("a key=value pair is malformed")
        pairs[key] = value
    auth = pairs.pop("auth", None)
    if auth is None:
        raise InvalidClientMessage("'auth' not specified")
    matched = _AUTH.match(auth)
    if matched is None or matched.group(1).lower() != "bearer":
        raise InvalidClientMessage("invalid 'auth' format")
    return ClientFirst(authorization_id, matched.group(2), pairs)


def client_first(token: str, authorization_id: str = "") -> bytes:
    """The client's first message carrying `token` (RFC 7628; what Kafka's and librdkafka's clients send)."""
    authzid = authorization_id.replace("=", "=3D").replace(",", "=2C")
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01\x01".encode("ascii")


def unsecured_token(principal: str, now_ms: int, life_s: int = 3600, scope: str = "") -> str:
    """An unsecured JWT (`alg: none`) for `principal`, issued at `now_ms` and valid for `life_s`, as
    librdkafka's `enable.sasl.oauthbearer.unsecure.jwt` makes one: for development clusters only."""
    claims: dict[str, Any] = {"sub": principal, "iat": now_ms / 1000, "exp": now_ms / 1000 + life_s}
    if scope:
        claims["scope"] = scope.split()
    return f"{_b64url({'alg': 'none'})}.{_b64url(claims)}."


def _b64url(value: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value, separators=(",", ":")).encode()).rstrip(b"=").decode()


def error_message(status: str = INVALID_TOKEN_STATUS) -> bytes:
    """The server's message for a token that fails (RFC 7628 section 3.2.2; Kafka's jsonErrorResponse)."""
    return json.dumps({"status": status}, separators=(",", ":")).encode()


def validate_token(token: str, settings: OAuthBearerSettings, now_ms: int) -> ValidatedToken:
    """Who `token` names and until when, checked at `now_ms` (see the module docstring). Raises InvalidToken."""
    if settings.unsecured:
        claims = _unsecured_claims(token)
    else:
        claims = _verified_claims(token, settings)
        if "iat" not in claims:
            raise InvalidToken("the token has no 'iat' claim")
        for name in ("iss", "aud"):
            expected = settings.expected_issuer if name == "iss" else settings.expected_audience
            if expected and not _claim_matches(claims.get(name), expected):
                raise InvalidToken(f"the token's {name!r} claim {claims.get(name)!r} is not the expected {expected!r}")
    skew_ms = settings.clock_skew_s * 1000
    expires_at_ms = _time_claim_ms(claims, "exp", required=True)
    if expires_at_ms + skew_ms <= now_ms:
        raise InvalidToken(f"the token expired at {expires_at_ms} ms (now {now_ms} ms)")
    not_before_ms = _time_claim_ms(claims, "nbf", required=False)
    if not_before_ms is not None and not_before_ms - skew_ms > now_ms:
        raise InvalidToken(f"the token is not valid before {not_before_ms} ms (now {now_ms} ms)")
    issued_at_ms = _time_claim_ms(claims, "iat", required=False)
    if settings.unsecured and issued_at_ms is not None and issued_at_ms - skew_ms > now_ms:
        raise InvalidToken(f"the token was issued in the future ({issued_at_ms} ms, now {now_ms} ms)")
    principal = claims.get(settings.sub_claim_name)
    if not isinstance(principal, str) or not principal.strip():
        raise InvalidToken(f"the token's {settings.sub_claim_name!r} claim is not a non-empty string")
    return ValidatedToken(principal.strip(), expires_at_ms)


def _claim_matches(value: Any, expected: str | tuple[str, ...]) -> bool:
    if isinstance(expected, str):
        return value == expected
    values = value if isinstance(value, list) else [value]
    return any(item in expected for item in values if isinstance(item, str))


def _time_claim_ms(claims: dict[str, Any], name: str, required: bool) -> int | None:
    value = claims.get(name)
    if value is None:
        if required:
            raise InvalidToken(f"the token has no {name!r} claim")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidToken(f"the token's {name!r} claim is not a number of seconds")
    return int(value * 1000)


def _unsecured_claims(token: str) -> dict[str, Any]:
    parts = token.split(".")
    if len(parts) != 3 or parts[2] != "":
        raise InvalidToken("an unsecured token has three parts and an empty signature")
    header, claims = (_json_part(part) for part in parts[:2])
    if header.get("alg") != "none":
        raise InvalidToken(f"an unsecured token's algorithm must be 'none', got {header.get('alg')!r}")
    return claims


def _verified_claims(token: str, settings: OAuthBearerSettings) -> dict[str, Any]:
    try:
        header = jwt.get_unverified_header(token)
    except jwt.InvalidTokenError as error:
        raise InvalidToken(f"the token is not a JWS: {error}") from None
    except RecursionError:
        raise InvalidToken("the token's header is JSON nested too deep") from None
    try:
        key = _key_for(header, settings.jwks)
    except InvalidToken:
        if settings.on_unknown_key is not None and header.get("kid") is not None:
            settings.on_unknown_key(header["kid"])
        raise
    algorithm = header.get("alg")
    allowed = (key.algorithm,) if key.algorithm else ALGORITHMS_BY_KEY_TYPE[key.key_type]
    if algorithm not in allowed:
        raise InvalidToken(f"the token's algorithm {algorithm!r} is not one its key ({key.key_type}) verifies")
    try:
        # The times, the issuer and the audience are checked by the caller, against the clock it is given.
        return jwt.decode(token, key.jwk.key, algorithms=[algorithm],
                          options={"verify_exp": False, "verify_nbf": False, "verify_iat": False,
                                   "verify_aud": False, "verify_iss": False})
    except jwt.InvalidTokenError as error:
        raise InvalidToken(f"the token's signature does not verify: {error}") from None
    except RecursionError:  # a signed payload nested too deep: its issuer's bug, still a refusal
        raise InvalidToken("the token's claims are JSON nested too deep") from None


def _key_for(header: dict[str, Any], jwks: "KeySet | None") -> "VerificationKey":
    keys = jwks.keys if jwks is not None else ()
    kid = header.get("kid")
    if kid is not None:
        for key in keys:
            if key.key_id == kid:
                return key
        raise InvalidToken(f"no key of the JWKS has the token's key id {kid!r}")
    if len(keys) != 1:
        raise InvalidToken(f"the token names no key id and the JWKS has {len(keys)} keys")
    return keys[0]


def _json_part(part: str) -> dict[str, Any]:
    try:
        decoded = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    except (ValueError, binascii.Error, RecursionError):  # (RecursionError: JSON nested thousands deep)
        raise InvalidToken("a part of the token is not base64url JSON") from None
    if not isinstance(decoded, dict):
        raise InvalidToken("a part of the token is not a JSON object")
    return decoded


@dataclass(frozen=True)
class VerificationKey:
    jwk: Any  # jwt.PyJWK
    key_id: str | None
    key_type: str  # RSA, EC or OKP
    algorithm: str | None  # the JWK's `alg`, when it names one: then only that algorithm


@dataclass(frozen=True)
class KeySet:
    keys: tuple[VerificationKey, ...]


def load_jwks(document: Any) -> KeySet:
    """A JWKS document (parsed JSON) as the keys tokens are verified with; raises ValueError saying what is
    wrong with it (a private key, a symmetric key, a key PyJWT cannot read)."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list) or not document["keys"]:
        raise ValueError("a JWKS is a JSON object with a non-empty 'keys' list")
    keys = []
    for index, entry in enumerate(document["keys"]):
        if not isinstance(entry, dict) or entry.get("kty") not in ALGORITHMS_BY_KEY_TYPE:
            raise ValueError(f"key {index}: every key must be a public key of type {', '.join(ALGORITHMS_BY_KEY_TYPE)}")
        if "d" in entry:
            raise ValueError(f"key {index} is a private key: give the servers the public keys only")
        algorithm = entry.get("alg")
        if algorithm is not None and algorithm not in ALGORITHMS_BY_KEY_TYPE[entry["kty"]]:
            raise ValueError(f"key {index}: algorithm {algorithm!r} is not one of a {entry['kty']} key")
        try:
            jwk = jwt.PyJWK.from_dict(entry)
        except (jwt.PyJWKError, jwt.InvalidKeyError) as error:
            raise ValueError(f"key {index}: {error}") from None
        keys.append(VerificationKey(jwk, entry.get("kid"), entry["kty"], algorithm))
    return KeySet(tuple(keys))
