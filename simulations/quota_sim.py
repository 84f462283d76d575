"""The quotas workload: the whole-cluster simulation while client byte-rate quotas keep changing.

Theory of operation. Everything of the cluster workload (simulations/cluster_sim.py: real nodes, producers with
acks=all and acks=1, a reader, every node and network fault) runs as it does there. On top, a quota admin (a
client speaking AlterClientQuotas like kafka-configs.sh) sets, every 3-10 s of the fault phase, the
producer_byte_rate of one of the producers' client ids ("all", "one") or the consumer_byte_rate of the
reader's ("reader"), or removes it. A new quota starts at half or three quarters of what that client sends one
broker; each change then multiplies it by 0.7, 1 or 1.4 (between 0.3 and 2 times that load), so throttles stay
a few seconds long (a quota cut to a fifth of a client's rate would mute it for 40 s, as Kafka would); its requests meet crashes, partitions and an isolated quorum leader like every other
request. At the heal it removes every quota (retrying until the controller accepts), so that the liveness
phase runs unthrottled. The nodes mute a throttled client's connection as the listener does
(simulations/node_process.py mirrors net/server.py): its next frames wait until the throttle is over.

Checkers: the cluster's plus `quota_respected`: on each node incarnation, for each client and each stretch of
time in which the node's image holds one producer_byte_rate (or consumer_byte_rate) Q for it, the produce bytes
the node handled from that client (the record bytes it sent it in fetch answers) since the stretch began stay
within 1.1 x Q x (elapsed + 11 s), plus one request (answer) and one more per connection the client opened in
the stretch. Kafka's sampled rate lets a client burst up to the quota over its 11 windows and throttles it
back to the quota after (broker/quotas.py); a mute holds a connection, as Kafka mutes a channel, so a
reconnecting client gets one request through before its shared rate throttles it again. request_percentage
is not simulated: it measures handling time, which a deterministic simulation has not.

Controller mutations (KIP-599): a topic churner ("churner") creates a topic of `CHURN_PARTITIONS` partitions
and then deletes it, one request at a time, every `CHURN_INTERVAL_MS`, always through the same broker while it
stays connected (as an admin client sticks to the controller Metadata names). From `CHURN_QUOTA_AT_MS` of the
fault phase until the heal its client id has a controller_mutation_rate of `CHURN_QUOTA` partitions a second.
Checker `mutation_quota_respected`: on each node incarnation, from the first request of the churner it handled
under that quota, the partitions its successful CreateTopics and DeleteTopics answers created and deleted stay within
1.1 x (the token bucket's burst of 11 s + Q x elapsed), plus one request, one more per connection (the
request that empties the bucket is accepted, and a new connection is not muted) and one more for each request
that came while another was unanswered (the churner times out on a request the controller answers late; the
node records its mutations, and mutes the connection, when it answers).

Planted bugs: `--bugs quota_throttle_not_muted`: a throttled answer carries throttle_time_ms but the broker does
not mute the connection, so a client that does not back off on its own (the simulation's producers do not)
keeps its whole rate. `--bugs mutation_deletions_not_counted`: the broker counts the partitions a client
creates against its controller_mutation_rate but not those it deletes, so the churner runs at twice its quota.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from broker.quotas import CONTROLLER_MUTATION, FETCH, PRODUCE, WINDOW_MS_DEFAULT, WINDOW_NUM_DEFAULT, ClientQuotas
from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode
from simulations import cluster_sim
from simulations.cluster_checkers import ClusterCheckers
from simulations.cluster_sim import CLIENT_ID_BASE, PARTITIONS, TOPIC, ClusterSimulation
from simulations.kafka_clients import LINGER_MS
from simulations.kafka_clients import KafkaClientBase
from simulations.loop import US_PER_MS
from simulations.run import RunConfig, RunResult

DESCRIPTION = "the whole cluster while client byte-rate quotas are set, changed and removed"
QUOTA_INTERVAL_MS_MIN, QUOTA_INTERVAL_MS_MAX = 3_000, 10_000
REMOVE_SHARE = 0.2
FIRST_FACTORS = (0.5, 0.75)  # a new quota against what its client sends one broker
CHANGE_FACTORS = (0.7, 1.0, 1.4)
FACTOR_MIN, FACTOR_MAX = 0.3, 2.0
RECORD_BYTES_ESTIMATE = 20  # a record "<name>:<sequence>" with its framing
BATCH_OVERHEAD_BYTES = 70
HEAL_RETRY_MS = 500
ALTER_CLIENT_QUOTAS_VERSION = 1
BURST_S = WINDOW_NUM_DEFAULT * WINDOW_MS_DEFAULT / 1000  # what the sampled rate lets a fresh client send first
MARGIN = 1.1
QUOTA_CHECKER_NAMES = ("quota_respected", "mutation_quota_respected")
QUOTA_BUGS = {"quota_throttle_not_muted": "bug_throttle_not_muted",
              "mutation_deletions_not_counted": "bug_deletions_not_counted"}
CHURNER = "churner"
CHURN_PARTITIONS = 2
CHURN_INTERVAL_MS = 200
CHURN_QUOTA = 2.0  # partitions per second: a burst of 22, then a topic created or deleted a second
CHURN_QUOTA_AT_MS = 2_000
CREATE_TOPICS_VERSION = 4
DELETE_TOPICS_VERSION = 3


@dataclass
class _Stretch:
    """Produce bytes a node incarnation handled from one client while its image held one quota for it."""

    quota: float
    started_ms: int
    handled: int = 0
    largest: int = 0
    connections: set[int] = field(default_factory=set)
    overlapping: int = 0  # requests that came while another of the client's was still unanswered


class QuotaCheckers(ClusterCheckers):
    """The cluster's checkers plus `quota_respected` (see the module docstring)."""

    extra_checker_names = QUOTA_CHECKER_NAMES

    def __init__(self) -> None:
        super().__init__()
        self._stretches: dict[tuple[int, int, str, str], _Stretch] = {}
        self._unanswered: dict[tuple[int, int], int] = {}  # (node, incarnation) -> churner requests unanswered
        self._quotas = ClientQuotas()
        self.throttled_stretches = 0  # stretches that went past one burst: the quota had to act


    def observe_request(self, process: Any, connection: int, header: Any, request: Any) -> None:
        """A Kafka request a node is about to handle (not one its throttle still holds), and the number of the
        connection it came on."""
        if header.api_key == ApiKey.PRODUCE:
            size = sum(len(p.records) for t in request.topic_data for p in t.partition_data if p.records is not None)
            self._account(process, connection, PRODUCE, header.client_id or "", size, "produce")
        elif header.api_key in (ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS) and header.client_id == CHURNER:
            key = (process.node_id, process.incarnation)
            stretch = self._account_mutations(process, connection, 0)
            if stretch is not None and self._unanswered.get(key, 0) > 0:
                stretch.overlapping += 1
            self._unanswered[key] = self._unanswered.get(key, 0) + 1

    def observe_response(self, process: Any, connection: int, header: Any, response: Any) -> None:
        """A Kafka response a node is about to send on the connection numbered `connection`."""
        # Followers' fetches (the simulated fetchers' client id) are replication, never under a client quota.
        if header.api_key == ApiKey.FETCH and not header.client_id.startswith("replica-"):
            size = sum(len(p.records) for t in response.responses for p in t.partitions if p.records)
            self._account(process, connection, FETCH, header.client_id or "", size, "fetched records")
        elif header.api_key in (ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS) and header.client_id == CHURNER:
            key = (process.node_id, process.incarnation)
            self._unanswered[key] = max(0, self._unanswered.get(key, 0) - 1)
            topics = response.topics if header.api_key == ApiKey.CREATE_TOPICS else response.responses
            done = sum(CHURN_PARTITIONS for topic in topics if topic.error_code == ErrorCode.NONE)
            self._account_mutations(process, connection, done)

    def _account_mutations(self, process: Any, connection: int, partitions: int) -> _Stretch | None:
        """The churner's partitions created and deleted against the token bucket of its quota; its stretch."""
        now_ms = process.sim.loop.now_ms
        stretch = self._stretch(process, CONTROLLER_MUTATION, CHURNER, now_ms)
        if stretch is None:
            return None
        stretch.connections.add(connection)
        if not partitions:
            return stretch
        stretch.handled += partitions
        stretch.largest = max(stretch.largest, partitions)
        elapsed_s = (now_ms - stretch.started_ms) / 1000
        # Beyond the bucket: the request that empties it, one per connection (a new one is not muted), and each
        # that came while another was unanswered (the churner gave up on it; the mute comes with the answer).
        extra = 1 + len(stretch.connections) + stretch.overlapping
        allowed = MARGIN * stretch.quota * (BURST_S + elapsed_s) + extra * stretch.largest
        if stretch.handled > allowed:
            self.violate("mutation_quota_respected",
                         f"node {process.node_id} created and deleted {stretch.handled} partitions for "
                         f"{CHURNER!r} in {elapsed_s:.1f} s under a controller_mutation_rate of "
                         f"{stretch.quota:g}/s (at most {allowed:.0f})")

    def _stretch(self, process: Any, quota_type: str, client_id: str, now_ms: int) -> _Stretch | None:
        """The client's current stretch under one quota on this node incarnation (None without a quota); a new
        one when the quota appeared or changed."""
        self._quotas.update(process.broker.image.quotas)
        found = self._quotas.quota(quota_type, "", client_id)
        key = (process.node_id, process.incarnation, client_id, quota_type)
        if found is None:
            self._stretches.pop(key, None)
            return None
        stretch = self._stretches.get(key)
        if stretch is None or stretch.quota != found[0]:
            stretch = self._stretches[key] = _Stretch(found[0], now_ms)
        return stretch

    def _account(self, process: Any, connection: int, quota_type: str, client_id: str, size: int, what: str) -> None:
        now_ms = process.sim.loop.now_ms
        stretch = self._stretch(process, quota_type, client_id, now_ms)
        if stretch is None:
            return
        stretch.handled += size
        stretch.largest = max(stretch.largest, size)
        stretch.connections.add(connection)
        elapsed_s = (now_ms - stretch.started_ms) / 1000
        # A mute holds one connection: a client that reconnects gets one request through on the new one (as
        # with Kafka's muted channels) before the rate it shares throttles it again.
        allowed = (MARGIN * stretch.quota * (elapsed_s + BURST_S)
                   + (1 + len(stretch.connections)) * stretch.largest)
        if stretch.handled > stretch.quota * BURST_S and stretch.handled - size <= stretch.quota * BURST_S:
            self.throttled_stretches += 1
        if stretch.handled > allowed:
            self.violate("quota_respected", f"node {process.node_id} handled {stretch.handled} bytes of {what} "
                                            f"of {client_id!r} in {elapsed_s:.1f} s under a quota of "
                                            f"{stretch.quota:g} B/s (at most {allowed:.0f})")



