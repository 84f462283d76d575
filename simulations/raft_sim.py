"""The Raft-quorum simulation: N `RaftDriver`s over SimDisks and the simulated network, a numbered-command
client, faults, and safety and liveness checkers.

Theory of operation. Each node process is a `RaftDriver` plus a tiny state machine: the list of
(raft index, command id) it has applied, which is also its snapshot. The node wrapper is the process: it
feeds the driver the network's callbacks and its own timer (`next_deadline_ms`), and after every driver step
sends the outbox, hands completions to the client and committed entries to the state machine and the
checkers. A crash drops the wrapper and the driver (nothing is flushed) and keeps the disk's page cache; a
power loss also drops what was not fsynced; a restart builds a new driver over the same disk, which replays
journal and snapshot. A paused process runs nothing (no timers, no deliveries) until resumed. A node's
storage is its SimDisk behind `SnapshotCrashPoint`, which adds the crash_in_snapshot fault (a crash at the
n-th write from the start of the next snapshot dump: inside the dump or the journal compaction after it).

Swarm: each seed draws the command size, the compaction thresholds and the append batch size (see the
*_CHOICES constants), so one sweep covers frequent and rare snapshots and followers many batches behind.

The client proposes commands numbered 1, 2, ... to the node it believes leads, and records an
acknowledgement when a proposal completes with an index. After the fault phase everything heals and a
marker command must commit and reach every node within `LIVENESS_MS_MAX` (liveness). Checkers, observing
from outside the processes:
- apply_in_order: within one process lifetime, applied raft indexes strictly increase, and no snapshot
  installed takes the state machine back to an index below one it applied;
- committed_identical: every node (in every lifetime, applied one by one or restored from a snapshot) holds
  the same command at the same index, and no command sits at two indexes;
- acked_not_lost: every acknowledged command is, at the end, at its acknowledged index on every node;
- one_leader_per_term: no two nodes ever report leadership of the same term;
- liveness: after heal, a new proposal commits and every node applies it within the bound;
- no_node_error: no driver raised (a journal that cannot be replayed, an assertion in the core).
"""

from __future__ import annotations

import logging
import struct
import traceback

import cbor2

from raftlog.driver import RaftDriver
from raftlog.port import NotLeaderError, RaftConfig, RaftError
from raftlog.snapshot import SNAPSHOT_FILE_NAME
from simulations.disk import SimDisk, SimulatedCrash
from simulations.faults import FaultSchedule, NodeFaultsMixin
from simulations.loop import US_PER_MS, US_PER_S, EventLoop, Trace
from simulations.network import Network, NetworkConfig
from simulations.run import CheckerVerdict, RunConfig, RunResult

DESCRIPTION = "a Raft quorum (pysyncobj via RaftDriver) with a numbered-command client"
RAFT_DIRECTORY = "raft"
LIVENESS_MS_MAX = 30_000  # after heal: election, catch-up and a commit must fit in this
PROPOSAL_TIMEOUT_MS = 5_000
CLIENT_INTERVAL_MS_MAX = 40  # the client proposes every uniform(1, this) ms
CLIENT_INFLIGHT_MAX = 64
COMMAND_BYTES_MIN = 16
# Swarm testing: each seed draws its own shape from these, so a sweep covers small and large commands
# (bug B needs a follower more than one append batch behind) and frequent and rare snapshots (bugs A, D).
COMMAND_BYTES_MAX_CHOICES = (64, 2_048, 8_192)
LOG_COMPACTION_ENTRIES_CHOICES = (64, 256, 5_000)
# Drawn from a second stream ("swarm-log"), so the draws above stay what they were for every seed. A batch
# is either pysyncobj's 64 KB or a few commands (never below one command: an entry larger than a batch
# takes pysyncobj's chunked-entry path); a deposed leader's conflicting tail is then soon more than a
# batch behind (bug B). A long compaction interval keeps that tail's divergence point in the new leader's
# log instead of compacting it away within seconds (a snapshot install would hide the repair path).
APPEND_BATCH_COMMANDS_CHOICES = (None, 4)  # None: the 64 KB default; n: n * command_bytes_max
LOG_COMPACTION_INTERVAL_MS_CHOICES = (2_000, 60_000)
TICK_SPACING_US_MIN = 100  # a driver asking for "now" again and again still lets time move
_COMMAND_HEADER = struct.Struct(">Q")  # command id; the rest of a command is padding



