"""RaftDriver without sockets: three drivers on the in-test pump with a virtual clock."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import cbor2
import pytest

from partitions.storage import MemoryStorage
from raftlog.codec import encode_message
from raftlog.port import NotLeaderError, ProposalTimeoutError, ProposalTooLargeError
from tests.raftlog.harness import FAST_CONFIG, Cluster
from tests.raftlog.storages import PowerLossStorage

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPACTING = dataclasses.replace(FAST_CONFIG, log_compaction_entries_min=10, snapshot_chunk_bytes_max=64)


def test_three_drivers_elect_one_leader_and_commit_in_order_on_all_nodes() -> None:
    cluster = Cluster(seed=11)
    leader = cluster.wait_leader()
    indexes = [cluster.commit(b"entry-%d" % i) for i in range(20)]
    assert indexes == sorted(indexes) and len(set(indexes)) == 20
    cluster.run_for(500)
    for member in cluster.members.values():
        assert member.machine.data() == [b"entry-%d" % i for i in range(20)]
        assert [index for index, _ in member.machine.applied] == indexes
    status = cluster.members[leader].driver.status()
    assert status.is_leader and status.leader_id == leader and status.raft_commit_index == indexes[-1]
    assert {m.id: m.match_index for m in status.members} == {i: indexes[-1] for i in cluster.ids}


def test_follower_rejects_proposal_with_leader_hint() -> None:
    cluster = Cluster(seed=12)
    leader = cluster.wait_leader()
    cluster.run_for(200)
    follower = next(i for i in cluster.ids if i != leader)
    ticket = cluster.propose(follower, b"nope")
    outcome = cluster.members[follower].outcomes[ticket]
    assert isinstance(outcome, NotLeaderError) and outcome.leader_hint == leader and outcome.retriable


def test_oversized_proposal_is_refused() -> None:
    cluster = Cluster(seed=13, config=dataclasses.replace(FAST_CONFIG, entry_bytes_max=1000))
    leader = cluster.wait_leader()
    ticket = cluster.propose(leader, b"x" * 1001)
    assert isinstance(cluster.members[leader].outcomes[ticket], ProposalTooLargeError)


def test_leader_crash_and_restart_keeps_every_acknowledged_entry() -> None:
    cluster = Cluster(seed=14)
    first = cluster.wait_leader()
    for i in range(10):
        cluster.commit(b"before-%d" % i)
    cluster.crash(first)
    second = cluster.wait_leader()
    assert second != first
    for i in range(10):
        cluster.commit(b"during-%d" % i)
    cluster.start(first)  # re-created over the same MemoryStorage
    cluster.commit(b"after")
    cluster.run_for(1000)
    expected = [b"before-%d" % i for i in range(10)] + [b"during-%d" % i for i in range(10)] + [b"after"]
    for member in cluster.members.values():
        assert member.machine.data() == expected
    cluster.check_prefix_consistency()


def test_node_restarted_from_journal_and_snapshot_catches_up_by_snapshot_install() -> None:
    cluster = Cluster(seed=15, config=COMPACTING)
    leader = cluster.wait_leader()
    for i in range(15):
        cluster.commit(b"a-%d" % i)
    lagging = next(i for i in cluster.ids if i != leader)
    cluster.crash(lagging)
    for i in range(40):
        cluster.commit(b"b-%d" % i)
    leader_status = cluster.members[leader].driver.status()
    assert leader_status.snapshot_index is not None and leader_status.log_start_index > 20
    cluster.start(lagging)
    assert cluster.run_until(lambda: cluster.members[lagging].driver.status().last_applied
                             == cluster.members[leader].driver.status().last_applied, 10_000)
    expected = [b"a-%d" % i for i in range(15)] + [b"b-%d" % i for i in range(40)]
    assert cluster.members[lagging].machine.data() == expected
    cluster.crash(lagging)
    cluster.start(lagging)  # now from its own installed snapshot plus journal
    cluster.commit(b"c")
    cluster.run_for(500)
    assert cluster.members[lagging].machine.data() == expected + [b"c"]


def test_proposal_deadline_completes_with_timeout_and_late_success_is_reported() -> None:
    cluster = Cluster(seed=16)
    leader = cluster.wait_leader()
    cluster.commit(b"warm")
    cluster.isolate(leader)
    ticket = cluster.propose(leader, b"slow", timeout_ms=100)
    cluster.run_for(150)
    assert isinstance(cluster.members[leader].outcomes[ticket], ProposalTimeoutError)
    cluster.heal()  # before any follower's election timeout (300 ms)
    cluster.run_for(500)
    assert isinstance(cluster.members[leader].late[ticket], int)  # the entry committed after all
    for member in cluster.members.values():
        assert member.machine.data() == [b"warm", b"slow"]


def test_malformed_and_forwarded_messages_are_dropped_not_crashing() -> None:
    cluster = Cluster(seed=17)
    leader = cluster.wait_leader()
    follower = next(i for i in cluster.ids if i != leader)
    driver = cluster.members[follower].driver
    driver.receive(leader, b"\xff\x00garbage")
    driver.receive(leader, encode_message({"type": "apply_command", "command": b"\x00x"}))
    driver.receive(leader, cbor2.dumps({"type": "append_entries", "term": "1", "commit_index": 1}))
    driver.receive(99, encode_message({"type": "response_vote", "term": 1}))
    assert driver.malformed_messages == 4
    cluster.commit(b"still-fine")


def test_group_commit_no_message_or_completion_leaves_before_its_fsync() -> None:
    storages = {i: PowerLossStorage() for i in (1, 2, 3)}
    cluster = Cluster(seed=18, config=COMPACTING, storages=storages)
    cluster.check_durable_on_release = True
    leader = cluster.wait_leader()
    for i in range(30):
        cluster.commit(b"g-%d" % i)
    cluster.restart(next(i for i in cluster.ids if i != leader))
    cluster.commit(b"g-last")
    cluster.run_for(500)
    assert cluster.durability_checks > 100


def test_group_commit_check_catches_a_disk_whose_fsync_lies() -> None:
    storages = {i: PowerLossStorage() for i in (1, 2, 3)}
    for storage in storages.values():
        storage.fsyncs_are_lies = True
    cluster = Cluster(seed=18, storages=storages)
    cluster.check_durable_on_release = True
    with pytest.raises(AssertionError, match="un-fsynced"):
        cluster.wait_leader()


@pytest.mark.parametrize("seed", [19, 20, 21])
def test_simultaneous_power_loss_of_every_node_loses_no_acknowledged_entry(seed: int) -> None:
    storages = {i: PowerLossStorage() for i in (1, 2, 3)}
    cluster = Cluster(seed=seed, config=COMPACTING, storages=storages)
    cluster.wait_leader()
    leader = cluster.leader()
    tickets = [cluster.propose(leader, b"p-%d" % i) for i in range(40)]
    cluster.run_until(lambda: len(cluster.members[leader].outcomes) >= 25, 5000)
    for i in cluster.ids:
        cluster.crash(i)
    for storage in storages.values():
        storage.power_loss()
    for i in cluster.ids:
        cluster.start(i)
    cluster.commit(b"after")
    cluster.run_for(500)
    acked = [data for data in cluster.acked if data.startswith(b"p-")]
    assert len(acked) >= 25 and tickets
    for member in cluster.members.values():
        assert set(acked) <= set(member.machine.data())
    cluster.check_prefix_consistency()


def test_compacted_journal_without_snapshot_is_refused() -> None:
    from raftlog.driver import RaftDriver
    from raftlog.port import RaftStorageError

    cluster = Cluster(seed=22, config=COMPACTING)
    cluster.wait_leader()
    for i in range(30):
        cluster.commit(b"x-%d" % i)
    storage = cluster.members[1].storage
    cluster.crash(1)
    storage.delete("raft-1/raft.snapshot")
    with pytest.raises(RaftStorageError, match="no snapshot"):
        RaftDriver(1, [2, 3], storage, "raft-1", lambda: 0, __import__("random").Random(1),
                   lambda: b"", lambda _: None, COMPACTING)


def scenario_trace_hash(seed: int) -> str:
    """A small scenario with crashes, partitions and compaction; the hash of everything that happened."""
    cluster = Cluster(seed=seed, config=COMPACTING)
    leader = cluster.wait_leader()
    for i in range(12):
        cluster.commit(b"d-%d" % i)
    cluster.isolate(leader)
    cluster.run_for(1500)
    cluster.heal()
    for i in range(12):
        cluster.commit(b"e-%d" % i)
    cluster.restart(cluster.leader())
    cluster.commit(b"f")
    cluster.run_for(1000)
    return cluster.trace_hash()


def _hash_in_subprocess(seed: int, hash_seed: str) -> str:
    code = f"from tests.raftlog.test_driver import scenario_trace_hash; print(scenario_trace_hash({seed}))"
    env = dict(os.environ, PYTHONHASHSEED=hash_seed)
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                            timeout=120, check=True)
    return result.stdout.strip().splitlines()[-1]


def test_same_seed_same_trace_regardless_of_pythonhashseed() -> None:
    first = _hash_in_subprocess(5, "0")
    assert first == _hash_in_subprocess(5, "987654")
    assert first == scenario_trace_hash(5)
    assert first != scenario_trace_hash(6)


def test_memory_storage_restart_replays_journal_meta() -> None:
    cluster = Cluster(seed=23, storages={1: MemoryStorage(), 2: MemoryStorage(), 3: MemoryStorage()})
    leader = cluster.wait_leader()
    cluster.commit(b"one")
    term = cluster.members[leader].driver.status().term
    for i in cluster.ids:
        cluster.crash(i)
    for i in cluster.ids:
        cluster.start(i)
    new_leader = cluster.wait_leader()
    assert cluster.members[new_leader].driver.status().term > term
    for member in cluster.members.values():  # the cheap accessor agrees with the full status
        status = member.driver.status()
        assert member.driver.leadership() == (status.is_leader, status.term, status.leader_id)
    assert cluster.members[new_leader].driver.leadership()[0]
    cluster.commit(b"two")
    cluster.run_for(300)
    for member in cluster.members.values():
        assert member.machine.data() == [b"one", b"two"]


def test_real_files_journal_and_snapshot_survive_restart(tmp_path) -> None:
    from net.filestorage import FileStorage

    storages = {i: FileStorage(str(tmp_path / f"node-{i}")) for i in (1, 2, 3)}
    cluster = Cluster(seed=24, config=COMPACTING, storages=storages)
    for i in range(25):
        cluster.commit(b"f-%d" % i)
    for i in cluster.ids:
        cluster.crash(i)
    for i in cluster.ids:
        cluster.start(i)
    cluster.commit(b"f-last")
    cluster.run_for(500)
    for member in cluster.members.values():
        assert member.machine.data() == [b"f-%d" % i for i in range(25)] + [b"f-last"]
    assert sorted(storages[1].list("raft-1")) == ["raft.journal", "raft.snapshot"]


def test_batched_proposals_cost_one_fsync_and_commit_in_order() -> None:
    storages = {i: PowerLossStorage() for i in (1, 2, 3)}
    cluster = Cluster(seed=25, storages=storages)
    leader = cluster.wait_leader()
    cluster.run_for(200)
    driver = cluster.members[leader].driver
    fsyncs_before = sum(1 for kind, _ in storages[leader].events if kind == "fsync")
    tickets = driver.propose_many([(b"batch-%d" % i, cluster.now_ms + 5000) for i in range(20)])
    fsyncs_after = sum(1 for kind, _ in storages[leader].events if kind == "fsync")
    assert fsyncs_after - fsyncs_before == 1
    sent = driver.take_outbox()
    assert len(sent) == 2  # one append_entries per follower carries all twenty entries
    for peer, payload in sent:
        cluster.streams[(leader, peer)].append((cluster.now_ms + 1, payload))
    for ticket, data in zip(tickets, [b"batch-%d" % i for i in range(20)]):
        cluster.members[leader].proposals[ticket] = data
    cluster.run_until(lambda: all(t in cluster.members[leader].outcomes for t in tickets), 2000)
    cluster.run_for(300)
    indexes = [cluster.members[leader].outcomes[t] for t in tickets]
    assert indexes == list(range(indexes[0], indexes[0] + 20))
    for member in cluster.members.values():
        assert member.machine.data() == [b"batch-%d" % i for i in range(20)]


def test_a_step_that_raises_part_way_through_a_batch_releases_nothing() -> None:
    """receive_many handles its frames as one step: when a later frame raises (here a chunked entry whose
    'finish' chunk truncates the pickle), the reply the first frame staged must not leave with a later step."""
    cluster = Cluster(seed=21)
    leader = cluster.wait_leader()
    cluster.run_for(300)
    follower = next(i for i in cluster.ids if i != leader)
    driver = cluster.members[follower].driver
    driver.take_outbox()
    status = driver.status()
    term, commit, end = status.term, status.raft_commit_index, status.log_end_index
    heartbeat = {"type": "append_entries", "term": term, "commit_index": commit, "prevLogIdx": end,
                 "prevLogTerm": term, "entries": []}
    truncated = {**heartbeat, "transmission": "finish", "data": b"\x80\x04\x95"}
    with pytest.raises(Exception):
        driver.receive_many([(leader, encode_message(heartbeat)), (leader, encode_message(truncated))])
    assert driver.take_outbox() == []
    driver.tick(cluster.now_ms + 1)  # a follower's tick before its election timeout sends nothing of its own
    assert driver.take_outbox() == [], "the failed step's reply to the heartbeat left with a later step"
