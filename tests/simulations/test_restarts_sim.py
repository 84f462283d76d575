"""The restarts workload (simulations/restarts_sim.py): the cluster workload while the whole cluster is stopped
cleanly, node after node, and started again.

The planted bug (the controller not reading a registration's previous_broker_epoch: the last node to stop waits
out its old session) fails clean_restart_registers_at_once at a named seed (the first failing seed of
`flotilla simulate --workload restarts --seeds 10 --duration 60 --bugs clean_shutdown_epoch_ignored`), replays to
the same trace, and passes with the bug off."""

from __future__ import annotations

import re

import pytest

from simulations.faults import DEFAULT_FAULTS
from simulations.run import RunConfig
from tests.simulations.workloads import assert_sweep_passes, assert_teeth, failed_checkers, run_all, workload_config

CLEAN_SHUTDOWN_EPOCH_IGNORED_SEED = 1


def test_fault_free_whole_cluster_restarts_register_at_once_and_lose_nothing():
    fixed, buggy = run_all(workload_config("restarts", 1, 60.0),
                           workload_config("restarts", 1, 60.0, bugs=frozenset({"clean_shutdown_epoch_ignored"})))
    assert fixed.ok, failed_checkers(fixed)
    stats = fixed.stats
    # every stop of a fault-free run is judged, and none lost a record (acked_not_lost, reads_committed passed)
    assert stats["cluster_stops"] >= 3 and stats["restarts_judged"] == stats["cluster_stops"]
    assert stats["failed_all"] == 0 and stats["consumed"] == stats["acked_all"] + stats["acked_one"]
    # Without the clean shutdown epoch, the last node to stop waits out the 3 s session of its old process.
    failed = failed_checkers(buggy)
    assert set(failed) == {"clean_restart_registers_at_once"}, failed
    assert "was refused DUPLICATE_BROKER_REGISTRATION" in failed["clean_restart_registers_at_once"]
    assert buggy.stats["running_after_ms_max"] > stats["running_after_ms_max"] + 1_000


def test_a_quiet_stop_starts_no_fault_until_the_cluster_runs_again(tmp_path):
    trace_path = tmp_path / "trace.txt"
    config = RunConfig(seed=2, nodes=3, duration_s=60.0, faults=DEFAULT_FAULTS, workload="restarts",
                       trace_path=str(trace_path))
    (result,) = run_all(config)
    assert result.ok, failed_checkers(result)
    lines = trace_path.read_text().splitlines()
    quiet_stops = [i for i, line in enumerate(lines) if re.fullmatch(r"\d+ fault\.cluster_stop [\d,]+ 1", line)]
    assert quiet_stops, "no quiet stop in this seed"
    schedule_kinds = re.compile(r"\d+ fault\.(crash|power_loss|pause|partition|one_way|isolate|delay|drop|reset"
                                r"|crash_in_step|power_loss_in_step|power_loss_all|isolate_leader"
                                r"|isolate_partition_leader|controlled_shutdown)\b")
    for start in quiet_stops:
        running = next(i for i in range(start, len(lines)) if " cluster.running " in lines[i])
        assert " fault.cluster_start " in "".join(lines[start:running])
        assert not [line for line in lines[start:running] if schedule_kinds.match(line)]
    assert result.stats["restarts_judged"] >= 1


@pytest.mark.slow
def test_clean_shutdown_epoch_ignored_fails_clean_restart_registers_at_once_at_its_known_seed():
    assert_teeth("restarts", "clean_shutdown_epoch_ignored", CLEAN_SHUTDOWN_EPOCH_IGNORED_SEED, 60.0,
                 {"clean_restart_registers_at_once"})


@pytest.mark.slow
def test_restarts_sweep_with_every_fix_in_place_finds_no_failure():
    assert_sweep_passes("restarts", 12, 60.0)
