"""Each pysyncobj fix is necessary: the scripted scenario breaks with the fix off and holds with it on.

Bugs as numbered in research/pysyncobj-findings.md (A, B, D, E) and I, J and K, found since; scenarios run
on the in-test pump (tests/raftlog/harness.py) with a virtual clock, stream resets on partitions and
crashes, for D a storage that crashes the process at a chosen operation, for I links that break between
two messages, for J nodes that crash on an exception out of a step and are restarted, and for K a stream
held (nothing delivered, nothing reset) across two elections.
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pytest

from raftlog.codec import decode_message
from raftlog.port import ProposalTimeoutError, RaftError, RaftStatus
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


# -- bug I: the install reply claims the follower's whole journal ----------------------------------------------
# Indices of the scripted run: the initial entry, the first leader's no-op and three entries, committed on
# every node; the old leader's entries up to SNAPSHOT_INDEX, committed without the stale follower hearing of
# it; its uncommitted entries after them, up to STALE_TAIL_END_INDEX.
BASE_END_INDEX = 5
SNAPSHOT_INDEX = 9
STALE_TAIL_END_INDEX = 15
# Two 100-byte entries per AppendEntries, so that a link can break between two messages of one burst; the
# first compaction of a node that applies every entry lands on SNAPSHOT_INDEX.
INSTALL_CONFIG = dataclasses.replace(FAST_CONFIG, append_entries_batch_bytes_max=200,
                                     log_compaction_entries_min=SNAPSHOT_INDEX - 1)


def _entry(tag: bytes, index: int) -> bytes:
    return (b"%s-%d-" % (tag, index)).ljust(100, b".")


def _acknowledged_and_lost(cluster: Cluster, leader: int, tickets: dict[int, bytes], crashed: tuple[int, ...],
                           links: tuple[tuple[int, int], ...]) -> tuple[dict[bytes, Any], list[bytes]]:
    """The outcome of each proposal made on `leader`; then `crashed` crash, only `links` stay, and the others
    commit b"after": the acknowledged proposals that the next leader's applied state lacks."""
    outcomes = {data: cluster.members[leader].outcomes[ticket] for ticket, data in tickets.items()}
    for node in crashed:
        cluster.crash(node)
    _links_only(cluster, *links)
    cluster.commit(b"after")
    applied = cluster.members[cluster.wait_leader()].machine.data()
    return outcomes, [data for data, outcome in outcomes.items() if isinstance(outcome, int) and data not in applied]


def _links_only(cluster: Cluster, *pairs: tuple[int, int]) -> None:
    up = {frozenset(pair) for pair in pairs}
    for a in cluster.ids:
        for b in cluster.ids:
            if a < b:
                (cluster.connect if frozenset((a, b)) in up else cluster.partition)(a, b)


def _status(cluster: Cluster, i: int) -> RaftStatus:
    return cluster.members[i].driver.status()


def _match_index(cluster: Cluster, leader: int, peer: int) -> int:
    return next(member.match_index or 0 for member in _status(cluster, leader).members if member.id == peer)


def _wait_sent(cluster: Cluster, src: int, dst: int) -> None:
    """Run until `src` has sent `dst` something (not yet delivered: every message takes at least 1 ms)."""
    assert cluster.run_until(lambda: bool(cluster.streams.get((src, dst))), 1000), f"{src} sent {dst} nothing"


