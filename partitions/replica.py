"""Replica, ISR and high-watermark logic of one partition: Kafka's `Partition` plus the per-partition part of
`ReplicaManager` (produce purgatory, follower fetch handling, follower truncation).

Theory of operation
-------------------
A `Partition` wraps one local `PartitionLog` and is driven entirely by calls; it never does I/O, never reads a
clock and never sends anything. The node (or the simulator) feeds it metadata changes (`become_leader`,
`become_follower`, `apply_isr_change`), requests (`append_records`, `handle_follower_fetch`,
`read_for_consumer`, `last_offset_for_leader_epoch`) and fetch responses (`follower_handle_fetch_response`),
each with `now_ms`, and acts on what comes back: AlterPartition proposals to send to the controller, fetch
responses to send, produce completions to answer.

On the leader:
- Every follower has a `FollowerState` (its log_end_offset as learnt from its fetch offset, when it last
  caught up, when it last fetched). A follower is caught up when its fetch offset reached the leader's LEO
  as it was at the follower's previous fetch (Kafka's `Replica.updateFetchState`).
- high_watermark = min log_end_offset over the "maximal ISR" (the committed ISR, plus the replica being added
  while an expansion is in flight, as Kafka does) and the leader itself; it only moves forward, and it does
  not move at all while the committed ISR is smaller than min.insync.replicas (KIP-966's strict min ISR).
  Kafka also holds the high watermark for a caught-up replica about to join the ISR; so do we.
- ISR changes are decided here and committed by the controller: `maybe_shrink_isr` / `maybe_expand_isr`
  leave a `pending_isr_change` (at most one AlterPartition in flight) and return the proposed ISR; the
  committed result arrives through `apply_isr_change` (AlterPartition response or metadata delta).
- acks=all produce requests wait in a purgatory until high_watermark >= last offset + 1. Completion follows
  Kafka's `checkEnoughReplicasReachOffset`: once the high watermark passes the request it answers NONE, or
  NOT_ENOUGH_REPLICAS_AFTER_APPEND if the maximal ISR is then below min.insync.replicas; it answers
  REQUEST_TIMED_OUT at its deadline and NOT_LEADER_OR_FOLLOWER when leadership is lost.

On a follower:
- `follower_fetch_request` gives (fetch_offset = LEO, last_fetched_epoch = latest epoch of the log).
- A diverging epoch in the response (KIP-320), or the answer to an OffsetsForLeaderEpoch request (KIP-101,
  through `follower_truncate_with_epoch_end_offset`) truncates the log with Kafka's KIP-279 rule: to
  min(leader's end offset, our end offset for that epoch, our LEO). Never to our own high watermark: that
  loses committed records (KIP-101 scenario 1) or lets logs diverge (scenario 2). The node may use either
  path: the KIP-320 path needs nothing but fetches; the KIP-101 path sends OffsetsForLeaderEpoch for
  `follower_fetch_request().last_fetched_epoch` before fetching, and repeats while the call returns False.
- The follower's high watermark is min(leader's high watermark, own LEO); it may move back when a new leader
  has not yet advanced its own (as in Kafka), only the leader's is monotonic.

Invariants (asserted after every change): log_start_offset <= high_watermark <= log_end_offset; the leader
is in the ISR; the leader's high watermark never decreases while it stays leader.

Test-only switches: `bug_hw_from_leader_leo` and `bug_truncate_to_own_hw` are planted bugs for the simulator
and the tests that prove its checkers catch them. They are plain attributes set in code, never read from
configuration; both default to False.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Protocol

from partitions.leader_epoch import LeaderEpochCache
from partitions.errors import (
    ErrorCode,
    FencedLeaderEpochError,
    InvalidRequiredAcksError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    UnknownLeaderEpochError,
)

REPLICA_LAG_TIME_MAX_MS_DEFAULT = 30_000  # Kafka's replica.lag.time.max.ms
MIN_INSYNC_REPLICAS_DEFAULT = 1  # Kafka's min.insync.replicas
PRODUCE_PURGATORY_SIZE_MAX = 10_000  # acks=all requests waiting on one partition
REQUIRED_ACKS_ALL = -1
REQUIRED_ACKS_VALID = frozenset({-1, 0, 1})
UNKNOWN_OFFSET = -1  # Kafka's UnifiedLog.UnknownOffset / UNDEFINED_EPOCH_OFFSET
UNDEFINED_EPOCH = -1
NO_LEADER = -1
# "Never": a time so far back that no lag window reaches it, whatever clock the node or simulator starts at.
TIME_NEVER_MS = -(1 << 62)

assert PRODUCE_PURGATORY_SIZE_MAX > 0, PRODUCE_PURGATORY_SIZE_MAX

# AlterPartition errors after which the controller guarantees the proposal was not applied: drop it.
_ALTER_PARTITION_NOT_APPLIED = frozenset({ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.INELIGIBLE_REPLICA})
# AlterPartition errors after which only a metadata update can tell the truth: keep the proposal pending.
_ALTER_PARTITION_WAIT_FOR_METADATA = frozenset(
    {
        ErrorCode.NEW_LEADER_ELECTED,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.INVALID_UPDATE_VERSION,
    }
)


class PartitionLogPort(Protocol):
    """What this module needs of `partitions.log.PartitionLog`."""

    log_start_offset: int
    log_end_offset: int
    latest_epoch: int | None
    epoch_cache: LeaderEpochCache

    def append_as_leader(self, records: bytes, leader_epoch: int, now_ms: int, origin: Any = ...) -> Any: ...
    def append_as_follower(self, records: bytes, now_ms: int) -> Any: ...
    def read(self, offset: int, max_bytes: int, max_offset: int | None = None, min_one_batch: bool = True) -> Any: ...
    def truncate_to(self, offset: int) -> None: ...
    def truncate_fully_and_start_at(self, offset: int) -> None: ...
    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]: ...
    def assign_epoch_start(self, epoch: int, start_offset: int) -> None: ...
    def delete_records_before(self, offset: int) -> int: ...


class IsolationLevel(enum.IntEnum):
    """Fetch isolation (wire values of the Fetch request's isolation_level)."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


class IsrChangeKind(enum.Enum):
    EXPAND = "expand"
    SHRINK = "shrink"


class EpochEndOffset(NamedTuple):
    """(leader_epoch, end_offset): an OffsetsForLeaderEpoch answer or a fetch response's diverging epoch."""

    leader_epoch: int
    end_offset: int


class FollowerFetchRequest(NamedTuple):
    fetch_offset: int
    last_fetched_epoch: int  # UNDEFINED_EPOCH (-1) when the log holds no epoch yet
    current_leader_epoch: int


class ConsumerFetchResult(NamedTuple):
    records: Any  # bytes, or with zero_copy the log read itself (FetchData: file slices, len() its size)
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int
    diverging_epoch: EpochEndOffset | None = None  # KIP-320 (Fetch v12+): set, the records are empty


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower (Kafka's `ReplicaState`)."""

    replica_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    last_caught_up_time_ms: int = TIME_NEVER_MS
    last_fetch_time_ms: int = TIME_NEVER_MS
    # The leader's LEO at this follower's previous fetch: reaching it means the follower caught up then.
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET

    def is_caught_up(self, leader_log_end_offset: int, now_ms: int, replica_lag_time_max_ms: int) -> bool:
        return (
            self.log_end_offset == leader_log_end_offset
            or now_ms - self.last_caught_up_time_ms <= replica_lag_time_max_ms
        )


@dataclass(frozen=True, slots=True)
class PendingIsrChange:
    """The one AlterPartition in flight. `maximal_isr` is the ISR the high watermark is computed over
    meanwhile: the larger of the committed and the proposed ISR (Kafka's "maximal ISR")."""

    kind: IsrChangeKind
    proposed_isr: tuple[int, ...]
    maximal_isr: frozenset[int]
    leader_epoch: int
    partition_epoch: int  # the partition epoch the proposal is based on (sent to the controller)


@dataclass(frozen=True, slots=True)
class AppendResult:
    """The local append of a produce on the leader. For acks=all, `required_offset` (last offset + 1) is what
    the high watermark must reach; register it with `pending_produce`. None for acks 0 and 1."""

    first_offset: int
    last_offset: int
    log_start_offset: int
    required_offset: int | None
    append_info: Any = None  # the log's AppendInfo, for log_append_time and friends


@dataclass(frozen=True, slots=True)
class ProduceCompletion:
    request_id: Any
    required_offset: int
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class FollowerFetchResult:
    """The leader's answer to one follower fetch. `records` is empty when `diverging_epoch` is set.
    `isr_proposal` is an ISR expansion this fetch triggered (send it as AlterPartition). `records` is bytes,
    or with zero_copy the log read itself (FetchData: file slices, len() its size)."""

    records: Any
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    diverging_epoch: EpochEndOffset | None = None
    isr_proposal: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class FollowerFetchOutcome:
    """What a fetch response did on the follower. `truncation_complete` is False when the KIP-279 rule
    truncated to an intermediate offset and needs another round (another fetch or OffsetsForLeaderEpoch)."""

    truncated_to: int | None
    log_end_offset: int
    high_watermark: int
    truncation_complete: bool = True
    ignored: bool = False  # a stale response (its fetch offset is no longer our LEO)
    appended: Any = None  # the log's AppendInfo of what the response appended (its batch headers feed the producer state)


@dataclass(slots=True)
class _WaitingProduce:
    request_id: Any
    required_offset: int
    deadline_ms: int


class Partition:
    """One partition replica on this broker. See the module docstring."""

    def __init__(
        self,
        topic: str,
        partition: int,
        local_broker_id: int,
        log: PartitionLogPort,
        *,
        min_insync_replicas: int = MIN_INSYNC_REPLICAS_DEFAULT,
        replica_lag_time_max_ms: int = REPLICA_LAG_TIME_MAX_MS_DEFAULT,
    ) -> None:
        assert min_insync_replicas >= 1, f"min_insync_replicas={min_insync_replicas}"
        assert replica_lag_time_max_ms > 0, f"replica_lag_time_max_ms={replica_lag_time_max_ms}"
        self.topic = topic
        self.partition = partition
        self.local_broker_id = local_broker_id
        self.log = log
        self.min_insync_replicas = min_insync_replicas
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self._isr_whole = True  # every replica in the ISR (kept with replicas and isr: read at every follower fetch)
        self.leader: int = NO_LEADER
        self.leader_epoch: int = UNDEFINED_EPOCH
        self.partition_epoch: int = UNDEFINED_EPOCH
        self.leader_epoch_start_offset: int | None = None
        self.follower_states: dict[int, FollowerState] = {}
        self.pending_isr_change: PendingIsrChange | None = None
        # Set through set_ineligible_replicas.
        self.ineligible_replicas: frozenset[int] = frozenset()
        # Test-only planted bugs (see the module docstring). Never set from configuration.
        self.bug_hw_from_leader_leo = False
        self.bug_truncate_to_own_hw = False
        self.bug_follower_reads_past_hw = False  # planted (follower-fetch workload): a follower serves its LEO
        # planted (follower-fetch workload): a fetch at exactly the end offset of its last fetched epoch (as after
        # every leader change) is told that epoch diverged
        self.bug_diverges_at_epoch_end = False
        self._high_watermark = log.log_start_offset
        self._leader_hw_floor = self._high_watermark
        # On a follower: the replicated offset its leader last answered (see `replicated_offset`).
        self._leader_replicated_offset = UNKNOWN_OFFSET
        self._last_stable_offset_hook: Callable[[int], int] | None = None
        self._purgatory: dict[Any, _WaitingProduce] = {}
        self._purgatory_offsets: list[tuple[int, int, Any]] = []  # heap of (required_offset, sequence, request_id)
        self._purgatory_deadlines: list[tuple[int, int, Any]] = []  # heap of (deadline_ms, sequence, request_id)
        self._purgatory_sequence = itertools.count()
        self._completed: list[ProduceCompletion] = []
        self._check_invariants()

    # ------------------------------------------------------------------ state views

    @property
    def is_leader(self) -> bool:
        return self.leader == self.local_broker_id

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def replicated_offset(self) -> int:
        """The offset below which every replica of the partition holds the log, or -1 when unknown: on the
        leader its high watermark while every assigned replica is in its ISR (no ISR member's log end is below
        the high watermark), else -1; on a follower the value its current leader last sent it (Flotilla's
        leader answers a follower's fetch with it; a follower's own metadata image may trail the leader's
        ISR). The cleaner removes tombstones and markers past their horizon only below it."""
        if self.is_leader:
            return self._high_watermark if self._isr_whole else UNKNOWN_OFFSET
        return self._leader_replicated_offset

    @property
    def last_stable_offset(self) -> int:
        """The high watermark until transactions land: txn/ installs a hook mapping HW to LSO."""
        if self._last_stable_offset_hook is None:
            return self._high_watermark
        last_stable_offset = self._last_stable_offset_hook(self._high_watermark)
        assert last_stable_offset <= self._high_watermark, f"lso={last_stable_offset} hw={self._high_watermark}"
        return last_stable_offset

    @property
    def maximal_isr(self) -> frozenset[int]:
        if self.pending_isr_change is not None:
            return self.pending_isr_change.maximal_isr
        return frozenset(self.isr)

    @property
    def effective_min_isr(self) -> int:
        """min.insync.replicas, capped by the replication factor (Kafka's effectiveMinIsr)."""
        return max(1, min(self.min_insync_replicas, len(self.replicas)))

    @property
    def is_under_min_isr(self) -> bool:
        return self.is_leader and len(self.isr) < self.effective_min_isr

    @property
    def purgatory_size(self) -> int:
        return len(self._purgatory)

    def set_last_stable_offset_hook(self, hook: Callable[[int], int] | None) -> None:
        """Install the transaction state's LSO function (high_watermark -> last_stable_offset)."""
        self._last_stable_offset_hook = hook

    def set_min_insync_replicas(self, min_insync_replicas: int, now_ms: int) -> None:
        """Apply a changed min.insync.replicas topic config; the high watermark may advance."""
        assert min_insync_replicas >= 1, f"min_insync_replicas={min_insync_replicas}"
        self.min_insync_replicas = min_insync_replicas
        if self.is_leader:
            self._maybe_increment_leader_hw(now_ms)
        self._check_invariants()

    def set_ineligible_replicas(self, replica_ids: frozenset[int] | set[int], now_ms: int) -> None:
        """Brokers the controller reports fenced or shutting down (KIP-841/KIP-903): they may not join the
        ISR and no longer hold the high watermark as about-to-join followers, so it may advance."""
        self.ineligible_replicas = frozenset(replica_ids)
        if self.is_leader:
            self._maybe_increment_leader_hw(now_ms)
        self._check_invariants()

    def set_high_watermark_on_restart(self, high_watermark: int) -> None:
        """Restore the checkpointed high watermark after a restart, clamped into [log_start, LEO] as Kafka
        does (the checkpoint may be ahead of a log that lost an unflushed tail)."""
        assert not self.is_leader, "the high watermark is restored before the replica takes a role"
        self._high_watermark = self._clamp_to_log(high_watermark)
        self._check_invariants()

    # ------------------------------------------------------------------ role changes

    def become_leader(
        self, leader_epoch: int, partition_epoch: int, replicas: list[int] | tuple[int, ...],
        isr: list[int] | tuple[int, ...], now_ms: int,
    ) -> bool:
        """Take (or keep, with new metadata) the leadership. Ignored (False) when either epoch is older than
        ours, or when both equal ours and we already lead. A new leader epoch is recorded in the epoch cache
        at the current LEO and resets every follower state, as Kafka's `makeLeader` does."""
        if self._is_stale(leader_epoch, partition_epoch) or (
            self.is_leader and (leader_epoch, partition_epoch) == (self.leader_epoch, self.partition_epoch)
        ):
            return False
        assert self.local_broker_id in isr, f"leader {self.local_broker_id} not in isr={list(isr)}"
        assert set(isr) <= set(replicas), f"isr={list(isr)} replicas={list(replicas)}"
        is_new_leader = not self.is_leader
        is_new_leader_epoch = leader_epoch > self.leader_epoch
        self.replicas, self.isr = tuple(replicas), tuple(isr)
        self._isr_whole = set(self.replicas) <= set(self.isr)
        self.pending_isr_change = None
        self._sync_follower_states()
        if is_new_leader or is_new_leader_epoch:
            self._start_leader_epoch(leader_epoch, is_new_leader, now_ms)
        self.partition_epoch = partition_epoch
        self.leader = self.local_broker_id
        self._leader_hw_floor = self._high_watermark
        # The ISR may be down to the leader alone: the high watermark may move at once.
        self._maybe_increment_leader_hw(now_ms)
        self._check_invariants()
        return True

    def become_follower(
        self, leader: int | None, leader_epoch: int, partition_epoch: int,
        replicas: list[int] | tuple[int, ...], isr: list[int] | tuple[int, ...],
    ) -> bool:
        """Follow `leader` (None or -1: no leader at the moment). Ignored when either epoch is older than
        ours. Returns True when the leader epoch is new, i.e. the fetcher must restart (and, on the KIP-101
        path, send OffsetsForLeaderEpoch first). Waiting acks=all requests answer NOT_LEADER_OR_FOLLOWER."""
        leader = NO_LEADER if leader is None else leader
        if self._is_stale(leader_epoch, partition_epoch):
            return False
        is_new_leader_epoch = leader_epoch > self.leader_epoch
        if leader != self.leader:  # what the former leader knew of the replicas is not the new one's to say
            self._leader_replicated_offset = UNKNOWN_OFFSET
        self.leader, self.leader_epoch, self.partition_epoch = leader, leader_epoch, partition_epoch
        self.replicas, self.isr = tuple(replicas), tuple(isr)
        self._isr_whole = set(self.replicas) <= set(self.isr)
        self.leader_epoch_start_offset = None
        self.follower_states = {}
        self.pending_isr_change = None
        self._fail_waiting_produces(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if is_new_leader_epoch and self.bug_truncate_to_own_hw:
            # Planted bug: pre-KIP-101 brokers truncated to their own high watermark on becoming follower.
            self._truncate_follower_to(self._high_watermark)
        self._check_invariants()
        return is_new_leader_epoch

    def _is_stale(self, leader_epoch: int, partition_epoch: int) -> bool:
        return leader_epoch < self.leader_epoch or partition_epoch < self.partition_epoch

    def _sync_follower_states(self) -> None:
        followers = [replica for replica in self.replicas if replica != self.local_broker_id]
        self.follower_states = {
            replica: self.follower_states.get(replica) or FollowerState(replica) for replica in followers
        }

    def _start_leader_epoch(self, leader_epoch: int, is_new_leader: bool, now_ms: int) -> None:
        # Record the new epoch at the LEO even before any append: a follower holding entries of a later
        # epoch than any in our log must find an end offset for it (KIP-101, successive elections).
        start_offset = self.log.log_end_offset
        latest_epoch = self.log.latest_epoch
        if latest_epoch is None or latest_epoch < leader_epoch:
            self.log.assign_epoch_start(leader_epoch, start_offset)
        for state in self.follower_states.values():
            in_sync = state.replica_id in self.isr
            state.last_caught_up_time_ms = now_ms if in_sync else TIME_NEVER_MS
            if is_new_leader:
                state.log_end_offset = UNKNOWN_OFFSET
                state.log_start_offset = UNKNOWN_OFFSET
                state.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET
                state.last_fetch_time_ms = TIME_NEVER_MS
            else:
                state.last_fetch_leader_log_end_offset = start_offset
        self.leader_epoch = leader_epoch
        self.leader_epoch_start_offset = start_offset

    # ------------------------------------------------------------------ produce

    def append_records(self, records: bytes, required_acks: int, now_ms: int, origin: Any = None) -> AppendResult:
        """Append a produce request's batches on the leader.
        Raises InvalidRequiredAcksError (acks not in -1/0/1), NotLeaderOrFollowerError (not the leader),
        NotEnoughReplicasError (acks=all while the ISR is below min.insync.replicas: checked before the
        append, nothing is written), and whatever the log raises for invalid batches."""
        if required_acks not in REQUIRED_ACKS_VALID:
            raise InvalidRequiredAcksError(f"acks={required_acks}, must be -1, 0 or 1")
        self._require_leader(None)
        if required_acks == REQUIRED_ACKS_ALL and len(self.isr) < self.effective_min_isr:
            raise NotEnoughReplicasError(
                f"{self.topic}-{self.partition}: isr={list(self.isr)} below min.insync.replicas="
                f"{self.effective_min_isr}"
            )
        # `origin` (partitions.log.AppendOrigin) lets a coordinator write control batches; clients may not.
        info = (self.log.append_as_leader(records, self.leader_epoch, now_ms) if origin is None
                else self.log.append_as_leader(records, self.leader_epoch, now_ms, origin))
        # With the leader alone in the ISR the high watermark follows the LEO at once.
        self._maybe_increment_leader_hw(now_ms)
        self._check_invariants()
        required_offset = info.last_offset + 1 if required_acks == REQUIRED_ACKS_ALL else None
        return AppendResult(info.first_offset, info.last_offset, self.log.log_start_offset, required_offset, info)

    def pending_produce(self, request_id: Any, required_offset: int, deadline_ms: int) -> None:
        """Park an acks=all request until the high watermark reaches `required_offset` or `deadline_ms`
        passes; its answer comes out of `take_completed`. Raises RequestTimedOutError when the purgatory is
        full (PRODUCE_PURGATORY_SIZE_MAX): the records are appended, the client learns nothing more, as
        with a timeout."""
        assert request_id not in self._purgatory, f"request {request_id!r} already waiting"
        if not self.is_leader:
            self._completed.append(ProduceCompletion(request_id, required_offset, ErrorCode.NOT_LEADER_OR_FOLLOWER))
            return
        if len(self._purgatory) >= PRODUCE_PURGATORY_SIZE_MAX:
            raise RequestTimedOutError(f"produce purgatory full ({PRODUCE_PURGATORY_SIZE_MAX} requests)")
        self._purgatory[request_id] = _WaitingProduce(request_id, required_offset, deadline_ms)
        heapq.heappush(self._purgatory_offsets, (required_offset, next(self._purgatory_sequence), request_id))
        heapq.heappush(self._purgatory_deadlines, (deadline_ms, next(self._purgatory_sequence), request_id))

    def take_completed(self, now_ms: int) -> list[ProduceCompletion]:
        """Every parked request that is now answered (Kafka's DelayedProduce.tryComplete and expiry), in
        registration order. The node calls it after each event that may move the high watermark or the ISR
        and on its timer."""
        # Waiters sit in a heap by required offset, so those the high watermark has passed come off the top:
        # O(completed log n) per call, not O(waiting), however long the queue.
        while self._purgatory_offsets:
            required_offset, _, request_id = self._purgatory_offsets[0]
            waiting = self._purgatory.get(request_id)
            if waiting is None:  # already answered (expired)
                heapq.heappop(self._purgatory_offsets)
                continue
            done, error = self._check_enough_replicas_reach_offset(required_offset)
            if not done:
                break
            heapq.heappop(self._purgatory_offsets)
            del self._purgatory[request_id]
            self._completed.append(ProduceCompletion(request_id, required_offset, error))
        while self._purgatory_deadlines and self._purgatory_deadlines[0][0] <= now_ms:
            _, _, request_id = heapq.heappop(self._purgatory_deadlines)
            waiting = self._purgatory.pop(request_id, None)
            if waiting is not None:
                self._completed.append(ProduceCompletion(request_id, waiting.required_offset, ErrorCode.REQUEST_TIMED_OUT))
        if not self._purgatory:
            self._purgatory_deadlines.clear()
            self._purgatory_offsets.clear()
        completed, self._completed = self._completed, []
        return completed

    def _check_enough_replicas_reach_offset(self, required_offset: int) -> tuple[bool, ErrorCode]:
        # Kafka's Partition.checkEnoughReplicasReachOffset.
        if not self.is_leader:
            return True, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self._high_watermark < required_offset:
            return False, ErrorCode.NONE
        if len(self.maximal_isr) < self.effective_min_isr:
            # Appended and replicated to the ISR of the moment, but that ISR shrank below the minimum.
            return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return True, ErrorCode.NONE

    def _fail_waiting_produces(self, error: ErrorCode) -> None:
        for waiting in self._purgatory.values():
            self._completed.append(ProduceCompletion(waiting.request_id, waiting.required_offset, error))
        self._purgatory.clear()
        self._purgatory_deadlines.clear()
        self._purgatory_offsets.clear()

    # ------------------------------------------------------------------ fetch on the leader

    def handle_follower_fetch(
        self, replica_id: int, fetch_offset: int, last_fetched_epoch: int | None, now_ms: int, max_bytes: int,
        *, current_leader_epoch: int | None = None, follower_log_start_offset: int = UNKNOWN_OFFSET,
        zero_copy: bool = False,
    ) -> FollowerFetchResult:
        """Serve a follower's fetch (Kafka's Partition.fetchRecords for a follower). With a
        `last_fetched_epoch` (KIP-320) whose end offset on this leader is below `fetch_offset` or whose
        epoch we do not hold, answers a diverging epoch and no records, and leaves the follower's state
        alone. Otherwise updates the follower's LEO, caught-up time, maybe proposes an ISR expansion,
        advances the high watermark and returns records from `fetch_offset` up to the LEO.
        Raises NotLeaderOrFollowerError (not leader, or `replica_id` is not a follower replica),
        FencedLeaderEpochError / UnknownLeaderEpochError (`current_leader_epoch` older / newer than ours),
        OffsetOutOfRangeError (fetch_offset outside [log_start, LEO], or an epoch we cannot place)."""
        self._require_leader(current_leader_epoch)
        state = self.follower_states.get(replica_id)
        if state is None:
            raise NotLeaderOrFollowerError(f"broker {replica_id} is not a follower of {self.topic}-{self.partition}")
        leader_log_end_offset = self.log.log_end_offset
        if fetch_offset == leader_log_end_offset and self._cannot_diverge(last_fetched_epoch):
            # A follower at our log end (most fetches of most partitions, and the fetch that reports a follower's
            # progress): nothing to read, and nothing to diverge from when it last fetched our latest epoch.
            previous_log_end_offset = state.log_end_offset
            self._update_follower_fetch_state(state, fetch_offset, follower_log_start_offset, now_ms,
                                              leader_log_end_offset)
            isr_proposal = None if replica_id in self.isr else self.maybe_expand_isr(replica_id, now_ms)
            if fetch_offset != previous_log_end_offset:
                self._maybe_increment_leader_hw(now_ms)
            return FollowerFetchResult(b"", self._high_watermark, self.log.log_start_offset, leader_log_end_offset,
                                       None, isr_proposal)
        if last_fetched_epoch is not None and last_fetched_epoch >= 0:
            diverging = self._diverging_epoch(fetch_offset, last_fetched_epoch)
            if diverging is not None:
                return FollowerFetchResult(
                    b"", self._high_watermark, self.log.log_start_offset, leader_log_end_offset, diverging
                )
        self._check_fetch_offset(fetch_offset)
        data = self.log.read(fetch_offset, max_bytes, None, True)
        previous_log_end_offset = state.log_end_offset
        self._update_follower_fetch_state(state, fetch_offset, follower_log_start_offset, now_ms, leader_log_end_offset)
        isr_proposal = self.maybe_expand_isr(replica_id, now_ms)
        if state.log_end_offset != previous_log_end_offset:
            self._maybe_increment_leader_hw(now_ms)
        self._check_invariants()
        # The high watermark after this fetch's update, so a follower learns it one round trip earlier than
        # Kafka (which answers the value read before the update); both are <= every ISR member's LEO.
        return FollowerFetchResult(
            data if zero_copy and data.sendable else bytes(data.records), self._high_watermark, self.log.log_start_offset,
            leader_log_end_offset, None, isr_proposal,
        )

    def touch_caught_up_follower(self, replica_id: int, fetch_offset: int, current_leader_epoch: int,
                                 follower_log_start_offset: int, now_ms: int) -> bool:
        """handle_follower_fetch for the commonest fetch of an idle cluster, without its checks and read: an ISR
        member that asks again for our log end, under our current epoch. Its fetch state advances exactly as
        handle_follower_fetch would advance it (it is caught up now); nothing else can change (no HW move, no
        ISR change, no records). False, touching nothing, for any other fetch: call handle_follower_fetch."""
        if not self.is_leader or (current_leader_epoch >= 0 and current_leader_epoch != self.leader_epoch):
            return False
        state = self.follower_states.get(replica_id)
        log_end_offset = self.log.log_end_offset
        if state is None or fetch_offset != log_end_offset or state.log_end_offset != log_end_offset \
                or replica_id not in self.isr:
            return False
        self._update_follower_fetch_state(state, fetch_offset, follower_log_start_offset, now_ms, log_end_offset)
        return True

    def _diverging_epoch(self, fetch_offset: int, last_fetched_epoch: int) -> EpochEndOffset | None:
        epoch, end_offset = self.log.end_offset_for_epoch(last_fetched_epoch)
        if epoch == UNDEFINED_EPOCH or end_offset == UNKNOWN_OFFSET:
            raise OffsetOutOfRangeError(
                f"cannot place last fetched epoch {last_fetched_epoch} in {self.topic}-{self.partition}"
            )
        if fetch_offset < self.log.log_start_offset:
            raise OffsetOutOfRangeError(
                f"fetch offset {fetch_offset} below log start offset {self.log.log_start_offset}"
            )
        if epoch < last_fetched_epoch or end_offset < fetch_offset:
            return EpochEndOffset(epoch, end_offset)
        if self.bug_diverges_at_epoch_end and end_offset == fetch_offset and epoch != self.log.latest_epoch:
            return EpochEndOffset(epoch, end_offset)
        return None

    def _check_fetch_offset(self, fetch_offset: int) -> None:
        if not self.log.log_start_offset <= fetch_offset <= self.log.log_end_offset:
            raise OffsetOutOfRangeError(
                f"fetch offset {fetch_offset} outside [{self.log.log_start_offset}, {self.log.log_end_offset}] "
                f"of {self.topic}-{self.partition}"
            )

    @staticmethod
    def _update_follower_fetch_state(
        state: FollowerState, fetch_offset: int, log_start_offset: int, now_ms: int, leader_log_end_offset: int
    ) -> None:
        # Kafka's Replica.updateFetchStateOrThrow: the follower caught up at this fetch if it asks for the
        # leader's current LEO, or at its previous fetch if it asks for the LEO the leader had back then.
        if fetch_offset >= leader_log_end_offset:
            state.last_caught_up_time_ms = max(state.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= state.last_fetch_leader_log_end_offset:
            state.last_caught_up_time_ms = max(state.last_caught_up_time_ms, state.last_fetch_time_ms)
        state.log_start_offset = log_start_offset
        state.log_end_offset = fetch_offset
        state.last_fetch_leader_log_end_offset = max(leader_log_end_offset, state.last_fetch_leader_log_end_offset)
        state.last_fetch_time_ms = now_ms

    def last_offset_for_leader_epoch(self, leader_epoch: int, current_leader_epoch: int | None = None) -> EpochEndOffset:
        """Answer OffsetsForLeaderEpoch (KIP-101) on the leader: the largest epoch <= `leader_epoch` we hold
        and its end offset (the LEO for our latest epoch), or (-1, -1) when we cannot place it.
        Raises NotLeaderOrFollowerError, FencedLeaderEpochError, UnknownLeaderEpochError."""
        self._require_leader(current_leader_epoch)
        return EpochEndOffset(*self.log.end_offset_for_epoch(leader_epoch))

    def read_for_consumer(
        self, fetch_offset: int, max_bytes: int, isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        *, current_leader_epoch: int | None = None, zero_copy: bool = False, leader_only: bool = True,
        last_fetched_epoch: int = UNDEFINED_EPOCH,
    ) -> ConsumerFetchResult:
        """Serve a consumer fetch: whole batches from `fetch_offset` strictly below the high watermark (below
        the last stable offset for read_committed); empty when `fetch_offset` is at or above that bound. With
        `zero_copy` the records are the log read itself (file slices for the edge to sendfile) when its files
        have descriptors (not in memory, as in the simulator), else bytes.
        Without `leader_only` a follower serves too (KIP-392), up to its own high watermark (last stable
        offset), which never passes the leader's.
        With a `last_fetched_epoch` (Fetch v12+, KIP-320) whose end offset here is below `fetch_offset`, or whose
        epoch this log does not hold, answers no records and the diverging epoch, as for a follower (Kafka's
        Partition.readRecords checks both kinds of fetcher alike).
        Raises NotLeaderOrFollowerError, FencedLeaderEpochError, UnknownLeaderEpochError and
        OffsetOutOfRangeError (fetch_offset outside [log_start, LEO], or a last fetched epoch it cannot place)."""
        if leader_only:
            self._require_leader(current_leader_epoch)
        else:
            self.require_epoch(current_leader_epoch)
        high_watermark, last_stable_offset = self._high_watermark, self.last_stable_offset
        if last_fetched_epoch >= 0:
            diverging = self._diverging_epoch(fetch_offset, last_fetched_epoch)
            if diverging is not None:
                return ConsumerFetchResult(b"", high_watermark, self.log.log_start_offset, last_stable_offset,
                                           diverging)
        self._check_fetch_offset(fetch_offset)
        max_offset = high_watermark if isolation == IsolationLevel.READ_UNCOMMITTED else last_stable_offset
        if self.bug_follower_reads_past_hw and not leader_only:
            max_offset = self.log.log_end_offset  # planted bug: a follower serves what it holds, committed or not
        records = b""
        if fetch_offset < max_offset:
            # PartitionLog.read stops before the first batch holding an offset >= max_offset.
            data = self.log.read(fetch_offset, max_bytes, max_offset, True)
            records = data if zero_copy and data.sendable else data.records
        return ConsumerFetchResult(records, high_watermark, self.log.log_start_offset, last_stable_offset)

    def consumer_read_finds_nothing(self, fetch_offset: int, isolation: IsolationLevel,
                                    current_leader_epoch: int | None) -> bool:
        """True when `read_for_consumer` here, as leader, would raise nothing and return no records: this replica
        leads at the epoch the request names, `fetch_offset` lies within the log and at or past what the
        isolation level may read (Kafka's DelayedFetch.tryComplete asks this of a parked fetch)."""
        if not self.is_leader or self._names_other_epoch(current_leader_epoch):
            return False
        bound = self._high_watermark if isolation == IsolationLevel.READ_UNCOMMITTED else self.last_stable_offset
        return bound <= fetch_offset and self.log.log_start_offset <= fetch_offset <= self.log.log_end_offset

    def follower_read_finds_nothing(self, replica_id: int, fetch_offset: int, last_fetched_epoch: int | None,
                                    current_leader_epoch: int | None) -> bool:
        """True when `handle_follower_fetch` here would raise nothing and answer no records and no diverging
        epoch: this replica leads at the epoch the request names, `replica_id` is one of its followers, and
        `fetch_offset` is our log end (under our latest epoch, when the fetch names the epoch it last fetched).
        A parked follower fetch for which this holds stays parked without a read, as Kafka's
        DelayedFetch.tryComplete keeps one whose fetch offset is the log end. Its progress was recorded when it
        arrived; what a read would redo (an ISR expansion refused then, e.g. while another ISR change was in flight)
        is done again at its answer or at the follower's next fetch, as in Kafka."""
        if not self.is_leader or self._names_other_epoch(current_leader_epoch):
            return False
        return (replica_id in self.follower_states and fetch_offset == self.log.log_end_offset
                and self._cannot_diverge(last_fetched_epoch))

    def _cannot_diverge(self, last_fetched_epoch: int | None) -> bool:
        """A follower at our log end that names no epoch it last fetched (below v12), or our latest one, has
        nothing to diverge from (KIP-320)."""
        return last_fetched_epoch is None or last_fetched_epoch < 0 or last_fetched_epoch == self.log.latest_epoch

    def _names_other_epoch(self, current_leader_epoch: int | None) -> bool:
        return (current_leader_epoch is not None and current_leader_epoch >= 0
                and current_leader_epoch != self.leader_epoch)

    def require_epoch(self, current_leader_epoch: int | None) -> None:
        """Raises FencedLeaderEpochError or UnknownLeaderEpochError when a request names another leader epoch
        than ours (-1 or None names none)."""
        if self._names_other_epoch(current_leader_epoch):
            if current_leader_epoch < self.leader_epoch:
                raise FencedLeaderEpochError(f"request epoch {current_leader_epoch} < ours {self.leader_epoch}")
            if current_leader_epoch > self.leader_epoch:
                raise UnknownLeaderEpochError(f"request epoch {current_leader_epoch} > ours {self.leader_epoch}")

    def _require_leader(self, current_leader_epoch: int | None) -> None:
        self.require_epoch(current_leader_epoch)
        if not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.local_broker_id} is not the leader of {self.topic}-{self.partition} "
                f"(leader {self.leader}, epoch {self.leader_epoch})"
            )

    # ------------------------------------------------------------------ high watermark

    def _maybe_increment_leader_hw(self, now_ms: int) -> bool:
        """Kafka's maybeIncrementLeaderHW, with KIP-966's strict min ISR. True when the HW moved."""
        if self.is_under_min_isr:
            return False
        leader_log_end_offset = self.log.log_end_offset
        new_high_watermark = leader_log_end_offset
        if not self.bug_hw_from_leader_leo:
            maximal_isr = self.maximal_isr
            for replica_id, state in self.follower_states.items():
                if state.log_end_offset >= new_high_watermark:
                    continue
                about_to_join = (
                    state.is_caught_up(leader_log_end_offset, now_ms, self.replica_lag_time_max_ms)
                    and replica_id not in self.ineligible_replicas
                )
                if replica_id in maximal_isr or about_to_join:
                    new_high_watermark = state.log_end_offset
        if new_high_watermark <= self._high_watermark:
            return False
        self._high_watermark = new_high_watermark
        return True

    # ------------------------------------------------------------------ ISR changes

    def maybe_shrink_isr(self, now_ms: int) -> tuple[int, ...] | None:
        """Propose removing the followers that have not caught up within replica_lag_time_max_ms. Returns the
        proposed ISR (send it as AlterPartition) and records it as `pending_isr_change`, or None when there
        is nothing to do, we are not the leader, or a change is already in flight. While the shrink is
        pending the high watermark is still computed over the current (larger) ISR."""
        if not self.is_leader or self.pending_isr_change is not None:
            return None
        leader_log_end_offset = self.log.log_end_offset
        out_of_sync = {
            replica_id
            for replica_id in self.isr
            if replica_id != self.local_broker_id
            and not self._follower_caught_up(replica_id, leader_log_end_offset, now_ms)
        }
        if not out_of_sync:
            return None
        proposed = tuple(replica_id for replica_id in self.isr if replica_id not in out_of_sync)
        self._propose(IsrChangeKind.SHRINK, proposed, frozenset(self.isr))
        return proposed

    def _follower_caught_up(self, replica_id: int, leader_log_end_offset: int, now_ms: int) -> bool:
        state = self.follower_states.get(replica_id)
        return state is not None and state.is_caught_up(leader_log_end_offset, now_ms, self.replica_lag_time_max_ms)

    def maybe_expand_isr(self, replica_id: int, now_ms: int) -> tuple[int, ...] | None:
        """Propose adding `replica_id` when its LEO reached both the high watermark and the start offset of
        the current leader epoch (Kafka's isFollowerInSync). Returns the proposed ISR and records it as
        `pending_isr_change`, or None. While the expansion is pending the high watermark waits for the new
        member too ("maximal ISR"), so committing it never puts a replica short of the HW into the ISR."""
        if not self.is_leader or self.pending_isr_change is not None:
            return None
        state = self.follower_states.get(replica_id)
        if state is None or replica_id in self.isr or replica_id in self.ineligible_replicas:
            return None
        assert self.leader_epoch_start_offset is not None, "a leader always knows its epoch start offset"
        if state.log_end_offset < self._high_watermark or state.log_end_offset < self.leader_epoch_start_offset:
            return None
        proposed = self.isr + (replica_id,)
        self._propose(IsrChangeKind.EXPAND, proposed, frozenset(proposed))
        self._maybe_increment_leader_hw(now_ms)
        return proposed

    def _propose(self, kind: IsrChangeKind, proposed: tuple[int, ...], maximal_isr: frozenset[int]) -> None:
        assert self.local_broker_id in proposed, f"proposed isr={proposed} drops the leader"
        self.pending_isr_change = PendingIsrChange(
            kind, proposed, maximal_isr, self.leader_epoch, self.partition_epoch
        )

    def apply_isr_change(
        self, new_isr: list[int] | tuple[int, ...], partition_epoch: int, now_ms: int,
        *, leader_epoch: int | None = None,
    ) -> bool:
        """Apply a committed ISR (AlterPartition response or metadata delta). Ignored (False) when
        `partition_epoch` is older than ours or `leader_epoch` is not ours. An equal partition epoch is
        accepted (the controller found nothing to change). Clears `pending_isr_change`; on the leader the
        high watermark may advance (a shrink can unblock it)."""
        if leader_epoch is not None and leader_epoch != self.leader_epoch:
            return False
        if partition_epoch < self.partition_epoch:
            return False
        if self.is_leader:
            assert self.local_broker_id in new_isr, f"leader {self.local_broker_id} not in isr={list(new_isr)}"
        self.isr = tuple(new_isr)
        self._isr_whole = set(self.replicas) <= set(self.isr)
        self.partition_epoch = partition_epoch
        self.pending_isr_change = None
        if self.is_leader:
            self._maybe_increment_leader_hw(now_ms)
        self._check_invariants()
        return True

    def alter_partition_failed(self, error: ErrorCode) -> bool:
        """An AlterPartition for `pending_isr_change` failed. Returns True when the node should send the same
        proposal again. For OPERATION_NOT_ATTEMPTED / INELIGIBLE_REPLICA the controller guarantees nothing
        was applied: the proposal is dropped. For NEW_LEADER_ELECTED, UNKNOWN_TOPIC_OR_PARTITION,
        FENCED_LEADER_EPOCH and INVALID_UPDATE_VERSION it stays pending until metadata says what happened.
        Anything else is retried (Kafka's handleAlterPartitionError)."""
        if self.pending_isr_change is None:
            return False
        if error in _ALTER_PARTITION_NOT_APPLIED:
            self.pending_isr_change = None
            return False
        return error not in _ALTER_PARTITION_WAIT_FOR_METADATA

    # ------------------------------------------------------------------ follower side

    def follower_fetch_request(self, now_ms: int) -> FollowerFetchRequest:
        """The next fetch to send to the leader: from our LEO, with the epoch of our last batch (KIP-320)."""
        assert not self.is_leader, f"broker {self.local_broker_id} leads {self.topic}-{self.partition}"
        latest_epoch = self.log.latest_epoch
        return FollowerFetchRequest(
            self.log.log_end_offset, UNDEFINED_EPOCH if latest_epoch is None else latest_epoch, self.leader_epoch
        )

    def follower_handle_fetch_response(
        self, records: bytes, leader_hw: int, leader_log_start_offset: int,
        diverging_epoch: EpochEndOffset | tuple[int, int] | None, now_ms: int, *, fetch_offset: int | None = None,
        replicated_offset: int = UNKNOWN_OFFSET,
    ) -> FollowerFetchOutcome:
        """Apply the leader's fetch response. With a diverging epoch (KIP-320) truncate by the KIP-279 rule
        (see `follower_truncate_with_epoch_end_offset`) and append nothing; otherwise append the records,
        set the high watermark to min(leader_hw, LEO), advance the log start offset to the leader's and keep the
        leader's `replicated_offset` (see the property). When `fetch_offset` (the offset the request was sent
        for) is given and no longer our LEO, the response is stale and ignored.
        Raises what the log raises for records that do not continue it (CorruptRecordError ...)."""
        assert not self.is_leader, f"broker {self.local_broker_id} leads {self.topic}-{self.partition}"
        if fetch_offset is not None and fetch_offset != self.log.log_end_offset:
            return FollowerFetchOutcome(None, self.log.log_end_offset, self._high_watermark, True, ignored=True)
        if diverging_epoch is not None:
            truncated_to, complete = self._truncate_to_epoch_end_offset(EpochEndOffset(*diverging_epoch))
            return FollowerFetchOutcome(truncated_to, self.log.log_end_offset, self._high_watermark, complete)
        appended = self.log.append_as_follower(records, now_ms) if records else None
        # Only forward (Kafka's UnifiedLog.maybeUpdateHighWatermark): a restarted leader that reports a lower
        # high watermark must not pull a follower's back. Truncation lowers it explicitly elsewhere.
        self._high_watermark = self._clamp_to_log(max(self._high_watermark, min(leader_hw, self.log.log_end_offset)))
        # Follow the leader's retention and DeleteRecords (Kafka's LeaderOffsetIncremented); the leader's log
        # start never passes its HW, and we only move ours within what we hold below our own HW.
        if self.log.log_start_offset < leader_log_start_offset <= self._high_watermark:
            self.log.delete_records_before(leader_log_start_offset)
        self._leader_replicated_offset = replicated_offset
        self._check_invariants()
        return FollowerFetchOutcome(None, self.log.log_end_offset, self._high_watermark, appended=appended)

    def follower_truncate_with_epoch_end_offset(self, leader_epoch_end: EpochEndOffset | tuple[int, int]) -> bool:
        """Truncate by the leader's OffsetsForLeaderEpoch answer for our latest epoch (KIP-101, KIP-279):
        - the leader knows the epoch: truncate to min(its end offset, our end offset for it, our LEO);
        - the leader answered an older epoch we also hold: truncate to our end offset for that epoch and
          return False: ask again with our (new) latest epoch;
        - we hold no epoch <= the leader's: truncate to min(its end offset, our LEO);
        - the leader could not place it (-1, -1): leave the log alone and let the KIP-320 fetch validation
          decide (Kafka falls back to the high watermark here; truncating to it can lose committed records).
        Returns True when truncation is complete and fetching may start."""
        assert not self.is_leader, f"broker {self.local_broker_id} leads {self.topic}-{self.partition}"
        _, complete = self._truncate_to_epoch_end_offset(EpochEndOffset(*leader_epoch_end))
        return complete

    def _truncate_to_epoch_end_offset(self, leader_epoch_end: EpochEndOffset) -> tuple[int | None, bool]:
        if self.bug_truncate_to_own_hw:
            # Planted bug: the pre-KIP-101 rule.
            return self._truncate_follower_to(self._high_watermark), True
        if leader_epoch_end.leader_epoch == UNDEFINED_EPOCH or leader_epoch_end.end_offset == UNKNOWN_OFFSET:
            return None, True
        log_end_offset = self.log.log_end_offset
        own_epoch, own_end_offset = self.log.end_offset_for_epoch(leader_epoch_end.leader_epoch)
        if own_epoch == UNDEFINED_EPOCH or own_end_offset == UNKNOWN_OFFSET:
            target, complete = min(leader_epoch_end.end_offset, log_end_offset), True
        elif own_epoch != leader_epoch_end.leader_epoch:
            target, complete = min(own_end_offset, log_end_offset), False
        else:
            target, complete = min(own_end_offset, leader_epoch_end.end_offset, log_end_offset), True
        return self._truncate_follower_to(target), complete

    def _truncate_follower_to(self, offset: int) -> int:
        offset = min(offset, self.log.log_end_offset)
        if offset < self.log.log_start_offset:
            self.log.truncate_fully_and_start_at(offset)
        elif offset < self.log.log_end_offset:
            self.log.truncate_to(offset)
        # As Kafka's UnifiedLog.truncateTo, cut the epoch cache at the LEO even when no record goes: an epoch
        # this broker started as leader without appending anything would otherwise stay our latest epoch,
        # and every fetch would be answered with the same diverging epoch forever.
        self.log.epoch_cache.truncate_from_end(self.log.log_end_offset)
        self._high_watermark = self._clamp_to_log(min(self._high_watermark, self.log.log_end_offset))
        self._check_invariants()
        return offset

    def follower_handle_offset_out_of_range(self, leader_log_start_offset: int, leader_log_end_offset: int) -> int:
        """The leader answered OFFSET_OUT_OF_RANGE; the node looked up the leader's log start and end offsets
        (ListOffsets). As Kafka's fetcher: a leader behind us (only after an unclean election) makes us
        truncate to its LEO; a leader whose log starts after our LEO makes us start over at its log start.
        Returns the offset to fetch from next."""
        assert not self.is_leader, f"broker {self.local_broker_id} leads {self.topic}-{self.partition}"
        log_end_offset = self.log.log_end_offset
        if leader_log_end_offset < log_end_offset:
            self._truncate_follower_to(leader_log_end_offset)
        elif leader_log_start_offset > log_end_offset:
            self.log.truncate_fully_and_start_at(leader_log_start_offset)
            self._high_watermark = leader_log_start_offset
        self._check_invariants()
        return self.log.log_end_offset

    # ------------------------------------------------------------------ invariants

    def _clamp_to_log(self, offset: int) -> int:
        return max(self.log.log_start_offset, min(offset, self.log.log_end_offset))

    def log_start_moved(self) -> None:
        """The log start moved (retention, DeleteRecords): a lagging high watermark is lifted with it, as Kafka
        does. Whoever moves the log start calls this."""
        self._high_watermark = max(self._high_watermark, self.log.log_start_offset)
        self._check_invariants()

    def _check_invariants(self) -> None:
        log_start_offset, high_watermark, log_end_offset = (
            self.log.log_start_offset, self._high_watermark, self.log.log_end_offset,
        )
        assert log_start_offset <= high_watermark <= log_end_offset, (
            f"{self.topic}-{self.partition}: log_start_offset={log_start_offset} "
            f"high_watermark={high_watermark} log_end_offset={log_end_offset}"
        )
        if self.is_leader:
            assert self.local_broker_id in self.isr, f"leader {self.local_broker_id} not in isr={self.isr}"
            assert high_watermark >= self._leader_hw_floor, (
                f"leader high watermark went back: {self._leader_hw_floor} -> {high_watermark}"
            )
            self._leader_hw_floor = high_watermark
