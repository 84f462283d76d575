"""Follower truncation by leader epoch (KIP-101, KIP-279, KIP-320) and the two failure scenarios of KIP-101,
with real logs over MemoryStorage. Each scenario also runs with the planted pre-KIP-101 bug
(`bug_truncate_to_own_hw`) to show that these tests catch it."""

from __future__ import annotations

import copy

from partitions.errors import ErrorCode
from partitions.replica import EpochEndOffset
from tests.partitions.test_replica_helpers import Cluster, batch

BYTES_MAX = 1 << 20


def diverged_pair() -> Cluster:
    """Broker 2 led epoch 1 and wrote m1, m2 that nobody fetched; broker 1 then led epoch 2 and wrote n1.
    Both share m0 from epoch 0. Broker 2 is now a follower of broker 1 at epoch 2."""
    cluster = Cluster(broker_ids=(1, 2), min_insync_replicas=1)
    cluster.elect(1, now_ms=0)
    cluster[1].append_records(batch(b"m0"), 1, now_ms=1)
    cluster.fetch(2, now_ms=2)
    cluster.elect(2, isr=(2,), now_ms=3, followers=())  # broker 1 is cut off and does not hear of it
    cluster[2].append_records(batch(b"m1"), 1, now_ms=4)
    cluster[2].append_records(batch(b"m2"), 1, now_ms=4)
    cluster.elect(1, isr=(1,), now_ms=5)  # broker 2 is told to follow broker 1 at epoch 2
    cluster[1].append_records(batch(b"n1"), 1, now_ms=6)
    assert cluster.log_values(1) == [(0, b"m0"), (1, b"n1")]
    assert cluster.log_values(2) == [(0, b"m0"), (1, b"m1"), (2, b"m2")]
    return cluster


def test_follower_truncates_to_leader_epoch_end_offset():  # KIP-101
    cluster = diverged_pair()
    follower, leader = cluster[2], cluster[1]
    request = follower.follower_fetch_request(now_ms=7)
    assert request.last_fetched_epoch == 1
    answer = leader.last_offset_for_leader_epoch(request.last_fetched_epoch, current_leader_epoch=2)
    assert answer == EpochEndOffset(0, 1), "epoch 1 unknown to the leader: epoch 0 ended at offset 1"
    assert follower.follower_truncate_with_epoch_end_offset(answer) is True
    assert cluster.log_values(2) == [(0, b"m0")]
    cluster.fetch(2, now_ms=8)
    assert cluster.log_values(2) == cluster.log_values(1) == [(0, b"m0"), (1, b"n1")]


def test_follower_truncates_on_diverging_epoch_in_fetch_response():  # KIP-320
    cluster = diverged_pair()
    state_before = copy.copy(cluster[1].follower_states[2])
    result = cluster.fetch(2, now_ms=7)
    assert result.diverging_epoch == EpochEndOffset(0, 1) and result.records == b""
    assert cluster[1].follower_states[2] == state_before, "a diverging fetch does not update follower state"
    assert cluster.log_values(2) == [(0, b"m0")]
    cluster.fetch(2, now_ms=8)
    assert cluster.log_values(2) == cluster.log_values(1)


def test_follower_never_truncates_below_its_own_epoch_end():  # KIP-279
    # The leader knows epoch 2 but we do not: we truncate to the end of our last epoch below it, then ask
    # again with our new latest epoch.
    cluster = Cluster(broker_ids=(1, 2), min_insync_replicas=1)
    cluster.elect(1, now_ms=0)
    follower_log = cluster[2].log
    follower_log.append_as_leader(batch(b"f0"), 0, now_ms=1)
    follower_log.append_as_leader(batch(b"f1"), 1, now_ms=1)
    follower_log.append_as_leader(batch(b"f2"), 3, now_ms=1)
    assert cluster[2].follower_truncate_with_epoch_end_offset((2, 5)) is False
    assert cluster.log_values(2) == [(0, b"f0"), (1, b"f1")], "our epoch 1 (<= 2) ended at offset 2"
    assert cluster[2].follower_fetch_request(now_ms=2).last_fetched_epoch == 1
    assert cluster[2].follower_truncate_with_epoch_end_offset((0, 1)) is True
    assert cluster.log_values(2) == [(0, b"f0")]


