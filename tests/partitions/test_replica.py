"""Replica / ISR / high-watermark behaviour of `partitions.replica.Partition`, with three replicas wired by
direct calls over real logs on MemoryStorage."""

from __future__ import annotations

import pytest

from partitions.errors import (
    ErrorCode,
    FencedLeaderEpochError,
    InvalidRequiredAcksError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
)
from partitions.replica import IsolationLevel, IsrChangeKind
from tests.partitions.test_replica_helpers import Cluster, batch, offsets_and_values, values_of

LAG_MS = 10_000


def started_cluster(min_insync_replicas: int = 2) -> Cluster:
    cluster = Cluster(min_insync_replicas=min_insync_replicas, replica_lag_time_max_ms=LAG_MS)
    cluster.elect(1, now_ms=0)
    return cluster


def shrink_isr(cluster: Cluster, keep_fetching=(), now_ms: int = LAG_MS + 1) -> tuple[int, ...]:
    """Let every follower but `keep_fetching` fall behind for longer than the lag time, then have the leader
    propose the shrink and the controller commit it. Returns the new ISR."""
    for follower in keep_fetching:
        cluster.fetch(follower, now_ms=now_ms - 1)
    proposed = cluster[cluster.leader_id].maybe_shrink_isr(now_ms)
    assert proposed is not None
    cluster.commit_isr(proposed, now_ms)
    return proposed


def test_acks_all_completes_only_after_every_isr_follower_fetched():
    cluster = started_cluster()
    leader = cluster[1]
    result = leader.append_records(batch(b"a", b"b"), -1, now_ms=10)
    assert (result.first_offset, result.last_offset, result.required_offset) == (0, 1, 2)
    leader.pending_produce("p1", result.required_offset, deadline_ms=5_000)
    assert leader.take_completed(11) == []

    cluster.fetch(2, now_ms=20)  # follower 2 takes the records; leader learns LEO 2 only at its next fetch
    cluster.fetch(2, now_ms=21)
    assert leader.high_watermark == 0, "follower 3 has not fetched yet"
    assert leader.take_completed(22) == []

    cluster.fetch(3, now_ms=30)
    cluster.fetch(3, now_ms=31)
    assert leader.high_watermark == 2
    [completion] = leader.take_completed(32)
    assert (completion.request_id, completion.error) == ("p1", ErrorCode.NONE)


def test_acks_one_and_zero_complete_at_once_without_purgatory():
    cluster = started_cluster()
    assert cluster[1].append_records(batch(b"a"), 1, now_ms=1).required_offset is None
    assert cluster[1].append_records(batch(b"b"), 0, now_ms=1).required_offset is None
    assert cluster[1].purgatory_size == 0


def test_high_watermark_is_min_log_end_offset_over_isr_including_leader():
    cluster = started_cluster()
    leader = cluster[1]
    for value in (b"a", b"b", b"c"):
        leader.append_records(batch(value), 1, now_ms=1)
    cluster.fetch(2, now_ms=2)  # follower 2 now at 3
    cluster.fetch(3, now_ms=2, max_bytes=1)  # follower 3 gets one batch: at 1
    cluster.fetch(2, now_ms=3)
    cluster.fetch(3, now_ms=3)  # reports 1, takes the rest
    assert [leader.follower_states[b].log_end_offset for b in (2, 3)] == [3, 1]
    assert leader.high_watermark == min(3, 1, leader.log_end_offset) == 1
    cluster.fetch(3, now_ms=4)
    assert leader.high_watermark == 3
    assert cluster[2].high_watermark == 0, "follower HW = min(leader HW at its last fetch, own LEO)"
    cluster.fetch(2, now_ms=5)
    assert cluster[2].high_watermark == 3


