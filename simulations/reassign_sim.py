"""The reassignment workload: the whole-cluster simulation while partitions keep moving between brokers.

Theory of operation. Everything of the cluster workload (simulations/cluster_sim.py: real nodes, producers
with acks=all and acks=1, a reader, every node and network fault) runs as it does there, with the topic at
replication factor 2 on three controller nodes plus one broker-only node (a KRaft observer that follows the
metadata log through the controllers), so that every partition has somewhere to go. On top, a mover (an admin
client speaking the Kafka API like kafka-reassign-partitions.sh) sends, every 0.5-3 s of the fault phase,
one of: AlterPartitionReassignments moving a random partition to a random pair of brokers in a random order
(moves that take the leader away, that go to a node that is down, that replace a move still running), a
cancel of a partition's move (Replicas null), or a preferred ElectLeaders for every partition. Moves meet
crashes, power loss, partitions and an isolated quorum leader like every other request.

Checkers: the cluster's (no acknowledged write lost, dense offsets, replicas identical below the high
watermark, high watermark monotonic, one leader per epoch, reads below the high watermark, metadata
identical) plus `assignment_settled`: after the heal, every node's metadata agrees on each partition's
replicas, no move is left half done (no adding or removing replicas), the ISR is every replica (never empty),
exactly the assigned brokers host a replica and one of them leads. Liveness also waits for every move to
finish and for every node's metadata image to reach the same index (a broker-only node polls for it: checked
a moment earlier, it may not have the last leader election yet, found at seed 122 of `--duration 20`).

Planted bugs: `--bugs reassign_without_catch_up`: the controller counts the new replicas as in sync the moment
a move starts, so the old replicas are dropped before the new ones have fetched anything.
`--bugs fetch_session_silent_on_named`: a leader's fetch session answers a partition the follower names again
only if something changed since its last answer, so a follower that dropped that answer (it briefly followed
another leader) never hears the high watermark again (liveness).
`--bugs observer_stops_after_failure` (a node bug, simulations/node_process.py): the broker-only node plans no
metadata fetch after one that failed, so its image stays behind the quorum's (liveness).
"""

from __future__ import annotations

from typing import Any

from metadata.reassignment import is_reassigning
from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode
from simulations import cluster_sim
from simulations.cluster_checkers import ClusterCheckers
from simulations.cluster_sim import CLIENT_ID_BASE, PARTITIONS, TOPIC, ClusterSimulation
from simulations.kafka_clients import REQUEST_TIMEOUT_MS, KafkaClientBase
from simulations.loop import US_PER_MS
from simulations.run import RunConfig, RunResult

DESCRIPTION = "the whole cluster while a mover reassigns partitions, cancels moves and elects preferred leaders"
REPLICATION_FACTOR = 2
MOVE_INTERVAL_MS_MIN, MOVE_INTERVAL_MS_MAX = 500, 3_000
CANCEL_SHARE = 0.15
ELECT_SHARE = 0.10
ELECT_LEADERS_VERSION = 1
REASSIGN_CHECKER_NAMES = ("assignment_settled",)
REASSIGN_BUGS = {"reassign_without_catch_up": "bug_reassign_without_catch_up",
                 "fetch_session_silent_on_named": "bug_named_partition_keeps_last_sent",
                 "parked_fetch_drops_news": "bug_parked_fetch_drops_news"}


class ReassignCheckers(ClusterCheckers):
    """The cluster's checkers plus `assignment_settled` (see the module docstring)."""

    extra_checker_names = REASSIGN_CHECKER_NAMES




class SimMover(KafkaClientBase):
    """Reassigns, cancels and elects through any broker (see the module docstring)."""

    def __init__(self, host: Any, client_id: int, node_ids: list[int]) -> None:
        super().__init__(host, client_id, "mover", TOPIC, PARTITIONS)
        self.node_ids = node_ids
        self.moving = True
        self.counts = {"moves": 0, "cancels": 0, "elections": 0, "accepted": 0, "refused": 0, "unanswered": 0}

    def start(self) -> None:
        self.loop.call_later(self._interval_us(), self._act)

    def _interval_us(self) -> int:
        return self.rng.randint(MOVE_INTERVAL_MS_MIN, MOVE_INTERVAL_MS_MAX) * US_PER_MS

    def _act(self) -> None:
        if not self.moving or not self.running:
            return
        broker_id = self.any_broker()
        if broker_id is not None:
            draw = self.rng.random()
            if draw < ELECT_SHARE:
                self._elect(broker_id)
            else:
                partition = self.rng.randrange(PARTITIONS)
                target = None if draw < ELECT_SHARE + CANCEL_SHARE else self.rng.sample(self.node_ids, REPLICATION_FACTOR)
                self._reassign(broker_id, partition, target)
        self.loop.call_later(self._interval_us(), self._act)

    def _reassign(self, broker_id: int, partition: int, target: list[int] | None) -> None:
        request_class = messages.AlterPartitionReassignmentsRequest
        request = request_class(timeout_ms=REQUEST_TIMEOUT_MS, topics=[request_class.ReassignableTopic(
            name=TOPIC, partitions=[request_class.ReassignablePartition(partition_index=partition, replicas=target)])])
        self.counts["moves" if target is not None else "cancels"] += 1
        self.host.trace("mover.reassign", partition, "cancel" if target is None else ",".join(map(str, target)))
        self.send(broker_id, ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, request,
                  lambda response: self._on_reassign(partition, response))

    def _on_reassign(self, partition: int, response: Any) -> None:
        if response is None:
            self.counts["unanswered"] += 1
            return
        codes = [p.error_code for t in response.responses for p in t.partitions] or [response.error_code]
        accepted = all(code == ErrorCode.NONE for code in codes)
        self.counts["accepted" if accepted else "refused"] += 1
        self.host.trace("mover.reassigned", partition, *[int(code) for code in codes])

    def _elect(self, broker_id: int) -> None:
        self.counts["elections"] += 1
        self.host.trace("mover.elect")
        request = messages.ElectLeadersRequest(election_type=0, topic_partitions=None, timeout_ms=REQUEST_TIMEOUT_MS)
        self.send(broker_id, ApiKey.ELECT_LEADERS, ELECT_LEADERS_VERSION, request,
                  lambda response: self.host.trace("mover.elected", "-" if response is None else int(response.error_code)))


