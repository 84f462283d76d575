"""Idempotent-producer state of one partition: Kafka's ProducerStateManager and ProducerAppendInfo (KIP-98).

Theory of operation: for every producer id that has written to the partition, the broker remembers the
producer epoch and the metadata of its last `PRODUCER_BATCHES_RETAINED` (5) batches: first/last sequence,
first/last offset and max timestamp. A producer keeps at most 5 requests in flight per partition, so a retry
always matches one of them:
- `check_append(headers, now_ms)` runs on the leader before a produce request's batches are appended. A batch
  equal (same epoch, same sequence range) to a cached one is a duplicate: the broker answers with the cached
  offsets and appends nothing. Otherwise the batch must carry the producer's epoch or a newer one (older:
  INVALID_PRODUCER_EPOCH), a newer epoch must start at sequence 0, and the same epoch must continue exactly
  at last_sequence + 1 (int32 wrap to 0); anything else is OUT_OF_ORDER_SEQUENCE_NUMBER. An unknown producer
  may start at any sequence: since KIP-360 (Kafka 2.5) the broker no longer answers UNKNOWN_PRODUCER_ID,
  because retention, DeleteRecords or expiry may have removed the state of a live producer.
- `update(headers)` is the only method that changes the producers' state: the leader calls it with the
  headers as appended (offsets assigned), followers with the batches they fetched. It never validates (the
  log is the truth: Kafka's REPLICATION origin), so a follower that becomes leader has the same state.
- Recovery: `rebuild(log, now_ms)` loads the newest usable snapshot (`{offset:020d}.snapshot` in the
  partition directory, offset in [log_start_offset, log_end_offset]) and scans the batch headers of the log
  from there; a corrupt snapshot is deleted and the next older one (or a scan from log_start_offset) is used.
  Truncation rebuilds the same way; a moving log start keeps the state (KIP-360) and drops older snapshots.
- Expiry: a producer with no ongoing transaction whose last batch timestamp is producer.id.expiration.ms old
  is removed by `remove_expired`; `check_append` already treats such a producer as unknown, so answers do not
  depend on when the periodic sweep ran.

Invariants: at most 5 cached batches per producer, all of the entry's epoch; state reflects exactly the
batches below `map_end_offset` (Kafka's mapEndOffset), and updates arrive in log order.

Transactions (KIP-98): `current_txn_first_offset` is remembered per producer when a transactional batch
opens a transaction, and a control batch (commit/abort marker) closes it and is returned as a `CompletedTxn`.
Markers reach `update` with their decoded type and coordinator epoch (`markers_in(buffer)`); the entry keeps
the coordinator epoch so that a deposed coordinator's late marker is refused (`check_marker`). The last
stable offset (`last_stable_offset(high_watermark)`, Kafka's firstUnstableOffset) is the first offset of the
earliest open transaction or of a decided one whose marker the high watermark has not passed yet, else the
high watermark. Aborted transactions go to the partition's `.txnindex` files (txn/transaction_index.py),
which follow recovery, truncation and retention with the producer state.

This module never imports I/O modules: files go through the Storage port, time comes in as `now_ms`.
"""

from __future__ import annotations

import posixpath
import struct
from dataclasses import dataclass, replace

import cbor2
import crc32c

from collections import deque
from typing import Callable

