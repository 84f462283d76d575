"""The fuzz workload: the whole-cluster simulation with two clients sending well-formed requests with hostile
values to every node.

Theory of operation. Everything of the cluster workload (simulations/cluster_sim.py: real nodes, producers with
acks=all and acks=1, a reader, every node and network fault) runs as it does there. On top, two fuzz clients
ask each broker for its API versions, then send it, every `FUZZ_TICK_MS`, a request drawn by
simulations/fuzz_requests.py: any API the broker serves, any version, every field a legal value of its type
leaning towards the names and ids that reach deep into a handler (their own topics, groups and transactional
ids; partitions around the real ones; the producer ids, epochs, member ids and generations earlier answers
named). They create, delete, reassign, truncate and reconfigure their own topics, join and leave their own
groups, run and abort their own transactions and play follower, coordinator and controller, but never name
the workload's topic.

Checkers: the cluster's (the workload's data, the ISR, liveness after the faults heal, no node error: an
exception out of a core while handling a request or building an answer ends the node with the error in the
verdict), plus `answers_decode`: every answer a node sends decodes as the response to its request, with its
correlation id.

Planted bug: `--bugs create_topics_forward_nothing`: a CreateTopics request whose every topic is refused before
it reaches the controller (an empty name, a duplicate, a bad replication factor) is forwarded anyway and its
answer indexes a controller result that was never asked for (a bug a real node once had).
"""

from __future__ import annotations

import struct
from typing import Any

from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import KafkaError
from simulations import cluster_sim
from simulations.cluster_checkers import ClusterCheckers
from simulations.cluster_sim import PARTITIONS, TOPIC, ClusterSimulation
from simulations.fuzz_requests import RequestFuzzer
from simulations.kafka_clients import CLIENT_ID_BASE, KafkaClientBase
from simulations.loop import US_PER_MS
from simulations.run import RunConfig, RunResult

DESCRIPTION = "the whole cluster while two clients send every node well-formed requests with hostile values"
FUZZ_TICK_MS = 20
FUZZ_INFLIGHT_MAX = 4  # per broker: a request that waits (a long poll, a join) does not stop the others
API_VERSIONS_VERSION = 3
FUZZ_CHECKER_NAMES = ("answers_decode",)
FUZZ_BUGS = {"create_topics_forward_nothing": "bug_create_topics_forward_nothing"}
_CORRELATION = struct.Struct(">i")


class FuzzCheckers(ClusterCheckers):
    """The cluster's checkers plus `answers_decode` (see the module docstring)."""

    extra_checker_names = FUZZ_CHECKER_NAMES


