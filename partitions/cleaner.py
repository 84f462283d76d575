"""Log compaction: Kafka's `LogCleaner` for one partition, run on closed segments only.

Theory of operation (Kafka's design, one pass):
1. The cleanable range is the closed segments below `first_uncleanable_offset` (the caller's last stable
   offset / high watermark; the active segment is never cleaned), stopping at the first segment younger than
   min.compaction.lag.ms. Offsets below the cleaner checkpoint are "clean", the rest "dirty".
2. Unless forced, a pass runs only when dirty bytes / cleanable bytes >= min.cleanable.dirty.ratio, or when
   a delete horizon kept by an earlier pass has passed.
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

Transactions (Kafka's Cleaner.cleanInto and CleanedTransactionMetadata; the cleanable range ends at the last
stable offset, so every transaction in it is decided). Each pass reads the log from its first segment in
offset order, with the caller's aborted transactions (the partition's `.txnindex` entries, as (producer id,
first offset, marker offset)) becoming "ongoing" when the pass reaches their first offset:
- A data batch of a producer with an ongoing aborted transaction is aborted data: all its records go, and
  its keys never enter the offset map. Any other transactional data batch marks its producer's transaction
  as "read in this pass"; its records compact like any other and keep the transactional flag.
- A COMMIT marker may be discarded when no batch of its transaction was read in this pass; an ABORT marker
  when no batch of its aborted transaction was read in this pass. So a marker outlives its data by at least
  one pass. A marker that may be discarded is kept once more with a delete horizon (now +
  delete.retention.ms, stamped as for tombstones: KIP-534), and the first pass after the horizon drops it.
  An empty control batch (emptied by an earlier pass) may always be discarded. Other control records stay.
- An aborted transaction whose marker this pass read while keeping a batch of its data keeps its index
  entry; the entries of the other aborted transactions whose markers lie in a rewritten group go:
  `drop_aborted(keys)` is called with their (producer id, marker offset) before that group's swap (no data
  of theirs is in the log before the swap, so the order is safe for read_committed; Kafka rebuilds a
  cleaned segment's `.txnindex` with the retained entries only). An index entry therefore never outlives
  its marker: a read_committed consumer that sees an entry also sees the marker that ends it.
- Empty batches (Kafka's BatchRetention.RETAIN_EMPTY): a batch whose records all go is dropped, except
  the batch holding an active producer's last data offset (it carries the producer's last sequence and
  epoch), the marker with that producer's epoch when its state has no data batch (fencing), and the batch
  that ends the cleaning round (first_uncleanable_offset). Those are kept as an empty batch: same offsets,
  producer fields, flags and max timestamp, no records. `last_records` gives the active producers' last
  data offset and epoch (Kafka's lastRecordsOfActiveProducers, from the partition's producer state).

Replicas that are behind (a rule Kafka does not have). A tombstone or a marker past its delete horizon is removed
only while every replica of the partition holds the cleanable range (`all_replicas_in_sync`, from the caller:
partitions/replica.py `Partition.replicated_offset`). The leader knows it: the cleanable range lies below the high
watermark, which no ISR member's log end is below, so while every replica is in its ISR every replica has already
fetched what the pass removes. A follower learns it from its leader, which answers each of its fetches with that
offset. A replica out of the ISR may still hold a deleted key's older value or an aborted transaction's data without
having fetched the tombstone or the ABORT marker that ends it: in Kafka a replica behind by more than
delete.retention.ms fetches past a removed marker, keeps the aborted data as an open transaction and commits it with
its producer's next COMMIT, or keeps a deleted key alive, and serves either once it leads. Here such items outlive
their horizon until the ISR is whole again (the replica back in sync, or reassigned away); a passed horizon does not
make a pass due meanwhile, so an offline replica costs the log its tombstones and markers, not repeated passes.
Superseded records and aborted data still go: a replica that is behind fetches their successors, or the marker,
later. A follower does not judge by its own metadata image, which may trail the leader's ISR (a follower cut off
from the controllers but not from its leader keeps an image in which every replica is in sync while the leader has
shrunk the ISR and moved its high watermark past what the missing replica holds): it takes its leader's word. Not
covered: a replica that loses records it had fetched (unflushed, in a power loss) while still in the ISR, if their
horizon passed meanwhile (the kernel writes dirty pages back within about 30 s, well inside delete.retention.ms'
default of a day; the simulator's disk keeps them unwritten until an fsync).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from partitions.batch import NO_PRODUCER_ID, BatchHeader, parse_header
from partitions.errors import CorruptRecordError, InvalidRecordError
from partitions.index import RELATIVE_OFFSET_MAX
from partitions.records import ABORT, COMMIT, Record, build_batch, control_record_type, decode_batch
from partitions.segment import CLEANED_SUFFIX, SWAP_SUFFIX, BatchPlacement, LogSegment

# Planted bugs, switched on by the compaction simulations only: "tombstone_ignores_horizon" drops a tombstone
# in the first pass that finds it superseding nothing later (no delete.retention.ms kept for readers that
# are behind); "cleaned_segment_unsynced" swaps a cleaned segment in without fsyncing it first;
# "cleaner_ignores_isr" removes tombstones and markers past their horizon while a replica is out of the ISR.
CLEANER_BUGS = frozenset({"tombstone_ignores_horizon", "cleaned_segment_unsynced", "cleaner_ignores_isr"})
OFFSET_MAP_ENTRIES_MAX = 2_000_000  # bound on the keys held in memory by one pass (Kafka's dedupe buffer)
STEP_BYTES = 64 * 1024  # a pass stops to let its caller decide whether to go on after about this much read

AbortedEntry = tuple[int, int, int]  # an aborted transaction: (producer id, first offset, marker offset)


@dataclass(frozen=True, slots=True)
class ProducerLastRecord:
    """An active producer's last data offset (None when its state holds no data batch) and epoch (Kafka's
    LastRecord)."""

    last_data_offset: int | None
    producer_epoch: int


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
    markers_removed: int = 0
    batches_copied: int = 0
    batches_rewritten: int = 0
    batches_dropped: int = 0
    batches_emptied: int = 0  # kept without records (producer state, end of the cleaning round)
    aborted_txns_dropped: list[tuple[int, int]] = field(default_factory=list)  # (producer id, marker offset)
    earliest_delete_horizon_ms: int | None = None  # of the tombstones and markers kept; a pass is due then


class BatchRetention(enum.Enum):
    """Kafka's RecordFilter.BatchRetention: what happens to a batch whose records all go."""

    DELETE = "delete"  # the whole batch goes, whatever its records
    DELETE_EMPTY = "delete-empty"  # the batch goes only when no record survives
    RETAIN_EMPTY = "retain-empty"  # the batch stays, empty when no record survives


