"""The telemetry workload: the whole-cluster simulation with two clients pushing their metrics (KIP-714) while an
admin client changes their subscription (simulations/telemetry_sim.py). Pushes are accepted, every checker
passes under the default faults, and a broker that keeps evaluating a client against the subscriptions it first
saw (the planted bug) accepts a push with a stale subscription id, which telemetry_subscription_current
catches at seed 1 (19 of seeds 1-20 of `flotilla simulate --workload telemetry --seeds 20 --duration 30 --bugs
telemetry_stale_subscription` fail)."""

from __future__ import annotations

import pytest

from simulations.run import run_one
from tests.simulations.workloads import assert_sweep_passes, assert_teeth, failed_checkers, workload_config

STALE_SUBSCRIPTION_SEED = 1


def test_a_fault_free_run_pushes_through_every_subscription_change():
    result = run_one(workload_config("telemetry", 1, 20.0))
    assert result.ok, failed_checkers(result)
    # tel-a pushes from the first step, tel-b from the last; each change costs a refusal and a new Get
    assert result.stats["pushes_accepted"] >= 15 and result.stats["pushes_refused"] >= 1, result.stats


def test_a_stale_subscription_is_caught_at_its_known_seed():
    assert_teeth("telemetry", "telemetry_stale_subscription", STALE_SUBSCRIPTION_SEED, 30.0,
                 {"telemetry_subscription_current"})


@pytest.mark.slow
def test_telemetry_sweep_with_every_fix_in_place_finds_no_failure():
    assert_sweep_passes("telemetry", 10, 20.0)
