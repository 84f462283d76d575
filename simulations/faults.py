"""Fault schedules: which fault starts when, on which node or link, and when it ends.

Theory of operation. A run's faults are given as rates, e.g. "crash=0.01,partition=0.02": each value is the
probability that a fault of that kind starts at one fault step (every `FAULT_STEP_MS` of simulated time), so
crash=0.01 means about one crash every 10 simulated seconds. All choices come from the run's "faults" RNG
stream, so one seed gives one schedule. Each fault is an episode with a random length; at most one network
episode (partition, one_way, isolate, isolate_leader, delay) is active at a time because `Network.heal`
heals everything. After the fault phase `heal_all` ends every episode, restarts every node, and the workload
checks liveness. Some kinds need more of the target than `FaultTarget` (crash_in_snapshot needs to know where
a snapshot write starts): a schedule asking for one its target lacks is refused. `FAULT_PROFILES` names
fault mixes that `--faults` accepts by name.

The schedule drives any `FaultTarget`: the Raft quorum simulation now, the whole cluster later.
"""

from __future__ import annotations

import random
from typing import Protocol

from simulations.loop import US_PER_MS, EventLoop
from simulations.network import Network

FAULT_STEP_MS = 100
EPISODE_MS_MIN = 200
EPISODE_MS_MAX = 5_000
RESTART_DELAY_MS_MIN = 100
RESTART_DELAY_MS_MAX = 3_000
DROP_EPISODE_PROBABILITY = 0.02  # per message while a drop episode lasts
SLOW_LINK_EXTRA_MS_MAX = 400

NETWORK_FAULTS = ("partition", "one_way", "isolate", "isolate_leader", "delay")
NODE_FAULTS = ("crash", "power_loss", "power_loss_all", "pause", "crash_in_step", "power_loss_in_step",
               "crash_in_snapshot")
IN_STEP_OPERATIONS_MAX = 24  # an armed crash hits one of the node's next this-many storage writes
# crash_in_snapshot: the crash hits one of the storage writes of the node's next snapshot (temp file,
# fsync, rename, directory fsync: 6) and of the journal compaction that follows it (6 more).
SNAPSHOT_OPERATIONS_MAX = 12
# Kinds that only some targets support: kind -> the FaultTarget method it needs.
OPTIONAL_TARGET_METHODS = {"crash_in_snapshot": "arm_crash_in_snapshot"}
OTHER_FAULTS = ("drop", "reset")
FAULT_KINDS = NODE_FAULTS + NETWORK_FAULTS + OTHER_FAULTS
DEFAULT_FAULTS = (
    "crash=0.01,power_loss=0.004,power_loss_all=0.001,pause=0.005,crash_in_step=0.01,power_loss_in_step=0.003,"
    "partition=0.01,one_way=0.005,isolate=0.005,isolate_leader=0.01,delay=0.01,drop=0.005,reset=0.01"
)


# Named fault profiles, accepted by `--faults NAME` (the replay command spells out their rates).
FAULT_PROFILES = {
    "default": DEFAULT_FAULTS,
    # Crashes inside snapshot dumps and the journal compactions after them, with slow links (a follower
    # learns of commits late), paused nodes (a lagging third node) and plain crashes (the leader goes):
    # what it takes for a follower that forgot acknowledged entries to matter (bug D of the Raft workload).
    "snapshot_crashes": "crash_in_snapshot=0.2,delay=0.1,pause=0.05,crash=0.05",
    # Nodes paused and nothing else: a paused process keeps its connections, so what waits on it waits until it
    # resumes, and the active controller is paused now and then (the shell bug wait_out_moved_controller).
    "pauses": "pause=0.03",
}


def parse_faults(text: str) -> dict[str, float]:
    """"kind=rate,...", a FAULT_PROFILES name, or "none", as {kind: rate} in FAULT_KINDS order; raises
    ValueError naming the bad part."""
    rates = {kind: 0.0 for kind in FAULT_KINDS}
    text = FAULT_PROFILES.get(text.strip(), text).strip()
    if text in ("", "none"):
        return rates
    for part in text.split(","):
        kind, separator, value = part.strip().partition("=")
        if not separator or kind not in rates:
            raise ValueError(f"fault {part!r}: expected kind=rate with kind one of {', '.join(FAULT_KINDS)}")
        try:
            rate = float(value)
        except ValueError:
            raise ValueError(f"fault {part!r}: rate {value!r} is not a number") from None
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"fault {part!r}: rate must be within [0, 1] (probability per {FAULT_STEP_MS} ms)")
        rates[kind] = rate
    return rates


def format_faults(rates: dict[str, float]) -> str:
    """The canonical text of `rates` (only non-zero kinds), accepted by `parse_faults`."""
    parts = [f"{kind}={rates[kind]:g}" for kind in FAULT_KINDS if rates.get(kind)]
    return ",".join(parts) if parts else "none"


