"""Partition reassignment, preferred leader balancing and decommissioning in the controller (sans-IO), checked
against Kafka's KRaft rules (ReplicationControlManager, PartitionReassignmentReplicas/Revert)."""

import pytest

from metadata.controller import ControllerConfig
from metadata.records import NO_LEADER
from metadata.requests import (
    AlterPartitionReassignmentsRequest,
    ElectionType,
    ElectLeadersRequest,
    TopicPartitions,
    ReassignablePartition,
    ReplicaAssignment,
    UnregisterBrokerRequest,
)
from partitions.errors import ErrorCode
from tests.metadata.harness import Cluster


@pytest.fixture
def cluster():
    c = Cluster()
    c.start_brokers(1, 2, 3, 4)
    c.create_topic("t", -1, -1, assignments=(ReplicaAssignment(0, (1, 2, 3)),))
    return c


def reassign(cluster, *targets):
    request = AlterPartitionReassignmentsRequest(tuple(ReassignablePartition(t, p, r) for t, p, r in targets))
    response = cluster.run(request)
    assert response.error_code == ErrorCode.NONE
    return [(r.error_code, r.message) for r in response.partitions]


def test_a_move_adds_the_new_replica_first_and_completes_when_it_joins_the_isr(cluster):
    before = cluster.partition("t", 0)
    assert reassign(cluster, ("t", 0, (4, 2, 3))) == [(ErrorCode.NONE, "")]
    state = cluster.partition("t", 0)
    assert (state.replicas, state.adding_replicas, state.removing_replicas) == ((4, 2, 3, 1), (4,), (1,))
    assert (state.leader, state.isr, state.leader_epoch) == (1, (1, 2, 3), before.leader_epoch)  # 1 still leads
    # The leader adds the caught-up replica to the ISR: the same batch completes the move.
    response = cluster.alter_isr("t", 0, (1, 2, 3, 4))
    assert response.error_code == ErrorCode.NONE
    state = cluster.partition("t", 0)
    assert (state.replicas, state.isr, state.adding_replicas, state.removing_replicas) == ((4, 2, 3), (2, 3, 4), (), ())
    assert state.leader == 4 and state.leader_epoch == before.leader_epoch + 1  # first target replica in the ISR
    assert (response.leader, response.isr) == (4, (2, 3, 4))  # the answer describes the completed state


def test_a_move_keeping_the_leader_bumps_the_leader_epoch_when_a_replica_leaves(cluster):
    epoch = cluster.partition("t", 0).leader_epoch
    reassign(cluster, ("t", 0, (1, 2, 4)))
    cluster.alter_isr("t", 0, (1, 2, 3, 4))
    state = cluster.partition("t", 0)
    assert (state.replicas, state.isr, state.leader) == ((1, 2, 4), (1, 2, 4), 1)
    assert state.leader_epoch == epoch + 1  # fences replica 3's fetches


def test_a_reorder_or_a_removal_of_in_sync_replicas_completes_at_once(cluster):
    reassign(cluster, ("t", 0, (2, 1)))
    state = cluster.partition("t", 0)
    assert (state.replicas, state.isr, state.leader, state.adding_replicas) == ((2, 1), (1, 2), 1, ())


def test_cancel_reverts_to_the_original_replicas(cluster):
    reassign(cluster, ("t", 0, (4, 2, 3)))
    assert reassign(cluster, ("t", 0, None)) == [(ErrorCode.NONE, "")]
    state = cluster.partition("t", 0)
    # Kafka's originalReplicas keeps the merged order without the added ones: the removed replica comes last.
    assert (state.replicas, state.isr, state.leader, state.adding_replicas, state.removing_replicas) == (
        (2, 3, 1), (1, 2, 3), 1, (), ())
    assert reassign(cluster, ("t", 0, None))[0][0] == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS


def test_list_state_while_moving_and_a_new_target_replaces_the_ongoing_one(cluster):
    reassign(cluster, ("t", 0, (4, 2, 3)))
    reassign(cluster, ("t", 0, (1, 2, 3)))  # back where it was: everything in sync, completes at once
    state = cluster.partition("t", 0)
    assert (state.replicas, state.adding_replicas, state.removing_replicas) == ((1, 2, 3), (), ())


def test_bad_reassignments_get_their_errors_and_change_nothing(cluster):
    before = cluster.image
    results = reassign(
        cluster,
        ("t", 0, (1, 2, 9)),
        ("t", 0, (1, 1, 2)),
        ("t", 0, ()),
        ("t", 7, (1, 2, 3)),
        ("nope", 0, (1, 2, 3)),
    )
    assert [code for code, _ in results] == [
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ]
    assert "[9]" in results[0][1] and "duplicate" in results[1][1] and "empty" in results[2][1]
    assert cluster.image.topics == before.topics