def test_acks_all_refused_with_not_enough_replicas_when_isr_below_min_and_nothing_appended():
    cluster = started_cluster(min_insync_replicas=2)
    cluster.commit_isr((1,), now_ms=0)
    leader = cluster[1]
    with pytest.raises(NotEnoughReplicasError) as raised:
        leader.append_records(batch(b"x"), -1, now_ms=1)
    assert raised.value.code == ErrorCode.NOT_ENOUGH_REPLICAS and raised.value.retriable
    assert leader.log_end_offset == 0
    leader.append_records(batch(b"y"), 1, now_ms=1)  # acks=1 is still accepted
    assert leader.log_end_offset == 1


def test_invalid_required_acks_and_not_leader_are_refused():
    cluster = started_cluster()
    with pytest.raises(InvalidRequiredAcksError):
        cluster[1].append_records(batch(b"x"), 2, now_ms=1)
    with pytest.raises(NotLeaderOrFollowerError):
        cluster[2].append_records(batch(b"x"), 1, now_ms=1)
    assert cluster[1].log_end_offset == cluster[2].log_end_offset == 0


def test_isr_shrinks_after_replica_lag_time_max_ms_without_catching_up():
    cluster = started_cluster()
    leader = cluster[1]
    leader.append_records(batch(b"a"), 1, now_ms=100)
    cluster.fetch(2, now_ms=200)
    assert leader.maybe_shrink_isr(now_ms=LAG_MS) is None, "lag not yet exceeded for anyone"
    cluster.fetch(2, now_ms=LAG_MS)  # follower 2 keeps up; follower 3 never fetches
    proposed = leader.maybe_shrink_isr(now_ms=LAG_MS + 1)
    assert proposed == (1, 2)
    assert leader.pending_isr_change.kind is IsrChangeKind.SHRINK
    assert leader.maximal_isr == {1, 2, 3}, "the HW waits for 3 until the controller commits the shrink"
    assert leader.maybe_shrink_isr(now_ms=LAG_MS + 2) is None, "one AlterPartition in flight at a time"
    assert leader.high_watermark == 0
    cluster.commit_isr(proposed, now_ms=LAG_MS + 3)
    assert leader.isr == (1, 2) and leader.pending_isr_change is None
    assert leader.high_watermark == 1, "shrinking the ISR unblocks the high watermark"


def test_follower_fetching_but_never_reaching_leader_end_is_shrunk():
    cluster = started_cluster()
    leader = cluster[1]
    now = 0
    for step in range(30):  # a new batch arrives between every two fetches of follower 3, which reads 1 batch
        now += 1_000
        leader.append_records(batch(b"%d" % step, b"pad" * 50), 1, now_ms=now)
        leader.append_records(batch(b"%d" % step, b"pad" * 50), 1, now_ms=now)
        cluster.fetch(2, now_ms=now)
        cluster.fetch(3, now_ms=now, max_bytes=1)
    assert leader.follower_states[3].log_end_offset < leader.follower_states[3].last_fetch_leader_log_end_offset
    assert leader.maybe_shrink_isr(now_ms=now) == (1, 2)


def test_isr_expands_when_follower_reaches_high_watermark_and_epoch_start():
    cluster = started_cluster()
    leader = cluster[1]
    assert shrink_isr(cluster, keep_fetching=(2,)) == (1, 2)
    now = LAG_MS + 10
    for value in (b"a", b"b"):
        leader.append_records(batch(value), 1, now_ms=now)
    cluster.fetch(2, now_ms=now + 2)
    cluster.fetch(2, now_ms=now + 3)
    assert leader.high_watermark == 2
    result = cluster.fetch(3, now_ms=now + 4, max_bytes=1)  # 3 reports LEO 0 < HW: not yet
    assert result.isr_proposal is None
    cluster.fetch(3, now_ms=now + 5)  # reports 1 < HW 2
    assert leader.pending_isr_change is None
    result = cluster.fetch(3, now_ms=now + 6)  # reports 2 == HW
    assert result.isr_proposal == (1, 2, 3)
    assert leader.pending_isr_change.kind is IsrChangeKind.EXPAND
    assert leader.maybe_expand_isr(3, now_ms=now + 6) is None, "already pending"
    cluster.commit_isr(result.isr_proposal, now_ms=now + 7)
    assert leader.isr == (1, 2, 3)


