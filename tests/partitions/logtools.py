"""Helpers for the partition log tests: producer-style batches and whole-log readers (no mocks)."""

from __future__ import annotations

from partitions.log import PartitionLog
from partitions.log_config import LogConfig
from partitions.records import build_batch, decode_batches, iter_records
from partitions.storage import MemoryStorage

DIRECTORY = "orders-0"
READ_ALL_BYTES = 1 << 30


def batch(*values: bytes, timestamp_ms: int = 1_000, key: bytes | None = None, **options) -> bytes:
    """One batch of `values` (all with `key`), as a producer sends it (base offset 0, no epoch)."""
    return build_batch([(key, value) for value in values], base_timestamp=timestamp_ms, **options)


def keyed(pairs: list[tuple[bytes, bytes | None]], timestamp_ms: int = 1_000) -> bytes:
    return build_batch(pairs, base_timestamp=timestamp_ms)


def open_log(storage=None, now_ms: int = 1_000, **config) -> PartitionLog:
    storage = MemoryStorage() if storage is None else storage
    return PartitionLog.open(storage, DIRECTORY, LogConfig(**config), now_ms)


def read_all(log: PartitionLog, offset: int | None = None, max_offset: int | None = None) -> bytes:
    start = log.log_start_offset if offset is None else offset
    return log.read(start, READ_ALL_BYTES, max_offset=max_offset).records


def values(log: PartitionLog, offset: int | None = None) -> list[tuple[int, bytes | None]]:
    return [(record.offset, record.value) for _, record in iter_records(read_all(log, offset))]


def key_values(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(record.offset, record.key, record.value) for _, record in iter_records(read_all(log))]


def batch_bases(data: bytes) -> list[int]:
    return [decoded.header.base_offset for decoded in decode_batches(data)]
