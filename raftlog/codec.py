"""Wire encoding of pysyncobj's peer messages: CBOR, with an allow-list of message shapes.

Theory of operation: pysyncobj's messages are plain dicts of str keys with ints, bools, None, bytes,
strings and lists (entries are [command, index, term]; snapshot chunks [data, is_first, is_last]). They
are CBOR-encoded as they are (tuples become arrays; pysyncobj unpacks both alike). Inbound bytes are
decoded and checked against `_SCHEMA` before pysyncobj sees them: an unknown type, a missing key or a
wrongly typed value is `MalformedRaftMessageError`, never a crash inside the tick. Forwarded proposals
(`apply_command*`) are not accepted: the adapter answers NotLeaderError instead of forwarding.
"""

from __future__ import annotations

from typing import Any

import cbor2

from partitions.errors import ErrorCode
from raftlog.port import RaftError


class MalformedRaftMessageError(RaftError):
    """A peer sent bytes that are not a well-formed raft message."""

    code = ErrorCode.CORRUPT_MESSAGE


_INT = (int,)
_REQUIRED: dict[str, dict[str, tuple[type, ...]]] = {
    "request_vote": {"term": _INT, "last_log_index": _INT, "last_log_term": _INT},
    "response_vote": {"term": _INT},
    "append_entries": {"term": _INT, "commit_index": _INT},
    "next_node_idx": {"next_node_idx": _INT, "reset": (bool,), "success": (bool,)},
    "timeout_now": {"term": _INT},
}
_OPTIONAL: dict[str, tuple[type, ...]] = {
    "term": _INT,  # required above where pysyncobj always sends it; next_node_idx has it with fix K
    "prevLogIdx": (int, type(None)),
    "prevLogTerm": (int, type(None)),
    "entries": (list,),
    "serialized": (list, type(None)),
    "transmission": (str,),
    "data": (bytes,),
}


def encode_message(message: dict[str, Any]) -> bytes:
    return cbor2.dumps(message)


def _check(condition: bool, what: str) -> None:
    if not condition:
        raise MalformedRaftMessageError(f"malformed raft message: {what}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_entries(entries: list[Any]) -> None:
    for entry in entries:
        _check(isinstance(entry, list) and len(entry) == 3, "entry is not [command, index, term]")
        _check(isinstance(entry[0], bytes) and len(entry[0]) >= 1, "entry command is not bytes")
        _check(_is_int(entry[1]) and _is_int(entry[2]) and entry[1] >= 1 and entry[2] >= 0, "entry index/term")


def decode_message(payload: bytes) -> dict[str, Any]:
    """The message dict; raises MalformedRaftMessageError for anything pysyncobj must not see."""
    try:
        message = cbor2.loads(payload)
    except (cbor2.CBORDecodeError, ValueError, TypeError, RecursionError) as error:
        raise MalformedRaftMessageError(f"not CBOR: {error}") from error
    _check(isinstance(message, dict), "not a map")
    kind = message.get("type")
    _check(kind in _REQUIRED, f"unknown type {kind!r}")
    for key, types in _REQUIRED[kind].items():
        value = message.get(key)
        _check(isinstance(value, types) and (bool in types or not isinstance(value, bool)), f"{kind}.{key}")
    for key, types in _OPTIONAL.items():
        if key in message:
            _check(isinstance(message[key], types) and not isinstance(message[key], bool), f"{kind}.{key}")
    if "entries" in message:
        _check_entries(message["entries"])
    if message.get("serialized") is not None:
        chunk = message["serialized"]
        _check(len(chunk) == 3 and isinstance(chunk[0], bytes) and isinstance(chunk[1], bool)
               and isinstance(chunk[2], bool), "serialized chunk")
    if "transmission" in message:
        _check(message["transmission"] in ("start", "process", "finish") and "data" in message, "transmission")
    return message