from metadata.configs import PRODUCER_ID_EXPIRATION_MS_DEFAULT  # producer.id.expiration.ms
from partitions.batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader, iter_batches
from partitions.cleaner import ProducerLastRecord
from partitions.errors import InvalidRecordError, KafkaError
from partitions.log import PartitionLog
from partitions.records import COMMIT, decode_batch, parse_control_record
from partitions.storage import Storage, StorageError, read_file, write_file_atomically
from txn.errors import (
    CorruptProducerSnapshotError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from txn.transaction_index import AbortedTxn, AbortedTxnIndex

PRODUCER_BATCHES_RETAINED = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN (max.in.flight per connection)
SEQUENCE_MAX = (1 << 31) - 1  # sequences are int32 and wrap to 0
PRODUCER_EPOCH_MAX = (1 << 15) - 1  # epochs are int16
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
SNAPSHOTS_RETAINED = 2  # after each write: the newest and the one before (truncations rarely go further back)
SNAPSHOT_BYTES_MAX = 256 * 1024 * 1024  # a larger file is ignored (rebuild by scan) rather than loaded
REBUILD_READ_BYTES = 1024 * 1024  # bytes of whole batches read per step while scanning the log
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
_SNAPSHOT_CRC = struct.Struct(">I")  # CRC-32C of the CBOR body that follows


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What is remembered of one appended batch (Kafka's BatchMetadata)."""

    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    timestamp: int  # the batch's max_timestamp (the log-append time on LogAppendTime topics)


@dataclass(frozen=True, slots=True)
class ProducerStateEntry:
    """One producer's state in this partition (Kafka's ProducerStateEntry). Immutable: updates replace it."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: tuple[BatchMetadata, ...] = ()  # oldest first, at most PRODUCER_BATCHES_RETAINED
    last_timestamp: int = -1
    coordinator_epoch: int = -1  # set from commit/abort markers once they are decoded (transactions)
    current_txn_first_offset: int | None = None  # first offset of the open transaction, if any

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        """The cached batch with `header`'s epoch and exact sequence range, if any."""
        if header.producer_epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_sequence == header.base_sequence and batch.last_sequence == header.last_sequence:
                return batch
        return None

    def with_data_batch(self, header: BatchHeader) -> ProducerStateEntry:
        """This entry after appending the data batch `header` (a new epoch forgets the cached batches)."""
        kept = self.batches if header.producer_epoch == self.producer_epoch else ()
        batch = BatchMetadata(header.base_sequence, header.last_sequence, header.base_offset, header.last_offset,
                              header.max_timestamp)
        txn_first_offset = self.current_txn_first_offset
        if header.is_transactional and txn_first_offset is None:
            txn_first_offset = header.base_offset
        return replace(self, producer_epoch=header.producer_epoch,
                       batches=(kept + (batch,))[-PRODUCER_BATCHES_RETAINED:],
                       last_timestamp=header.max_timestamp, current_txn_first_offset=txn_first_offset)

    def with_end_txn_marker(self, header: BatchHeader, coordinator_epoch: int | None = None) -> ProducerStateEntry:
        """This entry after the commit/abort marker `header`: the transaction is over."""
        kept = self.batches if header.producer_epoch == self.producer_epoch else ()
        epoch = self.coordinator_epoch if coordinator_epoch is None else coordinator_epoch
        return replace(self, producer_epoch=header.producer_epoch, batches=kept, coordinator_epoch=epoch,
                       last_timestamp=header.max_timestamp, current_txn_first_offset=None)


@dataclass(frozen=True, slots=True)
class AppendCheck:
    """The leader's verdict on a produce request's batches: append them, or answer with `duplicate`'s offsets
    (first_offset, last_offset, timestamp) and append nothing."""

    duplicate: BatchMetadata | None = None

    @property
    def is_duplicate(self) -> bool:
        return self.duplicate is not None


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction closed by a marker."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    committed: bool | None = None  # None when the marker's record was not decoded


Markers = dict[int, tuple[bool, int]]  # a marker batch's base offset -> (committed, coordinator epoch)


def markers_in(buffer: bytes | bytearray | memoryview) -> Markers:
    """The transaction markers among the batches of `buffer`: only control batches are decoded. A control
    record that is not a well-formed marker is left out (the producer's transaction then closes undecided)."""
    found: Markers = {}
    view = memoryview(buffer)
    for position, header in iter_batches(view):
        if not header.is_control or header.records_count <= 0:
            continue
        try:
            record = decode_batch(view[position:position + header.size]).records[0]
            kind, coordinator_epoch = parse_control_record(record)
        except (KafkaError, IndexError):
            continue
        found[header.base_offset] = (kind == COMMIT, coordinator_epoch)
    return found


@dataclass(frozen=True, slots=True)
class ProducerStateSnapshot:
    """Every producer's state as of `offset` (the state reflects exactly the batches below it)."""

    offset: int
    producers: tuple[ProducerStateEntry, ...]


def in_sequence(last_sequence: int, next_sequence: int) -> bool:
    """Whether `next_sequence` directly follows `last_sequence` (NO_SEQUENCE is followed by 0; int32 wraps)."""
    return next_sequence == last_sequence + 1 or (next_sequence == 0 and last_sequence == SEQUENCE_MAX)


def _check_data_batch(current: ProducerStateEntry | None, header: BatchHeader) -> None:
    """Kafka's ProducerAppendInfo checks for a client batch against the producer's current entry.
    Raises InvalidRecordError, InvalidProducerEpochError, OutOfOrderSequenceError, InvalidTxnStateError."""
    producer_id = header.producer_id
    if header.base_sequence < 0:
        raise InvalidRecordError(f"batch of producer {producer_id} has no sequence ({header.base_sequence})")
    if current is None or current.producer_epoch == NO_PRODUCER_EPOCH:
        return  # unknown producer: any sequence (KIP-360)
    if header.producer_epoch < current.producer_epoch:
        raise InvalidProducerEpochError(
            f"producer {producer_id} epoch {header.producer_epoch} is older than the current {current.producer_epoch}"
        )
    if header.producer_epoch != current.producer_epoch:
        if header.base_sequence != 0:
            raise OutOfOrderSequenceError(
                f"producer {producer_id} new epoch {header.producer_epoch} starts at sequence "
                f"{header.base_sequence}, not 0 (current epoch {current.producer_epoch})"
            )
    elif not in_sequence(current.last_sequence, header.base_sequence):
        raise OutOfOrderSequenceError(
            f"producer {producer_id} epoch {header.producer_epoch}: sequence {header.base_sequence} does not "
            f"follow {current.last_sequence}"
        )
    if current.current_txn_first_offset is not None and not header.is_transactional:
        raise InvalidTxnStateError(
            f"producer {producer_id} wrote a non-transactional batch inside the transaction opened at offset "
            f"{current.current_txn_first_offset}"
        )


class ProducerStateManager:
    """The producer state of one partition whose files live in `directory` of `storage` (the partition's
    directory: snapshots sit beside the segments, as in Kafka). Not thread-safe: one owner."""

    def __init__(self, storage: Storage, directory: str,
                 producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS_DEFAULT,
                 segment_bases: Callable[[], list[int]] | None = None) -> None:
        assert producer_id_expiration_ms >= 0, f"producer_id_expiration_ms={producer_id_expiration_ms}"
        self.storage = storage
        self.directory = directory
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0
        # Decided transactions whose marker the high watermark has not passed yet (Kafka's unreplicatedTxns).
        self.unreplicated: deque[CompletedTxn] = deque()
        self.aborted_index = AbortedTxnIndex(storage, directory, segment_bases or (lambda: [0]))
        # Test-only planted bug for the transactions simulation: the LSO ignores open transactions.
        self.bug_lso_ignores_open_transactions = False
        # Test-only planted bug for the idempotence simulation: duplicates of the last batch alone are recognised.
        self.bug_dedup_last_batch_only = False

    # ---- reading state

    def entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        """Kafka's isProducerExpired: no open transaction and the last batch is expiration.ms old."""
        return entry.current_txn_first_offset is None and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms

    def first_unstable_offset(self) -> int | None:
        """The first offset of an open transaction or of a decided one not yet below the high watermark."""
        offsets = [e.current_txn_first_offset for e in self.producers.values() if e.current_txn_first_offset is not None]
        offsets += [txn.first_offset for txn in self.unreplicated]
        return min(offsets) if offsets else None

    def last_stable_offset(self, high_watermark: int) -> int:
        """The partition's LSO for `high_watermark` (the replica's hook): decided transactions whose marker
        is below it stop holding it back."""
        while self.unreplicated and self.unreplicated[0].last_offset < high_watermark:
            self.unreplicated.popleft()
        if self.bug_lso_ignores_open_transactions:
            return high_watermark
        first = self.first_unstable_offset()
        return high_watermark if first is None else min(first, high_watermark)

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Kafka's checks of a marker on the leader: a deposed coordinator (older coordinator epoch) is
        refused with TRANSACTION_COORDINATOR_FENCED, an older producer epoch with INVALID_PRODUCER_EPOCH."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker of coordinator epoch {coordinator_epoch} for producer {producer_id}, which saw "
                f"{entry.coordinator_epoch}")
        if producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"marker of producer {producer_id} epoch {producer_epoch} is older than {entry.producer_epoch}")

    def check_transactional_epoch(self, producer_id: int, producer_epoch: int) -> None:
        """A coordinator's transactional write (TxnOffsetCommit) carries the producer's epoch: an epoch older
        than the partition knows (a marker bumped it when the transaction was fenced) is refused with
        INVALID_PRODUCER_EPOCH, as Kafka's ProducerAppendInfo does for every origin."""
        entry = self.producers.get(producer_id)
        if entry is not None and producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {producer_epoch} is older than the current {entry.producer_epoch}")

    def last_records_of_active_producers(self) -> dict[int, ProducerLastRecord]:
        """Each producer's last data offset (None when no data batch is cached) and epoch, for the log
        cleaner: those batches stay so the producer's sequence and epoch survive compaction (Kafka's
        lastRecordsOfActiveProducers)."""
        return {producer_id: ProducerLastRecord(entry.batches[-1].last_offset if entry.batches else None,
                                                entry.producer_epoch)
                for producer_id, entry in self.producers.items()}

    def snapshot(self) -> ProducerStateSnapshot:
        return ProducerStateSnapshot(self.map_end_offset, tuple(self.producers[key] for key in sorted(self.producers)))

    # ---- the leader's check

    def check_append(self, headers: list[BatchHeader] | tuple[BatchHeader, ...], now_ms: int) -> AppendCheck:
        """Validate a produce request's batches (as received, before offsets are assigned) in order.
        Returns AppendCheck(duplicate=...) at the first batch that repeats a cached one (as Kafka does: the
        request is answered with that batch's offsets and nothing of it is appended; a conforming client
        sends one batch per partition, so nothing new is lost), else AppendCheck() to go ahead.
        Batches without a producer id are not checked; control batches are the coordinator's (not checked
        here: the log refuses them from clients). Changes nothing.
        Raises InvalidRecordError (producer id without sequence), InvalidProducerEpochError,
        OutOfOrderSequenceError, InvalidTxnStateError."""
        pending: dict[int, ProducerStateEntry] = {}
        for header in headers:
            producer_id = header.producer_id
            if producer_id == NO_PRODUCER_ID or header.is_control:
                continue
            stored = self.producers.get(producer_id)
            if stored is not None and self.is_expired(stored, now_ms):
                stored = None  # as if remove_expired had run: the sweep's timing must not change answers
            duplicate = stored.find_duplicate(header) if stored is not None else None
            if duplicate is not None and self.bug_dedup_last_batch_only and duplicate is not stored.batches[-1]:
                duplicate = None
            if duplicate is not None:
                return AppendCheck(duplicate)
            current = pending.get(producer_id, stored)
            _check_data_batch(current, header)
            base = current if current is not None else ProducerStateEntry(producer_id)
            pending[producer_id] = base.with_data_batch(header)
        return AppendCheck()

    # ---- the one place state changes

    def update(self, headers: list[BatchHeader] | tuple[BatchHeader, ...],
               markers: Markers | None = None) -> list[CompletedTxn]:
        """Apply batches as appended to the log (offsets assigned), in log order: leader after an append
        (`AppendInfo.batch_headers`), follower after a fetch append, recovery while scanning. No validation:
        the log is the truth. `markers` holds the decoded markers among them (`markers_in`); an aborted
        transaction goes to the index. Returns the transactions closed by control batches."""
        completed = []
        for header in headers:
            assert header.last_offset >= self.map_end_offset, (
                f"batch {header.base_offset}..{header.last_offset} below map_end_offset={self.map_end_offset}"
            )
            self.map_end_offset = header.next_offset
            producer_id = header.producer_id
            if producer_id == NO_PRODUCER_ID:
                continue
            entry = self.producers.get(producer_id) or ProducerStateEntry(producer_id)
            if header.is_control:
                if header.records_count == 0:
                    continue  # a marker emptied by compaction: its transaction is gone from the log
                first_offset = entry.current_txn_first_offset
                marker = (markers or {}).get(header.base_offset)
                txn = CompletedTxn(producer_id, header.base_offset if first_offset is None else first_offset,
                                   header.base_offset, None if marker is None else marker[0])
                completed.append(txn)
                entry = entry.with_end_txn_marker(header, None if marker is None else marker[1])
                self.producers[producer_id] = entry
                self.unreplicated.append(txn)
                if txn.committed is False:
                    first_unstable = self.first_unstable_offset_excluding(txn)
                    self.aborted_index.add(AbortedTxn(producer_id, txn.first_offset, txn.last_offset,
                                                      txn.last_offset + 1 if first_unstable is None else first_unstable))
                continue
            else:
                entry = entry.with_data_batch(header)
            self.producers[producer_id] = entry
        return completed

    def first_unstable_offset_excluding(self, txn: CompletedTxn) -> int | None:
        offsets = [e.current_txn_first_offset for e in self.producers.values() if e.current_txn_first_offset is not None]
        offsets += [t.first_offset for t in self.unreplicated if t is not txn]
        return min(offsets) if offsets else None

    def remove_expired(self, now_ms: int) -> int:
        """Forget producers idle for producer.id.expiration.ms (Kafka's removeExpiredProducers; producers
        with an open transaction stay). Returns how many were removed."""
        expired = [key for key, entry in self.producers.items() if self.is_expired(entry, now_ms)]
        for key in expired:
            del self.producers[key]
        return len(expired)

    # ---- snapshots

    def snapshot_path(self, offset: int) -> str:
        return posixpath.join(self.directory, f"{offset:020d}{SNAPSHOT_SUFFIX}")

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshot files in the directory, ascending."""
        return list_snapshot_offsets(self.storage, self.directory)

    def write_snapshot(self, offset: int | None = None) -> int:
        """Write the state to `{offset:020d}.snapshot` (atomically, fsynced) and keep only the newest
        SNAPSHOTS_RETAINED snapshots. `offset` defaults to map_end_offset; a larger one (a rolled segment's
        base offset, no batch in between) advances map_end_offset first. Returns the offset written.
        Raises StorageError."""
        offset = self.map_end_offset if offset is None else offset
        assert offset >= self.map_end_offset, f"snapshot offset {offset} below map_end_offset={self.map_end_offset}"
        self.map_end_offset = offset
        self.aborted_index.flush()  # a snapshot never covers an index entry a power loss could drop
        write_file_atomically(self.storage, self.snapshot_path(offset), encode_snapshot(self.snapshot()))
        offsets = self.snapshot_offsets()
        for old in offsets[: max(0, len(offsets) - SNAPSHOTS_RETAINED)]:
            self.storage.delete(self.snapshot_path(old))
        return offset

    def delete_snapshots_before(self, offset: int) -> None:
        for old in self.snapshot_offsets():
            if old < offset:
                self.storage.delete(self.snapshot_path(old))

    def _delete_snapshots_after(self, offset: int) -> None:
        for later in self.snapshot_offsets():
            if later > offset:
                self.storage.delete(self.snapshot_path(later))

    def load_snapshot(self, snapshot: ProducerStateSnapshot) -> None:
        """Replace the whole state with `snapshot`'s."""
        self.producers = {entry.producer_id: entry for entry in snapshot.producers}
        self.map_end_offset = snapshot.offset

    # ---- recovery, truncation and log start

    def rebuild(self, log: PartitionLog, now_ms: int, use_snapshot: bool = True) -> None:
        """Rebuild from `log`: the newest usable snapshot (unless
        `use_snapshot` is False), then a scan of the batch headers from its offset (or log_start_offset) to
        the log end offset; then expired producers are dropped. Out-of-range or corrupt snapshots are
        deleted. Raises StorageError, CorruptRecordError (a log the log itself would not have accepted)."""
        self.producers = {}
        self.unreplicated.clear()
        self.map_end_offset = log.log_start_offset
        if not self.aborted_index.load(log.log_start_offset, log.log_end_offset):
            use_snapshot = False  # a corrupt .txnindex: rebuild it from the whole log
        if use_snapshot:
            snapshot = load_latest_snapshot(self.storage, self.directory, log.log_start_offset, log.log_end_offset)
            if snapshot is not None:
                self.load_snapshot(snapshot)
        self._scan(log)
        self.remove_expired(now_ms)

    def _scan(self, log: PartitionLog) -> None:
        """update() with every batch header from map_end_offset to the log end (no record decoding)."""
        offset, end_offset = max(self.map_end_offset, log.log_start_offset), log.log_end_offset
        while offset < end_offset:
            data = log.read(offset, REBUILD_READ_BYTES).records
            headers = [header for _, header in iter_batches(data) if header.last_offset >= offset]
            if not headers:
                break  # nothing at or past `offset` (a trailing gap): the state is complete
            self.update(headers, markers_in(data) if any(h.is_control for h in headers) else None)
            offset = headers[-1].next_offset
        self.map_end_offset = max(self.map_end_offset, end_offset)

    def truncate_to(self, log: PartitionLog, offset: int, now_ms: int) -> None:
        """After `log.truncate_to(offset)`: drop snapshots past the new log end and, when the state covered
        truncated batches, rebuild it (Kafka's truncateAndReload). Raises StorageError."""
        end_offset = log.log_end_offset
        assert end_offset <= offset, f"log end offset {end_offset} past the truncation offset {offset}"
        self._delete_snapshots_after(end_offset)
        self.aborted_index.truncate_to(end_offset)
        self.unreplicated = deque(t for t in self.unreplicated if t.last_offset < end_offset)
        if self.map_end_offset != end_offset:
            self.rebuild(log, now_ms)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """After `log.truncate_fully_and_start_at(offset)`: no producers, no snapshots, state starts at
        `offset`."""
        self.delete_snapshots_before(INT64_MAX)
        self.producers = {}
        self.unreplicated.clear()
        self.aborted_index.clear()
        self.map_end_offset = offset

    def on_log_start_offset(self, offset: int) -> None:
        """The log start moved forward (retention, DeleteRecords): producers are kept (KIP-360: a live
        producer must not look unknown because its old batches were deleted), older snapshots go."""
        self.delete_snapshots_before(offset)
        self.map_end_offset = max(self.map_end_offset, offset)
        self.aborted_index.sync()


