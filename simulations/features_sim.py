"""The features workload: the cluster workload while an administrator changes transaction.version (KIP-584).

Theory of operation. Everything of the cluster workload (simulations/cluster_sim.py: producers, a consumer,
every node and network fault) runs as it does there. An administrator ("features-admin") sends UpdateFeatures
every `FLIP_MS` through the first `FLIPPING_SHARE` of the fault phase, to a level drawn from 0-2 (a downgrade
typed as one), each retried every `RETRY_MS` until answered without error; then it sets `FINAL_LEVEL` and stops changing it,
while the faults go on (crashed nodes restart and register again). All along it asks a random broker for
ApiVersions every `ASK_MS`.

An answer that never comes leaves the administrator unsure: the broker may still forward the request, which
then applies after later changes (a broker forwards for up to its controller call timeout, longer than a
client waits). So before the last change it does what an operator does after a timeout: it waits until such a
request can no longer apply (`STALE_MS`), reads the level an ApiVersions answer finalizes, and changes it from
there (a refusal of its upgrade type, INVALID_UPDATE_VERSION, sends it back to that wait and read).

Checkers:
- `feature_gates_follow_level`: every ApiVersions answer advertises EndTxn v5 and TxnOffsetCommit v5 exactly
  when the transaction.version it finalizes in the same answer is 2 (broker/transactions.py's gates).
- `feature_level_as_set`: once the faults have healed and the cluster is idle, every node's metadata image
  holds transaction.version at the level the administrator last set (the run is live only once that last
  change is answered).

Planted bugs: `--bugs features_bootstrap_every_registration` (the controller writes its bootstrap level with
every registration, not only while the log has none: a node restarted after the administrator's last change
puts the bootstrap level back) and `--bugs features_gates_fixed` (the version gates are set once at start and
never follow the image).
"""

from __future__ import annotations

from typing import Any

from broker.controller_core import PROPOSAL_TIMEOUT_MS
from broker.transactions import END_TXN_VERSION_BUMPS_EPOCH
from metadata.features import SAFE_DOWNGRADE, TRANSACTION_VERSION, UPGRADE
from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode
from simulations import cluster_sim
from simulations.cluster_checkers import ClusterCheckers
from simulations.cluster_sim import CLIENT_ID_BASE, PARTITIONS, TOPIC, ClusterSimulation
from simulations.kafka_clients import KafkaClientBase
from simulations.loop import US_PER_MS
from broker.controller_calls import CONTROLLER_CALL_TIMEOUT_MS
from simulations.run import RunConfig, RunResult

DESCRIPTION = "the cluster workload while an administrator changes transaction.version with UpdateFeatures"
FLIP_MS = 1_500
ASK_MS = 400
RETRY_MS = 200
FLIPPING_SHARE = 0.4  # of the fault phase; the level stays put after it while faults go on
FINAL_LEVEL = 1  # not the bootstrap level, so that a registration writing the bootstrap level shows
# After a lost answer: how long the request may still apply (a broker's forward, then the controller's proposal)
STALE_MS = CONTROLLER_CALL_TIMEOUT_MS + PROPOSAL_TIMEOUT_MS
UPDATE_FEATURES_VERSION = 1
API_VERSIONS_VERSION = 4
FEATURE_CHECKER_NAMES = ("feature_gates_follow_level", "feature_level_as_set")
FEATURE_BUGS = {"features_bootstrap_every_registration": "bug_bootstrap_every_registration",
                "features_gates_fixed": "bug_gates_fixed"}


class FeatureCheckers(ClusterCheckers):
    """The cluster workload's checkers plus the features ones (see the module docstring)."""

    extra_checker_names = (*ClusterCheckers.extra_checker_names, *FEATURE_CHECKER_NAMES)

    def __init__(self) -> None:
        super().__init__()
        self.answers = 0

    def observe_api_versions(self, broker_id: int, response: Any) -> None:
        self.answers += 1
        level = finalized_level(response)
        versions = {key.api_key: key.max_version for key in response.api_keys}
        bumps = level >= 2
        expected = END_TXN_VERSION_BUMPS_EPOCH if bumps else END_TXN_VERSION_BUMPS_EPOCH - 1
        seen = (versions.get(ApiKey.END_TXN), versions.get(ApiKey.TXN_OFFSET_COMMIT))
        if seen != (expected, expected):
            self.violate("feature_gates_follow_level", f"broker {broker_id} finalizes {TRANSACTION_VERSION} {level} "
                                                       f"but advertises EndTxn/TxnOffsetCommit up to {seen}")


