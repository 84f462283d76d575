"""Leader election and ISR changes for one partition (Kafka's PartitionChangeBuilder, without ELR).

Theory of operation: given a partition's state, a broker leaving the ISR (fenced, shutting down,
unregistered) and which brokers may lead now, compute the PartitionChangeRecord that moves the partition to
a legal state, or None when nothing changes. Rules, as KRaft applies them:
- a broker is removed from the ISR unless it is the last member (the ISR never becomes empty, so the last
  replica known to be in sync is remembered);
- the leader stays while it is acceptable and in the ISR; otherwise the first acceptable replica in replica
  order that is in the ISR leads (a clean election);
- with no such replica, the partition goes offline (leader NO_LEADER) unless unclean election is allowed,
  in which case the first acceptable replica outside the ISR leads and the ISR becomes just that replica
  (data the old ISR had may be lost: that is what unclean means);
- replay bumps the leader epoch because the record names a leader, and only when the leader changes.
Pure: no state, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from metadata.image import PartitionRegistration
from metadata.records import NO_LEADER, PartitionChangeRecord


def partition_change(
    topic_id: bytes,
    partition: int,
    state: PartitionRegistration,
    is_acceptable: Callable[[int], bool],
    unclean_allowed: bool,
    leaving_isr: int | None = None,
) -> PartitionChangeRecord | None:
    """The change that removes `leaving_isr` from the ISR and (re)elects a leader, or None if none is needed."""
    isr = tuple(b for b in state.isr if b != leaving_isr) or state.isr
    leader = state.leader
    if leader == NO_LEADER or leader not in isr or not is_acceptable(leader):
        leader, isr = elect_leader(state.replicas, isr, is_acceptable, unclean_allowed)
    return _change_record(topic_id, partition, state, leader, isr)


def elect_leader(
    replicas: tuple[int, ...],
    isr: tuple[int, ...],
    is_acceptable: Callable[[int], bool],
    unclean_allowed: bool,
) -> tuple[int, tuple[int, ...]]:
    """(leader, isr) after an election: clean from the ISR in replica order, else unclean if allowed."""
    for replica in replicas:
        if replica in isr and is_acceptable(replica):
            return replica, isr
    if unclean_allowed:
        for replica in replicas:
            if is_acceptable(replica):
                return replica, (replica,)
    return NO_LEADER, isr


def preferred_leader_change(
    topic_id: bytes, partition: int, state: PartitionRegistration, is_acceptable: Callable[[int], bool]
) -> PartitionChangeRecord | None:
    """Make the first replica the leader when it is acceptable and in the ISR; None otherwise."""
    preferred = state.replicas[0]
    if preferred == state.leader or preferred not in state.isr or not is_acceptable(preferred):
        return None
    return _change_record(topic_id, partition, state, preferred, state.isr)


def _change_record(
    topic_id: bytes, partition: int, state: PartitionRegistration, leader: int, isr: tuple[int, ...]
) -> PartitionChangeRecord | None:
    assert leader == NO_LEADER or leader in isr, f"leader={leader} isr={isr}"
    leader_changed = leader != state.leader
    isr_changed = isr != state.isr
    if not leader_changed and not isr_changed:
        return None
    return PartitionChangeRecord(
        topic_id=topic_id,
        partition=partition,
        leader=leader if leader_changed else None,
        isr=isr if isr_changed else None,
    )
