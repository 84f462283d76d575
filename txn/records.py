"""The records of `__transaction_state`, in Kafka's own key/value schemas (TransactionLogKey/Value.json).

    TransactionLogKey    (key version 0)
        transactional_id string
    TransactionLogValue  (version 0, or version 1: the flexible form, compact strings and arrays, a tag
                          section per partitions entry and one at the end)
        producer_id int64, producer_epoch int16, transaction_timeout_ms int32, transaction_status int8,
        transaction_partitions nullable [topic string, partition_ids [int32]],
        transaction_last_update_timestamp_ms int64, transaction_start_timestamp_ms int64
        v1 tagged fields (written only when not their default, in tag order):
            tag 0 previous_producer_id int64 (default -1), tag 1 next_producer_id int64 (default -1),
            tag 2 client_transaction_version int16 (default 0)

A value is written as version 1 exactly when one of its tagged fields is not the default (a transaction of a
client on transaction.version 2, KIP-890 part 2), else as version 0: the records of transaction.version 1
clients stay byte for byte what they were, readable by every older reader. (Kafka chooses the version from the
cluster's transaction.version feature instead; both forms decode the same here and in Kafka.)

A tombstone (value None) removes an expired transactional id. `TransactionState` carries Kafka's ids for
`transaction_status` (TransactionState.scala), so a Kafka tool reads our log and we read its.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from net.protocol.types import (
    ProtocolDecodeError,
    Reader,
    write_length,
    write_string,
    write_tagged_fields,
)
from partitions.errors import KafkaError

KEY_VERSION = 0
VALUE_VERSION = 0  # the version of a value whose v1 tagged fields are all default
VALUE_VERSION_TAGGED = 1
NO_PRODUCER_ID = -1
TAG_PREVIOUS_PRODUCER_ID = 0
TAG_NEXT_PRODUCER_ID = 1
TAG_CLIENT_TRANSACTION_VERSION = 2
_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class TransactionState(enum.IntEnum):
    """Kafka's transaction states with their log ids; `name_for_clients` is the string of Describe/List."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def name_for_clients(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def from_client_name(cls, name: str) -> "TransactionState | None":
        for state in cls:
            if state.name_for_clients == name:
                return state
        return None


@dataclass(frozen=True)
class TransactionLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: tuple[tuple[str, int], ...]  # sorted (topic, partition)
    last_update_ms: int
    start_ms: int
    # KIP-890 part 2 (TransactionLogValue v1 tagged fields): the producer id of the last finished transaction,
    # the producer id allocated when the epoch overflowed at EndTxn (used once the markers are written), and
    # the transaction.version of the client that made this transition (2 bumps the epoch per transaction).
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0

    def tagged(self) -> list[tuple[int, bytes]]:
        """The v1 tagged fields that differ from their default, in tag order."""
        fields = []
        if self.previous_producer_id != NO_PRODUCER_ID:
            fields.append((TAG_PREVIOUS_PRODUCER_ID, _INT64.pack(self.previous_producer_id)))
        if self.next_producer_id != NO_PRODUCER_ID:
            fields.append((TAG_NEXT_PRODUCER_ID, _INT64.pack(self.next_producer_id)))
        if self.client_transaction_version != 0:
            fields.append((TAG_CLIENT_TRANSACTION_VERSION, _INT16.pack(self.client_transaction_version)))
        return fields


def encode_key(transactional_id: str) -> bytes:
    out: list = [_INT16.pack(KEY_VERSION)]
    write_string(transactional_id, False, False, out)
    return b"".join(bytes(part) for part in out)


def encode_value(value: TransactionLogValue) -> bytes:
    tagged = value.tagged()
    flexible = bool(tagged)
    out: list = [_INT16.pack(VALUE_VERSION_TAGGED if flexible else VALUE_VERSION), _INT64.pack(value.producer_id),
                 _INT16.pack(value.producer_epoch), _INT32.pack(value.timeout_ms), _INT8.pack(int(value.state))]
    by_topic: dict[str, list[int]] = {}
    for topic, partition in value.partitions:
        by_topic.setdefault(topic, []).append(partition)
    write_length(len(by_topic), flexible, True, out)
    for topic in sorted(by_topic):
        write_string(topic, flexible, False, out)
        write_length(len(by_topic[topic]), flexible, True, out)
        out.extend(_INT32.pack(partition) for partition in sorted(by_topic[topic]))
        if flexible:
            write_tagged_fields([], out)
    out.append(_INT64.pack(value.last_update_ms))
    out.append(_INT64.pack(value.start_ms))
    if flexible:
        write_tagged_fields(tagged, out)
    return b"".join(bytes(part) for part in out)


