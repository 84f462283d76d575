"""The telemetry workload: the whole-cluster simulation with clients pushing their metrics (KIP-714).

Theory of operation. Everything of the cluster workload (simulations/cluster_sim.py) runs as it does there,
and every node serves client telemetry (each has a metrics port). An admin client creates a subscription
(CLIENT_METRICS config resource `sub`: prefix `org.example.`, 500 ms, matching client ids `tel-a`), and at
two points of the run changes it (interval and metric prefixes; later its match widens to every `tel-`
client). Two telemetry clients, each started once the subscription matches it (one no subscription matches
asks again only after Kafka's default interval of five minutes), act as librdkafka does: GetTelemetrySubscriptions to a broker (the first time
with a zero instance id), then, while they are asked for metrics, a push each interval (a gauge
`org.example.pushes`, the count of pushes it made, with the client's name as an attribute); UNKNOWN_SUBSCRIPTION_ID
or a broker they can no longer reach makes them ask again. Node crashes, restarts, partitions and the rest of
the default faults meet them, and the subscription changes reach each broker as its metadata does.

Checkers (against a model of Kafka's ClientMetricsManager, written here apart from broker/telemetry.py):
- `telemetry_subscription_current`: a broker answers GetTelemetrySubscriptions with the metrics, interval and
  subscription id that the subscriptions in its own metadata image give that client (the union of the
  matching ones' metrics, their shortest interval), and accepts a push only with that subscription id and only
  from a client those subscriptions ask for metrics.
- `telemetry_values_kept`: after a push it accepted, the broker shows the value pushed for that client.
- `telemetry_liveness`: once the faults are healed, every client told to push gets a push accepted within
  TELEMETRY_LIVENESS_MS (one told to push nothing asks again only after Kafka's default five minutes).

Planted bug: `--bugs telemetry_stale_subscription` (a broker keeps evaluating a client against the
subscriptions it first saw: after a change it accepts pushes with the old subscription id).
"""

from __future__ import annotations

import uuid
import zlib
from typing import Any

from metadata.configs import client_match_patterns, split_list
from metadata.records import ConfigResourceType
from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode
from simulations import cluster_sim
from simulations.cluster_checkers import ClusterCheckers
from simulations.cluster_sim import ClusterSimulation
from simulations.kafka_clients import CLIENT_ID_BASE, REQUEST_TIMEOUT_MS, KafkaClientBase
from simulations.loop import US_PER_MS
from simulations.run import RunConfig, RunResult

DESCRIPTION = "the whole cluster with clients pushing their metrics to the brokers (KIP-714) as a subscription changes"
TELEMETRY_BUGS = {"telemetry_stale_subscription": "bug_stale_subscription"}
SUBSCRIPTION = "sub"
METRIC = "org.example.pushes"
INTERVAL_MS_DEFAULT = 5 * 60 * 1000  # Kafka's, for a client no subscription matches
TELEMETRY_TICK_MS = 100
TELEMETRY_LIVENESS_MS = 10_000
# (the share of the fault phase at which it applies, the subscription's configs)
SUBSCRIPTION_STEPS = (
    (0.0, {"metrics": "org.example.", "interval.ms": "500", "match": "client_id=tel-a"}),
    (0.4, {"metrics": "org.example.,org.other.", "interval.ms": "800", "match": "client_id=tel-a"}),
    (0.7, {"metrics": "org.example.", "interval.ms": "600", "match": "client_id=tel-.*"}),
)
INCREMENTAL_ALTER_CONFIGS_VERSION = 1


