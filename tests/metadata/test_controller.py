"""Quorum controller scenarios: values checked against Kafka's KRaft behaviour."""

import collections
import random

import pytest

from metadata.controller import ControllerConfig, QuorumController
from metadata.records import (
    NO_LEADER,
    BrokerRegistrationChangeRecord,
    PartitionChangeRecord,
    RegisterBrokerRecord,
    decode_record_batch,
)
from metadata.requests import (
    AllocateProducerIdsRequest,
    AlterConfigOp,
    AlterConfigsRequest,
    AlterPartitionRequest,
    AlterableConfig,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    ConfigResource,
    CreatableTopic,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    ElectionType,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReplicaAssignment,
    TopicPartitions,
    UnregisterBrokerRequest,
)
from partitions.errors import ErrorCode, InvalidRequestError
from tests.metadata.harness import Cluster

TOPIC = 2
BROKER = 4


@pytest.fixture
def cluster():
    c = Cluster()
    c.start_brokers(1, 2, 3)
    return c


# ---- registration and heartbeats -------------------------------------------------------------------------


def test_registered_brokers_start_fenced_and_caught_up_heartbeats_unfence_them():
    c = Cluster()
    for broker_id in (1, 2, 3):
        assert c.register(broker_id).error_code == ErrorCode.NONE
        assert c.image.cluster.broker(broker_id).fenced is True
    epochs = [c.epoch(b) for b in (1, 2, 3)]
    assert epochs == sorted(set(epochs))
    for broker_id in (1, 2, 3):
        response = c.heartbeat(broker_id)
        assert (response.error_code, response.is_caught_up, response.is_fenced) == (ErrorCode.NONE, True, False)
    assert c.image.cluster.active_broker_ids() == (1, 2, 3)


def test_broker_behind_its_own_registration_stays_fenced():  # KRaft: caught up = replayed its registration
    c = Cluster()
    c.register(1)
    response = c.heartbeat(1, offset=c.image.provenance.raft_index - 1)
    assert (response.is_caught_up, response.is_fenced) == (False, True)
    assert c.image.cluster.broker(1).fenced is True


def test_broker_that_wants_to_stay_fenced_is_not_unfenced():
    c = Cluster()
    c.register(1)
    assert c.heartbeat(1, want_fence=True).is_fenced is True
    assert c.image.cluster.broker(1).fenced is True


def test_heartbeat_with_stale_broker_epoch_is_rejected(cluster):
    response = cluster.run(BrokerHeartbeatRequest(1, cluster.epoch(1) - 1, 100))
    assert response.error_code == ErrorCode.STALE_BROKER_EPOCH
    response = cluster.run(BrokerHeartbeatRequest(9, 0, 100))
    assert response.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED


def test_reregistration_with_a_new_incarnation_gets_a_new_epoch_and_starts_fenced(cluster):
    cluster.create_topic("t", 3, 3)
    old_epoch = cluster.epoch(2)
    cluster.tick(20_000)  # every session expired: all fenced
    response = cluster.register(2, incarnation=1)
    assert response.error_code == ErrorCode.NONE
    assert response.broker_epoch > old_epoch
    registration = cluster.image.cluster.broker(2)
    assert (registration.broker_epoch, registration.fenced) == (response.broker_epoch, True)
    assert cluster.heartbeat(2).is_fenced is False


def test_registration_retry_with_the_same_incarnation_keeps_the_epoch(cluster):
    epoch = cluster.epoch(1)
    response = cluster.register(1)
    assert (response.error_code, response.broker_epoch) == (ErrorCode.NONE, epoch)
    assert cluster.image.cluster.broker(1).fenced is False


def test_second_broker_with_a_live_id_is_refused(cluster):
    response = cluster.register(1, incarnation=5)
    assert response.error_code == ErrorCode.DUPLICATE_BROKER_REGISTRATION


def test_a_new_incarnation_naming_the_epoch_in_force_replaces_it_at_once(cluster):
    """KIP-966's previous broker epoch, read from the clean shutdown file: the process registered at that epoch
    stopped cleanly, so its registration (still active: a whole cluster stopping commits no shutdown) is replaced
    at once, with what replacing an expired one does: a new epoch, fenced, leaderships moved away. A file naming
    any other epoch (left by a process before the one that crashed since) proves nothing: refused."""
    cluster.create_topic("t", 3, 3)
    led_by_1 = [p for p, s in cluster.topic("t").partitions.items() if s.leader == 1]
    assert led_by_1
    old_epoch = cluster.epoch(1)
    for stale in (old_epoch - 1, old_epoch + 1):
        assert cluster.register(1, incarnation=1, previous_epoch=stale).error_code == \
            ErrorCode.DUPLICATE_BROKER_REGISTRATION
    assert cluster.image.cluster.broker(1).broker_epoch == old_epoch
    response = cluster.register(1, incarnation=1, previous_epoch=old_epoch)  # no session has expired
    assert response.error_code == ErrorCode.NONE and response.broker_epoch > old_epoch
    registration = cluster.image.cluster.broker(1)
    assert (registration.broker_epoch, registration.fenced) == (response.broker_epoch, True)
    for p, state in cluster.topic("t").partitions.items():
        assert state.leader != 1 and 1 not in state.isr


