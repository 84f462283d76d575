"""The reassignment workload: the whole-cluster simulation while a mover reassigns partitions, cancels moves
and elects preferred leaders (simulations/reassign_sim.py).

The settled-assignment check is shown to fail on hand-fed states; the planted bug (new replicas counted in
sync the moment a move starts) fails a safety checker at a named seed (the first failing seed of `flotilla
simulate --workload reassign --seeds 300 --duration 30 --bugs reassign_without_catch_up`; 20 of the first 20
seeds catch it), replays to the same trace, and passes with the bug off."""

from __future__ import annotations

import pytest

from metadata.image import PartitionRegistration
from simulations.reassign_sim import assignment_problem
from tests.simulations.workloads import assert_sweep_passes, assert_teeth, failed_checkers, workload_config
from simulations.run import RunConfig, run_one

REASSIGN_WITHOUT_CATCH_UP_SEED = 1
# Of `--duration 20`; both seeds moved from 23 to 11 when a broker's controller calls began to follow a change of
# controller at once and a controller's sessions stopped counting its own stalls, and back to 23 (of seeds 1-100:
# 23 and 32 catch both, 52 the second) when a parked follower fetch at the log end stopped being read again each
# time the high watermark moved (the followers' fetch states are touched less often: the runs took other courses).
# Both moved again when a starting node held its first Metadata requests: 209 is the first seed to catch the
# first, 46 is the first to catch the second. The first moved to 276 (of seeds 1-300) when forwarded admin
# answers began to wait for the forwarding broker's image and the run to wait for every node's image to settle.
# Both moved to 19 (the first seed of 300 to catch either, the broker-only node's replica left behind) when the
# quorum leader began to hold the broker-only node's metadata fetches instead of answering its polls. When the
# nodes began to answer each connection in request order, the first moved to 71 and the second to 24 (the first
# seeds of 1-160 to catch each).
FETCH_SESSION_SILENT_SEED = 71  # the defect the sweep found in the first fetch sessions
PARKED_FETCH_DROPS_NEWS_SEED = 24  # found once log cleanup stopped waking every partition
# Of `--duration 30`: the first of the ten of seeds 1-30 that catch it (the broker-only node's image stays behind).
OBSERVER_STOPS_AFTER_FAILURE_SEED = 3
SAFETY_CHECKERS = {"acked_not_lost", "reads_committed", "replicas_identical", "offsets_dense"}


def _config(seed: int, duration_s: float = 20.0, faults: str = "none", bugs: frozenset[str] = frozenset()) -> RunConfig:
    return workload_config("reassign", seed, duration_s, faults, bugs)


def test_a_fault_free_run_moves_partitions_and_passes_every_checker():
    result = run_one(_config(seed=1))
    assert result.ok, failed_checkers(result)
    assert "assignment_settled" in {v.name for v in result.checkers}
    assert result.stats["mover_accepted"] >= 5 and result.stats["mover_moves"] >= 5
    assert result.stats["acked_all"] > 1000


def test_assignment_problem_names_what_is_not_settled():
    state = PartitionRegistration(replicas=(2, 3), isr=(2, 3), leader=2, leader_epoch=4, partition_epoch=9)
    assert assignment_problem({1: state, 2: state, 3: state}, {2: True, 3: False}) is None
    assert "hosted on [1, 2, 3]" in assignment_problem({1: state, 2: state}, {1: False, 2: True, 3: False})
    assert "led by [2, 3]" in assignment_problem({1: state}, {2: True, 3: True})
    moving = PartitionRegistration(replicas=(2, 3, 1), isr=(1, 2), leader=2, leader_epoch=4, partition_epoch=9,
                                   adding_replicas=(3,), removing_replicas=(1,))
    assert "half done" in assignment_problem({1: moving}, {1: False, 2: True, 3: False})
    assert "disagree" in assignment_problem({1: state, 2: moving}, {2: True, 3: False})
    short = PartitionRegistration(replicas=(2, 3), isr=(2,), leader=2, leader_epoch=4, partition_epoch=9)
    assert "ISR (2,)" in assignment_problem({1: short}, {2: True, 3: False})


@pytest.mark.slow
def test_reassign_without_catch_up_fails_a_safety_checker_at_its_known_seed():
    assert_teeth("reassign", "reassign_without_catch_up", REASSIGN_WITHOUT_CATCH_UP_SEED, 30.0, SAFETY_CHECKERS)


@pytest.mark.slow
def test_a_fetch_session_silent_on_a_named_partition_fails_liveness_at_its_known_seed():
    assert_teeth("reassign", "fetch_session_silent_on_named", FETCH_SESSION_SILENT_SEED, 20.0, {"liveness"})


@pytest.mark.slow
def test_a_parked_fetch_that_drops_its_news_fails_liveness_at_its_known_seed():
    # A follower that named a partition again at its log end never learns the high watermark there.
    assert_teeth("reassign", "parked_fetch_drops_news", PARKED_FETCH_DROPS_NEWS_SEED, 20.0, {"liveness"})


@pytest.mark.slow
def test_an_observer_that_plans_no_fetch_after_a_failed_one_fails_liveness_at_its_known_seed():
    # The broker-only node's metadata image stays at the index of its last answer once a fetch fails.
    run = assert_teeth("reassign", "observer_stops_after_failure", OBSERVER_STOPS_AFTER_FAILURE_SEED, 30.0,
                       {"liveness"})
    liveness = next(verdict for verdict in run.checkers if verdict.name == "liveness")
    assert "metadata images at different indexes" in liveness.detail


@pytest.mark.slow
def test_reassign_sweep_with_every_fix_in_place_finds_no_failure():
    assert_sweep_passes("reassign", 20, 20.0)
