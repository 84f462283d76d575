"""Consumer-group administration over a `KafkaClient`: find the coordinator, list, describe, fetch and reset
committed offsets, delete groups and offsets (what `kafka-consumer-groups` and AdminClient do).

Theory of operation: a group's requests go to its coordinator, which FindCoordinator names; an answer of
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or COORDINATOR_LOAD_IN_PROGRESS (a coordinator moved, is being
elected, or is loading its shard) is retried with the client's backoff after finding the coordinator anew.
Listing asks every live broker, since each coordinates only its own shards. Offsets are committed as an
admin does (generation -1, empty member id): the coordinator refuses that while the group has members, so a
reset never races a live consumer.

Classic groups carry their members' subscriptions and assignments in the consumer protocol's own encoding
(ConsumerProtocolSubscription / ConsumerProtocolAssignment, Kafka's clients/.../consumer/*.json), decoded
here; KIP-848 groups are described with ConsumerGroupDescribe when the broker serves it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from net.client.aio import KafkaClient, gather
from net.client.errors import raise_for_code
from net.protocol import messages
from net.protocol.codec import ApiKey
from net.protocol.types import ProtocolDecodeError, Reader
from partitions.errors import ErrorCode, KafkaError

COORDINATOR_KEY_TYPE_GROUP = 0
COORDINATOR_RETRY_CODES = frozenset({
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
})
FIND_COORDINATOR_VERSION = 2  # the last version with a single key: every broker and client speaks it
OFFSET_FETCH_SINGLE_GROUP_VERSION = 7  # the last version naming one group (v8+ carry a list of groups)


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str = ""  # ListGroups v4+
    group_type: str = ""  # ListGroups v5+ ("classic" or "consumer")
    coordinator: int = -1


@dataclass(frozen=True)
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: dict[str, list[int]] = field(default_factory=dict)
    member_epoch: int | None = None  # a consumer group's (KIP-848); None for a classic group's members


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    group_type: str  # "classic" or "consumer"
    protocol_type: str
    protocol: str
    members: list[GroupMember]
    coordinator: int
    # A consumer group's (KIP-848) epoch and the epoch of its target assignment; None for a classic group.
    group_epoch: int | None = None
    assignment_epoch: int | None = None


@dataclass(frozen=True)
class CommittedOffset:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


async def find_coordinator(client: KafkaClient, group_id: str) -> int:
    """The broker id that coordinates `group_id`, retried while none is available (the first lookup creates
    `__consumer_offsets`). Raises the typed error of FindCoordinator's last answer."""
    request = messages.FindCoordinatorRequest(key=group_id, key_type=COORDINATOR_KEY_TYPE_GROUP)

    async def attempt() -> int:
        response = await client.send(None, ApiKey.FIND_COORDINATOR, request, api_version=FIND_COORDINATOR_VERSION)
        raise_for_code(response.error_code, response.error_message, f"find coordinator of group {group_id!r}")
        return response.node_id

    return await client._retrying(attempt, COORDINATOR_RETRY_CODES)


async def _to_coordinator(client: KafkaClient, group_id: str, api_key: int, request, error_of,
                          api_version: int | None = None) -> tuple[int, object]:
    """Send `request` to the group's coordinator, retrying while the coordinator moves or loads.
    `error_of(response)` extracts the error code that decides a retry. Returns (coordinator, response)."""

    async def attempt():
        coordinator = await find_coordinator(client, group_id)
        response = await client.send(coordinator, api_key, request, api_version)
        code = error_of(response)
        if code in COORDINATOR_RETRY_CODES:
            raise_for_code(code, None, f"group {group_id!r}")
        return coordinator, response

    return await client._retrying(attempt, COORDINATOR_RETRY_CODES)


async def list_groups(client: KafkaClient) -> list[GroupListing]:
    """Every group of the cluster, from every live broker (each lists the groups it coordinates)."""
    metadata = await client.metadata([])
    listings: list[GroupListing] = []

    async def ask(broker_id: int) -> None:
        response = await client.send(broker_id, ApiKey.LIST_GROUPS, messages.ListGroupsRequest())
        raise_for_code(response.error_code, None, f"list groups on broker {broker_id}")
        for group in response.groups:
            listings.append(GroupListing(group.group_id, group.protocol_type, getattr(group, "group_state", ""),
                                         getattr(group, "group_type", ""), broker_id))

    await gather([lambda broker_id=broker_id: ask(broker_id) for broker_id in sorted(metadata.brokers)])
    return sorted(listings, key=lambda listing: listing.group_id)


async def describe_group(client: KafkaClient, group_id: str) -> GroupDescription:
    """State, type, protocol and members (with their assignments) of one group. Raises GroupIdNotFound-type
    errors as Kafka answers them (a group that does not exist is described as Dead with no members)."""
    coordinator, response = await _to_coordinator(
        client, group_id, ApiKey.DESCRIBE_GROUPS, messages.DescribeGroupsRequest(groups=[group_id]),
        lambda r: r.groups[0].error_code if r.groups else ErrorCode.NONE)
    described = response.groups[0]
    if described.error_code == ErrorCode.GROUP_ID_NOT_FOUND and hasattr(messages, "ConsumerGroupDescribeRequest"):
        return await _describe_consumer_group(client, group_id)
    raise_for_code(described.error_code, None, f"describe group {group_id!r}")
    consumer_protocol = described.protocol_type == "consumer"
    members = [GroupMember(m.member_id, getattr(m, "group_instance_id", None), m.client_id, m.client_host,
                           decode_assignment(m.member_assignment) if consumer_protocol else {})
               for m in described.members]
    return GroupDescription(group_id, described.group_state, "classic", described.protocol_type,
                            described.protocol_data, members, coordinator)


