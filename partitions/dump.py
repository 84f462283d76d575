"""Inspect segment files (Kafka's kafka-dump-log), pure: bytes in, descriptions out.

Theory of operation: `dump_log` walks a .log file's bytes batch by batch and describes each one from its
header (offsets, epoch, counts, compression, CRC validity, producer fields, flags, position and size);
with `with_records` it also decodes keys, values and headers. A batch whose CRC fails is reported and the
walk goes on, because its length still says where the next batch starts; a length that cannot be right (or
a truncated tail) ends the walk with an error entry, since nothing after it can be located.
`dump_offset_index` / `dump_time_index` list index entries and say whether the index is sane, checking each
entry against the .log when its bytes are given (Kafka's "index mismatch" check). The edge
(cli/dump_log.py) reads the files and prints these results as text or JSON.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from partitions.batch import (
    BATCH_LENGTH_MIN,
    HEADER_SIZE,
    LOG_OVERHEAD,
    compute_crc,
    parse_header,
    peek_offset_and_length,
)
from partitions.errors import KafkaError
from partitions.index import OFFSET_ENTRY, TIME_ENTRY
from partitions.records import decode_batch

COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


@dataclass(slots=True)
class RecordDump:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass(slots=True)
class BatchDump:
    position: int
    size: int
    base_offset: int
    last_offset: int
    leader_epoch: int
    record_count: int
    compression: str
    crc_ok: bool
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    is_transactional: bool
    is_control: bool
    timestamp_type: str
    max_timestamp: int
    delete_horizon_ms: int | None
    records: list[RecordDump] | None = None
    error: str | None = None  # why records could not be decoded (CRC, compression, malformed)


@dataclass(slots=True)
class LogDump:
    batches: list[BatchDump] = field(default_factory=list)
    error: str | None = None  # why the walk stopped before the end of the file
    error_position: int | None = None


@dataclass(slots=True)
class IndexDump:
    kind: str  # "offset" or "time"
    entries: list[tuple[int, int]]  # (offset, position) or (timestamp, offset), absolute offsets
    problems: list[str]

    @property
    def sane(self) -> bool:
        return not self.problems


def dump_log(data: bytes, with_records: bool = False) -> LogDump:
    """Describe every batch of a .log file's bytes (see the module docstring)."""
    result = LogDump()
    position = 0
    while position < len(data):
        if len(data) - position < HEADER_SIZE:
            result.error, result.error_position = f"{len(data) - position} trailing bytes (torn batch)", position
            break
        _, size = peek_offset_and_length(data, position)
        if size - LOG_OVERHEAD < BATCH_LENGTH_MIN or position + size > len(data):
            result.error = f"batch length {size - LOG_OVERHEAD} impossible with {len(data) - position} bytes left"
            result.error_position = position
            break
        result.batches.append(_dump_batch(memoryview(data)[position : position + size], position, with_records))
        position += size
    return result