def test_expansion_requires_reaching_the_leader_epoch_start_offset():
    # A follower at the HW but short of the current epoch's start may still hold an uncommitted tail of an
    # older epoch: it must not join the ISR yet (Kafka's isFollowerInSync).
    cluster = Cluster(min_insync_replicas=1, replica_lag_time_max_ms=LAG_MS)
    cluster.elect(1, isr=(1, 2), now_ms=0)
    leader = cluster[1]
    for value in (b"a", b"b", b"c"):
        leader.append_records(batch(value), 1, now_ms=1)
    cluster.elect(1, isr=(1, 2), now_ms=2)  # same leader, new epoch starting at offset 3
    assert leader.leader_epoch_start_offset == 3 and leader.high_watermark == 0
    for expected_log_end_offset in (0, 1, 2):
        result = cluster.fetch(3, now_ms=3, max_bytes=1)
        assert leader.follower_states[3].log_end_offset == expected_log_end_offset
        assert result.isr_proposal is None, f"LEO {expected_log_end_offset} >= HW 0 but below epoch start 3"
    result = cluster.fetch(3, now_ms=4, max_bytes=1)
    assert leader.follower_states[3].log_end_offset == 3
    assert result.isr_proposal == (1, 2, 3)


def test_pending_expand_uses_maximal_isr_for_high_watermark():
    cluster = started_cluster(min_insync_replicas=1)
    leader = cluster[1]
    shrink_isr(cluster)
    now = LAG_MS + 10
    leader.append_records(batch(b"a"), 1, now_ms=now)
    assert leader.high_watermark == 1
    result = cluster.fetch(2, now_ms=now + 1, max_bytes=1)  # reports 0 < HW 1: no expansion
    assert result.isr_proposal is None
    result = cluster.fetch(2, now_ms=now + 2)  # reports 1 == HW: expansion proposed
    assert result.isr_proposal == (1, 2)
    leader.append_records(batch(b"b"), 1, now_ms=now + 3)
    assert leader.high_watermark == 1, "HW waits for the replica being added while the expansion is in flight"
    cluster.fetch(2, now_ms=now + 4)
    cluster.fetch(2, now_ms=now + 5)
    assert leader.high_watermark == 2


def test_high_watermark_frozen_while_isr_below_min_insync_replicas():  # KIP-966
    cluster = started_cluster(min_insync_replicas=2)
    leader = cluster[1]
    leader.append_records(batch(b"a"), 1, now_ms=1)
    for follower in (2, 3):
        cluster.fetch(follower, now_ms=2)
        cluster.fetch(follower, now_ms=3)
    assert leader.high_watermark == 1
    now = 3 * LAG_MS
    leader.append_records(batch(b"b"), 1, now_ms=now - 1)  # the followers stop fetching: they fall behind
    assert shrink_isr(cluster, now_ms=now) == (1,)
    assert leader.high_watermark == 1, "leader alone in the ISR must not advance the HW (min ISR 2)"
    assert values_of(leader.read_for_consumer(0, 1 << 20).records) == [b"a"]
    result = cluster.fetch(2, now_ms=now + 2)  # follower 2 is back, at the HW: it may rejoin
    assert result.isr_proposal == (1, 2)
    cluster.fetch(2, now_ms=now + 3)
    assert leader.follower_states[2].log_end_offset == 2
    assert leader.high_watermark == 1, "the expansion is not committed: the ISR is still below min ISR"
    cluster.commit_isr(result.isr_proposal, now_ms=now + 4)
    assert leader.isr == (1, 2) and leader.high_watermark == 2


