"""The compaction workload: the whole-cluster simulation over a compacted topic, with the log cleaner running
on every replica under every fault (simulations/compaction_sim.py). A fault-free run compacts and passes every
checker; each planted cleaner bug fails a compaction checker at its pinned seed (30 s, default faults), replays
to the same trace, and the same seed passes without it.

Where the pins come from (`flotilla simulate --workload compaction --seeds N --duration 30 --bugs B`):
- tombstone_ignores_horizon: seeds 2-8 of 1-8 fail (tombstone_horizon_kept, and tombstones_respected in most);
- cleaned_segment_unsynced: seeds 3 and 5 of 1-8 (a power loss empties a cleaned segment: latest values
  gone, offsets handed out again);
- cleaner_past_lso: seeds 1, 2 and 4-7 of 1-8 (latest_value_kept: a replica cleaned with records above its
  high watermark, then truncated them).

The txn-compaction workload (simulations/txn_compaction_sim.py) is the transactions workload with compacted
outputs: the cleaner removes aborted transactions' data, then their markers and index entries, while a
read_committed reader reads the outputs again from offset 0. Its planted bug cleaner_forgets_aborted (the
cleaner is handed no aborted transactions) fails no_aborted_read or exactly_once at seeds 2, 3, 5 and 6 of 1-6
at 30 s (delete.retention.ms 5 s there).

cleaner_ignores_isr (tombstones and markers go past their horizon while a replica is out of the ISR, as in
Kafka) fails tombstones_respected at seeds 3, 7 and 12 of 1-12 of the compaction workload at 30 s: a replica
that was behind holds a deleted key's older value without its tombstone. In the txn-compaction workload it
fails at seed 72 at 60 s (none of seeds 1-18): a node down for 9 s fetches past a removed ABORT marker and
commits the aborted data with its producer's next COMMIT marker."""

from __future__ import annotations

import pytest

from simulations.run import run_one
from tests.simulations.workloads import assert_sweep_passes, assert_teeth, failed_checkers, workload_config

TOMBSTONE_IGNORES_HORIZON_SEED = 2
CLEANED_SEGMENT_UNSYNCED_SEED = 3
CLEANER_PAST_LSO_SEED = 2  # (1 until a starting node held its first Metadata requests)
CLEANER_FORGETS_ABORTED_SEED = 2
CLEANER_IGNORES_ISR_SEED = 7  # (3 until a starting node held its first Metadata requests)
TXN_CLEANER_IGNORES_ISR_SEED = 2  # (72 until the nodes answered each connection in request order)


def test_a_fault_free_run_compacts_every_replica_and_passes_every_checker():
    result = run_one(workload_config("compaction", 1, 20.0))
    assert result.ok, failed_checkers(result)
    names = {verdict.name for verdict in result.checkers}
    assert {"records_genuine", "latest_value_kept", "tombstones_respected", "tombstone_horizon_kept"} <= names
    assert not {"replicas_identical", "offsets_dense"} & names  # replicas compact on their own
    stats = result.stats
    assert stats["committed_offsets"] > 5_000 and stats["records_checked"] > stats["committed_offsets"]
    # the cleaner ran: the three replicas of each partition hold far fewer records than were committed
    assert stats["final_records"] < stats["committed_offsets"], stats
    assert stats["rewinds"] >= 2 and stats["consumed"] > stats["committed_offsets"], stats


def test_tombstone_ignores_horizon_fails_at_its_known_seed():
    assert_teeth("compaction", "tombstone_ignores_horizon", TOMBSTONE_IGNORES_HORIZON_SEED, 30.0,
                 {"tombstone_horizon_kept", "tombstones_respected"})


def test_cleaned_segment_unsynced_fails_at_its_known_seed():
    assert_teeth("compaction", "cleaned_segment_unsynced", CLEANED_SEGMENT_UNSYNCED_SEED, 30.0,
                 {"latest_value_kept", "records_genuine", "acked_not_lost"})


def test_cleaner_past_lso_fails_at_its_known_seed():
    assert_teeth("compaction", "cleaner_past_lso", CLEANER_PAST_LSO_SEED, 30.0, {"latest_value_kept"})


def test_txn_compaction_removes_aborted_transactions_and_their_markers_under_read_committed_readers():
    result = run_one(workload_config("txn-compaction", 1, 20.0))
    assert result.ok, failed_checkers(result)
    stats = result.stats
    assert stats["txn_aborted"] > 10 and stats["txn_committed"] > 100 and stats["txn_reader_rewinds"] >= 2, stats
    # an aborted transaction leaves an index entry on each replica of both outputs (6) until the cleaner drops it
    # with its marker: some were dropped
    assert stats["aborted_index_entries_left"] < 6 * stats["txn_aborted"], stats


def test_cleaner_forgets_aborted_fails_at_its_known_seed():
    assert_teeth("txn-compaction", "cleaner_forgets_aborted", CLEANER_FORGETS_ABORTED_SEED, 30.0,
                 {"no_aborted_read", "exactly_once"})


def test_cleaner_ignores_isr_fails_at_its_known_seed():
    assert_teeth("compaction", "cleaner_ignores_isr", CLEANER_IGNORES_ISR_SEED, 30.0, {"tombstones_respected"})


@pytest.mark.slow
def test_a_replica_behind_past_delete_retention_keeps_the_abort_marker():
    # With the cleaner removing markers past their horizon whatever the ISR (Kafka's rule), a replica kept
    # behind past the horizon comes back without an abort marker and serves the aborted data as committed
    # (seed 72 found it: a node down for 9 s); keeping them while a replica is out of the ISR passes.
    assert_teeth("txn-compaction", "cleaner_ignores_isr", TXN_CLEANER_IGNORES_ISR_SEED, 60.0,
                 {"no_torn_transaction", "exactly_once", "no_aborted_read", "fenced_never_commits"})


@pytest.mark.slow
def test_compaction_sweep_with_every_fix_in_place_finds_no_failure():
    assert_sweep_passes("compaction", 12, 30.0)


@pytest.mark.slow
def test_txn_compaction_sweep_with_every_fix_in_place_finds_no_failure():
    assert_sweep_passes("txn-compaction", 6, 30.0)
