"""A consumer-group member for the groups simulation: the classic protocol over the real codec.

Theory of operation. `SimGroupConsumer` is what librdkafka's eager consumer does, reduced to its protocol:

    find coordinator -> JoinGroup (v5; MEMBER_ID_REQUIRED first, KIP-394) -> SyncGroup (the leader computes a
    range assignment) -> OffsetFetch (start at the committed offsets, else 0) -> fetch, commit every
    COMMIT_INTERVAL_MS, heartbeat every HEARTBEAT_INTERVAL_MS

REBALANCE_IN_PROGRESS (from a heartbeat or a commit) makes it commit what it consumed and join again with
its member id (eager: it gives up every partition); UNKNOWN_MEMBER_ID starts over without one;
ILLEGAL_GENERATION joins again; NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS,
a timeout or a reset connection look the coordinator up again after a backoff. Every state change bumps
`epoch`; an answer to a request of an older epoch is ignored, as a client drops answers it no longer waits
for.

The workload's faults act on members too: `crash()` (gone without LeaveGroup; its session expires),
`restart()` (a new process: new member id, offsets from the coordinator), `leave()` (a clean close), `pause()`
/ `resume()` (a stalled process: on resume it carries on with the generation it had, which is how a stale
member's commit reaches the coordinator) and `assign_slowly(ms, leader_only)` (the next time it leads a
generation, or with `leader_only` false the next time it joins one, its SyncGroup leaves `ms` after the
JoinGroup answer while its heartbeats go on, as the Java client's heartbeat thread does from the JoinGroup
answer on (COMPLETING_REBALANCE) beside a slow assignor or a stalled application thread; a heartbeat's error
does not stop that SyncGroup, whose answer tells the member what to do, as in the Java client; the followers
of a slow leader wait in their parked SyncGroups meanwhile). The wait shows in the trace as `group.assigning`
... `group.assign_done`. Observations go to the checkers: assignments per generation, records consumed,
commits acknowledged (with the floor of acknowledgements seen before the commit was sent), and when each
coordinator request was sent and answered.
"""

from __future__ import annotations

import struct
from typing import Any, Callable

from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.batch import iter_batches
from partitions.errors import ErrorCode, KafkaError
from partitions.records import decode_batch
from simulations.kafka_clients import FETCH_VERSION, REQUEST_TIMEOUT_MS, FaultedClient, KafkaClientBase
from simulations.loop import US_PER_MS

TICK_MS = 100
HEARTBEAT_INTERVAL_MS = 500
COMMIT_INTERVAL_MS = 500
SESSION_TIMEOUT_MS = 3_000
REBALANCE_TIMEOUT_MS = 5_000
RETRY_BACKOFF_MS = 200
FETCH_MAX_WAIT_MS = 200
PARTITION_BYTES_MAX = 256 * 1024
FIND_COORDINATOR_VERSION = 2
JOIN_GROUP_VERSION = 5
SYNC_GROUP_VERSION = 3
HEARTBEAT_VERSION = 3
LEAVE_GROUP_VERSION = 3
OFFSET_COMMIT_VERSION = 7
OFFSET_FETCH_VERSION = 7
PROTOCOL = "range"
JOIN_REQUEST_TIMEOUT_MS = 30_000

COORDINATOR_ERRORS = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})


def encode_subscription(topic: str) -> bytes:
    """ConsumerProtocolSubscription v0: version, [topic], user data null."""
    name = topic.encode()
    return struct.pack(">hih", 0, 1, len(name)) + name + struct.pack(">i", -1)


def encode_assignment(topic: str, partitions: list[int]) -> bytes:
    """ConsumerProtocolAssignment v0: version, [(topic, [partition])], user data null."""
    name = topic.encode()
    body = struct.pack(">hih", 0, 1, len(name)) + name + struct.pack(">i", len(partitions))
    return body + b"".join(struct.pack(">i", p) for p in partitions) + struct.pack(">i", -1)


def decode_assignment(blob: bytes) -> list[int]:
    if len(blob) < 6:
        return []
    _, topics = struct.unpack_from(">hi", blob)
    position, partitions = 6, []
    for _ in range(topics):
        (length,) = struct.unpack_from(">h", blob, position)
        position += 2 + length
        (count,) = struct.unpack_from(">i", blob, position)
        position += 4
        partitions += list(struct.unpack_from(f">{count}i", blob, position))
        position += 4 * count
    return sorted(partitions)


