"""The Kafka listener's dispatcher: frames in, encoded responses out (the glue between `net.server` and
`broker.apis`).

Decoding failures close the connection (garbage bytes, truncated or hostile frames), and so does a request
whose handler raises, at once or while building a deferred answer (a bug: logged with its traceback, the node
goes on serving); an ApiVersions request of a version we do not implement gets KIP-511's v0 answer with our
version list; any other API or version we do not implement closes the connection, as Kafka does. Deferred responses become `PendingReply`s that the
node completes after each event.

Security: each connection has a `security.session.Session` (listener, client address, principal). The SASL
side of its frames (the exchange before authentication, re-authentication, expired sessions) is
broker/sasl_gate.py's, which the simulator's nodes share; here its outcomes become answers and closes, and
frames stay below `PRE_AUTH_REQUEST_BYTES_MAX` during an exchange. The session of the request being handled
is `apis.session`, which the handlers' authorization checks read.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from broker.admin_api import ADMIN_API_KEY, decode_admin_request, encode_admin_response, peek_api_key
from broker.apis import Deferred, KafkaApis, RequestFailed
from broker.metrics import response_error_codes
from broker.quotas import REQUEST
from broker.sasl_gate import SaslGate, SaslOutcome, needs_screening
from net.logs import get_logger
from net.protocol.codec import (
    ApiKey,
    RequestHeader,
    UnsupportedRequestVersionError,
    decode_request,
    encode_api_versions_fallback,
    encode_response,
    encode_response_parts,
)
from net.protocol.types import BUFFER_TYPES, materialized
from net.server import (
    CLOSE_REPLY,
    NO_REPLY,
    PRE_AUTH_REQUEST_BYTES_MAX,
    CloseAfter,
    CloseConnection,
    FileReply,
    PendingReply,
)
from partitions.errors import ErrorCode, KafkaError
from partitions.storage import StorageError
from security.acl import AclOperation
from security.session import Session, anonymous_session

_REQUEST_QUOTA_EXEMPT = frozenset({ApiKey.WRITE_TXN_MARKERS})


class KafkaDispatcher:
    """Implements `net.server.Dispatcher` over a `KafkaApis`."""

    def __init__(self, apis: KafkaApis, now_ms: Callable[[], int], after_event: Callable[[], None],
                 admin_handler: Callable[[dict], dict] | None = None, security: Any = None) -> None:
        self.apis = apis
        self.admin_handler = admin_handler
        self.now_ms = now_ms
        self.after_event = after_event
        self.security = security  # broker.security_config.SecuritySettings, or None (plaintext only)
        self.sasl_gate = SaslGate(apis, security)
        self.log = get_logger(component="kafka-dispatcher")
        # request id -> (reply, header, connection, started (perf_counter s), acks label)
        self._pending: dict[int, tuple[PendingReply, RequestHeader, int, float, str]] = {}
        self._client_hosts: dict[int, str] = {}
        self._client_software: dict[int, tuple[str | None, str | None]] = {}  # ApiVersions v3+ (KIP-511)
        self._sessions: dict[int, Session] = {}
        self._anonymous = anonymous_session()
        self._batch_depth = 0  # > 0 while the server hands over the frames of one read (`batch`)
        self._event_pending = False

    def batch_begin(self) -> None:
        """The server is about to hand over the frames of one read: what they complete is delivered once, at
        `batch_end` (one poll of the cores for all of them instead of one each)."""
        self._batch_depth += 1

    def batch_end(self) -> None:
        """Deliver what the frames handled since `batch_begin` completed; the server calls it before it waits."""
        self._batch_depth = max(0, self._batch_depth - 1)
        if self._event_pending:
            self._event_pending = False
            self.after_event()

    def _after_event(self) -> None:
        if self._batch_depth:
            self._event_pending = True
        else:
            self.after_event()

    def connection_opened(self, connection_id: int, peer_host: str, listener: Any = None,
                          certificate: bytes | None = None) -> None:
        """Remember the client's address (coordinators record it as a member's host, "/127.0.0.1" as Kafka
        writes it) and open its security session (`listener`: broker.config.Listener; `certificate`: the
        verified client certificate in DER)."""
        self._client_hosts[connection_id] = f"/{peer_host}" if peer_host else ""
        name, protocol = (listener.name, listener.security_protocol) if listener is not None else ("PLAINTEXT",) * 2
        self._sessions[connection_id] = Session.open(name, protocol, peer_host, _subject(certificate))

    def throttle_delay_s(self, connection_id: int) -> float:
        """How long the server must not read from the connection: a client quota's throttle (KIP-219: the
        answer leaves at once with throttle_time_ms, then the connection is muted for that long)."""
        session = self._sessions.get(connection_id)
        if session is None or not session.throttled_until_ms:
            return 0.0
        return max(0.0, (session.throttled_until_ms - self.now_ms()) / 1000)

    def request_bytes_max(self, connection_id: int) -> int:
        session = self._sessions.get(connection_id)
        return PRE_AUTH_REQUEST_BYTES_MAX if session is not None and session.in_exchange else 2**31 - 1

    def handle_frame(self, connection_id: int, frame: bytes) -> Any:
        session = self._sessions.get(connection_id, self._anonymous)
        if needs_screening(session):
            outcome = self.sasl_gate.screen(session, frame, self.now_ms())
            if outcome is not None:
                return self._sasl_outcome(connection_id, outcome)
        if self.admin_handler is not None and peek_api_key(frame) == ADMIN_API_KEY:
            return self._admin(connection_id, session, frame)
        try:
            header, request = decode_request(frame)
        except UnsupportedRequestVersionError as error:
            return self._unsupported(error.header)
        except KafkaError as error:
            self.log.info("malformed_request", connection_id=connection_id, error=error.message)
            raise CloseConnection(error.message) from None
        if not self.apis.is_supported(header.api_key, header.api_version):
            return self._unsupported(header)
        if header.api_key == ApiKey.API_VERSIONS and header.api_version >= 3:
            self._client_software[connection_id] = (request.client_software_name, request.client_software_version)
        self.apis.client_host = self._client_hosts.get(connection_id, "")
        self.apis.client_software = self._client_software.get(connection_id, (None, None))
        self.apis.session = session
        started = time.perf_counter()
        acks = str(request.acks) if header.api_key == ApiKey.PRODUCE else ""
        try:
            result = self.apis.handle(header, request, self.now_ms())
        except StorageError:
            raise  # the disk failed: the node stops (net/node.py), it is no handler's bug
        except Exception:  # a handler's bug: that connection closes, the node and its other clients go on
            self.apis.broker.metrics.record_internal_error("request")
            self.log.error("request_failed", connection_id=connection_id, api_key=header.api_key,
                           api_version=header.api_version, exc_info=True)
            raise CloseConnection(f"api_key={header.api_key}: the broker failed handling the request") from None
        if result is not None and self.apis.client_quotas_enabled():
            self._request_quota(header, request, session, started, result)
        if isinstance(result, Deferred):
            pending = PendingReply()
            self._pending[result.request_id] = (pending, header, connection_id, started, acks)
            self._after_event()
            return pending
        self._after_event()
        if result is None:
            self._record(header, acks, started, None)
            return NO_REPLY
        self._record(header, acks, started, result)
        try:
            return encode_reply(header, result)
        except KafkaError as error:
            self.apis.broker.metrics.record_internal_error("encode")
            self.log.error("response_encode_failed", api_key=header.api_key, api_version=header.api_version,
                           error=error.message)
            raise CloseConnection(error.message) from None

    def _request_quota(self, header: RequestHeader, request: Any, session: Session, started: float,
                       result: Any) -> None:
        """Record the time the request took against the client's request_percentage (as a percentage of one
        thread over a second, Kafka's unit); an immediate answer carries the throttle, the larger of it and a
        byte-rate throttle. Exempt, as in Kafka: followers' fetches and inter-broker WriteTxnMarkers."""
        if header.api_key in _REQUEST_QUOTA_EXEMPT or (header.api_key == ApiKey.FETCH and request.replica_id >= 0):
            return
        percent_seconds = (time.perf_counter() - started) * 100
        throttle_ms = self.apis.client_throttle_ms(REQUEST, session, header.client_id, percent_seconds, self.now_ms())
        if throttle_ms and not isinstance(result, Deferred) and hasattr(result, "throttle_time_ms"):
            result.throttle_time_ms = max(result.throttle_time_ms or 0, throttle_ms)

    def _sasl_outcome(self, connection_id: int, outcome: SaslOutcome) -> Any:
        if outcome.event is not None:
            self.log.info(outcome.event, connection_id=connection_id, **outcome.fields)
        if outcome.close_delay_ms is None:
            return outcome.reply
        if not outcome.reply and not outcome.close_delay_ms:
            raise CloseConnection(outcome.event or "closed by the SASL gate")
        return CloseAfter(outcome.reply, outcome.close_delay_ms / 1000)

    def _admin(self, connection_id: int, session: Session, frame: bytes) -> bytes:
        """Flotilla's private admin API (quorum status, the metadata image): DESCRIBE on the cluster."""
        try:
            header, request = decode_admin_request(frame)
        except KafkaError as error:
            self.log.info("malformed_admin_request", connection_id=connection_id, error=error.message)
            raise CloseConnection(error.message) from None
        self.apis.session = session
        if not self.apis.authorize_cluster(AclOperation.DESCRIBE):
            return encode_admin_response(header, {"error": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                                                  "message": "Cluster authorization failed."})
        return encode_admin_response(header, self.admin_handler(request))

    def _record(self, header: RequestHeader, acks: str, started: float, response: Any) -> None:
        """Count the request, its latency and the error codes of its response (broker/metrics.py)."""
        if not self.apis.broker.metrics.enabled:
            return
        name = _API_NAMES.get(header.api_key) or _api_name(header.api_key)
        errors = response_error_codes(response) if response is not None else iter(())
        self.apis.broker.metrics.record_request(name, acks, time.perf_counter() - started, errors)

    def _unsupported(self, header: RequestHeader) -> bytes:
        if header.api_key == ApiKey.API_VERSIONS:
            return encode_api_versions_fallback(header, self.apis.supported_apis)
        raise CloseConnection(f"unsupported api_key={header.api_key} api_version={header.api_version}")

    def complete(self, completed: list[tuple[int, RequestHeader, Any]]) -> None:
        """Send the responses of deferred requests (from `KafkaApis.poll`)."""
        for request_id, header, response in completed:
            entry = self._pending.pop(request_id, None)
            if isinstance(response, RequestFailed):  # building the answer raised: that connection closes
                error = response.error
                self.apis.broker.metrics.record_internal_error("answer")
                self.log.error("request_failed", api_key=header.api_key, api_version=header.api_version,
                               exc_info=(type(error), error, error.__traceback__))
                if entry is not None and not entry[0].done:
                    entry[0].set(CLOSE_REPLY)
                continue
            if entry is None or entry[0].done:
                continue
            self._record(header, entry[4], entry[3], response)
            try:
                entry[0].set(encode_reply(header, response))
            except KafkaError as error:  # a response this version cannot carry: a bug, but one connection's
                self.apis.broker.metrics.record_internal_error("encode")
                self.log.error("response_encode_failed", api_key=header.api_key, api_version=header.api_version,
                               error=error.message)
                entry[0].set(CLOSE_REPLY)

    def connection_closed(self, connection_id: int) -> None:
        self._client_hosts.pop(connection_id, None)
        self._client_software.pop(connection_id, None)
        self._sessions.pop(connection_id, None)
        # Deferred requests of a closed connection still complete in the core (the produce is appended
        # either way); their replies are simply dropped when they arrive.
        for request_id in [r for r, entry in self._pending.items() if entry[2] == connection_id]:
            del self._pending[request_id]


_API_NAMES: dict[int, str] = {}


def _api_name(api_key: int) -> str:
    try:
        name = ApiKey(api_key).name.lower()
    except ValueError:
        name = str(api_key)
    _API_NAMES[api_key] = name
    return name


def _subject(certificate: bytes | None) -> str | None:
    """The certificate's subject as an RFC 2253 distinguished name (Kafka's default SSL principal)."""
    if not certificate:
        return None
    from cryptography import x509

    return x509.load_der_x509_certificate(certificate).subject.rfc4514_string()


def encode_reply(header: RequestHeader, response: Any) -> bytes | FileReply:
    """The response frame; a Fetch response whose records are segment file slices becomes a FileReply that
    the server sends with os.sendfile."""
    if header.api_key != ApiKey.FETCH:
        return encode_response(header, response)
    parts = encode_response_parts(header, response)
    if all(isinstance(part, BUFFER_TYPES) for part in parts):
        return b"".join(parts)
    if any(not isinstance(part, BUFFER_TYPES) and part.handle.fileno() is None for part in parts):
        return b"".join(materialized(parts))
    return FileReply(parts)