# ---- snapshot files: CRC-32C (4 bytes, big-endian) of the CBOR body, then the body:
#   {"v": 1, "offset": int, "producers": [[producer_id, producer_epoch, last_timestamp, coordinator_epoch,
#     current_txn_first_offset | null, [[first_sequence, last_sequence, first_offset, last_offset, timestamp], ...]],
#     ...]}


def encode_snapshot(snapshot: ProducerStateSnapshot) -> bytes:
    producers = [
        [entry.producer_id, entry.producer_epoch, entry.last_timestamp, entry.coordinator_epoch,
         entry.current_txn_first_offset,
         [[b.first_sequence, b.last_sequence, b.first_offset, b.last_offset, b.timestamp] for b in entry.batches]]
        for entry in snapshot.producers
    ]
    body = cbor2.dumps({"v": SNAPSHOT_VERSION, "offset": snapshot.offset, "producers": producers})
    return _SNAPSHOT_CRC.pack(crc32c.crc32c(body)) + body


def decode_snapshot(data: bytes) -> ProducerStateSnapshot:
    """The snapshot in `data`. Raises CorruptProducerSnapshotError for a bad CRC, an unknown version or a
    structure that is not a snapshot."""
    if len(data) < _SNAPSHOT_CRC.size:
        raise CorruptProducerSnapshotError(f"snapshot of {len(data)} bytes has no CRC")
    (stored_crc,) = _SNAPSHOT_CRC.unpack_from(data)
    body = data[_SNAPSHOT_CRC.size :]
    if crc32c.crc32c(body) != stored_crc:
        raise CorruptProducerSnapshotError("snapshot CRC mismatch")
    try:
        document = cbor2.loads(body)
    except Exception as exc:  # cbor2 raises several types (CBORDecodeError, ValueError, ...)
        raise CorruptProducerSnapshotError(f"snapshot is not CBOR: {exc}") from None
    if not isinstance(document, dict) or set(document) != {"v", "offset", "producers"}:
        raise CorruptProducerSnapshotError("snapshot is not a map of v, offset, producers")
    if document["v"] != SNAPSHOT_VERSION:
        raise CorruptProducerSnapshotError(f"snapshot version {document['v']!r}, this code reads {SNAPSHOT_VERSION}")
    producers = document["producers"]
    if not isinstance(producers, list):
        raise CorruptProducerSnapshotError("snapshot producers is not an array")
    entries = tuple(_decode_entry(item) for item in producers)
    if len({entry.producer_id for entry in entries}) != len(entries):
        raise CorruptProducerSnapshotError("snapshot repeats a producer id")
    return ProducerStateSnapshot(_int(document["offset"], 0, INT64_MAX, "offset"), entries)


