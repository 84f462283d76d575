"""KIP-848's online migration on one group coordinator shard: a classic group of consumers becomes a consumer
group when a consumer-protocol member joins it, its classic members go on through JoinGroup, SyncGroup,
Heartbeat and LeaveGroup inside it, and it becomes a classic group again when its last consumer-protocol
member leaves; a partition never has two owners, committed offsets stay, and a shard rebuilt from the log
agrees."""

from __future__ import annotations

import uuid

from groupcoord.config import GroupConfig
from groupcoord.consumer import TopicInfo
from groupcoord.consumer_protocol import decode_assignment, encode_assignment, encode_subscription
from groupcoord.shard import GroupOffsetFetch, GroupRequest
from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode
from tests.coordinator.ports import LogPort
from tests.groupcoord.test_consumer_shard import Coordinator as ConsumerShardCoordinator

T = uuid.UUID(int=1)
TOPICS = {"t": TopicInfo(T, 6)}
CONFIG = GroupConfig(initial_rebalance_delay_ms=100, consumer_heartbeat_interval_ms=1_000)


class Coordinator(ConsumerShardCoordinator):
    """The consumer-protocol shard tests' harness, with requests sent without waiting for their answers."""

    def __init__(self, config: GroupConfig = CONFIG, port: LogPort | None = None) -> None:
        super().__init__(config, port)
        self.topics = dict(TOPICS)  # the metadata image's topics the broker attaches to each request

    def send(self, api_key: int, version: int, message) -> int:
        request_id = self.runtime.submit(0, GroupRequest(api_key, version, message, "client", "/127.0.0.1",
                                                         self.topics), self.now)
        self.poll()
        return request_id


class ClassicConsumer:
    """An eager classic consumer (range), as librdkafka drives one: it gives up everything when it rejoins."""

    def __init__(self, coordinator: Coordinator) -> None:
        self.coordinator, self.member_id, self.generation = coordinator, "", -1
        self.owned: set[int] = set()

    def join_request(self) -> messages.JoinGroupRequest:
        request_class = messages.JoinGroupRequest
        return request_class(group_id="g", session_timeout_ms=10_000, rebalance_timeout_ms=30_000,
                             member_id=self.member_id, protocol_type="consumer", protocols=[
                                 request_class.JoinGroupRequestProtocol(name="range",
                                                                        metadata=encode_subscription(["t"]))])

    def join(self) -> int:
        """Send a JoinGroup (after MEMBER_ID_REQUIRED for a new member); the parked request id, if parked."""
        self.owned = set()
        if not self.member_id:
            first = self.coordinator.call(ApiKey.JOIN_GROUP, 5, self.join_request())
            assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED, first
            self.member_id = first.member_id
        return self.coordinator.send(ApiKey.JOIN_GROUP, 5, self.join_request())

    def joined(self, response) -> None:
        assert response.error_code == ErrorCode.NONE, response
        self.generation = response.generation_id

    def sync(self, assignments: dict | None = None):
        request_class = messages.SyncGroupRequest
        response = self.coordinator.call(ApiKey.SYNC_GROUP, 3, request_class(
            group_id="g", generation_id=self.generation, member_id=self.member_id, assignments=[
                request_class.SyncGroupRequestAssignment(member_id=m, assignment=a)
                for m, a in (assignments or {}).items()]))
        if response.error_code == ErrorCode.NONE:
            self.owned = set(decode_assignment(response.assignment).get("t", ()))
        return response

    def heartbeat(self) -> int:
        return self.coordinator.call(ApiKey.HEARTBEAT, 3, messages.HeartbeatRequest(
            group_id="g", generation_id=self.generation, member_id=self.member_id)).error_code

    def rejoin_and_sync(self) -> None:
        request_id = self.join()
        self.joined(self.coordinator.answers.pop(request_id))
        assert self.sync().error_code == ErrorCode.NONE

    def commit(self, offset: int, generation: int | None = None) -> int:
        commit = messages.OffsetCommitRequest
        response = self.coordinator.call(ApiKey.OFFSET_COMMIT, 7, commit(
            group_id="g", generation_id_or_member_epoch=self.generation if generation is None else generation,
            member_id=self.member_id, topics=[commit.OffsetCommitRequestTopic(name="t", partitions=[
                commit.OffsetCommitRequestPartition(partition_index=min(self.owned), committed_offset=offset,
                                                    committed_metadata="")])]))
        return response.topics[0].partitions[0].error_code