class SimFeatureAdmin(KafkaClientBase):
    """Changes transaction.version, then leaves it at FINAL_LEVEL; asks for ApiVersions all along."""

    def __init__(self, host: Any, client_id: int, on_api_versions) -> None:
        super().__init__(host, client_id, "features-admin", TOPIC, PARTITIONS)
        self.on_api_versions = on_api_versions
        self.level_rng = self.loop.derive_rng("features-admin")
        self.current = 2  # the level as last answered without error (the bootstrap level before)
        self.target = 2
        self.flipping_until_us = 0
        self._next_change_us = 0
        self.flips = 0
        self._inflight = False
        self.lost_at_us: int | None = None  # the last answer lost (or type refused) since the level was read
        self._confirm = False  # send the final level even if it is the level read (a broker's image may lag)
        self.observed: tuple[int, int] | None = None  # (level, when) of the last ApiVersions answer to this admin

    def start(self, flipping_until_us: int) -> None:
        self.flipping_until_us = flipping_until_us
        self._next_change_us = self.loop.now_us + FLIP_MS * US_PER_MS
        self.loop.call_later(RETRY_MS * US_PER_MS, self._flip)
        self.loop.call_later(ASK_MS * US_PER_MS, self._ask)

    def _flip(self) -> None:
        if not self.running:
            return
        now_us = self.loop.now_us
        if now_us >= self.flipping_until_us and self.lost_at_us is not None:
            # Before the last change: wait until a lost request cannot apply any more, then read the level. The
            # answering broker's image may lag, so the final level is sent even when it is the level read.
            if self.observed is None or self.observed[1] < self.lost_at_us + STALE_MS * US_PER_MS:
                self.loop.call_later(RETRY_MS * US_PER_MS, self._flip)
                return
            self.current, self.target, self._confirm = self.observed[0], FINAL_LEVEL, True
            self.lost_at_us = None
            self.host.trace("client.features_read", TRANSACTION_VERSION, self.current)
        if self.target == self.current and now_us >= self._next_change_us:  # the last change is done
            if now_us < self.flipping_until_us:
                self.target = self.level_rng.choice([level for level in (0, 1, 2) if level != self.current])
            else:
                self.target = FINAL_LEVEL
            self._next_change_us = now_us + FLIP_MS * US_PER_MS
        broker_id = self.any_broker()
        if (self.target != self.current or self._confirm) and broker_id is not None and not self._inflight:
            request_class = messages.UpdateFeaturesRequest
            target = self.target
            request = request_class(feature_updates=[request_class.FeatureUpdateKey(
                feature=TRANSACTION_VERSION, max_version_level=target,
                upgrade_type=UPGRADE if target >= self.current else SAFE_DOWNGRADE)])
            self._inflight = self.send(broker_id, ApiKey.UPDATE_FEATURES, UPDATE_FEATURES_VERSION, request,
                                       lambda response: self._on_update(response, target))
        self.loop.call_later(RETRY_MS * US_PER_MS, self._flip)

    def _on_update(self, response: Any, target: int) -> None:
        self._inflight = False
        if response is None or response.error_code == ErrorCode.INVALID_UPDATE_VERSION:
            self.lost_at_us = self.loop.now_us
            return
        if response.error_code != ErrorCode.NONE:
            return  # tried again; a change that committed unanswered is answered NONE then (nothing to write)
        self.current = target
        self._confirm = False
        self.flips += 1
        self.host.trace("client.features", TRANSACTION_VERSION, target)

    @property
    def settled(self) -> bool:
        return self.current == self.target == FINAL_LEVEL and self.lost_at_us is None and not self._confirm

    def _ask(self) -> None:
        if not self.running:
            return
        broker_id = self.any_broker()
        if broker_id is not None:
            request = messages.ApiVersionsRequest(client_software_name="features-admin", client_software_version="1")
            self.send(broker_id, ApiKey.API_VERSIONS, API_VERSIONS_VERSION, request,
                      lambda response: self._on_api_versions(broker_id, response))
        self.loop.call_later(ASK_MS * US_PER_MS, self._ask)

    def _on_api_versions(self, broker_id: int, response: Any) -> None:
        if response is None or response.error_code != ErrorCode.NONE:
            return
        self.observed = (finalized_level(response), self.loop.now_us)
        self.on_api_versions(broker_id, response)


def finalized_level(response: Any) -> int:
    """The transaction.version an ApiVersions answer finalizes (0: none)."""
    return {f.name: f.max_version_level for f in response.finalized_features}.get(TRANSACTION_VERSION, 0)


class FeatureSimulation(ClusterSimulation):
    """The cluster simulation with transaction.version changing (see the module docstring)."""

    checkers_class = FeatureCheckers
    extra_bugs = {**ClusterSimulation.extra_bugs, **FEATURE_BUGS}

    def _build_clients(self) -> None:
        super()._build_clients()
        self.feature_admin = SimFeatureAdmin(self, CLIENT_ID_BASE + 25, self.checkers.observe_api_versions)
        self.clients = [*self.clients, self.feature_admin]

    def configure_node(self, state: Any) -> None:
        super().configure_node(state)
        state.controller.bug_bootstrap_every_registration = "features_bootstrap_every_registration" in \
            self.workload_bugs
        transactions = getattr(state, "transactions", None)
        if transactions is not None:
            transactions.bug_gates_fixed = "features_gates_fixed" in self.workload_bugs

    def _start_clients(self) -> None:
        super()._start_clients()
        self.feature_admin.start(int(self.config.duration_s * FLIPPING_SHARE * 1_000_000))

    def _lagging(self) -> str | None:
        if not self.feature_admin.settled:
            return f"{TRANSACTION_VERSION} not yet set to {FINAL_LEVEL} for good"
        return super()._lagging()

    def _check_idle(self) -> None:
        super()._check_idle()
        expected = self.feature_admin.current
        for node_id in sorted(self.processes):
            level = self.processes[node_id].state.metadata_image.features.levels.get(TRANSACTION_VERSION)
            if level != expected:
                self.checkers.violate("feature_level_as_set", f"node {node_id}'s image holds {TRANSACTION_VERSION} "
                                                              f"{level} after the run, the administrator last set "
                                                              f"{expected}")

    def _result(self) -> RunResult:
        result = super()._result()
        result.stats["feature_flips"] = self.feature_admin.flips
        result.stats["feature_level"] = self.feature_admin.current
        result.stats["api_versions_answers"] = self.checkers.answers
        return result


def run(config: RunConfig) -> RunResult:
    """One features simulation of `config` (see the module docstring). Raises ValueError for an unknown bug."""
    return cluster_sim.run(config, simulation_class=FeatureSimulation)
