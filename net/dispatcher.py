"""The Kafka listener's dispatcher: frames in, encoded responses out (the glue between `net.server` and
`broker.apis`).

Decoding failures close the connection (garbage bytes, truncated or hostile frames); an ApiVersions request
of a version we do not implement gets KIP-511's v0 answer with our version list; any other API or version we
do not implement closes the connection, as Kafka does. Deferred responses become `PendingReply`s that the
node completes after each event.
"""

from __future__ import annotations

from typing import Any, Callable

from broker.admin_api import ADMIN_API_KEY, decode_admin_request, encode_admin_response, peek_api_key
from broker.apis import Deferred, KafkaApis
from net.logs import get_logger
from net.protocol.codec import (
    ApiKey,
    RequestHeader,
    UnsupportedRequestVersionError,
    decode_request,
    encode_api_versions_fallback,
    encode_response,
)
from net.server import CLOSE_REPLY, NO_REPLY, CloseConnection, PendingReply
from partitions.errors import KafkaError


class KafkaDispatcher:
    """Implements `net.server.Dispatcher` over a `KafkaApis`."""

    def __init__(self, apis: KafkaApis, now_ms: Callable[[], int], after_event: Callable[[], None],
                 admin_handler: Callable[[dict], dict] | None = None) -> None:
        self.apis = apis
        self.admin_handler = admin_handler
        self.now_ms = now_ms
        self.after_event = after_event
        self.log = get_logger(component="kafka-dispatcher")
        self._pending: dict[int, tuple[PendingReply, RequestHeader, int]] = {}
        self._client_hosts: dict[int, str] = {}

    def connection_opened(self, connection_id: int, peer_host: str) -> None:
        """Remember the client's address: coordinators record it as a member's host ("/127.0.0.1", Kafka's way)."""
        self._client_hosts[connection_id] = f"/{peer_host}" if peer_host else ""

    def handle_frame(self, connection_id: int, frame: bytes) -> Any:
        if self.admin_handler is not None and peek_api_key(frame) == ADMIN_API_KEY:
            return self._admin(connection_id, frame)
        try:
            header, request = decode_request(frame)
        except UnsupportedRequestVersionError as error:
            return self._unsupported(error.header)
        except KafkaError as error:
            self.log.info("malformed_request", connection_id=connection_id, error=error.message)
            raise CloseConnection(error.message) from None
        if not self.apis.is_supported(header.api_key, header.api_version):
            return self._unsupported(header)
        self.apis.client_host = self._client_hosts.get(connection_id, "")
        result = self.apis.handle(header, request, self.now_ms())
        if isinstance(result, Deferred):
            pending = PendingReply()
            self._pending[result.request_id] = (pending, header, connection_id)
            self.after_event()
            return pending
        self.after_event()
        if result is None:
            return NO_REPLY
        try:
            return encode_response(header, result)
        except KafkaError as error:
            self.log.error("response_encode_failed", api_key=header.api_key, api_version=header.api_version,
                           error=error.message)
            raise CloseConnection(error.message) from None

    def _admin(self, connection_id: int, frame: bytes) -> bytes:
        try:
            header, request = decode_admin_request(frame)
        except KafkaError as error:
            self.log.info("malformed_admin_request", connection_id=connection_id, error=error.message)
            raise CloseConnection(error.message) from None
        return encode_admin_response(header, self.admin_handler(request))

    def _unsupported(self, header: RequestHeader) -> bytes:
        if header.api_key == ApiKey.API_VERSIONS:
            return encode_api_versions_fallback(header, self.apis.supported_apis)
        raise CloseConnection(f"unsupported api_key={header.api_key} api_version={header.api_version}")

    def complete(self, completed: list[tuple[int, RequestHeader, Any]]) -> None:
        """Send the responses of deferred requests (from `KafkaApis.poll`)."""
        for request_id, header, response in completed:
            entry = self._pending.pop(request_id, None)
            if entry is None or entry[0].done:
                continue
            try:
                entry[0].set(encode_response(header, response))
            except KafkaError as error:  # a response this version cannot carry: a bug, but one connection's
                self.log.error("response_encode_failed", api_key=header.api_key, api_version=header.api_version,
                               error=error.message)
                entry[0].set(CLOSE_REPLY)

    def connection_closed(self, connection_id: int) -> None:
        self._client_hosts.pop(connection_id, None)
        # Deferred requests of a closed connection still complete in the core (the produce is appended
        # either way); their replies are simply dropped when they arrive.
        for request_id in [r for r, (_, _, c) in self._pending.items() if c == connection_id]:
            del self._pending[request_id]
