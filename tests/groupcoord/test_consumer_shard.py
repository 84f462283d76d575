"""The consumer group protocol (KIP-848) in the group coordinator shard, sans-IO, through the coordinator
runtime over a real partition log: joining, server-side assignment, incremental reconciliation (a partition
reaches its new owner only after the old one revoked it), epochs and fencing, static members, sessions,
offsets checked against member epochs, describe/list/delete, and a shard rebuilt from the log."""

from __future__ import annotations

import uuid

import pytest

from coordinator.runtime import CoordinatorRuntime
from groupcoord.assignors import range_, uniform
from groupcoord.config import GroupConfig
from groupcoord.consumer import MemberState, TopicInfo
from groupcoord.records import describe_record
from groupcoord.shard import GroupCoordinatorShard, GroupOffsetFetch, GroupRequest
from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode
from tests.coordinator.ports import LogPort

SESSION_MS = 20_000
CONFIG = GroupConfig(consumer_session_timeout_ms=SESSION_MS, consumer_heartbeat_interval_ms=1_000, group_max_size=5)
T = uuid.UUID(int=1)
U = uuid.UUID(int=2)
TOPICS = {"t": TopicInfo(T, 6), "u": TopicInfo(U, 2)}
Request = messages.ConsumerGroupHeartbeatRequest


class Coordinator:
    def __init__(self, config: GroupConfig = CONFIG, port: LogPort | None = None) -> None:
        self.port = port or LogPort(partitions=1)
        self.runtime = CoordinatorRuntime("__consumer_offsets", lambda p: GroupCoordinatorShard(p, config, self.topic_names),
                                          self.port)
        self.runtime.on_became_leader(0, 1, 0)
        self.answers: dict[int, object] = {}
        self.now = 0
        self.topics = dict(TOPICS)
        self.poll()

    @property
    def shard(self) -> GroupCoordinatorShard:
        return self.runtime.shard(0)

    def topic_names(self) -> dict[uuid.UUID, str]:
        """The broker's metadata image as the shard sees it (GroupCoordinatorShard's `topic_names`)."""
        return {info.topic_id: name for name, info in self.topics.items()}

    def poll(self) -> None:
        self.port.commit_all()
        self.answers.update(self.runtime.poll(self.now))

    def call(self, api_key: int, version: int, message):
        request_id = self.runtime.submit(0, GroupRequest(api_key, version, message, "client", "/127.0.0.1",
                                                         self.topics), self.now)
        self.poll()
        return self.answers.pop(request_id)

    def advance(self, ms: int) -> None:
        self.now += ms
        self.poll()


class Member:
    """A consumer of the protocol, as librdkafka drives it: it owns what its last assignment gave it and
    reports that on every heartbeat."""

    def __init__(self, coordinator: Coordinator, member_id: str, topics=("t",), instance_id=None, group="g",
                 assignor=None) -> None:
        self.coordinator, self.member_id, self.topics, self.instance_id = coordinator, member_id, topics, instance_id
        self.group, self.assignor = group, assignor
        self.epoch = 0
        self.owned: dict[uuid.UUID, set[int]] = {}

    def heartbeat(self, epoch: int | None = None):
        epoch = self.epoch if epoch is None else epoch
        joining = epoch == 0
        response = self.coordinator.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, Request(
            group_id=self.group, member_id=self.member_id, member_epoch=epoch, instance_id=self.instance_id,
            rebalance_timeout_ms=30_000 if joining else -1,
            subscribed_topic_names=list(self.topics) if joining else None, server_assignor=self.assignor,
            topic_partitions=[Request.TopicPartitions(topic_id=t, partitions=sorted(ps))
                              for t, ps in sorted(self.owned.items()) if ps]))
        if response.error_code == ErrorCode.NONE:
            self.epoch = response.member_epoch
            if response.assignment is not None:
                self.owned = {tp.topic_id: set(tp.partitions) for tp in response.assignment.topic_partitions}
        return response

    def partitions(self, topic_id=T) -> set[int]:
        return set(self.owned.get(topic_id, set()))


def owners_disjoint(*members: Member) -> None:
    seen: dict[tuple, str] = {}
    for member in members:
        for topic_id, partitions in member.owned.items():
            for p in partitions:
                assert (topic_id, p) not in seen, f"{topic_id}-{p} owned by {seen[(topic_id, p)]} and {member.member_id}"
                seen[(topic_id, p)] = member.member_id


