"""Checkers of the groups simulation, on top of the whole-cluster checkers (simulations/cluster_checkers.py).

- generation_exclusive: in the classic protocol no two members of one generation are handed the same
  partition (observed from the SyncGroup answers the members receive).
- commit_kept: an acknowledged offset commit is never lost or moved backwards by a stale member. Client-side
  acknowledgements arrive in any order across members, so the rule is stated with happens-before: a commit
  acknowledged at offset O for a partition, by a request sent after an acknowledgement of offset F > O for
  the same partition had been received, is a violation (the coordinator accepted a stale member's commit,
  or lost the acknowledged F). At the end, the coordinator's committed offset of each partition is at least
  the largest acknowledged one. In the groups workload (the classic protocol only) a commit is also a violation
  when it is acknowledged for a generation older than one some member had been assigned (a SyncGroup answered
  NONE, which the coordinator sends once the generation is written) before the commit left: the coordinator
  then knew the newer generation, and Kafka's classic groups refuse any other (ILLEGAL_GENERATION). It catches
  a stale member's commit whether or not it moves the offset back. Consumer groups check a member's commit
  against that member's own epoch, which may trail the group's, so their workloads leave this part out.
- group_delivery: every record acknowledged to the acks=all producer is consumed by some member of the group
  at least once (checked once the run converged).
- coordinator_answers_prompt: while nothing is wrong, the coordinator answers a member's SyncGroup,
  Heartbeat, OffsetCommit, OffsetFetch and ConsumerGroupHeartbeat within `ANSWER_MS_MAX`. "Nothing is wrong"
  is read from the trace (`FaultWindows`): no fault in effect (partition, slow link, message loss, a node
  down, paused or shutting down, a member crashed, gone or paused) and none started or ended from
  `SETTLE_MS` before the request was sent until its answer (or its timeout, or its reset) reached the member.
  In such a stretch an answer takes milliseconds (a request, a replica fetch of its records, the answer);
  one held for a timer, for another member's request or for a write timeout (5 s) is a coordinator that
  missed a change. JoinGroup is left out: it waits for the rebalance by design, as long as the slowest member
  takes. The checker only listens (to the trace and to the members' answers), so it moves no trace hash;
  most of the answers it checks come after the heal, as quiet stretches of `SETTLE_MS` are rare under faults.
- parked_sync_answered: a SyncGroup the coordinator parked (answered after more than `ANSWER_MS_MAX`, the
  followers' wait for their leader's assignment) is answered within `PARKED_SYNC_MS_MAX` and never
  UNKNOWN_MEMBER_ID, when it left within the rebalance timeout of its JoinGroup's answer and no fault was in
  effect or changed from that answer until its own (a group reloaded by a restarted coordinator, which holds
  a SyncGroup while it loads, knows no member of a generation it never wrote). A slow leader
  (`group.assigning` ... `group.assign_done`, a member's assignor outliving its session or its rebalance
  timeout while it heartbeats) is not a fault here. While a member waits in a parked SyncGroup its session
  is not expired (it is not heartbeating); a member that does not send its SyncGroup within the rebalance
  timeout is removed and the waiting members are told to rejoin. So a parked SyncGroup is answered by the
  leader's assignment (written to the log: the write timeout bounds that), by REBALANCE_IN_PROGRESS, or by a
  coordinator that moved, and the longest legitimate wait is the rebalance timeout plus the write timeout.
- late_sync_fenced: a SyncGroup sent more than `LATE_SYNC_MS` after the member's JoinGroup answer arrived is
  not answered with an assignment (NONE), when no fault of the nodes or the network was in effect or changed
  meanwhile, no node made a coordinator shard (so the one that answered the JoinGroup, and holds the member's
  deadline in memory, answered the SyncGroup) and the group was not converted between the protocols: a
  classic group removes a member that sends no SyncGroup within the rebalance timeout (Kafka's pending-sync
  expiry), and a consumer group fences a classic member that does not (Kafka's consumer group sync timeout),
  so the late SyncGroup meets UNKNOWN_MEMBER_ID, or a rebalance. The members' own faults do not matter here:
  another member's arrival or departure only starts a rebalance.
- liveness (extended): after the faults heal, within the bound, every running member is in one Stable
  generation, the partitions are all owned, and the members have read up to each partition's high watermark.
"""

from __future__ import annotations

from typing import Any

from coordinator.runtime import WRITE_TIMEOUT_MS_DEFAULT
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode
from simulations.cluster_checkers import ClusterCheckers, TopicPartition
from simulations.group_clients import REBALANCE_TIMEOUT_MS, SESSION_TIMEOUT_MS
from simulations.kafka_clients import REQUEST_TIMEOUT_MS
from simulations.loop import US_PER_MS
from simulations.node_process import REPLICA_IDLE_BACKOFF_MS, STEP_INTERVAL_MS

