"""Kafka frames: request/response headers, api dispatch and length prefixes. Bytes in, messages out; no I/O.

Theory of operation (h11-style): the broker feeds received bytes to a `FrameReader`, takes whole frames out,
and calls `decode_request(frame)` -> (RequestHeader, request message); it answers with
`encode_response(header, response)` -> bytes to send. Clients do the mirror image with `encode_request` and
`decode_response`. Nothing here reads a socket, a clock or a file.

Wire layout of a frame (Kafka protocol guide, "Common Request and Response Structure"):

    length          int32   bytes that follow (not counting these 4)
    request header  v1: api_key int16, api_version int16, correlation_id int32, client_id nullable string
                    v2: v1 + tagged fields (client_id stays a *non-compact* nullable string)
    response header v0: correlation_id int32;  v1: v0 + tagged fields
    body            the message of (api_key, api_version)

Header versions follow the body: flexible versions use request header v2 and response header v1, except that
ApiVersions responses always use header v0, so that a client that does not yet know the broker's versions can
read the error code (KIP-511). Request header v0 (no client_id; ControlledShutdown v0) is not supported.

Unknown api keys and versions outside `SUPPORTED` raise `UnsupportedRequestVersionError` (an
`UnsupportedVersionError`) carrying the parsed header, so the broker can answer an ApiVersions request of a
newer version with error 35 and its key list in a v0 response (`encode_api_versions_fallback`) and close the
connection for any other api.

Trailing bytes after a body: Kafka's request parser reads the fields a version defines and ignores what
follows, and so do we by default; `strict=True` refuses them with ProtocolDecodeError. Truncated or hostile
bodies always raise ProtocolDecodeError (a KafkaError with code INVALID_REQUEST).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from net.protocol import messages, types as t
from net.protocol.schema import Message, compiled_codec, encode_body
from net.protocol.types import ProtocolDecodeError, ProtocolEncodeError, Reader
from partitions.errors import ErrorCode, UnsupportedVersionError

# Kafka's socket.request.max.bytes default; a peer announcing a bigger frame is refused before buffering it.
FRAME_BYTES_MAX = 100 * 1024 * 1024
FRAME_PREFIX_BYTES = 4
# The fixed-width start of a request header (v1 and v2); client_id and v2's tagged fields follow.
_REQUEST_HEADER_START = struct.Struct(
    ">h"  # request_api_key
    "h"  # request_api_version
    "i"  # correlation_id
)


class ApiKey(enum.IntEnum):
    """Kafka's api keys (org.apache.kafka.common.protocol.ApiKeys)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    CREATE_DELEGATION_TOKEN = 38
    RENEW_DELEGATION_TOKEN = 39
    EXPIRE_DELEGATION_TOKEN = 40
    DESCRIBE_DELEGATION_TOKEN = 41
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    DESCRIBE_QUORUM = 55
    ALTER_PARTITION = 56
    UPDATE_FEATURES = 57
    ENVELOPE = 58
    FETCH_SNAPSHOT = 59
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    UNREGISTER_BROKER = 64
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    ALLOCATE_PRODUCER_IDS = 67
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    CONTROLLER_REGISTRATION = 70
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72
    ASSIGN_REPLICAS_TO_DIRS = 73
    LIST_CONFIG_RESOURCES = 74
    DESCRIBE_TOPIC_PARTITIONS = 75


# api_key -> (lowest, highest) version this codec implements, for both the request and the response.
SUPPORTED: dict[int, tuple[int, int]] = {
    api_key: (cls.SPEC.valid.lowest, cls.SPEC.valid.highest) for api_key, cls in sorted(messages.REQUESTS.items())
}
assert all(api_key in ApiKey.__members__.values() for api_key in SUPPORTED), sorted(SUPPORTED)


