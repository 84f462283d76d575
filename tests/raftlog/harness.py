"""A tiny deterministic pump for RaftDrivers: virtual clock, per-pair FIFO streams, crashes, partitions.

Each pair of live, unpartitioned nodes has one stream in each direction; a partition, a crash or a restart
resets the streams (messages in flight are lost, both sides get disconnected/connected), which is exactly
TCP's contract. Latency is drawn from the cluster's seeded RNG but never reorders a stream. A stream can be
held (a path that loses every segment while TCP retransmits them, and never resets the connection): nothing
on it is delivered until it is released, and then everything is, in order.
"""

from __future__ import annotations

import hashlib
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import cbor2

from partitions.storage import MemoryStorage, Storage
from raftlog.driver import RaftDriver
from raftlog.port import NotLeaderError, ProposalDiscardedError, RaftConfig, RaftError
from tests.raftlog.storages import SimulatedCrash

FAST_CONFIG = RaftConfig(
    election_timeout_min_ms=300,
    election_timeout_max_ms=600,
    heartbeat_interval_ms=50,
    leader_fallback_timeout_ms=1000,
)


class StateMachine:
    """The test's replicated state: the list of applied (raft index, data)."""

    def __init__(self) -> None:
        self.applied: list[tuple[int, bytes]] = []

    def snapshot(self) -> bytes:
        return cbor2.dumps([[index, data] for index, data in self.applied])

    def restore(self, blob: bytes) -> None:
        self.applied = [(index, data) for index, data in cbor2.loads(blob)]

    def apply(self, entries: list[tuple[int, bytes]]) -> None:
        for index, data in entries:
            assert not self.applied or index > self.applied[-1][0], f"{index} after {self.applied[-1][0]}"
            self.applied.append((index, data))

    def data(self) -> list[bytes]:
        return [data for _, data in self.applied]


@dataclass
class Member:
    node_id: int
    storage: Storage
    config: RaftConfig
    bug_switches: frozenset[str]
    driver: RaftDriver | None = None
    machine: StateMachine = field(default_factory=StateMachine)
    outcomes: dict[int, int | RaftError] = field(default_factory=dict)
    late: dict[int, int | RaftError] = field(default_factory=dict)
    proposals: dict[int, bytes] = field(default_factory=dict)