def simulation_raft_config(log_compaction_entries_min: int, append_entries_batch_bytes_max: int = 64 * 1024,
                           log_compaction_interval_ms: int = 2_000) -> RaftConfig:
    return RaftConfig(
        election_timeout_min_ms=500,
        election_timeout_max_ms=1_500,
        heartbeat_interval_ms=100,
        leader_fallback_timeout_ms=2_000,
        log_compaction_entries_min=log_compaction_entries_min,
        log_compaction_interval_ms=log_compaction_interval_ms,
        journal_rewrite_bytes_min=256 * 1024,
        append_entries_batch_bytes_max=append_entries_batch_bytes_max,
    )


def _describe(error: BaseException) -> str:
    """The error and where it was raised (the innermost frames), for a checker's detail line."""
    frames = traceback.extract_tb(error.__traceback__)[-3:]
    where = " <- ".join(f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno} {frame.name}" for frame in reversed(frames))
    return f"{type(error).__name__}: {error} at {where}"


def encode_command(command_id: int, size: int) -> bytes:
    assert size >= _COMMAND_HEADER.size, f"size={size}"
    return _COMMAND_HEADER.pack(command_id) + bytes(size - _COMMAND_HEADER.size)


def decode_command_id(data: bytes) -> int:
    return _COMMAND_HEADER.unpack_from(data)[0]


class SnapshotCrashPoint:
    """A node's SimDisk as its processes see it, with one extra fault: `arm(operations)` makes the disk
    crash at the `operations`-th storage write counted from the start of the node's next snapshot write
    (a dump, or an installed snapshot), so that a crash lands between the durable snapshot and the journal
    compaction that must follow it (bug D's window) as often as anywhere else in the dump."""

    _TEMP_SUFFIX = SNAPSHOT_FILE_NAME + ".tmp"  # write_file_atomically deletes the temp file first

    def __init__(self, disk: SimDisk) -> None:
        self.disk = disk
        self._armed: tuple[int, int] | None = None  # (operations, disk generation when armed)

    def arm(self, operations: int) -> None:
        self._armed = (operations, self.disk.generation)

    def disarm(self) -> None:
        self._armed = None
        self.disk.disarm_crash()

    def delete(self, path: str) -> None:
        if self._armed is not None and path.endswith(self._TEMP_SUFFIX):
            operations, generation = self._armed
            self._armed = None
            if generation == self.disk.generation:  # the process that was armed is still the one running
                self.disk.arm_crash(operations, power_loss=False)
        self.disk.delete(path)

    def __getattr__(self, name: str):
        return getattr(self.disk, name)  # every other Storage operation is the disk's own


class Checkers:
    """Observations from outside the node processes, and the verdicts drawn from them."""

    def __init__(self) -> None:
        self.command_at_index: dict[int, int] = {}  # raft index -> command id, first seen anywhere
        self.index_of_command: dict[int, int] = {}
        self.acked: dict[int, int] = {}  # command id -> acknowledged raft index
        self.leader_of_term: dict[int, int] = {}
        self.violations: dict[str, str] = {}  # checker -> first violation
        self.liveness_detail = "not checked"
        self.liveness_ok = False

    def violate(self, checker: str, detail: str) -> None:
        self.violations.setdefault(checker, detail)

    def observe_entry(self, node_id: int, index: int, command_id: int) -> None:
        known = self.command_at_index.setdefault(index, command_id)
        if known != command_id:
            self.violate("committed_identical", f"node {node_id} has command {command_id} at index {index}, "
                                                f"another node had {known}")
        other_index = self.index_of_command.setdefault(command_id, index)
        if other_index != index:
            self.violate("committed_identical", f"command {command_id} at index {index} on node {node_id} "
                                                f"and at index {other_index} elsewhere")
        acked_index = self.acked.get(command_id)
        if acked_index is not None and acked_index != index:
            self.violate("acked_not_lost", f"command {command_id} acked at {acked_index} but node {node_id} "
                                           f"applied it at {index}")

    def observe_ack(self, command_id: int, index: int) -> None:
        self.acked[command_id] = index
        known = self.command_at_index.get(index)
        if known is not None and known != command_id:
            self.violate("acked_not_lost", f"command {command_id} acked at index {index} which holds {known}")

    def observe_leader(self, node_id: int, term: int) -> None:
        leader = self.leader_of_term.setdefault(term, node_id)
        if leader != node_id:
            self.violate("one_leader_per_term", f"nodes {leader} and {node_id} both led term {term}")

    def final_check(self, states: dict[int, dict[int, int]]) -> None:
        """Every acked command at its index on every node (only meaningful once all nodes converged)."""
        for command_id, index in sorted(self.acked.items(), key=lambda item: item[1]):
            for node_id, state in sorted(states.items()):
                held = state.get(index)
                if held != command_id:
                    self.violate("acked_not_lost", f"command {command_id} acked at index {index}; node {node_id} "
                                                   f"holds {held} there")
                    return

    def verdicts(self, node_errors: list[str]) -> list[CheckerVerdict]:
        verdicts = [
            CheckerVerdict(name, name not in self.violations, self.violations.get(name, ""))
            for name in ("apply_in_order", "committed_identical", "acked_not_lost", "one_leader_per_term")
        ]
        verdicts.append(CheckerVerdict("liveness", self.liveness_ok, "" if self.liveness_ok else self.liveness_detail))
        verdicts.append(CheckerVerdict("no_node_error", not node_errors, node_errors[0] if node_errors else ""))
        return verdicts


