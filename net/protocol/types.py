"""Kafka protocol primitive types: bounded readers over a buffer, writers into a chunk list.

Theory of operation: a `Reader` walks one memoryview with a cursor. Every read first checks that the bytes it
needs are there, and every length or count read off the wire is checked against the bytes that remain *before*
anything is allocated, so a hostile frame costs at most its own size. Failures raise `ProtocolDecodeError`
(a `KafkaError` with code INVALID_REQUEST), never struct.error, IndexError or MemoryError.

Writers append to a `list` of byte chunks; the caller joins the list once. Record sets are appended as the
caller's own buffer (no copy until that single join), and decoded as a memoryview slice of the frame (no copy).

Wire layouts (Kafka protocol guide, "Protocol Primitive Types"), all big-endian:

    int8/16/32/64, uint16, uint32   fixed width, two's complement (unsigned for uint*)
    float64                         IEEE 754 double
    bool                            int8, 0 = false, anything else = true
    unsigned varint                 7 bits per byte, low groups first, high bit = more (<= 5 bytes for 32 bits)
    varint / varlong                zigzag-encoded signed varints (<= 5 / <= 10 bytes)
    uuid                            16 bytes
    string                          int16 length N then N UTF-8 bytes; -1 = null (nullable only)
    compact string                  unsigned varint N+1 then N bytes; 0 = null (nullable only)
    bytes                           int32 length N then N bytes; -1 = null
    compact bytes                   unsigned varint N+1 then N bytes; 0 = null
    records                         nullable bytes (compact nullable bytes in flexible versions)
    array                           int32 count N then N items; -1 = null
    compact array                   unsigned varint N+1 then N items; 0 = null
    tagged fields                   unsigned varint count, then per field: uvarint tag, uvarint size, size bytes
"""

from __future__ import annotations

import struct
import uuid

from partitions.errors import ErrorCode, KafkaError

# A single tagged-field section or varint never needs more than this many bytes; longer is hostile input.
UNSIGNED_VARINT32_BYTES_MAX = 5
UNSIGNED_VARINT64_BYTES_MAX = 10


class ProtocolDecodeError(KafkaError):
    """Bytes that are not a valid Kafka message of the expected api and version."""

    code = ErrorCode.INVALID_REQUEST


class ProtocolEncodeError(KafkaError):
    """A message whose field values cannot be written in the requested version (a caller bug, made explicit)."""

    code = ErrorCode.UNKNOWN_SERVER_ERROR


INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")
NULL_UUID = uuid.UUID(int=0)
# The (lowest, highest) value of each integer type of the message schemas.
INT_BOUNDS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}


def _fixed_width_reader(fmt: struct.Struct):
    """A Reader method for one fixed-width type, with the bounds check inlined (the decode hot path)."""
    unpack_from, size = fmt.unpack_from, fmt.size

    def read(self: "Reader") -> int | float:
        start = self.pos
        if self.end - start < size:
            raise ProtocolDecodeError(f"need {size} bytes at position {start}, {self.end - start} remain")
        self.pos = start + size
        return unpack_from(self.buf, start)[0]

    return read


