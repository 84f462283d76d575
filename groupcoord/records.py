"""The records of `__consumer_offsets`, in Kafka's own key/value schemas, so that Kafka's tools can read them.

Every record key starts with an int16 "key version" that names the record type (Kafka's
group-coordinator/src/main/resources/common/message/*Key.json); the value starts with its own int16 version.
None of the versions written here is flexible, so each is a plain sequence of Kafka primitives:

    OffsetCommitKey    (key version 1; 0 is the same layout, written by Kafka 0.8)
        group string, topic string, partition int32
    OffsetCommitValue  (version 3)
        offset int64, leader_epoch int32, metadata string, commit_timestamp int64
        (v1 adds expire_timestamp int64 after commit_timestamp; v0 has neither epoch nor expiry)
    GroupMetadataKey   (key version 2)
        group string
    GroupMetadataValue (version 3)
        protocol_type string, generation int32, protocol nullable string, leader nullable string,
        current_state_timestamp int64,
        members [member_id string, group_instance_id nullable string, client_id string, client_host string,
                 rebalance_timeout int32, session_timeout int32, subscription bytes, assignment bytes]

A tombstone (value None) deletes what its key names. Key versions 3 and above are the KIP-848 consumer-group
records; `register_key_type` lets their module add decoders, and keys of unknown versions decode as
`UnknownRecordKey` (a newer writer's record is skipped on replay, as Kafka's loader does).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from net.protocol.types import ProtocolDecodeError, Reader, write_bytes, write_string
from partitions.errors import KafkaError

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


@dataclass(frozen=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1  # only in value version 1


@dataclass(frozen=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadata, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class UnknownRecordKey:
    version: int


# --- encoding ------------------------------------------------------------------------------------------


def _join(parts: list) -> bytes:
    return b"".join(bytes(part) if not isinstance(part, bytes) else part for part in parts)


def encode_key(key: OffsetCommitKey | GroupMetadataKey) -> bytes:
    out: list = []
    if isinstance(key, OffsetCommitKey):
        out.append(_INT16.pack(OFFSET_COMMIT_KEY_VERSION))
        write_string(key.group, False, False, out)
        write_string(key.topic, False, False, out)
        out.append(_INT32.pack(key.partition))
    elif isinstance(key, GroupMetadataKey):
        out.append(_INT16.pack(GROUP_METADATA_KEY_VERSION))
        write_string(key.group, False, False, out)
    else:
        raise TypeError(f"not a classic __consumer_offsets key: {key!r}")
    return _join(out)


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    out: list = [_INT16.pack(OFFSET_COMMIT_VALUE_VERSION), _INT64.pack(value.offset), _INT32.pack(value.leader_epoch)]
    write_string(value.metadata, False, False, out)
    out.append(_INT64.pack(value.commit_timestamp))
    return _join(out)


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    out: list = [_INT16.pack(GROUP_METADATA_VALUE_VERSION)]
    write_string(value.protocol_type, False, False, out)
    out.append(_INT32.pack(value.generation))
    write_string(value.protocol, False, True, out)
    write_string(value.leader, False, True, out)
    out.append(_INT64.pack(value.current_state_timestamp))
    out.append(_INT32.pack(len(value.members)))
    for member in value.members:
        write_string(member.member_id, False, False, out)
        write_string(member.group_instance_id, False, True, out)
        write_string(member.client_id, False, False, out)
        write_string(member.client_host, False, False, out)
        out.append(_INT32.pack(member.rebalance_timeout))
        out.append(_INT32.pack(member.session_timeout))
        write_bytes(member.subscription, False, False, out)
        write_bytes(member.assignment, False, False, out)
    return _join(out)


# --- decoding ------------------------------------------------------------------------------------------

KeyDecoder = Callable[[Reader, int], Any]
ValueDecoder = Callable[[Reader], Any]
_KEY_DECODERS: dict[int, tuple[KeyDecoder, ValueDecoder]] = {}


def register_key_type(versions: tuple[int, ...], key_decoder: KeyDecoder, value_decoder: ValueDecoder) -> None:
    """Decode keys of these key versions (and their values) with these functions (KIP-848 records)."""
    for version in versions:
        assert version not in _KEY_DECODERS, f"key version {version} registered twice"
        _KEY_DECODERS[version] = (key_decoder, value_decoder)


def _decode_offset_commit_key(reader: Reader, version: int) -> OffsetCommitKey:
    return OffsetCommitKey(reader.string(), reader.string(), reader.int32())


def _decode_offset_commit_value(reader: Reader) -> OffsetCommitValue:
    version = reader.int16()
    if not 0 <= version <= 4:
        raise ProtocolDecodeError(f"OffsetCommitValue version {version}")
    offset = reader.int64()
    leader_epoch = reader.int32() if version >= 3 else -1
    metadata = reader.string()
    commit_timestamp = reader.int64()
    expire_timestamp = reader.int64() if version == 1 else -1
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


def _decode_group_metadata_key(reader: Reader, version: int) -> GroupMetadataKey:
    return GroupMetadataKey(reader.string())


def _decode_group_metadata_value(reader: Reader) -> GroupMetadataValue:
    version = reader.int16()
    if not 0 <= version <= 3:
        raise ProtocolDecodeError(f"GroupMetadataValue version {version}")
    protocol_type = reader.string()
    generation = reader.int32()
    protocol = reader.string(nullable=True)
    leader = reader.string(nullable=True)
    current_state_timestamp = reader.int64() if version >= 2 else -1
    members = []
    for _ in range(reader.array_length(compact=False, nullable=False, item_bytes_min=20)):
        member_id = reader.string()
        instance_id = reader.string(nullable=True) if version >= 3 else None
        client_id, client_host = reader.string(), reader.string()
        rebalance_timeout = reader.int32() if version >= 1 else -1
        session_timeout = reader.int32()
        subscription, assignment = bytes(reader.bytes_()), bytes(reader.bytes_())
        members.append(MemberMetadata(member_id, instance_id, client_id, client_host, rebalance_timeout,
                                      session_timeout, subscription, assignment))
    return GroupMetadataValue(protocol_type, generation, protocol, leader, current_state_timestamp, tuple(members))


register_key_type((0, 1), _decode_offset_commit_key, _decode_offset_commit_value)
register_key_type((2,), _decode_group_metadata_key, _decode_group_metadata_value)


def decode_record(key: bytes, value: bytes | None) -> tuple[Any, Any]:
    """(key, value or None for a tombstone) of one `__consumer_offsets` record. Raises KafkaError
    (ProtocolDecodeError) for malformed bytes; an unknown key version decodes as UnknownRecordKey."""
    reader = Reader(key)
    version = reader.int16()
    decoders = _KEY_DECODERS.get(version)
    if decoders is None:
        return UnknownRecordKey(version), None
    decoded_key = decoders[0](reader, version)
    if value is None:
        return decoded_key, None
    return decoded_key, decoders[1](Reader(value))


def describe_record(key: bytes | None, value: bytes | None) -> dict:
    """A JSON-friendly view of a record, for `flotilla dump-log --offsets-decoder`."""
    if key is None:
        return {"error": "record without a key"}
    try:
        decoded_key, decoded_value = decode_record(key, value)
    except KafkaError as error:
        return {"error": error.message}
    return {"key": {"type": type(decoded_key).__name__, **_plain(decoded_key)},
            "value": None if decoded_value is None else {"type": type(decoded_value).__name__, **_plain(decoded_value)}}


def _plain(item: Any) -> dict:
    if hasattr(item, "to_dict"):  # a value built from a codec spec (groupcoord/consumer_records.py)
        return {name: (str(v) if isinstance(v, uuid.UUID) else v) for name, v in _uuids_as_text(item.to_dict()).items()}
    fields = {}
    for name, value in vars(item).items():
        if isinstance(value, bytes):
            fields[name] = value.hex()
        elif isinstance(value, tuple):
            fields[name] = [_plain(v) if hasattr(v, "__dict__") else v for v in value]
        else:
            fields[name] = value
    return fields


def _uuids_as_text(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _uuids_as_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_uuids_as_text(v) for v in value]
    return str(value) if isinstance(value, uuid.UUID) else value
