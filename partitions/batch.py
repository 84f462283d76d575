"""The record batch v2 header: the broker's hot-path view (no per-record decoding).

Wire layout (Kafka's "message format" page, magic 2), big-endian; the header is 61 bytes:

    offset  size  field
    0       8     base_offset              int64   assigned by the leader (outside the CRC)
    8       4     batch_length             int32   bytes after this field
    12      4     partition_leader_epoch   int32   stamped by the leader (outside the CRC)
    16      1     magic                    int8    = 2
    17      4     crc                      uint32  CRC-32C of attributes .. end of batch
    21      2     attributes               int16   bits 0-2 compression, 3 timestamp type,
                                                    4 transactional, 5 control, 6 delete horizon
    23      4     last_offset_delta        int32
    27      8     base_timestamp           int64   (the delete horizon when bit 6 is set)
    35      8     max_timestamp            int64
    43      8     producer_id              int64
    51      2     producer_epoch           int16
    53      4     base_sequence            int32
    57      4     records_count            int32
    61      ...   records (compressed as a whole when the codec bits are non-zero)

Because base_offset and partition_leader_epoch sit outside the CRC, the broker assigns offsets and stamps the
leader epoch by overwriting 8 + 4 bytes in place, without touching the CRC.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, fields

import crc32c

from partitions.errors import CorruptRecordError, InvalidRecordError, UnsupportedForMessageFormatError

HEADER = struct.Struct(
    ">q"  # base_offset
    "i"  # batch_length
    "i"  # partition_leader_epoch
    "b"  # magic
    "I"  # crc
    "h"  # attributes
    "i"  # last_offset_delta
    "q"  # base_timestamp
    "q"  # max_timestamp
    "q"  # producer_id
    "h"  # producer_epoch
    "i"  # base_sequence
    "i"  # records_count
)
HEADER_SIZE = HEADER.size
assert HEADER_SIZE == 61, HEADER_SIZE

# Byte positions of the fields the broker touches.
BASE_OFFSET_POSITION = 0
BATCH_LENGTH_POSITION = 8
PARTITION_LEADER_EPOCH_POSITION = 12
MAGIC_POSITION = 16
CRC_POSITION = 17
ATTRIBUTES_POSITION = 21
LOG_OVERHEAD = 12  # base_offset + batch_length: the bytes not counted in batch_length
BATCH_LENGTH_MIN = HEADER_SIZE - LOG_OVERHEAD

_OFFSET_AND_LENGTH = struct.Struct(">qi")
_EPOCH = struct.Struct(">i")
_OFFSET = struct.Struct(">q")
_TIMESTAMP = struct.Struct(">q")
MAX_TIMESTAMP_POSITION = 35
ATTRIBUTES = struct.Struct(">h")

MAGIC_V2 = 2
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08  # set: log-append time
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The decoded 61-byte header of one record batch."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes of the whole batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


# A frozen dataclass's __init__ goes through object.__setattr__ once per field, most of the cost of parsing a
# header (the broker parses one for every batch it appends or serves); `header_from_fields` fills the slots
# through their descriptors instead (the same object, about a quarter of the time).
_SLOT_SETTERS = tuple(getattr(BatchHeader, name).__set__ for name in BatchHeader.__slots__)
assert BatchHeader.__slots__ == tuple(field.name for field in fields(BatchHeader)), BatchHeader.__slots__
assert len(_SLOT_SETTERS) == len(HEADER.unpack(bytes(HEADER_SIZE))), BatchHeader.__slots__


def header_from_fields(values: tuple) -> BatchHeader:
    """BatchHeader(*values) for the 13 values of `HEADER.unpack`, in its field order."""
    (base_offset, batch_length, partition_leader_epoch, magic, crc, attributes, last_offset_delta, base_timestamp,
     max_timestamp, producer_id, producer_epoch, base_sequence, records_count) = values
    (set_base_offset, set_batch_length, set_partition_leader_epoch, set_magic, set_crc, set_attributes,
     set_last_offset_delta, set_base_timestamp, set_max_timestamp, set_producer_id, set_producer_epoch,
     set_base_sequence, set_records_count) = _SLOT_SETTERS
    header = object.__new__(BatchHeader)
    set_base_offset(header, base_offset)
    set_batch_length(header, batch_length)
    set_partition_leader_epoch(header, partition_leader_epoch)
    set_magic(header, magic)
    set_crc(header, crc)
    set_attributes(header, attributes)
    set_last_offset_delta(header, last_offset_delta)
    set_base_timestamp(header, base_timestamp)
    set_max_timestamp(header, max_timestamp)
    set_producer_id(header, producer_id)
    set_producer_epoch(header, producer_epoch)
    set_base_sequence(header, base_sequence)
    set_records_count(header, records_count)
    return header


def parse_header(buffer: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """The header of the batch at `position`. Raises CorruptRecordError if fewer than 61 bytes remain or
    the length is impossible, UnsupportedForMessageFormatError for a magic other than 2."""
    if len(buffer) - position < HEADER_SIZE:
        raise CorruptRecordError(f"record batch header truncated: {len(buffer) - position} of {HEADER_SIZE} bytes")
    header = header_from_fields(HEADER.unpack_from(buffer, position))
    if header.magic != MAGIC_V2:
        raise UnsupportedForMessageFormatError(f"record batch magic {header.magic}, only magic 2 is supported")
    if header.batch_length < BATCH_LENGTH_MIN:
        raise CorruptRecordError(f"record batch length {header.batch_length} below the minimum {BATCH_LENGTH_MIN}")
    if header.last_offset_delta < 0 or header.records_count < 0:
        raise InvalidRecordError(
            f"record batch last_offset_delta={header.last_offset_delta} records_count={header.records_count}"
        )
    return header


def peek_offset_and_length(buffer: bytes | bytearray | memoryview, position: int = 0) -> tuple[int, int]:
    """(base_offset, total batch size) of the batch at `position`, without validating anything else.
    Raises CorruptRecordError when 12 bytes are not available."""
    if len(buffer) - position < LOG_OVERHEAD:
        raise CorruptRecordError("record batch offset/length truncated")
    base_offset, batch_length = _OFFSET_AND_LENGTH.unpack_from(buffer, position)
    return base_offset, batch_length + LOG_OVERHEAD


def compute_crc(batch: bytes | bytearray | memoryview) -> int:
    """CRC-32C over attributes .. end of `batch` (one whole batch)."""
    return crc32c.crc32c(memoryview(batch)[ATTRIBUTES_POSITION:])


def crc_ok(batch: bytes | bytearray | memoryview, header: BatchHeader | None = None) -> bool:
    header = header or parse_header(batch)
    return compute_crc(batch) == header.crc


def validate_batch(batch: bytes | bytearray | memoryview) -> BatchHeader:
    """Check one whole batch: header sane, length matches the buffer, CRC matches. Returns the header.
    Raises CorruptRecordError (bad length or CRC) or UnsupportedForMessageFormatError (magic)."""
    header = parse_header(batch)
    if header.size != len(batch):
        raise CorruptRecordError(f"record batch declares {header.size} bytes but {len(batch)} are present")
    actual = compute_crc(batch)
    if actual != header.crc:
        raise CorruptRecordError(f"record batch CRC mismatch: stored {header.crc:#010x}, computed {actual:#010x}")
    return header


def iter_batches(buffer: bytes | bytearray | memoryview):
    """Yield (position, header) for each whole batch in `buffer` (a concatenation of batches).
    Stops silently at a partial batch at the end; raises CorruptRecordError for an impossible header."""
    position = 0
    end = len(buffer)
    while end - position >= HEADER_SIZE:
        header = parse_header(buffer, position)
        if position + header.size > end:
            return
        yield position, header
        position += header.size


def stamp_batch(batch: bytearray | memoryview, base_offset: int, partition_leader_epoch: int) -> None:
    """Assign the base offset and stamp the leader epoch in place (both outside the CRC)."""
    _OFFSET.pack_into(batch, BASE_OFFSET_POSITION, base_offset)
    _EPOCH.pack_into(batch, PARTITION_LEADER_EPOCH_POSITION, partition_leader_epoch)


def set_log_append_time(batch: bytearray, timestamp_ms: int) -> None:
    """Switch a batch to log-append time: set the attribute bit and max_timestamp, then recompute the CRC
    (both fields are inside it). The only header rewrite that costs a CRC pass."""
    (attributes,) = ATTRIBUTES.unpack_from(batch, ATTRIBUTES_POSITION)
    ATTRIBUTES.pack_into(batch, ATTRIBUTES_POSITION, attributes | TIMESTAMP_TYPE_MASK)
    _TIMESTAMP.pack_into(batch, MAX_TIMESTAMP_POSITION, timestamp_ms)
    struct.pack_into(">I", batch, CRC_POSITION, compute_crc(batch))