class FaultTarget(Protocol):
    """What a simulated system offers the fault schedule."""

    node_ids: list[int]
    network: Network

    def is_up(self, node_id: int) -> bool: ...

    def crash(self, node_id: int) -> None: ...

    def power_loss(self, node_id: int) -> None: ...

    def restart(self, node_id: int) -> None: ...

    def pause(self, node_id: int) -> None: ...

    def arm_crash(self, node_id: int, operations: int, power_loss: bool) -> None:
        """Make the node die at its `operations`-th next storage write; it then calls `node_died`."""

    def resume(self, node_id: int) -> None: ...

    def leader_id(self) -> int | None: ...

    # Optional (see OPTIONAL_TARGET_METHODS):
    # def arm_crash_in_snapshot(self, node_id: int, operations: int) -> None:
    #     """Make the node crash at the `operations`-th storage write from the start of its next snapshot."""


class NodeFaultsMixin:
    """The FaultTarget methods every workload implements alike, over `processes` (node id -> a process with
    pause/resume and `paused`), `network`, `disks` (node id -> SimDisk) and the workload's own `_stop(node_id)`
    (the process taken out of `processes` and stopped, whatever else the workload forgets with it)."""

    def is_up(self, node_id: int) -> bool:
        return node_id in self.processes

    def is_running(self, node_id: int) -> bool:
        process = self.processes.get(node_id)
        return process is not None and not process.paused

    def crash(self, node_id: int) -> None:
        self._stop(node_id)
        self.disks[node_id].crash()

    def power_loss(self, node_id: int) -> None:
        self._stop(node_id)
        self.disks[node_id].power_loss()

    def pause(self, node_id: int) -> None:
        process = self.processes.get(node_id)
        if process is not None:
            process.pause()
            self.network.pause(node_id)

    def resume(self, node_id: int) -> None:
        process = self.processes.get(node_id)
        if process is not None:
            self.network.resume(node_id)
            process.resume()

    def arm_crash(self, node_id: int, operations: int, power_loss: bool) -> None:
        self.disks[node_id].arm_crash(operations, power_loss)


