"""Running simulations: one seed, or a sweep of seeds, with a verdict per checker and a replay command.

Theory of operation. A workload is a module registered in `WORKLOADS` by name; it exposes
`run(config: RunConfig) -> RunResult`, building its own simulated system from `config.seed` (a fresh
EventLoop, network, disks and nodes) so that one seed is one run. Checkers are the workload's: each yields a
`CheckerVerdict`, and a run is ok when every checker passed. New workloads (the Kafka cluster: producers
with acks, consumers; checkers such as no-acked-write-lost, replica logs identical up to HW, HW monotonic)
plug in by adding a module name here; the CLI, the sweep, the JSON output and the replay command stay.

This module is the simulator's edge: it reads the wall clock (to report wall seconds, never to decide
anything) and writes trace files. Nothing measured here feeds back into a run.
"""

from __future__ import annotations

import concurrent.futures
import gc
import importlib
import json
import multiprocessing
import os
import shlex
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, TextIO

from simulations.faults import DEFAULT_FAULTS, format_faults, parse_faults

# name -> module exposing run(RunConfig) -> RunResult and, optionally, DESCRIPTION.
WORKLOADS: dict[str, str] = {
    "raft": "simulations.raft_sim",
    "cluster": "simulations.cluster_sim",
    "groups": "simulations.groups_sim",
    "consumer-groups": "simulations.consumer_groups_sim",
    "group-migration": "simulations.group_migration_sim",
    "transactions": "simulations.txn_sim",
    "reassign": "simulations.reassign_sim",
    "quotas": "simulations.quota_sim",
    "sasl": "simulations.sasl_sim",
    "acls": "simulations.acl_sim",
    "fuzz": "simulations.fuzz_sim",
    "follower-fetch": "simulations.follower_fetch_sim",
    "telemetry": "simulations.telemetry_sim",
    "features": "simulations.features_sim",
    "compaction": "simulations.compaction_sim",
    "txn-compaction": "simulations.txn_compaction_sim",
    "restarts": "simulations.restarts_sim",
    "idempotence": "simulations.idempotence_sim",
}
NODES_MIN = 1
NODES_MAX = 9
DURATION_S_MAX = 3_600
WALL_SECONDS_MAX_DEFAULT = 600  # a safety net against a core that never returns from one step
# During a run: objects allocated between two collections of the youngest generation (Python's default is
# 700). A run allocates millions of short-lived objects and few reference cycles.
GC_YOUNG_THRESHOLD_OBJECTS = 50_000


