"""The consumer-groups workload: the groups simulation with KIP-848 members (simulations/consumer_groups_sim.py).

partition_exclusive is shown to fail on a hand-fed coordinator state; the planted bug "assign_unreleased"
fails it at a named seed (the first failing seed of `flotilla simulate --workload consumer-groups --seeds 300
--duration 30 --bugs assign_unreleased`), replays to the same trace, and passes with the bug off; so do
"poll_ignores_changes" with coordinator_answers_prompt and "partition_metadata_volatile" with
epoch_bump_has_cause."""

from __future__ import annotations

import uuid

import pytest

from groupcoord.consumer import ConsumerGroup, ConsumerMember
from simulations.consumer_groups_sim import ConsumerGroupCheckers
from simulations.run import run_one
from tests.simulations.workloads import assert_sweep_passes, assert_teeth, failed_checkers, workload_config

ASSIGN_UNRELEASED_SEED = 1
# poll_ignores_changes (the coordinator runtimes are told nothing changed): the members heartbeat often, so a
# held answer leaves at the next request to its partition; after the heal an OffsetFetch waits 601 ms with
# nothing wrong (coordinator_answers_prompt; the first failing seed of `--seeds 300 --duration 30 --bugs
# poll_ignores_changes`; 13 before the group's partition metadata was written, 10 before the internal topics
# waited for three brokers, 3 until a starting node held its first Metadata requests, 1 until the nodes answered
# each connection in request order).
POLL_IGNORES_CHANGES_SEED = 8
# partition_metadata_volatile (the subscribed topics' metadata not written): the first heartbeat after a
# coordinator failover bumps the epoch with nothing changed (the first failing seed of `--seeds 300 --duration 30
# --bugs partition_metadata_volatile`; seeds 1-12 all fail it).
PARTITION_METADATA_VOLATILE_SEED = 1
CHECKERS = {"partition_exclusive", "epoch_bump_has_cause", "commit_kept", "group_delivery"}


def test_a_fault_free_run_shares_the_partitions_and_passes_every_checker():
    result = run_one(workload_config("consumer-groups", seed=1))
    assert result.ok, failed_checkers(result)
    assert result.stats["assignments"] >= 3
    assert result.stats["group_records"] >= result.stats["acked_all"]
    assert result.stats["commits_acked"] > 0
    assert {v.name for v in result.checkers} >= CHECKERS


def test_partition_exclusive_fails_when_two_members_own_a_partition_at_once():
    topic = uuid.UUID(int=7)
    group = ConsumerGroup("g")
    group.members = {"a": ConsumerMember("a", assigned={topic: frozenset({0, 1})}),
                     "b": ConsumerMember("b", assigned={topic: frozenset({2})})}
    checkers = ConsumerGroupCheckers()
    checkers.check_exclusive_owners({"g": group})
    assert "partition_exclusive" not in checkers.violations
    group.members["b"] = ConsumerMember("b", assigned={topic: frozenset({2})}, revoking={topic: frozenset({1})})
    checkers.check_exclusive_owners({"g": group})
    assert "partition 1 owned by a and b" in checkers.violations["partition_exclusive"]


def test_assign_unreleased_fails_partition_exclusive_at_its_known_seed():
    buggy = assert_teeth("consumer-groups", "assign_unreleased", ASSIGN_UNRELEASED_SEED, 30.0, CHECKERS)
    assert "partition_exclusive" in failed_checkers(buggy)


def test_partition_metadata_volatile_fails_epoch_bump_has_cause_at_its_known_seed():
    buggy = assert_teeth("consumer-groups", "partition_metadata_volatile", PARTITION_METADATA_VOLATILE_SEED, 30.0,
                         {"epoch_bump_has_cause"})
    assert "no member joining, leaving or changing its subscription" in failed_checkers(buggy)["epoch_bump_has_cause"]


@pytest.mark.slow
def test_poll_ignores_changes_fails_coordinator_answers_prompt_at_its_known_seed():
    assert_teeth("consumer-groups", "poll_ignores_changes", POLL_IGNORES_CHANGES_SEED, 30.0,
                 {"coordinator_answers_prompt"})


@pytest.mark.slow
def test_consumer_groups_sweep_with_every_fix_in_place_finds_no_failure():
    assert_sweep_passes("consumer-groups", 30, 20.0)
