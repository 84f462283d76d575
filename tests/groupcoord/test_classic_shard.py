"""The group coordinator shard, sans-IO, through the coordinator runtime over a real partition log: the classic
protocol (KIP-394 member ids, KIP-345 static members), offsets, deletion, retention, replay.

Requests are the codec's own message classes; a shard rebuilt from the log must answer as the one that wrote
it (DESIGN.md "handle / replay")."""

from __future__ import annotations

import struct

from coordinator.runtime import CoordinatorRuntime
from groupcoord.config import GroupConfig
from groupcoord.records import OffsetCommitKey, OffsetCommitValue, encode_key, encode_offset_commit_value
from groupcoord.shard import GroupCoordinatorShard, GroupRequest
from coordinator.shard import CoordinatorRecord, TransactionalWrite
from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode
from tests.coordinator.ports import LogPort

SESSION_MS = 10_000
INITIAL_DELAY_MS = 3_000
CONFIG = GroupConfig(initial_rebalance_delay_ms=INITIAL_DELAY_MS, group_max_size=50)


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, user data (null)."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


class Coordinator:
    """One shard behind the runtime; the high watermark follows the log end unless `hold` is set."""

    def __init__(self, config: GroupConfig = CONFIG, port: LogPort | None = None, epoch: int = 1) -> None:
        self.port = port or LogPort(partitions=1)
        self.runtime = CoordinatorRuntime("__consumer_offsets", lambda p: GroupCoordinatorShard(p, config), self.port)
        self.runtime.on_became_leader(0, epoch, 0)
        self.answers: dict[int, object] = {}
        self.now = 0
        self.hold = False
        self.poll()

    @property
    def shard(self) -> GroupCoordinatorShard:
        return self.runtime.shard(0)

    def poll(self) -> None:
        if not self.hold:
            self.port.commit_all()
        self.answers.update(self.runtime.poll(self.now))

    def send(self, api_key: int, version: int, message, client_id: str = "client") -> int:
        request_id = self.runtime.submit(0, GroupRequest(api_key, version, message, client_id, "/127.0.0.1"), self.now)
        self.poll()
        return request_id

    def call(self, api_key: int, version: int, message, client_id: str = "client"):
        request_id = self.send(api_key, version, message, client_id)
        assert request_id in self.answers, f"request {request_id} parked"
        return self.answers.pop(request_id)

    def advance(self, ms: int) -> None:
        self.now += ms
        self.poll()


def join_request(group="g", member_id="", instance=None, topics=("t",), session_ms=SESSION_MS, rebalance_ms=30_000):
    request_class = messages.JoinGroupRequest
    return request_class(group_id=group, session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
                         member_id=member_id, group_instance_id=instance, protocol_type="consumer",
                         protocols=[request_class.JoinGroupRequestProtocol(name="range", metadata=subscription(*topics))])


def sync_request(member_id, generation, assignments=None, group="g", instance=None):
    request_class = messages.SyncGroupRequest
    return request_class(group_id=group, generation_id=generation, member_id=member_id, group_instance_id=instance,
                         assignments=[request_class.SyncGroupRequestAssignment(member_id=m, assignment=a)
                                      for m, a in (assignments or {}).items()])


def heartbeat(member_id, generation, group="g", instance=None):
    return messages.HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id,
                                     group_instance_id=instance)


def form_group(coordinator: Coordinator, count: int = 3, version: int = 5, instances=None) -> list[int]:
    """`count` members join a new group: dynamic ones after MEMBER_ID_REQUIRED (KIP-394), static ones at once;
    the first generation completes when the initial rebalance delay has passed. The parked join request ids."""
    parked = []
    for index in range(count):
        if instances:
            parked.append(coordinator.send(ApiKey.JOIN_GROUP, version, join_request(instance=instances[index])))
            continue
        first = coordinator.call(ApiKey.JOIN_GROUP, version, join_request())
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED, first
        parked.append(coordinator.send(ApiKey.JOIN_GROUP, version, join_request(member_id=first.member_id)))
    assert not any(p in coordinator.answers for p in parked), "the first generation waits for the initial delay"
    coordinator.advance(INITIAL_DELAY_MS)
    return parked