def test_cancel_that_needs_an_unclean_election_is_refused_unless_the_topic_allows_it():
    for unclean in (False, True):
        c = Cluster()
        c.start_brokers(1, 2, 3, 4, 5, 6)
        configs = {"unclean.leader.election.enable": "true"} if unclean else None
        c.create_topic("t", -1, -1, configs=configs, assignments=(ReplicaAssignment(0, (1, 2, 3)),))
        reassign(c, ("t", 0, (4, 5, 6)))
        c.alter_isr("t", 0, (1, 2, 3, 4))  # 4 caught up, 5 and 6 not yet
        c.keep_alive(4, 5, 6, now_ms=8_000)
        c.tick(9_001)  # every original replica stopped: only 4 is left in the ISR
        state = c.partition("t", 0)
        assert (state.leader, state.isr) == (4, (4,))
        code, message = reassign(c, ("t", 0, None))[0]
        if unclean:
            assert code == ErrorCode.NONE
            state = c.partition("t", 0)
            assert (state.replicas, state.isr, state.adding_replicas) == ((1, 2, 3), (1,), ())
            assert state.leader == NO_LEADER  # 1 is fenced: offline until it comes back
        else:
            assert code == ErrorCode.INVALID_REPLICA_ASSIGNMENT and "unclean" in message
            assert c.partition("t", 0) == state


def test_a_removing_leader_that_is_fenced_hands_over_and_the_move_completes(cluster):
    reassign(cluster, ("t", 0, (4, 2, 3)))
    cluster.keep_alive(2, 3, 4, now_ms=8_000)
    cluster.tick(9_001)  # broker 1 (leader, being removed) is fenced
    state = cluster.partition("t", 0)
    assert state.leader in (2, 3) and 1 not in state.isr
    assert state.adding_replicas == (4,)  # 4 has not caught up: the move waits for it
    cluster.alter_isr("t", 0, state.isr + (4,))
    state = cluster.partition("t", 0)
    assert (state.replicas, state.adding_replicas, state.removing_replicas) == ((4, 2, 3), (), ())


def test_decommission_is_refused_while_the_broker_runs_or_holds_replicas(cluster):
    response = cluster.run(UnregisterBrokerRequest(1))
    assert response.error_code == ErrorCode.INVALID_REQUEST and "still running" in response.message
    cluster.keep_alive(2, 3, 4, now_ms=8_000)
    cluster.tick(9_001)  # broker 1 stopped: fenced
    response = cluster.run(UnregisterBrokerRequest(1))
    assert response.error_code == ErrorCode.INVALID_REQUEST and "t-0" in response.message
    assert cluster.image.cluster.broker(1) is not None
    reassign(cluster, ("t", 0, (4, 2, 3)))
    cluster.alter_isr("t", 0, cluster.partition("t", 0).isr + (4,))
    assert 1 not in cluster.partition("t", 0).replicas
    assert cluster.run(UnregisterBrokerRequest(1)).error_code == ErrorCode.NONE
    assert cluster.image.cluster.broker(1) is None


def test_automatic_preferred_leader_balancing_after_the_check_interval():
    c = Cluster(ControllerConfig(leader_imbalance_check_interval_ms=60_000))
    c.start_brokers(1, 2, 3)
    c.controller.become_active(0)
    c.create_topic("b", 6, 3)
    preferred = {p: s.replicas[0] for p, s in c.topic("b").partitions.items()}
    c.tick_until(8_000)
    c.keep_alive(2, 3, now_ms=8_000)
    c.tick_until(9_001)  # broker 1 fenced: its partitions move away
    assert all(s.leader != 1 for s in c.topic("b").partitions.values())
    c.heartbeat(1)  # back and unfenced; the ISR is expanded by the leaders as followers catch up
    for p, s in c.topic("b").partitions.items():
        if 1 not in s.isr:
            c.alter_isr("b", p, s.isr + (1,))
    c.keep_alive(1, 2, 3, now_ms=30_000)
    assert c.tick(30_000).balanced_partitions == ()  # not yet: the check runs every 60 s
    assert any(s.leader != preferred[p] for p, s in c.topic("b").partitions.items())
    c.keep_alive(1, 2, 3, now_ms=60_000)
    balanced = c.tick(60_000).balanced_partitions
    assert balanced and all(s.leader == preferred[p] for p, s in c.topic("b").partitions.items())


def test_balancing_stays_below_the_imbalance_percentage_and_can_be_off():
    for config, moved in ((ControllerConfig(leader_imbalance_per_broker_percentage=50), False),
                          (ControllerConfig(auto_leader_rebalance_enable=False), False),
                          (ControllerConfig(), True)):
        c = Cluster(config)
        c.start_brokers(1, 2, 3)
        c.controller.become_active(0)
        c.create_topic("b", 6, 3)  # broker 1 is preferred for 2 partitions
        led_by_1 = [p for p, s in c.topic("b").partitions.items() if s.leader == 1]
        # Move one of broker 1's two leaderships away (1 of 2 = 50 %): a reorder makes another replica the
        # preferred one, a preferred election moves the leadership there, the old order comes back.
        p = led_by_1[0]
        state = c.partition("b", p)
        reassign(c, ("b", p, state.replicas[1:] + state.replicas[:1]))
        c.run(ElectLeadersRequest(ElectionType.PREFERRED, (TopicPartitions("b", (p,)),)))
        reassign(c, ("b", p, state.replicas))  # back to the original order; the leadership stays moved
        assert c.partition("b", p).leader != 1
        c.keep_alive(1, 2, 3, now_ms=300_000)
        c.tick(300_000)
        assert (c.partition("b", p).leader == 1) is moved
