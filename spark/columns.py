"""Fetched record batches straight to Arrow columns, without a Python object per record.

Theory of operation: a Fetch response's records field is a run of v2 batches. `ColumnBuilder.add_fetched`
walks their headers (partitions.batch), checks each CRC, decompresses a compressed records section, and
decodes its records into columns. Two decoders give the same columns (a property test holds them to the
record codec):
- without headers (the common case) and with the extension built, partitions/_recordscan.c `decode_columns`:
  one pass in C that appends each record's fields straight into the Arrow buffers of the batch (bytearrays,
  handed to Arrow without a copy), so the Python work is per section, not per record;
- otherwise a hand-inlined Python loop that appends offsets and timestamps to `array.array`s and key, value
  and header bytes to `_BinaryColumn`s, joined once per Arrow batch.
No tuple, Record or Python row is made per record on either path.

Only records in [start_offset, end_offset) are kept; control batches are skipped (their offsets are gaps, as
for a Kafka consumer). The record layout is in partitions/records.py; this module reads the same bytes.
"""

from __future__ import annotations

from array import array

import pyarrow as pa
import pyarrow.compute as pc

from partitions.batch import HEADER_SIZE, iter_batches, validate_batch
from partitions.compression import decompress
from partitions.errors import CorruptRecordError, InvalidRecordError
from partitions.records import ABORT, VARINT_BYTES_MAX, VARLONG_BYTES_MAX, decode_batch, parse_control_record, read_varint

try:  # the compiled decoder (partitions/_recordscan.c, built by setup.py when a C compiler is there)
    from partitions._recordscan import decode_columns as _decode_columns
except ImportError:  # pragma: no cover - depends on the build; the Python loop below does the same work, slower
    _decode_columns = None

DECOMPRESSED_BYTES_MAX = 64 * 1024 * 1024
TIMESTAMP_TYPE_CREATE_TIME = 0
TIMESTAMP_TYPE_LOG_APPEND_TIME = 1
RECORD_BODY_BYTES_MIN = 6  # attributes, timestamp_delta, offset_delta, key_length, value_length, headers_count
BINARY_BYTES_MAX = (1 << 31) - 1  # Arrow binary offsets are int32


def next_fetch_offset(records_field: bytes | memoryview, offset: int) -> int:
    """The offset after the last whole batch of a fetched records field (`offset` when there is none), from
    the batch headers alone. Raises CorruptRecordError for an impossible header."""
    for _, header in iter_batches(memoryview(records_field)):
        offset = max(offset, header.next_offset)
    return offset