def test_acks_all_waiting_when_isr_drops_below_min_times_out():
    cluster = started_cluster(min_insync_replicas=2)
    leader = cluster[1]
    result = leader.append_records(batch(b"a"), -1, now_ms=1)
    leader.pending_produce("p", result.required_offset, deadline_ms=1_000)
    cluster.commit_isr((1,), now_ms=2)  # HW frozen from now on
    assert leader.take_completed(999) == []
    [completion] = leader.take_completed(1_000)
    assert completion.error == ErrorCode.REQUEST_TIMED_OUT


def test_acks_all_answers_not_enough_replicas_after_append_when_isr_shrank_before_completion():
    # Kafka's checkEnoughReplicasReachOffset: the HW passed the request, but by the time the purgatory
    # looks at it the ISR is below min.insync.replicas.
    cluster = started_cluster(min_insync_replicas=2)
    leader = cluster[1]
    result = leader.append_records(batch(b"a"), -1, now_ms=1)
    leader.pending_produce("p", result.required_offset, deadline_ms=1_000)
    for follower in (2, 3):
        cluster.fetch(follower, now_ms=2)
        cluster.fetch(follower, now_ms=3)
    assert leader.high_watermark == 1
    cluster.commit_isr((1,), now_ms=4)
    [completion] = leader.take_completed(5)
    assert completion.error == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_waiting_produce_answers_not_leader_when_leadership_moves():
    cluster = started_cluster()
    leader = cluster[1]
    result = leader.append_records(batch(b"a"), -1, now_ms=1)
    leader.pending_produce("p", result.required_offset, deadline_ms=1_000)
    cluster.elect(2, now_ms=2)
    [completion] = leader.take_completed(3)
    assert completion.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert leader.purgatory_size == 0


def test_consumer_fetch_never_returns_records_at_or_above_high_watermark():
    cluster = started_cluster()
    leader = cluster[1]
    leader.append_records(batch(b"a"), 1, now_ms=1)
    leader.append_records(batch(b"b", b"c"), 1, now_ms=1)
    for follower in (2, 3):
        cluster.fetch(follower, now_ms=2, max_bytes=1)
        cluster.fetch(follower, now_ms=3, max_bytes=1)
    assert leader.high_watermark == 1 and leader.log_end_offset == 3
    fetched = leader.read_for_consumer(0, 1 << 20)
    assert offsets_and_values(fetched.records) == [(0, b"a")]
    assert (fetched.high_watermark, fetched.log_start_offset, fetched.last_stable_offset) == (1, 0, 1)
    assert leader.read_for_consumer(1, 1 << 20).records == b"", "between HW and LEO: empty, no error"
    with pytest.raises(OffsetOutOfRangeError):
        leader.read_for_consumer(4, 1 << 20)
    with pytest.raises(NotLeaderOrFollowerError):
        cluster[2].read_for_consumer(0, 1 << 20)


def test_read_committed_reads_below_last_stable_offset_hook():
    cluster = started_cluster(min_insync_replicas=1)
    leader = cluster[1]
    shrink_isr(cluster)
    leader.append_records(batch(b"a"), 1, now_ms=LAG_MS + 2)
    leader.append_records(batch(b"b"), 1, now_ms=LAG_MS + 2)
    leader.set_last_stable_offset_hook(lambda high_watermark: min(high_watermark, 1))
    assert values_of(leader.read_for_consumer(0, 1 << 20, IsolationLevel.READ_COMMITTED).records) == [b"a"]
    assert values_of(leader.read_for_consumer(0, 1 << 20).records) == [b"a", b"b"]


def test_stale_leader_and_partition_epochs_are_ignored():
    cluster = started_cluster()
    leader = cluster[1]
    assert not leader.become_follower(2, leader_epoch=-1, partition_epoch=5, replicas=(1, 2, 3), isr=(2,))
    assert leader.is_leader
    assert not leader.apply_isr_change((1,), partition_epoch=-1, now_ms=1)
    assert leader.isr == (1, 2, 3)
    assert not leader.apply_isr_change((1,), partition_epoch=5, now_ms=1, leader_epoch=7)
    assert not leader.become_leader(0, 0, (1, 2, 3), (1, 2, 3), now_ms=1), "same epochs: nothing new"
    assert cluster[2].become_follower(1, 0, 0, (1, 2, 3), (1, 2, 3)) is False


