"""The public keys of an OAUTHBEARER token issuer, from its JWKS endpoint (Kafka's
sasl.oauthbearer.jwks.endpoint.url, RefreshingHttpsJwks) or from a file: the node's I/O for the SASL gate,
which only reads `current()` (and tells `unknown_key`) of the source the node gives it.

`JwksFile` reads the file again when it changes (a key rotation), at most once a second.

Theory of operation: a node whose config names `sasl_oauthbearer_jwks_endpoint_url` runs one `JwksEndpoint`
task. It GETs the document over HTTPS (httpx; the system's CAs or `sasl_oauthbearer_jwks_endpoint_cafile`),
reads it as security/oauthbearer.py's KeySet and keeps it; the SASL gate reads `current()` at each
authentication. It fetches again every `refresh_ms`, and at once (at most every UNKNOWN_KEY_REFRESH_S) when a
token names a key id the set does not have: the issuer rotated its keys. A failed fetch (no answer, an HTTP
error, a body over BODY_BYTES_MAX, a document that is not a public JWKS) keeps the keys before and is tried
again after RETRY_MIN_S, doubling to RETRY_MAX_S; it is logged, once a minute while it repeats. Until the first
fetch succeeds no token is accepted (each is refused as having an unknown key).
"""

from __future__ import annotations

import json
import math
import os
import ssl
import time
from typing import Any

import httpx
import trio

from broker.security_config import read_jwks_file
from security.oauthbearer import KeySet, load_jwks

UNKNOWN_KEY_REFRESH_S = 10.0
RETRY_MIN_S, RETRY_MAX_S = 0.1, 10.0
BODY_BYTES_MAX = 1 << 20
FETCH_TIMEOUT_S = 10.0
LOG_INTERVAL_S = 60.0


class JwksEndpoint:
    def __init__(self, url: str, refresh_ms: int, cafile: str | None, log: Any) -> None:
        self.url = url
        self.refresh_s = refresh_ms / 1000
        self.cafile = cafile
        self.log = log
        self.keys: KeySet | None = None
        self.failures = 0
        self.last_error: str | None = None
        self._wake = trio.Event()
        self._fetched_at = -math.inf  # trio time of the last fetch tried
        self._logged_at = -math.inf

    def current(self) -> KeySet | None:
        return self.keys

    def unknown_key(self, kid: str) -> None:
        """A token named key id `kid`, which the keys do not have: fetch again, unless a fetch was tried lately."""
        if trio.current_time() - self._fetched_at >= UNKNOWN_KEY_REFRESH_S:
            self._wake.set()

    async def run(self) -> None:
        context = ssl.create_default_context(cafile=self.cafile)
        backoff = RETRY_MIN_S
        async with httpx.AsyncClient(verify=context, timeout=FETCH_TIMEOUT_S, follow_redirects=False) as client:
            while True:
                self._fetched_at = trio.current_time()
                try:
                    self.keys = await self._fetch(client)
                except (httpx.HTTPError, ValueError) as error:
                    self.failures += 1
                    self.last_error = f"{type(error).__name__}: {error}"
                    if trio.current_time() - self._logged_at >= LOG_INTERVAL_S:
                        self._logged_at = trio.current_time()
                        self.log.warning("jwks_fetch_failed", url=self.url, error=self.last_error,
                                         failures_so_far=self.failures, keys_kept=self.keys is not None)
                    wait_s, backoff = backoff, min(RETRY_MAX_S, backoff * 2)
                else:
                    self.last_error, backoff, wait_s = None, RETRY_MIN_S, self.refresh_s
                    self.log.info("jwks_fetched", url=self.url, keys=[key.key_id for key in self.keys.keys])
                with trio.move_on_after(wait_s):
                    await self._wake.wait()
                self._wake = trio.Event()

    async def _fetch(self, client: httpx.AsyncClient) -> KeySet:
        async with client.stream("GET", self.url, headers={"Accept": "application/json"}) as response:
            if response.status_code != 200:
                raise ValueError(f"HTTP {response.status_code}")
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > BODY_BYTES_MAX:
                    raise ValueError(f"the document is over {BODY_BYTES_MAX} bytes")
        try:
            document = json.loads(body)
        except ValueError as error:
            raise ValueError(f"not JSON ({error})") from None
        return load_jwks(document)


class JwksFile:
    """A node's JWKS file, read again when it changes (a key rotation), at most once a second; a copy that no
    longer reads keeps the keys read before (`last_error` says why)."""

    def __init__(self, path: str, clock_s: Any = time.monotonic) -> None:
        self.path = path
        self._clock_s = clock_s
        self._checked_s = -1.0
        self._stamp: tuple[int, int] | None = None
        self.keys: KeySet | None = None
        self.last_error: str | None = None
        self.current()

    def current(self) -> KeySet | None:
        now = self._clock_s()
        if now - self._checked_s < 1.0 and self.keys is not None:
            return self.keys
        self._checked_s = now
        try:
            status = os.stat(self.path)
            stamp = (status.st_mtime_ns, status.st_size)
            if stamp != self._stamp:
                self.keys, self._stamp, self.last_error = read_jwks_file(self.path), stamp, None
        except (OSError, ValueError) as error:
            self.last_error = str(error)
        return self.keys