class ColumnBuilder:
    """Accumulates the records of one topic-partition in [start_offset, end_offset) as flat columns."""

    def __init__(self, start_offset: int, end_offset: int, include_headers: bool, compiled: bool = True) -> None:
        assert 0 <= start_offset <= end_offset, f"start_offset={start_offset} end_offset={end_offset}"
        self.start_offset = start_offset
        self.end_offset = end_offset
        self.include_headers = include_headers
        self.next_offset = start_offset  # past the last batch seen (control batches too)
        self.offsets = array("q")
        self.timestamps = array("q")
        self.timestamp_types = array("i")
        self.keys = _BinaryColumn()
        self.values = _BinaryColumn()
        # headers: per record the index of its first header (Arrow list offsets), and the header columns
        self.header_firsts = array("i", [0])
        self.header_keys = _BinaryColumn()
        self.header_values = _BinaryColumn()
        # the compiled path (headers left out) fills these instead of the columns above
        self.compiled = _decode_columns is not None and not include_headers and compiled
        self._compiled_columns = _CompiledColumns() if self.compiled else None

    @property
    def rows(self) -> int:
        return len(self.timestamp_types)

    @property
    def payload_bytes(self) -> int:
        """Bytes of keys and values accumulated so far (to bound the size of one Arrow batch)."""
        if self.compiled:
            return self._compiled_columns.payload_bytes
        return self.keys.total + self.values.total

    def add_fetched(self, records_field: bytes | memoryview, aborted: tuple[tuple[int, int], ...] = ()) -> int:
        """Add every whole batch of a fetched records field; returns the offset after the last whole batch
        (the next fetch offset). `aborted` ((first_offset, producer_id), sorted: a read_committed fetch's
        aborted transactions) drops those transactions' batches up to their ABORT marker, as Kafka's consumer
        does. Raises CorruptRecordError (CRC, framing), InvalidRecordError, UnsupportedCompressionTypeError,
        RecordTooLargeError."""
        view = memoryview(records_field)
        aborting: set[int] = set()
        next_aborted = 0
        for position, header in iter_batches(view):
            while next_aborted < len(aborted) and aborted[next_aborted][0] <= header.last_offset:
                aborting.add(aborted[next_aborted][1])
                next_aborted += 1
            if header.next_offset <= self.next_offset or header.base_offset >= self.end_offset:
                continue  # a batch before the fetch offset (brokers answer from the batch start) or past the end
            validate_batch(view[position: position + header.size])
            self.next_offset = header.next_offset
            if header.is_control:
                if header.producer_id in aborting and header.records_count > 0:
                    records = decode_batch(view[position: position + header.size]).records
                    if records and parse_control_record(records[0])[0] == ABORT:
                        aborting.discard(header.producer_id)
                continue
            if header.records_count == 0 or (header.is_transactional and header.producer_id in aborting):
                continue
            section = view[position + HEADER_SIZE: position + header.size]
            if header.compression:
                section = decompress(header.compression, section, DECOMPRESSED_BYTES_MAX)
            self._add_section(bytes(section), header)
        return self.next_offset

    def _add_section(self, section: bytes, header) -> None:
        try:
            if self.compiled:
                kept = self._compiled_columns.add(section, header, self.start_offset, self.end_offset)
            else:
                kept = self._decode_records(section, header)
        except IndexError:
            raise CorruptRecordError(f"records section of batch at offset {header.base_offset} truncated") from None
        timestamp_type = TIMESTAMP_TYPE_LOG_APPEND_TIME if header.is_log_append_time else TIMESTAMP_TYPE_CREATE_TIME
        self.timestamp_types.extend(array("i", [timestamp_type]) * kept)
        if header.is_log_append_time and kept and not self.compiled:
            self.timestamps[len(self.timestamps) - kept:] = array("q", [header.max_timestamp]) * kept

    def _decode_records(self, buffer: bytes, header) -> int:
        """Append the records of one section to the columns; returns how many were kept. Written out by hand
        (one- and two-byte varints inline) because it runs once per record; IndexError means truncation."""
        start_offset, end_offset = self.start_offset, self.end_offset
        base_offset, base_timestamp = header.base_offset, header.base_timestamp
        offsets, timestamps = self.offsets, self.timestamps
        keys, values = self.keys, self.values
        key_parts, key_ends, key_nulls = keys.parts, keys.ends, keys.nulls
        value_parts, value_ends, value_nulls = values.parts, values.ends, values.nulls
        key_total, value_total = keys.total, values.total
        include_headers = self.include_headers
        end = len(buffer)
        position = 0
        kept = 0
        for _ in range(header.records_count):
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
            byte = buffer[position + 1]  # after the (unused) attributes byte
            if byte < 0x80:
                timestamp_delta = (byte >> 1) ^ -(byte & 1)
                position += 2
            else:
                timestamp_delta, position = read_varint(buffer, position + 1, VARLONG_BYTES_MAX)
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
            offset = base_offset + offset_delta
            if not start_offset <= offset < end_offset:
                position = record_end
                continue
            byte = buffer[position]
            if byte < 0x80:
                size = (byte >> 1) ^ -(byte & 1)
                position += 1
            else:
                size, position = read_varint(buffer, position, VARINT_BYTES_MAX)
            if size > 0:
                key_parts.append(buffer[position: position + size])
                position += size
                key_total += size
            elif size == -1:
                key_nulls.append(len(offsets))
            elif size < -1:
                raise CorruptRecordError(f"record at offset {offset}: key length {size}")
            key_ends.append(key_total)
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
            if size > 0:
                value_parts.append(buffer[position: position + size])
                position += size
                value_total += size
            elif size == -1:
                value_nulls.append(len(offsets))
            elif size < -1:
                raise CorruptRecordError(f"record at offset {offset}: value length {size}")
            value_ends.append(value_total)
            if position >= record_end:
                raise CorruptRecordError(f"record at offset {offset} runs past its length {length}")
            if include_headers:
                self._decode_headers(buffer, position, record_end)
            position = record_end
            offsets.append(offset)
            timestamps.append(base_timestamp + timestamp_delta)
            kept += 1
        keys.total, values.total = key_total, value_total
        if position != end:
            raise CorruptRecordError(f"{end - position} bytes after the last of {header.records_count} records")
        return kept

    def _decode_headers(self, buffer: bytes, position: int, record_end: int) -> None:
        count, position = read_varint(buffer, position, VARINT_BYTES_MAX)
        if count < 0 or 2 * count > record_end - position:
            raise CorruptRecordError(f"record headers_count {count} impossible in {record_end - position} bytes")
        for _ in range(count):
            size, position = read_varint(buffer, position, VARINT_BYTES_MAX)
            if size < 0 or position + size > record_end:
                raise CorruptRecordError(f"record header key length {size} at byte {position}")
            self.header_keys.add(buffer[position: position + size])
            position += size
            size, position = read_varint(buffer, position, VARINT_BYTES_MAX)
            if size < -1 or position + max(size, 0) > record_end:
                raise CorruptRecordError(f"record header value length {size} at byte {position}")
            self.header_values.add(None if size == -1 else buffer[position: position + size])
            position += max(size, 0)
        if position != record_end:
            raise InvalidRecordError(f"record headers end at byte {position}, the record at {record_end}")
        self.header_firsts.append(len(self.header_keys.ends))

    # Arrow.

    def to_arrow(self, topic: str, partition: int, schema: pa.Schema) -> pa.RecordBatch:
        """The accumulated rows as one RecordBatch of `schema` (Spark's Kafka source schema in Arrow form:
        key, value, topic, partition, offset, timestamp, timestampType[, headers])."""
        rows = self.rows
        timestamp_type = schema.field("timestamp").type
        if self.compiled:
            keys, values, offsets, timestamps = self._compiled_columns.to_arrow(rows, timestamp_type)
        else:
            keys, values = self.keys.to_arrow(), self.values.to_arrow()
            offsets, timestamps = pa.array(self.offsets, pa.int64()), _timestamp_column(self.timestamps, timestamp_type)
        columns = [
            keys,
            values,
            pa.repeat(pa.scalar(topic, pa.string()), rows),
            pa.repeat(pa.scalar(partition, pa.int32()), rows),
            offsets,
            timestamps,
            pa.Array.from_buffers(pa.int32(), rows, [None, pa.py_buffer(self.timestamp_types)]),
        ]
        if self.include_headers:
            columns.append(self._headers_column(schema.field("headers").type))
        return pa.RecordBatch.from_arrays(columns, schema=schema)

    def _headers_column(self, headers_type: pa.DataType) -> pa.Array:
        struct_type = headers_type.value_type
        keys = self.header_keys.to_arrow().view(pa.string())
        entries = pa.StructArray.from_arrays([keys, self.header_values.to_arrow()], fields=list(struct_type))
        return pa.ListArray.from_arrays(pa.array(self.header_firsts, pa.int32()), entries, type=headers_type)