def _commit_behind_a_stale_tail(cluster: Cluster, old_leader: int, stale: int, new_leader: int,
                                holder: int) -> None:
    """`stale` ends with the old leader's entries up to STALE_TAIL_END_INDEX, knowing BASE_END_INDEX
    committed; SNAPSHOT_INDEX is committed, and `new_leader` applied it and compacted there, tail unseen."""
    # The old leader's entries up to SNAPSHOT_INDEX reach `holder` only: not committed yet.
    _links_only(cluster, (old_leader, holder))
    for index in range(BASE_END_INDEX + 1, SNAPSHOT_INDEX + 1):
        cluster.propose(old_leader, _entry(b"old", index), timeout_ms=60_000)
    assert cluster.run_until(lambda: _match_index(cluster, old_leader, holder) == SNAPSHOT_INDEX, 1000)
    # Its tail, then all of it, reaches `stale`, whose acknowledgement commits SNAPSHOT_INDEX; the link
    # breaks before the new commit index reaches `stale`.
    _links_only(cluster)
    for index in range(SNAPSHOT_INDEX + 1, STALE_TAIL_END_INDEX + 1):
        cluster.propose(old_leader, _entry(b"stale", index), timeout_ms=60_000)
    cluster.connect(old_leader, stale)
    _wait_sent(cluster, old_leader, stale)
    while cluster.deliver_next(old_leader, stale):
        pass
    while cluster.deliver_next(stale, old_leader):
        pass
    assert _status(cluster, old_leader).raft_commit_index == SNAPSHOT_INDEX
    cluster.partition(old_leader, stale)
    stale_status = _status(cluster, stale)
    assert (stale_status.raft_commit_index, stale_status.log_end_index) == (BASE_END_INDEX, STALE_TAIL_END_INDEX)
    # `new_leader` takes the messages up to SNAPSHOT_INDEX, which carry the new commit index, and the link
    # breaks: it applies and compacts at SNAPSHOT_INDEX and never sees the tail.
    cluster.connect(old_leader, new_leader)
    _wait_sent(cluster, old_leader, new_leader)
    while _status(cluster, new_leader).log_end_index < SNAPSHOT_INDEX:
        assert cluster.deliver_next(old_leader, new_leader)
    cluster.partition(old_leader, new_leader)
    assert _status(cluster, new_leader).snapshot_index == SNAPSHOT_INDEX == _status(cluster, new_leader).log_end_index


def _install_over_the_stale_tail(cluster: Cluster, new_leader: int, stale: int, holder: int,
                                 lagging: int) -> tuple[int, int]:
    """`new_leader` is elected and installs its snapshot on `stale`, which keeps its tail (fix D). Returns
    the new leader's log end and the match index it then records for `stale`; `stale` is cut off again."""
    # Only `new_leader` can win, with `holder` and `lagging` (these two cannot reach each other); `lagging`
    # catches up by installing the snapshot, which has no tail to keep there.
    _links_only(cluster, (new_leader, holder), (new_leader, lagging))
    assert cluster.run_until(lambda: _status(cluster, new_leader).is_leader
                             and _status(cluster, lagging).log_end_index > SNAPSHOT_INDEX, 10_000)
    new_leader_log_end = _status(cluster, new_leader).log_end_index
    cluster.partition(new_leader, lagging)
    # Its first AppendEntries to `stale` is lost with the link, so its nextIndex runs ahead; `stale` answers
    # the next one with a term conflict at its first uncommitted entry, below the leader's log start.
    cluster.connect(new_leader, stale)
    _wait_sent(cluster, new_leader, stale)
    cluster.partition(new_leader, stale)
    cluster.connect(new_leader, stale)
    while _status(cluster, stale).snapshot_index != SNAPSHOT_INDEX:
        if not cluster.deliver_next(new_leader, stale):
            _wait_sent(cluster, new_leader, stale)
    assert _status(cluster, stale).log_end_index == STALE_TAIL_END_INDEX, "fix D keeps what follows the snapshot"
    assert cluster.run_until(lambda: _match_index(cluster, new_leader, stale) >= new_leader_log_end, 1000)
    match_index = _match_index(cluster, new_leader, stale)
    cluster.partition(new_leader, stale)
    return new_leader_log_end, match_index


@dataclasses.dataclass
class _InstallOverStaleTail:
    cluster: Cluster
    new_leader_log_end: int
    match_index_after_install: int  # what the new leader records for the follower after its install
    outcomes: dict[bytes, int | RaftError]  # of the entries that only the new leader and one follower took
    lost: list[bytes]  # of those, acknowledged yet missing from the next leader's state machine


def _stale_tail_scenario(bug_switches: frozenset[str], seed: int) -> _InstallOverStaleTail:
    """Five voters. The old leader gives follower `stale` entries beyond what `stale` learns is committed;
    `new_leader` learns that SNAPSHOT_INDEX is committed without receiving that tail, and compacts there.
    Elected, it sends `stale` that snapshot: its last entries match `stale`'s journal, so fix D keeps the
    tail (Raft section 7), and the install reply then stands for the whole journal (bug I). Entries that only
    the new leader and one follower hold are proposed; those two crash; the other three elect a leader."""
    cluster = Cluster(ids=(1, 2, 3, 4, 5), seed=seed, config=INSTALL_CONFIG, bug_switches=bug_switches)
    old_leader = cluster.wait_leader()
    stale, new_leader, holder, lagging = [i for i in cluster.ids if i != old_leader]
    for i in range(3):
        cluster.commit(_entry(b"base", i))
    cluster.run_for(200)
    assert all(_status(cluster, i).raft_commit_index == BASE_END_INDEX for i in cluster.ids)
    _commit_behind_a_stale_tail(cluster, old_leader, stale, new_leader, holder)
    new_leader_log_end, match_index = _install_over_the_stale_tail(cluster, new_leader, stale, holder, lagging)

    minority = [_entry(b"minority", i) for i in range(3)]
    tickets = {cluster.propose(new_leader, data, timeout_ms=1000): data for data in minority}
    cluster.run_for(1000)
    outcomes, lost = _acknowledged_and_lost(cluster, new_leader, tickets, (new_leader, holder),
                                            ((old_leader, stale), (old_leader, lagging), (stale, lagging)))
    return _InstallOverStaleTail(cluster, new_leader_log_end, match_index, outcomes, lost)


