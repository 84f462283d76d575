"""The follower-fetch workload: the whole-cluster simulation with nodes in racks, `replica_selector = "rack"` and
a reader with a `client.rack`, which leaders send to the in-sync replica in its rack (KIP-392,
simulations/follower_fetch_sim.py). The reader reads most records from followers, every checker passes under
the default faults, and a follower that serves past its high watermark (the planted bug) fails reads_committed
at seed 1 (each of seeds 1-20 of `flotilla simulate --workload follower-fetch --seeds 20 --duration 20 --bugs
follower_reads_past_hw` fails).

The reader fetches at v17 (topics by id, LastFetchedEpoch): a replica that tells it its epoch diverged when its
position is that epoch's end, as after every leader change (`diverges_at_epoch_end`), keeps it validating at the
leader and never moving on, which liveness catches at seed 1 (18 of seeds 1-20 fail)."""

from __future__ import annotations

import pytest

from simulations.run import run_one
from tests.simulations.workloads import assert_sweep_passes, assert_teeth, failed_checkers, workload_config

FOLLOWER_READS_PAST_HW_SEED = 1
DIVERGES_AT_EPOCH_END_SEED = 1


def test_a_fault_free_run_reads_from_followers_and_passes_every_checker():
    result = run_one(workload_config("follower-fetch", 1, 20.0))
    assert result.ok, failed_checkers(result)
    stats = result.stats
    assert stats["redirects"] >= 1 and stats["consumed"] > 0
    assert stats["follower_reads"] >= stats["consumed"] // 2, stats  # the reader's rack holds a follower


def test_follower_reads_past_hw_fails_reads_committed_at_its_known_seed():
    assert_teeth("follower-fetch", "follower_reads_past_hw", FOLLOWER_READS_PAST_HW_SEED, 20.0, {"reads_committed"})


def test_diverges_at_epoch_end_keeps_the_reader_from_moving_on_at_its_known_seed():
    assert_teeth("follower-fetch", "diverges_at_epoch_end", DIVERGES_AT_EPOCH_END_SEED, 20.0, {"liveness"})


@pytest.mark.slow
def test_follower_fetch_sweep_with_every_fix_in_place_finds_no_failure():
    assert_sweep_passes("follower-fetch", 12, 20.0)