def test_undefined_epoch_answer_leaves_the_log_alone():
    cluster = diverged_pair()
    assert cluster[2].follower_truncate_with_epoch_end_offset((-1, -1)) is True
    assert cluster[2].log_end_offset == 3, "never fall back to truncating at the high watermark"


def test_stale_fetch_response_is_ignored():
    cluster = Cluster(broker_ids=(1, 2), min_insync_replicas=1)
    cluster.elect(1, now_ms=0)
    cluster[1].append_records(batch(b"a"), 1, now_ms=1)
    request = cluster[2].follower_fetch_request(now_ms=2)
    result = cluster[1].handle_follower_fetch(2, request.fetch_offset, request.last_fetched_epoch, 2, BYTES_MAX)
    cluster[2].follower_handle_fetch_response(result.records, result.high_watermark, 0, None, 3, fetch_offset=0)
    outcome = cluster[2].follower_handle_fetch_response(result.records, 1, 0, None, 4, fetch_offset=0)
    assert outcome.ignored and cluster.log_values(2) == [(0, b"a")]


# ---------------------------------------------------------------------------------------------------------
# KIP-101 scenario 1: "High Watermark Truncation followed by Immediate Leader Election".
# Leader A and follower B both hold m1, m2; A's HW reached 2 (m2 acknowledged under acks=all) but B crashed
# before the fetch response carrying HW 2 arrived, so B's HW is 1. B restarts and follows A; then A dies, B
# is elected, and A comes back as a follower.


def run_kip101_scenario_1(bug: bool) -> tuple[Cluster, list[tuple[int, bytes]]]:
    cluster = Cluster(broker_ids=(1, 2), min_insync_replicas=2)
    a, b = 1, 2
    cluster.elect(a, now_ms=0)
    acknowledged = []
    for offset, value in enumerate((b"m1", b"m2")):
        result = cluster[a].append_records(batch(value), -1, now_ms=10 * offset + 1)
        cluster[a].pending_produce(value, result.required_offset, deadline_ms=1_000)
        cluster.fetch(b, now_ms=10 * offset + 2)  # B takes the record
        request = cluster[b].follower_fetch_request(now_ms=10 * offset + 3)  # and reports its LEO
        response = cluster[a].handle_follower_fetch(b, request.fetch_offset, request.last_fetched_epoch,
                                                    10 * offset + 3, BYTES_MAX)
        if value == b"m1":
            cluster[b].follower_handle_fetch_response(
                response.records, response.high_watermark, 0, None, 10 * offset + 3
            )
        # For m2, B crashes before this response (carrying HW 2) arrives.
        [completion] = cluster[a].take_completed(now_ms=10 * offset + 4)
        assert completion.error == ErrorCode.NONE
        acknowledged.append((offset, value))
    assert cluster[a].high_watermark == 2 and cluster[b].high_watermark == 1

    restarted = cluster.open(b)  # B restarts from its disk and its HW checkpoint
    restarted.bug_truncate_to_own_hw = bug
    restarted.set_high_watermark_on_restart(1)
    cluster.partitions[b] = restarted
    restarted.become_follower(a, cluster.leader_epoch, cluster.partition_epoch, (a, b), (a, b))

    cluster.elect(b, isr=(b,), now_ms=100, followers=())  # A dies; B is the only ISR member left
    cluster[b].append_records(batch(b"m3"), 1, now_ms=101)

    returned = cluster.open(a)  # A comes back and follows B
    returned.bug_truncate_to_own_hw = bug
    returned.set_high_watermark_on_restart(2)
    cluster.partitions[a] = returned
    returned.become_follower(b, cluster.leader_epoch, cluster.partition_epoch, (a, b), (b,))
    for now_ms in range(200, 205):
        cluster.fetch(a, now_ms=now_ms)
    return cluster, acknowledged


def test_kip101_scenario_1_follower_restart_then_election_loses_nothing_acknowledged():
    cluster, acknowledged = run_kip101_scenario_1(bug=False)
    for broker in (1, 2):
        assert cluster.log_values(broker)[: len(acknowledged)] == acknowledged
    assert cluster.log_values(1) == cluster.log_values(2) == [(0, b"m1"), (1, b"m2"), (2, b"m3")]