def test_fetch_with_old_leader_epoch_is_fenced():
    cluster = started_cluster()
    cluster.elect(1, now_ms=1)  # epoch 1
    with pytest.raises(FencedLeaderEpochError):
        cluster[1].handle_follower_fetch(2, 0, -1, 2, 1 << 20, current_leader_epoch=0)
    with pytest.raises(UnknownLeaderEpochError):
        cluster[1].handle_follower_fetch(2, 0, -1, 2, 1 << 20, current_leader_epoch=2)
    with pytest.raises(NotLeaderOrFollowerError):
        cluster[1].handle_follower_fetch(9, 0, -1, 2, 1 << 20)


def test_follower_fetch_outside_log_is_offset_out_of_range():
    cluster = started_cluster()
    cluster[1].append_records(batch(b"a"), 1, now_ms=1)
    with pytest.raises(OffsetOutOfRangeError):
        cluster[1].handle_follower_fetch(2, 5, None, 2, 1 << 20)


def test_follower_far_ahead_after_unclean_election_truncates_to_leader_end():
    cluster = started_cluster(min_insync_replicas=1)
    follower = cluster[2]
    for value in (b"a", b"b", b"c"):
        cluster[1].append_records(batch(value), 1, now_ms=1)
    cluster.fetch(2, now_ms=2)
    assert follower.log_end_offset == 3
    assert follower.follower_handle_offset_out_of_range(leader_log_start_offset=0, leader_log_end_offset=1) == 1
    assert cluster.log_values(2) == [(0, b"a")]


def test_follower_behind_leader_log_start_starts_over_at_it():
    cluster = started_cluster()
    follower = cluster[2]
    assert follower.follower_handle_offset_out_of_range(leader_log_start_offset=40, leader_log_end_offset=50) == 40
    assert (follower.log_start_offset, follower.log_end_offset, follower.high_watermark) == (40, 40, 40)


def test_alter_partition_errors_drop_keep_or_retry_the_proposal():
    cluster = started_cluster()
    leader = cluster[1]
    proposed = leader.maybe_shrink_isr(now_ms=LAG_MS + 1)
    assert proposed == (1,)
    assert leader.alter_partition_failed(ErrorCode.REQUEST_TIMED_OUT) is True
    assert leader.pending_isr_change is not None
    assert leader.alter_partition_failed(ErrorCode.INVALID_UPDATE_VERSION) is False
    assert leader.pending_isr_change is not None, "stays pending until metadata arrives"
    assert leader.alter_partition_failed(ErrorCode.INELIGIBLE_REPLICA) is False
    assert leader.pending_isr_change is None, "the controller says nothing was applied"
    assert leader.maybe_shrink_isr(now_ms=LAG_MS + 2) == (1,)


def test_high_watermark_restored_on_restart_is_clamped_to_log_end():
    cluster = started_cluster()
    cluster[1].append_records(batch(b"a", b"b"), 1, now_ms=1)
    cluster.fetch(2, now_ms=2)
    cluster.partitions[2] = cluster.open(2)  # restart
    cluster[2].set_high_watermark_on_restart(99)
    assert cluster[2].high_watermark == 2
    cluster[2].set_high_watermark_on_restart(1)
    assert cluster[2].high_watermark == 1


