"""The follower-fetch workload: the whole-cluster simulation with consumers reading from the closest replica
(KIP-392).

Theory of operation. Everything of the cluster workload (simulations/cluster_sim.py: real nodes, producers with
acks=all and acks=1, a reader, every node and network fault) runs as it does there, with two changes: node n is
in rack "rack-n" and the brokers run `replica_selector = "rack"`; the reader has a `client.rack` (the rack of a
node drawn from the seed), and it fetches as a client of Kafka 3.9's newest Fetch version does (v17: the topic
by its id, each partition with the epoch of the last batch it consumed, whose divergence a replica answers with a
DivergingEpoch that the reader validates at the leader; simulations/kafka_clients.py). A leader that is not in
the reader's rack names an in-sync replica there as the
preferred read replica; the reader then fetches from that follower, as librdkafka does, until a fetch there
fails or `PREFERRED_REPLICA_MS` pass, and asks the leader again. Followers serve it up to their own high
watermark, which trails the leader's, so every fault that moves leaders, truncates followers or cuts the
follower off from its leader meets a reader in the middle of its reads.

Checkers: the cluster's, and `consumed_not_truncated`: a DivergingEpoch answer that the leader confirms (its
log ends the epoch of the last batch the reader consumed before the reader's position) means records the reader
consumed below a high watermark are gone. `reads_committed` is the one follower reads can break: a record read
at or above the high watermark of its own answer, or read as one value and later as another (a follower that
served a record its truncation later removed). `liveness` catches a reader that a wrong DivergingEpoch keeps
from moving on. The stats count the redirects (`redirects`), the records read from a preferred read replica
(`follower_reads`) and the DivergingEpoch answers (`diverged`; a replica behind the reader answers one).

Planted bugs: `--bugs follower_reads_past_hw` (a follower serves what it holds, up to its log end, while it
reports its high watermark); `--bugs diverges_at_epoch_end` (a replica tells a fetcher whose position is the
end offset of its last fetched epoch, as at every leader change, that its epoch diverged).
"""

from __future__ import annotations

from typing import Any

from simulations import cluster_sim
from simulations.cluster_checkers import ClusterCheckers
from simulations.cluster_sim import ClusterSimulation
from simulations.run import RunConfig, RunResult

DESCRIPTION = "the whole cluster with a reader fetching from the replica in its rack (KIP-392), by topic id (Fetch v17)"
FOLLOWER_FETCH_BUGS = {"follower_reads_past_hw": "bug_follower_reads_past_hw",
                       "diverges_at_epoch_end": "bug_diverges_at_epoch_end"}
READER_FETCH_VERSION = 17


class FollowerFetchCheckers(ClusterCheckers):
    extra_checker_names = ("consumed_not_truncated",)

    def consumer_truncated(self, partition: int, position: int, epoch: int, end_offset: int) -> None:
        self.violate("consumed_not_truncated", f"partition {partition}: the reader consumed up to {position} in "
                                               f"epoch {epoch}, which the leader's log ends at {end_offset}")


class FollowerFetchSimulation(ClusterSimulation):
    extra_bugs = FOLLOWER_FETCH_BUGS
    checkers_class = FollowerFetchCheckers
    broker_settings_extra = {"replica_selector": "rack"}
    racks = True
    idle_phase_ms = 0

    def configure_node(self, state: Any) -> None:
        if state.broker is None:
            return
        if "follower_reads_past_hw" in self.workload_bugs:
            state.broker.bug_follower_reads_past_hw = True
        if "diverges_at_epoch_end" in self.workload_bugs:
            state.broker.bug_diverges_at_epoch_end = True

    def _build_clients(self) -> None:
        super()._build_clients()
        rack_node = self.loop.derive_rng("reader-rack").choice(self.node_ids)
        self.consumer.rack_id = f"rack-{rack_node}"
        self.consumer.use_fetch_version(READER_FETCH_VERSION)
        self.consumer.on_truncation = self.checkers.consumer_truncated
        self.trace("reader_rack", rack_node)

    def _result(self) -> RunResult:
        result = super()._result()
        result.stats["redirects"] = self.consumer.stats.redirects
        result.stats["follower_reads"] = self.consumer.stats.follower_records
        result.stats["diverged"] = self.consumer.stats.diverged
        return result


def run(config: RunConfig) -> RunResult:
    """One follower-fetch simulation of `config` (see the module docstring). Raises ValueError for an unknown
    bug."""
    return cluster_sim.run(config, simulation_class=FollowerFetchSimulation)