async def _describe_consumer_group(client: KafkaClient, group_id: str) -> GroupDescription:
    request = messages.ConsumerGroupDescribeRequest(group_ids=[group_id])
    coordinator, response = await _to_coordinator(
        client, group_id, ApiKey.CONSUMER_GROUP_DESCRIBE, request,
        lambda r: r.groups[0].error_code if r.groups else ErrorCode.NONE)
    described = response.groups[0]
    raise_for_code(described.error_code, getattr(described, "error_message", None), f"describe group {group_id!r}")
    members = []
    for member in described.members:
        assignment = {topic.topic_name: sorted(topic.partitions) for topic in member.assignment.topic_partitions}
        members.append(GroupMember(member.member_id, member.instance_id, member.client_id, member.client_host,
                                   assignment, member.member_epoch))
    return GroupDescription(group_id, described.group_state, "consumer", "consumer", described.assignor_name,
                            members, coordinator, described.group_epoch, described.assignment_epoch)


async def fetch_committed_offsets(client: KafkaClient, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
    """Every committed offset of the group, (topic, partition) -> CommittedOffset."""
    request = messages.OffsetFetchRequest(group_id=group_id, topics=None, require_stable=False)
    _, response = await _to_coordinator(client, group_id, ApiKey.OFFSET_FETCH, request, lambda r: r.error_code,
                                        api_version=OFFSET_FETCH_SINGLE_GROUP_VERSION)
    raise_for_code(response.error_code, None, f"fetch offsets of group {group_id!r}")
    offsets = {}
    for topic in response.topics:
        for partition in topic.partitions:
            raise_for_code(partition.error_code, None, f"offset of {topic.name}-{partition.partition_index}")
            if partition.committed_offset >= 0:
                offsets[(topic.name, partition.partition_index)] = CommittedOffset(
                    topic.name, partition.partition_index, partition.committed_offset,
                    partition.committed_leader_epoch, partition.metadata)
    return dict(sorted(offsets.items()))


async def commit_offsets(client: KafkaClient, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit `offsets` as an admin (no member, generation -1). Raises the first partition's typed error:
    UNKNOWN_MEMBER_ID (or REBALANCE_IN_PROGRESS) while the group has members, as Kafka refuses it."""
    by_topic: dict[str, list] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        by_topic.setdefault(topic, []).append(messages.OffsetCommitRequest.OffsetCommitRequestPartition(
            partition_index=partition, committed_offset=offset, committed_metadata=""))
    request = messages.OffsetCommitRequest(
        group_id=group_id, generation_id_or_member_epoch=-1, member_id="",
        topics=[messages.OffsetCommitRequest.OffsetCommitRequestTopic(name=name, partitions=parts) for name, parts in by_topic.items()])

    def first_error(response) -> int:
        codes = [p.error_code for t in response.topics for p in t.partitions if p.error_code != ErrorCode.NONE]
        return codes[0] if codes else ErrorCode.NONE

    _, response = await _to_coordinator(client, group_id, ApiKey.OFFSET_COMMIT, request, first_error)
    raise_for_code(first_error(response), None, f"commit offsets of group {group_id!r}")


async def delete_groups(client: KafkaClient, group_ids: list[str]) -> dict[str, ErrorCode]:
    """group id -> ErrorCode of its deletion (NONE, NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, ...)."""
    results: dict[str, ErrorCode] = {}
    for group_id in group_ids:
        _, response = await _to_coordinator(
            client, group_id, ApiKey.DELETE_GROUPS, messages.DeleteGroupsRequest(groups_names=[group_id]),
            lambda r: r.results[0].error_code if r.results else ErrorCode.NONE)
        results[group_id] = ErrorCode(response.results[0].error_code)
    return results


async def delete_offsets(client: KafkaClient, group_id: str, topic: str, partitions: list[int]) -> dict[int, ErrorCode]:
    """partition -> ErrorCode of deleting the group's committed offset (OffsetDelete, KIP-496). Raises the
    group-level error (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP...)."""
    if not hasattr(messages, "OffsetDeleteRequest"):
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "this build has no OffsetDelete codec")
    request = messages.OffsetDeleteRequest(group_id=group_id, topics=[messages.OffsetDeleteRequest.OffsetDeleteRequestTopic(
        name=topic, partitions=[messages.OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=p) for p in partitions])])
    _, response = await _to_coordinator(client, group_id, ApiKey.OFFSET_DELETE, request, lambda r: r.error_code)
    raise_for_code(response.error_code, None, f"delete offsets of group {group_id!r}")
    return {p.partition_index: ErrorCode(p.error_code) for t in response.topics for p in t.partitions}


def decode_assignment(blob: bytes | None) -> dict[str, list[int]]:
    """ConsumerProtocolAssignment (versions 0-3): topic -> partitions. Empty for an empty or foreign blob.

    Layout: version int16, AssignedPartitions [Topic string, Partitions []int32], UserData nullable bytes
    (ignored). Versions above 0 add nothing before the partitions, so one reader serves them all.
    """
    if not blob:
        return {}
    try:
        reader = Reader(blob)
        reader.int16()
        assignment: dict[str, list[int]] = {}
        for _ in range(reader.array_length(compact=False, nullable=False, item_bytes_min=6)):
            topic = reader.string()
            count = reader.array_length(compact=False, nullable=False, item_bytes_min=4)
            assignment[topic] = sorted(reader.int32() for _ in range(count))
        return assignment
    except (ProtocolDecodeError, KafkaError):
        return {}