def test_a_first_member_gets_every_partition_at_epoch_one():
    coordinator = Coordinator()
    a = Member(coordinator, "a")
    response = a.heartbeat()
    assert response.error_code == ErrorCode.NONE and response.member_id == "a"
    assert response.member_epoch == 1 and response.heartbeat_interval_ms == 1_000
    assert a.partitions() == set(range(6))
    group = coordinator.shard.consumer_groups["g"]
    assert (group.group_epoch, group.assignment_epoch, group.state_name) == (1, 1, "Stable")


def test_a_second_member_gets_its_share_only_after_the_first_revoked_it():
    coordinator = Coordinator()
    a, b = Member(coordinator, "a"), Member(coordinator, "b")
    a.heartbeat()
    b.heartbeat()
    # b is at the new epoch but every partition of its target is still a's: unreleased
    assert b.epoch == 2 and b.partitions() == set()
    assert coordinator.shard.consumer_groups["g"].members["b"].state is MemberState.UNRELEASED_PARTITIONS
    # a learns it must give up three partitions; it stays at epoch 1 until it reports them gone
    a.heartbeat()
    assert a.epoch == 1 and len(a.partitions()) == 3
    owners_disjoint(a, b)
    b.heartbeat()
    assert b.partitions() == set(), "b got partitions a had not yet revoked"
    a.heartbeat()  # now reporting only its three: it moves on to epoch 2
    assert a.epoch == 2
    b.heartbeat()
    assert b.epoch == 2 and b.partitions() == set(range(6)) - a.partitions() and len(b.partitions()) == 3
    owners_disjoint(a, b)
    assert coordinator.shard.consumer_groups["g"].state_name == "Stable"


def test_a_member_that_leaves_gives_its_partitions_to_the_others_without_revocation():
    coordinator = Coordinator()
    members = [Member(coordinator, name) for name in "abc"]
    for _ in range(4):
        for member in members:
            member.heartbeat()
    assert sorted(len(m.partitions()) for m in members) == [2, 2, 2]
    left = members.pop()
    response = left.heartbeat(epoch=-1)
    assert (response.error_code, response.member_epoch) == (ErrorCode.NONE, -1)
    for member in members:
        member.heartbeat()
    assert sorted(len(m.partitions()) for m in members) == [3, 3]
    owners_disjoint(*members)


def test_epochs_are_checked_fenced_members_rejoin_with_epoch_zero():
    coordinator = Coordinator()
    a = Member(coordinator, "a")
    a.heartbeat()
    assert a.heartbeat(epoch=5).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    b = Member(coordinator, "b")
    b.heartbeat()
    a.heartbeat()  # a still at 1, revoking
    a.heartbeat()  # a at 2 now
    assert a.epoch == 2
    # the previous epoch with a subset of the assignment is a lost response: accepted
    assert a.heartbeat(epoch=1).error_code == ErrorCode.NONE
    a.owned = {T: {0, 1, 2, 3, 4, 5}}
    assert a.heartbeat(epoch=1).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    a.owned = {}
    assert a.heartbeat(epoch=0).error_code == ErrorCode.NONE  # rejoins, owning nothing
    assert Member(coordinator, "nobody").heartbeat(epoch=3).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_invalid_heartbeats_get_kafkas_errors():
    coordinator = Coordinator()
    call = lambda **fields: coordinator.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, Request(**{
        "group_id": "g", "member_id": "m", "member_epoch": 0, "rebalance_timeout_ms": 1000,
        "subscribed_topic_names": ["t"], "topic_partitions": [], **fields}))
    assert call(group_id="").error_code == ErrorCode.INVALID_GROUP_ID
    assert call(rebalance_timeout_ms=-1).error_code == ErrorCode.INVALID_REQUEST
    assert call(subscribed_topic_names=None).error_code == ErrorCode.INVALID_REQUEST
    assert call(topic_partitions=None).error_code == ErrorCode.INVALID_REQUEST
    assert call(member_epoch=-3).error_code == ErrorCode.INVALID_REQUEST
    assert call(server_assignor="sticky").error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
    assert call(subscribed_topic_names=None, subscribed_topic_regex="(").error_code == \
        ErrorCode.INVALID_REGULAR_EXPRESSION
    assert call(member_id="", member_epoch=1).error_code == ErrorCode.INVALID_REQUEST
    for index in range(CONFIG.group_max_size):
        assert call(member_id=f"m{index}").error_code == ErrorCode.NONE
    assert call(member_id="one-too-many").error_code == ErrorCode.GROUP_MAX_SIZE_REACHED