def test_the_previous_broker_epoch_is_a_tagged_field_an_older_controller_skips():
    from metadata.codec import TAGGED_KEY
    import cbor2

    from metadata.requests import decode_request, encode_request

    plain = BrokerRegistrationRequest(1, b"i" * 16, "127.0.0.1", 9001)
    assert TAGGED_KEY not in cbor2.loads(encode_request(plain))  # -1: not written at all
    named = BrokerRegistrationRequest(1, b"i" * 16, "127.0.0.1", 9001, previous_broker_epoch=7)
    document = cbor2.loads(encode_request(named))
    assert document[TAGGED_KEY] == {"previous_broker_epoch": 7}
    assert decode_request(encode_request(named)) == named


def test_reregistration_after_session_expiry_moves_leadership_away_before_fencing_tick(cluster):
    cluster.create_topic("t", 3, 3)
    led_by_1 = [p for p, s in cluster.topic("t").partitions.items() if s.leader == 1]
    assert led_by_1
    cluster.keep_alive(2, 3, now_ms=8_000)
    assert cluster.register(1, incarnation=1).error_code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    cluster.now_ms = 9_001  # broker 1's session has expired, but no tick has fenced it yet
    assert cluster.register(1, incarnation=1).error_code == ErrorCode.NONE
    assert cluster.image.cluster.broker(1).fenced is True
    for p, state in cluster.topic("t").partitions.items():
        assert state.leader != 1 and 1 not in state.isr
        if p in led_by_1:
            assert state.leader_epoch == 1


# ---- topic creation --------------------------------------------------------------------------------------


def test_six_partitions_rf3_spread_leaders_and_replicas_evenly(cluster):
    result = cluster.create_topic("orders", 6, 3)
    assert (result.error_code, result.num_partitions, result.replication_factor) == (ErrorCode.NONE, 6, 3)
    assert len(result.topic_id) == 16 and any(result.topic_id)
    partitions = cluster.topic("orders").partitions
    assert sorted(partitions) == [0, 1, 2, 3, 4, 5]
    leaders = collections.Counter(state.leader for state in partitions.values())
    assert leaders == {1: 2, 2: 2, 3: 2}
    for position in range(3):  # every broker holds every replica position twice
        assert collections.Counter(s.replicas[position] for s in partitions.values()) == {1: 2, 2: 2, 3: 2}
    followers = collections.Counter((s.replicas[0], s.replicas[1]) for s in partitions.values())
    assert len(followers) == 6  # the second replica differs between the two partitions a broker leads
    for state in partitions.values():
        assert len(set(state.replicas)) == 3
        assert state.isr == state.replicas
        assert state.leader == state.replicas[0]
        assert (state.leader_epoch, state.partition_epoch) == (0, 0)


def test_create_topic_uses_the_configured_defaults():
    c = Cluster(ControllerConfig(default_num_partitions=4, default_replication_factor=2))
    c.start_brokers(1, 2, 3)
    result = c.create_topic("d", -1, -1)
    assert (result.num_partitions, result.replication_factor) == (4, 2)


def test_rack_aware_placement_puts_replicas_in_different_racks():
    c = Cluster()
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    c.start_brokers(*racks, racks=racks)
    c.create_topic("r", 12, 3)
    for state in c.topic("r").partitions.values():
        assert len({racks[b] for b in state.replicas}) == 3, state
    assert collections.Counter(s.leader for s in c.topic("r").partitions.values()) == {b: 2 for b in racks}