class NewConsumer:
    """A consumer of the KIP-848 protocol: it owns what its last assignment gave it."""

    def __init__(self, coordinator: Coordinator, member_id: str) -> None:
        self.coordinator, self.member_id, self.epoch = coordinator, member_id, 0
        self.owned: set[int] = set()

    def heartbeat(self, epoch: int | None = None):
        epoch = self.epoch if epoch is None else epoch
        request_class = messages.ConsumerGroupHeartbeatRequest
        response = self.coordinator.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, request_class(
            group_id="g", member_id=self.member_id, member_epoch=epoch, rebalance_timeout_ms=30_000 if epoch == 0 else -1,
            subscribed_topic_names=["t"] if epoch == 0 else None,
            topic_partitions=[request_class.TopicPartitions(topic_id=T, partitions=sorted(self.owned))]
            if self.owned else []))
        if response.error_code == ErrorCode.NONE and epoch >= 0:
            self.epoch = response.member_epoch
            if response.assignment is not None:
                self.owned = {p for tp in response.assignment.topic_partitions for p in tp.partitions}
        return response


def owners_disjoint(*consumers) -> None:
    seen: dict[int, object] = {}
    for consumer in consumers:
        for partition in consumer.owned:
            assert partition not in seen, f"t-{partition} owned twice"
            seen[partition] = consumer


def stable_classic_group(coordinator: Coordinator) -> tuple[ClassicConsumer, ClassicConsumer]:
    a, b = ClassicConsumer(coordinator), ClassicConsumer(coordinator)
    parked = [a.join(), b.join()]
    coordinator.advance(100)  # the initial rebalance delay
    answers = [coordinator.answers.pop(request_id) for request_id in parked]
    a.joined(answers[0])
    b.joined(answers[1])
    leader = a if answers[0].leader == a.member_id else b
    other = b if leader is a else a
    assignments = {leader.member_id: encode_assignment({"t": [0, 1, 2]}, 0),
                   other.member_id: encode_assignment({"t": [3, 4, 5]}, 0)}
    assert leader.sync(assignments).error_code == ErrorCode.NONE
    assert other.sync().error_code == ErrorCode.NONE
    return a, b


def test_a_classic_group_is_upgraded_by_a_new_member_and_downgraded_when_it_leaves():
    coordinator = Coordinator()
    shard = coordinator.shard
    a, b = stable_classic_group(coordinator)
    assert a.commit(11) == ErrorCode.NONE
    assert shard.groups["g"].generation == 1 and a.owned | b.owned == set(range(6))

    # A consumer of the new protocol joins: the group is converted; the newcomer waits for released partitions.
    c = NewConsumer(coordinator, "c")
    joined = c.heartbeat()
    assert joined.error_code == ErrorCode.NONE, joined
    assert "g" in shard.consumer_groups and "g" not in shard.groups
    group = shard.consumer_groups["g"]
    assert {m.member_id: m.classic is not None for m in group.members.values()} == {
        a.member_id: True, b.member_id: True, "c": False}
    owners_disjoint(a, b, c)
    assert a.commit(12) == ErrorCode.NONE  # its generation is its member epoch: still valid
    assert a.commit(13, generation=7) == ErrorCode.ILLEGAL_GENERATION

    # The classic members learn of the rebalance by their heartbeats, rejoin and get their new share.
    assert a.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS and b.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS
    for consumer in (a, b):
        consumer.rejoin_and_sync()
        owners_disjoint(a, b, c)
    for _ in range(3):
        c.heartbeat()
        for consumer in (a, b):
            if consumer.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS:
                consumer.rejoin_and_sync()
        owners_disjoint(a, b, c)
    assert sorted(len(x.owned) for x in (a, b, c)) == [2, 2, 2] and a.owned | b.owned | c.owned == set(range(6))
    assert a.heartbeat() == ErrorCode.NONE and b.heartbeat() == ErrorCode.NONE

    # The last consumer of the new protocol leaves: a classic group again, rebalancing, offsets kept.
    left = c.heartbeat(epoch=-1)
    assert left.error_code == ErrorCode.NONE
    c.owned = set()
    coordinator.poll()
    assert "g" in shard.groups and "g" not in shard.consumer_groups
    classic = shard.groups["g"]
    assert classic.state.value == "PreparingRebalance" and set(classic.members) == {a.member_id, b.member_id}
    assert a.heartbeat() in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION)
    parked = [a.join(), b.join()]
    answers = [coordinator.answers.pop(request_id) for request_id in parked]
    a.joined(answers[0])
    b.joined(answers[1])
    leader = a if answers[0].leader == a.member_id else b
    other = b if leader is a else a
    assert leader.sync({leader.member_id: encode_assignment({"t": [0, 1, 2]}, 0),
                        other.member_id: encode_assignment({"t": [3, 4, 5]}, 0)}).error_code == ErrorCode.NONE
    assert other.sync().error_code == ErrorCode.NONE
    assert classic.state.value == "Stable" and a.owned | b.owned == set(range(6))
    fetched = coordinator.call(ApiKey.OFFSET_FETCH, 7, GroupOffsetFetch("g", None))
    assert [p.committed_offset for t in fetched.topics for p in t.partitions] == [12]

    rebuilt = Coordinator(port=coordinator.port).shard
    assert "g" not in rebuilt.consumer_groups and set(rebuilt.groups["g"].members) == {a.member_id, b.member_id}


