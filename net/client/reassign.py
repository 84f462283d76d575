"""Leader elections, partition reassignment and broker removal over a KafkaClient (what
kafka-leader-election.sh, kafka-reassign-partitions.sh and kafka-cluster.sh unregister send): ElectLeaders,
AlterPartitionReassignments, ListPartitionReassignments, UnregisterBroker; and the balanced plan that
`reassign generate` proposes.

Per-partition outcomes come back as (topic, partition, error code, message) rows; a request-level failure
raises KafkaError with the broker's code and message."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from net.client.aio import KafkaClient
from net.client.errors import raise_for_code
from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode


@dataclass(frozen=True)
class Outcome:
    topic: str
    partition: int
    error_code: int
    message: str | None

    @property
    def ok(self) -> bool:
        return self.error_code == ErrorCode.NONE


@dataclass(frozen=True)
class Ongoing:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


async def elect_leaders(client: KafkaClient, election_type: int,
                        partitions: dict[str, list[int]] | None) -> list[Outcome]:
    """ElectLeaders v1+ (0 preferred, 1 unclean) for `partitions` (None: every partition; then only the
    elections held are reported, as Kafka does)."""
    request_class = messages.ElectLeadersRequest
    request = request_class(election_type=election_type, timeout_ms=30_000, topic_partitions=None if partitions is None else [
        request_class.TopicPartitions(topic=topic, partitions=list(indexes)) for topic, indexes in partitions.items()])
    response = await client._admin(ApiKey.ELECT_LEADERS, request)
    raise_for_code(response.error_code, None, "cannot elect leaders")
    return [Outcome(r.topic, p.partition_id, p.error_code, p.error_message)
            for r in response.replica_election_results for p in r.partition_result]


async def alter_reassignments(client: KafkaClient, targets: dict[tuple[str, int], list[int] | None]) -> list[Outcome]:
    """Start (a replica list) or cancel (None) the reassignment of each partition."""
    request_class = messages.AlterPartitionReassignmentsRequest
    by_topic: dict[str, list] = {}
    for (topic, partition), replicas in targets.items():
        by_topic.setdefault(topic, []).append(request_class.ReassignablePartition(
            partition_index=partition, replicas=None if replicas is None else list(replicas)))
    request = request_class(timeout_ms=30_000, topics=[
        request_class.ReassignableTopic(name=topic, partitions=partitions) for topic, partitions in by_topic.items()])
    response = await client._admin(ApiKey.ALTER_PARTITION_REASSIGNMENTS, request)
    raise_for_code(response.error_code, response.error_message, "cannot reassign partitions")
    return [Outcome(t.name, p.partition_index, p.error_code, p.error_message)
            for t in response.responses for p in t.partitions]


async def list_reassignments(client: KafkaClient, topics: dict[str, list[int]] | None = None) -> list[Ongoing]:
    request_class = messages.ListPartitionReassignmentsRequest
    request = request_class(timeout_ms=30_000, topics=None if topics is None else [
        request_class.ListPartitionReassignmentsTopics(name=name, partition_indexes=list(indexes))
        for name, indexes in topics.items()])
    response = await client._admin(ApiKey.LIST_PARTITION_REASSIGNMENTS, request)
    raise_for_code(response.error_code, response.error_message, "cannot list reassignments")
    return [Ongoing(t.name, p.partition_index, tuple(p.replicas), tuple(p.adding_replicas), tuple(p.removing_replicas))
            for t in response.topics for p in t.partitions]


async def unregister_broker(client: KafkaClient, broker_id: int) -> None:
    response = await client._admin(ApiKey.UNREGISTER_BROKER, messages.UnregisterBrokerRequest(broker_id=broker_id))
    raise_for_code(response.error_code, response.error_message, f"cannot decommission broker {broker_id}")


def balanced_plan(current: dict[tuple[str, int], tuple[int, ...]], brokers: list[int]) -> dict[tuple[str, int], list[int]]:
    """A plan spreading every listed partition's replicas over `brokers`, the replication factor kept, with few
    moves: replicas on brokers outside the list move first, then one replica at a time from a broker above its
    share (replicas / brokers, the remainder to the brokers holding most today) to one below it; then first
    replicas (preferred leaders) are swapped within partitions until leadership is spread the same way.
    Deterministic: the same input gives the same plan."""
    brokers = sorted(set(brokers))
    if not brokers:
        raise ValueError("the broker list is empty")
    for (topic, partition), replicas in current.items():
        if len(replicas) > len(brokers):
            raise ValueError(f"{topic}-{partition} has {len(replicas)} replicas but only {len(brokers)} brokers are listed")
    plan = {key: list(current[key]) for key in sorted(current)}
    held = Counter(b for replicas in plan.values() for b in replicas)
    share = _shares(brokers, sum(len(r) for r in plan.values()), held)
    load = Counter({b: held[b] for b in brokers})

    def most_below(replicas: list[int]) -> int:
        return min((b for b in brokers if b not in replicas), key=lambda b: (load[b] - share[b], b))

    for replicas in plan.values():
        for index, broker in enumerate(replicas):
            if broker not in share:
                replicas[index] = most_below(replicas)
                load[replicas[index]] += 1
    moved = True
    while moved:
        moved = False
        for under in (b for b in brokers if load[b] < share[b]):
            for replicas in plan.values():
                if under in replicas:
                    continue
                over = [i for i, b in enumerate(replicas) if load[b] > share[b]]
                if over:
                    index = max(over, key=lambda i: (load[replicas[i]] - share[replicas[i]], i))
                    load[replicas[index]] -= 1
                    replicas[index] = under
                    load[under] += 1
                    moved = True
                    break
    lead_share = _shares(brokers, len(plan), Counter(r[0] for r in plan.values()))
    leads = Counter(r[0] for r in plan.values())
    swapped = True
    while swapped:
        swapped = False
        for replicas in plan.values():
            first = replicas[0]
            if leads[first] <= lead_share[first]:
                continue
            below = [i for i, b in enumerate(replicas) if leads[b] < lead_share[b]]
            if below:
                index = below[0]
                replicas[0], replicas[index] = replicas[index], replicas[0]
                leads[first] -= 1
                leads[replicas[0]] += 1
                swapped = True
    return plan


def _shares(brokers: list[int], total: int, held: Counter) -> dict[int, int]:
    share = {b: total // len(brokers) for b in brokers}
    for b in sorted(brokers, key=lambda b: (-held[b], b))[: total % len(brokers)]:
        share[b] += 1
    return share
