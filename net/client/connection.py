"""One client-side Kafka connection as a pure state machine (h11-style): bytes in, responses out; no I/O.

Theory of operation: a `ClientConnection` owns the client half of one TCP connection to one broker. It
first negotiates versions: `initiate()` returns an ApiVersions request (v4, our highest); the broker's answer
tells us, per api key, its (min, max) version, and every later `send_request` picks min(our max, broker max)
unless the caller names a version. A broker that does not know ApiVersions v4 answers UNSUPPORTED_VERSION
with a v0 key list (KIP-511); the connection then goes back to NEW with a lower ApiVersions version chosen
from that list, and the caller calls `initiate()` again.

States: NEW -> NEGOTIATING -> READY; any protocol violation -> ERROR (terminal: the transport must close).

    NEW          initiate() -> NEGOTIATING
    NEGOTIATING  ApiVersions answered OK -> READY; UNSUPPORTED_VERSION with a lower usable version -> NEW
    READY        send_request() any number of times (pipelining), responses in request order

Invariants: responses arrive in the order requests were sent (Kafka brokers answer in order on a
connection), so each response must carry the correlation id of the oldest in-flight request; anything else
is a protocol error. A Produce with acks=0 gets no response, so it is never in flight. At most
`inflight_requests_max` requests are in flight; one more raises ClientProtocolError (the I/O shell bounds
its callers so that it never gets there).
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass

from net.protocol import messages
from net.protocol.codec import SUPPORTED, ApiKey, FrameReader, RequestHeader, decode_response, encode_request_parts
from net.protocol.schema import Message
from net.protocol.types import INT32
from partitions.errors import ErrorCode, KafkaError, UnsupportedVersionError

CORRELATION_ID_MAX = 0x7FFFFFFF
INFLIGHT_REQUESTS_MAX_DEFAULT = 64
FRAME_BYTES_MAX_DEFAULT = 100 * 1024 * 1024
API_VERSIONS_VERSION_MAX = SUPPORTED[ApiKey.API_VERSIONS][1]
CLIENT_SOFTWARE_NAME = "flotilla-client"
CLIENT_SOFTWARE_VERSION = "0.1.0"
assert API_VERSIONS_VERSION_MAX >= 0, SUPPORTED[ApiKey.API_VERSIONS]


class ClientProtocolError(KafkaError):
    """The broker (or the caller) broke the protocol on this connection; the connection is unusable."""

    code = ErrorCode.NETWORK_EXCEPTION


class ConnectionState(enum.Enum):
    NEW = "NEW"
    NEGOTIATING = "NEGOTIATING"
    READY = "READY"
    ERROR = "ERROR"


@dataclass(frozen=True, slots=True)
class InFlight:
    """A request waiting for its response: what is needed to decode that response."""

    correlation_id: int
    api_key: int
    api_version: int


def choose_version(api_key: int, broker_versions: dict[int, tuple[int, int]]) -> int:
    """min(our max, broker max) for `api_key`. Raises UnsupportedVersionError when the ranges do not meet."""
    ours = SUPPORTED.get(api_key)
    theirs = broker_versions.get(api_key)
    if ours is None or theirs is None:
        raise UnsupportedVersionError(f"api_key={api_key}: ours {ours}, broker's {theirs}")
    version = min(ours[1], theirs[1])
    if version < max(ours[0], theirs[0]):
        raise UnsupportedVersionError(f"api_key={api_key}: no common version in ours {ours}, broker's {theirs}")
    return version


def produce_expects_response(request: Message) -> bool:
    return request.acks != 0


class ClientConnection:
    """The client half of one Kafka connection. See the module docstring for states and invariants."""

    def __init__(
        self,
        client_id: str | None = None,
        *,
        inflight_requests_max: int = INFLIGHT_REQUESTS_MAX_DEFAULT,
        frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT,
    ) -> None:
        assert inflight_requests_max > 0, f"inflight_requests_max={inflight_requests_max}"
        self.client_id = client_id
        self.inflight_requests_max = inflight_requests_max
        self.state = ConnectionState.NEW
        self.broker_versions: dict[int, tuple[int, int]] = {}
        self._api_versions_version = API_VERSIONS_VERSION_MAX
        self._next_correlation_id = 0
        self._in_flight: deque[InFlight] = deque()
        self._negotiation_correlation_id: int | None = None
        self._reader = FrameReader(frame_bytes_max)

    @property
    def in_flight_count(self) -> int:
        return len(self._in_flight)

    def initiate(self) -> bytes:
        """The ApiVersions request that opens negotiation. Raises ClientProtocolError outside state NEW."""
        self._require(ConnectionState.NEW, "initiate")
        request = messages.ApiVersionsRequest(
            client_software_name=CLIENT_SOFTWARE_NAME, client_software_version=CLIENT_SOFTWARE_VERSION
        )
        correlation_id, data = self._encode(ApiKey.API_VERSIONS, self._api_versions_version, request, True)
        self._negotiation_correlation_id = correlation_id
        self.state = ConnectionState.NEGOTIATING
        return data

    def version_for(self, api_key: int) -> int:
        """The negotiated version of `api_key`. Raises UnsupportedVersionError, ClientProtocolError."""
        self._require(ConnectionState.READY, "version_for")
        return choose_version(api_key, self.broker_versions)

    def send_request(self, api_key: int, request: Message, api_version: int | None = None) -> tuple[int, bytes]:
        """(correlation_id, bytes to send) for `request`, at `api_version` or the negotiated version.

        Raises ClientProtocolError before negotiation or when inflight_requests_max requests are in flight,
        UnsupportedVersionError when no common version exists, ProtocolEncodeError for a malformed request.
        """
        correlation_id, parts, _ = self.send_request_parts(api_key, request, api_version)
        return correlation_id, b"".join(parts)

    def send_request_parts(
        self, api_key: int, request: Message, api_version: int | None = None
    ) -> tuple[int, list, bool]:
        """Like send_request, as buffers for a vectored send (record bytes are not copied), plus whether a
        response will come (False only for acks=0 Produce)."""
        self._require(ConnectionState.READY, "send_request")
        version = self.version_for(api_key) if api_version is None else api_version
        expects_response = api_key != ApiKey.PRODUCE or produce_expects_response(request)
        correlation_id, parts = self._encode_parts(api_key, version, request, expects_response)
        return correlation_id, parts, expects_response

    def _encode(self, api_key: int, api_version: int, request: Message, expects_response: bool) -> tuple[int, bytes]:
        correlation_id, parts = self._encode_parts(api_key, api_version, request, expects_response)
        return correlation_id, b"".join(parts)

    def _encode_parts(self, api_key: int, api_version: int, request: Message, expects_response: bool):
        if expects_response and len(self._in_flight) >= self.inflight_requests_max:
            raise ClientProtocolError(f"{len(self._in_flight)} requests in flight (max {self.inflight_requests_max})")
        correlation_id = self._next_correlation_id
        header = RequestHeader(int(api_key), api_version, correlation_id, self.client_id)
        parts = encode_request_parts(header, request)  # raises before any state changes
        self._next_correlation_id = (correlation_id + 1) & CORRELATION_ID_MAX
        if expects_response:
            self._in_flight.append(InFlight(correlation_id, int(api_key), api_version))
        return correlation_id, parts

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Feed bytes read from the socket. Raises ClientProtocolError for a frame length out of bounds."""
        if self.state is ConnectionState.ERROR:
            raise ClientProtocolError("connection is in state ERROR")
        try:
            self._reader.receive_data(data)
        except KafkaError as error:
            self.state = ConnectionState.ERROR
            raise ClientProtocolError(f"bad frame from broker: {error}") from None

    def next_response(self) -> tuple[int, Message] | None:
        """The next decoded response (correlation_id, message), or None until more bytes arrive.

        Negotiation responses are returned too, after they have been applied. Raises ClientProtocolError
        (unexpected or out-of-order correlation id, undecodable response; state becomes ERROR),
        UnsupportedVersionError when negotiation finds no usable ApiVersions version.
        """
        if self.state is ConnectionState.ERROR:
            raise ClientProtocolError("connection is in state ERROR")
        frame = self._reader.next_frame()
        if frame is None:
            return None
        expected = self._check_correlation(frame)
        try:
            correlation_id, response = decode_response(expected.api_key, expected.api_version, frame)
        except KafkaError as error:
            self.state = ConnectionState.ERROR
            raise ClientProtocolError(f"undecodable response to api_key={expected.api_key}: {error}") from None
        if correlation_id == self._negotiation_correlation_id and self.state is ConnectionState.NEGOTIATING:
            self._apply_api_versions(response)
        return correlation_id, response

    def _check_correlation(self, frame: bytes) -> InFlight:
        if len(frame) < INT32.size:
            self.state = ConnectionState.ERROR
            raise ClientProtocolError(f"response frame of {len(frame)} bytes has no correlation id")
        correlation_id = INT32.unpack_from(frame, 0)[0]
        if not self._in_flight:
            self.state = ConnectionState.ERROR
            raise ClientProtocolError(f"response with correlation_id={correlation_id} but nothing in flight")
        expected = self._in_flight[0]
        if correlation_id != expected.correlation_id:
            self.state = ConnectionState.ERROR
            raise ClientProtocolError(
                f"response correlation_id={correlation_id}, oldest in flight is {expected.correlation_id}"
            )
        return self._in_flight.popleft()

    def _apply_api_versions(self, response: Message) -> None:
        self._negotiation_correlation_id = None
        versions = {entry.api_key: (entry.min_version, entry.max_version) for entry in response.api_keys}
        if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
            # KIP-511: retry with the highest ApiVersions version both sides know, if lower than the last try.
            broker_max = versions.get(ApiKey.API_VERSIONS, (0, 0))[1]
            retry_version = min(broker_max, self._api_versions_version - 1)
            if retry_version < 0:
                self.state = ConnectionState.ERROR
                raise UnsupportedVersionError("broker refuses every ApiVersions version")
            self._api_versions_version = retry_version
            self.state = ConnectionState.NEW
            return
        if response.error_code != ErrorCode.NONE:
            self.state = ConnectionState.ERROR
            raise ClientProtocolError(f"ApiVersions failed with error code {response.error_code}")
        self.broker_versions = versions
        self.state = ConnectionState.READY

    def _require(self, state: ConnectionState, event: str) -> None:
        if self.state is not state:
            raise ClientProtocolError(f"{event} in state {self.state.value} (needs {state.value})")