def test_a_classic_member_leaving_a_consumer_group_and_the_migration_policy():
    coordinator = Coordinator()
    a, b = stable_classic_group(coordinator)
    c = NewConsumer(coordinator, "c")
    c.heartbeat()
    leave = messages.LeaveGroupRequest
    left = coordinator.call(ApiKey.LEAVE_GROUP, 3, leave(group_id="g", members=[
        leave.MemberIdentity(member_id=a.member_id), leave.MemberIdentity(member_id="c"),
        leave.MemberIdentity(member_id="nobody")]))
    assert [(m.member_id, m.error_code) for m in left.members] == [
        (a.member_id, ErrorCode.NONE), ("c", ErrorCode.UNKNOWN_MEMBER_ID), ("nobody", ErrorCode.UNKNOWN_MEMBER_ID)]
    assert set(coordinator.shard.consumer_groups["g"].members) == {b.member_id, "c"}
    # A consumer-protocol member may not use the classic APIs, nor a classic one the consumer heartbeat.
    assert coordinator.call(ApiKey.HEARTBEAT, 3, messages.HeartbeatRequest(
        group_id="g", generation_id=c.epoch, member_id="c")).error_code == ErrorCode.UNKNOWN_MEMBER_ID

    closed = Coordinator(GroupConfig(initial_rebalance_delay_ms=100, consumer_migration_policy="downgrade"))
    stable_classic_group(closed)
    refused = NewConsumer(closed, "c").heartbeat()
    assert refused.error_code == ErrorCode.GROUP_ID_NOT_FOUND and "g" in closed.shard.groups


def test_a_classic_member_that_does_not_rejoin_when_told_is_fenced_after_its_rebalance_timeout():
    """Kafka's join timeout: an eager classic member that keeps heartbeating without joining again would hold
    its partitions from the members waiting for them for ever; it is removed after its rebalance timeout."""
    coordinator = Coordinator()
    a, b = stable_classic_group(coordinator)
    c = NewConsumer(coordinator, "c")
    c.heartbeat()
    assert a.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS  # told at 0 ms
    assert b.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS
    b.rejoin_and_sync()
    for _ in range(3):
        coordinator.advance(9_000)  # within the 10 s session: the heartbeats keep a alive, but it never rejoins
        assert a.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS
        assert b.heartbeat() in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS)
        c.heartbeat()
    coordinator.advance(5_000)  # past a's 30 s rebalance timeout
    assert a.member_id not in coordinator.shard.consumer_groups["g"].members
    assert a.heartbeat() == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_classic_member_that_joins_a_consumer_group_but_never_syncs_is_fenced_after_its_rebalance_timeout():
    """Kafka's consumer group sync timeout: a classic member answered a JoinGroup must send its SyncGroup within
    its rebalance timeout. One that keeps heartbeating without it is removed then, not kept for ever."""
    coordinator = Coordinator()
    a, b = stable_classic_group(coordinator)
    c = NewConsumer(coordinator, "c")
    c.heartbeat()
    assert a.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS
    assert b.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS
    b.rejoin_and_sync()
    a.joined(coordinator.answers.pop(a.join()))  # a joins again but never sends its SyncGroup
    for _ in range(3):
        coordinator.advance(9_000)  # within the 10 s session: heartbeats keep a alive
        assert a.heartbeat() in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS)
        assert b.heartbeat() in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS)
        c.heartbeat()
    assert a.member_id in coordinator.shard.consumer_groups["g"].members
    coordinator.advance(3_000)  # past a's 30 s rebalance timeout since its JoinGroup
    assert a.member_id not in coordinator.shard.consumer_groups["g"].members
    assert a.heartbeat() == ErrorCode.UNKNOWN_MEMBER_ID
    reasons = [fields["reason"] for event, fields in coordinator.runtime.take_notices()
               if event == "group_member_expired" and fields["member_id"] == a.member_id]
    assert reasons == ["no SyncGroup within the rebalance timeout"]


def test_an_upgrade_waits_while_the_coordinators_metadata_does_not_know_an_assigned_topic():
    """Converting with a topic the broker's image does not know yet would free partitions the classic members
    still read: the consumer-protocol member is told to try again (COORDINATOR_LOAD_IN_PROGRESS)."""
    coordinator = Coordinator()
    a, b = stable_classic_group(coordinator)
    coordinator.topics = {}
    waiting = NewConsumer(coordinator, "c").heartbeat()
    assert waiting.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and "topic t" in waiting.error_message
    assert "g" in coordinator.shard.groups and "g" not in coordinator.shard.consumer_groups
    coordinator.topics = dict(TOPICS)
    assert NewConsumer(coordinator, "c").heartbeat().error_code == ErrorCode.NONE
    group = coordinator.shard.consumer_groups["g"]
    assert {m: set(p for ps in x.assigned.values() for p in ps) for m, x in group.members.items() if m != "c"} == {
        a.member_id: a.owned, b.member_id: b.owned}
