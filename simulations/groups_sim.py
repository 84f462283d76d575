"""The groups workload: the whole-cluster simulation plus a consumer group under faults.

Theory of operation. Everything of the cluster workload (simulations/cluster_sim.py: three real nodes,
producers with acks, a reader, every node fault and network fault) runs as it does there; on top, three
members of group `sim-group` (simulations/group_clients.py, the classic protocol over the codec) share the
topic's partitions, consume, commit and rebalance through the real group coordinator, whose shards live on
`__consumer_offsets` partitions of those same nodes (so coordinator failover, truncation and power loss
all happen to it). The members have faults of their own (`GROUP_FAULT_RATES`, per 100 ms of the fault
phase): crash (no LeaveGroup; restarted after a while with a new member id), clean leave (restarted later),
pause (a stalled process that resumes with its old generation, after its session may have expired) and, for
the classic members of this workload only (`CLASSIC_GROUP_FAULT_RATES`, which also pauses them more often),
slow_assign (the next time the member leads a generation, its assignor takes `SLOW_ASSIGN_MS` while it
heartbeats).

Checkers: the cluster's, plus generation_exclusive, commit_kept, group_delivery, coordinator_answers_prompt,
parked_sync_answered and late_sync_fenced (simulations/group_checkers.py; the last three read the faults from
the trace as one of its listeners); liveness also waits for one Stable generation that owns every partition
and has read up to each high watermark.

Planted bugs (`--bugs`): "commit_before_hw" (the coordinator runtime answers before the high watermark passes
the write), "stale_generation_commit" (commits of an older generation are accepted) and
"poll_ignores_changes" (the coordinator runtimes are told that nothing changed, so an answer held for the high
watermark leaves only at the shard's next timer, the next request to its partition, or its write timeout),
"expire_parked_members" (a member waiting in a parked JoinGroup or SyncGroup is expired for its session) and
"no_pending_sync_expiry" (a member that sends no SyncGroup within the rebalance timeout is never removed).
"""

from __future__ import annotations

from typing import Any

from coordinator.keys import partition_for_key
from simulations import cluster_sim
from simulations.cluster_sim import CLIENT_ID_BASE, PARTITIONS, TOPIC, ClusterShape, ClusterSimulation, \
    configure_shards
from simulations.group_checkers import GroupCheckers
from simulations.group_clients import SimGroupConsumer
from simulations.loop import US_PER_MS, Trace
from simulations.run import RunConfig, RunResult

GROUP = "sim-group"
MEMBERS = 3
OFFSETS_PARTITIONS = 3
GROUP_FAULT_STEP_MS = 100
GROUP_FAULT_RATES = {"crash": 0.004, "leave": 0.002, "pause": 0.004}
# Classic members pause more often: a member stalled past its session that resumes with its old generation is
# the classic protocol's own hazard (stale_generation_commit), and once JoinGroup and SyncGroup waited as long as
# a real client's, spurious rejoins no longer made it common at the lower rate (none of 1,278 seeds at 60 s).
CLASSIC_PAUSE_RATE = 0.01
# The classic members' faults add a slow leader: the member's next assignment, if it leads, takes a second or
# more while it heartbeats. Half the draws stay inside the rebalance timeout but outlive the followers'
# session (which a parked SyncGroup must not expire), half outlive the rebalance timeout and the write timeout
# after it (the leader must be removed for its missing SyncGroup, the followers told to rejoin).
CLASSIC_GROUP_FAULT_RATES = {**GROUP_FAULT_RATES, "pause": CLASSIC_PAUSE_RATE, "slow_assign": 0.03}
SLOW_ASSIGN_MS = ((1_000, 4_500), (11_000, 15_000))
MEMBER_DOWN_MS_MIN, MEMBER_DOWN_MS_MAX = 500, 6_000
GROUP_BUGS = {"commit_before_hw": "bug_answer_before_commit", "stale_generation_commit": "bug_accept_stale_generation",
              "poll_ignores_changes": "bug_poll_ignores_changes", "expire_parked_members": "bug_expire_parked_members",
              "no_pending_sync_expiry": "bug_no_pending_sync_expiry"}
CLASSIC_SHARD_BUGS = ("stale_generation_commit", "expire_parked_members", "no_pending_sync_expiry")


