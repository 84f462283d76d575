"""Log compaction (Kafka's LogCleaner): last record per key, offsets preserved, tombstones, atomic swap, and
transactions: aborted data, then markers (CleanedTransactionMetadata, KIP-534), the aborted index, recovery."""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from net.client.aio import decode_fetched
from partitions.errors import CorruptRecordError
from partitions.log import AppendOrigin, PartitionLog
from partitions.records import ABORT, COMMIT, build_batch, build_control_batch, decode_batches
from partitions.storage import MemoryStorage
from simulations.disk import SimDisk, SimulatedCrash
from tests.partitions.logtools import DIRECTORY, key_values, keyed, open_log, read_all
from tests.txn.harness import Partition
from txn.producer_state import ProducerStateManager, markers_in

DAY_MS = 24 * 3600 * 1000


def compacted_log(storage=None, **config):
    options = dict(cleanup_policy=("compact",), segment_bytes=300, now_ms=0, min_cleanable_dirty_ratio=0.0)
    options.update(config)
    return open_log(storage, **options)


def append_pairs(log, pairs, now_ms=1_000):
    for key, value in pairs:
        log.append_as_leader(keyed([(key, value)], timestamp_ms=now_ms), 0, now_ms)


def test_compaction_keeps_the_last_record_per_key_with_offsets_preserved():
    log = compacted_log()
    append_pairs(log, [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1"), (b"b", b"2"), (b"a", b"3")] * 2)
    log.roll(1_000)
    stats = log.compact(now_ms=2_000)
    assert key_values(log) == [(9, b"c", b"1"), (10, b"b", b"2"), (11, b"a", b"3")]
    assert stats.records_read == 12 and stats.records_retained == 3
    assert log.log_end_offset == 12
    log.append_as_leader(keyed([(b"d", b"1")]), 0, 2_000)
    assert key_values(log)[-1] == (12, b"d", b"1")


def test_compaction_never_touches_the_active_segment():
    log = compacted_log(segment_bytes=10**6)
    append_pairs(log, [(b"a", b"1"), (b"a", b"2")])
    stats = log.compact(now_ms=2_000)
    assert stats.skipped_reason is not None
    assert key_values(log) == [(0, b"a", b"1"), (1, b"a", b"2")]


def test_compaction_inside_a_batch_keeps_the_batch_offset_range():  # Kafka's buildRetainedRecordsInto
    log = compacted_log()
    log.append_as_leader(keyed([(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1")]), 0, 1_000)
    log.append_as_leader(keyed([(b"c", b"2")]), 0, 1_000)
    log.roll(1_000)
    log.compact(now_ms=2_000)
    first, second = list(decode_batches(read_all(log)))
    assert (first.header.base_offset, first.header.last_offset, first.header.records_count) == (0, 3, 2)
    assert [(r.offset, r.key) for r in first.records] == [(1, b"b"), (2, b"a")]
    assert second.header.base_offset == 4


def test_tombstones_survive_delete_retention_ms_then_disappear():  # KIP-534 delete horizon
    log = compacted_log(delete_retention_ms=DAY_MS)
    append_pairs(log, [(b"a", b"1"), (b"b", b"1"), (b"a", None)])
    log.roll(1_000)
    log.compact(now_ms=10_000)
    assert key_values(log) == [(1, b"b", b"1"), (2, b"a", None)]
    tombstone_batch = list(decode_batches(read_all(log)))[-1]
    assert tombstone_batch.header.has_delete_horizon
    assert tombstone_batch.header.base_timestamp == 10_000 + DAY_MS
    log.compact(now_ms=10_000 + DAY_MS - 1, force=True)
    assert key_values(log) == [(1, b"b", b"1"), (2, b"a", None)]
    stats = log.compact(now_ms=10_000 + DAY_MS, force=True)
    assert stats.tombstones_removed == 1
    assert key_values(log) == [(1, b"b", b"1")]


def test_a_tombstone_outlives_its_horizon_while_a_replica_is_out_of_the_isr():
    # A replica out of the ISR may hold the key's older value without having fetched the tombstone: it stays
    # until the ISR is whole again, and a passed horizon does not make passes due meanwhile.
    log = compacted_log(delete_retention_ms=DAY_MS)
    append_pairs(log, [(b"a", b"1"), (b"b", b"1"), (b"a", None)])
    log.roll(1_000)
    log.compact(now_ms=10_000)  # the horizon is stamped
    stats = log.compact(now_ms=10_000 + DAY_MS, force=True, all_replicas_in_sync=False)
    assert stats.tombstones_removed == 0 and key_values(log) == [(1, b"b", b"1"), (2, b"a", None)]
    assert log.earliest_delete_horizon_ms == 10_000 + DAY_MS
    stats = log.compact(now_ms=10_000 + DAY_MS + 1, all_replicas_in_sync=False)
    assert stats.skipped_reason is not None  # the passed horizon alone makes no pass due while out of sync
    stats = log.compact(now_ms=10_000 + DAY_MS + 2)  # back in sync: the passed horizon makes the pass due
    assert stats.skipped_reason is None and stats.tombstones_removed == 1
    assert key_values(log) == [(1, b"b", b"1")]


def test_records_without_a_key_are_removed():
    # A keyless record written while the topic's cleanup.policy was still "delete": a compacted topic refuses
    # new ones on produce (LogValidator), the cleaner drops the old ones.
    log = compacted_log(cleanup_policy=("delete",))
    append_pairs(log, [(None, b"x")])
    log.config = dataclasses.replace(log.config, cleanup_policy=("compact",))
    append_pairs(log, [(b"a", b"1")])
    log.roll(1_000)
    log.compact(now_ms=2_000)
    assert key_values(log) == [(1, b"a", b"1")]


def test_min_compaction_lag_protects_young_segments():
    log = compacted_log(min_compaction_lag_ms=5_000, segment_bytes=10**6)
    append_pairs(log, [(b"a", b"1"), (b"a", b"2")], now_ms=1_000)
    log.roll(1_000)
    append_pairs(log, [(b"a", b"3")], now_ms=4_000)
    log.roll(4_000)
    log.compact(now_ms=6_500)  # the first segment (max ts 1000) is old enough, the second (4000) is not
    assert key_values(log) == [(1, b"a", b"2"), (2, b"a", b"3")]
    log.compact(now_ms=9_000, force=True)
    assert key_values(log) == [(2, b"a", b"3")]


def test_dirty_ratio_below_the_minimum_skips_the_pass():
    log = compacted_log(min_cleanable_dirty_ratio=0.5, segment_bytes=10**6)
    append_pairs(log, [(bytes([i]), b"v") for i in range(10)])
    log.roll(1_000)
    assert log.compact(now_ms=2_000).skipped_reason is None  # all dirty: ratio 1.0
    append_pairs(log, [(b"\x00", b"w")])
    log.roll(2_000)
    stats = log.compact(now_ms=3_000)  # one small dirty segment against ten clean records
    assert stats.skipped_reason is not None and "ratio" in stats.skipped_reason
    assert log.compact(now_ms=3_000, force=True).records_retained == 10


def test_max_compaction_lag_cleans_below_the_dirty_ratio_once_the_first_dirty_batch_is_that_old():
    """KIP-354: max.compaction.lag.ms bounds how long a dirty record waits: the pass runs whatever the dirty ratio
    once the first dirty segment's first batch is older than the lag (its timestamp, not the append time)."""
    log = compacted_log(min_cleanable_dirty_ratio=0.5, segment_bytes=10**6, max_compaction_lag_ms=60_000)
    append_pairs(log, [(bytes([i]), b"v") for i in range(10)])
    log.roll(1_000)
    assert log.compact(now_ms=2_000).skipped_reason is None  # all dirty
    append_pairs(log, [(b"\x00", b"w")], now_ms=10_000)  # one dirty record against ten clean ones
    log.roll(10_000)
    assert "ratio" in log.compact(now_ms=70_000).skipped_reason  # its batch is exactly 60 s old: not yet
    stats = log.compact(now_ms=70_001)
    assert stats.skipped_reason is None and key_values(log)[0] == (1, b"\x01", b"v")  # the old \x00 is gone
    unbounded = compacted_log(min_cleanable_dirty_ratio=0.5, segment_bytes=10**6)
    append_pairs(unbounded, [(bytes([i]), b"v") for i in range(10)])
    unbounded.roll(1_000)
    unbounded.compact(now_ms=2_000)
    append_pairs(unbounded, [(b"\x00", b"w")], now_ms=10_000)
    unbounded.roll(10_000)
    assert "ratio" in unbounded.compact(now_ms=10**12).skipped_reason  # without the bound, never


def test_max_compaction_lag_rolls_a_compacted_logs_segment_before_segment_ms():
    """Kafka's LogConfig.maxSegmentMs: the active segment of a compacted log rolls at the lag when it is shorter
    than segment.ms, so that its records can be cleaned in time; a log that is not compacted keeps segment.ms."""
    for policy, rolled in ((("compact",), True), (("delete",), False)):
        log = open_log(None, cleanup_policy=policy, segment_bytes=10**6, now_ms=0, max_compaction_lag_ms=60_000,
                       segment_ms=3_600_000)
        append_pairs(log, [(b"a", b"1")], now_ms=0)
        append_pairs(log, [(b"a", b"2")], now_ms=60_000)
        assert (len(log.segments) == 2) == rolled, policy


def test_compaction_respects_first_uncleanable_offset():
    log = compacted_log(segment_bytes=len(keyed([(b"a", b"1")])) * 2)
    append_pairs(log, [(b"a", b"1"), (b"a", b"2"), (b"a", b"3"), (b"a", b"4"), (b"a", b"5")])
    log.compact(now_ms=2_000, first_uncleanable_offset=2)  # only segment [0, 2) may be cleaned
    assert key_values(log) == [(1, b"a", b"2"), (2, b"a", b"3"), (3, b"a", b"4"), (4, b"a", b"5")]


def test_compaction_swaps_atomically_and_leaves_no_temporary_files():
    storage = MemoryStorage()
    log = compacted_log(storage, file_delete_delay_ms=0)
    append_pairs(log, [(b"k", b"%d" % i) for i in range(10)])
    log.roll(1_000)
    log.compact(now_ms=2_000)
    suffixes = {path.rsplit(".", 1)[-1] for path in storage.files if "/0" in path}
    assert "log" in suffixes and suffixes <= {"log", "index", "timeindex"}  # an index file only with entries
    log.close()
    reopened = compacted_log(storage)
    assert key_values(reopened) == [(9, b"k", b"9")]


def test_a_crash_before_the_swap_leaves_the_old_log():
    storage = MemoryStorage()
    log = compacted_log(storage)
    append_pairs(log, [(b"k", b"%d" % i) for i in range(4)])
    log.roll(1_000)
    before = read_all(log)
    log.close()
    storage.files[f"{DIRECTORY}/00000000000000000000.log.cleaned"] = bytearray(keyed([(b"k", b"3")]))
    reopened = compacted_log(storage)
    assert read_all(reopened) == before


@pytest.mark.parametrize("operations", range(1, 60))  # the pass makes 52 writes
def test_a_crash_at_any_write_of_a_pass_is_only_a_crash_and_the_log_reopens_whole(operations):
    """The process dies at the n-th write of a pass (SimDisk's crash point raises a BaseException, as the
    simulator's crashes do): nothing of the cleaner runs after it (a clean-up there used the dead process's
    handles: the compaction simulation's seeds 15, 34 and 42 at 60 s), and the reopened log holds the last
    record of every key, cleaned or not."""
    disk = SimDisk(random.Random(operations))
    log = compacted_log(disk, index_interval_bytes=0, segment_bytes=600)  # an index entry per batch
    pairs = [(b"k%d" % (i % 3), b"%d" % i) for i in range(24)]
    append_pairs(log, pairs)
    log.roll(1_000)
    disk.arm_crash(operations)
    crashed = False
    try:
        log.compact(now_ms=2_000)
    except SimulatedCrash:
        crashed = True
    disk.disarm_crash()
    if not crashed:
        disk.crash()
    latest = {key: value for key, value in pairs}
    assert {key: value for _, key, value in key_values(compacted_log(disk))} == latest


def test_corrupt_batch_aborts_compaction_without_changing_the_log():
    storage = MemoryStorage()
    log = compacted_log(storage)
    append_pairs(log, [(b"k", b"%d" % i) for i in range(3)])
    log.roll(1_000)
    path = f"{DIRECTORY}/00000000000000000000.log"
    storage.files[path][-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        log.compact(now_ms=2_000)
    assert not [p for p in storage.files if p.endswith(".cleaned")]
    assert len(log.segments) == 2


def test_a_flipped_offset_outside_the_crc_aborts_compaction_without_changing_the_log():
    """A batch's base offset is outside its CRC: the pass checks that the offsets follow one another inside the
    segment (it failed an assertion when it appended such a batch to the cleaned segment, taking the node down)."""
    storage = MemoryStorage()
    log = compacted_log(storage)
    append_pairs(log, [(b"k", b"%d" % i) for i in range(3)])
    log.roll(1_000)
    path = f"{DIRECTORY}/00000000000000000000.log"
    second = len(keyed([(b"k", b"0")]))  # where the second batch starts
    storage.files[path][second] ^= 0x80  # the top byte of its base offset
    before = read_all(log)
    with pytest.raises(CorruptRecordError, match="offsets"):
        log.compact(now_ms=2_000)
    assert not [p for p in storage.files if p.endswith(".cleaned")]
    assert read_all(log) == before


def test_a_pass_run_in_small_steps_writes_what_one_pass_at_once_writes_and_keeps_appends_between_steps():
    pairs = [(b"k%d" % (i % 7), b"%d" % i) for i in range(200)]
    at_once, stepped = compacted_log(segment_bytes=600), compacted_log(segment_bytes=600)
    for log in (at_once, stepped):
        append_pairs(log, pairs)
        log.roll(1_000)
    at_once.compact(now_ms=2_000)
    cleaning = stepped.start_compaction(2_000)
    steps = 0
    while not cleaning.done:
        cleaning.advance(1)  # the least a step reads: one STEP_BYTES chunk or one group
        append_pairs(stepped, [(b"new", b"%d" % steps)], now_ms=2_000)  # into the active segment meanwhile
        steps += 1
    assert steps > 3 and not cleaning.abandoned
    assert stepped.cleaner_checkpoint == at_once.cleaner_checkpoint
    below = at_once.log_end_offset
    assert [r for r in key_values(stepped) if r[0] < below] == key_values(at_once)
    assert [r[1:] for r in key_values(stepped) if r[0] >= below] == [(b"new", b"%d" % i) for i in range(steps)]


def test_a_pass_whose_segments_change_between_steps_is_abandoned_without_a_trace():
    storage = MemoryStorage()
    log = compacted_log(storage, segment_bytes=600, cleanup_policy=("compact", "delete"), retention_ms=1_000,
                        file_delete_delay_ms=0)
    append_pairs(log, [(b"k%d" % (i % 7), b"%d" % i) for i in range(200)], now_ms=1_000)
    log.roll(1_000)
    append_pairs(log, [(b"k0", b"last")], now_ms=50_000)
    before, checkpoint = key_values(log), log.cleaner_checkpoint
    cleaning = log.start_compaction(2_000)
    cleaning.advance(1)
    assert not cleaning.done
    assert log.apply_retention(now_ms=60_000) > 0  # the old segments go while the pass is between steps
    cleaning.advance(None)
    assert cleaning.done and cleaning.abandoned
    assert not [p for p in storage.files if ".cleaned" in p]
    assert log.cleaner_checkpoint == max(checkpoint, log.log_start_offset)  # where retention, not the pass, put it
    assert key_values(log) == [r for r in before if r[0] >= log.log_start_offset]


def test_a_pass_collected_without_abandon_leaves_the_files_alone():
    """A pass the broker dropped without `abandon` (the broker of a process that died, collected later) must not
    delete what it wrote: by then another process may be writing the same `.cleaned` names (the txn-compaction
    simulation's seed 145 at 60 s lost a new pass's file to such a collection)."""
    import gc

    storage = MemoryStorage()
    log = compacted_log(storage, segment_bytes=600)
    append_pairs(log, [(b"k%d" % (i % 7), b"%d" % i) for i in range(200)])
    log.roll(1_000)
    cleaning = log.start_compaction(2_000)
    while not any(path.endswith(".cleaned") for path in storage.files):
        cleaning.advance(1)
    written = {path for path in storage.files if ".cleaned" in path}
    del cleaning
    gc.collect()
    assert {path for path in storage.files if ".cleaned" in path} == written


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=1, max_size=40), st.integers(150, 600))
def test_compaction_equals_the_last_value_per_key(writes, segment_bytes):
    log = compacted_log(segment_bytes=segment_bytes, delete_retention_ms=0)
    expected: dict[bytes, tuple[int, bytes | None]] = {}
    for offset, (key_number, is_tombstone) in enumerate(writes):
        key, value = b"k%d" % key_number, None if is_tombstone else b"v%d" % offset
        log.append_as_leader(keyed([(key, value)]), 0, 1_000)
        expected[key] = (offset, value)
    log.roll(1_000)
    log.compact(now_ms=2_000, force=True)
    log.compact(now_ms=3_000, force=True)  # second pass: tombstone horizons (0 ms) have passed
    survivors = sorted((offset, key, value) for key, (offset, value) in expected.items() if value is not None)
    assert key_values(log) == survivors
    assert log.log_end_offset == len(writes)


def test_compaction_preserves_compression_and_producer_fields():
    log = compacted_log()
    data = build_batch([(b"a", b"1"), (b"a", b"2")], compression=4, producer_id=42, producer_epoch=3, base_sequence=0,
                       base_timestamp=1_000)
    log.append_as_leader(data, 7, 1_000)
    log.roll(1_000)
    log.compact(now_ms=2_000)
    (decoded,) = list(decode_batches(read_all(log)))
    header = decoded.header
    assert (header.compression, header.producer_id, header.producer_epoch, header.base_sequence) == (4, 42, 3, 0)
    assert (header.partition_leader_epoch, header.last_offset_delta) == (7, 1)
    assert [(r.offset, r.value) for r in decoded.records] == [(1, b"2")]


def test_cleaner_checkpoint_survives_reopen_so_a_clean_log_is_not_recleaned():
    storage = MemoryStorage()
    log = compacted_log(storage, min_cleanable_dirty_ratio=0.5, segment_bytes=10**6)
    append_pairs(log, [(bytes([i]), b"v") for i in range(10)])
    log.roll(1_000)
    assert log.compact(now_ms=2_000).end_offset == 10
    log.close()
    assert bytes(storage.files[f"{DIRECTORY}/cleaner-offset-checkpoint"]) == b"0\n1\n10\n"
    reopened = compacted_log(storage, min_cleanable_dirty_ratio=0.5, segment_bytes=10**6)
    assert reopened.cleaner_checkpoint == 10
    assert reopened.compact(now_ms=3_000).skipped_reason == "nothing dirty to clean"


def test_compaction_removes_aborted_transactions_and_compacts_committed_ones_keeping_markers():
    """The cleanable range ends at the last stable offset, so every transaction in it is decided: an aborted
    one's data goes whole (its keys never shadow older records), a committed one's records compact by key and
    keep their transactional flag; markers stay this pass, which read their transactions' batches."""
    log = compacted_log(segment_bytes=10**6)

    def txn(producer_id, sequence, pairs):
        batch = build_batch(pairs, base_timestamp=1_000, producer_id=producer_id, producer_epoch=0,
                            base_sequence=sequence, is_transactional=True)
        return log.append_as_leader(batch, 0, 1_000).first_offset

    def marker(producer_id, kind):
        batch = build_control_batch(kind, producer_id, 0, 0, 1_000)
        return log.append_as_leader(batch, 0, 1_000, origin=AppendOrigin.COORDINATOR).first_offset

    append_pairs(log, [(b"a", b"plain-1"), (b"b", b"plain-1")])                 # 0, 1
    aborted_first = txn(7, 0, [(b"a", b"aborted"), (b"c", b"aborted")])        # 2-3
    aborted_marker = marker(7, ABORT)                                           # 4
    txn(8, 0, [(b"b", b"committed-old"), (b"d", b"committed")])                 # 5-6
    marker(8, COMMIT)                                                           # 7
    txn(8, 2, [(b"b", b"committed-new")])                                       # 8
    marker(8, COMMIT)                                                           # 9
    log.roll(1_000)
    log.compact(now_ms=2_000, aborted=[(7, aborted_first, aborted_marker)])
    batches = list(decode_batches(read_all(log)))
    data = [(r.offset, r.key, r.value) for b in batches if not b.header.is_control for r in b.records]
    assert data == [(0, b"a", b"plain-1"), (6, b"d", b"committed"), (8, b"b", b"committed-new")]
    assert [b.header.base_offset for b in batches if b.header.is_control] == [4, 7, 9]
    assert all(b.header.is_transactional for b in batches if b.header.producer_id == 8)
    assert not any(b.header.producer_id == 7 and not b.header.is_control for b in batches)
    assert log.log_end_offset == 10


# ---- transaction markers (Kafka's Cleaner.cleanInto, CleanedTransactionMetadata; KIP-534 delete horizon)

TXN_NOW_MS = 1_700_000_000_000


class TxnPartition:
    """A compacted partition with its producer state, cleaned the way the broker cleans it (broker/core.py):
    aborted transactions from the index, active producers' last records, index entries dropped by the pass."""

    def __init__(self, storage=None, **config):
        options = dict(cleanup_policy=("compact",), segment_bytes=10**6, min_cleanable_dirty_ratio=0.0,
                       delete_retention_ms=DAY_MS)
        options.update(config)
        self.partition = Partition(storage, now_ms=TXN_NOW_MS, **options)
        self.sequences: dict[int, int] = {}

    @property
    def log(self):
        return self.partition.log

    @property
    def state(self):
        return self.partition.state

    def produce(self, producer_id, pairs, transactional=True):
        sequence = self.sequences.get(producer_id, 0)
        self.sequences[producer_id] = sequence + len(pairs)
        data = build_batch(pairs, base_timestamp=TXN_NOW_MS, producer_id=producer_id, producer_epoch=0,
                           base_sequence=sequence, is_transactional=transactional)
        return self.partition.produce(data)[0]

    def end_txn(self, producer_id, committed):
        return self.partition.write_marker(producer_id, 0, committed=committed)[0]

    def clean(self, now_ms, all_replicas_in_sync=True):
        aborted = [(e.producer_id, e.first_offset, e.last_offset) for e in self.state.aborted_index.entries]
        stats = self.log.compact(now_ms, first_uncleanable_offset=self.log.log_end_offset, force=True,
                                 aborted=aborted, last_records=self.state.last_records_of_active_producers(),
                                 drop_aborted=self.state.aborted_index.remove,
                                 all_replicas_in_sync=all_replicas_in_sync)
        self.state.aborted_index.sync()
        return stats

    def aborted_entries(self):
        return [(e.producer_id, e.first_offset, e.last_offset) for e in self.state.aborted_index.entries]


def record_offsets(log):
    """Offsets of every record, control records included (Kafka's offsetsInLog)."""
    return [record.offset for batch in decode_batches(read_all(log)) for record in batch.records]


def batch_last_offsets(log):
    """Last offset of every batch, empty ones included (Kafka's lastOffsetsPerBatchInLog)."""
    return [batch.header.last_offset for batch in decode_batches(read_all(log))]


def read_committed(log, index):
    """What a read_committed consumer gets from the whole log: the broker's collect, the client's filter."""
    start = log.log_start_offset
    aborted = sorted((first, producer_id) for producer_id, first in index.collect(start, log.log_end_offset))
    return [(r.offset, r.key, r.value) for r in decode_fetched(read_all(log), start, aborted)[0]]


def test_commit_marker_goes_after_its_data_and_a_delete_horizon():  # Kafka's testCommitMarkerRemoval, KIP-534
    txn = TxnPartition()
    txn.produce(1, [(b"1", b"a")])                                      # 0
    txn.produce(1, [(b"2", b"a"), (b"3", b"a")])                        # 1-2
    txn.end_txn(1, committed=True)                                      # 3
    txn.produce(1, [(b"2", b"b")])                                      # 4
    txn.end_txn(1, committed=True)                                      # 5
    txn.log.roll(TXN_NOW_MS)
    txn.clean(TXN_NOW_MS)  # the marker at 3 stays: its transaction still has records
    assert record_offsets(txn.log) == [0, 2, 3, 4, 5]
    txn.produce(1, [(b"1", b"c"), (b"3", b"c")])                        # 6-7
    txn.end_txn(1, committed=True)                                      # 8
    txn.log.roll(TXN_NOW_MS)
    txn.clean(TXN_NOW_MS)  # the pass removes the last records of the first transaction: its marker stays
    assert record_offsets(txn.log) == [3, 4, 5, 6, 7, 8]
    stats = txn.clean(TXN_NOW_MS)  # nothing of that transaction read: the marker gets its delete horizon
    marker = next(b for b in decode_batches(read_all(txn.log)) if b.header.base_offset == 3)
    assert marker.header.is_control and marker.header.has_delete_horizon
    assert marker.header.base_timestamp == TXN_NOW_MS + DAY_MS == stats.earliest_delete_horizon_ms
    txn.clean(TXN_NOW_MS + DAY_MS - 1)  # kept before the horizon
    assert record_offsets(txn.log) == [3, 4, 5, 6, 7, 8]
    stats = txn.clean(TXN_NOW_MS + DAY_MS)
    assert stats.markers_removed == 1
    assert record_offsets(txn.log) == [4, 5, 6, 7, 8]
    assert read_committed(txn.log, txn.state.aborted_index) == [(4, b"2", b"b"), (6, b"1", b"c"), (7, b"3", b"c")]


def test_abort_marker_goes_after_its_aborted_data_and_a_delete_horizon():  # Kafka's testAbortMarkerRemoval
    txn = TxnPartition()
    txn.produce(1, [(b"1", b"aborted")])                                # 0
    txn.produce(1, [(b"2", b"aborted"), (b"3", b"aborted")])            # 1-2
    txn.end_txn(1, committed=False)                                     # 3
    txn.produce(1, [(b"3", b"committed")])                              # 4
    txn.end_txn(1, committed=True)                                      # 5
    txn.log.roll(TXN_NOW_MS)
    assert txn.aborted_entries() == [(1, 0, 3)]
    stats = txn.clean(TXN_NOW_MS)  # the aborted data goes; its marker and index entry stay for this pass
    assert record_offsets(txn.log) == [3, 4, 5] and stats.batches_dropped == 2
    assert txn.aborted_entries() == [(1, 0, 3)]
    stats = txn.clean(TXN_NOW_MS)  # no data of it left: the index entry goes, the marker gets its horizon
    assert record_offsets(txn.log) == [3, 4, 5]
    assert txn.aborted_entries() == [] and stats.aborted_txns_dropped == [(1, 3)]
    assert stats.earliest_delete_horizon_ms == TXN_NOW_MS + DAY_MS
    txn.clean(TXN_NOW_MS + DAY_MS - 1)
    assert record_offsets(txn.log) == [3, 4, 5]
    txn.clean(TXN_NOW_MS + DAY_MS)
    assert record_offsets(txn.log) == [4, 5]
    assert read_committed(txn.log, txn.state.aborted_index) == [(4, b"3", b"committed")]


def test_an_abort_marker_outlives_its_horizon_while_a_replica_is_out_of_the_isr():
    # A replica out of the ISR may hold the aborted data without the ABORT marker: were the marker gone, it
    # would fetch past it and commit that data with the producer's next COMMIT. The data itself still goes.
    txn = TxnPartition()
    txn.produce(1, [(b"1", b"aborted")])                                # 0
    txn.end_txn(1, committed=False)                                     # 1
    txn.produce(1, [(b"1", b"committed")])                              # 2
    txn.end_txn(1, committed=True)                                      # 3
    txn.log.roll(TXN_NOW_MS)
    stats = txn.clean(TXN_NOW_MS, all_replicas_in_sync=False)  # aborted data goes out of sync too
    assert record_offsets(txn.log) == [1, 2, 3] and stats.batches_dropped == 1
    txn.clean(TXN_NOW_MS, all_replicas_in_sync=False)  # no data of it left: the marker gets its horizon
    stats = txn.clean(TXN_NOW_MS + 3 * DAY_MS, all_replicas_in_sync=False)
    assert stats.markers_removed == 0 and record_offsets(txn.log) == [1, 2, 3]
    stats = txn.clean(TXN_NOW_MS + 3 * DAY_MS)
    assert stats.markers_removed == 1 and record_offsets(txn.log) == [2, 3]
    assert read_committed(txn.log, txn.state.aborted_index) == [(2, b"1", b"committed")]


def test_a_marker_whose_transaction_still_has_records_is_kept_past_any_horizon():
    txn = TxnPartition(delete_retention_ms=0)
    txn.produce(1, [(b"a", b"committed")])                              # 0
    txn.end_txn(1, committed=True)                                      # 1
    txn.produce(2, [(b"b", b"plain")], transactional=False)             # 2
    txn.log.roll(TXN_NOW_MS)
    for now_ms in (TXN_NOW_MS, TXN_NOW_MS + DAY_MS, TXN_NOW_MS + 2 * DAY_MS):
        txn.clean(now_ms)
        assert record_offsets(txn.log) == [0, 1, 2]
        assert not any(b.header.has_delete_horizon for b in decode_batches(read_all(txn.log)))
    txn.produce(2, [(b"a", b"plain-newer")], transactional=False)       # 3: supersedes the transaction's record
    txn.log.roll(TXN_NOW_MS)
    for _ in range(3):  # the record goes; its batch stays empty (producer 1's last sequence), so the marker too
        txn.clean(TXN_NOW_MS + 3 * DAY_MS)
        assert (record_offsets(txn.log), batch_last_offsets(txn.log)) == ([1, 2, 3], [0, 1, 2, 3])
    assert txn.state.remove_expired(TXN_NOW_MS + 3 * DAY_MS) == 2  # producer.id.expiration.ms passed
    txn.clean(TXN_NOW_MS + 3 * DAY_MS)  # the empty batch goes; the marker stays: its transaction was read
    assert (record_offsets(txn.log), batch_last_offsets(txn.log)) == ([1, 2, 3], [1, 2, 3])
    txn.clean(TXN_NOW_MS + 3 * DAY_MS)  # horizon stamped (delete.retention.ms=0)
    txn.clean(TXN_NOW_MS + 3 * DAY_MS)  # and passed
    assert record_offsets(txn.log) == [2, 3]


def test_committed_transaction_spanning_segments_keeps_record_and_marker():
    # Kafka's testCommittedTransactionSpanningSegments and testAbortedTransactionSpanningSegments: the
    # producer's last batch stays (empty when aborted) and so does the marker that ends it.
    for committed in (True, False):
        txn = TxnPartition(delete_retention_ms=0)
        txn.produce(1, [(b"a", b"1")])                                  # 0
        txn.log.roll(TXN_NOW_MS)
        txn.end_txn(1, committed=committed)                             # 1
        txn.log.roll(TXN_NOW_MS)
        for now_ms in (TXN_NOW_MS, TXN_NOW_MS + 1, TXN_NOW_MS + DAY_MS):
            txn.clean(now_ms)
            assert batch_last_offsets(txn.log) == [0, 1]
            assert record_offsets(txn.log) == ([0, 1] if committed else [1])
        assert txn.aborted_entries() == ([] if committed else [(1, 0, 1)])
        expected = [(0, b"a", b"1")] if committed else []
        assert read_committed(txn.log, txn.state.aborted_index) == expected


def test_empty_batches_are_kept_only_for_the_producers_last_sequence():
    # Kafka's testEmptyBatchRemovalWithSequenceReuse and testAbortMarkerRetentionWithEmptyBatch.
    txn = TxnPartition()
    txn.produce(1, [(b"1", b"x")])                                      # 0
    txn.end_txn(1, committed=True)                                      # 1
    txn.produce(1, [(b"2", b"x")])                                      # 2
    txn.end_txn(1, committed=True)                                      # 3
    txn.produce(9, [(b"1", b"y")], transactional=False)                 # 4
    txn.produce(9, [(b"2", b"y")], transactional=False)                 # 5
    txn.log.roll(TXN_NOW_MS)
    txn.clean(TXN_NOW_MS)  # both transactional batches emptied; the last one stays for producer 1's sequence
    assert record_offsets(txn.log) == [1, 3, 4, 5]
    assert batch_last_offsets(txn.log) == [1, 2, 3, 4, 5]
    txn.clean(TXN_NOW_MS)
    txn.clean(TXN_NOW_MS + DAY_MS)  # the first marker's transaction is gone: the marker goes
    assert record_offsets(txn.log) == [3, 4, 5]
    assert batch_last_offsets(txn.log) == [2, 3, 4, 5]
    (empty,) = [b for b in decode_batches(read_all(txn.log)) if b.header.last_offset == 2]
    assert (empty.header.records_count, empty.header.producer_id, empty.header.last_sequence) == (0, 1, 1)
    assert empty.header.is_transactional and empty.header.max_timestamp == TXN_NOW_MS

    aborting = TxnPartition()
    aborting.produce(1, [(b"2", b"x"), (b"3", b"x")])                   # 0-1
    aborting.end_txn(1, committed=False)                                # 2
    aborting.log.roll(TXN_NOW_MS)
    for now_ms in (TXN_NOW_MS, TXN_NOW_MS, TXN_NOW_MS + 2 * DAY_MS):
        aborting.clean(now_ms)  # the empty batch holds the last sequence: it and the abort marker stay
        assert (record_offsets(aborting.log), batch_last_offsets(aborting.log)) == ([2], [1, 2])
        assert aborting.aborted_entries() == [(1, 0, 2)]
    aborting.produce(1, [(b"1", b"y")])                                 # 3: a new last sequence
    aborting.end_txn(1, committed=True)                                 # 4
    aborting.log.roll(TXN_NOW_MS)
    aborting.clean(TXN_NOW_MS + 2 * DAY_MS)  # the empty batch goes; the marker stays, its data was read
    assert (record_offsets(aborting.log), batch_last_offsets(aborting.log)) == ([2, 3, 4], [2, 3, 4])
    assert aborting.aborted_entries() == [(1, 0, 2)]
    aborting.clean(TXN_NOW_MS + 2 * DAY_MS)
    aborting.clean(TXN_NOW_MS + 3 * DAY_MS)
    assert record_offsets(aborting.log) == [3, 4]
    assert aborting.aborted_entries() == []  # Kafka does not keep the entry once its data is gone


def producer_summary(state):
    """What compaction must not change in a producer's state: epoch, last sequence, open transaction."""
    return {entry.producer_id: (entry.producer_epoch, entry.last_sequence, entry.current_txn_first_offset)
            for entry in state.producers.values()}


def mixed_transactions(txn):
    """Two transactional producers over several segments (segment_bytes is small): aborted data spanning
    segments, committed data partly superseded, and plain records. Returns the committed view by key."""
    txn.produce(1, [(b"a", b"aborted-1")])
    txn.produce(2, [(b"a", b"committed-2"), (b"b", b"committed-2")])
    txn.produce(1, [(b"c", b"aborted-1"), (b"b", b"aborted-1")])
    txn.end_txn(2, committed=True)
    txn.produce(9, [(b"d", b"plain")], transactional=False)
    txn.end_txn(1, committed=False)
    txn.produce(2, [(b"b", b"committed-2b")])
    txn.produce(1, [(b"c", b"committed-1")])
    txn.end_txn(2, committed=True)
    txn.end_txn(1, committed=True)
    txn.produce(9, [(b"a", b"plain-2")], transactional=False)
    txn.log.roll(TXN_NOW_MS)
    return {b"a": b"plain-2", b"b": b"committed-2b", b"c": b"committed-1", b"d": b"plain"}


def test_read_committed_over_a_cleaned_log_returns_exactly_the_committed_records():
    txn = TxnPartition(segment_bytes=200)
    expected = mixed_transactions(txn)
    assert len(txn.log.segments) > 3
    for now_ms in (TXN_NOW_MS, TXN_NOW_MS, TXN_NOW_MS + DAY_MS, TXN_NOW_MS + DAY_MS, TXN_NOW_MS + 2 * DAY_MS):
        txn.clean(now_ms)
        visible = read_committed(txn.log, txn.state.aborted_index)
        assert {key: value for _, key, value in visible} == expected
        assert len(visible) == len(expected)
    # The markers at 5 (commit) and 7 (abort) went with their data; 10 and 11 end transactions that still
    # have records (8 and 9).
    assert batch_last_offsets(txn.log) == [6, 8, 9, 10, 11, 12]
    assert [b.header.base_offset for b in decode_batches(read_all(txn.log)) if b.header.is_control] == [10, 11]
    assert txn.aborted_entries() == []


@pytest.mark.parametrize("passes", [
    (TXN_NOW_MS,),  # aborted data gone, its marker kept with its index entry
    (TXN_NOW_MS, TXN_NOW_MS),  # markers without data get their horizon, the aborted entry goes
    (TXN_NOW_MS, TXN_NOW_MS, TXN_NOW_MS + DAY_MS),  # those markers go
])
def test_recovery_after_cleaning_markers_equals_a_fresh_replay(passes):
    storage = MemoryStorage()
    txn = TxnPartition(storage, segment_bytes=200)
    expected = mixed_transactions(txn)
    for now_ms in passes:
        txn.clean(now_ms)
    cleaned, live, live_index = read_all(txn.log), producer_summary(txn.state), list(txn.state.aborted_index.entries)
    assert [len(live_index), len([b for b in decode_batches(cleaned) if b.header.is_control])] == {
        1: [1, 4], 2: [0, 4], 3: [0, 2]}[len(passes)]
    assert all(entry[2] is None for entry in live.values())  # no transaction left open by a lost marker
    txn.state.write_snapshot(txn.log.log_end_offset)  # what the broker does on shutdown
    txn.log.close()

    def reopen(use_snapshot):
        log = PartitionLog.open(storage, "payments-0", txn.partition.config, TXN_NOW_MS)
        state = ProducerStateManager(storage, "payments-0",
                                     segment_bases=lambda: [segment.base_offset for segment in log.segments])
        state.rebuild(log, TXN_NOW_MS, use_snapshot=use_snapshot)  # producers not yet expired
        return log, state

    replica = TxnPartition(segment_bytes=200)  # a follower fetching the cleaned log from its start
    info = replica.log.append_as_follower(cleaned, TXN_NOW_MS + DAY_MS)
    replica.state.update(info.batch_headers, markers_in(cleaned))
    assert reopen(True)[1].aborted_index.entries == live_index
    # A rescan (no snapshot, or a follower's replay) may add an entry for a kept abort marker whose data is
    # gone, covering the marker alone (as Kafka's segment recovery does); read_committed is the same.
    for log, state in (reopen(True), reopen(False), (replica.log, replica.state)):
        assert read_all(log) == cleaned
        assert producer_summary(state) == live
        assert state.last_stable_offset(log.log_end_offset) == log.log_end_offset  # nothing left open
        visible = read_committed(log, state.aborted_index)
        assert {key: value for _, key, value in visible} == expected and len(visible) == len(expected)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2, 9]), st.integers(0, 3), st.sampled_from(["write", "commit", "abort"])),
                min_size=1, max_size=30),
       st.integers(150, 600), st.lists(st.integers(0, 2), min_size=1, max_size=5))
