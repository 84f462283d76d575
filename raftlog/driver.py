"""RaftDriver: one pysyncobj quorum member driven step by step, with no I/O of its own (sans-IO).

Theory of operation: the caller (the trio shell, or the simulator's event loop) owns time, the network and
the disk. It calls `tick(now_ms)` when `next_deadline_ms()` is reached, `receive(peer, bytes)` for each
frame from a peer's stream, `connected/disconnected(peer)` when a stream goes up or down, and `propose`.
Each of these is one *step*: the driver binds pysyncobj's routed clock/RNG/storage to itself
(`patches.driving`), runs SyncObj (`doTick(0)`, never blocking, up to `settle_rounds_max` times so a new
entry or a new commit index is sent at once instead of at the next heartbeat), then

    1. flushes the journal and fsyncs it (group commit: one fsync per step, covering every entry, vote
       and term change of the step),
    2. only then releases the step's outgoing messages to `take_outbox`, its proposal outcomes to
       `take_completions` and its applied entries to `take_committed`.

If the step raises (a storage failure, a simulated crash), nothing of it is released, not even what the
earlier frames of a receive_many batch staged: the node must be treated as crashed and re-created over its
storage. Restart replays the journal and the snapshot.

Proposals (bug G): every ticket completes exactly once. When its deadline passes first it completes with
ProposalTimeoutError ("outcome unknown"); if pysyncobj later reports the real outcome, it is not dropped:
it goes to `take_late_completions()`, and a committed entry is in any case delivered by `take_committed`
on every node, so the state machine never misses it.

Never imports trio, socket, time, random, threading or os.
"""

from __future__ import annotations

import heapq
import math
from typing import Any, Callable, Protocol

from pysyncobj import SyncObj, SyncObjConf, replicated
from pysyncobj.config import FAIL_REASON
from pysyncobj.transport import Transport

from partitions.storage import Storage, StorageError, normalize_path
from raftlog import patches
from raftlog.codec import MalformedRaftMessageError, decode_message, encode_message
from raftlog.journal import StorageJournal
from raftlog.patches import RaftNode
from raftlog.port import (
    MemberProgress,
    NotLeaderError,
    ProposalDiscardedError,
    ProposalQueueFullError,
    ProposalTimeoutError,
    ProposalTooLargeError,
    RaftClosedError,
    RaftConfig,
    RaftError,
    RaftStatus,
    RaftStorageError,
    RestoreFn,
    SnapshotFn,
)
from raftlog.snapshot import SnapshotStore, decode_snapshot, encode_snapshot

settle_rounds_max = 4
_RAFT_STATE_LEADER = 2


class RandomLike(Protocol):
    def random(self) -> float: ...


class _QueueTransport(Transport):
    """pysyncobj's Transport with no sockets: `send` stages the message in the driver (released after
    the step's fsync). A message to a peer whose stream is down is dropped, as TCP would."""

    def __init__(self, driver: RaftDriver) -> None:
        super().__init__(None, None, None)
        self._driver = driver
        self.connected_ids: set[int] = set()

    def send(self, node: RaftNode, message: dict[str, Any]) -> bool:
        if node.id not in self.connected_ids:
            return False
        self._driver._stage_message(node.id, message)
        return True


class _Core(SyncObj):
    """The replicated object: one replicated method that hands each committed entry to the driver."""

    def __init__(self, driver: RaftDriver, self_node: RaftNode, others: list[RaftNode], conf: SyncObjConf,
                 transport: _QueueTransport) -> None:
        self._flotilla_driver = driver
        super().__init__(self_node, others, conf=conf, nodeClass=RaftNode, transport=transport)

    @replicated
    def apply_entry(self, data: bytes) -> int:
        return self._flotilla_driver._on_apply(data)


def _first_ms_after(seconds: float) -> int:
    """The smallest integer millisecond whose pysyncobj clock value (ms / 1000) is strictly after `seconds`."""
    ms = math.floor(seconds * 1000)
    while ms / 1000.0 <= seconds:
        ms += 1
    return ms


def _fail_reason_error(reason: int, leader_hint: int | None) -> RaftError:
    if reason == FAIL_REASON.DISCARDED:
        return ProposalDiscardedError("entry overwritten by a newer leader")
    if reason == FAIL_REASON.QUEUE_FULL:
        return ProposalQueueFullError("raft command queue full")
    if reason in (FAIL_REASON.NOT_LEADER, FAIL_REASON.MISSING_LEADER, FAIL_REASON.LEADER_CHANGED):
        return NotLeaderError(leader_hint)
    return RaftError(f"raft proposal failed: pysyncobj reason {reason}")


