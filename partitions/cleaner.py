"""Log compaction: Kafka's `LogCleaner` for one partition, run on closed segments only.

Theory of operation (Kafka's design, one pass):
1. The cleanable range is the closed segments below `first_uncleanable_offset` (the caller's last stable
   offset / high watermark; the active segment is never cleaned), stopping at the first segment younger than
   min.compaction.lag.ms. Offsets below the cleaner checkpoint are "clean", the rest "dirty".
2. Unless forced, a pass runs only when dirty bytes / cleanable bytes >= min.cleanable.dirty.ratio.
3. An offset map (key -> last offset) is built from the dirty records.
4. Segments are rewritten in groups (each group fits one segment: segment.bytes, index size, int32 relative
   offsets). A record survives when no later offset holds its key. A tombstone (null value) survives until
   its batch's delete horizon (KIP-534): the first pass that keeps it stamps horizon = now +
   delete.retention.ms into the rewritten batch, a later pass after the horizon drops it. Records without a
   key are dropped (a compacted topic cannot hold them). Batches are copied verbatim when nothing in them
   changes; otherwise re-encoded with the same base offset, last offset delta, producer fields, leader epoch
   and compression (Kafka's buildRetainedRecordsInto), so offsets are preserved and gaps appear.
5. The swap (Kafka's replaceSegments): the group is written as `<base>.log.cleaned` (+ indexes), fsynced,
   renamed to `.swap` (the commit point), the replaced segments are renamed `.deleted`, the `.swap` files
   are renamed into place, and the directory is fsynced. A crash at any step is finished or rolled back by
   the log's recovery; no reader ever sees a half-cleaned segment because the in-memory segment list
   changes only after the swap.

Transactions (the cleanable range ends at the last stable offset, so every transaction in it is decided):
the data batches of aborted transactions (the caller's `aborted` list, from the partition's transaction
index) are removed whole, and their keys never enter the offset map; committed transactional records are
compacted like any other, keeping the batch's transactional flag.

Simplifications (documented, safe: they retain more than Kafka would, never less): transaction markers are
kept (Kafka removes one once its transaction has no data left and its delete horizon passed); an emptied
batch of an idempotent or transactional producer is kept empty (producer state) even when Kafka could drop
it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from partitions.batch import NO_PRODUCER_ID, BatchHeader, parse_header
from partitions.index import RELATIVE_OFFSET_MAX
from partitions.records import Record, build_batch, decode_batch
from partitions.segment import CLEANED_SUFFIX, SWAP_SUFFIX, BatchPlacement, LogSegment

OFFSET_MAP_ENTRIES_MAX = 2_000_000  # bound on the keys held in memory by one pass (Kafka's dedupe buffer)


@dataclass(slots=True)
class CleanerStats:
    """What one compaction pass did (or why it did nothing)."""

    skipped_reason: str | None = None
    first_dirty_offset: int = -1
    end_offset: int = -1  # cleaned up to (exclusive): the new cleaner checkpoint
    segments_read: int = 0
    segments_written: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    tombstones_removed: int = 0
    batches_copied: int = 0
    batches_rewritten: int = 0
    batches_dropped: int = 0
    earliest_delete_horizon_ms: int | None = None  # of the tombstones kept; a pass is due then


def compact_log(log, now_ms: int, first_uncleanable_offset: int | None, force: bool,
                aborted: list[tuple[int, int, int]] = ()) -> CleanerStats:
    """One compaction pass over `log` (a PartitionLog). Raises CorruptRecordError (or another record
    decoding error) for a batch that cannot be decoded; the log is left unchanged then."""
    stats = CleanerStats()
    if not log.config.compact:
        stats.skipped_reason = "cleanup.policy has no compact"
        return stats
    cleanable = _cleanable_segments(log, now_ms, first_uncleanable_offset)
    first_dirty = max(log.cleaner_checkpoint, log.log_start_offset)
    horizon = log.earliest_delete_horizon_ms
    horizon_due = horizon is not None and horizon <= now_ms  # KIP-534: expired tombstones make a pass due
    if not cleanable or (first_dirty >= cleanable[-1].next_offset and not horizon_due):
        stats.skipped_reason = "nothing dirty to clean"
        return stats
    dirty_bytes = sum(segment.size for segment in cleanable if segment.next_offset > first_dirty)
    total_bytes = sum(segment.size for segment in cleanable)
    if not (force or horizon_due) and dirty_bytes < log.config.min_cleanable_dirty_ratio * total_bytes:
        stats.skipped_reason = f"dirty ratio {dirty_bytes / max(total_bytes, 1):.2f} below min.cleanable.dirty.ratio"
        return stats
    is_aborted = _aborted_test(aborted)
    offset_map, cleanable = _build_offset_map(cleanable, first_dirty, is_aborted)
    stats.first_dirty_offset = first_dirty
    stats.end_offset = cleanable[-1].next_offset
    for group in _groups(cleanable, log.config.segment_bytes, cleanable[0].offset_index.entries_max):
        _clean_group(log, group, offset_map, now_ms, stats, is_aborted)
    log.cleaner_checkpoint = max(log.cleaner_checkpoint, stats.end_offset)
    log.save_cleaner_checkpoint()
    log.earliest_delete_horizon_ms = stats.earliest_delete_horizon_ms
    return stats


def _cleanable_segments(log, now_ms: int, first_uncleanable_offset: int | None) -> list[LogSegment]:
    end = log.active_segment.base_offset
    if first_uncleanable_offset is not None:
        end = min(end, first_uncleanable_offset)
    lag_deadline_ms = now_ms - log.config.min_compaction_lag_ms
    cleanable = []
    for segment, following in zip(log.segments, log.segments[1:]):
        if following.base_offset > end or segment.next_offset > end:
            break
        if log.config.min_compaction_lag_ms > 0 and segment.max_timestamp > lag_deadline_ms:
            break
        cleanable.append(segment)
    return cleanable


def _iter_decoded(segment: LogSegment):
    for position, header in segment.batch_headers():
        yield header, segment.read_batch(position, header)


def _aborted_test(aborted) -> Callable[[BatchHeader], bool]:
    """header -> whether it is a data batch of an aborted transaction (producer id, first..marker offset)."""
    by_producer: dict[int, list[tuple[int, int]]] = {}
    for producer_id, first_offset, last_offset in aborted:
        by_producer.setdefault(producer_id, []).append((first_offset, last_offset))

    def is_aborted(header: BatchHeader) -> bool:
        if not header.is_transactional or header.is_control:
            return False
        return any(first <= header.base_offset <= last for first, last in by_producer.get(header.producer_id, ()))

    return is_aborted


def _build_offset_map(cleanable: list[LogSegment], first_dirty: int, is_aborted
                      ) -> tuple[dict[bytes, int], list[LogSegment]]:
    """key -> last offset over the dirty records; the cleanable list is cut where the map fills up."""
    offset_map: dict[bytes, int] = {}
    for slot, segment in enumerate(cleanable):
        if segment.next_offset <= first_dirty:
            continue
        for header, data in _iter_decoded(segment):
            if header.last_offset < first_dirty or header.is_control or is_aborted(header):
                continue
            for record in decode_batch(data).records:
                if record.key is not None and record.offset >= first_dirty:
                    offset_map[record.key] = record.offset
        if len(offset_map) >= OFFSET_MAP_ENTRIES_MAX and slot + 1 < len(cleanable):
            return offset_map, cleanable[: slot + 1]
    return offset_map, cleanable


def _groups(segments: list[LogSegment], segment_bytes: int, index_entries_max: int) -> list[list[LogSegment]]:
    """Consecutive segments whose union fits in one segment (Kafka's groupSegmentsBySize)."""
    groups: list[list[LogSegment]] = []
    for segment in segments:
        if groups:
            group = groups[-1]
            size = sum(s.size for s in group) + segment.size
            entries = sum(len(s.offset_index) for s in group) + len(segment.offset_index)
            offsets = segment.next_offset - group[0].base_offset
            if size <= segment_bytes and entries < index_entries_max and offsets <= RELATIVE_OFFSET_MAX:
                group.append(segment)
                continue
        groups.append([segment])
    return groups


def _clean_group(log, group: list[LogSegment], offset_map: dict[bytes, int], now_ms: int, stats: CleanerStats,
                 is_aborted) -> None:
    cleaned = log.segment_object(group[0].base_offset, CLEANED_SUFFIX)
    try:
        cleaned.log.truncate(0)
        cleaned.recover()  # empty: resets indexes left by an earlier failed pass
        for segment in group:
            stats.segments_read += 1
            stats.bytes_read += segment.size
            for header, data in _iter_decoded(segment):
                if is_aborted(header):
                    stats.batches_dropped += 1  # an aborted transaction's data: never visible, removed
                    continue
                output = _retained_batch(header, data, offset_map, now_ms, log.config.delete_retention_ms, stats)
                if output is not None:
                    _append_batch(cleaned, output)
        cleaned.seal()
    except BaseException:
        cleaned.delete()
        raise
    stats.segments_written += 1
    stats.bytes_written += cleaned.size
    _swap(log, group, cleaned)


def _append_batch(segment: LogSegment, batch: bytes) -> None:
    header = parse_header(batch)
    segment.append([batch], [BatchPlacement(0, header.size, header.last_offset, header.max_timestamp)])


def _retained_batch(header: BatchHeader, data: bytes, offset_map: dict[bytes, int], now_ms: int,
                    delete_retention_ms: int, stats: CleanerStats) -> bytes | None:
    """The batch to write in place of `data`: itself, a re-encoded subset, or None (dropped)."""
    if header.is_control:
        stats.batches_copied += 1
        return data
    records = decode_batch(data).records
    stats.records_read += len(records)
    horizon_passed = header.has_delete_horizon and now_ms >= header.base_timestamp
    retained: list[Record] = []
    for record in records:
        if record.key is None or offset_map.get(record.key, record.offset) > record.offset:
            continue
        if record.value is None and horizon_passed:
            stats.tombstones_removed += 1
            continue
        retained.append(record)
    stats.records_retained += len(retained)
    has_tombstones = any(record.value is None for record in retained)
    needs_horizon = has_tombstones and not header.has_delete_horizon
    if len(retained) == len(records) and not needs_horizon:
        stats.batches_copied += 1
        _delete_horizon_ms(header, has_tombstones, now_ms, delete_retention_ms, stats)
        return data
    if not retained and header.producer_id == NO_PRODUCER_ID:
        stats.batches_dropped += 1
        return None
    stats.batches_rewritten += 1
    horizon_ms = _delete_horizon_ms(header, has_tombstones, now_ms, delete_retention_ms, stats)
    return build_batch(
        retained,
        base_offset=header.base_offset,
        compression=header.compression,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        is_transactional=header.is_transactional,
        log_append_time=header.is_log_append_time,
        partition_leader_epoch=header.partition_leader_epoch,
        delete_horizon_ms=horizon_ms,
        last_offset_delta=header.last_offset_delta,
    )


def _delete_horizon_ms(header: BatchHeader, has_tombstones: bool, now_ms: int, delete_retention_ms: int,
                      stats: CleanerStats) -> int | None:
    """The horizon to write for a batch that keeps tombstones (its own, or now + delete.retention.ms)."""
    if not has_tombstones:
        return None
    horizon_ms = header.base_timestamp if header.has_delete_horizon else now_ms + delete_retention_ms
    if stats.earliest_delete_horizon_ms is None or horizon_ms < stats.earliest_delete_horizon_ms:
        stats.earliest_delete_horizon_ms = horizon_ms
    return horizon_ms


def _swap(log, group: list[LogSegment], cleaned: LogSegment) -> None:
    """Replace `group` by `cleaned` in the log: .cleaned -> .swap (commit point), old -> .deleted, .swap -> live."""
    cleaned.change_suffix(SWAP_SUFFIX)
    log.storage.fsync_dir(log.directory)
    first = log.segments.index(group[0])
    assert log.segments[first : first + len(group)] == group, f"group {group} not contiguous in the log"
    for segment in group:
        log.retire_segment(segment)
    cleaned.change_suffix("")
    log.storage.fsync_dir(log.directory)
    log.segments[first : first + len(group)] = [cleaned]