def test_a_coordinator_generates_a_member_id_for_a_v0_client():
    coordinator = Coordinator()
    response = coordinator.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, Request(
        group_id="g", member_id="", member_epoch=0, rebalance_timeout_ms=1000, subscribed_topic_names=["t"],
        topic_partitions=[]))
    assert response.error_code == ErrorCode.NONE and response.member_id


def test_a_silent_member_is_fenced_after_its_session_and_its_partitions_move():
    coordinator = Coordinator()
    a, b = Member(coordinator, "a"), Member(coordinator, "b")
    for _ in range(3):
        a.heartbeat()
        b.heartbeat()
    assert len(b.partitions()) == 3
    for _ in range(3):
        coordinator.advance(SESSION_MS // 3)
        a.heartbeat()
    coordinator.advance(10)
    assert "b" not in coordinator.shard.consumer_groups["g"].members
    a.heartbeat()
    assert a.partitions() == set(range(6))


def test_a_member_that_does_not_revoke_in_its_rebalance_timeout_is_fenced():
    coordinator = Coordinator()
    a, b = Member(coordinator, "a"), Member(coordinator, "b")
    a.heartbeat()
    b.heartbeat()
    a.owned = {T: set(range(6))}

    def claim_all():  # a heartbeats (its session stays alive) and keeps claiming all six: it has not revoked
        return coordinator.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, Request(
            group_id="g", member_id="a", member_epoch=1, rebalance_timeout_ms=-1,
            topic_partitions=[Request.TopicPartitions(topic_id=T, partitions=list(range(6)))]))

    assert claim_all().error_code == ErrorCode.NONE
    for _ in range(4):  # within the session timeout (20 s), past the rebalance timeout a joined with (30 s)
        coordinator.advance(SESSION_MS // 2)
        claim_all()
        b.heartbeat()
    assert "a" not in coordinator.shard.consumer_groups["g"].members
    assert [(event, fields["member_id"], fields["protocol"], fields["reason"])
            for event, fields in coordinator.runtime.take_notices()] == [
        ("group_member_expired", "a", "consumer", "did not revoke its partitions within the rebalance timeout")]
    b.heartbeat()
    assert b.partitions() == set(range(6))


def test_a_static_member_that_comes_back_under_a_new_id_keeps_its_partitions_without_a_rebalance():
    coordinator = Coordinator()
    a, b = Member(coordinator, "a1", instance_id="A"), Member(coordinator, "b")
    for _ in range(3):
        a.heartbeat()
        b.heartbeat()
    kept, group_epoch = a.partitions(), coordinator.shard.consumer_groups["g"].group_epoch
    assert a.heartbeat(epoch=-2).member_epoch == -2
    b.heartbeat()
    back = Member(coordinator, "a2", instance_id="A")
    response = back.heartbeat()
    assert response.error_code == ErrorCode.NONE and back.partitions() == kept
    assert coordinator.shard.consumer_groups["g"].group_epoch == group_epoch  # no rebalance
    assert "a1" not in coordinator.shard.consumer_groups["g"].members
    # a second live member under the same instance id is refused
    assert Member(coordinator, "a3", instance_id="A").heartbeat().error_code == ErrorCode.UNRELEASED_INSTANCE_ID
    assert a.heartbeat(epoch=a.epoch).error_code == ErrorCode.FENCED_INSTANCE_ID


def test_offset_commits_are_checked_against_the_member_epoch():
    coordinator = Coordinator()
    a = Member(coordinator, "a")
    a.heartbeat()
    commit = messages.OffsetCommitRequest

    def commit_as(member_id, epoch, version=9):
        response = coordinator.call(ApiKey.OFFSET_COMMIT, version, commit(
            group_id="g", generation_id_or_member_epoch=epoch, member_id=member_id, topics=[
                commit.OffsetCommitRequestTopic(name="t", partitions=[commit.OffsetCommitRequestPartition(
                    partition_index=0, committed_offset=10, committed_metadata="")])]))
        return response.topics[0].partitions[0].error_code

    assert commit_as("a", 1) == ErrorCode.NONE
    assert commit_as("a", 0) == ErrorCode.STALE_MEMBER_EPOCH
    assert commit_as("z", 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert commit_as("a", 1, version=8) == ErrorCode.UNSUPPORTED_VERSION
    assert commit_as("", -1) == ErrorCode.UNKNOWN_MEMBER_ID  # an admin commit needs an empty group
    stale = coordinator.call(ApiKey.OFFSET_FETCH, 9, GroupOffsetFetch("g", None, member_id="a", member_epoch=7))
    assert stale == ErrorCode.STALE_MEMBER_EPOCH
    fetched = coordinator.call(ApiKey.OFFSET_FETCH, 9, GroupOffsetFetch("g", None, member_id="a", member_epoch=1))
    assert fetched.topics[0].partitions[0].committed_offset == 10


def test_describe_list_delete_and_a_rebuilt_shard_agree():
    coordinator = Coordinator()
    a, b = Member(coordinator, "a", topics=("t", "u")), Member(coordinator, "b", topics=("t", "u"), assignor="range")
    for _ in range(3):
        a.heartbeat()
        b.heartbeat()
    described = coordinator.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, "g")
    assert described.group_state == "Stable" and described.assignor_name == "range"
    assert [m.member_id for m in described.members] == ["a", "b"]
    by_member = {m.member_id: {(tp.topic_name, p) for tp in m.assignment.topic_partitions for p in tp.partitions}
                 for m in described.members}
    assert by_member["a"] == {("t", 0), ("t", 1), ("t", 2), ("u", 0)}  # range: contiguous per topic
    listed = coordinator.call(ApiKey.LIST_GROUPS, 5, messages.ListGroupsRequest())
    assert [(g.group_id, g.group_type, g.state) for g in listed] == [("g", "consumer", "Stable")]
    assert coordinator.call(ApiKey.DELETE_GROUPS, 1, "g") == ("g", ErrorCode.NON_EMPTY_GROUP)
    assert coordinator.call(ApiKey.JOIN_GROUP, 5, messages.JoinGroupRequest(
        group_id="g", session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="", protocol_type="consumer",
        protocols=[])).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL

    rebuilt = Coordinator(port=coordinator.port)
    group, before = rebuilt.shard.consumer_groups["g"], coordinator.shard.consumer_groups["g"]
    assert (group.group_epoch, group.assignment_epoch, group.members, group.target) == (
        before.group_epoch, before.assignment_epoch, before.members, before.target)
    loaded, _ = coordinator.port.read(0, 0, 1 << 20)
    records = [describe_record(r.key, r.value) for r in loaded]
    assert {r["key"]["type"] for r in records} >= {
        "ConsumerGroupMetadataKey", "ConsumerGroupMemberMetadataKey", "ConsumerGroupTargetAssignmentMemberKey",
        "ConsumerGroupTargetAssignmentMetadataKey", "ConsumerGroupCurrentMemberAssignmentKey",
        "ConsumerGroupPartitionMetadataKey"}

    a.heartbeat(epoch=-1)
    b.heartbeat(epoch=-1)
    assert coordinator.call(ApiKey.DELETE_GROUPS, 1, "g") == ("g", ErrorCode.NONE)
    assert "g" not in coordinator.shard.consumer_groups
    assert "g" not in Coordinator(port=coordinator.port).shard.consumer_groups  # every record of it tombstoned


def test_a_member_that_leaves_takes_its_own_topics_out_of_the_metadata_so_the_epoch_moves_once():
    """b alone subscribes to u. When it leaves, the group's subscribed topics' metadata loses u in the same
    records that bump the epoch, as Kafka's fencing writes it, so a's next heartbeats find nothing changed: the
    epoch moves once, not again at a's next heartbeat."""
    coordinator = Coordinator()
    a, b = Member(coordinator, "a", topics=("t",)), Member(coordinator, "b", topics=("t", "u"))
    for _ in range(3):
        a.heartbeat()
        b.heartbeat()
    group = coordinator.shard.consumer_groups["g"]
    assert set(group.subscription_metadata) == {"t", "u"} and group.group_epoch == 2
    assert b.heartbeat(epoch=-1).error_code == ErrorCode.NONE
    assert set(group.subscription_metadata) == {"t"} and group.group_epoch == 3
    for _ in range(2):
        a.heartbeat()
    assert (a.epoch, group.group_epoch, a.partitions()) == (3, 3, set(range(6)))
    assert Coordinator(port=coordinator.port).shard.consumer_groups["g"].subscription_metadata == {"t": TOPICS["t"]}


@pytest.mark.parametrize("volatile", [False, True], ids=["persisted", "planted-bug-volatile"])
def test_a_coordinator_that_loads_the_group_keeps_its_epoch_so_commits_in_flight_succeed(volatile):
    """A failover moves the group to a coordinator that loads it from the log. The subscribed topics' partition
    counts the target was computed for are in the log (ConsumerGroupPartitionMetadata), so the members' next
    heartbeats find nothing changed and keep their epoch: a commit made with it still succeeds. With the planted
    bug they are not written, and the new coordinator's first heartbeat bumps every member's epoch, so commits in
    flight fail with STALE_MEMBER_EPOCH (what librdkafka members saw at every failover)."""
    coordinator = Coordinator()
    coordinator.shard.bug_partition_metadata_volatile = volatile
    a, b = Member(coordinator, "a", topics=("t", "u")), Member(coordinator, "b", topics=("t", "u"))
    for _ in range(3):
        a.heartbeat()
        b.heartbeat()
    assert a.epoch == b.epoch == coordinator.shard.consumer_groups["g"].group_epoch == 2
    before = coordinator.shard.consumer_groups["g"].subscription_metadata
    assert before == {"t": TopicInfo(T, 6), "u": TopicInfo(U, 2)}

    successor = Coordinator(port=coordinator.port)
    a.coordinator = b.coordinator = successor
    loaded = successor.shard.consumer_groups["g"]
    assert loaded.subscription_metadata == (None if volatile else before)
    owned = (a.partitions(T), b.partitions(T))
    a.heartbeat()
    b.heartbeat()
    commit = messages.OffsetCommitRequest
    answer = successor.call(ApiKey.OFFSET_COMMIT, 9, commit(
        group_id="g", generation_id_or_member_epoch=2, member_id="a", topics=[commit.OffsetCommitRequestTopic(
            name="t", partitions=[commit.OffsetCommitRequestPartition(partition_index=min(owned[0]),
                                                                    committed_offset=5, committed_metadata="")])]))
    error = answer.topics[0].partitions[0].error_code
    if volatile:
        assert (a.epoch, b.epoch, error) == (3, 3, ErrorCode.STALE_MEMBER_EPOCH)
    else:
        assert (a.epoch, b.epoch, error) == (2, 2, ErrorCode.NONE)
        assert loaded.group_epoch == 2
    assert (a.partitions(T), b.partitions(T)) == owned  # the assignment is the same either way


def test_a_new_partition_of_a_subscribed_topic_bumps_the_epoch_and_is_assigned():
    coordinator = Coordinator()
    a = Member(coordinator, "a")
    a.heartbeat()
    coordinator.topics["t"] = TopicInfo(T, 8)
    a.heartbeat()
    assert a.partitions() == set(range(8)) and a.epoch == 2


def test_a_regex_subscription_follows_the_topics_that_match():
    coordinator = Coordinator()
    response = coordinator.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, Request(
        group_id="g", member_id="a", member_epoch=0, rebalance_timeout_ms=1000, subscribed_topic_regex="^u.*",
        subscribed_topic_names=[], topic_partitions=[]))
    assert {tp.topic_id for tp in response.assignment.topic_partitions} == {U}