class WallTimeExceeded(BaseException):  # not an Exception: the node wrapper must not catch it
    """A run took longer than its wall-clock budget (a step that never ends, e.g. an unbounded loop)."""


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run. Two equal configs give two identical traces."""

    seed: int
    nodes: int = 3
    duration_s: float = 60.0  # simulated seconds of the fault phase (liveness checking follows)
    faults: str = DEFAULT_FAULTS
    workload: str = "raft"
    bugs_live: frozenset[str] = frozenset()  # fixes switched off (workload-specific names, e.g. "A")
    trace_path: str | None = None
    html_path: str | None = None  # draw the run (simulations/picture.py); cluster-based workloads only

    def fault_rates(self) -> dict[str, float]:
        return parse_faults(self.faults)

    def validate(self) -> None:
        """Raises ValueError naming the bad setting."""
        if self.workload not in WORKLOADS:
            raise ValueError(f"workload {self.workload!r}: expected one of {', '.join(sorted(WORKLOADS))}")
        if not NODES_MIN <= self.nodes <= NODES_MAX:
            raise ValueError(f"nodes={self.nodes}: expected {NODES_MIN}..{NODES_MAX}")
        if not 0 < self.duration_s <= DURATION_S_MAX:
            raise ValueError(f"duration={self.duration_s}: expected (0, {DURATION_S_MAX}] simulated seconds")
        parse_faults(self.faults)


@dataclass(frozen=True)
class CheckerVerdict:
    name: str
    ok: bool
    detail: str = ""  # for a failure: the first violation, with the values that show it


@dataclass
class RunResult:
    seed: int
    trace_sha256: str
    checkers: list[CheckerVerdict]
    simulated_seconds: float
    wall_seconds: float = 0.0
    stats: dict[str, int | float | str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(verdict.ok for verdict in self.checkers)

    def to_json(self) -> dict[str, object]:
        return {
            "seed": self.seed,
            "trace_sha256": self.trace_sha256,
            "ok": self.ok,
            "checkers": {verdict.name: "pass" if verdict.ok else "fail" for verdict in self.checkers},
            "simulated_seconds": round(self.simulated_seconds, 3),
            "wall_seconds": round(self.wall_seconds, 3),
        }


def replay_command(config: RunConfig) -> str:
    """The exact command line that replays `config` (without trace output)."""
    arguments = [
        "flotilla", "simulate", "--seed", str(config.seed), "--nodes", str(config.nodes),
        "--duration", f"{config.duration_s:g}", "--faults", format_faults(config.fault_rates()),
        "--workload", config.workload,
    ]
    if config.bugs_live:
        arguments += ["--bugs", ",".join(sorted(config.bugs_live))]
    return shlex.join(arguments)


def run_one(config: RunConfig, wall_seconds_max: float = WALL_SECONDS_MAX_DEFAULT) -> RunResult:
    """Run `config` once; raises ValueError for a bad config.

    A run that exceeds `wall_seconds_max` of real time is stopped and reported as failed by the
    `wall_time_bound` checker. That verdict depends on the machine (the only one that does): it exists
    because a core stuck in one step would otherwise hang a sweep and eat memory without bound."""
    config.validate()
    module = importlib.import_module(WORKLOADS[config.workload])
    started = time.perf_counter()
    try:
        with _wall_clock_limit(wall_seconds_max), _collector_for_a_run():
            result: RunResult = module.run(config)
    except WallTimeExceeded:
        result = RunResult(
            seed=config.seed, trace_sha256="-",
            checkers=[CheckerVerdict("wall_time_bound", False, f"run exceeded {wall_seconds_max:g} s of wall time")],
            simulated_seconds=0.0,
        )
    result.wall_seconds = time.perf_counter() - started
    return result


class _collector_for_a_run:
    """The cyclic garbage collector tuned for a run: what exists before it (modules, codecs) is frozen out of
    full collections, and the young generation is collected every `GC_YOUNG_THRESHOLD_OBJECTS` allocations.
    The cluster workload's seed 1 (--faults none --duration 30) spent 25-40 ms of its 1.8-2.4 s in 22 young, 2
    middle and 1 full collection with the defaults (the full one walks every object the imports made), and about
    4 ms in one young collection so (gc.callbacks). The collector only frees memory, so a run's trace is the same
    either way."""

    def __enter__(self) -> None:
        self.thresholds = gc.get_threshold()
        gc.freeze()
        gc.set_threshold(GC_YOUNG_THRESHOLD_OBJECTS, *self.thresholds[1:])

    def __exit__(self, *exc_info: object) -> None:
        gc.set_threshold(*self.thresholds)
        gc.unfreeze()


class _wall_clock_limit:
    """SIGALRM-based deadline for the main thread (a no-op elsewhere or when `seconds` <= 0)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.armed = False

    def __enter__(self) -> None:
        if self.seconds > 0 and threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGALRM"):
            self.previous = signal.signal(signal.SIGALRM, self._expired)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
            self.armed = True

    def __exit__(self, *exc_info: object) -> None:
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)

    @staticmethod
    def _expired(signum: int, frame: object) -> None:
        raise WallTimeExceeded()


def format_result(result: RunResult, config: RunConfig) -> str:
    """The human-readable report of one run; a failure ends with the replay command."""
    lines = [
        f"seed {result.seed}: {'ok' if result.ok else 'FAILED'}  trace {result.trace_sha256}",
        f"  simulated {result.simulated_seconds:.1f} s in {result.wall_seconds:.2f} s wall"
        f" ({result.simulated_seconds / max(result.wall_seconds, 1e-9):.0f}x)",
    ]
    for verdict in result.checkers:
        lines.append(f"  {verdict.name}: {'pass' if verdict.ok else 'FAIL'}" + (f"  {verdict.detail}" if verdict.detail else ""))
    if result.stats:
        lines.append("  stats: " + " ".join(f"{key}={value}" for key, value in sorted(result.stats.items())))
    if not result.ok:
        lines.append(f"  replay: {replay_command(config)}")
    return "\n".join(lines)