class Cluster:
    def __init__(self, ids: tuple[int, ...] = (1, 2, 3), seed: int = 0, config: RaftConfig = FAST_CONFIG,
                 bug_switches: frozenset[str] = frozenset(), configs: dict[int, RaftConfig] | None = None,
                 storages: dict[int, Storage] | None = None) -> None:
        self.now_ms = 0
        self.rng = random.Random(seed)
        self.ids = ids
        self.members = {
            i: Member(i, (storages or {}).get(i) or MemoryStorage(), (configs or {}).get(i, config), bug_switches)
            for i in ids
        }
        self.cut: set[frozenset[int]] = set()
        self.streams: dict[tuple[int, int], deque[tuple[int, bytes]]] = {}
        self.held: set[tuple[int, int]] = set()  # (src, dst) streams whose messages wait for `release`
        self.trace: list[tuple] = []
        self.acked: dict[bytes, int] = {}  # data -> raft index, for proposals that completed successfully
        # When set, every release of a message or completion asserts the storage has nothing un-fsynced.
        self.check_durable_on_release = False
        self.durability_checks = 0
        # When set, an exception out of a driver step crashes that node, as it ends a node process (nothing in
        # raftlog/shell.py or net/node.py catches it), and is recorded as (now_ms, node, error) instead of
        # propagating out of the pump.
        self.crash_on_step_error = False
        self.step_errors: list[tuple[int, int, Exception]] = []
        for i in ids:
            self.start(i)

    # -- membership of the simulated network -------------------------------------------------------------
    def _up(self, a: int, b: int) -> bool:
        return (self.members[a].driver is not None and self.members[b].driver is not None
                and frozenset((a, b)) not in self.cut)

    def _reset_pair(self, a: int, b: int) -> None:
        """Drop both streams of the pair, then reconnect them if the pair is up."""
        for src, dst in ((a, b), (b, a)):
            self.held.discard((src, dst))
            if (src, dst) in self.streams:
                del self.streams[(src, dst)]
                if self.members[src].driver is not None:
                    self._call(src, lambda d: d.disconnected(dst))
        if self._up(a, b):
            for src, dst in ((a, b), (b, a)):
                self.streams[(src, dst)] = deque()
            for src, dst in ((a, b), (b, a)):
                if (src, dst) in self.streams and self.members[src].driver is not None:
                    self._call(src, lambda d: d.connected(dst))

    def _call(self, i: int, action: Callable[[RaftDriver], object]) -> object:
        """Run one driver step; a SimulatedCrash from its storage crashes the node (so does any exception out
        of the step when `crash_on_step_error` is set)."""
        try:
            result = action(self.members[i].driver)
        except SimulatedCrash:
            self.crash(i)
            return None
        except Exception as error:
            if not self.crash_on_step_error:
                raise
            self.step_errors.append((self.now_ms, i, error))
            self.crash(i)
            return None
        self._collect(i)
        return result

    def start(self, i: int) -> None:
        member = self.members[i]
        assert member.driver is None
        member.machine = StateMachine()
        peers = [p for p in self.ids if p != i]
        member.driver = RaftDriver(i, peers, member.storage, f"raft-{i}", lambda: self.now_ms,
                                   random.Random(self.rng.random()), member.machine.snapshot,
                                   member.machine.restore, member.config, member.bug_switches)
        self.trace.append((self.now_ms, "start", i))
        for p in peers:
            self._reset_pair(i, p)

    def crash(self, i: int) -> None:
        """Process crash: the driver vanishes without close (unflushed buffers lost, storage kept)."""
        self.members[i].driver = None
        self.trace.append((self.now_ms, "crash", i))
        for p in self.ids:
            if p != i:
                self._reset_pair(i, p)

    def restart(self, i: int) -> None:
        if self.members[i].driver is not None:
            self.crash(i)
        self.start(i)

    def partition(self, a: int, b: int) -> None:
        self.cut.add(frozenset((a, b)))
        self._reset_pair(a, b)

    def connect(self, a: int, b: int) -> None:
        """Undo `partition(a, b)`: the pair gets fresh streams (a pair already up is left alone)."""
        if frozenset((a, b)) in self.cut:
            self.cut.discard(frozenset((a, b)))
            self._reset_pair(a, b)

    def hold(self, src: int, dst: int) -> None:
        """Stop delivering on the stream from `src` to `dst` without resetting it: both sides stay connected
        and go on sending; a reset of the pair (partition, crash) ends the hold with the stream."""
        assert (src, dst) in self.streams, f"no stream {src}->{dst} to hold"
        self.held.add((src, dst))

    def release(self, src: int, dst: int) -> None:
        """Undo `hold`: what is in flight is due at once, in order."""
        self.held.discard((src, dst))

    def isolate(self, a: int) -> None:
        for b in self.ids:
            if b != a:
                self.partition(a, b)

    def heal(self) -> None:
        cut, self.cut = self.cut, set()
        for pair in sorted(tuple(sorted(p)) for p in cut):
            self._reset_pair(*pair)

    # -- driving ------------------------------------------------------------------------------------------------
    def _collect(self, i: int) -> None:
        member = self.members[i]
        driver = member.driver
        assert driver is not None
        if self.check_durable_on_release:
            outbox, completions = driver._outbox, driver._completions
            if outbox or completions:
                unsynced = member.storage.unsynced()
                assert not unsynced, f"node {i} released {len(outbox)} messages with un-fsynced {unsynced}"
                self.durability_checks += 1
        for peer, payload in driver.take_outbox():
            stream = self.streams.get((i, peer))
            if stream is None:
                continue
            latency = self.rng.randint(1, 5)
            deliver_at = max(self.now_ms + latency, stream[-1][0] if stream else 0)
            stream.append((deliver_at, payload))
        for ticket, outcome in driver.take_completions():
            member.outcomes[ticket] = outcome
            if isinstance(outcome, int):
                self.acked[member.proposals[ticket]] = outcome
            self.trace.append((self.now_ms, "done", i, ticket, repr(outcome)))
        for ticket, outcome in driver.take_late_completions():
            member.late[ticket] = outcome
        committed = driver.take_committed()
        member.machine.apply(committed)
        if committed:
            digest = hashlib.sha256(b"".join(d for _, d in committed)).hexdigest()[:12]
            self.trace.append((self.now_ms, "apply", i, committed[0][0], committed[-1][0], digest))

    def propose(self, i: int, data: bytes, timeout_ms: int = 5000) -> int:
        member = self.members[i]
        assert member.driver is not None
        ticket = member.driver._next_ticket
        member.proposals[ticket] = data
        assert self._call(i, lambda d: d.propose(data, self.now_ms + timeout_ms)) == ticket
        return ticket

    def _next_event_ms(self) -> int:
        times = [s[0][0] for pair, s in self.streams.items() if s and pair not in self.held]
        times += [m.driver.next_deadline_ms() for m in self.members.values() if m.driver is not None]
        return min(times)

    def step(self) -> None:
        self.now_ms = max(self.now_ms, self._next_event_ms())
        for (src, dst), stream in sorted(self.streams.items()):
            while stream and stream[0][0] <= self.now_ms and (src, dst) in self.streams and (src, dst) not in self.held:
                self._deliver_first(src, dst, stream)
        for i in self.ids:
            driver = self.members[i].driver
            if driver is not None and driver.next_deadline_ms() <= self.now_ms:
                self._call(i, lambda d: d.tick(self.now_ms))

    def _deliver_first(self, src: int, dst: int, stream: deque[tuple[int, bytes]]) -> None:
        _, payload = stream.popleft()
        self.trace.append((self.now_ms, "deliver", src, dst, hashlib.sha256(payload).hexdigest()[:12]))
        self._call(dst, lambda d: d.receive(src, payload))

    def deliver_next(self, src: int, dst: int) -> bool:
        """Deliver the oldest message in flight from `src` to `dst` now, before its latency has passed (the
        stream stays FIFO: every later message is due no earlier), held or not; False when none is in
        flight. Lets a script cut a link between two messages that were sent together."""
        stream = self.streams.get((src, dst))
        if not stream:
            return False
        self._deliver_first(src, dst, stream)
        return True

    def run_for(self, duration_ms: int) -> None:
        end = self.now_ms + duration_ms
        while self._next_event_ms() <= end:
            self.step()
        self.now_ms = end

    def run_until(self, predicate: Callable[[], bool], timeout_ms: int = 20_000) -> bool:
        end = self.now_ms + timeout_ms
        while not predicate():
            if self._next_event_ms() > end:
                self.now_ms = end
                return predicate()
            self.step()
        return True

    # -- observations ----------------------------------------------------------------------------------------
    def leader(self) -> int | None:
        leaders = [i for i, m in self.members.items() if m.driver is not None and m.driver.status().is_leader]
        return leaders[0] if len(leaders) == 1 else None

    def wait_leader(self, timeout_ms: int = 20_000) -> int:
        assert self.run_until(lambda: self.leader() is not None, timeout_ms), "no single leader elected"
        return self.leader()

    def commit(self, data: bytes, timeout_ms: int = 10_000) -> int:
        """Propose on the current leader until acknowledged (retrying when leadership moves); the raft index."""
        end = self.now_ms + timeout_ms
        while True:
            leader = self.wait_leader(max(1, end - self.now_ms))
            ticket = self.propose(leader, data, max(1, end - self.now_ms))
            member = self.members[leader]
            assert self.run_until(lambda: ticket in member.outcomes or member.driver is None,
                                  end - self.now_ms + 100), f"no outcome for {data!r}"
            outcome = member.outcomes.get(ticket)
            if isinstance(outcome, int):
                return outcome
            retriable = isinstance(outcome, (NotLeaderError, ProposalDiscardedError)) or outcome is None
            assert retriable and self.now_ms < end, f"proposal {data!r} failed: {outcome!r}"

    def trace_hash(self) -> str:
        return hashlib.sha256(repr(self.trace).encode()).hexdigest()

    def check_prefix_consistency(self) -> None:
        """Every two live state machines agree on every index both applied (committed log is one log)."""
        seen: dict[int, bytes] = {}
        for member in self.members.values():
            for index, data in member.machine.applied:
                assert seen.setdefault(index, data) == data, f"index {index}: {seen[index]!r} != {data!r}"