@dataclass(slots=True)
class _Pass:
    """What one pass carries from batch to batch."""

    now_ms: int
    delete_retention_ms: int
    offset_map: dict[bytes, int]
    transactions: CleanedTransactions
    last_records: dict[int, ProducerLastRecord]
    round_end_offset: int
    stats: CleanerStats
    removes_past_horizon: bool = True  # tombstones and markers past their horizon may go (every replica in sync)
    bugs: frozenset[str] = frozenset()  # planted (CLEANER_BUGS)


class CleaningPass:
    """One compaction pass that runs in steps, so that a broker serves requests between them: `advance(n)`
    reads about `n` bytes of segments (None: to the end); `done` says when the pass is over. Between steps
    the log takes appends to its active segment, which the pass never touches; a segment the pass still needs
    that left the log or changed meanwhile (retention, DeleteRecords, a follower's truncation, a closed log)
    abandons it: its partial output is deleted and the cleaner checkpoint stays where it was, so the next pass
    starts over. `advance` raises CorruptRecordError (or another record decoding error) for a batch that
    cannot be decoded, the log unchanged but for the groups already swapped (each swap is complete and leaves a
    correctly compacted log). `aborted` lists the partition's aborted transactions, `last_records` its active
    producers, `drop_aborted` removes index entries (see the module docstring); `all_replicas_in_sync`: whether
    every replica of the partition is in its ISR (else tombstones and markers stay past their horizon); `bugs`:
    planted bugs (CLEANER_BUGS), for the simulator."""

    def __init__(self, log, now_ms: int, first_uncleanable_offset: int | None, force: bool,
                 aborted: Iterable[AbortedEntry] = (), last_records: dict[int, ProducerLastRecord] | None = None,
                 drop_aborted: Callable[[list[tuple[int, int]]], None] | None = None,
                 bugs: frozenset[str] = frozenset(), all_replicas_in_sync: bool = True) -> None:
        self.log = log
        self.stats = CleanerStats()
        self.done = False
        self.abandoned = False
        removes_past_horizon = all_replicas_in_sync or "cleaner_ignores_isr" in bugs
        self._steps = self._run(now_ms, first_uncleanable_offset, force, sorted(aborted, key=lambda e: e[1]),
                                last_records or {}, drop_aborted, bugs, removes_past_horizon)

    def advance(self, bytes_max: int | None) -> int:
        """Work until about `bytes_max` bytes were read (None: no limit), or the pass is over (`done`). Returns
        the bytes read."""
        read = 0
        while not self.done and (bytes_max is None or read < bytes_max):
            try:
                read += next(self._steps)
            except StopIteration:
                self.done = True
            except BaseException:
                self.done = True
                raise
        return read

    def abandon(self) -> None:
        """Stop here: the partial output goes, the checkpoint stays (the log is closing or changed)."""
        if not self.done:
            self.done = self.abandoned = True
            self._steps.close()

    def _run(self, now_ms: int, first_uncleanable_offset: int | None, force: bool, aborted: list[AbortedEntry],
             last_records: dict[int, ProducerLastRecord], drop_aborted, bugs: frozenset[str],
             removes_past_horizon: bool) -> Iterator[int]:
        log, stats = self.log, self.stats
        if not log.config.compact:
            stats.skipped_reason = "cleanup.policy has no compact"
            return
        cleanable = _cleanable_segments(log, now_ms, first_uncleanable_offset)
        first_dirty = max(log.cleaner_checkpoint, log.log_start_offset)
        horizon = log.earliest_delete_horizon_ms
        # KIP-534: expired tombstones make a pass due; not while a replica out of the ISR keeps them anyway
        horizon_due = horizon is not None and horizon <= now_ms and removes_past_horizon
        if not cleanable or (first_dirty >= cleanable[-1].next_offset and not (horizon_due or force)):
            stats.skipped_reason = "nothing dirty to clean"
            return
        dirty_bytes = sum(segment.size for segment in cleanable if segment.next_offset > first_dirty)
        total_bytes = sum(segment.size for segment in cleanable)
        lag_due = _max_compaction_lag_passed(log, cleanable, first_dirty, now_ms)
        if not (force or horizon_due or lag_due) and dirty_bytes < log.config.min_cleanable_dirty_ratio * total_bytes:
            stats.skipped_reason = (f"dirty ratio {dirty_bytes / max(total_bytes, 1):.2f} below "
                                    f"min.cleanable.dirty.ratio")
            return
        self._sizes = {id(segment): segment.size for segment in cleanable}
        self._remaining = list(cleanable)
        offset_map: dict[bytes, int] = {}
        cleanable = yield from _build_offset_map(cleanable, first_dirty, CleanedTransactions(aborted, first_dirty),
                                                 offset_map, self._intact)
        if self.abandoned:
            return
        stats.first_dirty_offset = first_dirty
        stats.end_offset = max(cleanable[-1].next_offset, first_dirty)
        round_end_offset = log.active_segment.base_offset
        if first_uncleanable_offset is not None:
            round_end_offset = min(round_end_offset, first_uncleanable_offset)
        state = _Pass(now_ms, log.config.delete_retention_ms, offset_map,
                      CleanedTransactions(aborted, cleanable[0].base_offset), last_records, round_end_offset, stats,
                      removes_past_horizon, bugs)
        groups = _groups(cleanable, log.config.segment_bytes, cleanable[0].offset_index.entries_max)
        for index, group in enumerate(groups):
            self._remaining = [segment for later in groups[index:] for segment in later]
            yield from _clean_group(log, group, state, aborted, drop_aborted, self._intact,
                                    lambda: self.abandoned)
            if self.abandoned:
                return
        log.cleaner_checkpoint = max(log.cleaner_checkpoint, stats.end_offset)
        log.save_cleaner_checkpoint()
        log.earliest_delete_horizon_ms = stats.earliest_delete_horizon_ms

    def _intact(self) -> bool:
        """Whether every segment the pass still needs is in the log as it was when the pass began; called when
        a step resumes. Abandons the pass when not."""
        log = self.log
        live = set() if log.closed else {id(segment) for segment in log.segments}
        if all(id(segment) in live and segment.size == self._sizes[id(segment)] for segment in self._remaining):
            return True
        self.abandoned = True
        return False