class Reader:
    """A bounded cursor over one buffer. All reads raise ProtocolDecodeError on short or absurd input."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None) -> None:
        self.buf = buf if isinstance(buf, memoryview) else memoryview(buf)
        if self.buf.format != "B" or self.buf.ndim != 1:
            self.buf = self.buf.cast("B")
        self.pos = pos
        self.end = len(self.buf) if end is None else end
        assert 0 <= self.pos <= self.end <= len(self.buf), f"pos={self.pos} end={self.end} len={len(self.buf)}"

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def _take(self, size: int) -> int:
        """Reserve `size` bytes and return their start; raises ProtocolDecodeError when they are not there."""
        start = self.pos
        if size < 0 or size > self.end - start:
            raise ProtocolDecodeError(f"need {size} bytes at position {start}, {self.end - start} remain")
        self.pos = start + size
        return start

    int8 = _fixed_width_reader(INT8)
    int16 = _fixed_width_reader(INT16)
    int32 = _fixed_width_reader(INT32)
    int64 = _fixed_width_reader(INT64)
    uint16 = _fixed_width_reader(UINT16)
    uint32 = _fixed_width_reader(UINT32)
    float64 = _fixed_width_reader(FLOAT64)

    def boolean(self) -> bool:
        return self.int8() != 0

    def uuid(self) -> uuid.UUID:
        start = self._take(16)
        return uuid.UUID(bytes=bytes(self.buf[start : start + 16]))

    def unsigned_varint(self, bytes_max: int = UNSIGNED_VARINT32_BYTES_MAX) -> int:
        position = self.pos
        if position < self.end:  # one byte: every compact length and tag count below 128
            byte = self.buf[position]
            if byte < 0x80:
                self.pos = position + 1
                return byte
        value = 0
        for index in range(bytes_max):
            byte = self.buf[self._take(1)]
            value |= (byte & 0x7F) << (7 * index)
            if not byte & 0x80:
                return value
        raise ProtocolDecodeError(f"varint longer than {bytes_max} bytes at position {self.pos}")

    def varint(self) -> int:
        raw = self.unsigned_varint(UNSIGNED_VARINT32_BYTES_MAX)
        if raw > 0xFFFFFFFF:
            raise ProtocolDecodeError(f"varint {raw} overflows 32 bits")
        return (raw >> 1) ^ -(raw & 1)

    def varlong(self) -> int:
        raw = self.unsigned_varint(UNSIGNED_VARINT64_BYTES_MAX)
        if raw > 0xFFFFFFFFFFFFFFFF:
            raise ProtocolDecodeError(f"varlong {raw} overflows 64 bits")
        return (raw >> 1) ^ -(raw & 1)

    # Lengths: -1 (or compact 0) means null; anything else must fit in what remains.

    def _length(self, compact: bool, wide: bool) -> int:
        if compact:
            return self.unsigned_varint() - 1
        return self.int32() if wide else self.int16()

    def _slice(self, length: int, nullable: bool, what: str) -> memoryview | None:
        if length < 0:
            if length == -1 and nullable:
                return None
            raise ProtocolDecodeError(f"{what} length {length} is negative (null not allowed here)")
        start = self._take(length)
        return self.buf[start : start + length]

    def string(self, compact: bool = False, nullable: bool = False) -> str | None:
        raw = self._slice(self._length(compact, wide=False), nullable, "string")
        if raw is None:
            return None
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as error:
            raise ProtocolDecodeError(f"string is not UTF-8: {error}") from None

    def bytes_(self, compact: bool = False, nullable: bool = False) -> bytes | None:
        raw = self._slice(self._length(compact, wide=True), nullable, "bytes")
        return None if raw is None else bytes(raw)

    def records(self, compact: bool = False, nullable: bool = True) -> memoryview | None:
        """The record set as a zero-copy slice of the frame (the broker never decodes records here)."""
        return self._slice(self._length(compact, wide=True), nullable, "records")

    def array_length(self, compact: bool, nullable: bool, item_bytes_min: int) -> int | None:
        """The item count of an array, or None for a null array.

        Each item needs at least `item_bytes_min` bytes, so a count that cannot fit in what remains is refused
        before any list is built.
        """
        assert item_bytes_min >= 1, f"item_bytes_min={item_bytes_min}"
        count = self._length(compact, wide=True)
        if count == -1 and nullable:
            return None
        if count < 0:
            raise ProtocolDecodeError(f"array length {count} is negative (null not allowed here)")
        if count * item_bytes_min > self.end - self.pos:
            raise ProtocolDecodeError(
                f"array of {count} items needs >= {count * item_bytes_min} bytes, {self.end - self.pos} remain"
            )
        return count

    def tagged_fields(self) -> list[tuple[int, memoryview]]:
        """The raw (tag, payload) pairs of a tagged-field section, in wire order."""
        count = self.unsigned_varint()
        # Each tagged field takes at least two bytes (tag and size).
        if count * 2 > self.end - self.pos:
            raise ProtocolDecodeError(f"{count} tagged fields cannot fit in {self.end - self.pos} bytes")
        fields = []
        for _ in range(count):
            tag = self.unsigned_varint()
            size = self.unsigned_varint()
            start = self._take(size)
            fields.append((tag, self.buf[start : start + size]))
        return fields


# Writers: each appends one or more chunks to `out`.


def write_unsigned_varint(value: int, out: list) -> None:
    assert value >= 0, f"unsigned varint {value} is negative"
    if value < 0x80:
        out.append(SMALL_UNSIGNED_VARINTS[value])
        return
    chunk = bytearray()
    while value >= 0x80:
        chunk.append((value & 0x7F) | 0x80)
        value >>= 7
    chunk.append(value)
    out.append(bytes(chunk))


SMALL_UNSIGNED_VARINTS = tuple(bytes((value,)) for value in range(0x80))  # the one-byte encodings of 0-127


def zigzag32(value: int) -> int:
    if not -(1 << 31) <= value < (1 << 31):
        raise ProtocolEncodeError(f"varint {value} does not fit in 32 bits")
    return ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF


def zigzag64(value: int) -> int:
    if not -(1 << 63) <= value < (1 << 63):
        raise ProtocolEncodeError(f"varlong {value} does not fit in 64 bits")
    return ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF


def write_varint(value: int, out: list) -> None:
    write_unsigned_varint(zigzag32(value), out)


def write_varlong(value: int, out: list) -> None:
    write_unsigned_varint(zigzag64(value), out)


def write_length(length: int, compact: bool, wide: bool, out: list) -> None:
    """A length prefix; `length` -1 means null."""
    if compact:
        write_unsigned_varint(length + 1, out)
    elif wide:
        out.append(INT32.pack(length))
    else:
        out.append(INT16.pack(length))


def write_string(value: str | None, compact: bool, nullable: bool, out: list) -> None:
    if value is None:
        if not nullable:
            raise ProtocolEncodeError("null string in a non-nullable field")
        write_length(-1, compact, False, out)
        return
    raw = value.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise ProtocolEncodeError(f"string of {len(raw)} bytes exceeds the int16 length limit")
    write_length(len(raw), compact, False, out)
    out.append(raw)


def write_bytes(value, compact: bool, nullable: bool, out: list) -> None:
    """Bytes or records: any buffer (bytes, bytearray, memoryview) is appended as is, without a copy."""
    if value is None:
        if not nullable:
            raise ProtocolEncodeError("null bytes in a non-nullable field")
        write_length(-1, compact, True, out)
        return
    size = value.nbytes if isinstance(value, memoryview) else len(value)
    write_length(size, compact, True, out)
    if size:
        out.append(value)


def write_records(value, compact: bool, nullable: bool, out: list) -> None:
    """A record set: one buffer, or a list/tuple of buffers (batches read from several places) sent back to back
    under one length prefix, still without a copy; or a log read (partitions.log.FetchData), whose file slices
    become chunks that the edge sends with os.sendfile (`encode_response` reads them instead)."""
    slices = getattr(value, "slices", None)
    if slices is not None:
        write_length(value.size, compact, True, out)
        out.extend(slices)
        return
    if isinstance(value, (list, tuple)):
        write_length(chunks_size(value), compact, True, out)
        out.extend(value)
        return
    write_bytes(value, compact, nullable, out)


def write_uuid(value: uuid.UUID, out: list) -> None:
    out.append(value.bytes)


def write_tagged_fields(fields: list[tuple[int, bytes]], out: list) -> None:
    """A tagged-field section from (tag, payload) pairs, which must be sorted by tag."""
    write_unsigned_varint(len(fields), out)
    for tag, payload in fields:
        write_unsigned_varint(tag, out)
        write_unsigned_varint(len(payload), out)
        out.append(payload)


def chunks_size(chunks: list) -> int:
    """Bytes of `chunks`: buffers, or file slices (their len() is their size)."""
    return sum([chunk.nbytes if chunk.__class__ is memoryview else len(chunk) for chunk in chunks])  # final class


BUFFER_TYPES = (bytes, bytearray, memoryview)


def materialized(chunks: list) -> list:
    """`chunks` with every file slice read into bytes."""
    return [chunk if isinstance(chunk, BUFFER_TYPES) else chunk.read() for chunk in chunks]