@pytest.mark.parametrize("assignor", [uniform, range_])
def test_assignors_cover_every_partition_once_and_balance(assignor):
    topics = {"t": (T, 7), "u": (U, 3)}
    subscriptions = {m: frozenset({"t", "u"}) for m in "abc"}
    target = assignor(subscriptions, topics, {})
    pairs = [(t, p) for a in target.values() for t, ps in a.items() for p in ps]
    assert sorted(pairs) == sorted([(T, p) for p in range(7)] + [(U, p) for p in range(3)])
    if assignor is uniform:
        assert max(len(a[T]) + len(a.get(U, ())) for a in target.values()) - \
            min(len(a[T]) + len(a.get(U, ())) for a in target.values()) <= 1
        # sticky: a fourth member takes partitions, the others keep theirs otherwise
        subscriptions["d"] = frozenset({"t", "u"})
        again = assignor(subscriptions, topics, target)
        for member in "abc":
            assert {(t, p) for t, ps in again[member].items() for p in ps} <= \
                {(t, p) for t, ps in target[member].items() for p in ps}


def test_admin_commits_offset_delete_and_reset_work_on_a_consumer_group_as_kafka_allows():
    """What `flotilla groups reset-offsets` / `delete-offsets` send: an admin commit (no member, epoch -1) only
    once the group is empty; OffsetDelete refuses a topic the members subscribe to."""
    coordinator = Coordinator()
    a = Member(coordinator, "a")
    a.heartbeat()
    commit = messages.OffsetCommitRequest

    def admin_commit():
        response = coordinator.call(ApiKey.OFFSET_COMMIT, 7, commit(
            group_id="g", generation_id_or_member_epoch=-1, member_id="", topics=[
                commit.OffsetCommitRequestTopic(name="t", partitions=[commit.OffsetCommitRequestPartition(
                    partition_index=1, committed_offset=5, committed_metadata="")])]))
        return response.topics[0].partitions[0].error_code

    delete = messages.OffsetDeleteRequest
    delete_t = delete(group_id="g", topics=[delete.OffsetDeleteRequestTopic(
        name="t", partitions=[delete.OffsetDeleteRequestPartition(partition_index=1)])])
    assert admin_commit() == ErrorCode.UNKNOWN_MEMBER_ID  # the group has a member
    deleted = coordinator.call(ApiKey.OFFSET_DELETE, 0, delete_t)
    assert deleted.topics[0].partitions[0].error_code == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
    a.heartbeat(epoch=-1)
    assert coordinator.shard.consumer_groups["g"].state_name == "Empty"
    assert admin_commit() == ErrorCode.NONE
    deleted = coordinator.call(ApiKey.OFFSET_DELETE, 0, delete_t)
    assert deleted.topics[0].partitions[0].error_code == ErrorCode.NONE
    assert coordinator.shard.offsets.committed.get("g", {}) == {}