@pytest.mark.parametrize(
    "name, partitions, rf, code",
    [
        ("", 1, 1, ErrorCode.INVALID_TOPIC_EXCEPTION),
        (".", 1, 1, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("..", 1, 1, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("a" * 250, 1, 1, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("bad name", 1, 1, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("caf\u00e9", 1, 1, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("ok", 0, 1, ErrorCode.INVALID_PARTITIONS),
        ("ok", -5, 1, ErrorCode.INVALID_PARTITIONS),
        ("ok", 1, 4, ErrorCode.INVALID_REPLICATION_FACTOR),
        ("ok", 1, 0, ErrorCode.INVALID_REPLICATION_FACTOR),
    ],
)
def test_create_topic_rejects_bad_requests(cluster, name, partitions, rf, code):
    result = cluster.create_topic(name, partitions, rf)
    assert result.error_code == code, result
    assert not cluster.image.topics.by_name


def test_topic_names_up_to_249_legal_chars_are_accepted(cluster):
    assert cluster.create_topic("a" * 249, 1, 1).error_code == ErrorCode.NONE
    assert cluster.create_topic("A-z_0.9", 1, 1).error_code == ErrorCode.NONE


def test_existing_and_colliding_topic_names_are_refused(cluster):
    assert cluster.create_topic("a.b", 1, 1).error_code == ErrorCode.NONE
    assert cluster.create_topic("a.b", 1, 1).error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    collision = cluster.create_topic("a_b", 1, 1)
    assert collision.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION and "collides" in collision.message


def test_duplicate_names_in_one_request_fail_every_copy(cluster):
    topics = (CreatableTopic("x", 1, 1), CreatableTopic("x", 1, 1), CreatableTopic("y", 1, 1))
    response = cluster.run(CreateTopicsRequest(topics))
    assert [t.error_code for t in response.topics] == [
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.NONE,
    ]
    assert sorted(cluster.image.topics.by_name) == ["y"]


def test_replication_factor_counts_only_unfenced_brokers(cluster):
    cluster.keep_alive(1, 2, now_ms=5_000)
    cluster.tick(10_000)  # broker 3 fenced
    result = cluster.create_topic("t", 1, 3)
    assert result.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert "only 2 broker(s)" in result.message


def test_validate_only_writes_nothing(cluster):
    response = cluster.run(CreateTopicsRequest((CreatableTopic("v", 3, 2),), validate_only=True))
    assert response.topics[0].error_code == ErrorCode.NONE
    assert "v" not in cluster.image.topics.by_name
    assert cluster.controller.handle(CreateTopicsRequest((CreatableTopic("v", 3, 2),), True), 0).records == []


def test_manual_assignment_sets_replicas_and_isr_of_active_brokers(cluster):
    cluster.keep_alive(1, 2, now_ms=5_000)
    cluster.tick(10_000)  # broker 3 fenced
    assignments = (ReplicaAssignment(0, (3, 2)), ReplicaAssignment(1, (1, 3)))
    result = cluster.create_topic("m", -1, -1, assignments=assignments)
    assert result.error_code == ErrorCode.NONE
    p0, p1 = cluster.partition("m", 0), cluster.partition("m", 1)
    assert (p0.replicas, p0.isr, p0.leader) == ((3, 2), (2,), 2)
    assert (p1.replicas, p1.isr, p1.leader) == ((1, 3), (1,), 1)


@pytest.mark.parametrize(
    "assignments, fragment",
    [
        ((ReplicaAssignment(0, (1, 1)),), "duplicated"),
        ((ReplicaAssignment(0, (1, 9)),), "no such broker"),
        ((ReplicaAssignment(1, (1, 2)),), "numbered 0..n-1"),
    ],
)
def test_bad_manual_assignments_are_refused(cluster, assignments, fragment):
    result = cluster.create_topic("m", -1, -1, assignments=assignments)
    assert result.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT and fragment in result.message


# ---- configs ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key, value",
    [
        ("retention.ms", "-2"),
        ("retention.ms", "soon"),
        ("retention.bytes", "1.5"),
        ("segment.bytes", "13"),
        ("segment.ms", "0"),
        ("cleanup.policy", "shred"),
        ("cleanup.policy", ""),
        ("min.insync.replicas", "0"),
        ("min.insync.replicas", "4"),  # more than the replication factor of 3
        ("max.message.bytes", "-1"),
        ("max.message.bytes", str(2**31)),
        ("message.timestamp.type", "WallClock"),
        ("unclean.leader.election.enable", "yes"),
        ("flush.messages", "0"),
        ("flush.ms", "-1"),
        ("delete.retention.ms", "-1"),
        ("min.compaction.lag.ms", "x"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("compression.type", "brotli"),
        ("no.such.config", "1"),
    ],
)
def test_invalid_topic_configs_are_refused_naming_the_key(cluster, key, value):
    result = cluster.create_topic("c", 1, 3, configs={key: value})
    assert result.error_code == ErrorCode.INVALID_CONFIG
    assert key in result.message
    assert "c" not in cluster.image.topics.by_name


def test_valid_topic_configs_are_stored(cluster):
    configs = {
        "retention.ms": "-1",
        "cleanup.policy": "compact,delete",
        "min.insync.replicas": "2",
        "unclean.leader.election.enable": "TRUE",
        "compression.type": "zstd",
        "min.cleanable.dirty.ratio": "0.25",
    }
    assert cluster.create_topic("c", 1, 3, configs=configs).error_code == ErrorCode.NONE
    assert dict(cluster.image.configs.topic("c")) == configs


def test_incremental_alter_configs_set_delete_append_subtract(cluster):
    cluster.create_topic("c", 1, 3, configs={"retention.ms": "1000", "cleanup.policy": "delete"})
    ops = (
        AlterableConfig("retention.ms", None, AlterConfigOp.DELETE),
        AlterableConfig("segment.ms", "60000", AlterConfigOp.SET),
        AlterableConfig("cleanup.policy", "compact", AlterConfigOp.APPEND),
    )
    response = cluster.run(IncrementalAlterConfigsRequest((ConfigResource(TOPIC, "c", ops),)))
    assert response.resources[0].error_code == ErrorCode.NONE
    assert dict(cluster.image.configs.topic("c")) == {"segment.ms": "60000", "cleanup.policy": "delete,compact"}
    subtract = (AlterableConfig("cleanup.policy", "delete", AlterConfigOp.SUBTRACT),)
    cluster.run(IncrementalAlterConfigsRequest((ConfigResource(TOPIC, "c", subtract),)))
    assert cluster.image.configs.topic("c")["cleanup.policy"] == "compact"
    append_to_number = (AlterableConfig("segment.ms", "1", AlterConfigOp.APPEND),)
    response = cluster.run(IncrementalAlterConfigsRequest((ConfigResource(TOPIC, "c", append_to_number),)))
    assert response.resources[0].error_code == ErrorCode.INVALID_CONFIG and "segment.ms" in response.resources[0].message


def test_a_min_compaction_lag_above_the_max_is_refused_at_creation_and_alteration(cluster):
    """Kafka's LogConfig.validateValues: min.compaction.lag.ms may not exceed max.compaction.lag.ms."""
    refused = cluster.create_topic("c", 1, 3, configs={"min.compaction.lag.ms": "70000",
                                                       "max.compaction.lag.ms": "60000"})
    assert refused.error_code == ErrorCode.INVALID_CONFIG and refused.message == (
        "conflict topic config setting min.compaction.lag.ms (70000) > max.compaction.lag.ms (60000)")
    assert cluster.create_topic("c", 1, 3, configs={"max.compaction.lag.ms": "60000"}).error_code == ErrorCode.NONE
    raise_min = (AlterableConfig("min.compaction.lag.ms", "70000", AlterConfigOp.SET),)
    response = cluster.run(IncrementalAlterConfigsRequest((ConfigResource(TOPIC, "c", raise_min),)))
    assert response.resources[0].error_code == ErrorCode.INVALID_CONFIG
    assert dict(cluster.image.configs.topic("c")) == {"max.compaction.lag.ms": "60000"}
    both = (AlterableConfig("min.compaction.lag.ms", "70000", AlterConfigOp.SET),
            AlterableConfig("max.compaction.lag.ms", None, AlterConfigOp.DELETE))
    response = cluster.run(IncrementalAlterConfigsRequest((ConfigResource(TOPIC, "c", both),)))
    assert response.resources[0].error_code == ErrorCode.NONE


def test_legacy_alter_configs_replaces_the_whole_set(cluster):
    cluster.create_topic("c", 1, 3, configs={"retention.ms": "1000", "segment.ms": "5000"})
    configs = (AlterableConfig("retention.bytes", "1048576"),)
    response = cluster.run(AlterConfigsRequest((ConfigResource(TOPIC, "c", configs),)))
    assert response.resources[0].error_code == ErrorCode.NONE
    assert dict(cluster.image.configs.topic("c")) == {"retention.bytes": "1048576"}


def test_alter_configs_errors_per_resource_and_validate_only(cluster):
    cluster.create_topic("c", 1, 3)
    resources = (
        ConfigResource(TOPIC, "c", (AlterableConfig("segment.bytes", "10", AlterConfigOp.SET),)),
        ConfigResource(TOPIC, "missing", (AlterableConfig("segment.ms", "10", AlterConfigOp.SET),)),
        ConfigResource(BROKER, "", (AlterableConfig("log.retention.ms", "1000", AlterConfigOp.SET),)),
        ConfigResource(BROKER, "one", (AlterableConfig("log.retention.ms", "1000", AlterConfigOp.SET),)),
        ConfigResource(BROKER, "1", (AlterableConfig("log.dirs", "/tmp", AlterConfigOp.SET),)),
    )
    response = cluster.run(IncrementalAlterConfigsRequest(resources))
    codes = [r.error_code for r in response.resources]
    assert codes == [
        ErrorCode.INVALID_CONFIG,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NONE,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_CONFIG,
    ]
    assert "segment.bytes" in response.resources[0].message and "log.dirs" in response.resources[4].message
    assert dict(cluster.image.configs.get(BROKER, "")) == {"log.retention.ms": "1000"}
    dry = IncrementalAlterConfigsRequest(
        (ConfigResource(TOPIC, "c", (AlterableConfig("segment.ms", "10", AlterConfigOp.SET),)),), validate_only=True
    )
    result = cluster.controller.handle(dry, 0)
    assert result.records == [] and result.response.resources[0].error_code == ErrorCode.NONE


def test_min_insync_replicas_above_replication_factor_is_refused_on_alter(cluster):
    cluster.create_topic("c", 1, 2)
    ops = (AlterableConfig("min.insync.replicas", "3", AlterConfigOp.SET),)
    response = cluster.run(IncrementalAlterConfigsRequest((ConfigResource(TOPIC, "c", ops),)))
    assert response.resources[0].error_code == ErrorCode.INVALID_CONFIG
    assert "min.insync.replicas" in response.resources[0].message


# ---- fencing and elections -------------------------------------------------------------------------------


def test_heartbeat_timeout_fences_broker_and_isr_members_take_over_with_higher_epochs(cluster):
    cluster.create_topic("t", 6, 3)
    before = dict(cluster.topic("t").partitions)
    cluster.keep_alive(1, 2, now_ms=8_000)
    assert cluster.tick(9_000).fenced_broker_ids == ()  # Kafka: expired only after the full 9000 ms
    response = cluster.tick(9_001)
    assert response.fenced_broker_ids == (3,)
    assert cluster.image.cluster.broker(3).fenced is True
    for partition, state in cluster.topic("t").partitions.items():
        old = before[partition]
        assert 3 not in state.isr and state.leader in (1, 2)
        assert state.isr == tuple(b for b in old.isr if b != 3)
        assert state.partition_epoch == old.partition_epoch + 1
        if old.leader == 3:
            assert state.leader == next(b for b in old.replicas if b != 3)  # first live ISR member, replica order
            assert state.leader_epoch == old.leader_epoch + 1
        else:
            assert (state.leader, state.leader_epoch) == (old.leader, old.leader_epoch)


@pytest.mark.parametrize("bug", [False, True])
def test_a_controller_back_from_a_stall_fences_no_broker_for_the_time_it_did_not_run(bug):
    c = Cluster()
    c.start_brokers(1, 2, 3)
    c.controller.become_active(0)
    c.controller.bug_sessions_count_stalls = bug
    c.tick_until(8_000)  # running: a tick every 250 ms
    c.keep_alive(1, 2, 3, now_ms=8_000)
    # Stopped from 8,000 to 20,000 (a paused process, a stalled host): the heartbeats of that time wait in its
    # sockets, unhandled. Its first tick back must not count the stall against the brokers' sessions.
    fenced = c.tick(20_000).fenced_broker_ids
    if bug:
        assert fenced == (1, 2, 3)
        return
    assert fenced == ()
    c.keep_alive(1, 2, now_ms=20_000)  # the waiting heartbeats of 1 and 2; broker 3 has really gone
    c.tick_until(28_000)
    c.keep_alive(1, 2, now_ms=28_000)
    c.tick_until(29_000)
    assert not c.image.cluster.broker(3).fenced  # 9,000 ms of running time since its last contact
    assert c.tick(29_001).fenced_broker_ids == (3,)


def test_fenced_broker_returns_as_follower_and_rejoins_isr_through_alter_partition(cluster):
    cluster.create_topic("t", 3, 3)
    cluster.keep_alive(1, 2, now_ms=8_000)
    cluster.tick(9_001)
    led_before = {p: s.leader for p, s in cluster.topic("t").partitions.items()}
    assert cluster.heartbeat(3).is_fenced is False
    assert {p: s.leader for p, s in cluster.topic("t").partitions.items()} == led_before
    for partition, state in cluster.topic("t").partitions.items():
        assert 3 not in state.isr
        response = cluster.alter_isr("t", partition, state.isr + (3,))
        assert response.error_code == ErrorCode.NONE
        assert response.partition_epoch == state.partition_epoch + 1
        assert cluster.partition("t", partition).isr == state.isr + (3,)
        assert cluster.partition("t", partition).leader_epoch == state.leader_epoch


def _shrink_to_leader(cluster, name, partition):
    state = cluster.partition(name, partition)
    assert cluster.alter_isr(name, partition, (state.leader,)).error_code == ErrorCode.NONE
    return cluster.partition(name, partition)


def test_sole_isr_leader_fenced_leaves_partition_offline_without_unclean_election(cluster):
    cluster.create_topic("t", 1, 3)
    state = _shrink_to_leader(cluster, "t", 0)
    leader = state.leader
    others = [b for b in (1, 2, 3) if b != leader]
    cluster.keep_alive(*others, now_ms=8_000)
    cluster.tick(9_001)
    after = cluster.partition("t", 0)
    assert (after.leader, after.isr) == (NO_LEADER, (leader,))  # the last ISR member is remembered
    assert after.leader_epoch == state.leader_epoch + 1


def test_unclean_election_picks_a_live_out_of_sync_replica_only_when_configured(cluster):
    cluster.create_topic("t", 1, 3, configs={"unclean.leader.election.enable": "true"})
    state = _shrink_to_leader(cluster, "t", 0)
    leader = state.leader
    cluster.keep_alive(*[b for b in (1, 2, 3) if b != leader], now_ms=8_000)
    cluster.tick(9_001)
    after = cluster.partition("t", 0)
    expected = next(b for b in state.replicas if b != leader)
    assert (after.leader, after.isr) == (expected, (expected,))
    assert after.leader_epoch == state.leader_epoch + 1


def test_cluster_wide_unclean_default_applies_when_the_topic_does_not_say():
    c = Cluster(ControllerConfig(unclean_leader_election_enable=True))
    c.start_brokers(1, 2)
    c.create_topic("t", 1, 2)
    state = _shrink_to_leader(c, "t", 0)
    other = 3 - state.leader
    c.keep_alive(other, now_ms=8_000)
    c.tick(9_001)
    assert c.partition("t", 0).leader == other


def test_enabling_unclean_election_later_elects_an_offline_partition_on_tick(cluster):
    cluster.create_topic("t", 1, 3)
    state = _shrink_to_leader(cluster, "t", 0)
    others = [b for b in (1, 2, 3) if b != state.leader]
    cluster.keep_alive(*others, now_ms=8_000)
    cluster.tick(9_001)
    assert cluster.partition("t", 0).leader == NO_LEADER
    ops = (AlterableConfig("unclean.leader.election.enable", "true", AlterConfigOp.SET),)
    cluster.run(IncrementalAlterConfigsRequest((ConfigResource(TOPIC, "t", ops),)))
    assert cluster.tick(9_002).elected_partitions == (("t", 0),)
    assert cluster.partition("t", 0).leader == next(b for b in state.replicas if b != state.leader)


def test_offline_partition_elects_its_last_isr_member_when_it_comes_back(cluster):
    cluster.create_topic("t", 1, 3)
    state = _shrink_to_leader(cluster, "t", 0)
    leader = state.leader
    cluster.keep_alive(*[b for b in (1, 2, 3) if b != leader], now_ms=8_000)
    cluster.tick(9_001)
    assert cluster.partition("t", 0).leader == NO_LEADER
    assert cluster.heartbeat(leader).is_fenced is False
    after = cluster.partition("t", 0)
    assert (after.leader, after.isr, after.leader_epoch) == (leader, (leader,), state.leader_epoch + 2)


def test_unregistering_a_stopped_broker_without_replicas_removes_it(cluster):
    cluster.keep_alive(1, 3, now_ms=8_000)
    cluster.tick(9_001)  # broker 2 stopped: fenced
    assert cluster.run(UnregisterBrokerRequest(2)).error_code == ErrorCode.NONE
    assert cluster.image.cluster.broker(2) is None
    assert cluster.run(UnregisterBrokerRequest(2)).error_code == ErrorCode.BROKER_ID_NOT_REGISTERED
    # (refusals while it runs or holds replicas: tests/metadata/test_reassignment.py)


# ---- controlled shutdown ----------------------------------------------------------------------------------


def test_controlled_shutdown_moves_leadership_before_should_shut_down(cluster):
    cluster.create_topic("t", 6, 3)
    result = cluster.controller.handle(
        BrokerHeartbeatRequest(2, cluster.epoch(2), cluster.image.provenance.raft_index, want_shutdown=True), 100
    )
    assert result.response.should_shut_down is True
    changes = [r for r in result.records if isinstance(r, PartitionChangeRecord)]
    assert isinstance(result.records[0], BrokerRegistrationChangeRecord)
    assert result.records[0].in_controlled_shutdown is True
    assert len(changes) == 6  # broker 2 is in every ISR
    assert sum(1 for r in changes if r.leader is not None) == 2  # and led two partitions
    cluster.commit(result.records)  # the response goes out only after this
    for state in cluster.topic("t").partitions.values():
        assert state.leader != 2 and 2 not in state.isr
    assert cluster.image.cluster.broker(2).in_controlled_shutdown is True
    assert cluster.create_topic("u", 1, 3).error_code == ErrorCode.INVALID_REPLICATION_FACTOR


def test_shutting_down_broker_may_not_rejoin_an_isr(cluster):
    cluster.create_topic("t", 1, 3)
    cluster.heartbeat(3, want_shutdown=True)
    state = cluster.partition("t", 0)
    response = cluster.alter_isr("t", 0, state.isr + (3,))
    assert response.error_code == ErrorCode.INELIGIBLE_REPLICA


def test_sole_isr_leader_in_controlled_shutdown_leaves_partition_offline(cluster):
    cluster.create_topic("t", 1, 3)
    state = _shrink_to_leader(cluster, "t", 0)
    response = cluster.heartbeat(state.leader, want_shutdown=True)
    assert response.should_shut_down is True
    assert (cluster.partition("t", 0).leader, cluster.partition("t", 0).isr) == (NO_LEADER, (state.leader,))


# ---- AlterPartition ----------------------------------------------------------------------------------------


def test_alter_partition_is_accepted_only_from_the_current_leader_at_current_epochs(cluster):
    cluster.create_topic("t", 1, 3)
    state = cluster.partition("t", 0)
    follower = state.replicas[1]
    shrunk = tuple(b for b in state.isr if b != state.replicas[2])
    cases = [
        (dict(partition_epoch=state.partition_epoch - 1), ErrorCode.INVALID_UPDATE_VERSION),
        (dict(partition_epoch=state.partition_epoch + 1), ErrorCode.INVALID_UPDATE_VERSION),
        (dict(leader_epoch=state.leader_epoch - 1), ErrorCode.FENCED_LEADER_EPOCH),
        (dict(broker_id=follower, broker_epoch=cluster.epoch(follower)), ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (dict(broker_epoch=cluster.epoch(state.leader) + 1), ErrorCode.STALE_BROKER_EPOCH),
        (dict(topic_id=b"\x09" * 16), ErrorCode.UNKNOWN_TOPIC_ID),
        (dict(partition=7), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (dict(new_isr=(follower,)), ErrorCode.INVALID_REQUEST),  # leaves the leader out
        (dict(new_isr=state.isr + (9,)), ErrorCode.INVALID_REQUEST),  # not a replica
    ]
    for overrides, code in cases:
        assert cluster.alter_isr("t", 0, shrunk, **overrides).error_code == code, overrides
        assert cluster.partition("t", 0) == state
    response = cluster.alter_isr("t", 0, shrunk)
    assert response.error_code == ErrorCode.NONE
    assert (response.isr, response.leader, response.leader_epoch, response.partition_epoch) == (
        shrunk,
        state.leader,
        state.leader_epoch,
        state.partition_epoch + 1,
    )
    stale = cluster.alter_isr("t", 0, state.isr, partition_epoch=state.partition_epoch)
    assert stale.error_code == ErrorCode.INVALID_UPDATE_VERSION


def test_alter_partition_refuses_fenced_isr_members(cluster):
    cluster.create_topic("t", 1, 3)
    state = cluster.partition("t", 0)
    out = state.replicas[2]
    cluster.alter_isr("t", 0, state.isr[:2])
    cluster.keep_alive(*state.isr[:2], now_ms=8_000)
    cluster.tick(9_001)
    assert cluster.alter_isr("t", 0, state.isr).error_code == ErrorCode.INELIGIBLE_REPLICA
    assert out not in cluster.partition("t", 0).isr


def test_alter_partitions_commits_many_items_in_one_entry_each_judged_alone(cluster):
    from metadata.requests import AlterPartitionRequest, AlterPartitionsRequest

    cluster.create_topic("t", 6, 3)
    states = [cluster.partition("t", p) for p in range(6)]
    leader = states[0].leader
    own = [p for p, state in enumerate(states) if state.leader == leader]
    assert len(own) >= 2
    topic_id, epoch = cluster.topic("t").topic_id, cluster.epoch(leader)
    shrunk = {p: (leader,) + tuple(b for b in states[p].isr if b != leader)[:1] for p in own}
    items = [AlterPartitionRequest(leader, epoch, topic_id, p, states[p].leader_epoch, states[p].partition_epoch,
                                   shrunk[p]) for p in own]
    again = AlterPartitionRequest(leader, epoch, topic_id, own[0], states[own[0]].leader_epoch,
                                  states[own[0]].partition_epoch, (leader,))  # the same partition twice
    result = cluster.controller.handle(AlterPartitionsRequest(leader, epoch, tuple(items) + (again,)), cluster.now_ms)
    assert len(result.records) == len(own)  # one Raft entry carries every change
    cluster.commit(result.records)
    assert [r.error_code for r in result.response.items] == [ErrorCode.NONE] * len(own) + [ErrorCode.INVALID_REQUEST]
    for p, item in zip(own, result.response.items):
        assert cluster.partition("t", p).isr == item.isr == shrunk[p]
        assert cluster.partition("t", p).partition_epoch == states[p].partition_epoch + 1


# ---- delete, create partitions, elect leaders, producer ids ------------------------------------------------


def test_delete_topics_removes_topic_partitions_and_configs(cluster):
    cluster.create_topic("gone", 2, 2, configs={"retention.ms": "5"})
    response = cluster.run(DeleteTopicsRequest(("gone", "never")))
    assert [t.error_code for t in response.topics] == [ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert "gone" not in cluster.image.topics.by_name and not cluster.image.topics.by_id
    assert not cluster.image.configs.topic("gone")
    assert cluster.create_topic("gone", 1, 1).error_code == ErrorCode.NONE
    assert not cluster.image.configs.topic("gone")


def test_a_deletion_by_id_leaves_a_topic_created_again_under_the_name_alone(cluster):
    # DeleteTopics v6 by id: the asking broker resolved the id to a name from its image; the controller deletes
    # only while the name still has that id (Kafka's controller deletes by id).
    cluster.create_topic("again", 1, 1)
    old_id = cluster.image.topics.by_name["again"].topic_id
    assert cluster.run(DeleteTopicsRequest(("again",))).topics[0].error_code == ErrorCode.NONE
    cluster.create_topic("again", 1, 1)
    new_id = cluster.image.topics.by_name["again"].topic_id
    stale = cluster.run(DeleteTopicsRequest(("again",), topic_ids=(old_id,)))
    assert [t.error_code for t in stale.topics] == [ErrorCode.UNKNOWN_TOPIC_ID]
    assert cluster.image.topics.by_name["again"].topic_id == new_id
    mismatched = cluster.run(DeleteTopicsRequest(("again",), topic_ids=(new_id, old_id)))
    assert [t.error_code for t in mismatched.topics] == [ErrorCode.INVALID_REQUEST]
    assert cluster.run(DeleteTopicsRequest(("again",), topic_ids=(new_id,))).topics[0].error_code == ErrorCode.NONE
    assert "again" not in cluster.image.topics.by_name
    from metadata.requests import decode_request, encode_request
    request = DeleteTopicsRequest(("a", "b"), topic_ids=(b"", new_id))
    assert decode_request(encode_request(request)) == request


def test_create_partitions_adds_spread_partitions(cluster):
    cluster.create_topic("t", 3, 2)
    assert cluster.run(CreatePartitionsRequest("t", 3)).error_code == ErrorCode.INVALID_PARTITIONS
    assert cluster.run(CreatePartitionsRequest("nope", 4)).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert cluster.run(CreatePartitionsRequest("t", 6)).error_code == ErrorCode.NONE
    partitions = cluster.topic("t").partitions
    assert sorted(partitions) == list(range(6))
    assert collections.Counter(s.leader for s in partitions.values()) == {1: 2, 2: 2, 3: 2}
    assert all(len(s.replicas) == 2 for s in partitions.values())
    bad = CreatePartitionsRequest("t", 7, assignments=(ReplicaAssignment(6, (1,)),))
    assert cluster.run(bad).error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    good = CreatePartitionsRequest("t", 7, assignments=(ReplicaAssignment(6, (3, 1)),))
    assert cluster.run(good).error_code == ErrorCode.NONE
    assert cluster.partition("t", 6).replicas == (3, 1)


def test_preferred_leader_election_restores_the_first_replica(cluster):
    cluster.create_topic("t", 3, 3)
    cluster.keep_alive(1, 2, now_ms=8_000)
    cluster.tick(9_001)
    cluster.heartbeat(3)
    moved = [p for p, s in cluster.topic("t").partitions.items() if s.replicas[0] == 3]
    for p in moved:
        state = cluster.partition("t", p)
        cluster.alter_isr("t", p, state.isr + (3,))
    response = cluster.run(ElectLeadersRequest(ElectionType.PREFERRED, (TopicPartitions("t", (0, 1, 2)),)))
    codes = {r.partition: r.error_code for r in response.partitions}
    for p in range(3):
        expected = ErrorCode.NONE if p in moved else ErrorCode.ELECTION_NOT_NEEDED
        assert codes[p] == expected
        assert cluster.partition("t", p).leader == cluster.partition("t", p).replicas[0]


def test_producer_id_blocks_never_overlap(cluster):
    blocks = []
    for i in range(30):
        broker_id = 1 + i % 3
        response = cluster.run(AllocateProducerIdsRequest(broker_id, cluster.epoch(broker_id)))
        assert (response.error_code, response.producer_id_len) == (ErrorCode.NONE, 1000)
        blocks.append(range(response.producer_id_start, response.producer_id_start + response.producer_id_len))
    starts = [b.start for b in blocks]
    assert starts == sorted(starts) and starts[0] == 0
    for first, second in zip(blocks, blocks[1:]):
        assert first.stop <= second.start
    stale = cluster.run(AllocateProducerIdsRequest(1, cluster.epoch(1) - 1))
    assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH
    follower = QuorumController(ControllerConfig(), random.Random(99))
    follower.load_snapshot(cluster.controller.snapshot(), cluster.image.provenance)
    follower.become_active(0)
    next_block = follower.handle(AllocateProducerIdsRequest(2, cluster.epoch(2)), 0).response
    assert next_block.producer_id_start == blocks[-1].stop


# ---- handle / replay discipline ------------------------------------------------------------------------------


def _requests(cluster):
    topic_id = cluster.topic("t").topic_id
    state = cluster.partition("t", 0)
    return [
        BrokerRegistrationRequest(4, b"\x04" * 16, "127.0.0.1", 9004),
        BrokerHeartbeatRequest(1, cluster.epoch(1), 0, want_shutdown=True),
        BrokerHeartbeatRequest(2, cluster.epoch(2), 0, want_fence=True),
        CreateTopicsRequest((CreatableTopic("n", 4, 3, configs=()),)),
        DeleteTopicsRequest(("t",)),
        CreatePartitionsRequest("t", 5),
        IncrementalAlterConfigsRequest((ConfigResource(TOPIC, "t", (AlterableConfig("retention.ms", "7"),)),)),
        AlterConfigsRequest((ConfigResource(BROKER, "", (AlterableConfig("log.retention.ms", "7"),)),)),
        AlterPartitionRequest(
            state.leader,
            cluster.epoch(state.leader),
            topic_id,
            0,
            state.leader_epoch,
            state.partition_epoch,
            (state.leader,),
        ),
        AllocateProducerIdsRequest(3, cluster.epoch(3)),
        ElectLeadersRequest(ElectionType.UNCLEAN),
        UnregisterBrokerRequest(3),
        AlterPartitionReassignmentsRequest((ReassignablePartition("t", 0, (3, 2)),)),
    ]


def test_handle_does_not_change_the_image(cluster):
    cluster.create_topic("t", 3, 3, configs={"retention.ms": "1"})
    image = cluster.image
    for request in _requests(cluster):
        first = cluster.controller.handle(request, 1_000)
        second = cluster.controller.handle(request, 1_000)
        assert first == second, request
        assert cluster.image is image
    tick = cluster.controller.tick(60_000)
    assert tick.records and tick == cluster.controller.tick(60_000)
    assert cluster.image is image


def test_handle_rejects_objects_that_are_not_requests(cluster):
    with pytest.raises(InvalidRequestError):
        cluster.controller.handle("CreateTopics", 0)


def test_replaying_the_log_on_another_controller_gives_the_same_image(cluster):
    cluster.create_topic("t", 6, 3, configs={"cleanup.policy": "compact"})
    cluster.create_topic("u", 2, 2)
    cluster.keep_alive(1, 3, now_ms=8_000)
    cluster.tick(9_001)
    cluster.heartbeat(2)
    cluster.run(AllocateProducerIdsRequest(1, cluster.epoch(1)))
    cluster.run(DeleteTopicsRequest(("u",)))
    follower = QuorumController(ControllerConfig(), random.Random(12345))
    for entry in cluster.log:
        follower.replay_batch(decode_record_batch(entry))
    assert follower.image() == cluster.image
    assert follower.snapshot() == cluster.controller.snapshot()


def test_registration_record_is_written_fenced(cluster):
    result = cluster.controller.handle(BrokerRegistrationRequest(8, b"\x08" * 16, "h", 1), 0)
    assert isinstance(result.records[0], RegisterBrokerRecord) and result.records[0].fenced is True
