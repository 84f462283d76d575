"""The group-migration workload: KIP-848's online migration between the classic and the consumer protocol.

Theory of operation. Everything of the groups workload (simulations/groups_sim.py) runs as it does there: the
whole cluster with its faults, three members with faults of their own (crash, clean leave, pause), the
coordinator's shards on `__consumer_offsets` of the same nodes. Each member switches protocol at every restart
(simulations/consumer_protocol_clients.py, `SimMigratingMember`): members 0 and 2 start classic (eager, range),
member 1 with the consumer protocol. So the group is converted back and forth under faults: a classic group
becomes a consumer group when a consumer-protocol member joins it (its classic members go on with JoinGroup,
SyncGroup and Heartbeat inside it), and a consumer group whose last consumer-protocol member leaves or is fenced
becomes a classic group of the members left. A classic member's next SyncGroup is sometimes slow (the
`slow_sync` fault: sent 1-4.5 s or 11-15 s after its JoinGroup answer while it heartbeats), so that classic
members of a consumer group meet its rebalance timeouts.

Checkers: the cluster's, plus
- generation_exclusive (classic members' SyncGroup answers, within one incarnation of the group: a group
  deleted and created again numbers its generations from the start), partition_exclusive (the coordinator's consumer
  groups, before every request and timer), commit_kept, group_delivery, coordinator_answers_prompt and
  late_sync_fenced, as in the groups and consumer-groups workloads;
- group_kind_follows_members: once the run has converged, the group is a consumer group exactly when one of
  its running members speaks the consumer protocol;
- conversion_keeps_assignments: a conversion either way keeps each member's partitions, when the group it came
  from was settled (a Stable classic group; a consumer group without pending revocations), checked on the
  coordinator's state before every request and timer;
- liveness (extended): after the faults heal every running member is at one generation (member epoch), the
  partitions are all owned, and the members have read up to each high watermark.

Planted bugs (`--bugs`): "upgrade_forgets_assignments" (an upgraded group's classic members keep no current
assignment in the consumer group, so their partitions go to others while they still read them) and
"no_downgrade" (a consumer group whose members are all classic stays one) and "no_classic_rebalance_timeouts"
(a classic member of a consumer group that does not join again when told to, or send its SyncGroup, within its
rebalance timeout is never fenced for it).
"""

from __future__ import annotations

from typing import Any

from coordinator.keys import partition_for_key
from groupcoord.classic import GroupState
from groupcoord.consumer import MemberState
from groupcoord.consumer_protocol import decode_assignment
from simulations import cluster_sim
from simulations.cluster_sim import configure_shards
from simulations.consumer_groups_sim import CONSUMER_GROUP_BUGS, ConsumerGroupCheckers, ConsumerGroupsSimulation
from simulations.consumer_protocol_clients import SimMigratingMember
from simulations.groups_sim import OFFSETS_PARTITIONS
from simulations.run import RunConfig, RunResult

MIGRATION_GROUP = "sim-migrating-group"
MIGRATION_CHECKER_NAMES = ("generation_exclusive", "partition_exclusive", "commit_kept", "group_delivery",
                           "coordinator_answers_prompt", "late_sync_fenced", "group_kind_follows_members",
                           "conversion_keeps_assignments")
# Members restart (and switch protocol) more often than in the groups workload: a migration every few seconds.
# slow_sync: the member's next SyncGroup as a classic member leaves 1-4.5 s or 11-15 s after its JoinGroup answer
# while it heartbeats (simulations/groups_sim.py SLOW_ASSIGN_MS): past the rebalance timeout it is removed
# from a classic group, fenced from a consumer group.
MIGRATION_FAULT_RATES = {"crash": 0.01, "leave": 0.01, "pause": 0.004, "slow_sync": 0.02}
MIGRATION_BUGS = {"upgrade_forgets_assignments": "bug_upgrade_forgets_assignments", "no_downgrade": "bug_no_downgrade",
                  "no_classic_rebalance_timeouts": "bug_no_classic_rebalance_timeouts"}