def test_three_members_join_one_generation_and_the_leader_assignment_reaches_everyone():  # KIP-394
    coordinator = Coordinator()
    joined = form_group(coordinator)
    responses = [coordinator.answers.pop(request_id) for request_id in joined]
    assert {r.error_code for r in responses} == {ErrorCode.NONE}
    assert {r.generation_id for r in responses} == {1}
    leader = responses[0].leader
    assert [len(r.members) for r in responses if r.member_id == leader] == [3]
    assert all(not r.members for r in responses if r.member_id != leader)
    followers = [r.member_id for r in responses if r.member_id != leader]
    parked = [coordinator.send(ApiKey.SYNC_GROUP, 3, sync_request(m, 1)) for m in followers]
    assert not any(p in coordinator.answers for p in parked), "followers wait for the leader's assignment"
    assignments = {m: f"assignment-of-{m}".encode() for m in [leader, *followers]}
    leader_sync = coordinator.send(ApiKey.SYNC_GROUP, 3, sync_request(leader, 1, assignments))
    for member_id, request_id in zip([*followers, leader], [*parked, leader_sync]):
        answer = coordinator.answers.pop(request_id)
        assert (answer.error_code, answer.assignment) == (ErrorCode.NONE, assignments[member_id])
    assert coordinator.shard.groups["g"].state.value == "Stable"


def stable_group(coordinator: Coordinator, count: int = 3, instances=None) -> tuple[str, list[str]]:
    """A Stable group of generation 1; (leader id, member ids). Each member's assignment is its id."""
    responses = [coordinator.answers.pop(request_id) for request_id in form_group(coordinator, count, instances=instances)]
    leader = responses[0].leader
    members = [r.member_id for r in responses]
    instance_of = dict(zip(members, instances or [None] * count))
    coordinator.call(ApiKey.SYNC_GROUP, 3, sync_request(leader, 1, {m: m.encode() for m in members},
                                                        instance=instance_of[leader]))
    for member in members:
        if member != leader:
            coordinator.call(ApiKey.SYNC_GROUP, 3, sync_request(member, 1, instance=instance_of[member]))
    return leader, members


def test_the_assignment_is_answered_only_after_its_record_commits():
    coordinator = Coordinator()
    answer = coordinator.answers.pop(form_group(coordinator, 1)[0])
    coordinator.hold = True
    request_id = coordinator.send(ApiKey.SYNC_GROUP, 3, sync_request(answer.member_id, 1, {answer.member_id: b"a"}))
    assert request_id not in coordinator.answers
    coordinator.hold = False
    coordinator.poll()
    assert coordinator.answers.pop(request_id).assignment == b"a"


def test_heartbeat_errors_clients_branch_on():
    coordinator = Coordinator()
    leader, members = stable_group(coordinator)
    assert coordinator.call(ApiKey.HEARTBEAT, 3, heartbeat(leader, 1)).error_code == ErrorCode.NONE
    assert coordinator.call(ApiKey.HEARTBEAT, 3, heartbeat("nobody", 1)).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert coordinator.call(ApiKey.HEARTBEAT, 3, heartbeat(leader, 7)).error_code == ErrorCode.ILLEGAL_GENERATION
    # A new member starts a rebalance: the others learn it from their heartbeat.
    first = coordinator.call(ApiKey.JOIN_GROUP, 5, join_request())
    coordinator.send(ApiKey.JOIN_GROUP, 5, join_request(member_id=first.member_id))
    assert coordinator.call(ApiKey.HEARTBEAT, 3, heartbeat(leader, 1)).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert coordinator.call(ApiKey.HEARTBEAT, 3, heartbeat("", 1, group="")).error_code == ErrorCode.INVALID_GROUP_ID


def test_a_leaving_member_starts_a_rebalance_of_the_others():
    coordinator = Coordinator()
    leader, members = stable_group(coordinator)
    leaving = members[1]
    leave = messages.LeaveGroupRequest(group_id="g", members=[messages.LeaveGroupRequest.MemberIdentity(
        member_id=leaving, group_instance_id=None)])
    assert coordinator.call(ApiKey.LEAVE_GROUP, 3, leave).members[0].error_code == ErrorCode.NONE
    rejoins = [coordinator.send(ApiKey.JOIN_GROUP, 5, join_request(member_id=m)) for m in members if m != leaving]
    answers = [coordinator.answers.pop(r) for r in rejoins]
    assert {a.generation_id for a in answers} == {2} and {a.error_code for a in answers} == {ErrorCode.NONE}


