"""Replica placement for new partitions (Kafka's AdminUtils.assignReplicasToBrokers).

Theory of operation: partition p's first replica (its preferred leader) is broker
`(start_index + p) % n` of the broker list, so leaders go round-robin and every broker leads
`num_partitions / n` partitions, give or take one. The other replicas follow at a shift that grows by one
after every `n` partitions, so the followers of one broker's partitions are spread over the others too.
With a rack for every broker, the list is first arranged to alternate racks and a follower is skipped while
its rack (or the broker itself) already holds a replica of the partition, until every rack has one (Kafka's
assignReplicasToBrokersRackAware). Where Kafka draws `start_index` and the shift at random, the caller passes
them in (the controller derives them deterministically), so placement is a pure function.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def assign_replicas(
    broker_racks: Mapping[int, str | None],
    num_partitions: int,
    replication_factor: int,
    start_index: int,
    replica_shift: int,
    first_partition: int = 0,
) -> list[tuple[int, ...]]:
    """Replica lists for partitions `first_partition .. first_partition + num_partitions - 1`.

    Rack-aware when every broker has a rack. Raises ValueError when the replication factor is not in
    1..len(brokers) or num_partitions is negative (the controller checks these first and answers with an
    error code).
    """
    brokers = len(broker_racks)
    if not 1 <= replication_factor <= brokers:
        raise ValueError(f"replication factor {replication_factor} with {brokers} brokers")
    if num_partitions < 0:
        raise ValueError(f"num_partitions {num_partitions}")
    racks = {b: r for b, r in broker_racks.items() if r is not None}
    if len(racks) == brokers and len(set(racks.values())) > 1:
        return _rack_aware(racks, num_partitions, replication_factor, start_index, replica_shift, first_partition)
    arranged = sorted(broker_racks)
    return _striped(arranged, num_partitions, replication_factor, start_index, replica_shift, first_partition)


def _replica_index(first_replica_index: int, shift: int, replica: int, brokers: int) -> int:
    # Never the first replica's own index: the offset ranges over 1..brokers-1.
    return (first_replica_index + 1 + (shift + replica) % (brokers - 1)) % brokers


def _shift_for(partition: int, brokers: int, replica_shift: int) -> int:
    return replica_shift + partition // brokers


def _striped(
    arranged: Sequence[int], count: int, rf: int, start_index: int, replica_shift: int, first: int
) -> list[tuple[int, ...]]:
    brokers = len(arranged)
    assignments = []
    for partition in range(first, first + count):
        first_index = (partition + start_index) % brokers
        shift = _shift_for(partition, brokers, replica_shift)
        replicas = [arranged[first_index]]
        for j in range(rf - 1):
            replicas.append(arranged[_replica_index(first_index, shift, j, brokers)])
        assignments.append(tuple(replicas))
    return assignments


def rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """Brokers ordered so consecutive ones sit in different racks (Kafka's getRackAlternatedBrokerList)."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    ordered_racks = sorted(by_rack)
    arranged: list[int] = []
    for i in range(max(len(v) for v in by_rack.values())):
        arranged.extend(by_rack[rack][i] for rack in ordered_racks if i < len(by_rack[rack]))
    return arranged


def _rack_aware(
    racks: Mapping[int, str], count: int, rf: int, start_index: int, replica_shift: int, first: int
) -> list[tuple[int, ...]]:
    arranged = rack_alternated(racks)
    brokers, rack_count = len(arranged), len(set(racks.values()))
    assignments = []
    for partition in range(first, first + count):
        first_index = (partition + start_index) % brokers
        shift = _shift_for(partition, brokers, replica_shift)
        leader = arranged[first_index]
        replicas, used_racks = [leader], {racks[leader]}
        k = 0
        while len(replicas) < rf:
            broker = arranged[_replica_index(first_index, shift * rack_count, k, brokers)]
            k += 1
            rack_ok = racks[broker] not in used_racks or len(used_racks) == rack_count
            broker_ok = broker not in replicas or len(replicas) == brokers
            if rack_ok and broker_ok:
                replicas.append(broker)
                used_racks.add(racks[broker])
        assignments.append(tuple(replicas))
    return assignments