class FaultSchedule:
    """Starts and ends fault episodes on `target` from `rates` until `heal_all`."""

    def __init__(self, loop: EventLoop, target: FaultTarget, rates: dict[str, float]) -> None:
        """Raises ValueError when `rates` asks for a fault kind that `target` does not support."""
        for kind, method in OPTIONAL_TARGET_METHODS.items():
            if rates.get(kind) and not hasattr(target, method):
                raise ValueError(f"fault {kind} is not supported by this workload")
        self.loop = loop
        self.target = target
        self.rates = rates
        self.rng: random.Random = loop.derive_rng("faults")
        self.counts = {kind: 0 for kind in FAULT_KINDS}
        self._active = True
        # No new episode starts while set (the episodes in progress end as planned): a workload's own fault that
        # wants the system otherwise undisturbed (simulations/restarts_sim.py).
        self.suspended = False
        self._network_episode = False
        self._down: set[int] = set()  # nodes this schedule took down and will restart
        self._paused: set[int] = set()

    def start(self) -> None:
        if any(self.rates.values()):
            self.loop.call_later(FAULT_STEP_MS * US_PER_MS, self._step)

    def _step(self) -> None:
        if not self._active:
            return
        if not self.suspended:
            for kind in FAULT_KINDS:
                rate = self.rates[kind]
                if rate and self.rng.random() < rate:
                    getattr(self, f"_start_{kind}")()
        self.loop.call_later(FAULT_STEP_MS * US_PER_MS, self._step)

    def _episode_us(self) -> int:
        return self.rng.randint(EPISODE_MS_MIN, EPISODE_MS_MAX) * US_PER_MS

    def _record(self, kind: str, *fields: int | str) -> None:
        self.counts[kind] += 1
        self.loop.trace.append(self.loop.now_us, f"fault.{kind}", *fields)

    def _running_nodes(self) -> list[int]:
        return [n for n in self.target.node_ids if self.target.is_up(n) and n not in self._paused]

    # --- node faults ------------------------------------------------------------------------------------

    def _take_down(self, node_id: int, kind: str) -> None:
        if kind == "crash":
            self.target.crash(node_id)
        else:
            self.target.power_loss(node_id)
        self._down.add(node_id)
        delay_us = self.rng.randint(RESTART_DELAY_MS_MIN, RESTART_DELAY_MS_MAX) * US_PER_MS
        self.loop.call_later(delay_us, self._restart, node_id)

    def node_died(self, node_id: int) -> None:
        """A node died on its own (an armed crash point, a node error): restart it after a while."""
        self._paused.discard(node_id)
        if self._active:
            self._down.add(node_id)
            delay_us = self.rng.randint(RESTART_DELAY_MS_MIN, RESTART_DELAY_MS_MAX) * US_PER_MS
            self.loop.call_later(delay_us, self._restart, node_id)

    def _start_crash_in_step(self) -> None:
        self._arm("crash_in_step", power_loss=False)

    def _start_power_loss_in_step(self) -> None:
        self._arm("power_loss_in_step", power_loss=True)

    def _arm(self, kind: str, power_loss: bool) -> None:
        candidates = self._running_nodes()
        if candidates:
            node_id = self.rng.choice(candidates)
            operations = self.rng.randint(1, IN_STEP_OPERATIONS_MAX)
            self._record(kind, node_id, operations)
            self.target.arm_crash(node_id, operations, power_loss)

    def _start_crash_in_snapshot(self) -> None:
        candidates = self._running_nodes()
        if candidates:
            node_id = self.rng.choice(candidates)
            operations = self.rng.randint(1, SNAPSHOT_OPERATIONS_MAX)
            self._record("crash_in_snapshot", node_id, operations)
            self.target.arm_crash_in_snapshot(node_id, operations)  # type: ignore[attr-defined]

    def _restart(self, node_id: int) -> None:
        if node_id in self._down and self._active:
            self._down.discard(node_id)
            self.loop.trace.append(self.loop.now_us, "fault.restart", node_id)
            self.target.restart(node_id)

    def _start_crash(self) -> None:
        candidates = self._running_nodes()
        if candidates:
            node_id = self.rng.choice(candidates)
            self._record("crash", node_id)
            self._take_down(node_id, "crash")

    def _start_power_loss(self) -> None:
        candidates = self._running_nodes()
        if candidates:
            node_id = self.rng.choice(candidates)
            self._record("power_loss", node_id)
            self._take_down(node_id, "power_loss")

    def _start_power_loss_all(self) -> None:
        self._record("power_loss_all")
        for node_id in self.target.node_ids:
            if node_id in self._paused:
                self._paused.discard(node_id)
                self.target.resume(node_id)
            if self.target.is_up(node_id):
                self._take_down(node_id, "power_loss")

    def _start_pause(self) -> None:
        candidates = self._running_nodes()
        if candidates:
            node_id = self.rng.choice(candidates)
            self._record("pause", node_id)
            self._paused.add(node_id)
            self.target.pause(node_id)
            self.loop.call_later(self._episode_us(), self._resume, node_id)

    def _resume(self, node_id: int) -> None:
        if node_id in self._paused:
            self._paused.discard(node_id)
            self.loop.trace.append(self.loop.now_us, "fault.resume", node_id)
            self.target.resume(node_id)

    # --- network faults ---------------------------------------------------------------------------------

    def _begin_network_episode(self) -> bool:
        if self._network_episode:
            return False
        self._network_episode = True
        self.loop.call_later(self._episode_us(), self._end_network_episode)
        return True

    def _end_network_episode(self) -> None:
        if self._network_episode:
            self._network_episode = False
            self.target.network.heal()

    def _start_partition(self) -> None:
        nodes = list(self.target.node_ids)
        if len(nodes) < 2 or not self._begin_network_episode():
            return
        self.rng.shuffle(nodes)
        side = sorted(nodes[: self.rng.randint(1, len(nodes) - 1)])
        self._record("partition", ",".join(str(n) for n in side))
        self.target.network.partition(side)

    def _start_one_way(self) -> None:
        nodes = self.target.node_ids
        if len(nodes) < 2 or not self._begin_network_episode():
            return
        src, dst = self.rng.sample(nodes, 2)
        self._record("one_way", src, dst)
        self.target.network.block(src, dst)

    def _start_isolate(self) -> None:
        if not self._begin_network_episode():
            return
        node_id = self.rng.choice(self.target.node_ids)
        self._record("isolate", node_id)
        self.target.network.isolate(node_id)

    def _start_isolate_leader(self) -> None:
        leader_id = self.target.leader_id()
        if leader_id is None or not self._begin_network_episode():
            return
        self._record("isolate_leader", leader_id)
        self.target.network.isolate(leader_id)

    def _start_delay(self) -> None:
        nodes = self.target.node_ids
        if len(nodes) < 2 or not self._begin_network_episode():
            return
        src, dst = self.rng.sample(nodes, 2)
        extra_us = self.rng.randint(1, SLOW_LINK_EXTRA_MS_MAX) * US_PER_MS
        self._record("delay", src, dst, extra_us)
        self.target.network.slow(src, dst, extra_us)

    def _start_drop(self) -> None:
        if self.target.network.config.drop_probability:
            return
        self._record("drop")
        self.target.network.set_drop_probability(DROP_EPISODE_PROBABILITY)
        self.loop.call_later(self._episode_us(), self.target.network.set_drop_probability, 0.0)

    def _start_reset(self) -> None:
        nodes = self.target.node_ids
        if len(nodes) < 2:
            return
        a, b = sorted(self.rng.sample(nodes, 2))
        self._record("reset", a, b)
        self.target.network.reset(a, b)

    # --- end --------------------------------------------------------------------------------------------

    def heal_all(self) -> None:
        """End the fault phase: heal the network, stop drops, resume paused and restart downed nodes."""
        self._active = False
        self.loop.trace.append(self.loop.now_us, "fault.heal_all")
        self._network_episode = False
        self.target.network.heal()
        if self.target.network.config.drop_probability:
            self.target.network.set_drop_probability(0.0)
        for node_id in sorted(self._paused):
            self.target.resume(node_id)
        self._paused.clear()
        for node_id in self.target.node_ids:
            if not self.target.is_up(node_id):
                self.target.restart(node_id)
        self._down.clear()