def test_caught_up_replica_outside_isr_holds_high_watermark_unless_ineligible():
    # Kafka's shouldWaitForReplicaToJoinIsr: the HW does not run away from a caught-up follower that could
    # not be proposed yet (another ISR change is in flight), unless the controller made it ineligible.
    cluster = Cluster(min_insync_replicas=1, replica_lag_time_max_ms=LAG_MS)
    cluster.elect(1, isr=(1,), now_ms=0)
    leader = cluster[1]
    assert cluster.fetch(2, now_ms=1).isr_proposal == (1, 2)
    assert cluster.fetch(3, now_ms=1).isr_proposal is None, "one AlterPartition in flight"
    assert leader.maximal_isr == {1, 2}
    leader.append_records(batch(b"a"), 1, now_ms=2)
    cluster.fetch(2, now_ms=3)
    cluster.fetch(2, now_ms=4)
    assert leader.follower_states[2].log_end_offset == 1
    assert leader.high_watermark == 0, "follower 3 is caught up within the lag time: the HW waits for it"
    leader.set_ineligible_replicas({3}, now_ms=5)  # e.g. fenced by the controller
    assert leader.high_watermark == 1


def test_planted_bug_hw_from_leader_leo_exposes_unreplicated_records():
    cluster = started_cluster()
    leader = cluster[1]
    leader.bug_hw_from_leader_leo = True
    leader.append_records(batch(b"unreplicated"), 1, now_ms=1)
    assert leader.high_watermark == 1
    assert values_of(leader.read_for_consumer(0, 1 << 20).records) == [b"unreplicated"]
    assert cluster[2].log_end_offset == 0 and cluster[3].log_end_offset == 0


def test_follower_log_start_follows_the_leader_delete_records():
    cluster = started_cluster()
    for value in (b"a", b"b", b"c"):
        cluster[1].append_records(batch(value), 1, now_ms=1)
    for follower in (2, 3):
        cluster.fetch(follower, now_ms=2)
        cluster.fetch(follower, now_ms=3)
    assert cluster[1].high_watermark == 3
    cluster[1].log.delete_records_before(2)  # DeleteRecords on the leader (the node checks offset <= HW)
    result = cluster.fetch(2, now_ms=4)
    assert result.log_start_offset == 2
    assert cluster[2].log_start_offset == 2 and cluster[3].log_start_offset == 0
    assert offsets_and_values(cluster[2].log.read(2, 1 << 20).records) == [(2, b"c")]


def test_touching_a_caught_up_follower_advances_its_fetch_state_as_a_fetch_at_the_log_end_would():
    touched, fetched = started_cluster(), started_cluster()
    for cluster in (touched, fetched):
        cluster[1].append_records(batch(b"a"), 1, now_ms=100)
        cluster.fetch(2, now_ms=200)
        cluster.fetch(2, now_ms=300)  # known at the log end (1), in the ISR
    epoch = touched[1].leader_epoch
    assert touched[1].touch_caught_up_follower(2, 1, epoch, -1, now_ms=5_000)  # as the helper fetches
    fetched.fetch(2, now_ms=5_000)
    assert touched[1].follower_states[2] == fetched[1].follower_states[2]
    assert touched[1].follower_states[2].last_caught_up_time_ms == 5_000
    assert touched[1].high_watermark == fetched[1].high_watermark
    # not the cheap case: a fetch below the log end, another epoch, a follower out of the ISR, not the leader
    leader = touched[1]
    assert not leader.touch_caught_up_follower(2, 0, epoch, 0, now_ms=6_000)
    assert not leader.touch_caught_up_follower(2, 1, epoch + 1, 0, now_ms=6_000)
    assert not leader.touch_caught_up_follower(3, 1, epoch, 0, now_ms=6_000)  # never fetched to the end
    assert not touched[2].touch_caught_up_follower(3, 1, epoch, 0, now_ms=6_000)
    leader.append_records(batch(b"b"), 1, now_ms=6_000)
    assert not leader.touch_caught_up_follower(2, 1, epoch, 0, now_ms=6_000)  # the log end moved
    assert leader.follower_states[2].last_fetch_time_ms == 5_000  # refusals touch nothing