GROUP_CHECKER_NAMES = ("generation_exclusive", "commit_kept", "group_delivery", "coordinator_answers_prompt",
                       "parked_sync_answered", "late_sync_fenced")
# The coordinator requests that must be answered promptly while nothing is wrong (JoinGroup waits for the
# rebalance; FindCoordinator and LeaveGroup are not answered by a shard).
PROMPT_API_KEYS = frozenset({ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH,
                             ApiKey.CONSUMER_GROUP_HEARTBEAT})
# A quiet stretch answers in a few milliseconds (at most 4 over 1,000 default-fault runs of the two group
# workloads, 5 without faults): messages take at most 1 ms without faults, and the slowest steps of a
# coordinator write, the node's periodic step and a follower's idle fetch backoff, wait a tick each. Well under
# the write timeout (5,000), so an answer held for a timer or for another member's request fails too.
ANSWER_MS_MAX = 300
# How long the after-effects of a fault last: a dead follower holds the high watermark until it leaves the
# ISR (the workloads' replica_lag_time_max_ms, 3,000), a dead node keeps its leaderships until its broker
# session expires (3,000), a stalled member holds a SyncGroup until its session expires (SESSION_TIMEOUT_MS).
SETTLE_MS = 5_000
# The longest a parked SyncGroup waits with nothing wrong: its group's rebalance timeout (the members' own,
# REBALANCE_TIMEOUT_MS) until a leader that never sends its SyncGroup is removed, or a leader's SyncGroup just
# inside it whose assignment write then waits out the write timeout; plus the answer's own slack.
PARKED_SYNC_MS_MAX = REBALANCE_TIMEOUT_MS + WRITE_TIMEOUT_MS_DEFAULT + ANSWER_MS_MAX
# A SyncGroup this long after its JoinGroup's answer comes after the member's rebalance timeout (which runs
# from the coordinator's answer, before it arrived) and the coordinator's timer for it.
LATE_SYNC_MS = REBALANCE_TIMEOUT_MS + ANSWER_MS_MAX
assert ANSWER_MS_MAX < min(WRITE_TIMEOUT_MS_DEFAULT, REQUEST_TIMEOUT_MS), (ANSWER_MS_MAX, WRITE_TIMEOUT_MS_DEFAULT)
assert ANSWER_MS_MAX >= 3 * max(STEP_INTERVAL_MS, REPLICA_IDLE_BACKOFF_MS), (ANSWER_MS_MAX, STEP_INTERVAL_MS)
assert SETTLE_MS > SESSION_TIMEOUT_MS, (SETTLE_MS, SESSION_TIMEOUT_MS)


# Trace lines that start or end a state of one node or member (named by the line's first field):
# kind -> (the state it starts or None, the states it ends).
_STATE_LINES: dict[str, tuple[str | None, tuple[str, ...]]] = {
    "net.pause": ("paused", ()),
    "net.resume": (None, ("paused",)),
    "fault.controlled_shutdown": ("stopping", ()),
    "net.down": ("down", ("paused", "stopping")),
    "net.up": (None, ("down", "paused")),
    "group.crash": ("member_down", ()),
    "group.leave": ("member_down", ()),
    "group.restart": (None, ("member_down",)),
    "group.pause": ("member_paused", ()),
    "group.resume": (None, ("member_paused",)),
    "group.assigning": ("member_slow", ()),
    "group.assign_done": (None, ("member_slow",)),
}
# A slow leader: a fault for coordinator_answers_prompt (its followers' SyncGroups wait for it by design), the
# very case parked_sync_answered checks.
_SLOW_LINES = frozenset({"group.assigning", "group.assign_done"})


def _late(member: str, request: str, sent_ms: int, waited_ms: int, answered: bool) -> str:
    return f"{member}'s {request} sent at {sent_ms} ms {'answered' if answered else 'given up'} after {waited_ms} ms"


