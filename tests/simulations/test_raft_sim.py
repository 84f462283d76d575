"""The Raft-quorum simulation: checkers pass on a healthy quorum, and each pysyncobj fix is proven by a seed
that loses an acknowledged write with the fix switched off (research/pysyncobj-findings.md)."""

import functools

import pytest

from simulations.raft_sim import Checkers
from simulations.run import RunConfig, run_one, sweep
from tests.simulations.workloads import run_all, session_pool

SWEEP_DURATION_S = 10.0
SAFETY_CHECKERS = ("apply_in_order", "committed_identical", "acked_not_lost", "one_leader_per_term", "liveness")
FIX_A_FIRST_FAILING_SEED = 9  # first seed of 1.. that fails with fix A off (default faults, 10 simulated s)


def _failed(result):
    return sorted(verdict.name for verdict in result.checkers if not verdict.ok)


def test_quorum_without_faults_acknowledges_commands_and_passes_every_checker():
    result = run_one(RunConfig(seed=1, duration_s=5.0, faults="none"))
    assert result.ok, [(v.name, v.detail) for v in result.checkers if not v.ok]
    assert result.stats["acks"] > 100, result.stats


def test_checker_flags_a_command_acknowledged_at_an_index_that_holds_another():
    checkers = Checkers()
    checkers.observe_entry(1, 10, 500)
    checkers.observe_ack(501, 10)
    checkers.observe_entry(2, 10, 501)
    assert "acked_not_lost" in checkers.violations and "committed_identical" in checkers.violations


def test_checker_flags_two_leaders_in_one_term_and_a_node_missing_an_acked_entry():
    checkers = Checkers()
    checkers.observe_leader(1, 4)
    checkers.observe_leader(2, 4)
    checkers.observe_ack(7, 3)
    checkers.final_check({1: {3: 7}, 2: {}})
    assert set(checkers.violations) == {"one_leader_per_term", "acked_not_lost"}


@pytest.mark.slow
def test_fix_a_off_loses_an_acknowledged_write_at_its_seed_and_the_replay_fails_identically():
    config = RunConfig(seed=FIX_A_FIRST_FAILING_SEED, duration_s=SWEEP_DURATION_S, bugs_live=frozenset({"A"}))
    first, replay, fixed = run_all(config, config, RunConfig(seed=FIX_A_FIRST_FAILING_SEED,
                                                             duration_s=SWEEP_DURATION_S))
    assert "acked_not_lost" in _failed(first), _failed(first)
    assert replay.trace_sha256 == first.trace_sha256 and _failed(replay) == _failed(first)
    assert fixed.ok, [(v.name, v.detail) for v in fixed.checkers if not v.ok]


@pytest.mark.slow
def test_sweep_with_fix_a_off_first_fails_at_the_expected_seed():
    summary = sweep(
        RunConfig(seed=0, duration_s=SWEEP_DURATION_S, bugs_live=frozenset({"A"})),
        list(range(1, 301)), stop_at_first_failure=True, pool=session_pool(),
    )
    assert summary.failed_seeds == [FIX_A_FIRST_FAILING_SEED]


@functools.lru_cache(maxsize=1)
def _all_fixes_on_sweep(seed_count=50):
    results = []
    sweep(RunConfig(seed=0, duration_s=SWEEP_DURATION_S), list(range(1, seed_count + 1)),
          on_result=lambda result, config: results.append(result), pool=session_pool())
    return results


@pytest.mark.slow
def test_sweep_with_every_fix_on_violates_no_safety_or_liveness_checker():
    violations = [
        (result.seed, verdict.name, verdict.detail)
        for result in _all_fixes_on_sweep()
        for verdict in result.checkers
        if verdict.name in SAFETY_CHECKERS and not verdict.ok
    ]
    assert violations == []


@pytest.mark.slow
def test_sweep_with_every_fix_on_has_no_node_error():
    # Seed 18 used to raise IndexError in pysyncobj __getCurrentLogIndex on an emptied journal (fixed in
    # raftlog: a failed dump load re-raises; tests/raftlog/test_simulator_regressions.py).
    errors = [(result.seed, v.detail) for result in _all_fixes_on_sweep() for v in result.checkers
              if v.name == "no_node_error" and not v.ok]
    assert errors == []