def _max_compaction_lag_passed(log, cleanable: list[LogSegment], first_dirty: int, now_ms: int) -> bool:
    """KIP-354: whether the first dirty segment's first batch is older than max.compaction.lag.ms, which makes
    the log due whatever its dirty ratio (Kafka's LogCleanerManager needCompactionNow)."""
    lag_ms = log.config.max_compaction_lag_ms
    if lag_ms is None:
        return False
    first = next((segment for segment in cleanable if segment.next_offset > first_dirty), None)
    stamp = None if first is None else first.first_batch_timestamp
    return stamp is not None and stamp >= 0 and now_ms - lag_ms > stamp


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
    """(header, bytes) of each batch of `segment`, checked for what a batch's CRC does not cover: its offsets
    (the first 12 bytes are outside it) must follow one another inside the segment's range. Raises
    CorruptRecordError otherwise, before the pass writes anything of that batch."""
    expected = segment.base_offset
    for position, header in segment.batch_headers():
        if not expected <= header.base_offset <= header.last_offset < segment.next_offset:
            raise CorruptRecordError(f"{segment}: the batch at byte {position} has offsets {header.base_offset}.."
                                     f"{header.last_offset}, expected from {expected} below {segment.next_offset}")
        expected = header.last_offset + 1
        yield header, segment.read_batch(position, header)