@pytest.mark.parametrize("seed", SEEDS)
def test_bug_i_install_reply_counts_the_kept_tail_and_loses_acknowledged_entries_without_fix(seed: int) -> None:
    run = _stale_tail_scenario(frozenset({"I"}), seed)
    assert run.match_index_after_install == STALE_TAIL_END_INDEX > run.new_leader_log_end
    assert all(isinstance(outcome, int) for outcome in run.outcomes.values()), run.outcomes
    assert run.lost == list(run.outcomes), "acknowledged with two of five voters holding them, then lost"
    with pytest.raises(AssertionError, match="index"):
        run.cluster.check_prefix_consistency()


@pytest.mark.parametrize("seed", SEEDS)
def test_bug_i_fixed_install_reply_claims_the_snapshot_only(seed: int) -> None:  # Raft section 7, InstallSnapshot
    run = _stale_tail_scenario(frozenset(), seed)
    assert run.lost == []
    run.cluster.check_prefix_consistency()
    assert run.match_index_after_install == run.new_leader_log_end, "verified by the AppendEntries after it"
    assert all(isinstance(outcome, ProposalTimeoutError) for outcome in run.outcomes.values()), run.outcomes


# -- bug J: a chunked entry's last chunk but one is marked 'finish' ------------------------------------------------
# An entry whose command is at least append_entries_batch_bytes_max (64 KiB) is pickled and sent in chunks of
# that size; stock pysyncobj marks 'finish' the first chunk reaching the command's length, not the pickled
# entry's. Around a proposal of about 128 KiB the command adds 25 bytes and the pickle 24 more (small index and
# term), so proposals of m * 64 KiB - 48 up to m * 64 KiB - 25 bytes (m >= 2) put a chunk boundary between the
# two ends: the follower unpickles a truncated entry. Each window: (proposal sizes in order, first in the gap).
CHUNK_BOUNDARY_WINDOWS = {
    "2x64KiB": (range(131_000, 131_073), 2 * 65_536 - 48),
    "3x64KiB": (range(196_540, 196_609), 3 * 65_536 - 48),
}
RESTART_AFTER_MS = 500  # a supervisor restarting a crashed node process


def _sized_entry(size: int) -> bytes:
    return bytes([size % 251]) * size


@dataclasses.dataclass
class _ChunkedEntries:
    cluster: Cluster
    leader: int  # the node the last proposal went to
    committed_sizes: list[int]
    failed_size: int | None  # the first proposal that did not commit (the run stops there)
    failed_outcome: int | RaftError | None


def _commit_each_size(bug_switches: frozenset[str], sizes: range, seed: int) -> _ChunkedEntries:
    """Three voters; one proposal of each size, each awaited for 5 s on the leader, crashed nodes restarted
    after RESTART_AFTER_MS, as their processes would be: an exception out of a driver step ends a node."""
    cluster = Cluster(seed=seed, bug_switches=bug_switches)
    cluster.crash_on_step_error = True
    committed_sizes: list[int] = []
    for size in sizes:
        leader = cluster.wait_leader()
        member = cluster.members[leader]
        ticket = cluster.propose(leader, _sized_entry(size), timeout_ms=5000)
        while ticket not in member.outcomes and member.driver is not None:
            cluster.run_until(lambda: ticket in member.outcomes, RESTART_AFTER_MS)
            for i in cluster.ids:
                if cluster.members[i].driver is None:
                    cluster.start(i)
        outcome = member.outcomes.get(ticket)
        if not isinstance(outcome, int):
            return _ChunkedEntries(cluster, leader, committed_sizes, size, outcome)
        committed_sizes.append(size)
    cluster.run_for(200)
    return _ChunkedEntries(cluster, cluster.wait_leader(), committed_sizes, None, None)


