"""The restarts workload: the cluster workload while an operator now and then stops the whole cluster cleanly and
starts it again.

Theory of operation. Everything of the cluster workload (simulations/cluster_sim.py: producers, a consumer,
every node and network fault) runs as it does there, with or without faults. Every `STOP_GAP_MS_MIN`-`MAX`, once
every node's broker runs, the operator stops the cluster as one stops a service on each host in turn: the nodes
in a random order, each sent to a controlled shutdown once the one before has exited (broker/core.py
`request_controlled_shutdown`). The first nodes' shutdowns are granted and committed; the last one's cannot be,
as no quorum is left when it asks, so it leaves with its registration active, and only its clean shutdown file
(KIP-966's, `broker-clean-shutdown.json`) says that process has ended. `RESTART_DELAY_MS_MIN`-`MAX` after the
last node exited, every node starts again. Half of the stops, drawn per stop, are quiet: they wait for the
faults in progress to end, and no new one starts until every broker runs again (`FaultSchedule.suspended`). In
the others the faults go on: a node crashed while the stop goes on is skipped (the fault schedule restarts it),
and a node the stop is waiting for that crashes moves it on.

Checker `clean_restart_registers_at_once`: in a stop and restart that no other fault touched (no fault of the
schedule or of the cluster workload from the first stop until every node runs again, no link impaired, each
node started exactly once), no node's new process is refused DUPLICATE_BROKER_REGISTRATION: its registration
replaces the one its data directory says ended cleanly, instead of waiting out that process's session
(`broker_session_timeout_ms`) as Kafka's controller does for a registration it cannot tell from a live one.
Every checker of the cluster workload applies as well: no acknowledged write lost across the stop, every
replica converged after it.

Planted bug: `--bugs clean_shutdown_epoch_ignored` (the controller does not read a registration's
previous_broker_epoch, as before the clean shutdown file: the last node waits out its old session).
"""

from __future__ import annotations

from typing import Any

from broker.core import BrokerState
from simulations import cluster_sim
from simulations.cluster_checkers import ClusterCheckers
from simulations.cluster_sim import ClusterSimulation
from simulations.loop import US_PER_MS
from simulations.run import RunConfig, RunResult

DESCRIPTION = "the cluster workload while the whole cluster is stopped cleanly, node after node, and started again"
STOP_GAP_MS_MIN, STOP_GAP_MS_MAX = 6_000, 15_000  # from the start of the run or the end of the last stop
RESTART_DELAY_MS_MIN, RESTART_DELAY_MS_MAX = 100, 1_500  # after the last node exited (within its session)
WATCH_MS = 50  # how often the operator looks at the node it waits for, and at the restarted nodes
# A quiet stop: no new fault starts from the decision to stop until every node runs again (the episodes in
# progress end first); the others go on among the faults.
QUIET_SHARE = 0.5
RUNNING_WAIT_MS_MAX = 30_000  # a restart whose nodes do not all run by then is judged by liveness, not here
RESTART_CHECKER_NAMES = ("clean_restart_registers_at_once",)
RESTART_BUGS = {"clean_shutdown_epoch_ignored": "bug_previous_broker_epoch_ignored"}


class RestartCheckers(ClusterCheckers):
    """The cluster workload's checkers plus clean_restart_registers_at_once (see the module docstring)."""

    extra_checker_names = (*ClusterCheckers.extra_checker_names, *RESTART_CHECKER_NAMES)