@dataclass(frozen=True)
class RequestHeader:
    """The request header (v1, or v2 in flexible versions). The response echoes `correlation_id`."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None = None


class UnsupportedRequestVersionError(UnsupportedVersionError):
    """A request whose api key or version this codec does not implement; `header` is what was parsed."""

    def __init__(self, header: RequestHeader) -> None:
        super().__init__(f"api_key={header.api_key} api_version={header.api_version} is not supported")
        self.header = header


def is_flexible(api_key: int, api_version: int) -> bool:
    """Whether (api_key, api_version) uses compact types and tagged fields. Raises KeyError for unknown keys."""
    return api_version in messages.REQUESTS[api_key].SPEC.flexible


def request_header_version(api_key: int, api_version: int) -> int:
    return 2 if is_flexible(api_key, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == ApiKey.API_VERSIONS:
        return 0  # KIP-511: always v0, so any client can read the error code
    return 1 if is_flexible(api_key, api_version) else 0


def is_supported(api_key: int, api_version: int) -> bool:
    versions = SUPPORTED.get(api_key)
    return versions is not None and versions[0] <= api_version <= versions[1]


# Requests.


def decode_request_header(reader: Reader) -> RequestHeader:
    """Read a request header v1 fields (v2's tagged fields are read by the caller once the version is known).

    Raises ProtocolDecodeError on a short or malformed header.
    """
    api_key = reader.int16()
    api_version = reader.int16()
    correlation_id = reader.int32()
    client_id = reader.string(compact=False, nullable=True)
    return RequestHeader(api_key, api_version, correlation_id, client_id)


def decode_request(frame: bytes | bytearray | memoryview, *, strict: bool = False) -> tuple[RequestHeader, Message]:
    """Decode one request frame (the bytes after the 4-byte length prefix).

    Raises UnsupportedRequestVersionError (with `.header`) for an unknown api key or version, and
    ProtocolDecodeError for bytes that are not a valid request (and for trailing bytes when `strict`).
    Records fields are memoryview slices of `frame` (no copy): keep `frame` unchanged while they are used.
    """
    reader = Reader(frame)
    header = decode_request_header(reader)
    if not is_supported(header.api_key, header.api_version):
        raise UnsupportedRequestVersionError(header)
    if is_flexible(header.api_key, header.api_version):
        reader.tagged_fields()  # no header tags are defined for requests we serve; unknown ones are skipped
    request_class = messages.REQUESTS[header.api_key]
    request = compiled_codec(request_class, header.api_version).decode(reader)
    _check_trailing(reader, strict, request_class, header.api_version)
    return header, request


def encode_request(header: RequestHeader, request: Message) -> bytes:
    """The request frame, length prefix included. Raises ProtocolEncodeError, UnsupportedVersionError."""
    body = b"".join(_request_body_parts(header, request, []))
    return _length_prefix(len(body)) + body


def encode_request_parts(header: RequestHeader, request: Message) -> list:
    """Like encode_request, as a list of buffers for a vectored send (records are not copied)."""
    return _prefix_length(_request_body_parts(header, request, [b""]))


def _request_body_parts(header: RequestHeader, request: Message, out: list) -> list:
    """`out` with the request header and body appended as buffers."""
    _check_message(request, header.api_key, header.api_version, "request")
    out.append(_REQUEST_HEADER_START.pack(header.api_key, header.api_version, header.correlation_id))
    t.write_string(header.client_id, compact=False, nullable=True, out=out)
    if request_header_version(header.api_key, header.api_version) == 2:
        t.write_tagged_fields([], out)
    encode_body(request, header.api_version, out)
    return out


# Responses.


def encode_response(header: RequestHeader, response: Message) -> bytes:
    """The response frame to `header`'s request, length prefix included.

    Raises ProtocolEncodeError when `response` does not fit the api or version, UnsupportedVersionError when
    the version is not implemented.
    """
    if header.api_key == ApiKey.FETCH:  # records may be file slices of a log read (sent by sendfile at the edge)
        return b"".join(t.materialized(encode_response_parts(header, response)))
    body = b"".join(_response_body_parts(header, response, []))
    return _length_prefix(len(body)) + body


def encode_response_parts(header: RequestHeader, response: Message) -> list:
    """Like encode_response, as a list of buffers for a vectored send (records are not copied). A Fetch
    response's records may be file slices (partitions.log.FileSlice: `.read()`, `.handle.fileno()`)."""
    return _prefix_length(_response_body_parts(header, response, [b""]))


def _response_body_parts(header: RequestHeader, response: Message, out: list) -> list:
    """`out` with the response header and body appended as buffers."""
    _check_message(response, header.api_key, header.api_version, "response")
    out.append(t.INT32.pack(header.correlation_id))
    if response_header_version(header.api_key, header.api_version) == 1:
        out.append(b"\x00")  # no header tagged fields
    encode_body(response, header.api_version, out)
    return out


def decode_response(
    api_key: int, api_version: int, frame: bytes | bytearray | memoryview, *, strict: bool = False
) -> tuple[int, Message]:
    """Decode a response frame (after the length prefix) to the request (api_key, api_version) we sent.

    Returns (correlation_id, response). An ApiVersions response carrying UNSUPPORTED_VERSION is decoded as v0,
    whatever version we asked for, because that is how brokers send it (KIP-511); the client then retries
    with a version from its api_keys. Raises UnsupportedVersionError for versions we do not implement and
    ProtocolDecodeError for malformed bytes (and trailing bytes when `strict`).
    """
    if not is_supported(api_key, api_version):
        raise UnsupportedVersionError(f"api_key={api_key} api_version={api_version} is not supported")
    reader = Reader(frame)
    correlation_id = reader.int32()
    if response_header_version(api_key, api_version) == 1:
        reader.tagged_fields()
    response_class = messages.RESPONSES[api_key]
    if api_key == ApiKey.API_VERSIONS and _peek_error_code(reader) == ErrorCode.UNSUPPORTED_VERSION:
        api_version = 0  # KIP-511: a broker refusing our ApiVersions version answers in v0
    response = compiled_codec(response_class, api_version).decode(reader)
    _check_trailing(reader, strict, response_class, api_version)
    return correlation_id, response


def _peek_error_code(reader: Reader) -> int:
    """The int16 at the cursor, without moving it (ApiVersionsResponse starts with its error code)."""
    position = reader.pos
    error_code = reader.int16()
    reader.pos = position
    return error_code


def api_versions_response(
    error_code: int = ErrorCode.NONE, supported: dict[int, tuple[int, int]] | None = None, throttle_time_ms: int = 0,
    features: "Features | None" = None,
) -> Message:
    """An ApiVersionsResponse listing `supported` (default: everything this codec implements) and, from v3,
    the broker's supported and finalized `features` (tagged fields, left out when there are none)."""
    response_class = messages.ApiVersionsResponse
    api_keys = [
        response_class.ApiVersion(api_key=api_key, min_version=lowest, max_version=highest)
        for api_key, (lowest, highest) in sorted((supported or SUPPORTED).items())
    ]
    response = response_class(error_code=int(error_code), api_keys=api_keys, throttle_time_ms=throttle_time_ms)
    if features is not None:
        response.supported_features = [response_class.SupportedFeatureKey(name=name, min_version=low, max_version=high)
                                       for name, (low, high) in sorted(features.supported.items())]
        response.finalized_features_epoch = features.finalized_epoch
        response.finalized_features = [response_class.FinalizedFeatureKey(
            name=name, max_version_level=level, min_version_level=level)
            for name, level in sorted(features.finalized.items())]
    return response


@dataclass(frozen=True)
class Features:
    """What ApiVersions v3+ says of the cluster's features (KIP-584): the levels this broker supports and the
    finalized ones clients act on (a Kafka 4.0 producer uses transaction version 2 when transaction.version
    is finalized at 2 or more: its TransactionManager.maybeUpdateTransactionV2Enabled)."""

    supported: dict[str, tuple[int, int]]
    finalized: dict[str, int]
    finalized_epoch: int


def encode_api_versions_fallback(header: RequestHeader, supported: dict[int, tuple[int, int]] | None = None) -> bytes:
    """KIP-511: the answer to an ApiVersions request of a version we do not implement.

    A v0 ApiVersionsResponse with UNSUPPORTED_VERSION and our key list, so the client retries with a version
    we know. `header` is the one carried by UnsupportedRequestVersionError.
    """
    assert header.api_key == ApiKey.API_VERSIONS, f"api_key={header.api_key}"
    v0_header = RequestHeader(header.api_key, 0, header.correlation_id, header.client_id)
    return encode_response(v0_header, api_versions_response(ErrorCode.UNSUPPORTED_VERSION, supported))


# Framing.


class FrameReader:
    """Splits a byte stream into frames (h11-style: `receive_data`, then `next_frame` until None).

    A frame length that is negative or above `frame_bytes_max` raises ProtocolDecodeError as soon as its
    4-byte prefix arrives, before its bytes are buffered; the connection should then be closed.
    """

    def __init__(self, frame_bytes_max: int = FRAME_BYTES_MAX) -> None:
        assert frame_bytes_max > 0, f"frame_bytes_max={frame_bytes_max}"
        self.frame_bytes_max = frame_bytes_max
        self._buffer = bytearray()

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer)

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        self._buffer += data
        if len(self._buffer) >= FRAME_PREFIX_BYTES:
            self._frame_size()  # refuse a hostile length before buffering more

    def _frame_size(self) -> int:
        size = t.INT32.unpack_from(self._buffer, 0)[0]
        if not 0 <= size <= self.frame_bytes_max:
            raise ProtocolDecodeError(f"frame length {size} outside 0..{self.frame_bytes_max}")
        return size

    def next_frame(self) -> bytes | None:
        """The next whole frame without its length prefix, or None until more data arrives."""
        if len(self._buffer) < FRAME_PREFIX_BYTES:
            return None
        end = FRAME_PREFIX_BYTES + self._frame_size()
        if len(self._buffer) < end:
            return None
        with memoryview(self._buffer) as view:  # one copy (a bytearray slice would be a second)
            frame = bytes(view[FRAME_PREFIX_BYTES:end])
        del self._buffer[:end]
        return frame


# Helpers.


def _check_message(message: Message, api_key: int, api_version: int, kind: str) -> None:
    if not is_supported(api_key, api_version):
        raise UnsupportedVersionError(f"api_key={api_key} api_version={api_version} is not supported")
    if not isinstance(message, Message) or message.API_KEY != api_key or message.SPEC.kind != kind:
        raise ProtocolEncodeError(f"{type(message).__name__} is not a {kind} of api key {api_key}")


def _prefix_length(out: list) -> list:
    assert out[0] == b"", "slot 0 is reserved for the length prefix"
    out[0] = _length_prefix(t.chunks_size(out))
    return out


def _length_prefix(size: int) -> bytes:
    if size > 0x7FFFFFFF:
        raise ProtocolEncodeError(f"frame of {size} bytes exceeds the int32 length prefix")
    return t.INT32.pack(size)


def _check_trailing(reader: Reader, strict: bool, cls: type, api_version: int) -> None:
    if strict and reader.remaining:
        raise ProtocolDecodeError(f"{reader.remaining} trailing bytes after {cls.__name__} v{api_version}")
