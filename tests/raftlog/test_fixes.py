"""Each pysyncobj fix is necessary: the scripted scenario breaks with the fix off and holds with it on.

Bugs as numbered in research/pysyncobj-findings.md (A, B, D, E); scenarios run on the in-test pump
(tests/raftlog/harness.py) with a virtual clock, stream resets on partitions and crashes, and for D a
storage that crashes the process at a chosen operation.
"""

from __future__ import annotations

import dataclasses

import pytest

from raftlog.port import ProposalTimeoutError
from tests.raftlog.harness import FAST_CONFIG, Cluster
from tests.raftlog.storages import PowerLossStorage

SEEDS = (0, 1, 2)


def _deposed_leader_acks(bug_switches: frozenset[str], seed: int) -> tuple[list[bytes], Cluster, int]:
    """An isolated leader accepts writes, the others elect, commit and compact, then the partition heals:
    the old leader is repaired with a multi-message snapshot install. Returns the acknowledged-but-lost."""
    config = dataclasses.replace(FAST_CONFIG, log_compaction_entries_min=10)
    cluster = Cluster(seed=seed, config=config, bug_switches=bug_switches)
    old_leader = cluster.wait_leader()
    for i in range(5):
        cluster.commit(b"base-%d" % i)
    cluster.isolate(old_leader)
    orphans = [b"orphan-%d" % i for i in range(3)]
    for orphan in orphans:
        cluster.propose(old_leader, orphan, timeout_ms=20_000)
    cluster.run_for(1500)
    new_leader = cluster.wait_leader()
    assert new_leader != old_leader
    for i in range(30):
        cluster.commit(b"new-%d" % i)
    cluster.heal()
    cluster.run_for(3000)
    committed = cluster.members[new_leader].machine.data()
    lost = [orphan for orphan in orphans if orphan in cluster.acked and orphan not in committed]
    return lost, cluster, old_leader


@pytest.mark.parametrize("seed", SEEDS)
def test_bug_a_deposed_leader_acknowledges_uncommitted_entries_on_snapshot_message_without_fix(seed: int) -> None:
    lost, _, _ = _deposed_leader_acks(frozenset({"A"}), seed)
    assert lost, "with fix A off the deposed leader should ack its never-committed entries"


@pytest.mark.parametrize("seed", SEEDS)
def test_bug_a_fixed_deposed_leader_never_acknowledges_uncommitted_entries(seed: int) -> None:
    lost, cluster, old_leader = _deposed_leader_acks(frozenset(), seed)
    assert lost == []
    cluster.check_prefix_consistency()
    cluster.run_for(20_000)  # bug G: the orphans' callbacks never fire; their deadline completes them
    outcomes = cluster.members[old_leader].outcomes
    orphan_outcomes = [outcomes[t] for t, data in cluster.members[old_leader].proposals.items()
                       if data.startswith(b"orphan")]
    assert len(orphan_outcomes) == 3 and all(isinstance(o, ProposalTimeoutError) for o in orphan_outcomes)


def _livelock_scenario(bug_switches: frozenset[str], seed: int) -> tuple[bool, Cluster, int, int]:
    """A deposed leader holds a conflicting tail; the current leader's nextIndex for it starts beyond its
    log (leadership moved once more while it was away) and the repair needs more than one batch."""
    config = dataclasses.replace(FAST_CONFIG, append_entries_batch_bytes_max=300)
    cluster = Cluster(seed=seed, config=config, bug_switches=bug_switches)
    old_leader = cluster.wait_leader()
    for i in range(5):
        cluster.commit(b"base-%d" % i)
    cluster.isolate(old_leader)
    for i in range(5):
        cluster.propose(old_leader, b"orphan-%d-" % i + b"x" * 100, timeout_ms=60_000)
    cluster.run_for(1500)
    second = cluster.wait_leader()
    for i in range(40):
        cluster.commit(b"new-%d-" % i + b"y" * 100)
    third = next(i for i in cluster.ids if i not in (old_leader, second))
    assert cluster._call(second, lambda d: d.transfer_leadership(third))
    assert cluster.run_until(lambda: cluster.leader() == third, 5000)
    cluster.heal()
    repaired = cluster.run_until(
        lambda: cluster.members[old_leader].driver.status().last_applied
        == cluster.members[third].driver.status().last_applied, 20_000)
    return repaired, cluster, old_leader, third