def test_kip101_scenario_1_with_truncation_to_own_high_watermark_loses_acknowledged_record():
    cluster, acknowledged = run_kip101_scenario_1(bug=True)
    new_leader_log = cluster.log_values(2)
    assert (1, b"m2") in acknowledged and (1, b"m2") not in new_leader_log, "acknowledged m2 lost"
    assert cluster.log_values(1) != new_leader_log, "and the replicas no longer agree"


# ---------------------------------------------------------------------------------------------------------
# KIP-101 scenario 2: "Replica Divergence on Restart after Multiple Hard Failures".
# A and B both hold m1 (committed). A appends m2, B fetches it into its page cache and A's HW moves to 2;
# then power fails on both. B loses the unflushed m2, restarts first and is elected; it writes m3 at
# offset 1. A returns with m1, m2 and HW 2 and follows B.


def run_kip101_scenario_2(bug: bool) -> Cluster:
    cluster = Cluster(broker_ids=(1, 2), min_insync_replicas=1)
    a, b = 1, 2
    cluster.elect(a, now_ms=0)
    cluster[a].append_records(batch(b"m1"), 1, now_ms=1)
    cluster.fetch(b, now_ms=2)
    cluster.fetch(b, now_ms=3)
    b_disk_after_power_loss = copy.deepcopy(cluster.storages[b])  # what B had fsynced: m1 only
    cluster[a].append_records(batch(b"m2"), 1, now_ms=4)
    cluster.fetch(b, now_ms=5)
    cluster.fetch(b, now_ms=6)
    assert cluster[a].high_watermark == 2

    cluster.storages[b] = b_disk_after_power_loss
    restarted_b = cluster.open(b)
    restarted_b.bug_truncate_to_own_hw = bug
    restarted_b.set_high_watermark_on_restart(1)
    cluster.partitions[b] = restarted_b
    cluster.elect(b, isr=(b,), now_ms=100, followers=())
    cluster[b].append_records(batch(b"m3"), 1, now_ms=101)

    restarted_a = cluster.open(a)
    restarted_a.bug_truncate_to_own_hw = bug
    restarted_a.set_high_watermark_on_restart(2)
    cluster.partitions[a] = restarted_a
    restarted_a.become_follower(b, cluster.leader_epoch, cluster.partition_epoch, (a, b), (b,))
    for now_ms in range(200, 205):
        cluster.fetch(a, now_ms=now_ms)
    return cluster


def test_kip101_scenario_2_logs_converge_to_the_new_leader():
    cluster = run_kip101_scenario_2(bug=False)
    assert cluster.log_values(1) == cluster.log_values(2) == [(0, b"m1"), (1, b"m3")]
    assert cluster[1].high_watermark == cluster[2].high_watermark == 2


def test_kip101_scenario_2_with_truncation_to_own_high_watermark_diverges():
    cluster = run_kip101_scenario_2(bug=True)
    assert cluster.log_values(2) == [(0, b"m1"), (1, b"m3")]
    assert cluster.log_values(1) == [(0, b"m1"), (1, b"m2")], "offset 1 differs between the replicas"


def test_follower_drops_an_empty_epoch_it_started_as_leader():
    # Broker 3 was elected (epoch 1) and deposed before appending anything: its epoch cache says epoch 1
    # starts at 0. Following broker 2 (epoch 2), it must drop that entry, or it would report epoch 1 as
    # its last fetched epoch and be told "diverging" forever (Kafka truncates the cache at the LEO).
    cluster = Cluster(min_insync_replicas=2)
    cluster.elect(1, now_ms=0)
    cluster[1].append_records(batch(b"v1"), -1, now_ms=1)
    cluster.fetch(2, now_ms=2)
    cluster.elect(3, isr=(2, 3), now_ms=3)
    cluster.elect(2, isr=(2,), now_ms=4)
    assert cluster[3].follower_fetch_request(now_ms=5).last_fetched_epoch == 1
    for now_ms in range(5, 10):
        cluster.fetch(1, now_ms=now_ms)
        cluster.fetch(3, now_ms=now_ms)
    assert cluster.log_values(1) == cluster.log_values(2) == cluster.log_values(3) == [(0, b"v1")]