@dataclass
class SweepSummary:
    runs: int = 0
    failed_seeds: list[int] = field(default_factory=list)
    simulated_seconds: float = 0.0
    wall_seconds: float = 0.0  # the runs' own wall seconds, summed (per worker, as if one after another)
    elapsed_seconds: float = 0.0  # the sweep's wall seconds (less than wall_seconds with several jobs)
    jobs: int = 1

    def format(self) -> str:
        seeds_per_minute = 60.0 * self.runs / max(self.elapsed_seconds, 1e-9)
        speed = self.simulated_seconds / max(self.wall_seconds, 1e-9)
        failed = ", ".join(str(seed) for seed in self.failed_seeds) or "none"
        jobs = f" with {self.jobs} jobs" if self.jobs > 1 else ""
        return (
            f"{self.runs} runs, {len(self.failed_seeds)} failed (seeds: {failed}); "
            f"{seeds_per_minute:.1f} seeds/min{jobs}, {speed:.0f} simulated s per wall s of a run"
        )


PARENT_CHECK_S = 1.0


def _exit_with_parent(parent_pid: int) -> None:
    """A sweep worker's initializer: the worker ends itself once the sweep's process is gone. A sweep killed
    outright (SIGTERM, SIGKILL) runs no clean-up, and its workers would otherwise go on with the seeds they had
    queued, then wait for more forever."""
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_CHECK_S)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def worker_pool(jobs: int) -> concurrent.futures.ProcessPoolExecutor:
    """`jobs` worker processes for `run_one`, started fresh (spawn: nothing of this process's state, threads
    or locks comes along) and each ending itself once this process is gone. A run is the same in any process:
    its seed alone decides its trace."""
    return concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                                                  initializer=_exit_with_parent, initargs=(os.getpid(),))


def sweep(
    base: RunConfig,
    seeds: list[int],
    on_result: Callable[[RunResult, RunConfig], None] | None = None,
    stop_at_first_failure: bool = False,
    wall_seconds_max: float = WALL_SECONDS_MAX_DEFAULT,
    jobs: int = 1,
    pool: concurrent.futures.Executor | None = None,
) -> SweepSummary:
    """Run `base` once per seed, calling `on_result` after each run, in seed order. With `jobs` > 1 the runs
    go to that many worker processes (each seed is a fresh, deterministic run: the same trace hash in any
    process), or to `pool`'s workers when one is given (left open: a test session keeps its workers from one
    sweep to the next); results are still taken, reported and summed in seed order, and a stop at the first
    failure cancels the seeds not started yet."""
    if jobs < 1:
        raise ValueError(f"jobs {jobs}: expected at least 1")
    configs = [
        RunConfig(seed=seed, nodes=base.nodes, duration_s=base.duration_s, faults=base.faults,
                  workload=base.workload, bugs_live=base.bugs_live, trace_path=None)
        for seed in seeds
    ]
    summary = SweepSummary(jobs=jobs)
    started = time.perf_counter()
    owned = None
    futures: list[concurrent.futures.Future] = []
    if pool is None and jobs > 1 and len(configs) > 1:
        pool = owned = worker_pool(min(jobs, len(configs)))
    if pool is not None:
        futures = [pool.submit(run_one, config, wall_seconds_max) for config in configs]
        results: Iterator[RunResult] = (future.result() for future in futures)
    else:
        results = (run_one(config, wall_seconds_max) for config in configs)
    try:
        for config, result in zip(configs, results):
            summary.runs += 1
            summary.simulated_seconds += result.simulated_seconds
            summary.wall_seconds += result.wall_seconds
            if not result.ok:
                summary.failed_seeds.append(config.seed)
            if on_result is not None:
                on_result(result, config)
            if stop_at_first_failure and not result.ok:
                break
    finally:
        for future in futures:
            future.cancel()  # the seeds not started yet, after a stop at the first failure
        if owned is not None:
            owned.shutdown(wait=True, cancel_futures=True)
    summary.elapsed_seconds = time.perf_counter() - started
    return summary


def print_json(result: RunResult, out: TextIO) -> None:
    out.write(json.dumps(result.to_json(), sort_keys=True) + "\n")
    out.flush()