class FaultWindows:
    """The faults in effect, and when the last one started or ended, read from the run's trace lines (a trace
    listener). A fault shows as its own line (`fault.*`, `node.*`), as what it does to the network (`net.*`:
    a blocked or slowed link, message loss, a node down or paused, a reset stream) or as a member's fault
    (`group.crash` ... `group.restart`). Every such line is a change; some start or end a state."""

    def __init__(self) -> None:
        self.in_effect: set[tuple[Any, ...]] = set()
        self.changed_ms = 0
        self.fault_changed_ms = 0  # the same, a slow leader's lines left out
        self.cluster_changed_ms = 0  # the same, every member's lines left out

    def observe_trace_line(self, time_us: int, kind: str, fields: tuple[Any, ...]) -> None:
        if kind in _STATE_LINES:
            starts, ends = _STATE_LINES[kind]
            self.in_effect -= {(state, fields[0]) for state in ends}
            if starts is not None:
                self.in_effect.add((starts, fields[0]))
        elif kind in ("net.block", "net.slow"):
            self.in_effect.add(("link", fields[0], fields[1]))
        elif kind == "net.heal":
            self.in_effect = {state for state in self.in_effect if state[0] != "link"}
        elif kind == "net.drop_probability":
            (self.in_effect.add if float(fields[0]) else self.in_effect.discard)(("drop",))
        elif not kind.startswith(("fault.", "node.", "net.reset")):
            return  # deliveries, connects, assignments: the run going on, not a fault
        self.changed_ms = time_us // US_PER_MS
        if kind not in _SLOW_LINES:
            self.fault_changed_ms = self.changed_ms
        if not kind.startswith("group."):
            self.cluster_changed_ms = self.changed_ms

    def quiet_since(self, time_ms: int) -> bool:
        """No fault in effect now, and none started or ended after `time_ms`."""
        return not self.in_effect and self.changed_ms < time_ms

    def cluster_quiet_since(self, time_ms: int) -> bool:
        """`quiet_since`, the members' faults not counted."""
        return self.cluster_changed_ms < time_ms and all(state[0].startswith("member_") for state in self.in_effect)

    def quiet_but_slow_leaders_since(self, time_ms: int) -> bool:
        """`quiet_since`, a slow leader not counted as a fault."""
        return self.fault_changed_ms < time_ms and all(state[0] == "member_slow" for state in self.in_effect)