def decode_key(key: bytes) -> str:
    """The transactional id of a key. Raises KafkaError (ProtocolDecodeError) for another key version."""
    reader = Reader(key)
    version = reader.int16()
    if version != KEY_VERSION:
        raise ProtocolDecodeError(f"TransactionLogKey version {version}")
    return reader.string()


def decode_value(value: bytes) -> TransactionLogValue:
    """Raises KafkaError (ProtocolDecodeError) for malformed bytes or an unknown version or status."""
    reader = Reader(value)
    version = reader.int16()
    if version not in (0, 1):
        raise ProtocolDecodeError(f"TransactionLogValue version {version}")
    flexible = version >= 1
    producer_id = reader.int64()
    producer_epoch = reader.int16()
    timeout_ms = reader.int32()
    status = reader.int8()
    try:
        state = TransactionState(status)
    except ValueError:
        raise ProtocolDecodeError(f"TransactionLogValue status {status}") from None
    partitions = []
    count = reader.array_length(compact=flexible, nullable=True, item_bytes_min=6)
    for _ in range(count or 0):
        topic = reader.string(compact=flexible)
        for _ in range(reader.array_length(compact=flexible, nullable=False, item_bytes_min=4)):
            partitions.append((topic, reader.int32()))
        if flexible:
            reader.tagged_fields()
    last_update_ms, start_ms = reader.int64(), reader.int64()
    tagged = {}
    if flexible:
        tagged = {tag: bytes(payload) for tag, payload in reader.tagged_fields()}
    return TransactionLogValue(producer_id, producer_epoch, timeout_ms, state, tuple(sorted(partitions)),
                               last_update_ms, start_ms,
                               _tagged_int(tagged, TAG_PREVIOUS_PRODUCER_ID, _INT64, NO_PRODUCER_ID),
                               _tagged_int(tagged, TAG_NEXT_PRODUCER_ID, _INT64, NO_PRODUCER_ID),
                               _tagged_int(tagged, TAG_CLIENT_TRANSACTION_VERSION, _INT16, 0))


def _tagged_int(tagged: dict[int, bytes], tag: int, fmt: struct.Struct, default: int) -> int:
    """The integer of tagged field `tag`, or its default. Raises ProtocolDecodeError for a wrong size."""
    payload = tagged.get(tag)
    if payload is None:
        return default
    if len(payload) != fmt.size:
        raise ProtocolDecodeError(f"TransactionLogValue tagged field {tag} of {len(payload)} bytes")
    return fmt.unpack(payload)[0]


def describe_record(key: bytes | None, value: bytes | None) -> dict:
    """A JSON-friendly view of a record, for `flotilla dump-log --transaction-log-decoder`."""
    if key is None:
        return {"error": "record without a key"}
    try:
        transactional_id = decode_key(key)
        decoded = None if value is None else decode_value(value)
    except KafkaError as error:
        return {"error": error.message}
    if decoded is None:
        return {"key": {"transactional_id": transactional_id}, "value": None}
    return {"key": {"transactional_id": transactional_id},
            "value": {"producer_id": decoded.producer_id, "producer_epoch": decoded.producer_epoch,
                      "timeout_ms": decoded.timeout_ms, "state": decoded.state.name_for_clients,
                      "partitions": [f"{t}-{p}" for t, p in decoded.partitions],
                      "last_update_ms": decoded.last_update_ms, "start_ms": decoded.start_ms,
                      "previous_producer_id": decoded.previous_producer_id,
                      "next_producer_id": decoded.next_producer_id,
                      "client_transaction_version": decoded.client_transaction_version}}