class _CompiledColumns:
    """The columns partitions/_recordscan.c `decode_columns` appends to, one bytearray each: the Arrow buffers
    of the batch under construction, so making the Arrow arrays copies nothing."""

    __slots__ = ("buffers",)

    def __init__(self) -> None:
        # offsets, timestamps (us), key ends, key bytes, key validity, value ends, value bytes, value validity;
        # the ends start with Arrow's leading 0
        self.buffers = (bytearray(), bytearray(), bytearray(4), bytearray(), bytearray(), bytearray(4), bytearray(),
                        bytearray())

    @property
    def payload_bytes(self) -> int:
        return len(self.buffers[3]) + len(self.buffers[6])

    def add(self, section: bytes, header, start_offset: int, end_offset: int) -> int:
        """Append the records of one section in [start_offset, end_offset); returns how many were kept.
        Raises CorruptRecordError as the Python decoder does; ValueError past 2 GiB in one binary column."""
        log_append_timestamp = header.max_timestamp if header.is_log_append_time else None
        try:
            return _decode_columns(section, header.records_count, header.base_offset, header.base_timestamp,
                                   header.last_offset_delta, start_offset, end_offset, log_append_timestamp,
                                   self.buffers)
        except OverflowError as error:
            raise ValueError(str(error)) from None
        except ValueError as error:
            raise CorruptRecordError(f"batch at offset {header.base_offset}: {error}") from None

    def to_arrow(self, rows: int, timestamp_type: pa.DataType) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array]:
        """(keys, values, offsets, timestamps) over the buffers, which must not change afterwards."""
        offsets, timestamps, key_ends, key_bytes, key_valid, value_ends, value_bytes, value_valid = self.buffers
        return (_binary_array(rows, key_ends, key_bytes, key_valid),
                _binary_array(rows, value_ends, value_bytes, value_valid),
                pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(offsets)]),
                pa.Array.from_buffers(timestamp_type, rows, [None, pa.py_buffer(timestamps)]))