class NodeProcess:
    """One running incarnation of a node: the driver, the state machine, the timer. Dies on crash."""

    def __init__(self, sim: RaftSimulation, node_id: int, incarnation: int) -> None:
        self.sim = sim
        self.node_id = node_id
        self.incarnation = incarnation
        self.applied: dict[int, int] = {}  # raft index -> command id (the state machine)
        self.applied_index = 0
        self.alive = True
        self.paused = False
        self._timer: int | None = None
        self._timer_us: int | None = None
        self.tickets: dict[int, int] = {}  # ticket -> command id
        peer_ids = [n for n in sim.node_ids if n != node_id]
        self.driver = RaftDriver(
            node_id, peer_ids, sim.storages[node_id], RAFT_DIRECTORY,
            clock_ms=lambda: sim.loop.now_ms,
            rng=sim.loop.derive_rng(f"raft-{node_id}-{incarnation}"),
            snapshot_fn=self._snapshot, restore_fn=self._restore,
            config=sim.raft_config, bug_switches=sim.bugs_live,
        )

    # --- state machine ----------------------------------------------------------------------------------

    def _snapshot(self) -> bytes:
        flat = [value for index in sorted(self.applied) for value in (index, self.applied[index])]
        return cbor2.dumps(flat)

    def _restore(self, blob: bytes) -> None:
        flat = cbor2.loads(blob)
        restored = {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}
        restored_index = max(restored, default=0)
        if restored_index < self.applied_index:
            self.sim.checkers.violate("apply_in_order", f"node {self.node_id} restored a snapshot at index "
                                                        f"{restored_index} after applying {self.applied_index}")
        self.applied = restored
        self.applied_index = restored_index
        self.sim.trace("raft.restore", self.node_id, self.applied_index)
        for index in sorted(self.applied):
            self.sim.checkers.observe_entry(self.node_id, index, self.applied[index])

    # --- endpoint ---------------------------------------------------------------------------------------

    def on_connected(self, peer_id: int) -> None:
        self._step(self.driver.connected, peer_id)

    def on_disconnected(self, peer_id: int) -> None:
        self._step(self.driver.disconnected, peer_id)

    def on_message(self, peer_id: int, data: bytes) -> None:
        self._step(self.driver.receive, peer_id, data)

    def propose(self, command_id: int, data: bytes) -> None:
        deadline_ms = self.sim.loop.now_ms + PROPOSAL_TIMEOUT_MS
        try:
            ticket = self.driver.propose(data, deadline_ms)
        except SimulatedCrash:
            self.sim.died_mid_step(self.node_id)
            return
        except Exception as error:  # see _step
            self.sim.node_error(self.node_id, _describe(error))
            return
        self.tickets[ticket] = command_id  # before draining: the outcome may already be there
        self._drain()

    def _tick(self) -> None:
        self._timer = None
        self._timer_us = None
        if self.alive and not self.paused:
            self._step(self.driver.tick, self.sim.loop.now_ms)

    def _step(self, action, *args):
        """Run one driver step, then release its outputs. A raising driver is a node error (and a crash)."""
        if not self.alive:
            return None
        assert not self.paused, f"node {self.node_id} stepped while paused"
        try:
            result = action(*args)
        except SimulatedCrash:
            self.sim.died_mid_step(self.node_id)
            return None
        except Exception as error:  # any exception out of the core is a bug to report, not to hide
            self.sim.node_error(self.node_id, _describe(error))
            return None
        self._drain()
        return result

    def _drain(self) -> None:
        if not self.alive:
            return
        sim = self.sim
        for peer_id, data in self.driver.take_outbox():
            sim.network.send(self.node_id, peer_id, data)
        for index, data in self.driver.take_committed():
            self._apply(index, decode_command_id(data))
        for ticket, outcome in self.driver.take_completions():
            command_id = self.tickets.pop(ticket, None)
            if command_id is not None:
                sim.client.on_outcome(self.node_id, command_id, outcome)
        self.driver.take_late_completions()  # the client already saw "outcome unknown" for these
        status = self.driver.status()
        if status.is_leader:
            sim.checkers.observe_leader(self.node_id, status.term)
        self._schedule_timer()

    def _apply(self, index: int, command_id: int) -> None:
        if index <= self.applied_index:
            self.sim.checkers.violate("apply_in_order", f"node {self.node_id} applied index {index} after "
                                                        f"{self.applied_index}")
        self.applied_index = max(self.applied_index, index)
        self.applied[index] = command_id
        self.sim.trace("raft.apply", self.node_id, index, command_id)
        self.sim.checkers.observe_entry(self.node_id, index, command_id)

    def _schedule_timer(self) -> None:
        if self.paused or not self.alive:
            return
        loop = self.sim.loop
        deadline_us = max(self.driver.next_deadline_ms() * US_PER_MS, loop.now_us + TICK_SPACING_US_MIN)
        if self._timer is not None and self._timer_us is not None and self._timer_us <= deadline_us:
            return
        loop.cancel(self._timer)
        self._timer_us = deadline_us
        self._timer = loop.call_at(deadline_us, self._tick)

    def stop(self) -> None:
        self.alive = False
        self.sim.loop.cancel(self._timer)
        self._timer = None

    def pause(self) -> None:
        self.paused = True
        self.sim.loop.cancel(self._timer)
        self._timer = None

    def resume(self) -> None:
        self.paused = False
        self._schedule_timer()