class CleanedTransactions:
    """Kafka's CleanedTransactionMetadata: the transactions a pass is inside of, read in offset order from
    `from_offset`, and which markers may go. `aborted` is sorted by first offset; entries whose marker is
    below `from_offset` are ignored (their producer's later batches are not aborted)."""

    def __init__(self, aborted: list[AbortedEntry], from_offset: int) -> None:
        self._pending = [entry for entry in aborted if entry[2] >= from_offset]
        self._next = 0
        self._ongoing_aborted: dict[int, tuple[AbortedEntry, list[bool]]] = {}  # producer -> (entry, [read])
        self._ongoing_committed: set[int] = set()
        self.retained_aborted: set[tuple[int, int]] = set()  # (producer id, marker offset) kept in the index

    def _reach(self, offset: int) -> None:
        while self._next < len(self._pending) and self._pending[self._next][1] <= offset:
            entry = self._pending[self._next]
            self._ongoing_aborted.setdefault(entry[0], (entry, [False]))
            self._next += 1

    def on_batch_read(self, header: BatchHeader) -> bool:
        """A data batch was read: whether it belongs to an aborted transaction (its records all go)."""
        self._reach(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(header.producer_id)
        if ongoing is not None:
            ongoing[1][0] = True
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def on_control_batch_read(self, header: BatchHeader, records: list[Record]) -> bool:
        """A control batch was read: whether it may be discarded (its transaction has no batch in this pass)."""
        self._reach(header.last_offset)
        if not records:
            return True  # emptied by an earlier pass
        try:
            kind = control_record_type(records[0])
        except InvalidRecordError:
            return False
        if kind == ABORT:
            entry, read = self._ongoing_aborted.pop(header.producer_id, (None, [False]))
            if entry is not None and read[0]:
                self.retained_aborted.add((entry[0], entry[2]))
                return False
            return True
        if kind == COMMIT:
            if header.producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(header.producer_id)
                return False
            return True
        return False


def _build_offset_map(cleanable: list[LogSegment], first_dirty: int, transactions: CleanedTransactions,
                      offset_map: dict[bytes, int], intact: Callable[[], bool]) -> Iterator[int]:
    """Fill `offset_map` (key -> last offset) over the dirty records, yielding the bytes read every
    STEP_BYTES; returns the cleanable list, cut where the map filled up. Stops when `intact()` says no."""
    read = 0
    for slot, segment in enumerate(cleanable):
        if segment.next_offset <= first_dirty:
            continue
        for header, data in _iter_decoded(segment):
            read += header.size
            if read >= STEP_BYTES:
                yield read
                read = 0
                if not intact():
                    return cleanable
            if header.last_offset < first_dirty:
                continue
            if header.is_control:
                transactions.on_control_batch_read(header, decode_batch(data).records)
                continue
            if transactions.on_batch_read(header):
                continue
            for record in decode_batch(data).records:
                if record.key is not None and record.offset >= first_dirty:
                    offset_map[record.key] = record.offset
        if len(offset_map) >= OFFSET_MAP_ENTRIES_MAX and slot + 1 < len(cleanable):
            return cleanable[: slot + 1]
    if read:
        yield read
        if not intact():
            return cleanable
    return cleanable


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


def _clean_group(log, group: list[LogSegment], state: _Pass, aborted: list[AbortedEntry],
                 drop_aborted: Callable[[list[tuple[int, int]]], None] | None,
                 intact: Callable[[], bool], abandoning: Callable[[], bool]) -> Iterator[int]:
    """Write `group` cleaned as one `.cleaned` segment and swap it in, yielding the bytes read every
    STEP_BYTES; when `intact()` says no after a step, the partial output goes and nothing is swapped."""
    stats = state.stats
    cleaned = log.segment_object(group[0].base_offset, CLEANED_SUFFIX)
    read = 0
    try:
        cleaned.log.truncate(0)
        cleaned.recover()  # empty: resets indexes left by an earlier failed pass
        for segment in group:
            stats.segments_read += 1
            stats.bytes_read += segment.size
            for header, data in _iter_decoded(segment):
                output = _retained_batch(header, data, state)
                if output is not None:
                    _append_batch(cleaned, output)
                read += header.size
                if read >= STEP_BYTES:
                    yield read
                    read = 0
                    if not intact():
                        cleaned.delete()
                        return
        if read:
            yield read
            if not intact():
                cleaned.delete()
                return
        if "cleaned_segment_unsynced" in state.bugs:
            cleaned.seal = lambda: None  # planted: the swap below makes a segment durable that is not
        cleaned.seal()
        dropped = _dropped_aborted(group, aborted, state.transactions)
        if dropped:
            stats.aborted_txns_dropped += dropped
            if drop_aborted is not None:
                drop_aborted(dropped)  # before the swap: no data of these transactions is in the log any more
    except Exception:  # a failed pass (a batch it cannot decode): its partial output goes. Not on a crash:
        cleaned.delete()  # nothing runs then, and the log's recovery deletes what a crash left behind
        raise
    except GeneratorExit:  # closed: by `abandon` (the output goes), or collected with a dead process's broker,
        if abandoning():  # which must not touch the files (a later process may be writing the same names)
            cleaned.delete()
        raise
    stats.segments_written += 1
    stats.bytes_written += cleaned.size
    _swap(log, group, cleaned)


def _dropped_aborted(group: list[LogSegment], aborted: list[AbortedEntry], transactions: CleanedTransactions
                     ) -> list[tuple[int, int]]:
    """(producer id, marker offset) of the aborted transactions whose marker lies in `group` and whose index
    entry the pass did not keep (Kafka writes a cleaned segment's .txnindex with the kept entries only)."""
    first, end = group[0].base_offset, group[-1].next_offset
    return [(producer_id, marker_offset) for producer_id, _, marker_offset in aborted
            if first <= marker_offset < end and (producer_id, marker_offset) not in transactions.retained_aborted]


def _append_batch(segment: LogSegment, batch: bytes) -> None:
    header = parse_header(batch)
    segment.append([batch], [BatchPlacement(0, header.size, header.last_offset, header.max_timestamp)])


def _batch_retention(header: BatchHeader, discard_records: bool, state: _Pass) -> BatchRetention:
    """Kafka's checkBatchRetention: keep an active producer's last batch (and, when its state has no data
    batch, its marker of the current epoch) and the batch ending the cleaning round, even empty."""
    last = state.last_records.get(header.producer_id) if header.producer_id != NO_PRODUCER_ID else None
    if last is not None:
        if last.last_data_offset is not None:
            is_last_of_producer = header.last_offset == last.last_data_offset
        else:
            is_last_of_producer = header.is_control and header.producer_epoch == last.producer_epoch
        if is_last_of_producer:
            return BatchRetention.RETAIN_EMPTY
    if header.next_offset == state.round_end_offset:
        return BatchRetention.RETAIN_EMPTY
    return BatchRetention.DELETE if discard_records else BatchRetention.DELETE_EMPTY


def _retained_batch(header: BatchHeader, data: bytes, state: _Pass) -> bytes | None:
    """The batch to write in place of `data`: itself, a re-encoded subset, an empty batch, or None."""
    stats, records = state.stats, decode_batch(data).records
    if header.is_control:
        discardable = state.transactions.on_control_batch_read(header, records)
        discard_records = (discardable and header.has_delete_horizon and state.now_ms >= header.base_timestamp
                           and state.removes_past_horizon)
        retained = [] if discard_records else records
        stats.markers_removed += len(records) - len(retained)
    else:
        discardable = False
        discard_records = state.transactions.on_batch_read(header)  # an aborted transaction's data
        stats.records_read += len(records)
        retained = [] if discard_records else _retained_records(header, records, state)
        stats.records_retained += len(retained)
    retention = _batch_retention(header, discard_records, state)
    if retention is BatchRetention.DELETE or (not retained and retention is BatchRetention.DELETE_EMPTY):
        stats.batches_dropped += 1
        return None
    if not records:
        stats.batches_copied += 1  # emptied by an earlier pass, still needed
        return data
    if not retained:
        stats.batches_emptied += 1
        return _rebuilt(header, [], None, base_timestamp=header.max_timestamp)  # Kafka's writeEmptyHeader
    has_tombstones = not header.is_control and any(record.value is None for record in retained)
    horizon_ms = _delete_horizon_ms(header, has_tombstones or discardable, state)
    if len(retained) == len(records) and (horizon_ms is None or header.has_delete_horizon):
        stats.batches_copied += 1
        return data
    stats.batches_rewritten += 1
    return _rebuilt(header, retained, horizon_ms)


def _retained_records(header: BatchHeader, records: list[Record], state: _Pass) -> list[Record]:
    """Kafka's shouldRetainRecord: the last record of each key; a tombstone until its batch's horizon."""
    horizon_passed = header.has_delete_horizon and state.now_ms >= header.base_timestamp and state.removes_past_horizon
    if "tombstone_ignores_horizon" in state.bugs:
        horizon_passed = True
    retained: list[Record] = []
    for record in records:
        if record.key is None or state.offset_map.get(record.key, record.offset) > record.offset:
            continue
        if record.value is None and horizon_passed:
            state.stats.tombstones_removed += 1
            continue
        retained.append(record)
    return retained


def _rebuilt(header: BatchHeader, retained: list[Record], horizon_ms: int | None,
             base_timestamp: int | None = None) -> bytes:
    """`header`'s batch re-encoded with `retained` (Kafka's buildRetainedRecordsInto)."""
    return build_batch(
        retained,
        base_offset=header.base_offset,
        base_timestamp=base_timestamp,
        compression=header.compression,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        is_transactional=header.is_transactional,
        is_control=header.is_control,
        log_append_time=header.is_log_append_time,
        partition_leader_epoch=header.partition_leader_epoch,
        delete_horizon_ms=horizon_ms,
        last_offset_delta=header.last_offset_delta,
    )


def _delete_horizon_ms(header: BatchHeader, deletable_later: bool, state: _Pass) -> int | None:
    """The horizon to write for a kept batch that holds something to delete at its horizon (tombstones, or
    a marker whose transaction has no data left): its own, or now + delete.retention.ms (KIP-534)."""
    if not deletable_later:
        return None
    horizon_ms = header.base_timestamp if header.has_delete_horizon else state.now_ms + state.delete_retention_ms
    stats = state.stats
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