def range_assignment(member_ids: list[str], partitions: int) -> dict[str, list[int]]:
    """Kafka's RangeAssignor for one topic: members sorted, contiguous ranges, the first ones one larger."""
    ordered = sorted(member_ids)
    per_member, extra = divmod(partitions, len(ordered))
    assignment, start = {}, 0
    for index, member_id in enumerate(ordered):
        size = per_member + (1 if index < extra else 0)
        assignment[member_id] = list(range(start, start + size))
        start += size
    return assignment


class SimGroupConsumer(FaultedClient, KafkaClientBase):
    """One group member (see the module docstring)."""

    TRACE_KIND = "group"
    TICK_MS = TICK_MS

    offset_commit_version = OFFSET_COMMIT_VERSION
    # How long a JoinGroup or SyncGroup may wait: the coordinator holds either for up to the rebalance timeout,
    # and longer while a write of the group waits, so a client gives them more than its other requests (the
    # Java client: the larger of request.timeout.ms, 30 s by default, and the rebalance timeout plus 5 s).
    # None: the request timeout alone, as the consumer-protocol members' classic mode keeps it.
    rebalance_request_timeout_ms: int | None = max(JOIN_REQUEST_TIMEOUT_MS, REBALANCE_TIMEOUT_MS + 5_000)

    def __init__(self, host: Any, client_id: int, name: str, group: str, topic: str, partitions: int,
                 checkers: Any, on_record: Callable[[tuple[str, int], int, bytes, int], None]) -> None:
        super().__init__(host, client_id, name, topic, partitions)
        self.group = group
        self.checkers = checkers
        self.on_record = on_record
        self.running = False
        self.paused = False
        self.slow_assign_ms = 0  # armed by assign_slowly(): the next SyncGroup this member sends waits for it
        self.slow_assign_leader_only = True
        self._deferred: list[Callable[[], None]] = []
        self._reset()

    def _reset(self) -> None:
        self._end_slow_assignment()
        self.state = "find"
        self.epoch = getattr(self, "epoch", 0) + 1
        self.coordinator: int | None = None
        self.member_id = ""
        self.generation = -1
        self.assignment: list[int] = []
        self.positions: dict[int, int] = {}
        self.committed: dict[int, int] = {}
        self.fetching: set[int] = set()
        self.inflight = False
        self.joined_ms = 0  # when the last JoinGroup answer arrived, and the coordinators the checkers had seen
        self.joined_coordinators = (0, 0)
        self.retry_at_ms = 0
        self.heartbeat_due_ms = 0
        self.commit_due_ms = 0
        self.records = 0

    # --- lifecycle (the workload's faults: FaultedClient, and a clean leave) ---------------------------------

    def _guard_token(self) -> int:
        return self.epoch

    def leave(self) -> None:
        if not self.running or self.coordinator is None or not self.member_id:
            return
        self.host.trace("group.leave", self.name)
        request_class = messages.LeaveGroupRequest
        request = request_class(group_id=self.group, members=[request_class.MemberIdentity(
            member_id=self.member_id, group_instance_id=None)])
        self.send(self.coordinator, ApiKey.LEAVE_GROUP, LEAVE_GROUP_VERSION, request, lambda response: None)
        self.running = False
        self._reset()

    def assign_slowly(self, delay_ms: int, leader_only: bool = True) -> None:
        self.host.trace("group.slow_assign", self.name, delay_ms)
        self.slow_assign_ms, self.slow_assign_leader_only = delay_ms, leader_only

    def _end_slow_assignment(self) -> None:
        if getattr(self, "state", None) == "assigning":
            self.host.trace("group.assign_done", self.name)

    def _to(self, state: str, delay_ms: int = 0) -> None:
        self._end_slow_assignment()
        self.state = state
        self.epoch += 1
        self.inflight = False
        self.fetching.clear()
        self.retry_at_ms = self.loop.now_ms + delay_ms

    def _lost_coordinator(self) -> None:
        self.coordinator = None
        self._to("find", RETRY_BACKOFF_MS)

    # --- the state machine -----------------------------------------------------------------------------------

    def _tick(self) -> None:
        if not self.running:
            return
        self.loop.call_later(TICK_MS * US_PER_MS, self._tick)
        if self.paused:
            return
        self.maybe_refresh_metadata()
        now = self.loop.now_ms
        if self.inflight or now < self.retry_at_ms:
            if self.state == "stable":
                self._fetch_all()
            return
        if self.state == "find" or (self.coordinator is not None and self.coordinator not in self.connected):
            self._find_coordinator()
        elif self.state == "join":
            self._join()
        elif self.state == "assigning":
            if now >= self.heartbeat_due_ms:
                self._heartbeat()
        elif self.state == "stable":
            if now >= self.commit_due_ms:
                self._commit()
            elif now >= self.heartbeat_due_ms:
                self._heartbeat()
            self._fetch_all()

    def _request(self, broker: int | None, api_key: int, version: int, request: Any,
                 callback: Callable[[Any], None]) -> None:
        sent_ms, guarded = self.loop.now_ms, self._guarded(self.epoch, callback)

        def answered(response: Any) -> None:  # an answer, a timeout or a lost connection
            self.checkers.observe_coordinator_answer(api_key, self.name, sent_ms, self.loop.now_ms,
                                                     response is not None)
            guarded(response)

        timeout_ms = REQUEST_TIMEOUT_MS
        if api_key in (ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP) and self.rebalance_request_timeout_ms is not None:
            timeout_ms = self.rebalance_request_timeout_ms
        if broker is None or not self.send(broker, api_key, version, request, answered, timeout_ms):
            self._lost_coordinator()
            return
        self.inflight = True

    def _find_coordinator(self) -> None:
        request = messages.FindCoordinatorRequest(key=self.group, key_type=0)
        if self.state == "assigning":  # the coordinator's connection lost meanwhile: the SyncGroup will not leave
            self._to("find")
        self.state = "find"
        self._request(self.any_broker(), ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION, request, self._on_found)

    def _on_found(self, response: Any) -> None:
        self.inflight = False
        if response is None or response.error_code != ErrorCode.NONE:
            self._lost_coordinator()
            return
        self.coordinator = response.node_id
        self._to("join")

    def _join(self) -> None:
        request_class = messages.JoinGroupRequest
        request = request_class(
            group_id=self.group, session_timeout_ms=SESSION_TIMEOUT_MS, rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
            member_id=self.member_id, group_instance_id=None, protocol_type="consumer",
            protocols=[request_class.JoinGroupRequestProtocol(name=PROTOCOL, metadata=encode_subscription(self.topic))])
        self._request(self.coordinator, ApiKey.JOIN_GROUP, JOIN_GROUP_VERSION, request, self._on_joined)

    def _on_joined(self, response: Any) -> None:
        self.inflight = False
        if response is None or response.error_code in COORDINATOR_ERRORS:
            self._lost_coordinator()
            return
        code = response.error_code
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = response.member_id
            self._to("join")
            return
        if code != ErrorCode.NONE:
            if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
                self.member_id = ""
            self._to("join", RETRY_BACKOFF_MS)
            return
        self.member_id, self.generation = response.member_id, response.generation_id
        self.joined_ms, self.joined_coordinators = self.loop.now_ms, self.checkers.coordinators_seen()
        assignments = []
        if response.leader == self.member_id:
            plan = range_assignment([m.member_id for m in response.members], self.partitions)
            request_class = messages.SyncGroupRequest
            assignments = [request_class.SyncGroupRequestAssignment(member_id=m, assignment=encode_assignment(
                self.topic, partitions)) for m, partitions in sorted(plan.items())]
        request = messages.SyncGroupRequest(group_id=self.group, generation_id=self.generation,
                                            member_id=self.member_id, group_instance_id=None, assignments=assignments)
        if self.slow_assign_ms and (assignments or not self.slow_assign_leader_only):
            delay_ms, self.slow_assign_ms = self.slow_assign_ms, 0
            self.host.trace("group.assigning", self.name, self.generation, delay_ms)
            self.state, self.heartbeat_due_ms = "assigning", self.loop.now_ms + HEARTBEAT_INTERVAL_MS
            self.loop.call_later(delay_ms * US_PER_MS, self._guarded(self.epoch, lambda _: self._sync(request)), None)
            return
        self._sync(request)

    def _sync(self, request: Any) -> None:
        self._end_slow_assignment()
        self.state = "sync"
        joined_ms, coordinators, sent_ms = self.joined_ms, self.joined_coordinators, self.loop.now_ms

        def on_synced(response: Any) -> None:
            self.checkers.observe_sync_answer(self.name, joined_ms, sent_ms, self.loop.now_ms, coordinators,
                                              getattr(response, "error_code", None))
            self._on_synced(response)

        self._request(self.coordinator, ApiKey.SYNC_GROUP, SYNC_GROUP_VERSION, request, on_synced)

    def _on_synced(self, response: Any) -> None:
        self.inflight = False
        if response is None or response.error_code in COORDINATOR_ERRORS:
            self._lost_coordinator()
            return
        if response.error_code != ErrorCode.NONE:
            if response.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            self._to("join", RETRY_BACKOFF_MS)
            return
        self.assignment = decode_assignment(bytes(response.assignment))
        self.checkers.observe_assignment(self.group, self.generation, self.member_id, self.assignment)
        self.host.trace("group.assigned", self.name, self.generation, ",".join(map(str, self.assignment)) or "-")
        self.state = "offsets"
        self._fetch_offsets(self.assignment, self._on_offsets)

    def _fetch_offsets(self, partitions: list[int], then: Callable[[bool], None]) -> None:
        """Start `partitions` at their committed offsets (0 without one), then `then(True)`; `then(False)` when
        a partition's offset is refused (a lost answer: the coordinator is looked up again instead)."""
        request_class = messages.OffsetFetchRequest
        request = request_class(group_id=self.group, require_stable=False, topics=[request_class.OffsetFetchRequestTopic(
            name=self.topic, partition_indexes=partitions)])

        def on_offsets(response: Any) -> None:
            self.inflight = False
            if response is None or response.error_code in COORDINATOR_ERRORS:
                self._lost_coordinator()
                return
            for topic in response.topics:
                for partition in topic.partitions:
                    if partition.error_code != ErrorCode.NONE:
                        then(False)
                        return
                    self.positions[partition.partition_index] = max(partition.committed_offset, 0)
                    self.committed[partition.partition_index] = max(partition.committed_offset, 0)
            then(True)

        self._request(self.coordinator, ApiKey.OFFSET_FETCH, OFFSET_FETCH_VERSION, request, on_offsets)

    def _on_offsets(self, fetched: bool) -> None:
        if not fetched:
            self._to("join", RETRY_BACKOFF_MS)
            return
        self.state = "stable"
        now = self.loop.now_ms
        self.heartbeat_due_ms, self.commit_due_ms = now + HEARTBEAT_INTERVAL_MS, now + COMMIT_INTERVAL_MS

    def _heartbeat(self) -> None:
        request = messages.HeartbeatRequest(group_id=self.group, generation_id=self.generation,
                                            member_id=self.member_id, group_instance_id=None)
        self._request(self.coordinator, ApiKey.HEARTBEAT, HEARTBEAT_VERSION, request, self._on_heartbeat)

    def _on_heartbeat(self, response: Any) -> None:
        self.inflight = False
        self.heartbeat_due_ms = self.loop.now_ms + HEARTBEAT_INTERVAL_MS
        if self.state == "assigning":
            return  # as the Java client's join does, the SyncGroup leaves anyway, and its answer tells
        if response is None or response.error_code in COORDINATOR_ERRORS:
            self._lost_coordinator()
        elif response.error_code == ErrorCode.REBALANCE_IN_PROGRESS:
            self._commit(then_rejoin=True)
        elif response.error_code != ErrorCode.NONE:
            self._rejoin_after(response.error_code)

    def _rejoin_after(self, code: int) -> None:
        if code == ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        self.assignment = []
        self._to("join", RETRY_BACKOFF_MS)

    def _commit(self, then_rejoin: bool = False) -> None:
        self.commit_due_ms = self.loop.now_ms + COMMIT_INTERVAL_MS
        changed = {p: o for p, o in self.positions.items() if p in self.assignment and o != self.committed.get(p)}
        if not changed:
            if then_rejoin:
                self.assignment = []
                self._to("join")
            return
        def on_committed(codes: dict[int, int]) -> None:
            errors = {c for c in codes.values() if c != ErrorCode.NONE}
            if errors & COORDINATOR_ERRORS:
                self._lost_coordinator()
            elif then_rejoin or ErrorCode.REBALANCE_IN_PROGRESS in errors:
                self.assignment = []
                self._to("join")
            elif errors:
                self._rejoin_after(min(errors))

        self._send_commit(changed, on_committed)

    def _send_commit(self, changed: dict[int, int], on_codes: Callable[[dict[int, int]], None]) -> None:
        """OffsetCommit `changed` (partition -> offset) with this member's generation (or member epoch); each
        acknowledgement goes to the checkers with the floor seen when the request left, then `on_codes` gets
        every partition's error code (a lost answer: the coordinator is looked up again instead)."""
        request_class = messages.OffsetCommitRequest
        request = request_class(
            group_id=self.group, generation_id_or_member_epoch=self.generation, member_id=self.member_id,
            group_instance_id=None, topics=[request_class.OffsetCommitRequestTopic(name=self.topic, partitions=[
                request_class.OffsetCommitRequestPartition(partition_index=p, committed_offset=o,
                                                           committed_leader_epoch=-1, committed_metadata="")
                for p, o in sorted(changed.items())])])
        floors = {p: self.checkers.commit_floor(self.group, p) for p in changed}
        generation, member = self.generation, self.member_id
        generation_floor = self.checkers.generation_floor(self.group)

        def on_committed(response: Any) -> None:
            self.inflight = False
            if response is None:
                self._lost_coordinator()
                return
            codes = {}
            for partition in response.topics[0].partitions if response.topics else []:
                codes[partition.partition_index] = partition.error_code
                if partition.error_code == ErrorCode.NONE:
                    offset = changed[partition.partition_index]
                    self.committed[partition.partition_index] = offset
                    self.checkers.observe_commit_acked(self.group, partition.partition_index, offset,
                                                       floors[partition.partition_index], generation, member,
                                                       generation_floor)
            on_codes(codes)

        self._request(self.coordinator, ApiKey.OFFSET_COMMIT, self.offset_commit_version, request, on_committed)

    # --- fetching --------------------------------------------------------------------------------------------

    def _fetch_all(self) -> None:
        for partition in self.assignment:
            if partition not in self.fetching:
                self._fetch(partition)

    def _fetch(self, partition: int) -> None:
        leader = self.leaders.get(partition)
        if leader is None or partition not in self.positions:
            return
        request_class = messages.FetchRequest
        position = self.positions[partition]
        request = request_class(
            replica_id=-1, max_wait_ms=FETCH_MAX_WAIT_MS, min_bytes=1, max_bytes=PARTITION_BYTES_MAX, isolation_level=0,
            session_id=0, session_epoch=-1, topics=[request_class.FetchTopic(topic=self.topic, partitions=[
                request_class.FetchPartition(partition=partition, current_leader_epoch=leader.leader_epoch,
                                             fetch_offset=position, log_start_offset=-1,
                                             partition_max_bytes=PARTITION_BYTES_MAX)])],
            forgotten_topics_data=[], rack_id="")
        epoch = self.epoch
        if self.send(leader.leader_id, ApiKey.FETCH, FETCH_VERSION, request,
                     self._guarded(epoch, lambda response: self._on_fetched(partition, position, response))):
            self.fetching.add(partition)

    def _on_fetched(self, partition: int, position: int, response: Any) -> None:
        self.fetching.discard(partition)
        if response is None or self.positions.get(partition) != position or partition not in self.assignment:
            return
        data = response.responses[0].partitions[0]
        if response.error_code != ErrorCode.NONE or data.error_code != ErrorCode.NONE:
            self._metadata_due_ms = 0
            return
        records = bytes(data.records or b"")
        try:
            batches = [decode_batch(records[p:p + h.size]) for p, h in iter_batches(records)]
        except KafkaError:
            return  # a corrupt read: fetched again
        key = (self.topic, partition)
        for batch in batches:
            for record in batch.records:
                if record.offset < self.positions[partition]:
                    continue
                self.on_record(key, record.offset, bytes(record.value or b""), data.high_watermark)
                self.positions[partition] = record.offset + 1
                self.records += 1
        if self.state == "stable" and not self.paused:
            self._fetch(partition)
