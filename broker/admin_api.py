"""Flotilla's private admin API on the Kafka listener: quorum status and metadata for the CLI.

Kafka has no API for "the metadata image" or "the Raft voters' progress" that fits Flotilla, so the CLI's
`-b HOST:PORT` path uses a private API key that is never advertised in ApiVersions (real Kafka clients never
send it). A request is a standard request header v1 with `ADMIN_API_KEY`, version 0, followed by a CBOR map
{"kind": ...}; the response is the correlation id followed by a CBOR map. Bodies are decoded with cbor2's
plain types only (no tags that build objects), and anything malformed closes the connection.
"""

from __future__ import annotations

import struct
from typing import Any

import cbor2

from net.protocol.codec import RequestHeader
from net.protocol.types import Reader
from partitions.errors import ErrorCode, KafkaError

ADMIN_API_KEY = 32000
ADMIN_API_VERSION = 0
ADMIN_BODY_BYTES_MAX = 1024 * 1024
_HEADER = struct.Struct(">hhi")
_CORRELATION = struct.Struct(">i")
_LENGTH = struct.Struct(">i")


def peek_api_key(frame: bytes) -> int | None:
    return struct.unpack_from(">h", frame, 0)[0] if len(frame) >= 2 else None


def decode_admin_request(frame: bytes) -> tuple[RequestHeader, dict[str, Any]]:
    """Raises KafkaError(INVALID_REQUEST) for anything that is not an admin request."""
    try:
        reader = Reader(frame)
        api_key, api_version, correlation_id = reader.int16(), reader.int16(), reader.int32()
        client_id = reader.string(compact=False, nullable=True)
        body = bytes(frame[reader.pos :])
        if api_key != ADMIN_API_KEY or api_version != ADMIN_API_VERSION or len(body) > ADMIN_BODY_BYTES_MAX:
            raise ValueError(f"api_key={api_key} api_version={api_version} size={len(body)}")
        request = cbor2.loads(body, tag_hook=_refuse_tags)
    except KafkaError:
        raise
    except Exception as error:  # cbor2 and the reader raise several types on garbage
        raise KafkaError(f"malformed admin request: {error}", ErrorCode.INVALID_REQUEST) from None
    if not isinstance(request, dict) or not isinstance(request.get("kind"), str):
        raise KafkaError("admin request must be a map with a 'kind'", ErrorCode.INVALID_REQUEST)
    return RequestHeader(api_key, api_version, correlation_id, client_id), request


def _refuse_tags(decoder: Any, tag: Any) -> Any:
    raise ValueError(f"CBOR tag {tag.tag} is not allowed")


def encode_admin_response(header: RequestHeader, response: dict[str, Any]) -> bytes:
    body = _CORRELATION.pack(header.correlation_id) + cbor2.dumps(response)
    return _LENGTH.pack(len(body)) + body


def encode_admin_request(correlation_id: int, client_id: str, request: dict[str, Any]) -> bytes:
    client = client_id.encode()
    body = _HEADER.pack(ADMIN_API_KEY, ADMIN_API_VERSION, correlation_id) + struct.pack(">h", len(client)) + client
    body += cbor2.dumps(request)
    return _LENGTH.pack(len(body)) + body


def decode_admin_response(frame: bytes) -> tuple[int, dict[str, Any]]:
    if len(frame) < 4:
        raise KafkaError("truncated admin response", ErrorCode.CORRUPT_MESSAGE)
    (correlation_id,) = _CORRELATION.unpack_from(frame, 0)
    try:
        response = cbor2.loads(bytes(frame[4:]), tag_hook=_refuse_tags)
    except Exception as error:
        raise KafkaError(f"malformed admin response: {error}", ErrorCode.CORRUPT_MESSAGE) from None
    if not isinstance(response, dict):
        raise KafkaError("admin response is not a map", ErrorCode.CORRUPT_MESSAGE)
    return correlation_id, response