def model_subscription(configs: Any, attributes: dict[str, str | None], instance_id: uuid.UUID
                       ) -> tuple[tuple[str, ...], int, int]:
    """(metrics, interval, subscription id) the subscriptions in `configs` (an image's ConfigsImage) give a
    client, as Kafka's ClientMetricsManager.createClientInstance computes them."""
    attributes = {**attributes, "client_instance_id": str(instance_id)}
    metrics: set[str] = set()
    interval = INTERVAL_MS_DEFAULT
    for (resource_type, _), values in sorted(configs.resources.items()):
        if resource_type != ConfigResourceType.CLIENT_METRICS:
            continue
        patterns = client_match_patterns(split_list(values.get("match", "")))
        if all(attributes.get(key) is not None and pattern.fullmatch(attributes[key]) for key, pattern in patterns.items()):
            metrics |= set(split_list(values.get("metrics", "")))
            interval = min(interval, int(values.get("interval.ms", INTERVAL_MS_DEFAULT)))
    chosen = ("*",) if "*" in metrics else tuple(sorted(metrics))
    crc = zlib.crc32(f"{list(chosen)}{interval}".encode()) ^ (instance_id.int & 0xFFFFFFFF)
    return chosen, interval, crc - (1 << 32) if crc >= 1 << 31 else crc


def payload(client: str, value: int) -> bytes:
    from opentelemetry.proto.common.v1 import common_pb2
    from opentelemetry.proto.metrics.v1 import metrics_pb2

    data = metrics_pb2.MetricsData()
    point = data.resource_metrics.add().scope_metrics.add().metrics.add(name=METRIC).gauge.data_points.add(
        as_double=float(value))
    point.attributes.append(common_pb2.KeyValue(key="client", value=common_pb2.AnyValue(string_value=client)))
    return data.SerializeToString()


class TelemetryCheckers(ClusterCheckers):
    extra_checker_names = ("telemetry_subscription_current", "telemetry_values_kept", "telemetry_liveness")

    def __init__(self) -> None:
        super().__init__()
        self.accepted = 0
        self.refused: dict[int, int] = {}

    def observe(self, node_id: int, kind: str, request: Any, attributes: dict, code: int, image: Any, manager: Any,
                instance: Any) -> None:
        """Every telemetry request a broker answers, at the moment it answers."""
        if kind == "get":
            if code == ErrorCode.NONE:
                expected = model_subscription(image.configs, attributes, instance.instance_id)
                answered = (instance.metrics, instance.push_interval_ms, instance.subscription_id)
                if answered != expected:
                    self.violate("telemetry_subscription_current",
                                 f"node {node_id} answered {attributes.get('client_id')} (metrics, interval, id) "
                                 f"{answered}; its subscriptions give {expected}")
            return
        if code != ErrorCode.NONE:
            self.refused[code] = self.refused.get(code, 0) + 1
            return
        self.accepted += 1
        instance_id = request.client_instance_id
        metrics, _, subscription_id = model_subscription(image.configs, attributes, instance_id)
        if request.subscription_id != subscription_id or not metrics:
            self.violate("telemetry_subscription_current",
                         f"node {node_id} accepted a push of {attributes.get('client_id')} with subscription id "
                         f"{request.subscription_id}; its subscriptions give {subscription_id} (metrics {metrics})")
        client = attributes.get("client_id") or ""
        pushed = _pushed_value(bytes(request.metrics or b""))
        instance = manager.instances.get(instance_id)
        kept = None if instance is None else instance.series.get((METRIC, (("client", client),)))
        if pushed is not None and kept != pushed:
            self.violate("telemetry_values_kept", f"node {node_id} accepted {client}'s {pushed} and shows {kept}")


def _pushed_value(data: bytes) -> float | None:
    from broker.telemetry import decode_otlp

    values = [value for name, _, value in decode_otlp(data) if name == METRIC] if data else []
    return values[0] if values else None


