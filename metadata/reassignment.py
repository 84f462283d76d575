"""Partition reassignment for one partition (Kafka's PartitionReassignmentReplicas, PartitionReassignmentRevert
and the reassignment steps of PartitionChangeBuilder).

Theory of operation: moving a partition from replicas C to target T happens in three committed steps, so that
no acknowledged write depends on a replica that has not caught up.
1. Start: replicas become T followed by the replicas being removed (C - T), with adding = T - C and
   removing = C - T. The new replicas are followers from now on: they fetch, catch up and are added to the
   ISR by the leader (AlterPartition), as any follower is.
2. Complete: as soon as the ISR without the removing replicas contains every target replica (checked after
   every change of the partition, in the same batch), replicas become T, the ISR loses the removing
   replicas, adding and removing are cleared, and a leader that is no longer a replica hands over to the
   first target replica in the ISR. A start whose target is already in the ISR (a reorder, or only removals)
   completes at once.
3. Cancel: back to the original replicas (the current ones without `adding`), the ISR without `adding`; when
   that leaves the ISR empty the first original replica is put back into it, which is an unclean election
   and refused unless the topic allows unclean elections.
Whenever the replica set loses a broker the leader epoch is bumped (the record names the leader even when
it stays), so the removed replicas' fetches are fenced. Pure: no state, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from metadata.image import PartitionRegistration
from metadata.records import NO_LEADER, PartitionChangeRecord


def is_reassigning(state: PartitionRegistration) -> bool:
    return bool(state.adding_replicas or state.removing_replicas)


def original_replicas(state: PartitionRegistration) -> tuple[int, ...]:
    """The replicas before the ongoing reassignment (Kafka's originalReplicas)."""
    return tuple(r for r in state.replicas if r not in state.adding_replicas)


def target_replicas(state: PartitionRegistration) -> tuple[int, ...]:
    """Where the ongoing reassignment is going (the replicas without the removing ones)."""
    return tuple(r for r in state.replicas if r not in state.removing_replicas)


def start_change(
    topic_id: bytes,
    partition: int,
    state: PartitionRegistration,
    target: tuple[int, ...],
    is_acceptable: Callable[[int], bool],
    bug_adding_in_sync: bool = False,
) -> PartitionChangeRecord | None:
    """The change that starts moving the partition to `target` (validated by the caller), completed at once
    when the target is already in sync; None when nothing changes. `bug_adding_in_sync` is a planted bug for
    the simulator (never a node's config): the new replicas count as in sync before they fetched anything, so
    the old replicas are dropped at once."""
    removing = tuple(sorted(set(state.replicas) - set(target)))
    adding = tuple(sorted(set(target) - set(state.replicas)))
    replicas = tuple(target) + removing
    isr = state.isr + adding if bug_adding_in_sync else state.isr
    return _build(topic_id, partition, state, replicas, isr, adding, removing, is_acceptable)


def completion_change(
    topic_id: bytes, partition: int, state: PartitionRegistration, is_acceptable: Callable[[int], bool]
) -> PartitionChangeRecord | None:
    """The change that completes the ongoing reassignment if its target is now in the ISR, else None."""
    if not is_reassigning(state):
        return None
    return _build(topic_id, partition, state, state.replicas, state.isr, state.adding_replicas,
                  state.removing_replicas, is_acceptable)


def cancel_change(
    topic_id: bytes,
    partition: int,
    state: PartitionRegistration,
    is_acceptable: Callable[[int], bool],
    unclean_allowed: bool,
) -> PartitionChangeRecord | None:
    """The change that reverts the ongoing reassignment. Raises ValueError when reverting needs an unclean
    election the topic does not allow (the caller answers INVALID_REPLICA_ASSIGNMENT)."""
    replicas = original_replicas(state)
    isr = tuple(r for r in state.isr if r not in state.adding_replicas)
    unclean = not isr
    if unclean:
        if not unclean_allowed:
            raise ValueError("reverting it would require an unclean leader election")
        isr = (replicas[0],)
    return _build(topic_id, partition, state, replicas, isr, (), (), is_acceptable, unclean=unclean)


def _build(
    topic_id: bytes,
    partition: int,
    state: PartitionRegistration,
    replicas: tuple[int, ...],
    isr: tuple[int, ...],
    adding: tuple[int, ...],
    removing: tuple[int, ...],
    is_acceptable: Callable[[int], bool],
    unclean: bool = False,
) -> PartitionChangeRecord | None:
    """PartitionChangeBuilder.build for these targets: complete if possible, elect, bump, diff."""
    if adding or removing:
        target_isr = tuple(r for r in isr if r not in removing)
        target = tuple(r for r in replicas if r not in removing)
        if target_isr and set(target) <= set(target_isr):
            replicas, isr, adding, removing = target, target_isr, (), ()
    leader = _elect(state.leader, replicas, isr, is_acceptable)
    if unclean and leader != NO_LEADER:
        isr = (leader,)
    record_leader = leader if leader != state.leader else None
    if record_leader is None and not set(state.replicas) <= set(replicas):
        record_leader = state.leader  # a replica leaves: bump the leader epoch to fence it
    change = PartitionChangeRecord(
        topic_id=topic_id,
        partition=partition,
        leader=record_leader,
        isr=isr if isr != state.isr else None,
        replicas=replicas if replicas != state.replicas else None,
        adding_replicas=adding if adding != state.adding_replicas else None,
        removing_replicas=removing if removing != state.removing_replicas else None,
    )
    unchanged = all(getattr(change, name) is None
                    for name in ("leader", "isr", "replicas", "adding_replicas", "removing_replicas"))
    return None if unchanged else change


def _elect(current: int, replicas: tuple[int, ...], isr: tuple[int, ...], is_acceptable: Callable[[int], bool]) -> int:
    """Kafka's electAnyLeader: keep an acceptable current leader still in the ISR and the replicas, else the
    first acceptable replica (in replica order) in the ISR, else none."""
    if current != NO_LEADER and current in isr and current in replicas and is_acceptable(current):
        return current
    for replica in replicas:
        if replica in isr and is_acceptable(replica):
            return replica
    return NO_LEADER