class SimQuotaAdmin(KafkaClientBase):
    """Sets, changes and removes client quotas through any broker (see the module docstring)."""

    def __init__(self, host: Any, client_id: int, records_per_s: int) -> None:
        super().__init__(host, client_id, "quota-admin", TOPIC, PARTITIONS)
        self.altering = True
        # What one producer sends one broker (a third of the partitions), per second; the reader gets about
        # both producers' records.
        produce_rate = (records_per_s * RECORD_BYTES_ESTIMATE
                        + 1000 // LINGER_MS * PARTITIONS * BATCH_OVERHEAD_BYTES) / PARTITIONS
        self.loads = {("all", "producer_byte_rate"): produce_rate, ("one", "producer_byte_rate"): produce_rate,
                      ("reader", "consumer_byte_rate"): 2 * produce_rate}
        self.values: dict[tuple[str, str], float] = {}  # what was last asked for each quota
        self.counts = {"set": 0, "removed": 0, "accepted": 0, "refused": 0, "unanswered": 0}

    def start(self) -> None:
        self.loop.call_later(self._interval_us(), self._act)

    def _interval_us(self) -> int:
        return self.rng.randint(QUOTA_INTERVAL_MS_MIN, QUOTA_INTERVAL_MS_MAX) * US_PER_MS

    def _act(self) -> None:
        if not self.altering or not self.running:
            return
        broker_id = self.any_broker()
        if broker_id is not None:
            target = self.rng.choice(sorted(self.loads))
            load = self.loads[target]
            if target in self.values and self.rng.random() < REMOVE_SHARE:
                del self.values[target]
                self._alter(broker_id, [(target, None)])
                self.counts["removed"] += 1
            else:
                if target in self.values:
                    factor = self.values[target] / load * self.rng.choice(CHANGE_FACTORS)
                else:
                    factor = self.rng.choice(FIRST_FACTORS)
                value = float(max(1, round(load * min(FACTOR_MAX, max(FACTOR_MIN, factor)))))
                self.values[target] = value
                self._alter(broker_id, [(target, value)])
                self.counts["set"] += 1
        self.loop.call_later(self._interval_us(), self._act)

    def limit_churner(self) -> None:
        """Set the churner's controller_mutation_rate, again until a broker takes it (it stays until the heal)."""
        if not self.running or not self.altering:
            return
        broker_id = self.any_broker()
        if broker_id is not None and not self.host.churner_limited():
            self._alter(broker_id, [((CHURNER, CONTROLLER_MUTATION), CHURN_QUOTA)])
        if not self.host.churner_limited():
            self.loop.call_later(HEAL_RETRY_MS * US_PER_MS, self.limit_churner)

    def remove_all(self) -> None:
        """At the heal: remove every quota, again every HEAL_RETRY_MS while a node's image still holds one (a
        change the admin saw time out may be committed later: the broker retries what it forwarded)."""
        self.altering = False
        self._remove_remaining()

    def _remove_remaining(self) -> None:
        if not self.running:
            return
        broker_id = self.any_broker()
        if broker_id is not None and self.host.quotas_left():
            self._alter(broker_id, [(target, None) for target in [*sorted(self.loads),
                                                                   (CHURNER, CONTROLLER_MUTATION)]])
        self.loop.call_later(HEAL_RETRY_MS * US_PER_MS, self._remove_remaining)

    def _alter(self, broker_id: int, changes: list[tuple[tuple[str, str], float | None]]) -> None:
        request_class = messages.AlterClientQuotasRequest
        by_client: dict[str, list] = {}
        for (client, key), value in changes:
            by_client.setdefault(client, []).append(request_class.OpData(
                key=key, value=0.0 if value is None else value, remove=value is None))
        request = request_class(entries=[request_class.EntryData(
            entity=[request_class.EntityData(entity_type="client-id", entity_name=client)], ops=ops)
            for client, ops in by_client.items()], validate_only=False)
        self.send(broker_id, ApiKey.ALTER_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS_VERSION, request,
                  lambda response: self._on_alter(changes, response))

    def _on_alter(self, changes: list[tuple[tuple[str, str], float | None]], response: Any) -> None:
        # Counted only: whether a change took effect is read from the nodes' images (quotas_left).
        if response is None:
            self.counts["unanswered"] += 1
            return
        codes = {entry.entity[0].entity_name: entry.error_code for entry in response.entries}
        for (client, _), _ in changes:
            self.counts["accepted" if codes.get(client) == ErrorCode.NONE else "refused"] += 1


class SimTopicChurner(KafkaClientBase):
    """Creates a topic, deletes it, and again, one request at a time (see the module docstring)."""

    def __init__(self, host: Any, client_id: int) -> None:
        super().__init__(host, client_id, CHURNER, TOPIC, PARTITIONS)
        self.churning = True
        self._broker: int | None = None
        self._inflight = False
        self._next = 0
        self._created: list[str] = []  # topics created and not yet deleted, oldest first
        self.counts = {"created": 0, "deleted": 0}

    def start(self) -> None:
        self.loop.call_later(CHURN_INTERVAL_MS * US_PER_MS, self._tick)

    def _tick(self) -> None:
        if not self.running or not self.churning:
            return
        if not self._inflight:
            if self._broker not in self.connected:
                self._broker = self.any_broker()
            if self._broker is not None:
                self._inflight = self._delete() if self._created else self._create()
        self.loop.call_later(CHURN_INTERVAL_MS * US_PER_MS, self._tick)

    def _create(self) -> bool:
        self._next += 1
        name = f"churn-{self._next}"
        request_class = messages.CreateTopicsRequest
        request = request_class(topics=[request_class.CreatableTopic(
            name=name, num_partitions=CHURN_PARTITIONS, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=5_000, validate_only=False)
        return self.send(self._broker, ApiKey.CREATE_TOPICS, CREATE_TOPICS_VERSION, request,
                         lambda response: self._on_create(name, response))

    def _on_create(self, name: str, response: Any) -> None:
        self._inflight = False
        if response is not None and response.topics[0].error_code == ErrorCode.NONE:
            self._created.append(name)
            self.counts["created"] += 1

    def _delete(self) -> bool:
        name = self._created[0]
        request = messages.DeleteTopicsRequest(topic_names=[name], timeout_ms=5_000)
        return self.send(self._broker, ApiKey.DELETE_TOPICS, DELETE_TOPICS_VERSION, request,
                         lambda response: self._on_delete(name, response))

    def _on_delete(self, name: str, response: Any) -> None:
        self._inflight = False
        if response is None:
            return
        if response.responses[0].error_code in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
            self._created.remove(name)
            self.counts["deleted"] += response.responses[0].error_code == ErrorCode.NONE


class QuotaSimulation(ClusterSimulation):
    """The cluster simulation with changing client quotas (see the module docstring)."""

    checkers_class = QuotaCheckers
    extra_bugs = QUOTA_BUGS
    idle_phase_ms = 0  # the cluster workload's idle phase (its traces stay as they were)

    def configure_node(self, state: Any) -> None:
        if state.apis is not None:
            for bug in self.workload_bugs:
                setattr(state.apis, QUOTA_BUGS[bug], True)

    def _build_clients(self) -> None:
        super()._build_clients()
        self.quota_admin = SimQuotaAdmin(self, CLIENT_ID_BASE + 21, self.shape.records_per_s)
        self.churner = SimTopicChurner(self, CLIENT_ID_BASE + 23)
        self.clients = [*self.clients, self.quota_admin, self.churner]

    def _start_clients(self) -> None:
        super()._start_clients()
        self.quota_admin.start()
        self.churner.start()
        self.loop.call_later(CHURN_QUOTA_AT_MS * US_PER_MS, self.quota_admin.limit_churner)

    def _heal_everything(self) -> None:
        super()._heal_everything()
        self.churner.churning = False
        self.quota_admin.remove_all()

    def churner_limited(self) -> bool:
        """Whether a running node's image holds the churner's controller_mutation_rate."""
        return any(self.is_running(node_id) and process.broker.image.quotas.value(
            (("client-id", CHURNER),), CONTROLLER_MUTATION) is not None for node_id, process in self.processes.items())

    def quotas_left(self) -> str | None:
        """Which running node's image still holds a quota, or None."""
        for node_id, process in sorted(self.processes.items()):
            if self.is_running(node_id) and process.broker.image.quotas.entities:
                return f"node {node_id} still has quotas {dict(process.broker.image.quotas.entities)}"
        return None

    def _lagging(self) -> str | None:
        return self.quotas_left() or super()._lagging()

    def _result(self) -> RunResult:
        result = super()._result()
        result.stats.update({f"quotas_{name}": count for name, count in self.quota_admin.counts.items()})
        result.stats["quota_throttled_stretches"] = self.checkers.throttled_stretches
        result.stats.update({f"churn_{name}": count for name, count in self.churner.counts.items()})
        return result


def run(config: RunConfig) -> RunResult:
    """One quotas simulation of `config` (see the module docstring). Raises ValueError for an unknown bug."""
    return cluster_sim.run(config, simulation_class=QuotaSimulation)