class RestartSimulation(ClusterSimulation):
    """The cluster simulation with whole-cluster clean stops and restarts (see the module docstring)."""

    checkers_class = RestartCheckers
    extra_bugs = RESTART_BUGS
    idle_phase_ms = 0  # the cluster workload covers the idle phase

    def __init__(self, config: RunConfig, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self._stop_rng = self.loop.derive_rng("cluster-stop")
        self._stopping: list[int] = []  # the nodes of the stop in progress still to stop, in order
        self._waiting_for: int | None = None  # the node whose controlled shutdown the stop waits for
        self._held: set[int] = set()  # nodes the stop took down, started again at its end
        self._undisturbed: tuple[int, dict[int, int]] | None = None  # (fault count, incarnations) at its start
        self.stops = 0
        self._restarted_us = 0
        self.running_after_ms: list[int] = []  # per restart: from the start until every broker ran (to WATCH_MS)
        self.restarts_judged = 0

    def configure_node(self, state: Any) -> None:
        super().configure_node(state)
        if "clean_shutdown_epoch_ignored" in self.workload_bugs and state.controller is not None:
            state.controller.bug_previous_broker_epoch_ignored = True

    def _start_clients(self) -> None:
        super()._start_clients()
        self._plan_next_stop()  # with or without faults: the operator is the workload

    def _plan_next_stop(self) -> None:
        self.loop.call_later(self._stop_rng.randint(STOP_GAP_MS_MIN, STOP_GAP_MS_MAX) * US_PER_MS, self._begin_stop)

    # --- the stop ---------------------------------------------------------------------------------------

    def _begin_stop(self, quiet: bool | None = None) -> None:
        if not self._fault_phase:
            return
        if quiet is None:
            quiet = self._stop_rng.random() < QUIET_SHARE
            self.faults.suspended = quiet
        if not self._all_serving() or (quiet and self.network.links_impaired):
            # after a node that is down is back and serves (and, for a quiet stop, the faults in progress ended)
            self.loop.call_later(WATCH_MS * US_PER_MS, self._begin_stop, quiet)
            return
        order = list(self.node_ids)
        self._stop_rng.shuffle(order)
        self.stops += 1
        self.trace("fault.cluster_stop", ",".join(map(str, order)), int(quiet))
        undisturbed = not self.network.links_impaired
        self._undisturbed = (self.fault_count(), dict(self._incarnations)) if undisturbed else None
        self._stopping = order
        self._stop_next()

    def _all_serving(self) -> bool:
        """Every node runs and its broker is RUNNING (registered by this process, unfenced): what an operator
        stops is a cluster that serves."""
        for node_id in self.node_ids:
            process = self.processes.get(node_id)
            if process is None or process.paused or process.stopping or \
                    process.broker.state != BrokerState.RUNNING:
                return False
        return True

    def _stop_next(self) -> None:
        while self._stopping:
            node_id = self._stopping.pop(0)
            process = self.processes.get(node_id)
            if process is None or process.paused or process.stopping:
                continue  # down or paused by a fault: the schedule brings it back
            self._waiting_for = node_id
            process.begin_controlled_shutdown()
            self.loop.call_later(WATCH_MS * US_PER_MS, self._watch_stopping, process)
            return
        self._waiting_for = None
        delay_ms = self._stop_rng.randint(RESTART_DELAY_MS_MIN, RESTART_DELAY_MS_MAX)
        self.loop.call_later(delay_ms * US_PER_MS, self._restart_held)

    def _watch_stopping(self, process: Any) -> None:
        """The node being stopped crashed (its controlled shutdown died with it): on to the next."""
        if self._waiting_for != process.node_id:
            return
        if self.processes.get(process.node_id) is process:
            self.loop.call_later(WATCH_MS * US_PER_MS, self._watch_stopping, process)
            return
        self._undisturbed = None
        self._stop_next()

    def _stopped_cleanly(self, node_id: int) -> None:
        if node_id == self._waiting_for and not self._fault_phase:  # healed meanwhile: no stop is going on
            self._waiting_for = None
        if node_id != self._waiting_for:
            super()._stopped_cleanly(node_id)  # the cluster workload's own controlled shutdown fault
            return
        self._held.add(node_id)
        self._extra_down.add(node_id)  # started again by the heal if the fault phase ends first
        self._stop_next()

    def _heal_everything(self) -> None:
        self._stopping = []  # the nodes not yet stopped stay up; one being stopped ends its stop, then starts
        super()._heal_everything()

    def _restart_held(self) -> None:
        held, self._held = sorted(self._held), set()
        if not self._fault_phase:
            return  # the heal started them
        self.trace("fault.cluster_start", ",".join(map(str, held)))
        for node_id in held:
            self._extra_down.discard(node_id)
            self.restart(node_id)
        self._restarted_us = self.loop.now_us
        deadline_us = self.loop.now_us + RUNNING_WAIT_MS_MAX * US_PER_MS
        self.loop.call_later(WATCH_MS * US_PER_MS, self._watch_restart, held, deadline_us)

    # --- the restart ------------------------------------------------------------------------------------

    def _watch_restart(self, held: list[int], deadline_us: int) -> None:
        running = self._all_serving()
        if not running and self.loop.now_us < deadline_us and self._fault_phase:
            self.loop.call_later(WATCH_MS * US_PER_MS, self._watch_restart, held, deadline_us)
            return
        if running:
            self.running_after_ms.append((self.loop.now_us - self._restarted_us) // US_PER_MS)
            self.trace("cluster.running", self.running_after_ms[-1])
            self._judge_restart(held)
        self._undisturbed = None
        self.faults.suspended = False
        if self._fault_phase:
            self._plan_next_stop()

    def _judge_restart(self, held: list[int]) -> None:
        if self._undisturbed is None or self.network.links_impaired:
            return
        fault_count, incarnations = self._undisturbed
        started_once = all(self._incarnations[n] == incarnations[n] + (n in held) for n in self.node_ids)
        if self.fault_count() != fault_count or not started_once or len(held) != len(self.node_ids):
            return
        self.restarts_judged += 1
        for node_id in held:
            refused = self.processes[node_id].broker.registrations_refused["DUPLICATE_BROKER_REGISTRATION"]
            if refused:
                self.checkers.violate(
                    "clean_restart_registers_at_once",
                    f"node {node_id} was refused DUPLICATE_BROKER_REGISTRATION {refused} time(s) at "
                    f"{self.loop.now_ms} ms after a whole-cluster clean stop no other fault touched")

    def _result(self) -> RunResult:
        result = super()._result()
        result.stats["cluster_stops"] = self.stops
        result.stats["restarts_judged"] = self.restarts_judged
        result.stats["running_after_ms_max"] = max(self.running_after_ms, default=0)
        return result


def run(config: RunConfig) -> RunResult:
    """One restarts simulation of `config` (see the module docstring). Raises ValueError for an unknown bug."""
    return cluster_sim.run(config, simulation_class=RestartSimulation)
