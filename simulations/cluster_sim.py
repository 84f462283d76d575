"""The whole-cluster simulation: N broker+controller nodes built from the real cores, Kafka clients, faults,
and safety and liveness checkers.

Theory of operation. Each node process is a `broker.node_state.NodeState` (Raft driver over pysyncobj,
controller, metadata publishing, BrokerCore, KafkaApis) over the node's `SimDisk`, driven exactly as the trio
runtime (net/node.py + raftlog/shell.py) drives it, with virtual time:
- after every Raft input (tick, message, connect, disconnect) the outbox ships, then `step(now)` runs and its
  output is delivered (controller outcomes, deferred Kafka responses, controller calls); `step` also runs
  every `STEP_INTERVAL_MS`;
- Kafka requests (client ones and replica fetches) travel as real codec frames and are answered by
  `KafkaApis.handle` at once, not at all (acks=0) or later (`Deferred`, delivered from `kafka_completions`);
- a replica fetcher per leader sends what `BrokerCore.next_replica_request` builds, one request at a time;
- controller calls are carried by broker/controller_calls.py, as on the real node: to the node this node
  believes leads the quorum, locally through `submit_controller_request`, remotely as a CBOR RPC that the
  leader submits locally; NOT_CONTROLLER and lost connections retry after `CONTROLLER_RETRY_BACKOFF_MS` until
  `CONTROLLER_CALL_TIMEOUT_MS`.
One stream between two nodes carries all of that, each message tagged with a channel byte; a reset fails
everything outstanding on it, as a broken TCP connection would.

Faults: the shared `FaultSchedule` (crash, power loss, pause, crash points inside a step, partitions,
one-way partitions, isolating the quorum leader, delay, drop, reset), plus this workload's own:
isolating a partition leader, a controlled shutdown followed by a restart, and a flipped byte on reads of
partition logs while they are served to a fetch (a CRC must catch it: the follower's append or the consumer
refuses the batch). A crash drops the NodeState and keeps the disk's page cache; a power loss keeps what was
fsynced; a restart builds a new NodeState over the same disk.

A run: create the topic, produce and consume for `duration_s` simulated seconds under faults (the safety
phase), then heal everything, stop generating records and require, within `LIVENESS_MS_MAX`, that every
producer settles, every replica of every partition converges (same log end offset, high watermark at it) and
the consumer has read up to it (the liveness phase). Then the converged logs are compared with what was
acknowledged and read (see simulations/cluster_checkers.py). This workload then stays idle for `IDLE_PHASE_MS`
(the other workloads skip it, `idle_phase_ms`): followers whose fetch sessions have nothing to say are parked
by the leaders without a walk over their partitions (broker/handlers_data.py), and every replica must keep its
place in every ISR throughout (`idle_isr_stable`).

Bug switches (never a node's config): pysyncobj fixes "A", "B", "D", "E", "H", "I", "J", "K" off (RaftDriver
bug_switches) and the planted broker bugs "hw_from_leader_leo", "truncate_to_own_hw" and "quiet_session_never_ages"
(the last caught by the idle phase).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterator


from broker.config import ClusterConfig, parse_config
from partitions.batch import BatchHeader, iter_batches
from partitions.records import decode_batch
from raftlog.patches import BUG_NAMES as RAFT_BUGS
from raftlog.port import RaftConfig
from simulations.cluster_checkers import BatchSummary, ClusterCheckers, ReplicaLog
from simulations.disk import SimDisk, SimulatedCrash
from simulations.faults import FaultSchedule, NodeFaultsMixin
from simulations.kafka_clients import (
    CLIENT_ID_BASE,
    SimConsumer,
    SimProducer,
    TopicCreator,
)
from simulations.loop import US_PER_MS, US_PER_S, EventLoop, Trace
from simulations.network import Network, NetworkConfig
from simulations.node_process import (
    BROKER_BUGS,
    NODE_BUGS,
    NodeProcess,
    ServingReadCorruption,
    _describe,
    _NodeDied,
)
from simulations.run import CheckerVerdict, RunConfig, RunResult

DESCRIPTION = "the whole cluster (NodeState cores) with Kafka producers (acks=all, acks=1) and a consumer"
TOPIC = "sim"
PARTITIONS = 3
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2
LIVENESS_MS_MAX = 60_000
IDLE_PHASE_MS = 10_000  # > 3x the workload's replica.lag.time.max.ms
RESUME_MS = 2_000  # records again after the idle spell
RESUME_EXTRA_LATENCY_MS = 300  # on every link meanwhile (the workload's replica.lag.time.max.ms is 3,000)
LIVENESS_CHECK_INTERVAL_MS = 100
# live_brokers_kept: a broker fenced within its session and this of a fault touching it (or the network) is
# explained by that fault (a heartbeat cut short, a session that ran out across it).
FENCE_EXPLAINED_MARGIN_MS = 1_000
FINAL_READ_BYTES_MAX = 64 * 1024 * 1024
# This workload's own faults (probability per FAULT_STEP of 100 ms), on whenever the run has any faults.
EXTRA_FAULT_STEP_MS = 100
ISOLATE_PARTITION_LEADER_RATE = 0.01
CONTROLLED_SHUTDOWN_RATE = 0.004
EXTRA_EPISODE_MS_MIN = 200
EXTRA_EPISODE_MS_MAX = 5_000
# Swarm testing: each seed draws its shape from these.
RECORDS_PER_S_CHOICES = (50, 200, 500)
READ_CORRUPTION_CHOICES = (0.0, 0.0, 0.002, 0.02)  # per read while serving a fetch



def simulation_raft_config() -> RaftConfig:
    return RaftConfig(election_timeout_min_ms=300, election_timeout_max_ms=600, heartbeat_interval_ms=50,
                      leader_fallback_timeout_ms=1_000, log_compaction_interval_ms=10_000,
                      log_compaction_entries_min=500)


def cluster_config(node_ids: list[int], broker_extra: dict | None = None,
                   observer_ids: tuple[int, ...] = (), racks: bool = False,
                   security: dict | None = None, metrics_ports: bool = False) -> ClusterConfig:
    """The cluster every node runs: nodes broker+controller, `observer_ids` broker-only (KRaft observers);
    hosts and ports are labels only. `broker_extra` adds [broker] settings (a workload's coordinator settings);
    with `racks` node n is in rack "rack-n"; `security` is a [security] table (the authorizer's settings); with
    `metrics_ports` every node has a metrics port (none is served: it switches client telemetry on)."""
    document = {
        "cluster_id": "sim-cluster",
        "nodes": [{"id": n, "host": f"node-{n}", "kafka_port": 9000 + n, "controller_port": 9100 + n,
                   "roles": ["broker", "controller"], "data_dir": f"node-{n}"} for n in node_ids
                  if n not in observer_ids] + [
                  {"id": n, "host": f"node-{n}", "kafka_port": 9000 + n, "roles": ["broker"], "data_dir": f"node-{n}"}
                  for n in observer_ids],
        "topic_defaults": {"partitions": PARTITIONS, "replication_factor": min(REPLICATION_FACTOR, len(node_ids)),
                           "min_insync_replicas": min(MIN_INSYNC_REPLICAS, len(node_ids))},
        "broker": {"broker_session_timeout_ms": 3_000, "broker_heartbeat_interval_ms": 500,
                   "replica_lag_time_max_ms": 3_000, "log_flush_messages": 1, **(broker_extra or {})},
    }
    if security:
        document["security"] = security
    if racks:
        for node in document["nodes"]:
            node["rack"] = f"rack-{node['id']}"
    if metrics_ports:
        for node in document["nodes"]:
            node["metrics_port"] = 9200 + node["id"]
    return parse_config(document, "<simulation>", "/")


@dataclass(frozen=True)
class ClusterShape:
    """The per-seed shape of the workload."""

    records_per_s: int
    keyed: bool
    read_corruption_probability: float
    producers: int = 2  # the first produces with acks=all, the second with acks=1


class ClusterSimulation(NodeFaultsMixin):
    """The cluster, its disks, network, clients and faults for one seed. Also the FaultTarget.

    Other workloads extend it (simulations/groups_sim.py): `checkers_class`, `extra_bugs` (name -> what the
    workload switches on in `configure_node`), `broker_settings_extra`, and the hooks `_build_clients`,
    `_start_clients`, `_final_checks`, `_heal_everything`, `_lagging` and `_result`."""

    checkers_class = ClusterCheckers
    extra_bugs: dict[str, str] = {}
    broker_settings_extra: dict[str, int] = {}
    security_settings_extra: dict[str, Any] = {}  # a [security] table for the nodes (the acls workload's authorizer)
    replication_factor = REPLICATION_FACTOR  # of the workload's topic (capped at the number of nodes)
    idle_phase_ms = IDLE_PHASE_MS  # after the final checks; 0: none (the other workloads)
    observers = 0  # broker-only nodes after the `--nodes` broker+controller ones
    racks = False  # node n in rack "rack-n" (cluster_config)
    metrics_ports = False  # a metrics port per node: client telemetry served (cluster_config)

    def __init__(self, config: RunConfig, trace: Trace, shape: ClusterShape | None = None) -> None:
        self.config = config
        self.loop = EventLoop(config.seed, trace)
        self.node_ids = list(range(1, config.nodes + self.observers + 1))
        self.observer_ids = tuple(self.node_ids[config.nodes:])
        unknown = (set(config.bugs_live) - set(BROKER_BUGS) - set(NODE_BUGS) - set(self.extra_bugs)
                   - set(RAFT_BUGS))
        if unknown:
            raise ValueError(f"unknown bug switches {sorted(unknown)}: expected {', '.join(sorted(RAFT_BUGS))}, "
                             f"{', '.join(sorted([*BROKER_BUGS, *NODE_BUGS, *self.extra_bugs]))}")
        self.broker_bugs = frozenset(config.bugs_live) & frozenset(BROKER_BUGS)
        self.node_bugs = frozenset(config.bugs_live) & frozenset(NODE_BUGS)
        self.workload_bugs = frozenset(config.bugs_live) & frozenset(self.extra_bugs)
        self.raft_bugs = frozenset(config.bugs_live) - self.broker_bugs - self.node_bugs - self.workload_bugs
        faults_on = any(config.fault_rates().values())
        if shape is None:
            swarm = self.loop.derive_rng("swarm")
            shape = ClusterShape(
                records_per_s=swarm.choice(RECORDS_PER_S_CHOICES),
                keyed=swarm.random() < 0.5,
                read_corruption_probability=swarm.choice(READ_CORRUPTION_CHOICES) if faults_on else 0.0,
            )
        self.shape = shape
        self.trace("swarm", shape.records_per_s, int(shape.keyed), f"{shape.read_corruption_probability:g}",
                   ",".join(sorted(config.bugs_live)) or "-")
        self.cluster = cluster_config(self.node_ids, self.broker_settings_extra, self.observer_ids, self.racks,
                                      self.security_settings_extra, self.metrics_ports)
        self.raft_config = simulation_raft_config()
        self.network = Network(self.loop, NetworkConfig())
        self.disks = {n: SimDisk(self.loop.derive_rng(f"disk-{n}")) for n in self.node_ids}
        self.storages = {n: ServingReadCorruption(self.disks[n], self.loop.derive_rng(f"read-corruption-{n}"),
                                                  shape.read_corruption_probability) for n in self.node_ids}
        self.checkers = self.checkers_class()
        self.checkers.unexplained_fence = self._unexplained_fence
        self.node_errors: list[str] = []
        self.processes: dict[int, NodeProcess] = {}
        self._incarnations = {n: 0 for n in self.node_ids}
        self._extra_down: set[int] = set()
        self.extra_fault_counts = {"isolate_partition_leader": 0, "controlled_shutdown": 0}
        for node_id in self.node_ids:
            self.network.add_node(node_id)
            self._provision(self.disks[node_id])
        self._build_clients()
        self.faults = FaultSchedule(self.loop, self, config.fault_rates())
        self._extra_rng = self.loop.derive_rng("cluster-faults")
        self._faults_on = faults_on
        self._fault_phase = True
        self.timeline = None
        if config.html_path is not None:
            from simulations.picture import Timeline

            self.timeline = Timeline(self.node_ids, TOPIC, PARTITIONS)
            self.loop.trace.listeners.append(self.timeline.on_trace)
            self.loop.observer = lambda now_us: self.timeline.observe(now_us, self)

    def _build_clients(self) -> None:
        replication_factor = min(self.replication_factor, len(self.node_ids))
        configs = {"min.insync.replicas": str(min(MIN_INSYNC_REPLICAS, replication_factor)), "flush.messages": "1"}
        self.admin = TopicCreator(self, CLIENT_ID_BASE, TOPIC, PARTITIONS, replication_factor, configs)
        self.producers = self._make_producers()
        self.consumer = SimConsumer(self, CLIENT_ID_BASE + 9, "reader", TOPIC, PARTITIONS, self.checkers.observe_consumed)
        self.clients = [self.admin, *self.producers, self.consumer]

    def _make_producers(self) -> list[SimProducer]:
        """The workload's producers: acks=all (its acknowledgements checked) and acks=1, `shape.producers` of them."""
        return [
            SimProducer(self, CLIENT_ID_BASE + 1, "all", TOPIC, PARTITIONS, -1, self.shape.keyed,
                        self.shape.records_per_s, self.checkers.observe_ack),
            SimProducer(self, CLIENT_ID_BASE + 2, "one", TOPIC, PARTITIONS, 1, not self.shape.keyed,
                        self.shape.records_per_s, lambda key, offset, value: None),
        ][: self.shape.producers]

    def configure_node(self, state: Any) -> None:
        """Switch on this workload's planted bugs in a new node process's state (none here)."""

    @staticmethod
    def _provision(disk: SimDisk) -> None:
        """The node's top-level data directories exist durably before its first start, as an installed
        node's would. Directories the node creates itself (a partition's log directory) are not provisioned:
        whether they survive a power loss is the node's business."""
        disk.makedirs("metadata")
        disk.makedirs("logs")
        disk.fsync_dir("")

    def trace(self, kind: str, *fields: int | str) -> None:
        self.loop.trace.append(self.loop.now_us, kind, *fields)

    def _unexplained_fence(self, broker_id: int, broker_epoch: int) -> str | None:
        """For live_brokers_kept: why fencing `broker_id` at `broker_epoch` now is not explained by a fault (None:
        it is, or that registration is not the running process's)."""
        process = self.processes.get(broker_id)
        if (process is None or not process.alive or process.paused or process.stopping
                or process.broker.broker_epoch != broker_epoch):
            return None
        if self.network.links_impaired:
            return None
        session_ms = self.cluster.broker.broker_session_timeout_ms
        quiet_ms = (self.loop.now_us - self.network.last_disturbed_us.get(broker_id, 0)) // US_PER_MS
        if quiet_ms <= session_ms + FENCE_EXPLAINED_MARGIN_MS:
            return None
        return f"its node runs and no fault touched it or the network for {quiet_ms} ms (session {session_ms} ms)"

    # --- FaultTarget ------------------------------------------------------------------------------------

    def _stop(self, node_id: int) -> NodeProcess | None:
        process = self.processes.pop(node_id, None)
        if process is not None:
            process.stop()
            self.network.node_down(node_id)
        return process

    def restart(self, node_id: int) -> None:
        if node_id in self.processes:
            return
        self._extra_down.discard(node_id)
        self._incarnations[node_id] += 1
        self.trace("node.start", node_id, self._incarnations[node_id])
        try:
            process = NodeProcess(self, node_id, self._incarnations[node_id])
        except SimulatedCrash:
            self.trace("node.died_mid_step", node_id)
            self.faults.node_died(node_id)
            return
        except Exception as error:  # a journal, snapshot or log the node cannot start from
            self.node_errors.append(f"node {node_id} at {self.loop.now_ms} ms: restart failed: {_describe(error)}")
            self.trace("node.error", node_id)
            return
        self.processes[node_id] = process
        self.network.node_up(node_id, process)
        process.start()

    def died_mid_step(self, node_id: int, process: NodeProcess) -> None:
        """An armed crash point fired inside a step: the disk already crashed or lost power."""
        if self.processes.get(node_id) is not process:
            return
        self.trace("node.died_mid_step", node_id)
        self._stop(node_id)
        self.faults.node_died(node_id)

    def node_error(self, node_id: int, process: NodeProcess, detail: str) -> None:
        if self.processes.get(node_id) is not process:
            return
        self.node_errors.append(f"node {node_id} at {self.loop.now_ms} ms: {detail}")
        self.trace("node.error", node_id)
        self.crash(node_id)
        self.faults.node_died(node_id)

    def leader_id(self) -> int | None:
        for node_id in self.node_ids:
            process = self.processes.get(node_id)
            if process is not None and not process.paused and process.alive and process.raft is not None \
                    and process.raft.status().is_leader:
                return node_id
        return None

    def stop_cleanly(self, node_id: int, process: NodeProcess) -> None:
        """The end of a controlled shutdown: close the state (checkpoint, flush) and take the node down."""
        if self.processes.get(node_id) is not process:
            return
        try:
            process.close()
        except _NodeDied:
            return
        self._stop(node_id)
        self.disks[node_id].crash()  # the process is gone; its handles with it (nothing is lost)
        self._stopped_cleanly(node_id)

    def _stopped_cleanly(self, node_id: int) -> None:
        """After a controlled shutdown's clean stop: the node starts again after an episode (the restarts
        workload holds the nodes of a whole-cluster stop down instead)."""
        self._restart_later(node_id)

    # --- this workload's own faults ---------------------------------------------------------------------

    def fault_count(self) -> int:
        """Faults started so far: the schedule's and this workload's own."""
        return sum(self.faults.counts.values()) + sum(self.extra_fault_counts.values())

    def _extra_fault_step(self) -> None:
        if not self._fault_phase:
            return
        rng = self._extra_rng
        if not self.faults.suspended:
            if rng.random() < ISOLATE_PARTITION_LEADER_RATE:
                self._isolate_partition_leader()
            if rng.random() < CONTROLLED_SHUTDOWN_RATE:
                self._controlled_shutdown()
        self.loop.call_later(EXTRA_FAULT_STEP_MS * US_PER_MS, self._extra_fault_step)

    def _partition_leaders(self) -> list[int]:
        leaders: set[int] = set()
        for process in self.processes.values():
            for hosted in process.broker.partitions.values():
                if hosted.replica.is_leader:
                    leaders.add(process.node_id)
        return sorted(leaders)

    def _isolate_partition_leader(self) -> None:
        leaders = self._partition_leaders()
        if not leaders:
            return
        node_id = self._extra_rng.choice(leaders)
        self.extra_fault_counts["isolate_partition_leader"] += 1
        self.trace("fault.isolate_partition_leader", node_id)
        self.network.isolate(node_id)
        episode_us = self._extra_rng.randint(EXTRA_EPISODE_MS_MIN, EXTRA_EPISODE_MS_MAX) * US_PER_MS
        self.loop.call_later(episode_us, self._heal_if_fault_phase)

    def _heal_if_fault_phase(self) -> None:
        if self._fault_phase:
            self.network.heal()

    def _controlled_shutdown(self) -> None:
        candidates = [n for n in self.node_ids if self.is_running(n) and not self.processes[n].stopping]
        if len(candidates) < len(self.node_ids):
            return  # one node down at a time for this fault: the others keep a quorum
        node_id = self._extra_rng.choice(candidates)
        self.extra_fault_counts["controlled_shutdown"] += 1
        self.trace("fault.controlled_shutdown", node_id)
        self.processes[node_id].begin_controlled_shutdown()

    def _restart_later(self, node_id: int) -> None:
        self._extra_down.add(node_id)
        delay_us = self._extra_rng.randint(EXTRA_EPISODE_MS_MIN, EXTRA_EPISODE_MS_MAX) * US_PER_MS
        self.loop.call_later(delay_us, self._restart_if_down, node_id)

    def _restart_if_down(self, node_id: int) -> None:
        if node_id in self._extra_down and node_id not in self.processes:
            self.restart(node_id)

    # --- the run ----------------------------------------------------------------------------------------

    def run(self) -> RunResult:
        for client in self.clients:
            self.network.add_node(client.client_id)
            self.network.node_up(client.client_id, client)
        for node_id in self.node_ids:
            self.restart(node_id)
        self._start_clients()
        self.faults.start()
        if self._faults_on:
            self.loop.call_later(EXTRA_FAULT_STEP_MS * US_PER_MS, self._extra_fault_step)
        fault_phase_us = int(self.config.duration_s * US_PER_S)
        self.loop.run_until(fault_phase_us)
        self._heal_everything()
        self._check_liveness(fault_phase_us)
        self.idle_isr_detail: str | None = None
        if self.checkers.liveness_ok:
            self._final_checks()
            if self.idle_phase_ms:
                self._check_idle()
        for client in self.clients:
            client.running = False
        result = self._result()
        if self.timeline is not None:
            self.timeline.observe(self.loop.now_us, self)
            title = f"flotilla simulate --seed {self.config.seed} --workload {self.config.workload}" + (
                f" --bugs {','.join(sorted(self.config.bugs_live))}" if self.config.bugs_live else "")
            self.timeline.write_html(self.config.html_path, title, result.checkers, self.loop.now_us // 1000)
        return result

    def _start_clients(self) -> None:
        self.admin.start()
        for client in (*self.producers, self.consumer):
            client.start()

    def _final_checks(self) -> None:
        self.checkers.check_final_logs(self._final_logs())

    def _heal_everything(self) -> None:
        self._fault_phase = False
        self.faults.heal_all()
        for disk in self.disks.values():
            disk.disarm_crash()
        for node_id in sorted(self._extra_down):
            if node_id not in self.processes:
                self.restart(node_id)
        self._extra_down.clear()
        for producer in self.producers:
            producer.generating = False

    def _result(self) -> RunResult:
        stats: dict[str, int | float | str] = {
            "events": self.loop.events_processed,
            "messages": self.network.messages_delivered,
            "faults": self.fault_count(),
            "records_per_s": self.shape.records_per_s,
            "consumed": self.consumer.stats.records,
            "corrupt_batches_refused": self.consumer.stats.corrupt_batches,
            "corrupted_reads": sum(s.corrupted_reads for s in self.storages.values()),
            "follower_hw_regressions": self.checkers.follower_hw_regressions,
        }
        for producer in self.producers:
            stats[f"acked_{producer.name}"] = producer.stats.acked_records
            stats[f"failed_{producer.name}"] = producer.stats.failed_records
        verdicts = self.checkers.verdicts(self.node_errors)
        if self.idle_phase_ms:
            verdicts.append(CheckerVerdict("idle_isr_stable", self.idle_isr_detail is None, self.idle_isr_detail or ""))
        return RunResult(
            seed=self.config.seed,
            trace_sha256=self.loop.trace.sha256(),
            checkers=verdicts,
            simulated_seconds=self.loop.now_us / US_PER_S,
            stats=stats,
        )

    def _check_liveness(self, healed_us: int) -> None:
        bound_us = healed_us + LIVENESS_MS_MAX * US_PER_MS
        if self.loop.run_until_condition(self._converged, bound_us):
            self.checkers.liveness_ok = True
            self.trace("liveness.ok")
            return
        self.checkers.liveness_detail = f"not converged {LIVENESS_MS_MAX} ms after heal: {self._lagging()}"

    def _check_idle(self) -> None:
        """Nothing produced for `idle_phase_ms` with every node up, then records again for `RESUME_MS`: no
        replica may leave an ISR. A follower at the leader's log end is in sync however long it is idle (as in
        Kafka), so the hazard is the first records after the spell: a leader that parked the follower's fetches
        without touching its fetch state (broker/handlers_data.py) holds a caught-up time as old as the spell,
        and its next ISR check, before the follower fetched the new records, would drop it."""
        # Convergence does not wait for ISR expansions still on their way to the controller: those first.
        full_by_us = self.loop.now_us + LIVENESS_MS_MAX * US_PER_MS
        if not self.loop.run_until_condition(lambda: self._isr_short() is None, full_by_us):
            self.idle_isr_detail = f"an ISR still short {LIVENESS_MS_MAX} ms after convergence: {self._isr_short()}"
            return
        self.trace("idle", self.idle_phase_ms)
        for phase, duration_ms in (("while idle", self.idle_phase_ms), ("after the idle spell", RESUME_MS)):
            end_us = self.loop.now_us + duration_ms * US_PER_MS
            if self.loop.run_until_condition(lambda: self._isr_short() is not None, end_us):
                self.idle_isr_detail = f"{phase}: {self._isr_short()}"
                self.trace("idle.isr_short")
                break
            if phase == "while idle":
                # Records again, over links slow enough that the followers' first fetches after the spell
                # take a while: the window in which an old caught-up time would cost a follower its place.
                for producer in self.producers:
                    producer.generating = True
                for a in self.node_ids:
                    for b in self.node_ids:
                        if a != b:
                            self.network.slow(a, b, RESUME_EXTRA_LATENCY_MS * US_PER_MS)
        for producer in self.producers:
            producer.generating = False
        self.network.heal()

    def _isr_short(self) -> str | None:
        for partition in range(PARTITIONS):
            leader = self._leader_replica(TOPIC, partition)
            if leader is None:
                return f"{TOPIC}-{partition} has no leader"
            pending = leader.pending_isr_change
            if set(leader.isr) != set(leader.replicas) or pending is not None:
                change = "" if pending is None else f", change to {sorted(pending.proposed_isr)} proposed"
                return f"{TOPIC}-{partition} ISR {sorted(leader.isr)} of replicas {sorted(leader.replicas)}{change}"
        return None

    def _converged(self) -> bool:
        return self._lagging() is None

    def _lagging(self) -> str | None:
        """None when converged, else what is still missing (for the liveness verdict)."""
        down = [n for n in self.node_ids if not self.is_running(n)]
        if down:
            return f"nodes {down} not running"
        if not self.admin.created:
            return "topic not created"
        for producer in self.producers:
            if producer.pending_records():
                return f"producer {producer.name} has {producer.pending_records()} records unacknowledged"
        for partition in range(PARTITIONS):
            lagging = self._replicas_lagging(TOPIC, partition)
            if lagging is not None:
                return lagging
            high_watermark = self._leader_replica(TOPIC, partition).high_watermark
            if self.consumer.position(partition) < high_watermark:
                return f"{TOPIC}-{partition} consumer at {self.consumer.position(partition)} < {high_watermark}"
        return None

    def _leader_replica(self, topic: str, partition: int) -> Any:
        key = (topic, partition)
        for node_id in sorted(self.processes):  # the lowest node id when two claim it (a stale leader)
            hosted = self.processes[node_id].broker.partitions.get(key)
            if hosted is not None and hosted.replica.is_leader:
                return hosted.replica
        return None

    def _replicas_lagging(self, topic: str, partition: int) -> str | None:
        """None when the partition has one leader and every replica holds its log with the high watermark at
        its end, else what is missing."""
        key = (topic, partition)
        replicas = {n: p.broker.partitions.get(key) for n, p in sorted(self.processes.items())}
        leaders = [n for n, h in replicas.items() if h is not None and h.replica.is_leader]
        if len(leaders) != 1:
            return f"{topic}-{partition} has leaders {leaders}"
        leader = replicas[leaders[0]].replica
        for node_id in leader.replicas:
            hosted = replicas.get(node_id)
            if hosted is None or hosted.log.log_end_offset != leader.log_end_offset \
                    or hosted.replica.high_watermark != leader.log_end_offset:
                return f"{topic}-{partition} replica {node_id} not caught up with leader {leaders[0]}"
        return None

    def _final_logs(self) -> dict[tuple[str, int], list[ReplicaLog]]:
        logs: dict[tuple[str, int], list[ReplicaLog]] = {}
        batch_values: dict[bytes, list[tuple[int, bytes]]] = {}  # the replicas of a partition share their batches
        for node_id, process in sorted(self.processes.items()):
            for key in sorted(process.broker.partitions):
                hosted = process.broker.partitions[key]
                logs.setdefault(key, []).append(_replica_log(node_id, hosted, batch_values))
        return logs


def log_batches(log: Any, start: int, end: int) -> Iterator[tuple[BatchHeader, bytes]]:
    """(header, bytes) of each batch of `log` (a PartitionLog) from the one holding `start`, in order, until one
    ends at or past `end` (the batches past `end` that the same read brought are yielded too)."""
    offset = start
    while offset < end:
        records = log.read(offset, FINAL_READ_BYTES_MAX).records
        if not records:
            return
        for position, header in iter_batches(records):
            if header.last_offset < offset:
                continue
            yield header, records[position:position + header.size]
            offset = header.last_offset + 1


def _replica_log(node_id: int, hosted: Any, batch_values: dict[bytes, list[tuple[int, bytes]]]) -> ReplicaLog:
    """The converged state of one replica. `batch_values`: (offset, value) of every record of each batch
    decoded so far, by the batch's bytes (equal bytes decode alike, so each distinct batch is decoded once)."""
    log = hosted.log
    batches: list[BatchSummary] = []
    values: dict[int, bytes] = {}
    for header, batch in log_batches(log, log.log_start_offset, log.log_end_offset):
        batches.append(BatchSummary(header.base_offset, header.last_offset, header.partition_leader_epoch,
                                    header.crc))
        decoded = batch_values.get(batch)
        if decoded is None:
            decoded = batch_values[batch] = [(record.offset, bytes(record.value or b""))
                                             for record in decode_batch(batch).records]
        values.update(decoded)
    return ReplicaLog(node_id, log.log_start_offset, log.log_end_offset, hosted.replica.high_watermark,
                      batches, values)


class _CountingHandler(logging.Handler):
    """Counts pysyncobj's log lines instead of printing thousands of them."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def configure_shards(runtime: Any, configure: Callable[[Any], None]) -> None:
    """Have every shard `runtime` creates from now on pass through `configure` (a workload's bug switches and
    checker hooks on coordinator shards, set before the shard loads)."""
    make_shard = runtime.shard_factory

    def configured(partition: int) -> Any:
        shard = make_shard(partition)
        configure(shard)
        return shard

    runtime.shard_factory = configured


def run(config: RunConfig, shape: ClusterShape | None = None,
        simulation_class: type[ClusterSimulation] = ClusterSimulation) -> RunResult:
    """One whole-cluster simulation of `config` (see the module docstring); `shape` overrides the swarm, and
    `simulation_class` is the workload's extension of ClusterSimulation. Raises ValueError for an unknown bug
    switch."""
    sink = open(config.trace_path, "w", encoding="utf-8") if config.trace_path else None
    pysyncobj_logger = logging.getLogger("pysyncobj")
    handler = _CountingHandler()
    propagate = pysyncobj_logger.propagate
    pysyncobj_logger.addHandler(handler)
    pysyncobj_logger.propagate = False
    try:
        result = simulation_class(config, Trace(sink), shape).run()
        result.stats["pysyncobj_log_lines"] = handler.count
        return result
    finally:
        pysyncobj_logger.removeHandler(handler)
        pysyncobj_logger.propagate = propagate
        if sink is not None:
            sink.close()
