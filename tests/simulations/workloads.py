"""Shared by the tests of the cluster-based workloads (groups, transactions, reassign): a run's config, its
failed checkers, and the check that a planted bug has teeth at its pinned seed."""

from __future__ import annotations

from collections.abc import Collection

from simulations.faults import DEFAULT_FAULTS
from simulations.run import RunConfig, RunResult, run_one


def workload_config(workload: str, seed: int, duration_s: float = 20.0, faults: str = "none",
                    bugs: frozenset[str] = frozenset()) -> RunConfig:
    return RunConfig(seed=seed, nodes=3, duration_s=duration_s, faults=faults, workload=workload, bugs_live=bugs)


def failed_checkers(result: RunResult) -> dict[str, str]:
    return {verdict.name: verdict.detail for verdict in result.checkers if not verdict.ok}


def assert_teeth(workload: str, bug: str, seed: int, duration_s: float, checkers: Collection[str]) -> None:
    """Under the default faults the bug fails one of `checkers` (not a node error) at `seed`, the run replays
    to the same trace, and the same seed passes with the bug off."""
    buggy = workload_config(workload, seed, duration_s, DEFAULT_FAULTS, frozenset({bug}))
    first = run_one(buggy)
    failed = failed_checkers(first)
    assert set(failed) & set(checkers) and "no_node_error" not in failed, failed
    assert run_one(buggy).trace_sha256 == first.trace_sha256
    fixed = run_one(workload_config(workload, seed, duration_s, DEFAULT_FAULTS))
    assert fixed.ok, failed_checkers(fixed)


def assert_sweep_passes(workload: str, seeds: int, duration_s: float) -> None:
    """Seeds 1..`seeds` of `workload` under the default faults, every fix on: each run passes every checker."""
    from simulations.run import sweep

    summary = sweep(workload_config(workload, 1, duration_s, DEFAULT_FAULTS), list(range(1, seeds + 1)), jobs=2)
    assert summary.runs == seeds and not summary.failed_seeds, summary.format()
