"""The consumer protocol embedded in classic groups (Kafka's ConsumerProtocolSubscription and
ConsumerProtocolAssignment, clients/src/main/resources/common/message/ConsumerProtocol*.json): the bytes a
consumer puts in JoinGroup's protocol metadata and the leader puts in SyncGroup's assignments. The broker reads
and writes them only where a consumer group serves classic members (KIP-848's online migration).

Both are versioned (an int16 first), not flexible:

    Subscription  v0: Topics []string, UserData bytes (nullable)
                  v1: + OwnedPartitions [] {Topic string, Partitions []int32}
                  v2: + GenerationId int32        v3: + RackId string (nullable)
    Assignment    v0-v3: AssignedPartitions [] {Topic string, Partitions []int32}, UserData bytes (nullable)

A newer version than these is read as far as its v3 fields go, as Kafka's deserializer does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from net.protocol.types import ProtocolDecodeError, Reader, write_bytes, write_string

_INT16, _INT32 = struct.Struct(">h"), struct.Struct(">i")
ASSIGNMENT_VERSION_MAX = 3


@dataclass(frozen=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    owned: tuple[tuple[str, tuple[int, ...]], ...] = ()  # (topic, partitions), v1+
    generation_id: int = -1  # v2+
    rack_id: str | None = None  # v3+


def decode_subscription(metadata: bytes) -> Subscription:
    """Raises ValueError for bytes that are not a ConsumerProtocolSubscription."""
    try:
        reader = Reader(metadata)
        version = reader.int16()
        if version < 0:
            raise ValueError(f"subscription version {version}")
        topics = tuple(_strings(reader))
        reader.bytes_(nullable=True)  # user data: the client's own
        owned: tuple = ()
        generation, rack = -1, None
        if version >= 1:
            owned = tuple(_topic_partitions(reader))
        if version >= 2:
            generation = reader.int32()
        if version >= 3:
            rack = reader.string(nullable=True)
        return Subscription(version, topics, owned, generation, rack)
    except ProtocolDecodeError as error:
        raise ValueError(f"malformed consumer protocol subscription: {error}") from None


def decode_assignment(data: bytes) -> dict[str, tuple[int, ...]]:
    """topic -> partitions of a ConsumerProtocolAssignment (empty bytes: nothing). Raises ValueError."""
    if not data:
        return {}
    try:
        reader = Reader(data)
        if reader.int16() < 0:
            raise ValueError("negative assignment version")
        return dict(_topic_partitions(reader))
    except ProtocolDecodeError as error:
        raise ValueError(f"malformed consumer protocol assignment: {error}") from None


def encode_assignment(assigned: dict[str, list[int] | tuple[int, ...]], version: int) -> bytes:
    """A ConsumerProtocolAssignment of `assigned` (topics and partitions sorted), no user data, at `version`
    (the member's subscription version, at most 3, as Kafka answers a classic member of a consumer group)."""
    out: list = [_INT16.pack(min(max(version, 0), ASSIGNMENT_VERSION_MAX)), _INT32.pack(len(assigned))]
    for topic in sorted(assigned):
        partitions = sorted(assigned[topic])
        write_string(topic, False, False, out)
        out.append(_INT32.pack(len(partitions)))
        out += [_INT32.pack(p) for p in partitions]
    write_bytes(None, False, True, out)
    return b"".join(out)


def encode_subscription(topics: list[str], owned: dict[str, list[int]] | None = None, version: int = 1,
                        generation_id: int = -1, rack_id: str | None = None) -> bytes:
    """A ConsumerProtocolSubscription (clients' side; the tests and the simulator's classic members use it)."""
    out: list = [_INT16.pack(version), _INT32.pack(len(topics))]
    for topic in topics:
        write_string(topic, False, False, out)
    write_bytes(None, False, True, out)
    if version >= 1:
        owned = owned or {}
        out.append(_INT32.pack(len(owned)))
        for topic in sorted(owned):
            write_string(topic, False, False, out)
            out.append(_INT32.pack(len(owned[topic])))
            out += [_INT32.pack(p) for p in sorted(owned[topic])]
    if version >= 2:
        out.append(_INT32.pack(generation_id))
    if version >= 3:
        write_string(rack_id, False, True, out)
    return b"".join(out)


def _strings(reader: Reader) -> list[str]:
    count = reader.array_length(compact=False, nullable=False, item_bytes_min=2)
    return [reader.string() for _ in range(count)]


def _topic_partitions(reader: Reader) -> list[tuple[str, tuple[int, ...]]]:
    count = reader.array_length(compact=False, nullable=True, item_bytes_min=6) or 0
    items = []
    for _ in range(count):
        topic = reader.string()
        partitions = reader.array_length(compact=False, nullable=False, item_bytes_min=4)
        items.append((topic, tuple(reader.int32() for _ in range(partitions))))
    return items