def _int(value, low: int, high: int, what: str) -> int:
    if type(value) is not int or not low <= value <= high:
        raise CorruptProducerSnapshotError(f"snapshot {what} {value!r} is not an integer in [{low}, {high}]")
    return value


def _decode_entry(item) -> ProducerStateEntry:
    if not isinstance(item, list) or len(item) != 6 or not isinstance(item[5], list):
        raise CorruptProducerSnapshotError("snapshot producer entry is not [id, epoch, ts, coordinator, txn, batches]")
    if len(item[5]) > PRODUCER_BATCHES_RETAINED:
        raise CorruptProducerSnapshotError(f"snapshot producer entry holds {len(item[5])} batches")
    batches = []
    for batch in item[5]:
        if not isinstance(batch, list) or len(batch) != 5:
            raise CorruptProducerSnapshotError("snapshot batch is not [first_seq, last_seq, first, last, ts]")
        batches.append(BatchMetadata(_int(batch[0], NO_SEQUENCE, SEQUENCE_MAX, "first_sequence"),
                                     _int(batch[1], NO_SEQUENCE, SEQUENCE_MAX, "last_sequence"),
                                     _int(batch[2], 0, INT64_MAX, "first_offset"),
                                     _int(batch[3], 0, INT64_MAX, "last_offset"),
                                     _int(batch[4], INT64_MIN, INT64_MAX, "timestamp")))
    txn_first_offset = None if item[4] is None else _int(item[4], 0, INT64_MAX, "current_txn_first_offset")
    return ProducerStateEntry(
        producer_id=_int(item[0], 0, INT64_MAX, "producer_id"),
        producer_epoch=_int(item[1], NO_PRODUCER_EPOCH, PRODUCER_EPOCH_MAX, "producer_epoch"),
        batches=tuple(batches),
        last_timestamp=_int(item[2], INT64_MIN, INT64_MAX, "last_timestamp"),
        coordinator_epoch=_int(item[3], -1, (1 << 31) - 1, "coordinator_epoch"),
        current_txn_first_offset=txn_first_offset,
    )