class ReassignSimulation(ClusterSimulation):
    """The cluster simulation with partitions moving (see the module docstring)."""

    checkers_class = ReassignCheckers
    extra_bugs = REASSIGN_BUGS
    idle_phase_ms = 0  # the cluster workload's idle phase (its traces stay as they were)
    replication_factor = REPLICATION_FACTOR
    observers = 1  # a broker-only node (KRaft observer) after the controllers: moves go to and from it too

    def configure_node(self, state: Any) -> None:
        if "reassign_without_catch_up" in self.workload_bugs:
            state.controller.bug_reassign_without_catch_up = True
        data_planes = [g for g in state.apis._groups if hasattr(g, "fetch_sessions")] if state.apis is not None else []
        for data_plane in data_planes:
            if "fetch_session_silent_on_named" in self.workload_bugs:
                data_plane.fetch_sessions.bug_named_partition_keeps_last_sent = True
            if "parked_fetch_drops_news" in self.workload_bugs:
                data_plane.bug_parked_fetch_drops_news = True

    def _build_clients(self) -> None:
        super()._build_clients()
        self.mover = SimMover(self, CLIENT_ID_BASE + 20, self.node_ids)
        self.clients = [*self.clients, self.mover]

    def _start_clients(self) -> None:
        super()._start_clients()
        self.mover.start()

    def _heal_everything(self) -> None:
        super()._heal_everything()
        self.mover.moving = False

    def _images(self) -> dict[int, Any]:
        return {n: p.state.metadata_image for n, p in sorted(self.processes.items())}

    def _lagging(self) -> str | None:
        lagging = super()._lagging()
        if lagging is not None:
            return lagging
        images = self._images()
        indexes = {node_id: image.provenance.raft_index for node_id, image in images.items()}
        if len(set(indexes.values())) > 1:
            return f"metadata images at different indexes {indexes}"
        for node_id, image in images.items():
            topic = image.topics.by_name.get(TOPIC)
            if topic is None:
                return f"node {node_id} does not know {TOPIC}"
            for partition, state in sorted(topic.partitions.items()):
                if is_reassigning(state):
                    return f"{TOPIC}-{partition} still moving on node {node_id}: replicas {state.replicas}, " \
                           f"adding {state.adding_replicas}, removing {state.removing_replicas}"
                if set(state.isr) != set(state.replicas):
                    return f"{TOPIC}-{partition} ISR {state.isr} short of replicas {state.replicas} on node {node_id}"
        return None

    def _final_checks(self) -> None:
        super()._final_checks()
        images = self._images()
        for partition in range(PARTITIONS):
            key = (TOPIC, partition)
            states = {n: image.topics.by_name[TOPIC].partitions[partition] for n, image in images.items()}
            hosts = {n: p.broker.partitions[key].replica.is_leader
                     for n, p in self.processes.items() if key in p.broker.partitions}
            problem = assignment_problem(states, hosts)
            if problem is not None:
                self.checkers.violate("assignment_settled", f"{TOPIC}-{partition}: {problem}")

    def _result(self) -> RunResult:
        result = super()._result()
        result.stats.update({f"mover_{name}": count for name, count in self.mover.counts.items()})
        result.stats["observer_replicas"] = sum(len(p.broker.partitions) for n, p in self.processes.items()
                                                if n in self.observer_ids)
        return result


def assignment_problem(states: dict[int, Any], hosts: dict[int, bool]) -> str | None:
    """What is wrong with a partition after the heal, or None: `states` is each node's PartitionRegistration,
    `hosts` maps each node hosting a replica to whether it leads."""
    assigned = {(s.replicas, s.isr, s.leader, s.adding_replicas, s.removing_replicas) for s in states.values()}
    if len(assigned) != 1:
        return f"nodes disagree: {states}"
    replicas, isr, leader, adding, removing = assigned.pop()
    if adding or removing:
        return f"a move is left half done: replicas {replicas}, adding {adding}, removing {removing}"
    if not isr or set(isr) != set(replicas):
        return f"ISR {isr}, replicas {replicas}"
    if sorted(hosts) != sorted(replicas):
        return f"hosted on {sorted(hosts)}, assigned to {sorted(replicas)}"
    leaders = sorted(n for n, leads in hosts.items() if leads)
    if leaders != [leader]:
        return f"led by {leaders}, metadata says {leader}"
    return None


def run(config: RunConfig) -> RunResult:
    """One reassignment simulation of `config` (see the module docstring). Raises ValueError for an unknown bug."""
    return cluster_sim.run(config, simulation_class=ReassignSimulation)
