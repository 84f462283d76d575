"""The classic consumer-group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), sans-IO.

Theory of operation (Kafka's ClassicGroup and the classic half of GroupMetadataManager). A group moves
through Kafka's states:

    Empty --join--> PreparingRebalance --all joined / timeout--> CompletingRebalance --leader's sync--> Stable
      ^                      ^                                                                         |
      +---- last member gone +------------- join of a new member, a leave, a session expiry ----------+

- PreparingRebalance waits until every known member has sent JoinGroup again (its request is parked) and no
  member id handed out by MEMBER_ID_REQUIRED (KIP-394) is still pending, or until the rebalance timeout (the
  largest of the members'): then dynamic members that did not rejoin are removed, the generation moves on,
  a protocol every member supports is chosen by vote, and every parked JoinGroup is answered (the leader's
  answer carries the members' metadata). The first rebalance of an empty group also waits
  `initial_rebalance_delay_ms` so that a starting fleet joins one generation.
- CompletingRebalance parks SyncGroup requests until the leader's arrives with the assignment; the
  GroupMetadata record (generation, protocol, leader, members with their assignments) is written then, and
  every parked SyncGroup is answered with its member's assignment once that record is committed. A member
  that has not sent its SyncGroup within the rebalance timeout of the join's completion is removed and the
  group rebalances (Kafka's pending-sync expiry), whether the group is still CompletingRebalance or Stable.
- Stable answers SyncGroup at once with the member's assignment, and Heartbeat with NONE.
- A member waiting in a parked JoinGroup or SyncGroup counts as heartbeating (Kafka's
  `hasSatisfiedHeartbeat`): clients stop heartbeating while they rebalance, and the rebalance timeout (join)
  or the pending-sync expiry bounds the wait instead of the session timeout.
- A member has at most one parked JoinGroup and one parked SyncGroup. A newer one from the same member
  replaces the older, which is answered REBALANCE_IN_PROGRESS at once: Kafka drops it unanswered, which is
  harmless there because its socket server reads one request per connection at a time, but replies on a
  Flotilla connection are written in order, so an unanswered request would hold back every later reply.
- A static member (KIP-345, `group.instance.id`) that comes back under a new member id while the group is
  Stable takes over its old member's place and assignment without a rebalance; the old id is fenced
  (FENCED_INSTANCE_ID).

Durable state (what survives a failover) is only what GroupMetadata records say: `replay_group_metadata`
sets generation, protocol, leader, members and assignments, and the state Stable (or Empty). Everything else
(members joining, parked requests, deadlines) is volatile, as in Kafka; after a failover members that were
mid-rebalance get UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION and join again.

Every method here returns what to append and what to answer; none does I/O or reads a clock.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from coordinator.shard import CoordinatorRecord, Notice
from groupcoord.config import GroupConfig
from groupcoord.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    encode_group_metadata_value,
    encode_key,
)
from net.protocol import messages
from partitions.errors import ErrorCode

# JoinGroup v9 (KIP-814): a static leader that rejoins a stable group gets the members with SkipAssignment.
JOIN_GROUP_VERSION_SKIPS_ASSIGNMENT = 9
# SyncGroup v5 (KIP-559): ProtocolType and ProtocolName are mandatory in the request.
SYNC_GROUP_VERSION_NAMES_PROTOCOL = 5


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class ClassicMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_request: int | None = None  # a parked JoinGroup
    join_version: int = 0
    sync_request: int | None = None  # a parked SyncGroup
    session_deadline_ms: int = 0

    @property
    def awaiting_rebalance(self) -> bool:
        """Waiting in a parked JoinGroup or SyncGroup: its session is not expired meanwhile (Kafka's
        `hasSatisfiedHeartbeat`)."""
        return self.join_request is not None or self.sync_request is not None

    def metadata_for(self, protocol: str | None) -> bytes:
        return next((metadata for name, metadata in self.protocols if name == protocol), b"")


Completions = list[tuple[int, Any]]


@dataclass
class Outcome:
    """What one operation on a group produced: records, this request's answer (None: parked or none), and
    answers to parked requests."""

    records: list[CoordinatorRecord] = field(default_factory=list)
    response: Any = None
    completions: Completions = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)  # for the node's log (CoordinatorResult.notices)


class ClassicGroup:
    """One classic group (see the module docstring). `group_type` is "classic"."""

    group_type = "classic"
    # Test-only planted bug for the simulator's checkers (simulations/groups_sim.py); never configured:
    # commits of an older generation are accepted, from members still in the group or long gone.
    bug_accept_stale_generation = False
    # ... and two more: a member waiting in a parked JoinGroup or SyncGroup is expired for its session like one
    # that heartbeats; members that send no SyncGroup after a join are never removed for it.
    bug_expire_parked_members = False
    bug_no_pending_sync_expiry = False

    def __init__(self, group_id: str, config: GroupConfig) -> None:
        self.group_id = group_id
        self.config = config
        self.state = GroupState.EMPTY
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, ClassicMember] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_members: dict[str, int] = {}  # member id (MEMBER_ID_REQUIRED) -> deadline
        self.rebalance_deadline_ms: int | None = None
        self.initial_delay_deadline_ms: int | None = None
        # Members of the generation whose SyncGroup has not arrived, and when they are removed for it.
        self.pending_sync: set[str] = set()
        self.sync_deadline_ms: int | None = None
        self.state_timestamp_ms = -1
        self._member_ids = 0

    # --- the group interface (groupcoord/group.py) --------------------------------------------------------

    def is_empty(self) -> bool:
        return not self.members

    @property
    def state_name(self) -> str:
        return self.state.value

    def validate_offset_commit(self, member_id: str, generation: int, group_instance_id: str | None) -> ErrorCode:
        """Kafka's ClassicGroup.validateOffsetCommit: an admin commit (no member, generation -1) only while
        the group is Empty; a member's commit with its current generation, but not while the group completes
        a rebalance (its generation there is not yet known to the members)."""
        if self.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and not member_id and self.state is GroupState.EMPTY:
            return ErrorCode.NONE
        if self.bug_accept_stale_generation and 0 <= generation < self.generation:
            return ErrorCode.NONE
        code = self._check_member(member_id, group_instance_id)
        if code != ErrorCode.NONE:
            return code
        if generation != self.generation:
            return ErrorCode.ILLEGAL_GENERATION
        if self.state is GroupState.COMPLETING_REBALANCE and generation == self.generation:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def validate_delete(self) -> ErrorCode:
        if self.state is GroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND
        return ErrorCode.NONE if self.state is GroupState.EMPTY else ErrorCode.NON_EMPTY_GROUP

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol), or None when the protocol is not "consumer"
        (then the group's interest in a topic cannot be known)."""
        if self.protocol_type != "consumer" or not self.members:
            return set() if not self.members else None
        topics: set[str] = set()
        for member in self.members.values():
            topics |= decode_subscription_topics(member.metadata_for(self.protocol_name))
        return topics

    def touch(self, member_id: str, now_ms: int) -> None:
        member = self.members.get(member_id)
        if member is not None:
            member.session_deadline_ms = now_ms + member.session_timeout_ms

    # --- JoinGroup ----------------------------------------------------------------------------------------

    def join(self, request_id: int, version: int, request: Any, client_id: str, client_host: str,
             now_ms: int) -> Outcome:
        code = self._validate_join(request)
        if code != ErrorCode.NONE:
            return Outcome(response=join_error(code, request.member_id))
        if not self.members:
            self.protocol_type = request.protocol_type
        if not request.member_id:
            return self._join_unknown_member(request_id, version, request, client_id, client_host, now_ms)
        return self._join_known_member(request_id, version, request, client_id, client_host, now_ms)

    def _validate_join(self, request: Any) -> ErrorCode:
        config = self.config
        if not config.session_timeout_ms_min <= request.session_timeout_ms <= config.session_timeout_ms_max:
            return ErrorCode.INVALID_SESSION_TIMEOUT
        if self.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if sum(len(p.metadata or b"") for p in request.protocols) > config.member_metadata_bytes_max:
            return ErrorCode.INVALID_REQUEST
        names = {p.name for p in request.protocols}
        if not request.protocol_type or not names:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if self.members and (request.protocol_type != self.protocol_type or not names & self._common_protocols()):
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        return ErrorCode.NONE

    def _common_protocols(self, excluding: str | None = None) -> set[str]:
        sets = [{name for name, _ in m.protocols} for m in self.members.values() if m.member_id != excluding]
        return set.intersection(*sets) if sets else set()

    def _new_member_id(self, client_id: str, now_ms: int) -> str:
        while True:
            self._member_ids += 1
            candidate = f"{client_id or 'member'}-{now_ms}-{self.generation}-{self._member_ids}"
            if candidate not in self.members and candidate not in self.pending_members:
                return candidate

    def _join_unknown_member(self, request_id: int, version: int, request: Any, client_id: str,
                             client_host: str, now_ms: int) -> Outcome:
        instance = request.group_instance_id
        if instance is not None and instance in self.static_members:
            return self._rejoin_static_member(request_id, version, request, client_id, now_ms)
        if len(self.members) + len(self.pending_members) >= self.config.group_max_size:
            return Outcome(response=join_error(ErrorCode.GROUP_MAX_SIZE_REACHED, ""))
        member_id = self._new_member_id(client_id, now_ms)
        if instance is None and version >= 4:  # KIP-394: the member must come back with this id
            self.pending_members[member_id] = now_ms + request.session_timeout_ms
            return Outcome(response=join_error(ErrorCode.MEMBER_ID_REQUIRED, member_id))
        member = self._member_from(request, member_id, client_id, client_host)
        return self._add_member_and_rebalance(member, request_id, version, now_ms)

    def _member_from(self, request: Any, member_id: str, client_id: str, client_host: str) -> ClassicMember:
        return ClassicMember(
            member_id, request.group_instance_id, client_id, client_host, request.session_timeout_ms,
            request.rebalance_timeout_ms if request.rebalance_timeout_ms > 0 else request.session_timeout_ms,
            [(p.name, bytes(p.metadata or b"")) for p in request.protocols])

    def _join_known_member(self, request_id: int, version: int, request: Any, client_id: str, client_host: str,
                           now_ms: int) -> Outcome:
        member_id = request.member_id
        if member_id in self.pending_members:
            del self.pending_members[member_id]
            if len(self.members) >= self.config.group_max_size:
                return Outcome(response=join_error(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id))
            member = self._member_from(request, member_id, client_id, client_host)
            return self._add_member_and_rebalance(member, request_id, version, now_ms)
        code = self._check_member(member_id, request.group_instance_id)
        if code != ErrorCode.NONE:
            return Outcome(response=join_error(code, member_id))
        member = self.members[member_id]
        protocols = [(p.name, bytes(p.metadata or b"")) for p in request.protocols]
        changed = protocols != member.protocols
        member.protocols = protocols
        member.session_timeout_ms = request.session_timeout_ms
        if request.rebalance_timeout_ms > 0:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        self.touch(member_id, now_ms)
        if self.state is GroupState.PREPARING_REBALANCE:
            superseded = member.join_request
            member.join_request, member.join_version = request_id, version
            outcome = Outcome()
            if superseded is not None:
                outcome.completions.append((superseded, join_error(ErrorCode.REBALANCE_IN_PROGRESS, member_id)))
            return merge(outcome, self._maybe_complete_join(now_ms))
        if self.state is GroupState.COMPLETING_REBALANCE and not changed:
            return Outcome(response=self._join_response(member))  # a lost join answer: the same again
        if self.state is GroupState.STABLE and not changed and member_id != self.leader_id:
            return Outcome(response=self._join_response(member))
        member.join_request, member.join_version = request_id, version
        return self.prepare_rebalance(now_ms)

    def _rejoin_static_member(self, request_id: int, version: int, request: Any, client_id: str,
                              now_ms: int) -> Outcome:
        """KIP-345: a known group.instance.id with a new member id replaces its old member."""
        old_id = self.static_members[request.group_instance_id]
        old = self.members.pop(old_id)
        outcome = Outcome()
        if old.join_request is not None:
            outcome.completions.append((old.join_request, join_error(ErrorCode.FENCED_INSTANCE_ID, old_id)))
        if old.sync_request is not None:
            outcome.completions.append((old.sync_request, sync_error(ErrorCode.FENCED_INSTANCE_ID)))
        new_id = self._new_member_id(client_id, now_ms)
        leader_before = self.leader_id
        protocols = [(p.name, bytes(p.metadata or b"")) for p in request.protocols]
        member = ClassicMember(new_id, old.group_instance_id, client_id, old.client_host, request.session_timeout_ms,
                               old.rebalance_timeout_ms, protocols, old.assignment)
        self.members[new_id] = member
        self.static_members[old.group_instance_id] = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        if self.leader_id == old_id:
            self.leader_id = new_id
        self.touch(new_id, now_ms)
        if self.state is GroupState.STABLE and protocols == old.protocols:
            # No rebalance: persist the new member id, answer as the group stands. From JoinGroup v9 (KIP-814)
            # the leader gets the members with SkipAssignment, so that it knows them without assigning again;
            # before, a leader is answered as a follower, naming the leader it replaced as Kafka does, so that
            # it does not assign (SyncGroup in Stable ignores assignments anyway).
            outcome.records.append(self.metadata_record(now_ms))
            if version >= JOIN_GROUP_VERSION_SKIPS_ASSIGNMENT and new_id == self.leader_id:
                outcome.response = self._join_response(member, skip_assignment=True)
            else:
                outcome.response = self._join_response(member, as_follower=True, leader=leader_before)
            return outcome
        member.join_request, member.join_version = request_id, version
        rebalance = self.prepare_rebalance(now_ms) if self.state is not GroupState.PREPARING_REBALANCE \
            else self._maybe_complete_join(now_ms)
        return merge(outcome, rebalance)

    def _add_member_and_rebalance(self, member: ClassicMember, request_id: int, version: int, now_ms: int) -> Outcome:
        member.join_request, member.join_version = request_id, version
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.touch(member.member_id, now_ms)
        if self.state is GroupState.PREPARING_REBALANCE:
            return self._maybe_complete_join(now_ms)
        return self.prepare_rebalance(now_ms)

    def _join_response(self, member: ClassicMember, as_follower: bool = False, skip_assignment: bool = False,
                       leader: str | None = None) -> Any:
        response_class = messages.JoinGroupResponse
        is_leader = member.member_id == self.leader_id and not as_follower
        members = [response_class.JoinGroupResponseMember(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                                          metadata=m.metadata_for(self.protocol_name))
                   for m in self.members.values()] if is_leader else []
        return response_class(throttle_time_ms=0, error_code=ErrorCode.NONE, generation_id=self.generation,
                              protocol_type=self.protocol_type, protocol_name=self.protocol_name or "",
                              leader=(leader or self.leader_id) or "", skip_assignment=skip_assignment,
                              member_id=member.member_id, members=members)

    # --- rebalances ---------------------------------------------------------------------------------------

    def prepare_rebalance(self, now_ms: int) -> Outcome:
        outcome = Outcome()
        if self.state is GroupState.COMPLETING_REBALANCE:
            for member in self.members.values():  # their generation is over before it was used
                member.assignment = b""
                if member.sync_request is not None:
                    outcome.completions.append((member.sync_request, sync_error(ErrorCode.REBALANCE_IN_PROGRESS)))
                    member.sync_request = None
                    self.touch(member.member_id, now_ms)  # its session runs from the answer, as in Kafka
        was_empty = self.state is GroupState.EMPTY
        self.state = GroupState.PREPARING_REBALANCE
        self.pending_sync.clear()
        self.sync_deadline_ms = None
        self.state_timestamp_ms = now_ms
        timeout = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        self.rebalance_deadline_ms = now_ms + timeout
        if was_empty and self.config.initial_rebalance_delay_ms > 0:
            self.initial_delay_deadline_ms = now_ms + min(self.config.initial_rebalance_delay_ms, timeout)
        return merge(outcome, self._maybe_complete_join(now_ms))

    def _maybe_complete_join(self, now_ms: int) -> Outcome:
        if self.state is not GroupState.PREPARING_REBALANCE:
            return Outcome()
        if self.initial_delay_deadline_ms is not None:
            if now_ms < self.initial_delay_deadline_ms:
                return Outcome()
            self.initial_delay_deadline_ms = None
            return self._complete_join(now_ms)
        if self.pending_members or any(m.join_request is None for m in self.members.values()):
            return Outcome()
        return self._complete_join(now_ms)

    def _complete_join(self, now_ms: int) -> Outcome:
        outcome = Outcome()
        for member in [m for m in self.members.values() if m.join_request is None]:
            if member.group_instance_id is None:  # a static member keeps its place until its session expires
                self._remove(member)
        self.generation += 1
        self.rebalance_deadline_ms = None
        self.state_timestamp_ms = now_ms
        joined = [m for m in self.members.values() if m.join_request is not None]
        if not joined:
            self.state, self.protocol_name, self.leader_id = GroupState.EMPTY, None, None
            self.members.clear()
            self.static_members.clear()
            outcome.records.append(self.metadata_record(now_ms))
            return outcome
        self.protocol_name = self._select_protocol()
        if self.leader_id not in self.members or self.members[self.leader_id].join_request is None:
            self.leader_id = joined[0].member_id
        self.state = GroupState.COMPLETING_REBALANCE
        # Every member owes a SyncGroup, a static one that did not rejoin too (Kafka's completeClassicGroupJoin).
        self.pending_sync = set(self.members)
        self.sync_deadline_ms = now_ms + max(member.rebalance_timeout_ms for member in self.members.values())
        for member in joined:
            outcome.completions.append((member.join_request, self._join_response(member)))
            member.join_request = None
            self.touch(member.member_id, now_ms)
        return outcome

    def _select_protocol(self) -> str:
        protocol = vote_protocol([member.protocols for member in self.members.values()])
        assert protocol is not None, f"group {self.group_id}: members share no protocol"
        return protocol

    # --- SyncGroup, Heartbeat, LeaveGroup ------------------------------------------------------------------

    def sync(self, request_id: int, request: Any, now_ms: int) -> Outcome:
        code = self._check_member(request.member_id, request.group_instance_id)
        if code == ErrorCode.NONE and request.generation_id != self.generation:
            code = ErrorCode.ILLEGAL_GENERATION
        if code == ErrorCode.NONE and (
                (getattr(request, "protocol_type", None) and request.protocol_type != self.protocol_type)
                or (getattr(request, "protocol_name", None) and request.protocol_name != self.protocol_name)):
            code = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if code == ErrorCode.NONE and self.state is GroupState.PREPARING_REBALANCE:
            code = ErrorCode.REBALANCE_IN_PROGRESS
        if code != ErrorCode.NONE:
            return Outcome(response=sync_error(code))
        member = self.members[request.member_id]
        self.touch(member.member_id, now_ms)
        if self.state is GroupState.STABLE:
            self.pending_sync.discard(member.member_id)
            return Outcome(response=self._sync_answer(member.assignment))
        outcome = Outcome()
        if member.sync_request is not None:
            outcome.completions.append((member.sync_request, sync_error(ErrorCode.REBALANCE_IN_PROGRESS)))
        member.sync_request = request_id
        if member.member_id != self.leader_id:
            self.pending_sync.discard(member.member_id)
            return outcome
        assignments = {a.member_id: bytes(a.assignment or b"") for a in request.assignments}
        if sum(map(len, assignments.values())) > self.config.member_metadata_bytes_max * max(len(self.members), 1):
            member.sync_request = None
            outcome.response = sync_error(ErrorCode.INVALID_REQUEST)
            return outcome
        self.pending_sync.discard(member.member_id)
        outcome.records.append(self.metadata_record(now_ms, assignments))
        for other in self.members.values():
            if other.sync_request is not None:
                outcome.completions.append((other.sync_request, self._sync_answer(assignments.get(other.member_id, b""))))
                other.sync_request = None
                self.touch(other.member_id, now_ms)  # its session runs from the answer, as in Kafka
        return outcome

    def _sync_answer(self, assignment: bytes) -> Any:
        """A SyncGroup answer with the group's protocol type and name (read by v5+ clients, KIP-559)."""
        return messages.SyncGroupResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, assignment=assignment,
                                          protocol_type=self.protocol_type, protocol_name=self.protocol_name)

    def heartbeat(self, request: Any, now_ms: int) -> Any:
        response_class = messages.HeartbeatResponse
        code = self._check_member(request.member_id, request.group_instance_id)
        if code == ErrorCode.NONE and request.generation_id != self.generation:
            code = ErrorCode.ILLEGAL_GENERATION
        if code == ErrorCode.NONE:
            self.touch(request.member_id, now_ms)
            if self.state is GroupState.PREPARING_REBALANCE:
                code = ErrorCode.REBALANCE_IN_PROGRESS
        return response_class(throttle_time_ms=0, error_code=code)

    def leave(self, version: int, request: Any, now_ms: int) -> Outcome:
        response_class = messages.LeaveGroupResponse
        if version < 3:
            identities = [(request.member_id, None)]
        else:
            identities = [(m.member_id, m.group_instance_id) for m in request.members]
        results, outcome = [], Outcome()
        for member_id, instance in identities:
            if not member_id and instance is not None:
                member_id = self.static_members.get(instance, "")
            code = self._check_member(member_id, instance)
            if code == ErrorCode.NONE:
                outcome = merge(outcome, self.remove_member(self.members[member_id], now_ms))
            results.append(response_class.MemberResponse(member_id=member_id, group_instance_id=instance,
                                                         error_code=code))
        top = results[0].error_code if version < 3 else ErrorCode.NONE
        outcome.response = response_class(throttle_time_ms=0, error_code=top, members=results)
        return outcome

    def remove_member(self, member: ClassicMember, now_ms: int) -> Outcome:
        """A member leaves (LeaveGroup, or its session expired): the others rebalance without it."""
        outcome = Outcome(completions=self._evict(member))
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            return merge(outcome, self.prepare_rebalance(now_ms))
        if self.state is GroupState.PREPARING_REBALANCE:
            return merge(outcome, self._maybe_complete_join(now_ms))
        return outcome

    def _evict(self, member: ClassicMember) -> Completions:
        """The member removed; its parked requests, answered UNKNOWN_MEMBER_ID."""
        completions = [(parked, answer) for parked, answer in (
            (member.join_request, join_error(ErrorCode.UNKNOWN_MEMBER_ID, member.member_id)),
            (member.sync_request, sync_error(ErrorCode.UNKNOWN_MEMBER_ID))) if parked is not None]
        self._remove(member)
        return completions

    def _remove(self, member: ClassicMember) -> None:
        self.members.pop(member.member_id, None)
        self.pending_sync.discard(member.member_id)
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member.member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member.member_id:
            self.leader_id = next(iter(self.members), None)

    def _check_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode:
        if group_instance_id is not None:
            known = self.static_members.get(group_instance_id)
            if known is not None and known != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    # --- time ---------------------------------------------------------------------------------------------

    def next_deadline_ms(self) -> int | None:
        deadlines = [m.session_deadline_ms for m in self.members.values() if not self._exempt(m)]
        deadlines += list(self.pending_members.values())
        if self.pending_sync and self.sync_deadline_ms is not None and not self.bug_no_pending_sync_expiry:
            deadlines.append(self.sync_deadline_ms)
        for deadline in (self.rebalance_deadline_ms, self.initial_delay_deadline_ms):
            if deadline is not None and self.state is GroupState.PREPARING_REBALANCE:
                deadlines.append(deadline)
        return min(deadlines) if deadlines else None

    def poll(self, now_ms: int) -> Outcome:
        outcome = Outcome()
        for member_id, deadline in list(self.pending_members.items()):
            if deadline <= now_ms:
                del self.pending_members[member_id]
        for member in list(self.members.values()):
            # A member waiting in a JoinGroup or SyncGroup is not heartbeating: the rebalance timeout bounds it.
            if not self._exempt(member) and member.session_deadline_ms <= now_ms and member.member_id in self.members:
                outcome = merge(outcome, self.remove_member(member, now_ms))
                outcome.notices.append(self._expired_notice(member, "session expired",
                                                            session_timeout_ms=member.session_timeout_ms))
        if self.pending_sync and self.sync_deadline_ms is not None and self.sync_deadline_ms <= now_ms \
                and self.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE) \
                and not self.bug_no_pending_sync_expiry:
            outcome = merge(outcome, self._expire_pending_sync(now_ms))
        if self.state is GroupState.PREPARING_REBALANCE:
            if self.rebalance_deadline_ms is not None and self.rebalance_deadline_ms <= now_ms:
                self.initial_delay_deadline_ms = None
                outcome = merge(outcome, self._complete_join(now_ms))
            else:
                outcome = merge(outcome, self._maybe_complete_join(now_ms))
        return outcome

    def _exempt(self, member: ClassicMember) -> bool:
        """Not expired for its session: it waits in a JoinGroup or SyncGroup (the rebalance timeout bounds it)."""
        return member.awaiting_rebalance and not self.bug_expire_parked_members

    def _expire_pending_sync(self, now_ms: int) -> Outcome:
        """The members that joined the generation but sent no SyncGroup within the rebalance timeout are removed
        and the others rebalance without them (Kafka's `expirePendingSync`)."""
        outcome = Outcome()
        for member_id in sorted(self.pending_sync):
            member = self.members[member_id]
            outcome.completions += self._evict(member)
            outcome.notices.append(self._expired_notice(member, "no SyncGroup within the rebalance timeout",
                                                        rebalance_timeout_ms=member.rebalance_timeout_ms))
        return merge(outcome, self.prepare_rebalance(now_ms))

    def _expired_notice(self, member: ClassicMember, reason: str, **timeout_ms: int) -> Notice:
        """`group_member_expired` for the node's log: who, why, and the timeout that ran out."""
        return ("group_member_expired", dict(
            group_id=self.group_id, member_id=member.member_id, group_instance_id=member.group_instance_id,
            client_id=member.client_id, client_host=member.client_host, protocol="classic", reason=reason,
            **timeout_ms))

    # --- durable state ------------------------------------------------------------------------------------

    def metadata_record(self, now_ms: int, assignments: dict[str, bytes] | None = None) -> CoordinatorRecord:
        members = tuple(
            MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                           m.session_timeout_ms, m.metadata_for(self.protocol_name),
                           (assignments or {}).get(m.member_id, m.assignment) if assignments is not None
                           else m.assignment)
            for m in self.members.values())
        value = GroupMetadataValue(self.protocol_type or "", self.generation, self.protocol_name, self.leader_id,
                                   now_ms, members)
        return CoordinatorRecord(encode_key(GroupMetadataKey(self.group_id)), encode_group_metadata_value(value))

    def replay_group_metadata(self, value: GroupMetadataValue) -> None:
        """The group as the record says: generation, protocol, leader, members and their assignments; Stable
        with members, else Empty. Members the record names keep their volatile state when present."""
        self.generation = value.generation
        self.protocol_type = value.protocol_type or None
        self.protocol_name = value.protocol
        self.leader_id = value.leader
        self.state_timestamp_ms = value.current_state_timestamp
        known = self.members
        self.members, self.static_members = {}, {}
        for recorded in value.members:
            member = known.get(recorded.member_id) or ClassicMember(
                recorded.member_id, recorded.group_instance_id, recorded.client_id, recorded.client_host,
                recorded.session_timeout, recorded.rebalance_timeout, [(value.protocol or "", recorded.subscription)])
            member.assignment = recorded.assignment
            self.members[member.member_id] = member
            if member.group_instance_id is not None:
                self.static_members[member.group_instance_id] = member.member_id
        self.state = GroupState.STABLE if self.members else GroupState.EMPTY
        self.rebalance_deadline_ms = self.initial_delay_deadline_ms = None

    def on_loaded(self, now_ms: int) -> None:
        for member in self.members.values():
            member.session_deadline_ms = now_ms + member.session_timeout_ms

    def parked_request_ids(self) -> list[int]:
        return [r for m in self.members.values() for r in (m.join_request, m.sync_request) if r is not None]

    def describe(self) -> Any:
        response_class = messages.DescribeGroupsResponse
        return response_class.DescribedGroup(
            error_code=ErrorCode.NONE, group_id=self.group_id, group_state=self.state.value,
            protocol_type=self.protocol_type or "", protocol_data=self.protocol_name or "",
            members=[response_class.DescribedGroupMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=m.client_host, member_metadata=m.metadata_for(self.protocol_name),
                member_assignment=m.assignment) for m in self.members.values()],
        )


