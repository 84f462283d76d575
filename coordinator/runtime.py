"""The coordinator runtime (Kafka's CoordinatorRuntime), sans-IO: shards loaded, written, timed and unloaded.

Theory of operation. A coordinator (groups over `__consumer_offsets`, transactions over
`__transaction_state`) runs one `CoordinatorShard` (coordinator/shard.py) per partition of its internal topic
that this broker leads. The broker drives the runtime with four inputs, each with `now_ms`:

- `on_became_leader(partition, leader_epoch)`: a new shard starts LOADING: `poll` replays the partition
  from its log start offset in chunks of `load_bytes_per_poll`, so a large partition takes several polls
  and requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS. The load ends when the replay reaches the log
  end offset; then `shard.on_loaded(now_ms)` rebuilds volatile state (session deadlines).
- `on_resigned(partition)`: the shard is dropped; every request it parked and every response held for it
  is answered NOT_COORDINATOR (its records may still commit; a client retries on the new coordinator).
- `submit(partition, request)`: the shard's `handle` answers with records and a response; the records go to
  the partition as one batch through the port (`append`, acks=all semantics at the broker), then are read
  back and replayed; the response is held until the high watermark passes the last offset the shard had
  written (`poll` releases it). A result without records is held behind the shard's earlier writes, so no
  answer ever shows state that a leader failover could lose.
- `poll(now_ms, changed)`: advances loads, replays records others appended (transaction markers on
  `__consumer_offsets`), fires shard timers (`shard.poll`), and returns the answers whose offsets the high
  watermark has passed: `(request_id, response)` or `(request_id, ErrorCode)` for the broker to turn into
  that API's error response. `changed` names the partitions whose log end or high watermark may have moved
  since the previous poll (None: any); only those, the loading ones, the ones given a request since, and the
  ones whose timer or oldest held answer is due are read, so a poll costs what moved, not what is led (the
  broker polls after every request and a broker leads dozens of these partitions).

Replay is one path: the shard reads its partition back through `port.read`, in offset order, from its next
offset (`_Context.next_offset`); its own writes, the load and others' markers all arrive that way.

A failed append answers the request (and the parked requests the result would have released) with
Kafka's mapping of append errors to coordinator errors, and reloads the shard, because `handle` may have
moved volatile state ahead of the log (a shard whose `handle` never changes state says so with
`handle_changes_state = False` and is kept as it is). Held answers survive a reload: their records are in the log.

Invariants: answers leave in offset order per shard; `next_offset` only grows within one load; a shard's
last written offset is below the log end offset; at most `held_answers_max` answers are held per shard
(a request beyond that gets COORDINATOR_NOT_AVAILABLE before it is handled).

This module never imports the broker, the Kafka codec, trio, clocks or files.
"""

from __future__ import annotations

import enum
import itertools
from collections import deque
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from coordinator.shard import (CoordinatorRecord, CoordinatorResult, CoordinatorShard, LoadedRecord, Notice,
                               TransactionalWrite)
from partitions.errors import ErrorCode, KafkaError

LOAD_BYTES_PER_POLL_DEFAULT = 1024 * 1024
HELD_ANSWERS_MAX_DEFAULT = 10_000
WRITE_TIMEOUT_MS_DEFAULT = 5_000  # Kafka's offsets.commit.timeout.ms: how long an answer waits for its commit
READ_BYTES_MAX = 1024 * 1024

# Kafka's mapping of a failed coordinator write to the error the client sees (GroupCoordinatorService /
# CoordinatorRuntime): a lost leadership is NOT_COORDINATOR, a write that cannot be replicated now is
# COORDINATOR_NOT_AVAILABLE, an oversized write is the coordinator's own fault.
APPEND_ERROR_TO_COORDINATOR_ERROR = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.FENCED_LEADER_EPOCH: ErrorCode.NOT_COORDINATOR,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.INVALID_PRODUCER_EPOCH: ErrorCode.INVALID_PRODUCER_EPOCH,  # a fenced transactional write
}


def coordinator_error_for_append(code: ErrorCode) -> ErrorCode:
    return APPEND_ERROR_TO_COORDINATOR_ERROR.get(code, ErrorCode.UNKNOWN_SERVER_ERROR)


