"""Producer state recovery: rebuild from the log's batch headers, snapshots, truncation and the log start."""

from __future__ import annotations

from dataclasses import dataclass, field

import cbor2
import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partitions.batch import parse_header
from tests.txn.harness import DIRECTORY, NOW_MS, Partition, producer_batch
from txn.errors import CorruptProducerSnapshotError, InvalidProducerEpochError, OutOfOrderSequenceError
from txn.producer_state import (
    markers_in,
    PRODUCER_BATCHES_RETAINED,
    SNAPSHOTS_RETAINED,
    BatchMetadata,
    ProducerStateEntry,
    ProducerStateManager,
    ProducerStateSnapshot,
    decode_snapshot,
    encode_snapshot,
)

SEGMENT_BYTES = 400  # a few batches per segment, so scans and snapshots cross segment boundaries


# ---- a model of what the broker must answer, and random producer traffic


@dataclass
class ProducerModel:
    epoch: int = 0
    sent: list[tuple[int, int, int, int, int]] = field(default_factory=list)  # (epoch, first, count, offsets...)
    next_sequence: int = 0


OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["next", "next", "next", "retry", "bump", "gap", "roll", "plain", "marker"]),
        st.integers(0, 3),  # producer
        st.integers(1, 3),  # records in the batch
        st.integers(0, 12),  # which earlier batch a retry repeats (from the newest)
    ),
    max_size=40,
)


def run_traffic(partition: Partition, operations) -> None:
    """Drive random producer traffic and check every answer against the model (KIP-98 rules)."""
    models = {producer: ProducerModel() for producer in range(4)}
    for kind, producer, count, back in operations:
        model, producer_id = models[producer], 1000 + producer
        if kind == "roll":
            partition.log.roll(NOW_MS)
            partition.state.write_snapshot(partition.log.log_end_offset)
        elif kind == "plain":
            partition.produce(producer_batch(-1, -1, -1, count=count))
        elif kind == "marker":
            partition.write_marker(producer_id, model.epoch)  # non-transactional producers: harmless
            model.next_sequence = 0 if partition.state.entry(producer_id).batches == () else model.next_sequence
        elif kind == "retry" and model.sent:
            retry_epoch, first, retry_count, offsets_first, offsets_last = model.sent[-1 - min(back, len(model.sent) - 1)]
            same_epoch = [entry for entry in model.sent if entry[0] == model.epoch]
            batch = producer_batch(producer_id, retry_epoch, first, count=retry_count)
            if retry_epoch < model.epoch:
                with pytest.raises(InvalidProducerEpochError):
                    partition.produce(batch)
            elif (retry_epoch, first, retry_count, offsets_first, offsets_last) in same_epoch[-PRODUCER_BATCHES_RETAINED:]:
                assert partition.produce(batch) == (offsets_first, offsets_last)
            else:
                with pytest.raises(OutOfOrderSequenceError):
                    partition.produce(batch)
        elif kind == "gap" and model.sent:
            with pytest.raises(OutOfOrderSequenceError):
                partition.produce(producer_batch(producer_id, model.epoch, model.next_sequence + 1, count=count))
        elif kind in ("next", "bump", "retry", "gap"):
            if kind == "bump":
                model.epoch, model.next_sequence = model.epoch + 1, 0
            first = model.next_sequence
            offsets = partition.produce(producer_batch(producer_id, model.epoch, first, count=count))
            model.sent.append((model.epoch, first, count, *offsets))
            model.next_sequence = first + count


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPERATIONS)
def test_rebuild_from_the_log_equals_the_live_state(operations):
    partition = Partition(segment_bytes=SEGMENT_BYTES)
    run_traffic(partition, operations)
    live = partition.state
    for use_snapshot in (False, True):
        rebuilt = partition.reopened_state(use_snapshot=use_snapshot)
        assert rebuilt.producers == live.producers, f"use_snapshot={use_snapshot}"
        assert rebuilt.map_end_offset == live.map_end_offset == partition.log.log_end_offset


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPERATIONS, st.integers(0, 60))
def test_truncation_then_rebuild_equals_the_state_of_the_surviving_batches(operations, truncate_at):
    partition = Partition(segment_bytes=SEGMENT_BYTES)
    run_traffic(partition, operations)
    partition.log.truncate_to(truncate_at)
    partition.state.truncate_to(partition.log, truncate_at, NOW_MS)
    end_offset = partition.log.log_end_offset
    assert all(offset <= end_offset for offset in partition.state.snapshot_offsets())
    # The expected state: a fresh partition fed only the surviving batches, as a follower would be.
    survivor = Partition()
    if end_offset:
        records = partition.log.read(0, 1 << 30).records
        survivor.state.update(survivor.log.append_as_follower(records, NOW_MS).batch_headers, markers_in(records))
    assert partition.state.producers == survivor.state.producers
    assert partition.state.map_end_offset == end_offset


# ---- snapshots


def some_snapshot() -> ProducerStateSnapshot:
    entries = (
        ProducerStateEntry(7, 0, (BatchMetadata(0, 1, 10, 11, NOW_MS), BatchMetadata(2, 2, 12, 12, NOW_MS + 1)),
                           NOW_MS + 1),
        ProducerStateEntry(9, 3, (), NOW_MS - 5, coordinator_epoch=4, current_txn_first_offset=40),
        ProducerStateEntry(11, 1, (BatchMetadata(2**31 - 1, 1, 20, 22, -1),), -1),
    )
    return ProducerStateSnapshot(50, entries)


def test_snapshot_encoding_round_trips():
    snapshot = some_snapshot()
    assert decode_snapshot(encode_snapshot(snapshot)) == snapshot