class MigrationCheckers(ConsumerGroupCheckers):
    """The consumer-groups checkers plus generation_exclusive, group_kind_follows_members and
    conversion_keeps_assignments (see the module docstring)."""

    extra_checker_names = MIGRATION_CHECKER_NAMES

    def __init__(self) -> None:
        super().__init__()
        self.upgrades = self.downgrades = 0  # conversions seen (statistics)
        self._last: dict[int, tuple[str | None, dict[str, frozenset[int]] | None]] = {}  # shard id -> snapshot

    def observe_shard(self, shard: Any, group_id: str) -> None:
        """Called before every request and timer a shard handles: a conversion since the last call must have
        kept each member's partitions (when the group it came from was settled: a Stable classic group, or a
        consumer group whose members all owned their partitions without pending revocations)."""
        kind, owned = _snapshot(shard, group_id)
        classic = shard.groups.get(group_id)
        if group_id not in shard.consumer_groups and (classic is None or classic.generation == 0):
            # No group, or one before its first generation: a group deleted (a failover between an empty consumer
            # group's tombstones and its classic successor's first record) numbers its generations from the start
            # again, as Kafka's does; generation_exclusive holds within one incarnation of the group.
            self.owners = {key: owners for key, owners in self.owners.items() if key[0] != group_id}
        last_kind, last_owned = self._last.get(id(shard), (None, None))
        self._last[id(shard)] = (kind, owned)
        if last_kind is None or kind is None or kind == last_kind:
            return
        self.conversions += 1
        if kind == "consumer":
            self.upgrades += 1
        else:
            self.downgrades += 1
        if last_owned is None or owned is None:
            return
        for member_id, partitions in sorted(last_owned.items()):
            if member_id in owned and owned[member_id] != partitions:
                self.violate("conversion_keeps_assignments",
                             f"group {group_id} turned {kind}: member {member_id} owned {sorted(partitions)}, "
                             f"now {sorted(owned[member_id])}")


def _snapshot(shard: Any, group_id: str) -> tuple[str | None, dict[str, frozenset[int]] | None]:
    """The group's kind in this shard and, when settled, each member's partitions."""
    consumer_group = shard.consumer_groups.get(group_id)
    if consumer_group is not None:
        members = consumer_group.members.values()
        if any(m.revoking or m.state is not MemberState.STABLE for m in members):
            return "consumer", None
        return "consumer", {m.member_id: frozenset(p for ps in m.assigned.values() for p in ps) for m in members}
    classic = shard.groups.get(group_id)
    if classic is None or not classic.members:
        return None, None
    if classic.state is not GroupState.STABLE:
        return "classic", None
    return "classic", {m.member_id: frozenset(p for ps in decode_assignment(m.assignment).values() for p in ps)
                       for m in classic.members.values()}


class GroupMigrationSimulation(ConsumerGroupsSimulation):
    """The consumer-groups simulation with members that switch protocol (see the module docstring)."""

    checkers_class = MigrationCheckers
    extra_bugs = {**CONSUMER_GROUP_BUGS, **MIGRATION_BUGS}
    member_class = SimMigratingMember
    group_id = MIGRATION_GROUP
    group_fault_rates = MIGRATION_FAULT_RATES

    def configure_node(self, state: Any) -> None:
        super().configure_node(state)
        bugs = {flag for name, flag in MIGRATION_BUGS.items() if name in self.workload_bugs}
        checkers, group_id = self.checkers, self.group_id

        def configured(shard: Any) -> None:
            for flag in bugs:
                setattr(shard, flag, True)
            handle, poll = shard.handle, shard.poll

            def observed_handle(request_id: int, request: Any, now_ms: int) -> Any:
                checkers.observe_shard(shard, group_id)
                return handle(request_id, request, now_ms)

            def observed_poll(now_ms: int) -> Any:
                checkers.observe_shard(shard, group_id)
                return poll(now_ms)

            shard.handle, shard.poll = observed_handle, observed_poll

        configure_shards(state.coordinators.services[0].runtime, configured)

    def _final_checks(self) -> None:
        super()._final_checks()
        shard = self._group_shard()
        if shard is None:
            return
        speaks_consumer = [m.name for m in self.members if m.running and not m.classic]
        is_consumer_group = self.group_id in shard.consumer_groups
        if is_consumer_group != bool(speaks_consumer):
            kind = "a consumer group" if is_consumer_group else "not a consumer group"
            self.checkers.violate("group_kind_follows_members",
                                  f"group {self.group_id} is {kind} with consumer-protocol members {speaks_consumer}")

    def _group_shard(self) -> Any:
        shard_partition = partition_for_key(self.group_id, OFFSETS_PARTITIONS)
        for process in self.processes.values():
            shard = process.state.coordinators.services[0].runtime.shard(shard_partition)
            if shard is not None:
                return shard
        return None

    def _result(self) -> RunResult:
        result = super()._result()
        result.stats["protocol_switches"] = sum(m.switches for m in self.members)
        result.stats["upgrades"], result.stats["downgrades"] = self.checkers.upgrades, self.checkers.downgrades
        return result


def run(config: RunConfig) -> RunResult:
    """One group-migration simulation of `config` (see the module docstring)."""
    return cluster_sim.run(config, simulation_class=GroupMigrationSimulation)