def vote_protocol(protocol_lists: list) -> str | None:
    """Kafka's vote for a group's protocol, given each member's (name, metadata) protocols in its order of
    preference: among the protocols every member supports, each member votes for its first preference; ties go
    by the first member's order. None when the members share no protocol."""
    if not protocol_lists:
        return None
    common = set.intersection(*({name for name, _ in protocols} for protocols in protocol_lists))
    if not common:
        return None
    votes: dict[str, int] = {}
    for protocols in protocol_lists:
        choice = next(name for name, _ in protocols if name in common)
        votes[choice] = votes.get(choice, 0) + 1
    order = [name for name, _ in protocol_lists[0] if name in common]
    return max(order, key=lambda name: votes.get(name, 0))


def merge(first: Outcome, second: Outcome) -> Outcome:
    return Outcome(first.records + second.records, second.response if second.response is not None else first.response,
                   first.completions + second.completions, first.notices + second.notices)


def join_error(code: ErrorCode, member_id: str) -> Any:
    return messages.JoinGroupResponse(throttle_time_ms=0, error_code=code, generation_id=-1, protocol_name="",
                                      leader="", member_id=member_id, members=[])


def sync_error(code: ErrorCode) -> Any:
    return messages.SyncGroupResponse(throttle_time_ms=0, error_code=code, assignment=b"")


def decode_subscription_topics(metadata: bytes) -> set[str]:
    """The topics of a ConsumerProtocolSubscription (any version: version int16, Topics []string first)."""
    from net.protocol.types import ProtocolDecodeError, Reader

    try:
        reader = Reader(metadata)
        reader.int16()
        count = reader.array_length(compact=False, nullable=False, item_bytes_min=2)
        return {reader.string() for _ in range(count)}
    except ProtocolDecodeError:
        return set()