class Client:
    """Proposes numbered commands to the presumed leader; records acknowledgements."""

    def __init__(self, sim: RaftSimulation) -> None:
        self.sim = sim
        self.rng = sim.loop.derive_rng("client")
        self.next_command_id = 1
        self.inflight = 0
        self.leader_hint: int | None = None
        self.acks = 0
        self.errors = 0
        self.running = True
        self.marker_ids: set[int] = set()
        self.marker_index: int | None = None

    def start(self) -> None:
        self._schedule()

    def _schedule(self) -> None:
        delay_us = self.rng.randint(1, CLIENT_INTERVAL_MS_MAX) * US_PER_MS
        self.sim.loop.call_later(delay_us, self._propose_next)

    def _target(self) -> int | None:
        running = [n for n in self.sim.node_ids if self.sim.is_running(n)]
        if not running:
            return None
        if self.leader_hint in running:
            return self.leader_hint
        return self.rng.choice(running)

    def _propose_next(self) -> None:
        if not self.running:
            return
        if self.inflight < CLIENT_INFLIGHT_MAX:
            self.propose(marker=False)
        self._schedule()

    def propose(self, marker: bool) -> None:
        target = self._target()
        if target is None:
            return
        command_id = self.next_command_id
        self.next_command_id += 1
        size = self.rng.randint(COMMAND_BYTES_MIN, self.sim.command_bytes_max)
        if marker:
            self.marker_ids.add(command_id)
        self.inflight += 1
        self.sim.trace("client.propose", target, command_id, size)
        self.sim.processes[target].propose(command_id, encode_command(command_id, size))

    def on_outcome(self, node_id: int, command_id: int, outcome: int | RaftError) -> None:
        self.inflight -= 1
        if isinstance(outcome, int):
            self.acks += 1
            self.sim.trace("client.ack", node_id, command_id, outcome)
            self.sim.checkers.observe_ack(command_id, outcome)
            self.leader_hint = node_id
            if command_id in self.marker_ids and self.marker_index is None:
                self.marker_index = outcome
            return
        self.errors += 1
        self.sim.trace("client.error", node_id, command_id, type(outcome).__name__)
        if isinstance(outcome, NotLeaderError) and outcome.leader_hint is not None:
            self.leader_hint = outcome.leader_hint
        else:
            self.leader_hint = None