def test_a_follower_at_the_log_end_that_last_fetched_our_latest_epoch_is_answered_without_a_read():
    """The fetch that reports a follower's progress (v12+ name the epoch it last fetched) is at our log end: it has
    nothing to read and nothing to diverge from under our latest epoch, so the log is not read, and its state and
    the high watermark move as a read's would. Another epoch is still checked for divergence."""
    cluster = started_cluster()
    leader = cluster[1]
    leader.append_records(batch(b"a", b"b"), 1, now_ms=10)
    reads = []
    original = leader.log.read
    leader.log.read = lambda *args, **kwargs: reads.append(args[0]) or original(*args, **kwargs)
    epoch = leader.log.latest_epoch
    below = leader.handle_follower_fetch(2, 0, None, now_ms=20, max_bytes=1 << 20)
    assert below.records and reads == [0]
    at_end = leader.handle_follower_fetch(2, 2, epoch, now_ms=30, max_bytes=1 << 20)
    assert (at_end.records, at_end.diverging_epoch, reads) == (b"", None, [0])  # not read
    assert leader.follower_states[2].log_end_offset == 2 and leader.follower_states[2].last_fetch_time_ms == 30
    assert leader.high_watermark == 0  # follower 3, in the ISR, has not fetched the records yet
    leader.handle_follower_fetch(3, 0, None, now_ms=40, max_bytes=1 << 20)
    leader.handle_follower_fetch(3, 2, epoch, now_ms=50, max_bytes=1 << 20)
    assert leader.high_watermark == 2 and reads == [0, 0]  # its progress moved it, without a read


def test_a_follower_takes_the_replicated_offset_from_its_leader_not_from_its_own_metadata_image():
    cluster = started_cluster()
    leader, follower = cluster[1], cluster[2]
    assert follower.replicated_offset == -1, "nothing heard from the leader yet"
    leader.append_records(batch(b"a", b"b"), 1, now_ms=100)
    for now_ms in (200, 300):
        cluster.fetch(2, now_ms=now_ms)
        cluster.fetch(3, now_ms=now_ms)
    cluster.fetch(2, now_ms=400)  # learns the high watermark broker 3's last fetch moved
    assert leader.high_watermark == 2 and leader.replicated_offset == 2
    assert follower.replicated_offset == 2
    # Broker 3 stops fetching; the leader shrinks the ISR. Broker 2's image is not told (the controller's
    # delta has not reached it): by its own image every replica is still in sync.
    leader.append_records(batch(b"c"), 1, now_ms=500)
    cluster.fetch(2, now_ms=600)
    cluster.fetch(2, now_ms=700)
    assert leader.high_watermark == 2, "waiting for broker 3"
    shrink_isr(cluster, keep_fetching=(2,), now_ms=2 * LAG_MS)
    assert leader.isr == (1, 2) and follower.isr == (1, 2, 3)
    assert leader.high_watermark == 3 and leader.replicated_offset == -1, "broker 3 is out of the ISR"
    cluster.fetch(2, now_ms=2 * LAG_MS + 30)
    assert follower.high_watermark == 3, "the high watermark moved past what broker 3 holds"
    assert follower.replicated_offset == -1, "the leader's word, not the follower's image"
    # Broker 3 catches up and the controller commits it back into the ISR.
    cluster.fetch(3, now_ms=2 * LAG_MS + 40)
    cluster.fetch(3, now_ms=2 * LAG_MS + 50)
    assert leader.pending_isr_change is not None
    cluster.commit_isr((1, 2, 3), now_ms=2 * LAG_MS + 60)
    assert leader.replicated_offset == 3
    cluster.fetch(2, now_ms=2 * LAG_MS + 70)
    assert follower.replicated_offset == 3
    # A new leader: what the former one said is not the new one's word.
    cluster.elect(2, now_ms=2 * LAG_MS + 80)
    assert cluster[3].replicated_offset == -1
    assert cluster[2].replicated_offset == 3, "a leader judges by its own ISR"