class SubscriptionAdmin(KafkaClientBase):
    """Applies SUBSCRIPTION_STEPS, each retried until a broker answers it done."""

    def __init__(self, host: Any, client_id: int, fault_phase_ms: int, on_applied: Any) -> None:
        super().__init__(host, client_id, "telemetry-admin", cluster_sim.TOPIC, cluster_sim.PARTITIONS)
        self.fault_phase_ms = fault_phase_ms
        self.on_applied = on_applied  # on_applied(step) once each step is done
        self.applied = -1
        self._inflight = False

    def start(self) -> None:
        self.loop.call_later(500 * US_PER_MS, self._tick)

    def _tick(self) -> None:
        if not self.running:
            return
        due = max(i for i, (share, _) in enumerate(SUBSCRIPTION_STEPS) if self.loop.now_ms >= share * self.fault_phase_ms)
        broker_id = self.any_broker()
        if due > self.applied and not self._inflight and broker_id is not None:
            request_class = messages.IncrementalAlterConfigsRequest
            configs = SUBSCRIPTION_STEPS[due][1]
            request = request_class(resources=[request_class.AlterConfigsResource(
                resource_type=ConfigResourceType.CLIENT_METRICS, resource_name=SUBSCRIPTION, configs=[
                    request_class.AlterableConfig(name=name, config_operation=0, value=value)
                    for name, value in sorted(configs.items())])], validate_only=False)
            self._inflight = self.send(broker_id, ApiKey.INCREMENTAL_ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS_VERSION,
                                       request, lambda response, step=due: self._on_response(step, response))
        self.loop.call_later(200 * US_PER_MS, self._tick)

    def _on_response(self, step: int, response: Any) -> None:
        self._inflight = False
        if response is not None and response.responses[0].error_code == ErrorCode.NONE and step > self.applied:
            self.applied = step
            self.host.trace("client.subscription", step)
            self.on_applied(step)


