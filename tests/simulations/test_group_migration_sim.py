"""The group-migration workload: members that switch between the classic and the consumer protocol at each
restart, so the group is converted both ways under faults (simulations/group_migration_sim.py).

A seed that converts the group both ways passes every checker; conversion_keeps_assignments is shown to fail
on a hand-fed coordinator state; the planted bugs fail their checkers at named seeds (the first failing seed of
`flotilla simulate --workload group-migration --seeds 300 --duration 30 --bugs B`), replay to the same trace,
and pass with the bug off."""

from __future__ import annotations

import uuid

import pytest

from groupcoord.classic import ClassicGroup, ClassicMember, GroupState
from groupcoord.config import GroupConfig
from groupcoord.consumer import ClassicMeta, ConsumerGroup, ConsumerMember
from groupcoord.consumer_protocol import encode_assignment
from simulations.faults import DEFAULT_FAULTS
from simulations.group_migration_sim import MigrationCheckers
from simulations.run import run_one
from tests.simulations.workloads import assert_sweep_passes, assert_teeth, failed_checkers, workload_config

BOTH_WAYS_SEED = 4  # 30 s, default faults: three upgrades and three downgrades (6 until answers came in order)
# The seeds moved when a starting node held its first Metadata requests.
# (6 until the nodes answered each connection in request order; 4 before a starting node held its first Metadata
# requests, 1 before the slow SyncGroups)
UPGRADE_FORGETS_ASSIGNMENTS_SEED = 4
NO_DOWNGRADE_SEED = 5  # (45, 41 before the partition metadata was written, 4 before the slow SyncGroups)
# no_classic_rebalance_timeouts never fences a classic member of a consumer group for not joining again or not
# syncing within its rebalance timeout: a SyncGroup sent 11 s after its JoinGroup answer gets its assignment.
# (3 until the nodes answered each connection in request order, 8 before a starting node held its first Metadata
# requests)
NO_CLASSIC_REBALANCE_TIMEOUTS_SEED = 30


def test_a_run_that_converts_the_group_both_ways_passes_every_checker():
    result = run_one(workload_config("group-migration", BOTH_WAYS_SEED, 30.0, DEFAULT_FAULTS))
    assert result.ok, failed_checkers(result)
    assert result.stats["upgrades"] >= 1 and result.stats["downgrades"] >= 1, result.stats
    assert result.stats["protocol_switches"] >= 2 and result.stats["commits_acked"] > 0
    assert {v.name for v in result.checkers} >= {"conversion_keeps_assignments", "group_kind_follows_members",
                                                 "partition_exclusive", "generation_exclusive", "commit_kept"}


class _Shard:
    def __init__(self) -> None:
        self.groups: dict = {}
        self.consumer_groups: dict = {}


def test_conversion_keeps_assignments_fails_when_an_upgrade_moves_a_members_partitions():
    topic = uuid.UUID(int=7)
    shard, checkers = _Shard(), MigrationCheckers()
    classic = ClassicGroup("g", GroupConfig())
    classic.state = GroupState.STABLE
    classic.members = {"a": ClassicMember("a", None, "c", "h", 10_000, 30_000, [("range", b"")],
                                          assignment=encode_assignment({"t": [0, 1]}, 0))}
    shard.groups["g"] = classic
    checkers.observe_shard(shard, "g")
    kept = ConsumerGroup("g")
    kept.members = {"a": ConsumerMember("a", assigned={topic: frozenset({0, 1})}, classic=ClassicMeta(10_000, ()))}
    del shard.groups["g"]
    shard.consumer_groups["g"] = kept
    checkers.observe_shard(shard, "g")
    assert "conversion_keeps_assignments" not in checkers.violations and checkers.upgrades == 1

    shard.consumer_groups.clear()
    shard.groups["g"] = classic
    checkers.observe_shard(shard, "g")  # (a downgrade that kept them)
    moved = ConsumerGroup("g")
    moved.members = {"a": ConsumerMember("a", assigned={topic: frozenset({0})}, classic=ClassicMeta(10_000, ()))}
    del shard.groups["g"]
    shard.consumer_groups["g"] = moved
    checkers.observe_shard(shard, "g")
    assert "member a owned [0, 1], now [0]" in checkers.violations["conversion_keeps_assignments"]


def test_upgrade_forgets_assignments_fails_conversion_keeps_assignments_at_its_known_seed():
    assert_teeth("group-migration", "upgrade_forgets_assignments", UPGRADE_FORGETS_ASSIGNMENTS_SEED, 30.0,
                 {"conversion_keeps_assignments"})


def test_no_downgrade_fails_group_kind_follows_members_at_its_known_seed():
    assert_teeth("group-migration", "no_downgrade", NO_DOWNGRADE_SEED, 30.0, {"group_kind_follows_members"})


def test_no_classic_rebalance_timeouts_fails_late_sync_fenced_at_its_known_seed():
    assert_teeth("group-migration", "no_classic_rebalance_timeouts", NO_CLASSIC_REBALANCE_TIMEOUTS_SEED, 30.0,
                 {"late_sync_fenced"})


@pytest.mark.slow
def test_group_migration_sweep_with_every_fix_in_place_finds_no_failure():
    assert_sweep_passes("group-migration", 30, 30.0)