@pytest.mark.parametrize("window", sorted(CHUNK_BOUNDARY_WINDOWS))
def test_bug_j_truncated_chunked_entry_crashes_every_follower_and_never_commits_without_fix(window: str) -> None:
    sizes, first_in_gap = CHUNK_BOUNDARY_WINDOWS[window]
    run = _commit_each_size(frozenset({"J"}), sizes, seed=0)
    assert run.committed_sizes == list(range(sizes.start, first_in_gap))
    assert run.failed_size == first_in_gap and isinstance(run.failed_outcome, ProposalTimeoutError), run.failed_outcome
    followers = [i for i in run.cluster.ids if i != run.leader]
    crashed = [i for _, i, error in run.cluster.step_errors
               if isinstance(error, pickle.UnpicklingError) and "truncated" in str(error)]
    assert len(crashed) == len(run.cluster.step_errors), run.cluster.step_errors
    assert all(crashed.count(i) >= 2 for i in followers), f"each restart crashes again: {crashed}"
    for i in run.cluster.ids:
        assert _sized_entry(first_in_gap) not in run.cluster.members[i].machine.data(), f"node {i} applied it"


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("window", sorted(CHUNK_BOUNDARY_WINDOWS))
def test_bug_j_fixed_every_chunked_entry_commits_on_every_node(window: str, seed: int) -> None:
    sizes, _ = CHUNK_BOUNDARY_WINDOWS[window]
    run = _commit_each_size(frozenset(), sizes, seed)
    assert run.failed_size is None, (run.failed_size, run.failed_outcome)
    assert run.cluster.step_errors == []
    expected = [_sized_entry(size) for size in sizes]
    for i in run.cluster.ids:
        assert run.cluster.members[i].machine.data() == expected, f"node {i}"
    run.cluster.check_prefix_consistency()


# -- bug K: a reply from an earlier term raises matchIndex in a later one -----------------------------------------
# pysyncobj's AppendEntries reply (next_node_idx) carries no term, and __onBecomeLeader's matchIndex of 0 is raised
# by any success reply. A follower's replies to a leader of term 1, held on a stream that is never reset (a path
# that loses every segment while TCP retransmits), arrive after that node has lost term 2 and won term 3: they
# vouch for its term-1 entries, which the follower has since replaced with term 2's, and count the follower for
# the node's term-3 entries at those indices.
OLD_TAIL_ENTRIES = 4


@dataclasses.dataclass
class _StaleReplies:
    cluster: Cluster
    old_tail_end: int  # the last index of the term-1 entries the follower acknowledged
    replies: list[dict[str, object]]  # the held replies, delivered to the node leading its later term
    terms: tuple[int, int]  # (the term the replies answered, the term in which they arrived)
    match_index_after_replies: int  # what the node, leading its later term, records for the follower then
    outcomes: dict[bytes, int | RaftError]  # of the entries proposed in the later term
    lost: list[bytes]  # of those, acknowledged yet missing from the next leader's state machine


def _old_tail_on_one_follower(cluster: Cluster, old_leader: int, follower: int) -> tuple[int, int]:
    """The old leader's entries reach `follower` only; every reply of `follower` to it is held from now on.
    Returns the old tail's last index and the old leader's term."""
    _links_only(cluster, (old_leader, follower))
    cluster.hold(follower, old_leader)
    old_tail_end = _status(cluster, old_leader).log_end_index + OLD_TAIL_ENTRIES
    for index in range(old_tail_end - OLD_TAIL_ENTRIES + 1, old_tail_end + 1):
        cluster.propose(old_leader, _entry(b"old", index), timeout_ms=60_000)
    assert cluster.run_until(lambda: _status(cluster, follower).log_end_index == old_tail_end, 1000)
    return old_tail_end, _status(cluster, old_leader).term


def _second_leader_replaces_the_tail(cluster: Cluster, old_leader: int, follower: int,
                                     others: list[int]) -> tuple[int, list[int]]:
    """A leader of the next term is elected among `others` (the follower's longer log could not be outvoted
    there, so it is kept away); its no-op replaces the old tail on the old leader and the follower, and
    commits with them. The two voters left never see the new term's entries. Returns (leader, voters)."""
    _links_only(cluster, (old_leader, follower), *[(a, b) for a in others for b in others if a < b])
    assert cluster.run_until(lambda: any(_status(cluster, i).is_leader for i in others), 2000)
    second = next(i for i in others if _status(cluster, i).is_leader)
    voters = [i for i in others if i != second]
    _links_only(cluster, (old_leader, follower), (second, old_leader), (second, follower))  # drops its sends to voters
    no_op_index = _status(cluster, second).log_end_index
    assert cluster.run_until(lambda: _status(cluster, second).raft_commit_index == no_op_index, 2000)
    assert cluster.run_until(lambda: _status(cluster, old_leader).log_end_index == no_op_index, 1000)
    assert _status(cluster, follower).log_end_index == no_op_index, "the old tail is gone from the follower"
    return second, voters


