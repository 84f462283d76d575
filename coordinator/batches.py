"""Record batches of an internal topic: the coordinator's records as one v2 batch, and read batches back as
`LoadedRecord`s (data and transaction markers). Pure functions shared by every CoordinatorPartitions port."""

from __future__ import annotations

from coordinator.shard import CoordinatorRecord, LoadedRecord, TransactionalWrite
from partitions.records import build_batch, decode_batches, parse_control_record


def coordinator_batch(records: list[CoordinatorRecord], transactional: TransactionalWrite | None,
                      now_ms: int) -> bytes:
    """One uncompressed batch of `records` (offsets from 0: the log assigns them), stamped `now_ms`; with the
    producer id, epoch and the transactional flag of a transactional write (TxnOffsetCommit)."""
    assert records, "an empty coordinator write is not appended"
    options = {}
    if transactional is not None:
        options = dict(producer_id=transactional.producer_id, producer_epoch=transactional.producer_epoch,
                       is_transactional=True)
    return build_batch([(record.key, record.value) for record in records], base_timestamp=now_ms, **options)


def loaded_records(buffer: bytes | bytearray | memoryview, start_offset: int) -> tuple[list[LoadedRecord], int]:
    """The records of the whole batches in `buffer` at or after `start_offset`, and the offset after the last
    batch (start_offset when `buffer` holds no whole batch). Raises what decode_batches raises."""
    loaded: list[LoadedRecord] = []
    next_offset = start_offset
    for decoded in decode_batches(buffer):
        header = decoded.header
        for record in decoded.records:
            if record.offset < start_offset:
                continue
            control_type = parse_control_record(record)[0] if header.is_control else None
            loaded.append(LoadedRecord(record.offset, record.key, record.value, header.producer_id,
                                       header.producer_epoch, header.is_control,
                                       None if control_type is None else int(control_type)))
        next_offset = max(next_offset, header.next_offset)
    return loaded, next_offset