@pytest.mark.parametrize("seed", SEEDS)
def test_bug_b_next_index_livelock_without_fix(seed: int) -> None:
    repaired, cluster, old_leader, third = _livelock_scenario(frozenset({"B"}), seed)
    assert not repaired, "with fix B off the follower should never catch up"
    assert cluster.members[old_leader].driver.status().log_end_index < cluster.members[third].driver.status().log_end_index


@pytest.mark.parametrize("seed", SEEDS)
def test_bug_b_fixed_follower_with_conflicting_tail_catches_up(seed: int) -> None:
    repaired, cluster, _, _ = _livelock_scenario(frozenset(), seed)
    assert repaired
    cluster.check_prefix_consistency()


def _dump_journal_race(bug_switches: frozenset[str], seed: int) -> tuple[list[bytes], int]:
    """Follower F dumps a snapshot while holding acknowledged entries beyond its commit index and crashes
    before compacting its journal; the leader is lost; F restarts and leads with the third node."""
    lazy = dataclasses.replace(FAST_CONFIG, log_compaction_entries_min=10**6, log_compaction_interval_ms=10_000)
    storages = {i: PowerLossStorage() for i in (1, 2, 3)}
    cluster = Cluster(seed=seed, config=lazy, bug_switches=bug_switches, storages=storages)
    leader = cluster.wait_leader()
    follower, lagging = [i for i in cluster.ids if i != leader]
    for i in range(5):
        cluster.commit(b"base-%d" % i)
    cluster.partition(lagging, leader)
    cluster.partition(lagging, follower)
    tickets = [cluster.propose(leader, b"acked-%d" % i, timeout_ms=60_000) for i in range(5)]
    assert cluster.run_until(lambda: all(t in cluster.members[leader].outcomes for t in tickets), 2000)
    cluster.crash(leader)  # the commit index never reaches the follower
    follower_status = cluster.members[follower].driver.status()
    assert follower_status.raft_commit_index < follower_status.log_end_index
    storages[follower].crash_when = lambda op, path: op == "open" and path.endswith("raft.journal.tmp")
    cluster.run_until(lambda: cluster.members[follower].driver is None, 15_000)
    assert cluster.members[follower].driver is None, "the follower should crash between dump and compaction"
    cluster.start(follower)
    cluster.heal()
    cluster.commit(b"after")
    acked = [data for data in cluster.acked if data.startswith(b"acked")]
    assert len(acked) == 5
    return [data for data in acked if data not in cluster.members[follower].machine.data()], follower


@pytest.mark.parametrize("seed", SEEDS)
def test_bug_d_restart_between_dump_and_compaction_loses_acked_entries_without_fix(seed: int) -> None:
    lost, _ = _dump_journal_race(frozenset({"D"}), seed)
    assert lost


@pytest.mark.parametrize("seed", SEEDS)
def test_bug_d_fixed_restart_finishes_the_compaction(seed: int) -> None:
    lost, _ = _dump_journal_race(frozenset(), seed)
    assert lost == []


def _restart_after_compaction(bug_switches: frozenset[str], seed: int) -> tuple[int, int, int]:
    config = dataclasses.replace(FAST_CONFIG, log_compaction_entries_min=10)
    cluster = Cluster(seed=seed, config=config, bug_switches=bug_switches)
    leader = cluster.wait_leader()
    for i in range(30):
        cluster.commit(b"e-%d" % i)
    cluster.run_for(500)
    restarted = next(i for i in cluster.ids if i != leader)
    cluster.restart(restarted)
    cluster.commit(b"after")
    cluster.run_for(3000)
    status = cluster.members[restarted].driver.status()
    return status.last_applied, status.raft_commit_index, len(cluster.members[restarted].machine.applied)


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_bug_e_compacted_journal_without_dump_file_never_applies_after_restart(seed: int) -> None:
    last_applied, commit_index, applied = _restart_after_compaction(frozenset({"E"}), seed)
    assert last_applied == 1 and commit_index > 30 and applied == 0


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_bug_e_fixed_restarted_node_restores_snapshot_and_applies(seed: int) -> None:
    last_applied, commit_index, applied = _restart_after_compaction(frozenset(), seed)
    assert last_applied == commit_index and applied == 31  # 30 entries + "after", no-ops excluded