def test_an_empty_consumer_group_becomes_a_classic_group_on_join_and_keeps_its_offsets():
    """The way back from group.protocol=consumer (Kafka's classicGroupJoinToClassicGroup): while a member is in
    the consumer group a JoinGroup of another protocol type is INCONSISTENT_GROUP_PROTOCOL; once the last one
    left, a JoinGroup replaces the consumer group (tombstones) with a classic group, whose generations go on
    from the consumer group's epochs, and the group's committed offsets stay."""
    coordinator = Coordinator()
    a = Member(coordinator, "a")
    a.heartbeat()
    commit = messages.OffsetCommitRequest
    committed = coordinator.call(ApiKey.OFFSET_COMMIT, 9, commit(
        group_id="g", generation_id_or_member_epoch=a.epoch, member_id="a", topics=[
            commit.OffsetCommitRequestTopic(name="t", partitions=[commit.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=10, committed_metadata="")])]))
    assert committed.topics[0].partitions[0].error_code == ErrorCode.NONE
    join = messages.JoinGroupRequest(
        group_id="g", session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="", protocol_type="consumer",
        protocols=[messages.JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")])
    connect = messages.JoinGroupRequest(
        group_id="g", session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="", protocol_type="connect",
        protocols=[messages.JoinGroupRequest.JoinGroupRequestProtocol(name="default", metadata=b"")])
    assert coordinator.call(ApiKey.JOIN_GROUP, 3, connect).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    a.heartbeat(epoch=-1)  # the last member leaves: the consumer group is empty
    epoch = coordinator.shard.consumer_groups["g"].group_epoch

    request_id = coordinator.runtime.submit(0, GroupRequest(ApiKey.JOIN_GROUP, 3, join, "client", "/127.0.0.1",
                                                            coordinator.topics), coordinator.now)
    coordinator.advance(CONFIG.initial_rebalance_delay_ms + 1)
    joined = coordinator.answers.pop(request_id)
    assert (joined.error_code, joined.generation_id, joined.leader) == (ErrorCode.NONE, epoch + 1, joined.member_id)
    assert "g" not in coordinator.shard.consumer_groups and "g" in coordinator.shard.groups
    fetched = coordinator.call(ApiKey.OFFSET_FETCH, 7, GroupOffsetFetch("g", None))
    assert [(p.partition_index, p.committed_offset) for t in fetched.topics for p in t.partitions] == [(0, 10)]
    listed = coordinator.call(ApiKey.LIST_GROUPS, 5, messages.ListGroupsRequest())
    assert [(g.group_id, g.group_type) for g in listed] == [("g", "classic")]
    assert "g" not in Coordinator(port=coordinator.port).shard.consumer_groups  # the tombstones are in the log
