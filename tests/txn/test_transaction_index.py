"""The last stable offset and the aborted-transaction index (`.txnindex`, Kafka's layout) of a partition:
live, after recovery (with and without snapshots, with a corrupt index file), truncation and retention."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings, strategies as st

from tests.txn.harness import DIRECTORY, Partition, producer_batch
from txn.transaction_index import ENTRY, AbortedTxn, decode_entries

SEGMENT_BYTES = 600


def txn_batch(producer_id: int, sequence: int, count: int = 2) -> bytes:
    return producer_batch(producer_id, 0, sequence, count, transactional=True)


def test_the_lso_stops_at_an_open_transaction_and_moves_when_its_marker_is_below_the_high_watermark():
    partition = Partition()
    partition.produce(producer_batch(1, 0, 0, 3))              # offsets 0-2, not transactional
    partition.produce(txn_batch(7, 0))                         # 3-4: opens producer 7's transaction
    partition.produce(producer_batch(2, 0, 0, 2))              # 5-6
    state = partition.state
    assert state.last_stable_offset(7) == 3
    assert state.last_stable_offset(2) == 2  # never above the high watermark
    marker, _ = partition.write_marker(7, 0, committed=False)  # offset 7
    assert state.last_stable_offset(7) == 3  # decided, but the marker is not below the high watermark yet
    assert state.last_stable_offset(8) == 8
    assert state.aborted_index.collect(0, 8) == [(7, 3)]
    assert state.aborted_index.collect(8, 20) == []  # lastOffset 7 < fetch offset 8
    assert state.aborted_index.collect(0, 3) == []   # firstOffset 3 is not below the upper bound 3


def test_txnindex_files_hold_kafkas_34_byte_entries():
    partition = Partition()
    partition.produce(txn_batch(9, 0))
    marker, _ = partition.write_marker(9, 0, committed=False)
    data = partition.storage.files[f"{DIRECTORY}/{0:020d}.txnindex"]
    assert len(data) == 34 and ENTRY.size == 34
    assert bytes(data) == (0).to_bytes(2, "big") + (9).to_bytes(8, "big") + (0).to_bytes(8, "big") + \
        marker.to_bytes(8, "big") + (marker + 1).to_bytes(8, "big")
    assert decode_entries(bytes(data)) == [AbortedTxn(9, 0, marker, marker + 1)]
    assert decode_entries(bytes(data)[:-1]) is None


def _traffic(partition: Partition, rng: random.Random, steps: int) -> None:
    sequences: dict[int, int] = {}
    open_txns: set[int] = set()
    for _ in range(steps):
        producer_id = rng.choice([11, 12, 13])
        action = rng.random()
        if producer_id in open_txns and action < 0.4:
            partition.write_marker(producer_id, 0, committed=rng.random() < 0.5)
            open_txns.discard(producer_id)
            continue
        sequence = sequences.get(producer_id, 0)
        partition.produce(producer_batch(producer_id, 0, sequence, 2, transactional=True))
        sequences[producer_id] = sequence + 2
        open_txns.add(producer_id)
        if rng.random() < 0.1:
            partition.state.write_snapshot(partition.log.log_end_offset)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), steps=st.integers(1, 60))
def test_recovery_rebuilds_the_same_lso_producers_and_aborted_index(seed, steps):
    partition = Partition(segment_bytes=SEGMENT_BYTES)
    _traffic(partition, random.Random(seed), steps)
    live = partition.state
    end = partition.log.log_end_offset
    for use_snapshot in (True, False):
        rebuilt = partition.reopened_state(use_snapshot=use_snapshot)
        assert rebuilt.producers == live.producers
        assert rebuilt.aborted_index.entries == live.aborted_index.entries
        assert rebuilt.last_stable_offset(end) == live.last_stable_offset(end)


def test_a_corrupt_txnindex_file_is_rebuilt_from_the_log():
    partition = Partition(segment_bytes=SEGMENT_BYTES)
    _traffic(partition, random.Random(5), 50)
    expected = list(partition.state.aborted_index.entries)
    assert expected, "the traffic aborted something"
    names = [n for n in partition.storage.list(DIRECTORY) if n.endswith(".txnindex")]
    partition.storage.files[f"{DIRECTORY}/{names[0]}"] = bytearray(b"\x00\x07garbage")
    rebuilt = partition.reopened_state()
    assert rebuilt.aborted_index.entries == expected


def test_truncation_drops_entries_at_or_past_the_offset_and_retention_drops_deleted_segments():
    partition = Partition(segment_bytes=SEGMENT_BYTES)
    _traffic(partition, random.Random(8), 60)
    entries = partition.state.aborted_index.entries
    assert len(entries) >= 2
    cut = entries[-1].last_offset
    partition.log.truncate_to(cut)
    partition.state.truncate_to(partition.log, cut, 0)
    assert all(e.last_offset < cut for e in partition.state.aborted_index.entries)
    assert partition.reopened_state().aborted_index.entries == partition.state.aborted_index.entries
    # Retention: the log start moves past the first segments; their entries and files go with them.
    second_base = partition.log.segments[1].base_offset
    partition.log.delete_records_before(second_base)
    partition.state.on_log_start_offset(partition.log.log_start_offset)
    first = partition.log.segments[0].base_offset
    assert all(e.last_offset >= first for e in partition.state.aborted_index.entries)
    files = sorted(int(n.split(".")[0]) for n in partition.storage.list(DIRECTORY) if n.endswith(".txnindex"))
    assert all(base >= first for base in files)