class RaftDriver:
    """A sans-IO quorum member; see the module docstring. Implements the RaftLog port."""

    def __init__(self, node_id: int, peer_ids: list[int], storage: Storage, directory: str,
                 clock_ms: Callable[[], int], rng: RandomLike, snapshot_fn: SnapshotFn, restore_fn: RestoreFn,
                 config: RaftConfig | None = None, bug_switches: frozenset[str] = frozenset()) -> None:
        """`bug_switches` names fixes to switch OFF ("A", "B", "D", "E", "H", "I", "J", "K"): for tests and
        the simulator only. Raises RaftStorageError when the journal or snapshot on `storage` is unusable."""
        self.config = config or RaftConfig()
        self.config.validate()
        unknown = set(bug_switches) - patches.BUG_NAMES
        assert not unknown, f"unknown bug switches {sorted(unknown)}"
        assert node_id not in peer_ids, f"node {node_id} listed among its peers {peer_ids}"
        self.node_id = node_id
        self.peer_ids = sorted(peer_ids)
        self.bugs_live = frozenset(bug_switches)
        self._storage = storage
        self._directory = normalize_path(directory)
        self._clock_ms = clock_ms
        self._rng = rng
        self._snapshot_fn = snapshot_fn
        self._restore_fn = restore_fn
        self._now_ms = clock_ms()
        self._last_tick_ms = self._now_ms - 1
        self._closed = False
        self._outbox: list[tuple[int, bytes]] = []
        self._staged_messages: list[tuple[int, bytes]] = []
        self._completions: list[tuple[int, int | RaftError]] = []
        self._staged_completions: list[tuple[int, int | RaftError]] = []
        self._late_completions: list[tuple[int, int | RaftError]] = []
        self._committed: list[tuple[int, bytes]] = []
        self._staged_committed: list[tuple[int, bytes]] = []
        self._pending: dict[int, int] = {}  # ticket -> deadline_ms
        self._deadlines: list[tuple[int, int]] = []  # heap of (deadline_ms, ticket)
        self._timed_out: set[int] = set()
        self._next_ticket = 1
        self._announced: tuple[int, int] | None = None
        self.malformed_messages = 0
        self._journal = StorageJournal(storage, self._directory, self.config.journal_rewrite_bytes_min)
        self._snapshots = SnapshotStore(
            storage, self._directory, persist="E" not in self.bugs_live,
            chunk_bytes_max=self.config.snapshot_chunk_bytes_max,
            write_fn=self._snapshot_write_hook, read_fn=self._snapshot_read_hook,
            defer_install="H" not in self.bugs_live,
        )
        self._check_restart_state()
        self._transport = _QueueTransport(self)
        with patches.driving(self):
            self._core = _Core(self, RaftNode(node_id), [RaftNode(p) for p in self.peer_ids],
                               self._sync_obj_conf(), self._transport)
        self._nodes = {p: RaftNode(p) for p in self.peer_ids}

    # -- construction helpers ------------------------------------------------------------------------------
    def _sync_obj_conf(self) -> SyncObjConf:
        c = self.config
        persist = "E" not in self.bugs_live
        return SyncObjConf(
            autoTick=False,
            raftMinTimeout=c.election_timeout_min_ms / 1000.0,
            raftMaxTimeout=c.election_timeout_max_ms / 1000.0,
            appendEntriesPeriod=c.heartbeat_interval_ms / 1000.0,
            leaderFallbackTimeout=c.leader_fallback_timeout_ms / 1000.0,
            connectionTimeout=c.election_timeout_max_ms / 1000.0,
            appendEntriesUseBatch=True,
            appendEntriesBatchSizeBytes=c.append_entries_batch_bytes_max,
            logCompactionMinEntries=c.log_compaction_entries_min,
            logCompactionMinTime=c.log_compaction_interval_ms / 1000.0,
            logCompactionBatchSize=c.snapshot_chunk_bytes_max,
            commandsQueueSize=c.proposals_inflight_max,
            commandsWaitLeader=True,
            dynamicMembershipChange=False,
            useFork=False,
            fullDumpFile=self._snapshots.path if persist else None,
            serializer=self._snapshot_write_hook if persist else None,
            deserializer=self._snapshot_read_hook if persist else None,
            tcp_keepalive=None,
        )

    def _check_restart_state(self) -> None:
        """Refuse storage that would silently never apply (bug E) or a corrupt snapshot."""
        snapshot_present = self._snapshots.exists()
        if snapshot_present:
            decode_snapshot(self._snapshots._load_blob())
        if "E" not in self.bugs_live and len(self._journal) and self._journal[0][1] > 1 and not snapshot_present:
            raise RaftStorageError(
                f"journal {self._journal.path} starts at index {self._journal[0][1]} but has no snapshot")

    # -- patches.DriverContext -----------------------------------------------------------------------------
    def now_seconds(self) -> float:
        return self._now_ms / 1000.0

    def random(self) -> float:
        return self._rng.random()

    def snapshot_exists(self, path: str) -> bool:
        assert path == self._snapshots.path, f"pysyncobj asked for {path}, snapshot is {self._snapshots.path}"
        return self._snapshots.exists()

    def make_journal(self) -> StorageJournal:
        return self._journal

    def make_serializer(self) -> SnapshotStore:
        return self._snapshots

    # -- snapshot hooks (conf.serializer / conf.deserializer) ----------------------------------------------
    def _snapshot_write_hook(self, path: str, data: tuple[Any, ...]) -> bytes:
        last, previous, cluster = data
        pending = self._committed + self._staged_committed
        assert all(index <= last[1] for index, _ in pending), f"untaken entries beyond snapshot {last[1]}"
        return encode_snapshot(last, previous, [node.id for node in cluster], self._snapshot_fn(), pending)

    def _snapshot_read_hook(self, path: str, blob: bytes) -> tuple[Any, ...]:
        snapshot = decode_snapshot(blob)
        self._restore_fn(snapshot["app_state"])
        self._snapshots.snapshot_index = snapshot["last"][1]
        self._committed = []
        self._staged_committed = list(snapshot["app_pending"])
        return snapshot["last"], snapshot["previous"], [RaftNode(i) for i in snapshot["cluster"]]

    # -- callbacks from pysyncobj -------------------------------------------------------------------------------
    def _stage_message(self, peer_id: int, message: dict[str, Any]) -> None:
        self._staged_messages.append((peer_id, encode_message(message)))

    def _on_apply(self, data: bytes) -> int:
        index = self._core.raftLastApplied + 1
        self._staged_committed.append((index, bytes(data)))
        return index

    def _on_outcome(self, ticket: int, result: Any, reason: int) -> None:
        outcome: int | RaftError
        if reason == FAIL_REASON.SUCCESS:
            outcome = int(result)
        else:
            outcome = _fail_reason_error(reason, self._leader_id())
        if ticket in self._pending:
            del self._pending[ticket]
            self._staged_completions.append((ticket, outcome))
        elif ticket in self._timed_out:
            self._timed_out.discard(ticket)
            self._late_completions.append((ticket, outcome))

    # -- steps ---------------------------------------------------------------------------------------------------
    def _step(self, now_ms: int, action: Callable[[], None] | None) -> None:
        assert not self._closed, f"driver {self.node_id} is closed"
        self._now_ms = max(self._now_ms, now_ms)
        try:
            with patches.driving(self):
                if action is not None:
                    action()
                self._settle()
            self._expire_tickets()
            self._journal.flush()  # group commit: durable before anything of this step leaves the driver
        except BaseException:
            # Nothing of a failed step leaves, even if the caller went on stepping this driver: what the
            # step's earlier frames staged (a receive_many batch) is not durable.
            self._staged_messages, self._staged_completions, self._staged_committed = [], [], []
            raise
        self._release()

    def _settle(self) -> None:
        core = self._core
        for round_number in range(settle_rounds_max):
            announce = core._isLeader() and self._announced != self._progress()
            busy = core.raftCommitIndex > core.raftLastApplied or self._snapshots._state != 0
            if round_number > 0 and not announce and not busy:
                return
            if announce:
                core._SyncObj__newAppendEntriesTime = 0  # send the new entries / commit index now
            core.doTick(0)
            if announce:
                self._announced = self._progress()

    def _progress(self) -> tuple[int, int]:
        return self._log_end_index(), self._core.raftCommitIndex

    def _expire_tickets(self) -> None:
        while self._deadlines and self._deadlines[0][0] <= self._now_ms:
            _, ticket = heapq.heappop(self._deadlines)
            if ticket in self._pending:
                del self._pending[ticket]
                self._timed_out.add(ticket)
                self._staged_completions.append(
                    (ticket, ProposalTimeoutError("deadline passed; the entry may still commit (outcome unknown)")))

    def _release(self) -> None:
        self._outbox.extend(self._staged_messages)
        self._completions.extend(self._staged_completions)
        self._committed.extend(self._staged_committed)
        self._staged_messages, self._staged_completions, self._staged_committed = [], [], []

    def tick(self, now_ms: int) -> None:
        """Run timers (elections, heartbeats, compaction) at `now_ms`. Never blocks.
        Raises StorageError when the journal cannot be written (the node must stop)."""
        self._step(now_ms, None)
        self._last_tick_ms = max(self._last_tick_ms, now_ms)

    def receive(self, from_id: int, message: bytes) -> None:
        """Handle one frame from peer `from_id`. A malformed frame is counted and dropped."""
        if from_id not in self._nodes:
            self.malformed_messages += 1
            return
        try:
            decoded = decode_message(message)
        except MalformedRaftMessageError:
            self.malformed_messages += 1
            return
        node = self._nodes[from_id]
        self._step(self._clock_ms(), lambda: self._transport._onMessageReceived(node, decoded))

    def receive_many(self, messages: list[tuple[int, bytes]]) -> None:
        """Handle several frames as one step (one fsync for all of them); malformed ones are dropped."""
        decoded = []
        for from_id, message in messages:
            try:
                if from_id not in self._nodes:
                    raise MalformedRaftMessageError(f"unknown peer {from_id}")
                decoded.append((self._nodes[from_id], decode_message(message)))
            except MalformedRaftMessageError:
                self.malformed_messages += 1

        def deliver() -> None:
            for node, body in decoded:
                self._transport._onMessageReceived(node, body)

        if decoded:
            self._step(self._clock_ms(), deliver)

    def connected(self, peer_id: int) -> None:
        """The stream to `peer_id` is up (a new stream after any reconnect)."""
        assert peer_id in self._nodes, f"unknown peer {peer_id}"
        self._transport.connected_ids.add(peer_id)
        self._step(self._clock_ms(), lambda: self._transport._onNodeConnected(self._nodes[peer_id]))

    def disconnected(self, peer_id: int) -> None:
        """The stream to `peer_id` is down: its unsent messages belong to the dead stream and are dropped."""
        assert peer_id in self._nodes, f"unknown peer {peer_id}"
        self._transport.connected_ids.discard(peer_id)
        self._outbox = [(p, m) for p, m in self._outbox if p != peer_id]
        self._snapshots.cancelTransmisstion(self._nodes[peer_id])
        self._step(self._clock_ms(), lambda: self._transport._onNodeDisconnected(self._nodes[peer_id]))

    def propose(self, data: bytes, deadline_ms: int) -> int:
        """Queue `data`; returns a ticket. Its outcome (raft index or RaftError) arrives via take_completions:
        NotLeaderError, ProposalTooLargeError, ProposalQueueFullError, ProposalTimeoutError,
        ProposalDiscardedError."""
        ticket = self._next_ticket
        self._next_ticket += 1
        self._step(self._clock_ms(), lambda: self._submit(ticket, bytes(data), deadline_ms))
        return ticket

    def propose_many(self, proposals: list[tuple[bytes, int]]) -> list[int]:
        """Several (data, deadline_ms) proposals as one step: one fsync and one append per follower."""
        tickets = list(range(self._next_ticket, self._next_ticket + len(proposals)))
        self._next_ticket += len(proposals)

        def submit_all() -> None:
            for ticket, (data, deadline_ms) in zip(tickets, proposals):
                self._submit(ticket, bytes(data), deadline_ms)

        self._step(self._clock_ms(), submit_all)
        return tickets

    def _submit(self, ticket: int, data: bytes, deadline_ms: int) -> None:
        if len(data) > self.config.entry_bytes_max:
            error: RaftError = ProposalTooLargeError(f"entry of {len(data)} bytes > {self.config.entry_bytes_max}")
            self._staged_completions.append((ticket, error))
        elif not self._core._isLeader():
            self._staged_completions.append((ticket, NotLeaderError(self._leader_id())))
        elif len(self._pending) >= self.config.proposals_inflight_max:
            self._staged_completions.append((ticket, ProposalQueueFullError("proposals_inflight_max reached")))
        else:
            self._pending[ticket] = deadline_ms
            heapq.heappush(self._deadlines, (deadline_ms, ticket))
            self._core.apply_entry(data, callback=lambda result, reason: self._on_outcome(ticket, result, reason))
            self._core._checkCommandsToApply()  # append now, so this step's fsync covers the entry

    def transfer_leadership(self, peer_id: int | None = None) -> bool:
        """Ask a caught-up follower (the most caught-up when None) to take over; True if the request was sent."""
        outcome: list[int] = []
        target = self._nodes[peer_id] if peer_id is not None else None
        self._step(self._clock_ms(),
                   lambda: self._core.transferLeadership(target, callback=lambda _r, e: outcome.append(e)))
        return outcome == [FAIL_REASON.SUCCESS]

    def close(self) -> None:
        """Flush and release storage; pending proposals complete with RaftClosedError."""
        if self._closed:
            return
        for ticket in sorted(self._pending):
            self._completions.append((ticket, RaftClosedError("raft driver closed")))
        self._pending.clear()
        try:
            self._journal.flush()
        finally:
            self._closed = True
            with patches.driving(self):
                self._core.destroy()

    # -- outputs -------------------------------------------------------------------------------------------------
    def take_outbox(self) -> list[tuple[int, bytes]]:
        """Messages to send as (peer id, frame payload), in order; each already covered by an fsync."""
        outbox, self._outbox = self._outbox, []
        return outbox

    def take_completions(self) -> list[tuple[int, int | RaftError]]:
        completions, self._completions = self._completions, []
        return completions

    def take_late_completions(self) -> list[tuple[int, int | RaftError]]:
        """Real outcomes of tickets that had already completed with ProposalTimeoutError."""
        late, self._late_completions = self._late_completions, []
        return late

    def take_committed(self) -> list[tuple[int, bytes]]:
        committed, self._committed = self._committed, []
        return committed

    # -- inspection ------------------------------------------------------------------------------------------------
    def _leader_id(self) -> int | None:
        leader = self._core._getLeader()
        return None if leader is None else int(leader.id)

    def _log_end_index(self) -> int:
        return int(self._journal[-1][1])

    def next_deadline_ms(self) -> int:
        """The virtual time at which `tick` must run next: never earlier than 1 ms after the last tick, so
        an event loop always advances."""
        core = self._core
        soonest_ms = self._last_tick_ms + 1
        if self._closed:
            return max(soonest_ms, self._now_ms + self.config.heartbeat_interval_ms)
        if core.raftCommitIndex > core.raftLastApplied or self._snapshots._state != 0:
            return max(soonest_ms, self._now_ms)
        deadline = self._now_ms + self.config.heartbeat_interval_ms  # compaction and fallback timers
        if core._isLeader():
            deadline = min(deadline, _first_ms_after(core._SyncObj__newAppendEntriesTime))
        elif self._transport.connected_ids or not self.peer_ids:  # pysyncobj only elects when connected
            deadline = min(deadline, _first_ms_after(core._SyncObj__raftElectionDeadline))
        if self._deadlines:
            deadline = min(deadline, self._deadlines[0][0])
        return max(deadline, soonest_ms)

    def leadership(self) -> tuple[bool, int, int | None]:
        core = self._core
        return bool(core._isLeader()), int(core.raftCurrentTerm), self._leader_id()

    def status(self) -> RaftStatus:
        core = self._core
        is_leader = bool(core._isLeader())
        match_index = core._SyncObj__raftMatchIndex
        last_response = core._SyncObj__lastResponseTime
        members = [MemberProgress(self.node_id, self._log_end_index(), self._now_ms, True, True)]
        for peer_id, node in sorted(self._nodes.items()):
            members.append(MemberProgress(
                id=peer_id,
                match_index=int(match_index[node]) if is_leader and node in match_index else None,
                last_contact_ms=round(last_response[node] * 1000) if is_leader and node in last_response else None,
                is_voter=True,
                connected=peer_id in self._transport.connected_ids,
            ))
        return RaftStatus(
            node_id=self.node_id,
            leader_id=self._leader_id(),
            term=int(core.raftCurrentTerm),
            raft_commit_index=int(core.raftCommitIndex),
            last_applied=int(core.raftLastApplied),
            is_leader=is_leader,
            log_start_index=int(self._journal[0][1]),
            log_end_index=self._log_end_index(),
            snapshot_index=self._snapshots.snapshot_index,
            members=tuple(members),
        )


__all__ = ["RaftDriver", "StorageError"]
