"""Fetched record batches straight to Arrow columns, without a Python object per record.

Theory of operation: a Fetch response's records field is a run of v2 batches. `ColumnBuilder.add_fetched`
walks their headers (partitions.batch), checks each CRC, decompresses a compressed records section, and
decodes its records into columns. Two decoders give the same columns (a property test holds them to the
record codec):
- with numpy and without headers (the common case), spark/vectorized.py: one varint per record in Python,
  every other field for all records at once, keys and values as Arrow binary_view structs over the section
  bytes, cast to binary by Arrow in C;
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

try:  # numpy decodes every field but the record lengths in bulk (spark/vectorized.py); optional
    import numpy as np

    from spark import vectorized
except ImportError:  # pragma: no cover - the Python loop below does the same work, slower
    np = vectorized = None

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

    def __init__(self, start_offset: int, end_offset: int, include_headers: bool, vectorize: bool = True) -> None:
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
        # the numpy path (headers left out): per section its columns and its bytes
        self.vectorized = vectorized is not None and not include_headers and vectorize
        self._vector_sections: list = []
        self._vector_buffers: list[bytes] = []
        self._vector_rows = 0

    @property
    def rows(self) -> int:
        return self._vector_rows if self.vectorized else len(self.offsets)

    @property
    def payload_bytes(self) -> int:
        """Bytes of keys and values accumulated so far (to bound the size of one Arrow batch)."""
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
        if self.vectorized:
            self._add_section_vectorized(section, header)
            return
        try:
            kept = self._decode_records(section, header)
        except IndexError:
            raise CorruptRecordError(f"records section of batch at offset {header.base_offset} truncated") from None
        timestamp_type = TIMESTAMP_TYPE_LOG_APPEND_TIME if header.is_log_append_time else TIMESTAMP_TYPE_CREATE_TIME
        self.timestamp_types.extend(array("i", [timestamp_type]) * kept)
        if header.is_log_append_time and kept:
            self.timestamps[len(self.timestamps) - kept:] = array("q", [header.max_timestamp]) * kept

    def _add_section_vectorized(self, section: bytes, header) -> None:
        try:
            columns = vectorized.decode_section(section, header, self.start_offset, self.end_offset,
                                                len(self._vector_buffers))
        except IndexError:
            raise CorruptRecordError(f"records section of batch at offset {header.base_offset} truncated") from None
        if columns.rows:
            self._vector_sections.append((columns, header.is_log_append_time))
            self._vector_buffers.append(section)
            self._vector_rows += columns.rows

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
        if self.vectorized:
            return self._to_arrow_vectorized(topic, partition, schema)
        rows = self.rows
        columns = [
            self.keys.to_arrow(),
            self.values.to_arrow(),
            pa.repeat(pa.scalar(topic, pa.string()), rows),
            pa.repeat(pa.scalar(partition, pa.int32()), rows),
            pa.array(self.offsets, pa.int64()),
            _timestamp_column(self.timestamps, schema.field("timestamp").type),
            pa.array(self.timestamp_types, pa.int32()),
        ]
        if self.include_headers:
            columns.append(self._headers_column(schema.field("headers").type))
        return pa.RecordBatch.from_arrays(columns, schema=schema)

    def _to_arrow_vectorized(self, topic: str, partition: int, schema: pa.Schema) -> pa.RecordBatch:
        rows = self._vector_rows
        sections = [columns for columns, _ in self._vector_sections]
        buffers = [pa.py_buffer(section) for section in self._vector_buffers]
        timestamp_types = [np.full(columns.rows, int(append_time), np.int32)
                           for columns, append_time in self._vector_sections]
        timestamps = np.concatenate([c.timestamps for c in sections]) if sections else np.zeros(0, np.int64)
        columns = [
            _view_column(np, [c.key_views for c in sections], [c.key_valid for c in sections], buffers, rows),
            _view_column(np, [c.value_views for c in sections], [c.value_valid for c in sections], buffers, rows),
            pa.repeat(pa.scalar(topic, pa.string()), rows),
            pa.repeat(pa.scalar(partition, pa.int32()), rows),
            pa.array(np.concatenate([c.offsets for c in sections]) if sections else [], pa.int64()),
            pa.array(timestamps * 1000, pa.int64()).cast(schema.field("timestamp").type),
            pa.array(np.concatenate(timestamp_types) if sections else [], pa.int32()),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=schema)

    def _headers_column(self, headers_type: pa.DataType) -> pa.Array:
        struct_type = headers_type.value_type
        keys = self.header_keys.to_arrow().view(pa.string())
        entries = pa.StructArray.from_arrays([keys, self.header_values.to_arrow()], fields=list(struct_type))
        return pa.ListArray.from_arrays(pa.array(self.header_firsts, pa.int32()), entries, type=headers_type)


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
            validity = pa.Array.from_buffers(pa.int8(), rows, [None, pa.py_buffer(valid)]).cast(pa.bool_()).buffers()[1]
        return pa.Array.from_buffers(pa.binary(), rows, [validity, pa.py_buffer(offsets),
                                                         pa.py_buffer(b"".join(self.parts))],
                                     null_count=len(self.nulls))


def _view_column(np, views: list, valid: list, buffers: list, rows: int) -> pa.Array:
    """A binary column from binary_view structs into `buffers` (Arrow copies the bytes once, in C)."""
    if not rows:
        return pa.array([], pa.binary())
    all_valid = np.concatenate(valid)
    null_count = int(rows - all_valid.sum())
    validity = pa.array(all_valid).buffers()[1] if null_count else None
    view_bytes = pa.py_buffer(np.concatenate(views))
    array_view = pa.Array.from_buffers(pa.binary_view(), rows, [validity, view_bytes] + buffers,
                                       null_count=null_count)
    return array_view.cast(pa.binary())


def _timestamp_column(timestamps_ms: array, timestamp_type: pa.DataType) -> pa.Array:
    """Milliseconds since the epoch as Spark's timestamp type in Arrow (microseconds, UTC)."""
    micros = pc.multiply(pa.array(timestamps_ms, pa.int64()), pa.scalar(1000, pa.int64()))
    return micros.cast(timestamp_type)