def _binary_array(rows: int, ends: bytearray, data: bytearray, valid: bytearray) -> pa.Array:
    """A binary array from its int32 offsets, its bytes and one validity byte a row (1: present)."""
    null_count = valid.count(0)
    return pa.Array.from_buffers(pa.binary(), rows, [_validity_bitmap(valid, rows) if null_count else None,
                                                     pa.py_buffer(ends), pa.py_buffer(data)], null_count=null_count)


def _validity_bitmap(valid: bytes | bytearray, rows: int) -> pa.Buffer:
    """Arrow's validity bitmap of one byte a row (0: null)."""
    return pa.Array.from_buffers(pa.int8(), rows, [None, pa.py_buffer(valid)]).cast(pa.bool_()).buffers()[1]


class _BinaryColumn:
    """A binary column under construction: the non-empty values' bytes, the running end offset per row (the
    Arrow offsets buffer without its leading 0), and the rows that are null."""

    __slots__ = ("parts", "ends", "nulls", "total")

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.ends = array("i")
        self.nulls = array("q")
        self.total = 0

    def add(self, value: bytes | None) -> None:
        if value is None:
            self.nulls.append(len(self.ends))
        elif value:
            self.parts.append(value)
            self.total += len(value)
        self.ends.append(self.total)

    def to_arrow(self) -> pa.Array:
        """The column as an Arrow binary array (one copy of the bytes, by bytes.join). Raises ValueError past
        2 GiB, the reach of binary's int32 offsets."""
        if self.total > BINARY_BYTES_MAX:
            raise ValueError(f"{self.total} bytes in one binary column; the limit is {BINARY_BYTES_MAX}")
        rows = len(self.ends)
        offsets = array("i", [0])
        offsets.extend(self.ends)
        validity = None
        if self.nulls:
            valid = bytearray(b"\x01") * rows
            for row in self.nulls:
                valid[row] = 0
            validity = _validity_bitmap(valid, rows)
        return pa.Array.from_buffers(pa.binary(), rows, [validity, pa.py_buffer(offsets),
                                                         pa.py_buffer(b"".join(self.parts))],
                                     null_count=len(self.nulls))


def _timestamp_column(timestamps_ms: array, timestamp_type: pa.DataType) -> pa.Array:
    """Milliseconds since the epoch as Spark's timestamp type in Arrow (microseconds, UTC)."""
    micros = pc.multiply(pa.array(timestamps_ms, pa.int64()), pa.scalar(1000, pa.int64()))
    return micros.cast(timestamp_type)