class SimTelemetryClient(KafkaClientBase):
    """A client pushing its metrics as librdkafka does (see the module docstring)."""

    def __init__(self, host: Any, client_id: int, name: str) -> None:
        super().__init__(host, client_id, name, cluster_sim.TOPIC, cluster_sim.PARTITIONS)
        self.instance_id = uuid.UUID(int=0)
        self.subscription_id = 0
        self.interval_ms = 0
        self.metrics: list[str] = []
        self.broker: int | None = None
        self.next_at_ms = 0
        self.state = "get"  # "get": ask for the subscription; "push": push when due; "waiting": a request out
        self.pushes = 0
        self.accepted_at_ms = -1

    def start(self) -> None:
        self.loop.call_later(TELEMETRY_TICK_MS * US_PER_MS, self._tick)

    def _tick(self) -> None:
        if not self.running:
            return
        if self.broker not in self.connected:
            self.broker = self.any_broker()
            if self.state == "push":
                self.state = "get"  # another broker: ask it first, as librdkafka does after a reconnect
        if self.broker is not None and self.state != "waiting" and self.loop.now_ms >= self.next_at_ms:
            if self.state == "get":
                request = messages.GetTelemetrySubscriptionsRequest(client_instance_id=self.instance_id)
                if self.send(self.broker, ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, request, self._on_subscriptions):
                    self.state = "waiting"
            elif self.metrics:
                self.pushes += 1
                request = messages.PushTelemetryRequest(
                    client_instance_id=self.instance_id, subscription_id=self.subscription_id, terminating=False,
                    compression_type=0, metrics=payload(self.name, self.pushes))
                if self.send(self.broker, ApiKey.PUSH_TELEMETRY, 0, request, self._on_push):
                    self.state = "waiting"
        self.loop.call_later(TELEMETRY_TICK_MS * US_PER_MS, self._tick)

    def _on_subscriptions(self, response: Any) -> None:
        if response is None or response.error_code != ErrorCode.NONE:
            self.state, self.next_at_ms = "get", self.loop.now_ms + (
                self.interval_ms or 1_000 if response is not None else REQUEST_TIMEOUT_MS // 10)
            return
        self.instance_id, self.subscription_id = response.client_instance_id, response.subscription_id
        self.interval_ms, self.metrics = response.push_interval_ms, list(response.requested_metrics)
        # Pushes when asked for metrics; otherwise asks again after the interval
        self.state = "push" if self.metrics else "get"
        jitter = self.rng.uniform(0.5, 1.5) if self.metrics else 1.0
        self.next_at_ms = self.loop.now_ms + int(self.interval_ms * jitter)

    def _on_push(self, response: Any) -> None:
        if response is None:
            self.state, self.next_at_ms = "get", self.loop.now_ms + REQUEST_TIMEOUT_MS // 10
            return
        if response.error_code == ErrorCode.NONE:
            self.accepted_at_ms = self.loop.now_ms
            self.state, self.next_at_ms = "push", self.loop.now_ms + self.interval_ms
        elif response.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED:
            self.state, self.next_at_ms = "push", self.loop.now_ms + self.interval_ms
        else:  # UNKNOWN_SUBSCRIPTION_ID and the rest: ask again
            self.state, self.next_at_ms = "get", self.loop.now_ms


class TelemetrySimulation(ClusterSimulation):
    extra_bugs = TELEMETRY_BUGS
    checkers_class = TelemetryCheckers
    metrics_ports = True
    idle_phase_ms = 0

    def configure_node(self, state: Any) -> None:
        if state.broker is None:
            return
        node_id = state.node_id
        state.telemetry_apis.observer = (
            lambda *answer: self.checkers.observe(node_id, *answer))
        if "telemetry_stale_subscription" in self.workload_bugs:
            state.telemetry.bug_stale_subscription = True

    def _build_clients(self) -> None:
        super()._build_clients()
        self.subscription_admin = SubscriptionAdmin(self, CLIENT_ID_BASE + 20, int(self.config.duration_s * 1000),
                                                    self._subscription_applied)
        self.telemetry_clients = [SimTelemetryClient(self, CLIENT_ID_BASE + 21, "tel-a"),
                                  SimTelemetryClient(self, CLIENT_ID_BASE + 22, "tel-b")]
        self.clients.extend([self.subscription_admin, *self.telemetry_clients])

    def _start_clients(self) -> None:
        super()._start_clients()
        self.subscription_admin.start()

    def _subscription_applied(self, step: int) -> None:
        # A client no subscription matches asks again only after Kafka's default interval (5 minutes): each
        # starts once a subscription matches it, tel-a at the first step, tel-b when the match widens.
        if step == 0:
            self.telemetry_clients[0].start()
        if step == len(SUBSCRIPTION_STEPS) - 1:
            self.telemetry_clients[1].start()

    def _final_checks(self) -> None:
        healed_ms = self.loop.now_ms
        # Every client told to push pushes once more after the heal. (A client a broker told to push nothing, as
        # its metadata then had it, asks again only after Kafka's default five minutes; that the answer was the
        # one its metadata gave is telemetry_subscription_current's.)
        self.loop.run_until_condition(
            lambda: all(client.accepted_at_ms > healed_ms for client in self.telemetry_clients if client.metrics),
            (healed_ms + TELEMETRY_LIVENESS_MS) * US_PER_MS)
        late = [client.name for client in self.telemetry_clients
                if client.metrics and client.accepted_at_ms <= healed_ms]
        if self.subscription_admin.applied != len(SUBSCRIPTION_STEPS) - 1:
            self.checkers.violate("telemetry_liveness", f"the subscription's last change was not applied "
                                                        f"(step {self.subscription_admin.applied})")
        elif late:
            self.checkers.violate("telemetry_liveness", f"{', '.join(late)}: no push accepted within "
                                                        f"{TELEMETRY_LIVENESS_MS} ms of the heal")
        super()._final_checks()

    def _result(self) -> RunResult:
        result = super()._result()
        result.stats["pushes_accepted"] = self.checkers.accepted
        result.stats["pushes_refused"] = sum(self.checkers.refused.values())
        return result


def run(config: RunConfig) -> RunResult:
    """One telemetry simulation of `config` (see the module docstring). Raises ValueError for an unknown bug."""
    return cluster_sim.run(config, simulation_class=TelemetrySimulation)
