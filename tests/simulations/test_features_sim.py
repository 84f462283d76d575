"""The features workload (simulations/features_sim.py): the cluster workload while an administrator changes
transaction.version with UpdateFeatures, then leaves it at a level other than the bootstrap one while nodes go on
crashing and registering again.

Each planted bug (the controller writing its bootstrap level with every registration; the EndTxn and
TxnOffsetCommit version gates never following the image) fails its checker at a named seed (the first failing
seed of `flotilla simulate --workload features --seeds 10 --duration 30 --bugs ...`), replays to the same
trace, and passes with the bug off."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from net.protocol.codec import ApiKey
from simulations.features_sim import FeatureCheckers
from simulations.faults import DEFAULT_FAULTS
from simulations.run import run_one
from tests.simulations.workloads import assert_sweep_passes, assert_teeth, failed_checkers, workload_config

BOOTSTRAP_EVERY_REGISTRATION_SEED = 1
GATES_FIXED_SEED = 1


def api_versions(level: int | None, end_txn: int, txn_offset_commit: int) -> SimpleNamespace:
    finalized = [] if level is None else [SimpleNamespace(name="transaction.version", max_version_level=level)]
    return SimpleNamespace(finalized_features=finalized, api_keys=[
        SimpleNamespace(api_key=ApiKey.END_TXN, max_version=end_txn),
        SimpleNamespace(api_key=ApiKey.TXN_OFFSET_COMMIT, max_version=txn_offset_commit)])


def test_feature_gates_follow_level_catches_a_gate_its_level_does_not_give():
    checkers = FeatureCheckers()
    for answer in (api_versions(2, 5, 5), api_versions(1, 4, 4), api_versions(None, 4, 4)):
        checkers.observe_api_versions(1, answer)
    assert not checkers.violations and checkers.answers == 3
    checkers.observe_api_versions(2, api_versions(1, 5, 4))
    assert "broker 2 finalizes transaction.version 1" in checkers.violations["feature_gates_follow_level"]


def test_a_fault_free_run_changes_the_level_and_passes_every_checker():
    result = run_one(workload_config("features", 1, 30.0))
    assert result.ok, failed_checkers(result)
    assert {"feature_gates_follow_level", "feature_level_as_set"} <= {v.name for v in result.checkers}
    stats = result.stats
    assert stats["feature_flips"] >= 5 and stats["feature_level"] == 1 and stats["api_versions_answers"] > 20


@pytest.mark.slow
def test_features_bootstrap_every_registration_fails_feature_level_as_set_at_its_known_seed():
    assert_teeth("features", "features_bootstrap_every_registration", BOOTSTRAP_EVERY_REGISTRATION_SEED, 30.0,
                 {"feature_level_as_set"})


@pytest.mark.slow
def test_features_gates_fixed_fails_feature_gates_follow_level_at_its_known_seed():
    assert_teeth("features", "features_gates_fixed", GATES_FIXED_SEED, 30.0, {"feature_gates_follow_level"})


@pytest.mark.slow
def test_features_sweep_with_every_fix_in_place_finds_no_failure():
    assert_sweep_passes("features", 12, 30.0)


@pytest.mark.slow
def test_a_lost_update_that_applies_after_later_changes_does_not_leave_the_administrator_wrong():
    # Seed 17005: an UpdateFeatures to level 2 goes unanswered; the administrator sets 2 again, then 0, and the
    # first request, still forwarded by its broker, applies after them. An administrator that trusted its own
    # account kept asking for an upgrade from 0 to 1 (refused: the level was 2) until the run ended.
    result = run_one(workload_config("features", 17005, 60.0, DEFAULT_FAULTS))
    assert result.ok, failed_checkers(result)
    assert result.stats["feature_level"] == 1
