"""The consumer-protocol workload: the groups workload with a KIP-848 consumer group instead of a classic one.

Theory of operation. Everything of the groups workload (simulations/groups_sim.py) runs as it does there: the
whole cluster with its faults, three members with faults of their own (crash, clean leave, pause), the
coordinator's shards on `__consumer_offsets` of the same nodes. The members speak the consumer protocol
(simulations/consumer_protocol_clients.py): ConsumerGroupHeartbeat with server-side assignment and
incremental reconciliation, commits with their member epoch (OffsetCommit v9).

Checkers: the cluster's, plus
- partition_exclusive: no partition has two owners at once. Checked on the coordinator's own state before
  every request and timer it handles (what its records made of the group): every partition is in the
  assigned or pending-revocation set of at most one member. A member gets a partition only after its old
  owner reported it revoked (or was fenced);
- epoch_bump_has_cause: a heartbeat raises the group epoch only with a member joining, leaving or changing its
  subscription. The workload's topic never changes, so the subscribed topics' partitions are never a cause once
  the group has its first target; a coordinator that loaded the group after a failover keeps its epoch;
- commit_kept, group_delivery and coordinator_answers_prompt, as in the groups workload
  (simulations/group_checkers.py);
- liveness (extended): after the faults heal every running member is at one member epoch, the partitions
  are all owned, and the members have read up to each high watermark.

Planted bugs (`--bugs`): "assign_unreleased" (a partition still owned by another member is handed to its new
owner at once, without waiting for the revocation), "partition_metadata_volatile" (the subscribed topics'
metadata is not written, so the first heartbeat after a load bumps the epoch), "commit_before_hw" and
"poll_ignores_changes" (as in the groups workload; here the members' heartbeats come often enough that a held
answer leaves at the next request to its partition, a few hundred milliseconds late rather than seconds).
"""

from __future__ import annotations

from typing import Any

from groupcoord import consumer_records as cr
from groupcoord.records import decode_record
from simulations import cluster_sim
from simulations.cluster_sim import configure_shards
from simulations.consumer_protocol_clients import SimConsumerProtocolMember
from simulations.group_checkers import GroupCheckers
from simulations.groups_sim import GROUP_FAULT_RATES, GroupsSimulation
from simulations.run import RunConfig, RunResult

CONSUMER_GROUP = "sim-consumer-group"
CONSUMER_GROUP_CHECKER_NAMES = ("partition_exclusive", "epoch_bump_has_cause", "commit_kept", "group_delivery",
                                "coordinator_answers_prompt")
CONSUMER_GROUP_BUGS = {"assign_unreleased": "bug_assign_unreleased_partitions",
                       "partition_metadata_volatile": "bug_partition_metadata_volatile",
                       "commit_before_hw": "bug_answer_before_commit",
                       "poll_ignores_changes": "bug_poll_ignores_changes"}
SESSION_TIMEOUT_MS = 3_000
HEARTBEAT_INTERVAL_MS = 500


class ConsumerGroupCheckers(GroupCheckers):
    """The groups workload's checkers with partition_exclusive in place of generation_exclusive."""

    extra_checker_names = CONSUMER_GROUP_CHECKER_NAMES
    stale_generations_checked = False  # a member's commit is checked against its own epoch (group_checkers.py)

    def check_exclusive_owners(self, groups: dict) -> None:
        """Every partition in at most one member's assigned or pending-revocation partitions."""
        for group in groups.values():
            seen: dict[tuple, str] = {}
            for member in group.members.values():
                for assignment in (member.assigned, member.revoking):
                    for topic_id, partitions in assignment.items():
                        for partition in partitions:
                            owner = seen.setdefault((topic_id, partition), member.member_id)
                            if owner != member.member_id:
                                self.violate("partition_exclusive", f"group {group.group_id}: partition "
                                                                    f"{partition} owned by {owner} and "
                                                                    f"{member.member_id} at group epoch "
                                                                    f"{group.group_epoch}")

    def check_epoch_bump_cause(self, epochs_before: dict[str, int], request: Any, result: Any) -> None:
        """A heartbeat's records raise a group's epoch only with a member joining, leaving or changing its
        subscription (a member metadata record or its tombstone in the same records). This workload's topic
        never changes, so once the group's target assigns its partitions the topic is no cause; before that
        (`epochs_before` leaves such a group out), the topic appearing in the coordinator's image is one."""
        message = getattr(request, "message", None)
        if type(message).__name__ != "ConsumerGroupHeartbeatRequest" or message.group_id not in epochs_before:
            return
        decoded = [decode_record(record.key, record.value) for record in result.records]
        bumped = [value.epoch for key, value in decoded if isinstance(key, cr.ConsumerGroupMetadataKey)
                  and key.group == message.group_id and value is not None
                  and value.epoch > epochs_before[message.group_id] > 0]
        if bumped and not any(isinstance(key, cr.ConsumerGroupMemberMetadataKey) for key, _ in decoded):
            self.violate("epoch_bump_has_cause", f"group {message.group_id}: a heartbeat of member "
                                                 f"{message.member_id} at epoch {message.member_epoch} raised the "
                                                 f"group epoch {epochs_before[message.group_id]} -> {bumped[0]} "
                                                 "with no member joining, leaving or changing its subscription")


class ConsumerGroupsSimulation(GroupsSimulation):
    """The groups simulation with KIP-848 members (see the module docstring)."""

    checkers_class = ConsumerGroupCheckers
    extra_bugs = CONSUMER_GROUP_BUGS
    member_class = SimConsumerProtocolMember
    group_fault_rates = GROUP_FAULT_RATES  # no slow leader: the consumer protocol's assignor is the coordinator's
    group_id = CONSUMER_GROUP
    broker_settings_extra = {
        **GroupsSimulation.broker_settings_extra,
        "group_consumer_session_timeout_ms": SESSION_TIMEOUT_MS,
        "group_consumer_heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
    }

    def configure_node(self, state: Any) -> None:
        super().configure_node(state)
        buggy = "assign_unreleased" in self.workload_bugs
        volatile_metadata = "partition_metadata_volatile" in self.workload_bugs
        checkers = self.checkers

        def checked(shard: Any) -> None:
            shard.bug_assign_unreleased_partitions = buggy
            shard.bug_partition_metadata_volatile = volatile_metadata
            handle, poll = shard.handle, shard.poll

            def checked_handle(request_id: int, request: Any, now_ms: int) -> Any:
                checkers.check_exclusive_owners(shard.consumer_groups)
                epochs = {group_id: group.group_epoch for group_id, group in shard.consumer_groups.items()
                          if any(group.target.values())}
                result = handle(request_id, request, now_ms)
                checkers.check_epoch_bump_cause(epochs, request, result)
                return result

            def checked_poll(now_ms: int) -> Any:
                checkers.check_exclusive_owners(shard.consumer_groups)
                return poll(now_ms)

            shard.handle, shard.poll = checked_handle, checked_poll

        configure_shards(state.coordinators.services[0].runtime, checked)


def run(config: RunConfig) -> RunResult:
    """One consumer-protocol simulation of `config` (see the module docstring)."""
    return cluster_sim.run(config, simulation_class=ConsumerGroupsSimulation)