def test_snapshot_crc_catches_any_flipped_byte():
    data = encode_snapshot(some_snapshot())
    for position in range(len(data)):
        damaged = bytearray(data)
        damaged[position] ^= 0x40
        with pytest.raises(CorruptProducerSnapshotError):
            decode_snapshot(bytes(damaged))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_hostile_snapshot_bytes_raise_only_the_typed_error(data):
    try:
        decode_snapshot(data)
    except CorruptProducerSnapshotError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.integers() | st.booleans() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=30))
def test_well_checksummed_nonsense_is_refused_with_the_typed_error(document):
    body = cbor2.dumps({"v": 1, "offset": 0, "producers": document})
    try:
        decode_snapshot(crc32c.crc32c(body).to_bytes(4, "big") + body)
    except CorruptProducerSnapshotError:
        pass


def produce_and_snapshot(partition: Partition) -> None:
    for producer in range(3):
        for sequence in range(4):
            partition.produce(producer_batch(2000 + producer, 0, sequence))
    partition.log.roll(NOW_MS)
    partition.state.write_snapshot(partition.log.log_end_offset)


def test_a_snapshot_keeps_producers_whose_batches_the_log_no_longer_holds():  # KIP-360
    partition = Partition(segment_bytes=SEGMENT_BYTES)
    produce_and_snapshot(partition)
    partition.produce(producer_batch(2100, 0, 0))
    start = partition.log.delete_records_before(partition.log.log_end_offset - 1)
    partition.state.on_log_start_offset(start)
    assert len(partition.state.producers) == 4, "a moving log start keeps producer state"
    assert partition.reopened_state(use_snapshot=False).producers.keys() == {2100}
    assert partition.reopened_state().producers == partition.state.producers
    assert partition.produce(producer_batch(2000, 0, 4)) == (13, 13)  # still in sequence after the restart


def test_corrupt_newest_snapshot_is_deleted_and_an_older_one_used():
    partition = Partition(segment_bytes=SEGMENT_BYTES)
    produce_and_snapshot(partition)  # snapshot at 12
    older = partition.state.snapshot_offsets()[-1]
    partition.produce(producer_batch(2100, 0, 0))
    partition.log.roll(NOW_MS)
    newest = partition.state.write_snapshot(partition.log.log_end_offset)
    partition.log.delete_records_before(older)  # producers 2000..2002 now live only in the snapshots
    partition.state.on_log_start_offset(partition.log.log_start_offset)
    partition.storage.files[partition.state.snapshot_path(newest)][-1] ^= 0xFF
    rebuilt = partition.reopened_state()
    assert rebuilt.producers == partition.state.producers
    assert rebuilt.snapshot_offsets() == [older], "the corrupt snapshot must be deleted"


def test_corrupt_only_snapshot_falls_back_to_a_full_scan():
    partition = Partition(segment_bytes=SEGMENT_BYTES)
    produce_and_snapshot(partition)
    partition.produce(producer_batch(2000, 0, 4, count=2))
    (offset,) = partition.state.snapshot_offsets()
    partition.storage.files[partition.state.snapshot_path(offset)][10:20] = b"\x00" * 10
    rebuilt = partition.reopened_state()
    assert rebuilt.producers == partition.state.producers
    assert rebuilt.snapshot_offsets() == []


def test_snapshots_past_the_log_end_are_ignored_and_deleted():
    partition = Partition(segment_bytes=SEGMENT_BYTES)
    produce_and_snapshot(partition)
    stale = ProducerStateManager(partition.storage, DIRECTORY)
    stale.update([parse_header(producer_batch(2999, 0, 0))])
    stale.write_snapshot(10_000)
    rebuilt = partition.reopened_state()
    assert 2999 not in rebuilt.producers and 10_000 not in rebuilt.snapshot_offsets()
    assert rebuilt.producers == partition.state.producers


def test_only_the_newest_snapshots_are_kept():
    partition = Partition()
    for sequence in range(5):
        partition.produce(producer_batch(2000, 0, sequence))
        partition.state.write_snapshot()
    assert partition.state.snapshot_offsets() == [4, 5][-SNAPSHOTS_RETAINED:]


def test_snapshot_file_is_named_by_its_offset_and_decodes_to_the_state():
    partition = Partition()
    partition.produce(producer_batch(2000, 0, 0, count=3))
    offset = partition.state.write_snapshot()
    name = f"{DIRECTORY}/{offset:020d}.snapshot"
    assert offset == 3 and name in partition.storage.files
    assert decode_snapshot(bytes(partition.storage.files[name])) == partition.state.snapshot()


def test_truncation_deletes_snapshots_past_the_new_log_end_and_rebuilds():
    partition = Partition(segment_bytes=SEGMENT_BYTES)
    produce_and_snapshot(partition)  # 12 batches, snapshot at 12
    partition.produce(producer_batch(2000, 0, 4))
    partition.log.roll(NOW_MS)
    partition.state.write_snapshot(partition.log.log_end_offset)  # at 13
    partition.log.truncate_to(12)
    partition.state.truncate_to(partition.log, 12, NOW_MS)
    assert partition.state.snapshot_offsets() == [12]
    assert partition.state.entry(2000).last_sequence == 3
    assert partition.produce(producer_batch(2000, 0, 4)) == (12, 12), "the truncated batch may be written again"


def test_truncate_fully_forgets_everything_and_starts_at_the_offset():
    partition = Partition(segment_bytes=SEGMENT_BYTES)
    produce_and_snapshot(partition)
    partition.log.truncate_fully_and_start_at(500)
    partition.state.truncate_fully_and_start_at(500)
    assert partition.state.producers == {} and partition.state.snapshot_offsets() == []
    assert partition.state.map_end_offset == 500
    assert partition.produce(producer_batch(2000, 0, 9)) == (500, 500)