class GroupsSimulation(ClusterSimulation):
    """The cluster simulation with a consumer group (see the module docstring)."""

    checkers_class = GroupCheckers
    extra_bugs = GROUP_BUGS
    idle_phase_ms = 0  # the cluster workload's idle phase (its traces stay as they were)
    member_class: type = SimGroupConsumer
    group_fault_rates = CLASSIC_GROUP_FAULT_RATES
    group_id = GROUP
    broker_settings_extra = {
        "offsets_topic_num_partitions": OFFSETS_PARTITIONS,
        "group_min_session_timeout_ms": 1_000,
        "group_initial_rebalance_delay_ms": 500,
    }

    def __init__(self, config: RunConfig, trace: Trace, shape: ClusterShape | None = None) -> None:
        super().__init__(config, trace, shape)
        self.loop.trace.listeners.append(self.checkers.fault_windows.observe_trace_line)

    def configure_node(self, state: Any) -> None:
        service = state.coordinators.services[0]
        checkers = self.checkers

        def made(shard: Any) -> None:
            checkers.shards_made += 1

        configure_shards(service.runtime, made)
        if "commit_before_hw" in self.workload_bugs:
            service.runtime.bug_answer_before_commit = True
        for bug in CLASSIC_SHARD_BUGS:
            if bug in self.workload_bugs:
                configure_shards(service.runtime, lambda shard, flag=GROUP_BUGS[bug]: setattr(shard, flag, True))
        if "poll_ignores_changes" in self.workload_bugs:
            state.coordinators.bug_poll_ignores_changes = True

    def _build_clients(self) -> None:
        super()._build_clients()
        self.members = [self.member_class(self, CLIENT_ID_BASE + 20 + i, f"member-{i}", self.group_id, TOPIC,
                                          PARTITIONS, self.checkers, self.checkers.observe_group_record)
                        for i in range(MEMBERS)]
        self.clients = [*self.clients, *self.members]
        self._group_rng = self.loop.derive_rng("group-faults")
        self._members_down: set[int] = set()

    def _start_clients(self) -> None:
        super()._start_clients()
        for member in self.members:
            member.start()
        if self._faults_on:
            self.loop.call_later(GROUP_FAULT_STEP_MS * US_PER_MS, self._group_fault_step)

    # --- the members' faults ---------------------------------------------------------------------------------

    def _group_fault_step(self) -> None:
        if not self._fault_phase:
            return
        rng = self._group_rng
        for kind, rate in self.group_fault_rates.items():
            if rng.random() < rate:
                candidates = [i for i, m in enumerate(self.members) if m.running and not m.paused]
                if candidates:
                    self._member_fault(kind, rng.choice(candidates))
        self.loop.call_later(GROUP_FAULT_STEP_MS * US_PER_MS, self._group_fault_step)

    def _member_fault(self, kind: str, index: int) -> None:
        member = self.members[index]
        if kind in ("slow_assign", "slow_sync"):  # a slow leader's assignor; a member slow to send any SyncGroup
            low, high = self._group_rng.choice(SLOW_ASSIGN_MS)
            member.assign_slowly(self._group_rng.randint(low, high), leader_only=kind == "slow_assign")
            return
        down_us = self._group_rng.randint(MEMBER_DOWN_MS_MIN, MEMBER_DOWN_MS_MAX) * US_PER_MS
        if kind == "pause":
            member.pause()
            self.loop.call_later(down_us, self._resume_member, index)
            return
        member.crash() if kind == "crash" else member.leave()
        self._members_down.add(index)
        self.loop.call_later(down_us, self._restart_member, index)

    def _resume_member(self, index: int) -> None:
        if self.members[index].paused:
            self.members[index].resume()

    def _restart_member(self, index: int) -> None:
        if index in self._members_down:
            self._members_down.discard(index)
            self.members[index].restart()

    def _heal_everything(self) -> None:
        super()._heal_everything()
        for index, member in enumerate(self.members):
            if member.paused:
                member.resume()
            if not member.running:
                self._members_down.discard(index)
                member.restart()

    # --- convergence and final checks ------------------------------------------------------------------------

    def _lagging(self) -> str | None:
        lagging = super()._lagging()
        if lagging is not None:
            return lagging
        members = self.members
        if any(not m.running or m.state != "stable" for m in members):
            return f"members not stable: {[(m.name, m.state) for m in members]}"
        generations = {m.generation for m in members}
        if len(generations) != 1:
            return f"members in generations {sorted(generations)}"
        owned = sorted(p for m in members for p in m.assignment)
        if owned != list(range(PARTITIONS)):
            return f"partitions owned {owned}"
        for member in members:
            for partition in member.assignment:
                replica = self._leader_replica(TOPIC, partition)
                high_watermark = replica.high_watermark if replica is not None else 0
                if member.positions.get(partition, 0) < high_watermark:
                    return f"{member.name} at {member.positions.get(partition)} of {TOPIC}-{partition} < {high_watermark}"
        return None

    def _final_checks(self) -> None:
        super()._final_checks()
        self.checkers.check_group_delivery()
        self.checkers.check_final_commits(self.group_id, self._committed_offsets())

    def _committed_offsets(self) -> dict[int, int]:
        """The group's committed offsets, read from the shard that coordinates it now."""
        shard_partition = partition_for_key(self.group_id, OFFSETS_PARTITIONS)
        for process in self.processes.values():
            shard = process.state.coordinators.services[0].runtime.shard(shard_partition)
            if shard is not None:
                offsets = shard.offsets.committed.get(self.group_id, {})
                return {partition: value.offset for (topic, partition), value in offsets.items() if topic == TOPIC}
        return {}

    def _result(self) -> RunResult:
        result = super()._result()
        result.stats.update({
            "group_records": sum(m.records for m in self.members),
            "commits_acked": self.checkers.commits_acked,
            "assignments": self.checkers.assignments_seen,
            "quiet_answers": self.checkers.quiet_answers,
            "quiet_answer_ms_max": self.checkers.quiet_answer_ms_max,
            "parked_syncs": self.checkers.parked_syncs,
            "parked_sync_ms_max": self.checkers.parked_sync_ms_max,
            "late_syncs": self.checkers.late_syncs,
        })
        return result


def run(config: RunConfig) -> RunResult:
    """One groups simulation of `config` (see the module docstring). Raises ValueError for an unknown bug."""
    return cluster_sim.run(config, simulation_class=GroupsSimulation)