def _stale_reply_scenario(bug_switches: frozenset[str], seed: int) -> _StaleReplies:
    """Five voters. The old leader's tail reaches one follower, whose replies are held; a second leader's no-op
    replaces that tail on both; the old leader is elected again by the two voters that saw neither, proposes
    entries that reach one of them, and then the held replies arrive. The old leader and that voter crash;
    the other three elect a leader."""
    cluster = Cluster(ids=(1, 2, 3, 4, 5), seed=seed, bug_switches=bug_switches)
    old_leader = cluster.wait_leader()
    follower, *others = [i for i in cluster.ids if i != old_leader]
    for i in range(3):
        cluster.commit(_entry(b"base", i))
    cluster.run_for(200)
    old_tail_end, old_term = _old_tail_on_one_follower(cluster, old_leader, follower)
    second, (holder, voter) = _second_leader_replaces_the_tail(cluster, old_leader, follower, others)
    # The old leader's link to the follower now loses everything both ways; the old leader wins a later term.
    cluster.hold(old_leader, follower)
    _links_only(cluster, (old_leader, follower), (old_leader, holder), (old_leader, voter))
    assert cluster.run_until(lambda: _status(cluster, old_leader).is_leader, 3000)
    cluster.partition(old_leader, voter)  # drops its first AppendEntries: `voter` stays behind
    new_term = _status(cluster, old_leader).term
    assert new_term > old_term
    entries = [_entry(b"later", i) for i in range(2)]
    tickets = {cluster.propose(old_leader, data, timeout_ms=1000): data for data in entries}
    assert cluster.run_until(lambda: _status(cluster, holder).log_end_index == old_tail_end, 500)
    assert _status(cluster, follower).log_end_index < old_tail_end
    # The link to the old leader delivers what the follower sent it while it led the old term, then resets.
    replies = []
    while cluster.streams[(follower, old_leader)]:
        reply = decode_message(cluster.streams[(follower, old_leader)][0][1])
        if reply["type"] != "next_node_idx":
            break  # the follower's own candidacy since; not a reply
        replies.append(reply)
        cluster.deliver_next(follower, old_leader)
    match_index = _match_index(cluster, old_leader, follower)
    cluster.partition(old_leader, follower)
    cluster.run_for(1000)
    outcomes, lost = _acknowledged_and_lost(cluster, old_leader, tickets, (old_leader, holder),
                                            ((second, follower), (second, voter), (follower, voter)))
    return _StaleReplies(cluster, old_tail_end, replies, (old_term, new_term), match_index, outcomes, lost)


@pytest.mark.parametrize("seed", SEEDS)
def test_bug_k_reply_from_an_earlier_term_counts_and_loses_acknowledged_entries_without_fix(seed: int) -> None:
    run = _stale_reply_scenario(frozenset({"K"}), seed)
    assert run.replies and all(reply["success"] and "term" not in reply for reply in run.replies), run.replies
    assert run.match_index_after_replies == run.old_tail_end
    assert all(isinstance(outcome, int) for outcome in run.outcomes.values()), run.outcomes
    assert run.lost == list(run.outcomes), "acknowledged with two of five voters holding them, then lost"
    with pytest.raises(AssertionError, match="index"):
        run.cluster.check_prefix_consistency()


@pytest.mark.parametrize("seed", SEEDS)
def test_bug_k_fixed_leader_drops_a_reply_from_an_earlier_term(seed: int) -> None:  # Raft section 5.1
    run = _stale_reply_scenario(frozenset(), seed)
    old_term, new_term = run.terms
    assert run.replies and all(reply["success"] and reply["term"] == old_term for reply in run.replies), run.replies
    assert run.match_index_after_replies == 0, "the reply of the old term is dropped"
    assert run.lost == []
    run.cluster.check_prefix_consistency()
    assert all(isinstance(outcome, ProposalTimeoutError) for outcome in run.outcomes.values()), run.outcomes