def test_a_member_whose_session_expires_is_removed_and_the_group_rebalances():
    coordinator = Coordinator()
    leader, members = stable_group(coordinator, 2)
    survivor, silent = leader, next(m for m in members if m != leader)
    for _ in range(3):
        coordinator.advance(SESSION_MS // 2)
        assert coordinator.call(ApiKey.HEARTBEAT, 3, heartbeat(survivor, 1)).error_code in (
            ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS)
    group = coordinator.shard.groups["g"]
    assert silent not in group.members and group.state.value == "PreparingRebalance"
    [(event, fields)] = coordinator.runtime.take_notices()  # for the node's log
    assert event == "group_member_expired" and fields["member_id"] == silent and fields["group_id"] == "g"
    assert (fields["protocol"], fields["reason"], fields["session_timeout_ms"]) == (
        "classic", "session expired", SESSION_MS)
    rejoin = coordinator.send(ApiKey.JOIN_GROUP, 5, join_request(member_id=survivor))
    assert coordinator.answers.pop(rejoin).generation_id == 2


def test_a_member_waiting_in_sync_group_is_not_expired_while_the_leader_assigns():
    """Clients stop heartbeating from JoinGroup until their SyncGroup is answered; Kafka counts a member with a
    parked request as heartbeating (`hasSatisfiedHeartbeat`), so a slow leader does not cost its followers
    their membership."""
    coordinator = Coordinator()
    responses = [coordinator.answers.pop(request_id) for request_id in form_group(coordinator)]
    leader = responses[0].leader
    followers = [r.member_id for r in responses if r.member_id != leader]
    parked = [coordinator.send(ApiKey.SYNC_GROUP, 3, sync_request(m, 1)) for m in followers]
    for _ in range(5):  # 2.5 sessions; only the leader heartbeats
        coordinator.advance(SESSION_MS // 2)
        assert coordinator.call(ApiKey.HEARTBEAT, 3, heartbeat(leader, 1)).error_code == ErrorCode.NONE
    group = coordinator.shard.groups["g"]
    assert set(followers) <= set(group.members) and group.state.value == "CompletingRebalance"
    assert not coordinator.runtime.take_notices()
    assignments = {m: m.encode() for m in [leader, *followers]}
    coordinator.call(ApiKey.SYNC_GROUP, 3, sync_request(leader, 1, assignments))
    for member_id, request_id in zip(followers, parked):
        answer = coordinator.answers.pop(request_id)
        assert (answer.error_code, answer.assignment) == (ErrorCode.NONE, member_id.encode())
    coordinator.advance(SESSION_MS // 2)  # a session runs from the answer, as in Kafka, not from the request
    for member_id in followers:
        assert coordinator.call(ApiKey.HEARTBEAT, 3, heartbeat(member_id, 1)).error_code == ErrorCode.NONE


def test_a_member_that_sends_no_sync_group_within_the_rebalance_timeout_is_removed():
    """Kafka's pending-sync expiry: a member that joined the generation and keeps heartbeating but never sends
    its SyncGroup is removed once the rebalance timeout has passed since the join completed, and the group
    rebalances; it does not hold a place, and partitions, in a group it never took up."""
    coordinator = Coordinator()
    responses = [coordinator.answers.pop(request_id) for request_id in form_group(coordinator)]
    leader = responses[0].leader
    synced, silent = [r.member_id for r in responses if r.member_id != leader]
    coordinator.call(ApiKey.SYNC_GROUP, 3, sync_request(leader, 1, {r.member_id: b"a" for r in responses}))
    coordinator.call(ApiKey.SYNC_GROUP, 3, sync_request(synced, 1))
    group = coordinator.shard.groups["g"]
    for _ in range(5):  # 25 s of the 30 s rebalance timeout: heartbeats keep everyone
        coordinator.advance(5_000)
        for member in (leader, synced, silent):
            assert coordinator.call(ApiKey.HEARTBEAT, 3, heartbeat(member, 1)).error_code == ErrorCode.NONE
    assert silent in group.members and group.state.value == "Stable"
    coordinator.advance(5_000)
    assert silent not in group.members and group.state.value == "PreparingRebalance"
    [(event, fields)] = coordinator.runtime.take_notices()
    assert (event, fields["member_id"], fields["reason"]) == (
        "group_member_expired", silent, "no SyncGroup within the rebalance timeout")
    assert coordinator.call(ApiKey.HEARTBEAT, 3, heartbeat(silent, 1)).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    rejoins = [coordinator.send(ApiKey.JOIN_GROUP, 5, join_request(member_id=m)) for m in (leader, synced)]
    assert {coordinator.answers.pop(r).generation_id for r in rejoins} == {2}


def test_a_newer_join_or_sync_from_a_member_answers_its_older_parked_one():
    """A member has at most one parked JoinGroup and one parked SyncGroup: the older is answered
    REBALANCE_IN_PROGRESS when a newer arrives, because replies on a connection go out in order and one never
    answered would hold back every later reply on it."""
    coordinator = Coordinator()
    first = coordinator.call(ApiKey.JOIN_GROUP, 5, join_request())
    member = first.member_id
    older = coordinator.send(ApiKey.JOIN_GROUP, 5, join_request(member_id=member))
    newer = coordinator.send(ApiKey.JOIN_GROUP, 5, join_request(member_id=member))
    answer = coordinator.answers.pop(older)
    assert (answer.error_code, answer.member_id) == (ErrorCode.REBALANCE_IN_PROGRESS, member)
    assert newer not in coordinator.answers, "the newer join waits for the generation"
    other = coordinator.call(ApiKey.JOIN_GROUP, 5, join_request()).member_id
    other_join = coordinator.send(ApiKey.JOIN_GROUP, 5, join_request(member_id=other))
    coordinator.advance(INITIAL_DELAY_MS)
    joined = coordinator.answers.pop(newer)
    assert (joined.error_code, joined.generation_id) == (ErrorCode.NONE, 1)
    coordinator.answers.pop(other_join)
    follower = other if joined.leader == member else member
    older_sync = coordinator.send(ApiKey.SYNC_GROUP, 3, sync_request(follower, 1))
    newer_sync = coordinator.send(ApiKey.SYNC_GROUP, 3, sync_request(follower, 1))
    assert coordinator.answers.pop(older_sync).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert newer_sync not in coordinator.answers
    coordinator.call(ApiKey.SYNC_GROUP, 3, sync_request(joined.leader, 1, {member: b"m", other: b"o"}))
    assert coordinator.answers.pop(newer_sync).assignment == (b"o" if follower == other else b"m")
    assert coordinator.shard.groups["g"].parked_request_ids() == []


def test_a_static_member_rejoining_under_a_new_id_keeps_its_assignment_without_a_rebalance():  # KIP-345
    coordinator = Coordinator()
    instances = ["i-0", "i-1"]
    leader, members = stable_group(coordinator, 2, instances=instances)
    instance_of = dict(zip(members, instances))
    follower = next(m for m in members if m != leader)
    restarted = coordinator.call(ApiKey.JOIN_GROUP, 5, join_request(instance=instance_of[follower]))
    assert restarted.error_code == ErrorCode.NONE and restarted.generation_id == 1  # no new generation
    assert restarted.member_id != follower
    synced = coordinator.call(ApiKey.SYNC_GROUP, 3, sync_request(restarted.member_id, 1, instance=instance_of[follower]))
    assert synced.assignment == follower.encode()  # the old member's assignment
    fenced = coordinator.call(ApiKey.HEARTBEAT, 3, heartbeat(follower, 1, instance=instance_of[follower]))
    assert fenced.error_code == ErrorCode.FENCED_INSTANCE_ID
    assert coordinator.call(ApiKey.HEARTBEAT, 3, heartbeat(leader, 1, instance=instance_of[leader])).error_code \
        == ErrorCode.NONE
    assert coordinator.shard.groups["g"].state.value == "Stable"


def test_a_static_member_that_did_not_rejoin_owes_a_sync_group_too():
    """Kafka's completeClassicGroupJoin: every member of the completed join owes its SyncGroup, a static member
    kept without rejoining too. One whose session outlasts the rebalance timeout is removed at the pending-sync
    deadline, not at the end of its session."""
    coordinator = Coordinator()
    session_ms, rebalance_ms = 60_000, 10_000

    def join(instance, member_id=""):
        return coordinator.send(ApiKey.JOIN_GROUP, 5, join_request(
            member_id=member_id, instance=instance, session_ms=session_ms, rebalance_ms=rebalance_ms))

    joins = {instance: join(instance) for instance in ("s-1", "s-2")}
    coordinator.advance(INITIAL_DELAY_MS)
    answers = {instance: coordinator.answers.pop(request_id) for instance, request_id in joins.items()}
    assert {a.generation_id for a in answers.values()} == {1}
    leader = answers["s-1"].leader
    leader_instance, silent_instance = sorted(answers, key=lambda i: answers[i].member_id != leader)
    silent = answers[silent_instance].member_id
    assignments = {a.member_id: a.member_id.encode() for a in answers.values()}
    coordinator.call(ApiKey.SYNC_GROUP, 3, sync_request(leader, 1, assignments, instance=leader_instance))
    coordinator.call(ApiKey.SYNC_GROUP, 3, sync_request(silent, 1, instance=silent_instance))
    group = coordinator.shard.groups["g"]
    assert group.state.value == "Stable"
    # The leader joins again (a rebalance); the silent static member neither rejoins nor syncs.
    rejoin = join(leader_instance, leader)
    coordinator.advance(rebalance_ms)  # the join completes without it: a static member keeps its place
    assert coordinator.answers.pop(rejoin).generation_id == 2
    assert silent in group.members and group.state.value == "CompletingRebalance"
    coordinator.call(ApiKey.SYNC_GROUP, 3, sync_request(leader, 2, assignments, instance=leader_instance))
    coordinator.advance(rebalance_ms - 1)
    assert silent in group.members
    coordinator.advance(1)  # 20 s after its last request, 40 s before its session would end
    assert silent not in group.members and group.state.value == "PreparingRebalance"
    [(event, fields)] = coordinator.runtime.take_notices()
    assert (event, fields["group_instance_id"], fields["reason"]) == (
        "group_member_expired", silent_instance, "no SyncGroup within the rebalance timeout")


def commit(group, member_id, generation, offsets, metadata=""):
    request_class = messages.OffsetCommitRequest
    by_topic = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(request_class.OffsetCommitRequestPartition(
            partition_index=partition, committed_offset=offset, committed_metadata=metadata))
    return request_class(group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
                         topics=[request_class.OffsetCommitRequestTopic(name=t, partitions=p) for t, p in by_topic.items()])


def fetch(group, topics=None, require_stable=False):
    request_class = messages.OffsetFetchRequest
    return request_class(group_id=group, require_stable=require_stable, topics=None if topics is None else [
        request_class.OffsetFetchRequestTopic(name=t, partition_indexes=list(ps)) for t, ps in topics.items()])


def fetched(response) -> dict:
    return {(t.name, p.partition_index): (p.committed_offset, p.error_code) for t in response.topics for p in t.partitions}


def commit_errors(response) -> set:
    return {p.error_code for t in response.topics for p in t.partitions}


def test_offset_commits_are_checked_against_the_generation_and_fetched_back():
    coordinator = Coordinator()
    leader, members = stable_group(coordinator)
    assert commit_errors(coordinator.call(ApiKey.OFFSET_COMMIT, 7, commit("g", leader, 1, {("t", 0): 42}))) == {ErrorCode.NONE}
    assert commit_errors(coordinator.call(ApiKey.OFFSET_COMMIT, 7, commit("g", leader, 0, {("t", 0): 1}))) == {
        ErrorCode.ILLEGAL_GENERATION}
    assert commit_errors(coordinator.call(ApiKey.OFFSET_COMMIT, 7, commit("g", "stranger", 1, {("t", 0): 1}))) == {
        ErrorCode.UNKNOWN_MEMBER_ID}
    # An admin commit (no member, generation -1) is refused while the group has members.
    assert commit_errors(coordinator.call(ApiKey.OFFSET_COMMIT, 7, commit("g", "", -1, {("t", 0): 1}))) == {
        ErrorCode.UNKNOWN_MEMBER_ID}
    too_long = commit("g", leader, 1, {("t", 1): 5}, metadata="x" * 5000)
    assert commit_errors(coordinator.call(ApiKey.OFFSET_COMMIT, 7, too_long)) == {ErrorCode.OFFSET_METADATA_TOO_LARGE}
    assert fetched(coordinator.call(ApiKey.OFFSET_FETCH, 7, fetch("g", {"t": [0, 1]}))) == {
        ("t", 0): (42, ErrorCode.NONE), ("t", 1): (-1, ErrorCode.NONE)}
    assert fetched(coordinator.call(ApiKey.OFFSET_FETCH, 7, fetch("g"))) == {("t", 0): (42, ErrorCode.NONE)}


def test_a_simple_consumer_commits_without_a_group_and_deleting_the_group_drops_its_offsets():
    coordinator = Coordinator()
    assert commit_errors(coordinator.call(ApiKey.OFFSET_COMMIT, 7, commit("solo", "", -1, {("t", 0): 9}))) == {ErrorCode.NONE}
    listed = coordinator.shard.list_groups()
    assert [(g.group_id, g.state) for g in listed] == [("solo", "Empty")]
    deleted = coordinator.call(ApiKey.DELETE_GROUPS, 1, "solo")
    assert deleted == ("solo", ErrorCode.NONE)
    assert coordinator.shard.list_groups() == []
    assert coordinator.call(ApiKey.DELETE_GROUPS, 1, "solo") == ("solo", ErrorCode.GROUP_ID_NOT_FOUND)


def test_a_group_with_members_cannot_be_deleted():
    coordinator = Coordinator()
    stable_group(coordinator, 1)
    assert coordinator.call(ApiKey.DELETE_GROUPS, 1, "g") == ("g", ErrorCode.NON_EMPTY_GROUP)


def test_a_shard_rebuilt_from_its_log_knows_the_groups_generations_assignments_and_offsets():
    coordinator = Coordinator()
    leader, members = stable_group(coordinator)
    coordinator.call(ApiKey.OFFSET_COMMIT, 7, commit("g", leader, 1, {("t", 0): 42, ("t", 1): 7}))
    reloaded = Coordinator(port=coordinator.port, epoch=2)
    group = reloaded.shard.groups["g"]
    original = coordinator.shard.groups["g"]
    assert (group.generation, group.leader_id, group.protocol_name, group.state) == (
        original.generation, original.leader_id, original.protocol_name, original.state)
    assert {m: member.assignment for m, member in group.members.items()} == {m: m.encode() for m in members}
    assert reloaded.shard.offsets.committed == coordinator.shard.offsets.committed
    # The members carry on with the new coordinator without a rebalance.
    assert reloaded.call(ApiKey.HEARTBEAT, 3, heartbeat(leader, 1)).error_code == ErrorCode.NONE


def test_transactional_offsets_stay_pending_until_the_commit_marker():  # KIP-98, KIP-447
    coordinator = Coordinator()
    record = CoordinatorRecord(encode_key(OffsetCommitKey("g", "t", 0)), encode_offset_commit_value(OffsetCommitValue(77)))
    coordinator.port.append(0, 1, [record], TransactionalWrite(producer_id=5, producer_epoch=0), 0)
    coordinator.poll()
    assert fetched(coordinator.call(ApiKey.OFFSET_FETCH, 7, fetch("g", {"t": [0]}))) == {("t", 0): (-1, ErrorCode.NONE)}
    unstable = coordinator.call(ApiKey.OFFSET_FETCH, 7, fetch("g", {"t": [0]}, require_stable=True))
    assert fetched(unstable) == {("t", 0): (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)}
    coordinator.port.append_marker(0, producer_id=5, commit=True, leader_epoch=1)
    coordinator.poll()
    assert fetched(coordinator.call(ApiKey.OFFSET_FETCH, 7, fetch("g", {"t": [0]}, require_stable=True))) == {
        ("t", 0): (77, ErrorCode.NONE)}


def test_offsets_of_an_empty_group_expire_after_the_retention():
    config = GroupConfig(initial_rebalance_delay_ms=0, offsets_retention_ms=60_000,
                         offsets_retention_check_interval_ms=10_000)
    coordinator = Coordinator(config)
    coordinator.call(ApiKey.OFFSET_COMMIT, 7, commit("old", "", -1, {("t", 0): 3}))
    coordinator.advance(50_000)
    assert coordinator.shard.offsets.committed["old"]
    coordinator.advance(20_000)
    assert "old" not in coordinator.shard.offsets.committed


def test_a_join_storm_is_bounded_by_group_max_size():
    coordinator = Coordinator(GroupConfig(initial_rebalance_delay_ms=0, group_max_size=100))
    codes = [coordinator.call(ApiKey.JOIN_GROUP, 5, join_request(group="storm")).error_code for _ in range(10_000)]
    assert codes.count(ErrorCode.MEMBER_ID_REQUIRED) == 100
    assert codes.count(ErrorCode.GROUP_MAX_SIZE_REACHED) == 9_900
    group = coordinator.shard.groups["storm"]
    assert len(group.pending_members) + len(group.members) == 100


def test_bad_joins_get_their_kafka_errors():
    coordinator = Coordinator()
    assert coordinator.call(ApiKey.JOIN_GROUP, 5, join_request(group="")).error_code == ErrorCode.INVALID_GROUP_ID
    assert coordinator.call(ApiKey.JOIN_GROUP, 5, join_request(session_ms=10)).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    huge = join_request()
    huge.protocols[0].metadata = b"x" * (2 * 1024 * 1024)
    assert coordinator.call(ApiKey.JOIN_GROUP, 5, huge).error_code == ErrorCode.INVALID_REQUEST
    assert coordinator.call(ApiKey.JOIN_GROUP, 5, join_request(member_id="unknown")).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    stable_group(coordinator, 1)
    other_type = join_request()
    other_type.protocol_type = "connect"
    assert coordinator.call(ApiKey.JOIN_GROUP, 5, other_type).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_join_and_sync_name_the_protocol_from_v7_and_v5_and_sync_v5_requires_it():  # KIP-559
    coordinator = Coordinator()
    joined = [coordinator.answers.pop(r) for r in form_group(coordinator, 2, version=9)]
    assert {(r.protocol_type, r.protocol_name, r.skip_assignment) for r in joined} == {("consumer", "range", False)}
    leader = joined[0].leader
    follower = next(r.member_id for r in joined if r.member_id != leader)
    unnamed = coordinator.call(ApiKey.SYNC_GROUP, 5, sync_request(follower, 1))  # v5 without type and name
    assert unnamed.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    named = sync_request(follower, 1)
    named.protocol_type, named.protocol_name = "consumer", "other"
    assert coordinator.call(ApiKey.SYNC_GROUP, 5, named).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    named.protocol_name = "range"
    parked = coordinator.send(ApiKey.SYNC_GROUP, 5, named)
    leader_sync = sync_request(leader, 1, {leader: b"a", follower: b"b"})
    leader_sync.protocol_type, leader_sync.protocol_name = "consumer", "range"
    answer = coordinator.call(ApiKey.SYNC_GROUP, 5, leader_sync)
    assert (answer.error_code, answer.protocol_type, answer.protocol_name, answer.assignment) == \
        (ErrorCode.NONE, "consumer", "range", b"a")
    assert coordinator.answers.pop(parked).assignment == b"b"
    # The same answers at versions that do not carry the fields encode and decode without them.
    from net.protocol.codec import RequestHeader, decode_response, encode_response
    for version in (4, 5, 6, 7, 9):
        frame = encode_response(RequestHeader(ApiKey.JOIN_GROUP, version, 7), joined[0])
        _, decoded = decode_response(ApiKey.JOIN_GROUP, version, frame[4:], strict=True)
        assert decoded.protocol_type == ("consumer" if version >= 7 else None)


def test_a_static_leader_rejoining_a_stable_group_at_v9_gets_the_members_and_skips_the_assignment():  # KIP-814
    for version, skips in ((8, False), (9, True)):
        coordinator = Coordinator()
        instances = ["i-0", "i-1"]
        leader, members = stable_group(coordinator, 2, instances=instances)
        instance_of = dict(zip(members, instances))
        restarted = coordinator.call(ApiKey.JOIN_GROUP, version, join_request(instance=instance_of[leader]))
        assert restarted.error_code == ErrorCode.NONE and restarted.generation_id == 1  # no rebalance
        assert restarted.skip_assignment is skips
        assert len(restarted.members) == (2 if skips else 0)  # before v9 the leader is answered as a follower
        if skips:
            assert restarted.leader == restarted.member_id
            assert {m.member_id for m in restarted.members} == {restarted.member_id} | (set(members) - {leader})
        else:
            assert restarted.leader == leader  # the id it replaced: the client does not take itself for the leader
        assert coordinator.shard.groups["g"].state.value == "Stable"
