"""The server-side assignors of the consumer protocol (KIP-848, `group.remote.assignor`): `uniform` and `range`.

Both are pure functions of the members' subscriptions, the subscribed topics' partition counts and the
previous target assignment, so every coordinator that replays the same records computes the same target.

- `uniform` (the default, Kafka's UniformAssignor): every partition of a subscribed topic goes to one of its
  subscribers, counts differ by at most one among members with the same subscriptions, and a member keeps
  the partitions it had where the balance allows (sticky): each member first keeps what it owned (still
  subscribed, up to the ceiling of an even share), the rest go one by one to the eligible member with the
  fewest, then partitions move from the most loaded to an eligible member with two fewer until none can.
- `range` (Kafka's RangeAssignor, as co-partitioned joins need): per topic, its subscribers sorted by member
  id get contiguous ranges; the first `partitions % members` get one more.

An assignment maps topic id -> frozenset of partitions.
"""

from __future__ import annotations

import uuid
from typing import Mapping

Assignment = dict[uuid.UUID, frozenset[int]]
Topics = Mapping[str, tuple[uuid.UUID, int]]  # subscribed topic name -> (topic id, partition count)

DEFAULT_ASSIGNOR = "uniform"


def uniform(subscriptions: Mapping[str, frozenset[str]], topics: Topics,
            previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
    members = sorted(subscriptions)
    eligible: dict[tuple[uuid.UUID, int], list[str]] = {}
    for name in sorted(topics):
        topic_id, count = topics[name]
        subscribers = [m for m in members if name in subscriptions[m]]
        if subscribers:
            for partition in range(count):
                eligible[(topic_id, partition)] = subscribers
    owned: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in members}
    if not members or not eligible:
        return {m: {} for m in members}
    ceiling = -(-len(eligible) // len(members))
    owner: dict[tuple[uuid.UUID, int], str] = {}
    for member in members:  # keep what is still valid, up to an even share
        kept = sorted((topic_id, p) for topic_id, partitions in previous.get(member, {}).items() for p in partitions
                      if member in eligible.get((topic_id, p), ()) and (topic_id, p) not in owner)
        for tp in kept[:ceiling]:
            owner[tp] = member
            owned[member].add(tp)
    for tp in sorted(eligible):  # the rest to the least loaded eligible member
        if tp not in owner:
            member = min(eligible[tp], key=lambda m: (len(owned[m]), m))
            owner[tp] = member
            owned[member].add(tp)
    moved = True
    while moved:  # balance: from the most loaded to an eligible member with two fewer
        moved = False
        for member in sorted(members, key=lambda m: (-len(owned[m]), m)):
            for tp in sorted(owned[member]):
                target = min(eligible[tp], key=lambda m: (len(owned[m]), m))
                if len(owned[target]) + 1 < len(owned[member]):
                    owned[member].discard(tp)
                    owned[target].add(tp)
                    moved = True
                    break
            if moved:
                break
    return {m: _as_assignment(owned[m]) for m in members}


def range_(subscriptions: Mapping[str, frozenset[str]], topics: Topics,
           previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
    owned: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in subscriptions}
    for name in sorted(topics):
        topic_id, count = topics[name]
        subscribers = sorted(m for m in subscriptions if name in subscriptions[m])
        if not subscribers:
            continue
        share, extra = divmod(count, len(subscribers))
        start = 0
        for index, member in enumerate(subscribers):
            size = share + (1 if index < extra else 0)
            owned[member].update((topic_id, p) for p in range(start, start + size))
            start += size
    return {m: _as_assignment(tps) for m, tps in owned.items()}


def _as_assignment(tps: set[tuple[uuid.UUID, int]]) -> Assignment:
    assignment: dict[uuid.UUID, set[int]] = {}
    for topic_id, partition in tps:
        assignment.setdefault(topic_id, set()).add(partition)
    return {topic_id: frozenset(partitions) for topic_id, partitions in assignment.items()}


ASSIGNORS = {"uniform": uniform, "range": range_}