def list_snapshot_offsets(storage: Storage, directory: str) -> list[int]:
    """Offsets of the `{offset:020d}.snapshot` files in `directory`, ascending."""
    offsets = []
    for name in storage.list(directory):
        stem = name[: -len(SNAPSHOT_SUFFIX)]
        if name.endswith(SNAPSHOT_SUFFIX) and len(stem) == 20 and stem.isdigit():
            offsets.append(int(stem))
    return sorted(offsets)


def load_latest_snapshot(storage: Storage, directory: str, log_start_offset: int,
                         log_end_offset: int) -> ProducerStateSnapshot | None:
    """The newest readable snapshot with offset in [log_start_offset, log_end_offset], or None. Snapshots
    outside that range, unreadable, oversized or corrupt ones are deleted on the way (Kafka does the same),
    so the caller falls back to an older snapshot or a scan from the log start."""
    for offset in reversed(list_snapshot_offsets(storage, directory)):
        path = posixpath.join(directory, f"{offset:020d}{SNAPSHOT_SUFFIX}")
        if not log_start_offset <= offset <= log_end_offset:
            storage.delete(path)
            continue
        try:
            data = _read_bounded(storage, path)
            snapshot = decode_snapshot(data)
            if snapshot.offset != offset:
                raise CorruptProducerSnapshotError(f"snapshot file {path} holds offset {snapshot.offset}")
            return snapshot
        except (StorageError, CorruptProducerSnapshotError):
            storage.delete(path)
    return None


def _read_bounded(storage: Storage, path: str) -> bytes:
    handle = storage.open(path, create=False)
    try:
        size = handle.size()
        if size > SNAPSHOT_BYTES_MAX:
            raise CorruptProducerSnapshotError(f"snapshot {path} is {size} bytes, more than {SNAPSHOT_BYTES_MAX}")
    finally:
        handle.close()
    return read_file(storage, path)