def _dump_batch(batch: memoryview, position: int, with_records: bool) -> BatchDump:
    try:
        header = parse_header(batch)
    except KafkaError as error:
        base_offset, size = peek_offset_and_length(batch)
        return BatchDump(position, size, base_offset, -1, -1, 0, "unknown", False, -1, -1, -1, -1, False, False,
                         "unknown", -1, None, None, f"unreadable header: {error.message}")
    dump = BatchDump(
        position=position,
        size=header.size,
        base_offset=header.base_offset,
        last_offset=header.last_offset,
        leader_epoch=header.partition_leader_epoch,
        record_count=header.records_count,
        compression=COMPRESSION_NAMES.get(header.compression, f"unknown({header.compression})"),
        crc_ok=compute_crc(batch) == header.crc,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        last_sequence=header.last_sequence,
        is_transactional=header.is_transactional,
        is_control=header.is_control,
        timestamp_type="LogAppendTime" if header.is_log_append_time else "CreateTime",
        max_timestamp=header.max_timestamp,
        delete_horizon_ms=header.base_timestamp if header.has_delete_horizon else None,
    )
    if not dump.crc_ok:
        dump.error = f"CRC mismatch: stored {header.crc:#010x}, computed {compute_crc(batch):#010x}"
    elif with_records:
        try:
            dump.records = [
                RecordDump(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decode_batch(batch).records
            ]
        except KafkaError as error:
            dump.error = f"records undecodable: {error.message}"
    return dump


def dump_offset_index(data: bytes, base_offset: int, log_data: bytes | None = None) -> IndexDump:
    """Entries of a .index file and what is wrong with them (torn, not increasing, not matching the log)."""
    problems = _size_problem(data, OFFSET_ENTRY.size)
    whole = len(data) - len(data) % OFFSET_ENTRY.size
    entries = [(base_offset + relative, position) for relative, position in OFFSET_ENTRY.iter_unpack(data[:whole])]
    for slot in range(1, len(entries)):
        if entries[slot][0] <= entries[slot - 1][0] or entries[slot][1] <= entries[slot - 1][1]:
            problems.append(f"entry {slot} {entries[slot]} is not after {entries[slot - 1]}")
    if log_data is not None:
        for offset, position in entries:
            problems.extend(_offset_entry_problem(log_data, offset, position))
    return IndexDump("offset", entries, problems)


def _offset_entry_problem(log_data: bytes, offset: int, position: int) -> list[str]:
    try:
        header = parse_header(log_data, position)
    except (KafkaError, struct.error) as error:
        return [f"entry ({offset}, {position}) does not point at a batch: {error}"]
    if header.last_offset != offset:
        return [f"entry ({offset}, {position}) points at a batch ending at offset {header.last_offset}"]
    return []


def dump_time_index(data: bytes, base_offset: int, log_data: bytes | None = None) -> IndexDump:
    """Entries of a .timeindex file and what is wrong with them."""
    problems = _size_problem(data, TIME_ENTRY.size)
    whole = len(data) - len(data) % TIME_ENTRY.size
    entries = [(timestamp, base_offset + relative) for timestamp, relative in TIME_ENTRY.iter_unpack(data[:whole])]
    for slot in range(1, len(entries)):
        if entries[slot][0] <= entries[slot - 1][0] or entries[slot][1] < entries[slot - 1][1]:
            problems.append(f"entry {slot} {entries[slot]} is not after {entries[slot - 1]}")
    if log_data is not None and entries:
        last_offsets = {batch.last_offset for batch in dump_log(log_data).batches}
        problems.extend(f"entry {entry} names no batch's last offset" for entry in entries if entry[1] not in last_offsets)
    return IndexDump("time", entries, problems)


def _size_problem(data: bytes, entry_size: int) -> list[str]:
    if len(data) % entry_size:
        return [f"size {len(data)} is not a multiple of the {entry_size}-byte entry"]
    return []


def show_bytes(data: bytes | None) -> str | None:
    """Bytes as text for humans: UTF-8 where it decodes, escapes elsewhere; None stays None."""
    return None if data is None else data.decode("utf-8", "backslashreplace")


def batch_line(batch: BatchDump) -> str:
    """One line per batch, in kafka-dump-log's words."""
    parts = [
        f"baseOffset: {batch.base_offset}",
        f"lastOffset: {batch.last_offset}",
        f"count: {batch.record_count}",
        f"baseSequence: {batch.base_sequence}",
        f"lastSequence: {batch.last_sequence}",
        f"producerId: {batch.producer_id}",
        f"producerEpoch: {batch.producer_epoch}",
        f"partitionLeaderEpoch: {batch.leader_epoch}",
        f"isTransactional: {str(batch.is_transactional).lower()}",
        f"isControl: {str(batch.is_control).lower()}",
        f"deleteHorizonMs: {batch.delete_horizon_ms if batch.delete_horizon_ms is not None else 'none'}",
        f"position: {batch.position}",
        f"{batch.timestamp_type}: {batch.max_timestamp}",
        f"size: {batch.size}",
        f"compresscodec: {batch.compression}",
        f"crcValid: {str(batch.crc_ok).lower()}",
    ]
    line = " ".join(parts)
    return line + (f" error: {batch.error}" if batch.error else "")


def record_line(record: RecordDump) -> str:
    headers = ", ".join(f"{key}={show_bytes(value)}" for key, value in record.headers)
    return (
        f"| offset: {record.offset} timestamp: {record.timestamp} key: {show_bytes(record.key)} "
        f"payload: {show_bytes(record.value)} headers: [{headers}]"
    )


def batch_json(batch: BatchDump) -> dict:
    result = {
        "base_offset": batch.base_offset,
        "last_offset": batch.last_offset,
        "leader_epoch": batch.leader_epoch,
        "record_count": batch.record_count,
        "compression": batch.compression,
        "crc_ok": batch.crc_ok,
        "producer_id": batch.producer_id,
        "producer_epoch": batch.producer_epoch,
        "base_sequence": batch.base_sequence,
        "last_sequence": batch.last_sequence,
        "is_transactional": batch.is_transactional,
        "is_control": batch.is_control,
        "timestamp_type": batch.timestamp_type,
        "max_timestamp": batch.max_timestamp,
        "delete_horizon_ms": batch.delete_horizon_ms,
        "position": batch.position,
        "size": batch.size,
    }
    if batch.error:
        result["error"] = batch.error
    if batch.records is not None:
        result["records"] = [
            {
                "offset": r.offset,
                "timestamp": r.timestamp,
                "key": show_bytes(r.key),
                "value": show_bytes(r.value),
                "headers": [[key, show_bytes(value)] for key, value in r.headers],
            }
            for r in batch.records
        ]
    return result
