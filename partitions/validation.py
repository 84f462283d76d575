"""The record-level rules of Kafka's LogValidator for a batch a client produces: every record is walked
(decompressed first when the batch is compressed), as Kafka's broker does before it assigns offsets.

Rules, each with Kafka's error:
- the records section decompresses (CORRUPT_MESSAGE otherwise) to at most `max_bytes` (RECORD_TOO_LARGE);
- exactly `records_count` well-formed records fill it: each record's length prefix, key, value and headers fit
  inside it and use all of it, nothing is missing or left over (INVALID_RECORD; Kafka's "Incorrect declared
  batch size" and "Found invalid record structure");
- relative offsets run 0, 1, 2, ... (INVALID_RECORD; Kafka rewrites such a compressed batch, Flotilla does
  not rewrite batches and refuses it);
- with CreateTime, every record's timestamp is within message.timestamp.before/after.max.ms of now
  (INVALID_TIMESTAMP);
- on a compacted topic every record has a key (INVALID_RECORD with KIP-467's per-record errors).
The batch-header rules (magic, CRC, counts against last_offset_delta, control batches, producer ids) are in
PartitionLog._check_leader_batch.

The walk is compiled (partitions/_recordscan.c, ~6 ns a record); without a C compiler at install time the
same rules run in Python (`scan_records_python`, ~50x slower)."""

from __future__ import annotations

from partitions.compression import decompress
from partitions.errors import CorruptRecordError, InvalidRecordError, InvalidTimestampError
from partitions.log_config import LogConfig
from partitions.records import NO_TIMESTAMP, VARINT_BYTES_MAX, VARLONG_BYTES_MAX, read_varint


def scan_records_python(section: bytes | memoryview, records_count: int,
                        want_keyless: bool) -> tuple[int, int, list[int] | None]:
    """(smallest timestamp delta, largest timestamp delta, indexes of keyless records or None) of the records
    section `section` holding `records_count` records. Raises ValueError naming the first problem; the same
    contract as partitions._recordscan.scan_records."""
    view = memoryview(section)
    end = len(view)
    keyless: list[int] | None = [] if want_keyless else None
    deltas: list[int] = []
    position = 0
    try:
        for index in range(records_count):
            if position >= end:
                raise ValueError(f"record {index}: missing: the records section ends before records_count records")
            length, position = read_varint(view, position, VARINT_BYTES_MAX)
            if length <= 0 or length > end - position:
                raise ValueError(f"record {index}: invalid length prefix")
            record_end = position + length
            body = view[:record_end]  # reads past the record's end raise
            timestamp_delta, position = read_varint(body, position + 1, VARLONG_BYTES_MAX)
            offset_delta, position = read_varint(body, position, VARINT_BYTES_MAX)
            if offset_delta != index:
                raise ValueError(f"record {index}: offset delta {offset_delta}, expected {index} "
                                 "(relative offsets must be consecutive)")
            deltas.append(timestamp_delta)
            size, position = _skip_bytes(body, position, null_ok=True)
            if size == -1 and keyless is not None:
                keyless.append(index)
            _, position = _skip_bytes(body, position, null_ok=True)
            header_count, position = read_varint(body, position, VARINT_BYTES_MAX)
            if header_count < 0:
                raise ValueError(f"record {index}: invalid header count")
            for _ in range(header_count):
                _, position = _skip_bytes(body, position, null_ok=False)
                _, position = _skip_bytes(body, position, null_ok=True)
            if position != record_end:
                raise ValueError(f"record {index}: its fields do not fill its length")
    except CorruptRecordError as error:  # a varint past the record's end or too long
        raise ValueError(f"record {len(deltas)}: {error}") from None
    if position != end or (records_count == 0 and end):
        raise ValueError(f"{end - position} bytes after the last of {records_count} records (records_count too small)")
    return (min(deltas, default=0), max(deltas, default=0), keyless)


def _skip_bytes(body: bytes | memoryview, position: int, null_ok: bool) -> tuple[int, int]:
    size, position = read_varint(body, position, VARINT_BYTES_MAX)
    if size == -1 and null_ok:
        return size, position
    if size < 0 or position + size > len(body):
        raise ValueError(f"invalid field length {size} at byte {position}")
    return size, position + size


try:
    from partitions._recordscan import scan_records
except ImportError:  # built without a C compiler: the same rules, slower
    scan_records = scan_records_python
COMPILED = scan_records is not scan_records_python


def check_client_records(section: memoryview, compression: int, records_count: int, base_timestamp: int,
                         config: LogConfig, now_ms: int, partition_name: str, max_bytes: int) -> None:
    """Apply the record rules to the records section `section` of a batch a client produced (header rules
    already checked). Raises CorruptRecordError, RecordTooLargeError, InvalidRecordError (with
    `record_errors` for keyless records on a compacted topic) or InvalidTimestampError."""
    data = decompress(compression, section, max_bytes) if compression else section
    try:
        smallest, largest, keyless = scan_records(data, records_count, config.compact)
    except ValueError as error:
        raise InvalidRecordError(f"invalid record batch in topic partition {partition_name}: {error}") from None
    if keyless:
        message = f"Compacted topic cannot accept message without key in topic partition {partition_name}."
        error = InvalidRecordError(message)
        error.record_errors = [(index, message) for index in keyless]
        raise error
    if not config.log_append_time and base_timestamp != NO_TIMESTAMP:
        oldest, newest = base_timestamp + smallest, base_timestamp + largest
        if now_ms - oldest > config.message_timestamp_before_max_ms:
            raise InvalidTimestampError(f"timestamp {oldest} of a record is too far before {now_ms} "
                                        f"(message.timestamp.before.max.ms={config.message_timestamp_before_max_ms})")
        if newest - now_ms > config.message_timestamp_after_max_ms:
            raise InvalidTimestampError(f"timestamp {newest} of a record is too far after {now_ms} "
                                        f"(message.timestamp.after.max.ms={config.message_timestamp_after_max_ms})")