def test_read_committed_after_any_passes_is_the_last_committed_value_per_key(operations, segment_bytes, days):
    txn = TxnPartition(segment_bytes=segment_bytes)
    # key -> (offset order, value) of its last committed record: a read_committed reader meets the records in
    # offset order, so a transaction committed late does not override a later offset of the same key.
    latest: dict[bytes, tuple[int, bytes]] = {}
    open_txns: dict[int, dict[bytes, tuple[int, bytes]]] = {}
    for index, (producer_id, key_number, action) in enumerate(operations):
        key, value = b"k%d" % key_number, b"v%d" % index
        if producer_id == 9:
            txn.produce(9, [(key, value)], transactional=False)
            latest[key] = (index, value)
        elif action == "write":
            txn.produce(producer_id, [(key, value)])
            open_txns.setdefault(producer_id, {})[key] = (index, value)
        elif producer_id in open_txns:
            txn.end_txn(producer_id, committed=action == "commit")
            for written_key, written in open_txns.pop(producer_id).items():
                if action == "commit" and written[0] > latest.get(written_key, (-1, b""))[0]:
                    latest[written_key] = written
    visible = {key: value for key, (_, value) in latest.items()}
    for producer_id in list(open_txns):
        txn.end_txn(producer_id, committed=False)
    txn.log.roll(TXN_NOW_MS)
    now_ms = TXN_NOW_MS
    for step in days:
        now_ms += step * DAY_MS
        txn.clean(now_ms)
        seen = read_committed(txn.log, txn.state.aborted_index)
        assert {key: value for _, key, value in seen} == visible and len(seen) == len(visible)
        entries = {(e.producer_id, e.last_offset) for e in txn.state.aborted_index.entries}
        markers = {(b.header.producer_id, b.header.base_offset) for b in decode_batches(read_all(txn.log))
                   if b.header.is_control and b.records}
        assert entries <= markers  # no index entry outlives its marker