class CoordinatorPartitions(Protocol):
    """What the runtime needs from the broker: the internal topic's partitions that this broker leads."""

    def append(self, partition: int, leader_epoch: int, records: list[CoordinatorRecord],
               transactional: TransactionalWrite | None, now_ms: int) -> int:
        """Append the records as one batch as leader at `leader_epoch`; the offset of the last one.
        Raises KafkaError (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, ...) and appends nothing then."""

    def read(self, partition: int, offset: int, bytes_max: int) -> tuple[list[LoadedRecord], int]:
        """Records (data and control) of the batches from `offset`, at least one batch when there is one,
        and the offset after the last batch read."""

    def log_start_offset(self, partition: int) -> int: ...

    def log_end_offset(self, partition: int) -> int: ...

    def high_watermark(self, partition: int) -> int: ...


class ShardState(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"


@dataclass
class _Held:
    request_id: int
    offset: int  # released when the high watermark is above it
    answer: Any
    deadline_ms: int  # answered COORDINATOR_NOT_AVAILABLE (Kafka's write timeout) if still held then


@dataclass
class _Context:
    partition: int
    leader_epoch: int
    shard: CoordinatorShard
    state: ShardState
    next_offset: int
    last_written_offset: int = -1
    held: deque = field(default_factory=deque)
    # The shard's next timer, asked again only after something the runtime did to the shard (a request, a
    # poll, records replayed): the broker polls after every request, and a shard's deadline is a scan.
    deadline_ms: int | None = None


class CoordinatorRuntime:
    """Shards of one coordinator over the partitions of its internal topic (see the module docstring)."""

    def __init__(self, topic: str, shard_factory: Callable[[int], CoordinatorShard], port: CoordinatorPartitions,
                 *, load_bytes_per_poll: int = LOAD_BYTES_PER_POLL_DEFAULT,
                 held_answers_max: int = HELD_ANSWERS_MAX_DEFAULT,
                 write_timeout_ms: int = WRITE_TIMEOUT_MS_DEFAULT) -> None:
        assert load_bytes_per_poll > 0 and held_answers_max > 0, (load_bytes_per_poll, held_answers_max)
        self.write_timeout_ms = write_timeout_ms
        self.topic = topic
        self.shard_factory = shard_factory
        self.port = port
        self.load_bytes_per_poll = load_bytes_per_poll
        self.held_answers_max = held_answers_max
        self._contexts: dict[int, _Context] = {}
        self._attention: set[int] = set()  # partitions given a request since the last poll: read them then
        # Bumped whenever the set of ACTIVE shards changes: who scans the shards (the broker's marker writer)
        # scans them all again, and otherwise only the partitions that changed.
        self.generation = 0
        self._request_ids = itertools.count(1)
        # Test-only planted bug for the simulator's checkers (simulations/groups_sim.py); never configured:
        # answers leave without waiting for the high watermark.
        self.bug_answer_before_commit = False
        self._answers: list[tuple[int, Any]] = []
        self._notices: list[Notice] = []  # of appended results, for the node's log (take_notices)

    # --- leadership ----------------------------------------------------------------------------------------

    def on_became_leader(self, partition: int, leader_epoch: int, now_ms: int) -> None:
        """Start loading shard `partition` (a repeated or older leader epoch is ignored)."""
        context = self._contexts.get(partition)
        if context is not None and context.leader_epoch >= leader_epoch:
            return
        if context is not None:
            self._fail_waiting(context, ErrorCode.NOT_COORDINATOR)
            del self._contexts[partition]
            self.generation += 1
        try:
            self._contexts[partition] = self._loading_context(partition, leader_epoch, deque())
        except KafkaError:
            pass  # the partition is not readable as leader after all: no shard, NOT_COORDINATOR

    def on_resigned(self, partition: int, now_ms: int) -> None:
        """Drop shard `partition`; everything it holds or parked is answered NOT_COORDINATOR."""
        context = self._contexts.pop(partition, None)
        if context is not None:
            self._fail_waiting(context, ErrorCode.NOT_COORDINATOR)
            self.generation += 1

    def _loading_context(self, partition: int, leader_epoch: int, held: deque) -> _Context:
        return _Context(partition, leader_epoch, self.shard_factory(partition), ShardState.LOADING,
                        next_offset=self.port.log_start_offset(partition), held=held)

    def _fail_waiting(self, context: _Context, code: ErrorCode) -> None:
        self._answers.extend((held.request_id, code) for held in context.held)
        context.held.clear()
        self._answers.extend((request_id, code) for request_id in context.shard.parked_request_ids())

    # --- requests ------------------------------------------------------------------------------------------

    def status(self, partition: int) -> ErrorCode:
        """NONE when shard `partition` takes requests, else the error a request to it gets now."""
        context = self._contexts.get(partition)
        if context is None:
            return ErrorCode.NOT_COORDINATOR
        if context.state is ShardState.LOADING:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if len(context.held) >= self.held_answers_max:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE

    def submit(self, partition: int, request: Any, now_ms: int) -> int:
        """Hand `request` to shard `partition`; its answer comes out of `poll` under the returned id.
        Raises KafkaError with the code of `status` when the shard does not take requests now."""
        code = self.status(partition)
        if code != ErrorCode.NONE:
            raise KafkaError(f"{self.topic}-{partition}: {code.name}", code)
        context = self._contexts[partition]
        request_id = next(self._request_ids)
        self._apply(context, request_id, context.shard.handle(request_id, request, now_ms), now_ms)
        self._refresh_deadline(partition)
        self._attention.add(partition)  # its answer may be releasable at once (behind a committed write)
        return request_id

    def shard(self, partition: int) -> CoordinatorShard | None:
        """The loaded shard of `partition`, for read-only inspection (None while absent or loading)."""
        context = self._contexts.get(partition)
        return context.shard if context is not None and context.state is ShardState.ACTIVE else None

    def leader_epoch(self, partition: int) -> int | None:
        """The leader epoch shard `partition` was loaded under (the coordinator epoch of its markers)."""
        context = self._contexts.get(partition)
        return context.leader_epoch if context is not None else None

    def has_shards(self) -> bool:
        """Whether any shard is loaded or loading here."""
        return bool(self._contexts)

    def has_answers(self) -> bool:
        """Whether answers wait to leave at the next poll (a resignation's NOT_COORDINATOR ones)."""
        return bool(self._answers)

    def loaded_partitions(self) -> list[int]:
        return sorted(p for p, c in self._contexts.items() if c.state is ShardState.ACTIVE)

    def led_partitions(self) -> list[int]:
        return sorted(self._contexts)

    # --- time ----------------------------------------------------------------------------------------------

    def poll(self, now_ms: int, changed: AbstractSet[int] | None = None) -> list[tuple[int, Any]]:
        """Advance loads, replay others' records, fire timers; the answers now releasable. `changed`: the
        partitions whose log end or high watermark may have moved since the last poll (None: any of them)."""
        attention, self._attention = self._attention, set()
        for context in list(self._contexts.values()):
            partition = context.partition
            look = changed is None or partition in changed or partition in attention
            if context.state is ShardState.LOADING:
                self._advance_load(context, now_ms)
                look = True
            if context.state is ShardState.ACTIVE:
                if look and self._replay_available(context):
                    context.deadline_ms = context.shard.next_deadline_ms()
                if context.deadline_ms is not None and context.deadline_ms <= now_ms:
                    self._apply(context, None, context.shard.poll(now_ms), now_ms)
                    self._refresh_deadline(partition)
                    look = True
            if look or (context.held and context.held[0].deadline_ms <= now_ms):
                self._release(context, now_ms)
        answers, self._answers = self._answers, []
        return answers

    def next_deadline_ms(self) -> int | None:
        """When `poll` has work next: 0 while a shard loads or answers wait to leave, else the earliest timer."""
        if self._answers or any(c.state is ShardState.LOADING for c in self._contexts.values()):
            return 0
        deadlines = [c.deadline_ms for c in self._contexts.values() if c.deadline_ms is not None]
        deadlines += [c.held[0].deadline_ms for c in self._contexts.values() if c.held]
        return min(deadlines) if deadlines else None

    def _refresh_deadline(self, partition: int) -> None:
        context = self._contexts.get(partition)  # a failed append may have replaced it with a loading one
        if context is not None and context.state is ShardState.ACTIVE:
            context.deadline_ms = context.shard.next_deadline_ms()

    def take_notices(self) -> list[Notice]:
        """The notices of the results appended since the last call (CoordinatorResult.notices)."""
        notices, self._notices = self._notices, []
        return notices

    def waiting_on_high_watermark(self) -> list[int]:
        """Partitions with answers held for their high watermark (the broker polls when those move)."""
        return sorted(p for p, c in self._contexts.items() if c.held)

    # --- internals -----------------------------------------------------------------------------------------

    def _apply(self, context: _Context, request_id: int | None, result: CoordinatorResult, now_ms: int) -> None:
        written_before = context.last_written_offset
        if result.records:
            try:
                last = self.port.append(context.partition, context.leader_epoch, result.records,
                                        result.transactional, now_ms)
            except KafkaError as error:
                self._append_failed(context, request_id, result, coordinator_error_for_append(error.code))
                return
            assert last >= context.last_written_offset + len(result.records), (last, context.last_written_offset)
            context.last_written_offset = last
            self._replay_available(context)
        self._notices.extend(result.notices)
        # Held answers stay in offset order: completions released before this result's records go first.
        completions_offset = written_before if result.completions_precede_records else context.last_written_offset
        deadline_ms = now_ms + self.write_timeout_ms
        if result.completions_precede_records:
            context.held.extend(_Held(parked_id, completions_offset, answer, deadline_ms)
                                for parked_id, answer in result.completions)
        if request_id is not None and result.response is not None:
            context.held.append(_Held(request_id, context.last_written_offset, result.response, deadline_ms))
        if not result.completions_precede_records:
            context.held.extend(_Held(parked_id, completions_offset, answer, deadline_ms)
                                for parked_id, answer in result.completions)

    def _append_failed(self, context: _Context, request_id: int | None, result: CoordinatorResult,
                       code: ErrorCode) -> None:
        if request_id is not None:
            self._answers.append((request_id, code))
        self._answers.extend((parked_id, code) for parked_id, _ in result.completions)
        if not getattr(context.shard, "handle_changes_state", True):
            return  # a shard whose `handle` changes nothing (transactions) has nothing to roll back
        # Volatile state may be ahead of the log: rebuild the shard from the log, keeping what is held.
        old = context.shard
        self._answers.extend((parked_id, ErrorCode.NOT_COORDINATOR) for parked_id in old.parked_request_ids()
                             if parked_id != request_id)
        self.generation += 1
        try:
            self._contexts[context.partition] = self._loading_context(context.partition, context.leader_epoch,
                                                                      context.held)
        except KafkaError:  # no longer the leader: what was held is answered as on resignation
            del self._contexts[context.partition]
            self._answers.extend((held.request_id, ErrorCode.NOT_COORDINATOR) for held in context.held)

    def _advance_load(self, context: _Context, now_ms: int) -> None:
        budget = self.load_bytes_per_poll
        end = self.port.log_end_offset(context.partition)
        while context.next_offset < end and budget > 0:
            budget -= self._replay_chunk(context, min(budget, READ_BYTES_MAX))
        if context.next_offset >= end:
            context.state = ShardState.ACTIVE
            self.generation += 1
            # Answers given after the load wait until what was loaded is committed.
            context.last_written_offset = max(context.last_written_offset, end - 1)
            context.shard.on_loaded(now_ms)
            context.deadline_ms = context.shard.next_deadline_ms()

    def _replay_available(self, context: _Context) -> bool:
        """Replay what others appended since; whether anything was."""
        end = self.port.log_end_offset(context.partition)
        replayed = context.next_offset < end
        while context.next_offset < end:
            self._replay_chunk(context, READ_BYTES_MAX)
        context.last_written_offset = max(context.last_written_offset, end - 1)
        return replayed

    def _replay_chunk(self, context: _Context, bytes_max: int) -> int:
        """Replay the batches from `next_offset`; a rough count of the bytes read (the records' sizes)."""
        records, next_offset = self.port.read(context.partition, context.next_offset, bytes_max)
        assert next_offset > context.next_offset, f"read at {context.next_offset} made no progress"
        size = 0
        for record in records:
            assert record.offset >= context.next_offset, (record.offset, context.next_offset)
            context.shard.replay(record)
            size += len(record.key or b"") + len(record.value or b"") + 16
        context.next_offset = next_offset
        return max(size, 1)

    def _release(self, context: _Context, now_ms: int) -> None:
        """Answer what the high watermark passed, then what waited longer than the write timeout (Kafka's
        offsets.commit.timeout.ms: the client hears COORDINATOR_NOT_AVAILABLE and retries, as from Kafka,
        instead of waiting on a partition whose ISR cannot commit). Deadlines grow with offsets, so both
        leave from the front and answers stay in offset order."""
        if not context.held:
            return
        high_watermark = self.port.high_watermark(context.partition)
        if self.bug_answer_before_commit:
            high_watermark = context.last_written_offset + 1
        while context.held and context.held[0].offset < high_watermark:
            held = context.held.popleft()
            self._answers.append((held.request_id, held.answer))
        while context.held and context.held[0].deadline_ms <= now_ms:
            held = context.held.popleft()
            self._answers.append((held.request_id, coordinator_error_for_append(ErrorCode.REQUEST_TIMED_OUT)))
