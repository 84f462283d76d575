"""Each pysyncobj fix that the simulator can prove is proven by a seed (research/pysyncobj-findings.md).

With the fix switched off, a sweep of seeds 1..300 (10 simulated seconds each) fails first at the seed
named here, on the checker named here; the run replays to the same trace hash; with every fix on, the same
seed passes. Found with, e.g.:

    flotilla simulate --seeds 300 --duration 10 --bugs B                                  # -> seed 67
    flotilla simulate --seeds 300 --duration 10 --faults snapshot_crashes --bugs D         # -> seed 13

A  the deposed leader acknowledges writes it never replicated (default faults).
B  nextIndex livelock: a deposed leader's conflicting tail, the new leader more than one append batch
   ahead of it, and no compaction behind the divergence; the stale follower never catches up, so the
   post-heal marker never reaches it (default faults; the seed's swarm draws a 60 s compaction interval).
D  a follower crashes after its snapshot dump is durable but before the journal compaction; on restart
   the stock code clears the journal, forgetting entries it had acknowledged, and a later leader
   overwrites an acknowledged command (the `snapshot_crashes` fault profile).
H  a leader resends its snapshot to a follower that has applied past it since; the stock follower installs
   it, its state machine goes back to the snapshot's index and replays what follows (default faults).
"""

from __future__ import annotations

import random

import pytest

from partitions.storage import write_file_atomically
from simulations.disk import SimDisk, SimulatedCrash
from simulations.faults import DEFAULT_FAULTS, FAULT_PROFILES, FaultSchedule, parse_faults
from simulations.loop import EventLoop, Trace
from simulations.raft_sim import SnapshotCrashPoint
from simulations.run import RunConfig, run_one, sweep
from tests.simulations.workloads import run_all, session_pool

DURATION_S = 10.0
SEEDS_PER_SWEEP_TEST = 20
WALL_SECONDS_MAX = 120  # a run takes 1-3 s; a stuck step fails the run instead of hanging the test


# bug -> (first failing seed of 1..300 with that fix off, --faults, checkers that must fail)
FIRST_FAILING_SEED = {
    "A": (9, DEFAULT_FAULTS, {"acked_not_lost"}),
    "B": (67, DEFAULT_FAULTS, {"liveness"}),
    "D": (13, "snapshot_crashes", {"acked_not_lost"}),
    "H": (103, DEFAULT_FAULTS, {"apply_in_order"}),
}


def _config(bug: str, seed: int | None = None, fix_off: bool = True) -> RunConfig:
    first_seed, faults, _ = FIRST_FAILING_SEED[bug]
    return RunConfig(seed=first_seed if seed is None else seed, duration_s=DURATION_S, faults=faults,
                     bugs_live=frozenset({bug}) if fix_off else frozenset())


def _failed(result) -> set[str]:
    return {verdict.name for verdict in result.checkers if not verdict.ok}


@pytest.mark.slow
@pytest.mark.parametrize("bug", sorted(FIRST_FAILING_SEED))
def test_fix_off_fails_at_its_seed_and_the_replay_fails_identically(bug: str) -> None:
    _, _, checkers = FIRST_FAILING_SEED[bug]
    first, replay = run_all(_config(bug), _config(bug), wall_seconds_max=WALL_SECONDS_MAX)
    assert checkers <= _failed(first), [(v.name, v.detail) for v in first.checkers if not v.ok]
    assert replay.trace_sha256 == first.trace_sha256 and _failed(replay) == _failed(first)


@pytest.mark.slow
@pytest.mark.parametrize("bug", sorted(FIRST_FAILING_SEED))
def test_same_seed_passes_with_every_fix_on(bug: str) -> None:
    result = run_one(_config(bug, fix_off=False), WALL_SECONDS_MAX)
    assert result.ok, [(v.name, v.detail) for v in result.checkers if not v.ok]


def _earlier_seed_ranges() -> list[tuple[str, int, int]]:
    """(bug, first, last) chunks of the seeds before each first failing seed, at most
    SEEDS_PER_SWEEP_TEST runs per chunk so each test stays well under a minute."""
    chunks = []
    for bug, (first_failing, _, _) in sorted(FIRST_FAILING_SEED.items()):
        for start in range(1, first_failing, SEEDS_PER_SWEEP_TEST):
            chunks.append((bug, start, min(start + SEEDS_PER_SWEEP_TEST - 1, first_failing - 1)))
    return chunks


@pytest.mark.slow
@pytest.mark.parametrize(("bug", "first", "last"), _earlier_seed_ranges())
def test_no_earlier_seed_fails_with_the_fix_off(bug: str, first: int, last: int) -> None:
    summary = sweep(_config(bug), list(range(first, last + 1)), wall_seconds_max=WALL_SECONDS_MAX,
                    pool=session_pool())
    assert summary.failed_seeds == [], f"fix {bug} off: seeds {summary.failed_seeds} fail before the recorded seed"


# -- the fault and the profile that reach bug D ----------------------------------------------------------------

def test_snapshot_crash_point_fires_at_the_nth_write_from_the_start_of_the_next_snapshot() -> None:
    storage = SnapshotCrashPoint(SimDisk(random.Random(1)))
    storage.makedirs("raft")
    storage.arm(7)  # 6 writes of the snapshot (delete, truncate, append, fsync, rename, fsync_dir), then...
    write_file_atomically(storage, "raft/raft.journal", b"journal before")  # not a snapshot: does not count
    write_file_atomically(storage, "raft/raft.snapshot", b"dump")
    with pytest.raises(SimulatedCrash):
        write_file_atomically(storage, "raft/raft.journal", b"compacted")  # ...the journal rewrite's first
    assert storage.disk.stats.crashes == 1
    assert storage.exists("raft/raft.snapshot")  # the window of bug D: dump in place, journal not compacted


def test_snapshot_crashes_profile_parses_by_name_and_needs_a_target_that_supports_it() -> None:
    rates = parse_faults("snapshot_crashes")
    assert rates == parse_faults(FAULT_PROFILES["snapshot_crashes"]) and rates["crash_in_snapshot"] > 0

    class TargetWithoutSnapshots:
        node_ids = [1, 2, 3]

    with pytest.raises(ValueError, match="crash_in_snapshot"):
        FaultSchedule(EventLoop(1, Trace(None)), TargetWithoutSnapshots(), rates)
