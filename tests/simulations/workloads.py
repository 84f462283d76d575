"""Shared by the tests of the cluster-based workloads (groups, transactions, reassign): a run's config, its
failed checkers, and the check that a planted bug has teeth at its pinned seed."""

from __future__ import annotations

import atexit
import concurrent.futures
from collections.abc import Collection

from simulations.faults import DEFAULT_FAULTS
from simulations.run import WALL_SECONDS_MAX_DEFAULT, RunConfig, RunResult, run_one, worker_pool

# Runs that do not depend on one another (a planted bug's run, its replay and the run without it) go to
# worker processes kept for the whole test session, so that they take the machine's cores together and the
# workers' imports are paid once. Three workers on two cores: three runs end in about the time of one and a
# half.
RUNS_AT_ONCE = 3
_pool: concurrent.futures.ProcessPoolExecutor | None = None


def session_pool() -> concurrent.futures.ProcessPoolExecutor:
    """The test session's simulation workers, started at first use."""
    global _pool
    if _pool is None:
        _pool = worker_pool(RUNS_AT_ONCE)
        atexit.register(_pool.shutdown, cancel_futures=True)
    return _pool


def run_all(*configs: RunConfig, wall_seconds_max: float = WALL_SECONDS_MAX_DEFAULT) -> list[RunResult]:
    """`run_one` of each config, at once in the session's workers; the results in the configs' order."""
    return list(session_pool().map(run_one, configs, [wall_seconds_max] * len(configs)))


def workload_config(workload: str, seed: int, duration_s: float = 20.0, faults: str = "none",
                    bugs: frozenset[str] = frozenset()) -> RunConfig:
    return RunConfig(seed=seed, nodes=3, duration_s=duration_s, faults=faults, workload=workload, bugs_live=bugs)


def failed_checkers(result: RunResult) -> dict[str, str]:
    return {verdict.name: verdict.detail for verdict in result.checkers if not verdict.ok}


def assert_teeth(workload: str, bug: str, seed: int, duration_s: float, checkers: Collection[str]) -> RunResult:
    """Under the default faults the bug fails one of `checkers` (not a node error) at `seed`, the run replays
    to the same trace, and the same seed passes with the bug off. Returns the bug's run."""
    buggy = workload_config(workload, seed, duration_s, DEFAULT_FAULTS, frozenset({bug}))
    first, replay, fixed = run_all(buggy, buggy, workload_config(workload, seed, duration_s, DEFAULT_FAULTS))
    failed = failed_checkers(first)
    assert set(failed) & set(checkers) and "no_node_error" not in failed, failed
    assert replay.trace_sha256 == first.trace_sha256
    assert fixed.ok, failed_checkers(fixed)
    return first


def assert_sweep_passes(workload: str, seeds: int, duration_s: float) -> None:
    """Seeds 1..`seeds` of `workload` under the default faults, every fix on: each run passes every checker."""
    from simulations.run import sweep

    summary = sweep(workload_config(workload, 1, duration_s, DEFAULT_FAULTS), list(range(1, seeds + 1)),
                    pool=session_pool())
    assert summary.runs == seeds and not summary.failed_seeds, summary.format()