class GroupCheckers(ClusterCheckers):
    """The cluster's checkers plus the group ones (see the module docstring)."""

    extra_checker_names = GROUP_CHECKER_NAMES
    stale_generations_checked = True  # commit_kept's generation rule: classic groups only (see the docstring)

    def __init__(self) -> None:
        super().__init__()
        self.owners: dict[tuple[str, int], dict[int, str]] = {}  # (group, generation) -> partition -> member
        self.assigned_generation: dict[str, int] = {}  # group -> the newest generation any member was assigned
        self.max_acked_commit: dict[tuple[str, int], int] = {}  # (group, partition) -> offset
        self.group_consumed: dict[TopicPartition, set[int]] = {}
        self.commits_acked = 0
        self.assignments_seen = 0
        self.fault_windows = FaultWindows()
        self.quiet_answers = 0  # answers coordinator_answers_prompt checked, and the slowest (statistics)
        self.quiet_answer_ms_max = 0
        self.parked_syncs = 0  # parked SyncGroups parked_sync_answered checked, and the longest wait (statistics)
        self.parked_sync_ms_max = 0
        self.late_syncs = 0  # late SyncGroups late_sync_fenced checked (statistics)
        self.conversions = 0  # of the group between the protocols, seen so far (the migration workload's)
        self.shards_made = 0  # group coordinator shards made by every node so far


    def observe_assignment(self, group: str, generation: int, member_id: str, partitions: list[int]) -> None:
        self.assignments_seen += 1
        self.assigned_generation[group] = max(self.assigned_generation.get(group, -1), generation)
        owners = self.owners.setdefault((group, generation), {})
        for partition in partitions:
            owner = owners.setdefault(partition, member_id)
            if owner != member_id:
                self.violate("generation_exclusive", f"group {group} generation {generation}: partition {partition} "
                                                     f"assigned to {owner} and to {member_id}")

    def commit_floor(self, group: str, partition: int) -> int:
        """The largest commit of this partition acknowledged so far (-1 when none): a commit sent now must not
        be acknowledged below it."""
        return self.max_acked_commit.get((group, partition), -1)

    def generation_floor(self, group: str) -> int:
        """The newest generation of `group` a member has been assigned so far (-1 when none, or when this workload
        does not check generations): a commit sent now for an older one must not be acknowledged."""
        return self.assigned_generation.get(group, -1) if self.stale_generations_checked else -1

    def observe_commit_acked(self, group: str, partition: int, offset: int, floor: int, generation: int,
                             member_id: str, generation_floor: int = -1) -> None:
        self.commits_acked += 1
        if offset < floor:
            self.violate("commit_kept", f"group {group} partition {partition}: commit of {offset} by {member_id} "
                                        f"(generation {generation}) acknowledged after {floor} had been")
        elif 0 <= generation < generation_floor:
            self.violate("commit_kept", f"group {group} partition {partition}: commit of {offset} by {member_id} "
                                        f"(generation {generation}) acknowledged after generation "
                                        f"{generation_floor} had been assigned")
        key = (group, partition)
        self.max_acked_commit[key] = max(self.max_acked_commit.get(key, -1), offset)

    def observe_coordinator_answer(self, api_key: int, member: str, sent_ms: int, answered_ms: int,
                                   answered: bool) -> None:
        """`member`'s coordinator request `api_key`, sent at `sent_ms`, was answered (or, not `answered`, timed
        out or lost with its connection) at `answered_ms`."""
        if api_key not in PROMPT_API_KEYS or not self.fault_windows.quiet_since(sent_ms - SETTLE_MS):
            return
        waited_ms = answered_ms - sent_ms
        self.quiet_answers += 1
        self.quiet_answer_ms_max = max(self.quiet_answer_ms_max, waited_ms)
        if waited_ms > ANSWER_MS_MAX:
            late = _late(member, ApiKey(api_key).name, sent_ms, waited_ms, answered)
            self.violate("coordinator_answers_prompt",
                         f"{late}, no fault in effect or changed since {sent_ms - SETTLE_MS} ms")

    def coordinators_seen(self) -> tuple[int, int]:
        """What a coordinator's change shows as: conversions of the group, coordinator shards made."""
        return self.conversions, self.shards_made

    def observe_sync_answer(self, member: str, joined_ms: int, sent_ms: int, answered_ms: int,
                            coordinators: tuple[int, int], error_code: int | None) -> None:
        """`member` sent a SyncGroup at `sent_ms` after its JoinGroup answer arrived at `joined_ms` (when
        `coordinators_seen()` was `coordinators`), and it was answered `error_code` at `answered_ms` (None: timed
        out or lost with its connection)."""
        # Only where parked_sync_answered is a checker: a consumer group answers its classic members otherwise.
        waited_ms = answered_ms - sent_ms
        if waited_ms > ANSWER_MS_MAX and sent_ms - joined_ms <= REBALANCE_TIMEOUT_MS \
                and "parked_sync_answered" in self.extra_checker_names \
                and self.fault_windows.quiet_but_slow_leaders_since(joined_ms):
            self._check_parked_sync(member, sent_ms, waited_ms, error_code)
        if error_code is None or sent_ms - joined_ms <= LATE_SYNC_MS \
                or "late_sync_fenced" not in self.extra_checker_names or coordinators != self.coordinators_seen() \
                or not self.fault_windows.cluster_quiet_since(joined_ms):
            return
        self.late_syncs += 1
        if error_code == ErrorCode.NONE:
            self.violate("late_sync_fenced", f"{member}'s SyncGroup sent {sent_ms - joined_ms} ms after its JoinGroup "
                                             f"answer (at {joined_ms} ms) was answered with an assignment by the same "
                                             f"coordinator, no fault of the cluster in effect or changed meanwhile")

    def _check_parked_sync(self, member: str, sent_ms: int, waited_ms: int, error_code: int | None) -> None:
        self.parked_syncs += 1
        self.parked_sync_ms_max = max(self.parked_sync_ms_max, waited_ms)
        if waited_ms > PARKED_SYNC_MS_MAX:
            answered = error_code is not None
            self.violate("parked_sync_answered", f"{_late(member, 'SyncGroup', sent_ms, waited_ms, answered)} (at "
                                                 f"most {PARKED_SYNC_MS_MAX}), no fault but slow leaders in effect "
                                                 f"or changed meanwhile")
        elif error_code == ErrorCode.UNKNOWN_MEMBER_ID:
            self.violate("parked_sync_answered", f"{member}'s SyncGroup sent at {sent_ms} ms answered "
                                                 f"UNKNOWN_MEMBER_ID after waiting {waited_ms} ms: removed while "
                                                 f"it waited, no fault but slow leaders in effect or changed")

    def observe_group_record(self, key: TopicPartition, offset: int, value: bytes, high_watermark: int) -> None:
        if offset >= high_watermark:
            self.violate("reads_committed", f"{key[0]}-{key[1]} group member read offset {offset} at or above "
                                            f"the high watermark {high_watermark}")
        self.group_consumed.setdefault(key, set()).add(offset)

    def check_final_commits(self, group: str, committed: dict[int, int]) -> None:
        for (checked_group, partition), offset in sorted(self.max_acked_commit.items()):
            if checked_group == group and committed.get(partition, -1) < offset:
                self.violate("commit_kept", f"group {group} partition {partition}: committed "
                                            f"{committed.get(partition, -1)} at the end, {offset} was acknowledged")

    def check_group_delivery(self) -> None:
        for key, acked in sorted(self.acked.items()):
            missing = sorted(set(acked) - self.group_consumed.get(key, set()))
            if missing:
                self.violate("group_delivery", f"{key[0]}-{key[1]}: {len(missing)} acknowledged records never "
                                               f"consumed by the group, first at offset {missing[0]}")