class RaftSimulation(NodeFaultsMixin):
    """The quorum, its disks, network, client and fault schedule for one seed. Also the FaultTarget."""

    def __init__(self, config: RunConfig, trace: Trace) -> None:
        self.config = config
        self.loop = EventLoop(config.seed, trace)
        self.node_ids = list(range(1, config.nodes + 1))
        self.bugs_live = frozenset(config.bugs_live)
        swarm = self.loop.derive_rng("swarm")
        self.command_bytes_max = swarm.choice(COMMAND_BYTES_MAX_CHOICES)
        log_compaction_entries_min = swarm.choice(LOG_COMPACTION_ENTRIES_CHOICES)
        swarm_log = self.loop.derive_rng("swarm-log")
        batch_commands = swarm_log.choice(APPEND_BATCH_COMMANDS_CHOICES)
        self.raft_config = simulation_raft_config(
            log_compaction_entries_min,
            append_entries_batch_bytes_max=64 * 1024 if batch_commands is None else batch_commands * self.command_bytes_max,
            log_compaction_interval_ms=swarm_log.choice(LOG_COMPACTION_INTERVAL_MS_CHOICES),
        )
        self.trace("swarm", self.command_bytes_max, log_compaction_entries_min,
                   self.raft_config.append_entries_batch_bytes_max, self.raft_config.log_compaction_interval_ms,
                   ",".join(sorted(self.bugs_live)) or "-")
        self.network = Network(self.loop, NetworkConfig())
        self.disks = {n: SimDisk(self.loop.derive_rng(f"disk-{n}")) for n in self.node_ids}
        self.storages = {n: SnapshotCrashPoint(disk) for n, disk in self.disks.items()}
        self.checkers = Checkers()
        self.node_errors: list[str] = []
        self.processes: dict[int, NodeProcess] = {}
        self._incarnations = {n: 0 for n in self.node_ids}
        for node_id in self.node_ids:
            self.network.add_node(node_id)  # each disk starts empty: the journal creates (and fsyncs) its directories
        self.client = Client(self)
        self.faults = FaultSchedule(self.loop, self, config.fault_rates())

    def trace(self, kind: str, *fields: int | str) -> None:
        self.loop.trace.append(self.loop.now_us, kind, *fields)

    # --- FaultTarget ------------------------------------------------------------------------------------

    def _stop(self, node_id: int) -> None:
        process = self.processes.pop(node_id, None)
        if process is not None:
            process.stop()
            self.client.inflight -= len(process.tickets)  # their outcomes died with the process
            self.network.node_down(node_id)

    def restart(self, node_id: int) -> None:
        if node_id in self.processes:
            return
        self._incarnations[node_id] += 1
        try:
            process = NodeProcess(self, node_id, self._incarnations[node_id])
        except SimulatedCrash:
            self.trace("node.died_mid_step", node_id)
            self.faults.node_died(node_id)
            return
        except Exception as error:  # a journal or snapshot the node cannot start from
            self.node_error(node_id, f"restart failed: {_describe(error)}", stop=False)
            return
        self.processes[node_id] = process
        self.network.node_up(node_id, process)
        process._drain()

    def arm_crash_in_snapshot(self, node_id: int, operations: int) -> None:
        self.storages[node_id].arm(operations)

    def died_mid_step(self, node_id: int) -> None:
        """An armed crash point fired inside a driver step: the disk already crashed or lost power."""
        self.trace("node.died_mid_step", node_id)
        process = self.processes.pop(node_id, None)
        if process is not None:
            process.stop()
            self.client.inflight -= len(process.tickets)
            self.network.node_down(node_id)
        self.faults.node_died(node_id)

    def leader_id(self) -> int | None:
        for node_id in self.node_ids:
            process = self.processes.get(node_id)
            if process is not None and not process.paused and process.driver.status().is_leader:
                return node_id
        return None

    def node_error(self, node_id: int, detail: str, stop: bool = True) -> None:
        self.node_errors.append(f"node {node_id} at {self.loop.now_ms} ms: {detail}")
        self.trace("node.error", node_id)
        if stop:
            self.crash(node_id)
            self.faults.node_died(node_id)

    # --- the run ----------------------------------------------------------------------------------------

    def run(self) -> RunResult:
        for node_id in self.node_ids:
            self.restart(node_id)
        self.client.start()
        self.faults.start()
        fault_phase_us = int(self.config.duration_s * US_PER_S)
        self.loop.run_until(fault_phase_us)
        self.faults.heal_all()
        for storage in self.storages.values():
            storage.disarm()  # the disk's own crash countdown and a pending snapshot crash point
        self.client.running = False
        self._check_liveness(fault_phase_us)
        if self.checkers.liveness_ok:
            self.checkers.final_check({n: p.applied for n, p in sorted(self.processes.items())})
        stats: dict[str, int | float | str] = {
            "acks": self.client.acks,
            "client_errors": self.client.errors,
            "events": self.loop.events_processed,
            "messages": self.network.messages_delivered,
            "faults": sum(self.faults.counts.values()),
            "command_bytes_max": self.command_bytes_max,
            "log_compaction_entries_min": self.raft_config.log_compaction_entries_min,
            "append_entries_batch_bytes_max": self.raft_config.append_entries_batch_bytes_max,
            "log_compaction_interval_ms": self.raft_config.log_compaction_interval_ms,
        }
        return RunResult(
            seed=self.config.seed,
            trace_sha256=self.loop.trace.sha256(),
            checkers=self.checkers.verdicts(self.node_errors),
            simulated_seconds=self.loop.now_us / US_PER_S,
            stats=stats,
        )

    def _check_liveness(self, healed_us: int) -> None:
        """After heal: a marker must be acknowledged, then applied by every node, within LIVENESS_MS_MAX."""
        loop = self.loop
        bound_us = healed_us + LIVENESS_MS_MAX * US_PER_MS
        client = self.client

        def retry_marker() -> None:
            if client.marker_index is None:
                client.propose(marker=True)
                loop.call_later(500 * US_PER_MS, retry_marker)

        loop.call_later(0, retry_marker)
        if not loop.run_until_condition(lambda: client.marker_index is not None, bound_us):
            self.checkers.liveness_detail = f"no marker acknowledged within {LIVENESS_MS_MAX} ms after heal"
            return

        def converged() -> bool:
            return len(self.processes) == len(self.node_ids) and all(
                p.applied_index >= client.marker_index for p in self.processes.values()
            )

        if not loop.run_until_condition(converged, bound_us):
            lagging = sorted(n for n in self.node_ids if n not in self.processes
                             or self.processes[n].applied_index < client.marker_index)
            self.checkers.liveness_detail = (
                f"marker at index {client.marker_index} not applied by nodes {lagging} within {LIVENESS_MS_MAX} ms"
            )
            return
        self.checkers.liveness_ok = True
        self.trace("liveness.ok", client.marker_index)


class _CountingHandler(logging.Handler):
    """Counts pysyncobj's log lines (e.g. "truncating already-applied log entries") instead of printing
    thousands of them; the count is a run statistic and the checkers judge what actually happened."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def run(config: RunConfig) -> RunResult:
    """One Raft-quorum simulation of `config` (see the module docstring)."""
    sink = open(config.trace_path, "w", encoding="utf-8") if config.trace_path else None
    pysyncobj_logger = logging.getLogger("pysyncobj")
    handler = _CountingHandler()
    propagate = pysyncobj_logger.propagate
    pysyncobj_logger.addHandler(handler)
    pysyncobj_logger.propagate = False
    try:
        result = RaftSimulation(config, Trace(sink)).run()
        result.stats["pysyncobj_log_lines"] = handler.count
        return result
    finally:
        pysyncobj_logger.removeHandler(handler)
        pysyncobj_logger.propagate = propagate
        if sink is not None:
            sink.close()