class SimFuzzer(KafkaClientBase):
    """Sends each connected broker a drawn request every FUZZ_TICK_MS (see the module docstring)."""

    def __init__(self, host: Any, client_id: int, name: str, checkers: FuzzCheckers) -> None:
        super().__init__(host, client_id, name, TOPIC, PARTITIONS)
        self.checkers = checkers
        self.fuzzer = RequestFuzzer(self.loop.derive_rng(f"fuzzer-{name}"), topics=(f"{name}-a", f"{name}-b"))
        self._served: dict[int, bool] = {}  # broker -> its ApiVersions answer arrived
        self._inflight: dict[int, int] = {}
        self.sent: dict[int, int] = {}  # api key -> requests sent
        self.answered_ok: dict[int, int] = {}  # api key -> answers whose top-level error (if any) is none

    def start(self) -> None:
        self.loop.call_later(FUZZ_TICK_MS * US_PER_MS, self._tick)

    def on_disconnected(self, peer_id: int) -> None:
        self._served.pop(peer_id, None)
        super().on_disconnected(peer_id)

    def on_message(self, peer_id: int, data: bytes) -> None:
        try:
            super().on_message(peer_id, data)
        except (KafkaError, struct.error, ValueError) as error:
            self._inflight[peer_id] = max(0, self._inflight.get(peer_id, 0) - 1)
            correlation_id = _CORRELATION.unpack_from(data, 5)[0] if len(data) >= 9 else -1
            self.checkers.violate("answers_decode", f"{self.name}: node {peer_id}'s answer to correlation id "
                                                    f"{correlation_id} does not decode: {error}")

    def _tick(self) -> None:
        if not self.running:
            return
        for broker_id in sorted(self.connected):
            if broker_id not in self._served:
                self._served[broker_id] = False
                self.send(broker_id, ApiKey.API_VERSIONS, API_VERSIONS_VERSION,
                          messages.ApiVersionsRequest(client_software_name="fuzz", client_software_version="1"),
                          lambda response, b=broker_id: self._on_api_versions(b, response))
            elif self._served[broker_id] and self._inflight.get(broker_id, 0) < FUZZ_INFLIGHT_MAX:
                self._send_drawn(broker_id)
        self.loop.call_later(FUZZ_TICK_MS * US_PER_MS, self._tick)

    def _on_api_versions(self, broker_id: int, response: Any) -> None:
        if response is None or response.error_code:
            self._served.pop(broker_id, None)
            return
        self.fuzzer.serve({api.api_key: (api.min_version, api.max_version) for api in response.api_keys})
        self._served[broker_id] = True

    def _send_drawn(self, broker_id: int) -> None:
        api_key, version, request = self.fuzzer.request()
        routed = self.fuzzer.route(request)
        if routed in self.connected and self._served.get(routed) and self.rng.random() < 0.9:
            broker_id = routed
        if api_key == ApiKey.PRODUCE and request.acks == 0:
            request.acks = 1  # an acks=0 produce gets no answer; it would only wait out its timeout
        if self.send(broker_id, api_key, version, request,
                     lambda response: self._on_answer(broker_id, api_key, request, response)):
            self._inflight[broker_id] = self._inflight.get(broker_id, 0) + 1
            self.sent[api_key] = self.sent.get(api_key, 0) + 1

    def _on_answer(self, broker_id: int, api_key: int, request: Any, response: Any) -> None:
        self._inflight[broker_id] = max(0, self._inflight.get(broker_id, 0) - 1)
        if response is None:
            return
        self.fuzzer.learn(response, request)
        if getattr(response, "error_code", 0) == 0:
            self.answered_ok[api_key] = self.answered_ok.get(api_key, 0) + 1


class FuzzSimulation(ClusterSimulation):
    """The cluster simulation with two fuzz clients (see the module docstring)."""

    checkers_class = FuzzCheckers
    extra_bugs = FUZZ_BUGS
    idle_phase_ms = 0
    metrics_ports = True  # so that the nodes offer client telemetry (KIP-714) too, to be fuzzed with the rest

    def _build_clients(self) -> None:
        super()._build_clients()
        self.fuzzers = [SimFuzzer(self, CLIENT_ID_BASE + 24 + index, f"fuzz{index}", self.checkers)
                        for index in range(2)]
        self.clients = [*self.clients, *self.fuzzers]

    def configure_node(self, state: Any) -> None:
        super().configure_node(state)
        if state.apis is not None:
            for bug in self.workload_bugs:
                setattr(state.apis, FUZZ_BUGS[bug], True)

    def _start_clients(self) -> None:
        super()._start_clients()
        for fuzzer in self.fuzzers:
            fuzzer.start()

    def _result(self) -> RunResult:
        result = super()._result()
        for fuzzer in self.fuzzers:
            result.stats[f"{fuzzer.name}_sent"] = sum(fuzzer.sent.values())
            result.stats[f"{fuzzer.name}_apis"] = len(fuzzer.sent)
            result.stats[f"{fuzzer.name}_answered_ok"] = sum(fuzzer.answered_ok.values())
        return result


def run(config: RunConfig) -> RunResult:
    """One fuzz simulation of `config` (see the module docstring). Raises ValueError for an unknown bug."""
    return cluster_sim.run(config, simulation_class=FuzzSimulation)
