"""The record batch v2 codec: whole batches to and from records, for clients, tests and compaction.

Theory of operation: partitions/batch.py owns the 61-byte header view that the broker's hot path uses; this
module owns everything past the header. `build_batch` encodes records into one complete batch (header, CRC-32C,
compression); `decode_batch` validates one batch (length, magic, CRC), decompresses its records section within a
bound, and decodes every record with strict bounds checks. Decoding hostile bytes raises only KafkaError
subclasses (CorruptRecordError for bytes that cannot be a batch, InvalidRecordError for a well-formed batch that
breaks Kafka's rules, plus the typed errors of batch.py and compression.py); never IndexError, struct.error or
UnicodeDecodeError. The broker itself never calls this per record on produce or fetch (DESIGN principle 5).

Records section (after the header, compressed as a whole when attributes bits 0-2 are non-zero). All varints
are zig-zag encoded signed varints, as Java's ByteUtils.writeVarint / writeVarlong write them:

    Record =>
      length          varint    bytes after this field
      attributes      int8      unused, 0
      timestamp_delta varlong   timestamp - batch base_timestamp (two's-complement wrap, as Java)
      offset_delta    varint    offset - batch base_offset
      key_length      varint    -1 for a null key
      key             bytes
      value_length    varint    -1 for a null value
      value           bytes
      headers_count   varint
      Header =>
        key_length    varint    >= 0 (a header key is a non-null string)
        key           utf-8
        value_length  varint    -1 for a null value
        value         bytes

Control batches (attributes bit 5, always transactional for markers) hold one control record: key =
version int16 (0) + type int16 (0 ABORT, 1 COMMIT); value = version int16 (0) + coordinator_epoch int32.

Header keys are decoded as UTF-8 with surrogateescape, so a key that is not valid UTF-8 (Java would decode it
with replacement characters) survives a decode/encode round trip byte for byte, as compaction needs.

Performance: the decoder's loop is written out by hand, with the one- and two-byte varint cases inline (the
common ones: short fields and lengths under 8 KiB), because clients decode millions of records.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from partitions.batch import (
    CONTROL_MASK,
    CRC_POSITION,
    DELETE_HORIZON_MASK,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    compute_crc,
    iter_batches,
    validate_batch,
)
from partitions.compression import DECOMPRESSED_BYTES_MAX_DEFAULT, codec_from_id, compress, decompress
from partitions.errors import CorruptRecordError, InvalidRecordError

NO_TIMESTAMP = -1  # Kafka's RecordBatch.NO_TIMESTAMP

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
VARINT_BYTES_MAX = 5
VARLONG_BYTES_MAX = 10
# length(1) attributes(1) timestamp_delta(1) offset_delta(1) key_length(1) value_length(1) headers_count(1)
RECORD_BYTES_MIN = 7
RECORD_BODY_BYTES_MIN = RECORD_BYTES_MIN - 1
HEADER_ENTRY_BYTES_MIN = 2  # key_length(1) value_length(1)
assert RECORD_BODY_BYTES_MIN == 6, RECORD_BODY_BYTES_MIN

CONTROL_RECORD_VERSION = 0
CONTROL_KEY = struct.Struct(
    ">h"  # version: 0
    "h"  # type: ControlRecordType
)
END_TXN_MARKER_VALUE = struct.Struct(
    ">h"  # version: 0
    "i"  # coordinator_epoch
)


class ControlRecordType(enum.IntEnum):
    """The type field of a control record key (Kafka's ControlRecordType)."""

    ABORT = 0
    COMMIT = 1


ABORT = ControlRecordType.ABORT
COMMIT = ControlRecordType.COMMIT


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record: its absolute offset, its timestamp in ms, and its payload."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    attributes: int = 0


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """One validated batch: its header and every record in it (none for an empty batch)."""

    header: BatchHeader
    records: list[Record]


# ---------------------------------------------------------------------------------------------------------
# Varints (zig-zag, little-endian base 128), as Java's ByteUtils.

_SMALL_VARINT_LIMIT = 8192  # values in [-8192, 8192) zig-zag below 2**14: one or two bytes


def _encode_unsigned(zigzag: int) -> bytes:
    out = bytearray()
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


_SMALL_VARINTS: list[bytes] = [
    _encode_unsigned((value << 1) ^ (value >> 63)) for value in range(-_SMALL_VARINT_LIMIT, _SMALL_VARINT_LIMIT)
]
_NULL_LENGTH = _SMALL_VARINTS[-1 + _SMALL_VARINT_LIMIT]
assert _NULL_LENGTH == b"\x01", _NULL_LENGTH


def encode_varint(value: int) -> bytes:
    """The zig-zag varint of an int32. Raises ValueError outside the int32 range."""
    if -_SMALL_VARINT_LIMIT <= value < _SMALL_VARINT_LIMIT:
        return _SMALL_VARINTS[value + _SMALL_VARINT_LIMIT]
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint {value} outside the int32 range")
    return _encode_unsigned(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def encode_varlong(value: int) -> bytes:
    """The zig-zag varlong of an int64. Raises ValueError outside the int64 range."""
    if -_SMALL_VARINT_LIMIT <= value < _SMALL_VARINT_LIMIT:
        return _SMALL_VARINTS[value + _SMALL_VARINT_LIMIT]
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong {value} outside the int64 range")
    return _encode_unsigned(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def _read_varint(buffer: bytes, position: int, bytes_max: int) -> tuple[int, int]:
    """(signed value, next position) of the varint at `position`. Raises CorruptRecordError when it runs
    longer than `bytes_max` bytes or past 32/64 bits; IndexError at the end of `buffer` (callers wrap it)."""
    zigzag = 0
    shift = 0
    for index in range(position, position + bytes_max):
        byte = buffer[index]
        zigzag |= (byte & 0x7F) << shift
        if byte < 0x80:
            bits = 32 if bytes_max == VARINT_BYTES_MAX else 64  # 5 bytes carry 35 bits, 10 carry 70
            if zigzag >> bits:
                raise CorruptRecordError(f"varint at byte {position} overflows {bits} bits")
            return (zigzag >> 1) ^ -(zigzag & 1), index + 1
        shift += 7
    raise CorruptRecordError(f"varint at byte {position} longer than {bytes_max} bytes")


def read_varint(buffer: bytes | bytearray | memoryview, position: int, bytes_max: int) -> tuple[int, int]:
    """(signed value, next position) of the zig-zag varint (`bytes_max` VARINT_BYTES_MAX) or varlong
    (VARLONG_BYTES_MAX) at `position`: the one rule for every reader of records (the Spark source's too).
    Raises CorruptRecordError when it is truncated, too long, or past 32/64 bits."""
    try:
        return _read_varint(buffer, position, bytes_max)
    except IndexError:
        raise CorruptRecordError(f"varint at byte {position} truncated") from None


_decode = read_varint


def decode_varint(buffer: bytes | bytearray | memoryview, position: int = 0) -> tuple[int, int]:
    """(int32 value, next position) of the zig-zag varint at `position`. Raises CorruptRecordError when the
    varint is truncated, longer than 5 bytes, or outside the int32 range."""
    return _decode(buffer, position, VARINT_BYTES_MAX)


def decode_varlong(buffer: bytes | bytearray | memoryview, position: int = 0) -> tuple[int, int]:
    """(int64 value, next position) of the zig-zag varlong at `position`. Raises CorruptRecordError when
    the varlong is truncated, longer than 10 bytes, or outside the int64 range."""
    return _decode(buffer, position, VARLONG_BYTES_MAX)


def _wrap_int64(value: int) -> int:
    """Two's-complement wrap to int64, as Java's long arithmetic does."""
    return ((value + (1 << 63)) & 0xFFFFFFFFFFFFFFFF) - (1 << 63)


# ---------------------------------------------------------------------------------------------------------
# Encoding.

_ATTRIBUTE_BYTES = [bytes([attributes]) for attributes in range(256)]


def _entries(
    records_or_kv: Iterable[Record | tuple], base_offset: int, default_timestamp: int
) -> list[tuple[int, int, object, object, object, int]]:
    """(offset_delta, timestamp, key, value, headers, attributes) per item. A Record keeps its offset
    (relative to base_offset); a (key, value[, headers[, timestamp]]) tuple takes its index."""
    entries = []
    previous_delta = -1
    for index, item in enumerate(records_or_kv):
        if type(item) is Record:
            delta, timestamp = item.offset - base_offset, item.timestamp
            key, value, headers, attributes = item.key, item.value, item.headers, item.attributes
        else:
            delta, key, value = index, item[0], item[1]
            headers = item[2] if len(item) > 2 and item[2] is not None else ()
            timestamp = item[3] if len(item) > 3 else None
            attributes = 0
        if timestamp is None:
            timestamp = default_timestamp
        if not previous_delta < delta <= INT32_MAX:
            raise ValueError(f"record {index}: offset delta {delta} after {previous_delta} (base {base_offset})")
        if not INT64_MIN <= timestamp <= INT64_MAX:
            raise ValueError(f"record {index}: timestamp {timestamp} outside the int64 range")
        previous_delta = delta
        entries.append((delta, timestamp, key, value, headers, attributes))
    return entries


def _encode_headers(headers) -> list[bytes]:
    parts = [encode_varint(len(headers))]
    for header_key, header_value in headers:
        encoded_key = header_key.encode("utf-8", "surrogateescape")
        parts.append(encode_varint(len(encoded_key)))
        parts.append(encoded_key)
        if header_value is None:
            parts.append(_NULL_LENGTH)
        else:
            parts.append(encode_varint(len(header_value)))
            parts.append(header_value)
    return parts


def _encode_records(entries, base_timestamp: int) -> bytes:
    """The records section (uncompressed) for normalized entries."""
    small, limit = _SMALL_VARINTS, _SMALL_VARINT_LIMIT
    attribute_bytes, null_length, no_headers = _ATTRIBUTE_BYTES, _NULL_LENGTH, _SMALL_VARINTS[limit]
    out: list[bytes] = []
    for delta, timestamp, key, value, headers, attributes in entries:
        timestamp_delta = timestamp - base_timestamp
        if not INT64_MIN <= timestamp_delta <= INT64_MAX:
            timestamp_delta = _wrap_int64(timestamp_delta)
        parts = [
            attribute_bytes[attributes & 0xFF],
            small[timestamp_delta + limit] if -limit <= timestamp_delta < limit else encode_varlong(timestamp_delta),
            small[delta + limit] if delta < limit else encode_varint(delta),
        ]
        if key is None:
            parts.append(null_length)
        else:
            size = len(key)
            parts.append(small[size + limit] if size < limit else encode_varint(size))
            parts.append(key)
        if value is None:
            parts.append(null_length)
        else:
            size = len(value)
            parts.append(small[size + limit] if size < limit else encode_varint(size))
            parts.append(value)
        if headers:
            parts.extend(_encode_headers(headers))
        else:
            parts.append(no_headers)
        body = b"".join(parts)
        size = len(body)
        out.append(small[size + limit] if size < limit else encode_varint(size))
        out.append(body)
    return b"".join(out)


def build_batch(
    records_or_kv: Iterable[Record | tuple],
    *,
    base_offset: int = 0,
    base_timestamp: int | None = None,
    compression: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    log_append_time: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    delete_horizon_ms: int | None = None,
    last_offset_delta: int | None = None,
) -> bytes:
    """One complete record batch v2 (header, CRC-32C, records compressed with `compression`).

    Items are Records (their offsets, relative to base_offset, give the offset deltas: gaps are allowed,
    as in a compacted batch) or (key, value[, headers[, timestamp]]) tuples (offset deltas 0..n-1). An item
    without a timestamp takes base_timestamp, or NO_TIMESTAMP (-1) when that is None too. The header's
    base_timestamp is `base_timestamp` when given, else the first record's timestamp; deltas are varlongs
    that wrap like Java's long arithmetic, so any int64 timestamps round-trip. max_timestamp is the largest
    record timestamp; with log_append_time the timestamp-type bit is set and readers give every record
    max_timestamp. delete_horizon_ms (KIP-534) sets attributes bit 6 and takes base_timestamp's place.
    last_offset_delta defaults to the last record's delta (0 for an empty batch); a compacted batch may keep
    a larger one. Raises ValueError for out-of-range fields or non-increasing offsets,
    UnsupportedCompressionTypeError for an unknown codec id.
    """
    codec = codec_from_id(compression)
    if delete_horizon_ms is not None and base_timestamp is not None:
        raise ValueError("base_timestamp and delete_horizon_ms share one header field; pass one")
    entries = _entries(records_or_kv, base_offset, NO_TIMESTAMP if base_timestamp is None else base_timestamp)
    if delete_horizon_ms is not None:
        header_timestamp = delete_horizon_ms
    elif base_timestamp is not None:
        header_timestamp = base_timestamp
    else:
        header_timestamp = entries[0][1] if entries else NO_TIMESTAMP
    max_timestamp = max(entry[1] for entry in entries) if entries else header_timestamp
    last_delta = entries[-1][0] if entries else 0
    if last_offset_delta is not None:
        if last_offset_delta < last_delta:
            raise ValueError(f"last_offset_delta {last_offset_delta} below the last record's delta {last_delta}")
        last_delta = last_offset_delta
    section = _encode_records(entries, header_timestamp)
    if codec and entries:
        section = compress(codec, section)
    attributes = (
        (int(codec) if entries else 0)  # an empty batch is written uncompressed, as Java's writeEmptyHeader does
        | (TIMESTAMP_TYPE_MASK if log_append_time else 0)
        | (TRANSACTIONAL_MASK if is_transactional else 0)
        | (CONTROL_MASK if is_control else 0)
        | (DELETE_HORIZON_MASK if delete_horizon_ms is not None else 0)
    )
    fields = (
        base_offset, HEADER_SIZE + len(section) - LOG_OVERHEAD, partition_leader_epoch, MAGIC_V2, 0,
        attributes, last_delta, header_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence,
        len(entries),
    )  # fmt: skip
    try:
        header = HEADER.pack(*fields)
    except struct.error as error:
        raise ValueError(f"record batch header field out of range: {error}; fields {fields}") from None
    batch = bytearray(header)
    batch += section
    struct.pack_into(">I", batch, CRC_POSITION, compute_crc(batch))
    return bytes(batch)


def build_control_batch(
    kind: ControlRecordType | int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transaction marker: a transactional control batch holding one ABORT or COMMIT control record.
    Raises ValueError for another kind or out-of-range fields."""
    if kind not in (ABORT, COMMIT):
        raise ValueError(f"control record type {kind} is not a transaction marker (0 ABORT, 1 COMMIT)")
    try:
        key = CONTROL_KEY.pack(CONTROL_RECORD_VERSION, kind)
        value = END_TXN_MARKER_VALUE.pack(CONTROL_RECORD_VERSION, coordinator_epoch)
    except struct.error as error:
        raise ValueError(f"control record field out of range: {error}") from None
    return build_batch(
        [Record(base_offset, timestamp, key, value)],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def control_record_type(record: Record) -> int:
    """The type field of a control record's key (ControlRecordType, or another type a newer Kafka wrote).
    Raises InvalidRecordError for a key shorter than 4 bytes or a negative version."""
    if record.key is None or len(record.key) < CONTROL_KEY.size:
        raise InvalidRecordError(f"control record key {record.key!r} shorter than {CONTROL_KEY.size} bytes")
    version, kind = CONTROL_KEY.unpack_from(record.key)
    if version < 0:
        raise InvalidRecordError(f"control record key version {version}")
    # A newer version is read as version 0, as Java's ControlRecordType.parse does.
    return kind


def parse_control_record(record: Record) -> tuple[ControlRecordType, int]:
    """(ABORT or COMMIT, coordinator_epoch) of a transaction marker record. Raises InvalidRecordError when
    the record is not a well-formed transaction marker."""
    kind = control_record_type(record)
    if kind not in (ABORT, COMMIT):
        raise InvalidRecordError(f"control record type {kind} is not a transaction marker")
    if record.value is None or len(record.value) < END_TXN_MARKER_VALUE.size:
        raise InvalidRecordError(f"transaction marker value {record.value!r} too short")
    version, coordinator_epoch = END_TXN_MARKER_VALUE.unpack_from(record.value)
    if version < 0:
        raise InvalidRecordError(f"transaction marker value version {version}")
    return ControlRecordType(kind), coordinator_epoch


# ---------------------------------------------------------------------------------------------------------
# Decoding.


def _decode_headers(buffer: bytes, position: int, record_end: int, count: int):
    """(headers tuple, next position) for `count` headers at `position`, all within `record_end`."""
    if count < 0 or count * HEADER_ENTRY_BYTES_MIN > record_end - position:
        raise CorruptRecordError(f"record headers_count {count} impossible in {record_end - position} bytes")
    headers = []
    for _ in range(count):
        byte = buffer[position]
        if byte < 0x80:  # keys under 64 bytes, the usual case
            size = (byte >> 1) ^ -(byte & 1)
            position += 1
        else:
            size, position = _read_varint(buffer, position, VARINT_BYTES_MAX)
        if size < 0 or position + size > record_end:
            raise CorruptRecordError(f"record header key length {size} at byte {position}")
        header_key = buffer[position : position + size].decode("utf-8", "surrogateescape")
        position += size
        byte = buffer[position]
        if byte < 0x80:
            size = (byte >> 1) ^ -(byte & 1)
            position += 1
        else:
            size, position = _read_varint(buffer, position, VARINT_BYTES_MAX)
        if size >= 0:
            if position + size > record_end:
                raise CorruptRecordError(f"record header value length {size} at byte {position} past the record")
            header_value = buffer[position : position + size]
            position += size
        elif size == -1:
            header_value = None
        else:
            raise CorruptRecordError(f"record header value length {size} at byte {position}")
        headers.append((header_key, header_value))
    return tuple(headers), position


# A frozen dataclass's __init__ goes through object.__setattr__ once per field, which is a third of the cost of
# decoding a small record; the decoder fills the slots through their descriptors instead (same result).
_RECORD_FAST_INIT = (
    object.__new__,
    Record.offset.__set__,  # type: ignore[attr-defined]
    Record.timestamp.__set__,  # type: ignore[attr-defined]
    Record.key.__set__,  # type: ignore[attr-defined]
    Record.value.__set__,  # type: ignore[attr-defined]
    Record.headers.__set__,  # type: ignore[attr-defined]
    Record.attributes.__set__,  # type: ignore[attr-defined]
)
assert len(Record.__slots__) == len(_RECORD_FAST_INIT) - 1, Record.__slots__


def _decode_records(buffer: bytes, header: BatchHeader) -> list[Record]:
    """Every record of the (decompressed) records section `buffer`. Raises CorruptRecordError or
    InvalidRecordError; IndexError means a truncated section (the caller wraps it).

    Longer than house style likes on purpose: the one- and two-byte varint cases are inline for each field
    (a function call per varint would double the cost of a small record)."""
    read_varint, decode_headers = _read_varint, _decode_headers
    new, set_offset, set_timestamp, set_key, set_value, set_headers, set_attributes = _RECORD_FAST_INIT
    end = len(buffer)
    base_offset, base_timestamp, last_offset_delta = header.base_offset, header.base_timestamp, header.last_offset_delta
    append_time = header.max_timestamp if header.is_log_append_time else None
    records: list[Record] = []
    append = records.append
    position = 0
    previous_delta = -1
    for _ in range(header.records_count):
        # length: one or two bytes for records under 8 KiB
        byte = buffer[position]
        if byte < 0x80:
            length = (byte >> 1) ^ -(byte & 1)
            position += 1
        elif buffer[position + 1] < 0x80:
            zigzag = (byte & 0x7F) | (buffer[position + 1] << 7)
            length = (zigzag >> 1) ^ -(zigzag & 1)
            position += 2
        else:
            length, position = read_varint(buffer, position, VARINT_BYTES_MAX)
        record_end = position + length
        if length < RECORD_BODY_BYTES_MIN or record_end > end:
            raise CorruptRecordError(f"record length {length} at byte {position} (section of {end} bytes)")
        attributes = buffer[position]
        position += 1
        byte = buffer[position]
        if byte < 0x80:
            timestamp_delta = (byte >> 1) ^ -(byte & 1)
            position += 1
        elif buffer[position + 1] < 0x80:
            zigzag = (byte & 0x7F) | (buffer[position + 1] << 7)
            timestamp_delta = (zigzag >> 1) ^ -(zigzag & 1)
            position += 2
        else:
            timestamp_delta, position = read_varint(buffer, position, VARLONG_BYTES_MAX)
        byte = buffer[position]
        if byte < 0x80:
            offset_delta = (byte >> 1) ^ -(byte & 1)
            position += 1
        elif buffer[position + 1] < 0x80:
            zigzag = (byte & 0x7F) | (buffer[position + 1] << 7)
            offset_delta = (zigzag >> 1) ^ -(zigzag & 1)
            position += 2
        else:
            offset_delta, position = read_varint(buffer, position, VARINT_BYTES_MAX)
        if not previous_delta < offset_delta <= last_offset_delta:
            raise InvalidRecordError(
                f"record offset delta {offset_delta} after {previous_delta}, last_offset_delta {last_offset_delta}"
            )
        previous_delta = offset_delta
        byte = buffer[position]
        if byte < 0x80:
            size = (byte >> 1) ^ -(byte & 1)
            position += 1
        elif buffer[position + 1] < 0x80:
            zigzag = (byte & 0x7F) | (buffer[position + 1] << 7)
            size = (zigzag >> 1) ^ -(zigzag & 1)
            position += 2
        else:
            size, position = read_varint(buffer, position, VARINT_BYTES_MAX)
        if size >= 0:
            if position + size > record_end:
                raise CorruptRecordError(f"record key length {size} at byte {position} past the record end")
            key = buffer[position : position + size]
            position += size
        elif size == -1:
            key = None
        else:
            raise CorruptRecordError(f"record key length {size} at byte {position}")
        byte = buffer[position]
        if byte < 0x80:
            size = (byte >> 1) ^ -(byte & 1)
            position += 1
        elif buffer[position + 1] < 0x80:
            zigzag = (byte & 0x7F) | (buffer[position + 1] << 7)
            size = (zigzag >> 1) ^ -(zigzag & 1)
            position += 2
        else:
            size, position = read_varint(buffer, position, VARINT_BYTES_MAX)
        if size >= 0:
            if position + size > record_end:
                raise CorruptRecordError(f"record value length {size} at byte {position} past the record end")
            value = buffer[position : position + size]
            position += size
        elif size == -1:
            value = None
        else:
            raise CorruptRecordError(f"record value length {size} at byte {position}")
        byte = buffer[position]
        if byte == 0:
            headers = ()
            position += 1
        else:
            count, position = read_varint(buffer, position, VARINT_BYTES_MAX)
            headers, position = decode_headers(buffer, position, record_end, count)
        if position != record_end:
            raise CorruptRecordError(f"record ends at byte {position}, its length says {record_end}")
        if append_time is None:
            timestamp = base_timestamp + timestamp_delta
            if not INT64_MIN <= timestamp <= INT64_MAX:
                timestamp = _wrap_int64(timestamp)
        else:
            timestamp = append_time
        record = new(Record)
        set_offset(record, base_offset + offset_delta)
        set_timestamp(record, timestamp)
        set_key(record, key)
        set_value(record, value)
        set_headers(record, headers)
        set_attributes(record, attributes - ((attributes & 0x80) << 1))  # int8
        append(record)
    if position != end:
        raise CorruptRecordError(f"{end - position} bytes after the last of {header.records_count} records")
    return records


def decode_batch(
    buffer: bytes | bytearray | memoryview, *, decompressed_bytes_max: int = DECOMPRESSED_BYTES_MAX_DEFAULT
) -> DecodedBatch:
    """Validate and decode exactly one batch. Raises CorruptRecordError (length, CRC, truncated or malformed
    records, count mismatch, trailing bytes, corrupt compression), InvalidRecordError (offset deltas out of
    order or past last_offset_delta), UnsupportedForMessageFormatError (magic other than 2),
    UnsupportedCompressionTypeError (codec id 5-7), RecordTooLargeError (records section decompresses to
    more than `decompressed_bytes_max` bytes)."""
    header = validate_batch(buffer)
    section = memoryview(buffer)[HEADER_SIZE:]
    if header.records_count == 0 and len(section) == 0:
        return DecodedBatch(header, [])  # an empty batch keeps producer state after compaction
    if header.compression:
        data = decompress(header.compression, section, decompressed_bytes_max)
    else:
        data = bytes(section)
    if header.records_count * RECORD_BYTES_MIN > len(data):
        raise CorruptRecordError(f"records_count {header.records_count} impossible in {len(data)} bytes")
    try:
        return DecodedBatch(header, _decode_records(data, header))
    except IndexError:
        raise CorruptRecordError(
            f"records section of {len(data)} bytes truncated before record {header.records_count}"
        ) from None


def decode_batches(
    buffer: bytes | bytearray | memoryview,
    *,
    decompressed_bytes_max: int = DECOMPRESSED_BYTES_MAX_DEFAULT,
    allow_partial_tail: bool = True,
) -> Iterator[DecodedBatch]:
    """Each batch of a concatenation of batches (a fetched records field or a segment), empty and control
    batches included, so a consumer can advance to `header.next_offset` past every one. A partial batch at
    the end is normal in a fetch response (the broker cuts at the size limit) and is skipped when
    `allow_partial_tail`, else raises CorruptRecordError. Raises what decode_batch raises."""
    view = memoryview(buffer)
    consumed = 0
    for position, header in iter_batches(view):
        yield decode_batch(view[position : position + header.size], decompressed_bytes_max=decompressed_bytes_max)
        consumed = position + header.size
    if not allow_partial_tail and consumed != len(view):
        raise CorruptRecordError(f"{len(view) - consumed} bytes of a partial batch after byte {consumed}")


def iter_records(
    buffer: bytes | bytearray | memoryview,
    *,
    decompressed_bytes_max: int = DECOMPRESSED_BYTES_MAX_DEFAULT,
    allow_partial_tail: bool = True,
) -> Iterator[tuple[BatchHeader, Record]]:
    """(header, record) for every record of every whole batch in `buffer`, control records included (the
    header says `is_control`; consumers skip them after reading them, as Kafka's do). Raises what
    decode_batches raises."""
    for decoded in decode_batches(
        buffer, decompressed_bytes_max=decompressed_bytes_max, allow_partial_tail=allow_partial_tail
    ):
        header = decoded.header
        for record in decoded.records:
            yield header, record
