"""The groups workload: the whole-cluster simulation with a consumer group (simulations/groups_sim.py).

Its checkers are shown to fail on hand-fed violations; each planted coordinator bug fails a group checker at
a named seed (the first failing seed of `flotilla simulate --workload groups --seeds 300 --duration 30
--bugs <BUG>` under the default fault mix), replays to the same trace, and passes with the bug off."""

from __future__ import annotations

import pytest

from simulations.faults import DEFAULT_FAULTS
from simulations.group_checkers import GroupCheckers
from simulations.group_clients import decode_assignment, encode_assignment, range_assignment
from tests.simulations.workloads import assert_teeth, failed_checkers, workload_config
from simulations.run import RunConfig, run_one, sweep

TEETH_DURATION_S = 30.0
# commit_before_hw answers group writes before they are committed: a failover loses an acknowledged write
# of the coordinator (here its assignment: two members hold one partition in one generation).
COMMIT_BEFORE_HW_SEED = 56  # (34 until index files and a new leader's epoch checkpoint were written lazily)
# stale_generation_commit accepts a commit of an older generation: a member paused past its session resumes
# and moves the group's offset back below what the partition's new owner had committed.
STALE_GENERATION_SEED = 11  # of `--duration 60` (73 until fetch sessions, batched ISR changes and coordinator write timeouts)
STALE_GENERATION_DURATION_S = 60.0
GROUP_CHECKERS = {"generation_exclusive", "commit_kept", "group_delivery"}


def _config(seed: int, duration_s: float = 20.0, faults: str = "none", bugs: frozenset[str] = frozenset()) -> RunConfig:
    return workload_config("groups", seed, duration_s, faults, bugs)


def test_a_fault_free_run_shares_the_partitions_in_one_generation_and_passes_every_checker():
    result = run_one(_config(seed=1))
    assert result.ok, failed_checkers(result)
    assert result.stats["assignments"] == 3  # three members, one generation
    assert result.stats["group_records"] >= result.stats["acked_all"]
    assert result.stats["commits_acked"] > 0


def test_generation_exclusive_fails_when_two_members_of_a_generation_share_a_partition():
    checkers = GroupCheckers()
    checkers.observe_assignment("g", 3, "a", [0, 1])
    checkers.observe_assignment("g", 4, "b", [0])  # another generation: fine
    assert "generation_exclusive" not in checkers.violations
    checkers.observe_assignment("g", 3, "b", [1, 2])
    assert "partition 1" in checkers.violations["generation_exclusive"]


def test_commit_kept_fails_on_a_commit_acknowledged_below_an_earlier_acknowledgement():
    checkers = GroupCheckers()
    checkers.observe_commit_acked("g", 0, 100, checkers.commit_floor("g", 0), 1, "a")
    floor = checkers.commit_floor("g", 0)
    checkers.observe_commit_acked("g", 0, 120, floor, 2, "b")
    assert "commit_kept" not in checkers.violations
    checkers.observe_commit_acked("g", 0, 110, 120, 1, "a")
    assert "acknowledged after 120" in checkers.violations["commit_kept"]
    lost = GroupCheckers()
    lost.observe_commit_acked("g", 1, 50, -1, 1, "a")
    lost.check_final_commits("g", {1: 40})
    assert "50 was acknowledged" in lost.violations["commit_kept"]


def test_group_delivery_fails_when_an_acknowledged_record_was_never_consumed():
    checkers = GroupCheckers()
    checkers.observe_ack(("sim", 0), 0, b"v0")
    checkers.observe_ack(("sim", 0), 1, b"v1")
    checkers.observe_group_record(("sim", 0), 0, b"v0", 5)
    checkers.check_group_delivery()
    assert "first at offset 1" in checkers.violations["group_delivery"]


def test_the_members_range_assignment_and_its_bytes():  # Kafka's RangeAssignor, ConsumerProtocolAssignment
    assert range_assignment(["b", "a", "c"], 4) == {"a": [0, 1], "b": [2], "c": [3]}
    assert decode_assignment(encode_assignment("sim", [2, 0])) == [0, 2]


def _assert_teeth(bug: str, seed: int, duration_s: float = TEETH_DURATION_S) -> None:
    assert_teeth("groups", bug, seed, duration_s, GROUP_CHECKERS)


@pytest.mark.slow
def test_commit_before_hw_fails_a_group_checker_at_its_known_seed():
    _assert_teeth("commit_before_hw", COMMIT_BEFORE_HW_SEED)


@pytest.mark.slow
def test_stale_generation_commit_fails_a_group_checker_at_its_known_seed():
    _assert_teeth("stale_generation_commit", STALE_GENERATION_SEED, STALE_GENERATION_DURATION_S)


@pytest.mark.slow
def test_groups_sweep_with_every_fix_in_place_finds_no_failure():
    summary = sweep(_config(1, 20.0, DEFAULT_FAULTS), list(range(1, 31)), jobs=2)
    assert not summary.failed_seeds, summary.format()
