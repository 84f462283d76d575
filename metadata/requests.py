"""Controller requests and responses: what brokers and admin clients ask the quorum controller.

Theory of operation: each request and response is a small frozen dataclass with a `version`, sent between
nodes over the controller listener as CBOR (`encode_request` / `decode_request`, `encode_response` /
`decode_response`), decoded by an allow-list that checks every field (never pickle). Error codes travel as
Kafka's wire values (`partitions.errors.ErrorCode`). Requests name things as Kafka's RPCs do
(BrokerRegistration, BrokerHeartbeat, CreateTopics, AlterPartition, AllocateProducerIds, ...).
"""

from __future__ import annotations

import dataclasses
import enum

from metadata.codec import Codec, tagged
from metadata.records import QuotaEntityPart, SupportedFeature
from partitions.errors import ErrorCode, InvalidRequestError, KafkaError

_message = dataclasses.dataclass(frozen=True, slots=True)
_part = dataclasses.dataclass(frozen=True, slots=True)

PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE


def _version(default: int = 0):
    return dataclasses.field(default=default, kw_only=True)


class ElectionType(enum.IntEnum):
    PREFERRED = 0
    UNCLEAN = 1


class AlterConfigOp(enum.IntEnum):
    """IncrementalAlterConfigs operation codes (Kafka's AlterConfigOp.OpType)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


# ---- parts ---------------------------------------------------------------------------------------------


@_part
class ConfigEntry:
    name: str
    value: str | None


@_part
class ReplicaAssignment:
    partition: int
    broker_ids: tuple[int, ...]


@_part
class CreatableTopic:
    name: str
    num_partitions: int = -1  # -1: the controller's default
    replication_factor: int = -1  # -1: the controller's default
    assignments: tuple[ReplicaAssignment, ...] | None = None
    configs: tuple[ConfigEntry, ...] = ()


@_part
class AlterableConfig:
    name: str
    value: str | None
    op: int = AlterConfigOp.SET  # used by IncrementalAlterConfigs only


@_part
class ConfigResource:
    resource_type: int  # ConfigResourceType
    resource_name: str
    configs: tuple[AlterableConfig, ...]


@_part
class TopicPartitions:
    topic: str
    partitions: tuple[int, ...]


@_part
class AclEntry:
    """An ACL binding (the fields of security.acl.AclBinding)."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@_part
class AclFilterEntry:
    """An ACL filter (security.acl.AclFilter): None and the ANY values match everything."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission_type: int


@_part
class ScramDeletion:
    name: str
    mechanism: int


@_part
class ScramUpsertion:
    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


@_part
class QuotaOp:
    key: str
    value: float
    remove: bool


@_part
class QuotaAlteration:
    entity: tuple[QuotaEntityPart, ...]
    ops: tuple[QuotaOp, ...]


# ---- requests -------------------------------------------------------------------------------------------


@_message
class BrokerRegistrationRequest:
    broker_id: int
    incarnation_id: bytes
    host: str
    port: int
    rack: str | None = None
    roles: tuple[str, ...] = ("broker",)
    features: tuple[SupportedFeature, ...] = ()  # the feature levels the broker's code supports
    # KIP-966's PreviousBrokerEpoch: the epoch this broker's data directory was registered in when its process
    # last stopped cleanly (-1: not known, or not cleanly). The controller replaces a registration still in force
    # at that epoch at once, since its process is gone, instead of refusing the new incarnation as a duplicate
    # until the old session expires. Tagged: an older controller ignores it.
    previous_broker_epoch: int = tagged(-1)
    version: int = _version()


@_message
class BrokerHeartbeatRequest:
    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool = False
    want_shutdown: bool = False
    version: int = _version()


@_message
class UnregisterBrokerRequest:
    broker_id: int
    version: int = _version()


@_message
class CreateTopicsRequest:
    topics: tuple[CreatableTopic, ...]
    validate_only: bool = False
    version: int = _version()


@_message
class DeleteTopicsRequest:
    names: tuple[str, ...]
    # Empty, or the id each name must still have (b"" where the client named the topic by name): a DeleteTopics
    # v6 by id resolved to a name from the asking broker's image; a topic created again under that name since
    # is left alone (UNKNOWN_TOPIC_ID), as Kafka's controller deletes by id.
    topic_ids: tuple[bytes, ...] = ()
    version: int = _version()


@_message
class CreatePartitionsRequest:
    topic: str
    new_total_count: int
    assignments: tuple[ReplicaAssignment, ...] | None = None  # for the new partitions only
    validate_only: bool = False
    version: int = _version()


@_message
class AlterConfigsRequest:
    """Replace the whole non-default config set of each resource (the legacy AlterConfigs)."""

    resources: tuple[ConfigResource, ...]
    validate_only: bool = False
    version: int = _version()


@_message
class IncrementalAlterConfigsRequest:
    resources: tuple[ConfigResource, ...]
    validate_only: bool = False
    version: int = _version()


@_message
class AlterPartitionRequest:
    broker_id: int
    broker_epoch: int
    topic_id: bytes
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]
    version: int = _version()


@_message
class AlterPartitionsRequest:
    """Many AlterPartition items of one leader in one request (Kafka's AlterPartition carries topics and
    partitions): their ISR changes commit in one Raft entry. A broker coalesces what it has pending (a
    restarted follower catching up on thousands of partitions would otherwise cost a Raft entry each)."""

    broker_id: int
    broker_epoch: int
    items: tuple[AlterPartitionRequest, ...]
    version: int = _version()


@_message
class AllocateProducerIdsRequest:
    broker_id: int
    broker_epoch: int
    version: int = _version()


@_message
class ElectLeadersRequest:
    election_type: int = ElectionType.PREFERRED
    partitions: tuple[TopicPartitions, ...] | None = None  # None: every partition
    version: int = _version()


@_part
class ReassignablePartition:
    topic: str
    partition: int
    replicas: tuple[int, ...] | None  # None: cancel the ongoing reassignment


@_message
class AlterPartitionReassignmentsRequest:
    partitions: tuple[ReassignablePartition, ...]
    version: int = _version()


@_message
class CreateAclsRequest:
    creations: tuple[AclEntry, ...]
    version: int = _version()


@_message
class DeleteAclsRequest:
    filters: tuple[AclFilterEntry, ...]
    version: int = _version()


@_message
class AlterUserScramCredentialsRequest:
    deletions: tuple[ScramDeletion, ...] = ()
    upsertions: tuple[ScramUpsertion, ...] = ()
    version: int = _version()


@_message
class AlterClientQuotasRequest:
    entries: tuple[QuotaAlteration, ...]
    validate_only: bool = False
    version: int = _version()


@_part
class FeatureUpdate:
    """One feature of an UpdateFeatures: its new level (0 turns it off) and Kafka's upgrade type (1 upgrade,
    2 safe downgrade, 3 unsafe downgrade)."""

    name: str
    level: int
    upgrade_type: int = 1


@_message
class UpdateFeaturesRequest:
    updates: tuple[FeatureUpdate, ...]
    validate_only: bool = False
    version: int = _version()


@_message
class DescribeQuorumRequest:
    """The metadata quorum as its leader sees it (Kafka's DescribeQuorum, which brokers forward to the active
    controller). Answered by the Raft leader from its progress of each member, not through the log."""

    version: int = _version()


# ---- responses ------------------------------------------------------------------------------------------


@_message
class BrokerRegistrationResponse:
    error_code: int
    message: str = ""
    broker_epoch: int = -1
    version: int = _version()


@_message
class BrokerHeartbeatResponse:
    error_code: int
    message: str = ""
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False
    version: int = _version()


@_message
class UnregisterBrokerResponse:
    error_code: int
    message: str = ""
    version: int = _version()


@_part
class CreatableTopicResult:
    name: str
    error_code: int
    message: str = ""
    topic_id: bytes = b""
    num_partitions: int = -1
    replication_factor: int = -1
    configs: tuple[ConfigEntry, ...] = ()


@_message
class CreateTopicsResponse:
    topics: tuple[CreatableTopicResult, ...]
    version: int = _version()


@_part
class DeletableTopicResult:
    name: str
    error_code: int
    message: str = ""
    topic_id: bytes = b""
    num_partitions: int = 0  # the partitions deleted (a controller mutation quota counts them)


@_message
class DeleteTopicsResponse:
    topics: tuple[DeletableTopicResult, ...]
    version: int = _version()


@_message
class CreatePartitionsResponse:
    topic: str
    error_code: int
    message: str = ""
    partitions_added: int = 0  # (a controller mutation quota counts them)
    version: int = _version()


@_part
class ConfigResourceResult:
    resource_type: int
    resource_name: str
    error_code: int
    message: str = ""


@_message
class AlterConfigsResponse:
    resources: tuple[ConfigResourceResult, ...]
    version: int = _version()


@_message
class AlterPartitionResponse:
    error_code: int
    message: str = ""
    topic_id: bytes = b""
    partition: int = -1
    leader: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    isr: tuple[int, ...] = ()
    version: int = _version()


@_message
class AlterPartitionsResponse:
    """One AlterPartitionResponse per item, in the request's order."""

    items: tuple[AlterPartitionResponse, ...]
    version: int = _version()


@_message
class AllocateProducerIdsResponse:
    error_code: int
    message: str = ""
    producer_id_start: int = -1
    producer_id_len: int = 0
    version: int = _version()


@_part
class PartitionResult:
    topic: str
    partition: int
    error_code: int
    message: str = ""


@_message
class ElectLeadersResponse:
    error_code: int
    partitions: tuple[PartitionResult, ...] = ()
    version: int = _version()


@_message
class AlterPartitionReassignmentsResponse:
    error_code: int
    partitions: tuple[PartitionResult, ...] = ()
    version: int = _version()


@_part
class AclResult:
    error_code: int
    message: str = ""


@_message
class CreateAclsResponse:
    results: tuple[AclResult, ...]
    version: int = _version()


@_part
class DeleteAclsFilterResult:
    error_code: int
    message: str = ""
    matching: tuple[AclEntry, ...] = ()


@_message
class DeleteAclsResponse:
    results: tuple[DeleteAclsFilterResult, ...]
    version: int = _version()


@_part
class UserResult:
    user: str
    error_code: int
    message: str = ""


@_message
class AlterUserScramCredentialsResponse:
    results: tuple[UserResult, ...]
    version: int = _version()


@_part
class QuotaAlterationResult:
    entity: tuple[QuotaEntityPart, ...]
    error_code: int
    message: str = ""


@_message
class AlterClientQuotasResponse:
    results: tuple[QuotaAlterationResult, ...]
    version: int = _version()


@_message
class UpdateFeaturesResponse:
    """All or nothing, as Kafka's FeatureControlManager: one error for the whole request."""

    error_code: int
    message: str = ""
    version: int = _version()


@_part
class QuorumReplica:
    """A voter or observer of the metadata log: its log end offset (-1 unknown) and how long ago the leader
    last heard from it (-1 unknown). Ages rather than timestamps, so that the broker answering the client
    turns them into its own wall-clock times."""

    replica_id: int
    log_end_offset: int
    last_fetch_age_ms: int
    caught_up: bool
    host: str = ""  # a voter's controller listener (empty for an observer)
    port: int = 0


@_message
class DescribeQuorumResponse:
    error_code: int
    message: str = ""
    leader_id: int = -1
    leader_epoch: int = -1
    high_watermark: int = -1
    voters: tuple[QuorumReplica, ...] = ()
    observers: tuple[QuorumReplica, ...] = ()
    version: int = _version()


REQUEST_TYPES: tuple[type, ...] = (
    BrokerRegistrationRequest,
    BrokerHeartbeatRequest,
    UnregisterBrokerRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    CreatePartitionsRequest,
    AlterConfigsRequest,
    IncrementalAlterConfigsRequest,
    AlterPartitionRequest,
    AlterPartitionsRequest,
    AllocateProducerIdsRequest,
    ElectLeadersRequest,
    AlterPartitionReassignmentsRequest,
    CreateAclsRequest,
    DeleteAclsRequest,
    AlterUserScramCredentialsRequest,
    AlterClientQuotasRequest,
    UpdateFeaturesRequest,
    DescribeQuorumRequest,
)

RESPONSE_TYPES: tuple[type, ...] = (
    BrokerRegistrationResponse,
    BrokerHeartbeatResponse,
    UnregisterBrokerResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
    CreatePartitionsResponse,
    AlterConfigsResponse,
    AlterPartitionResponse,
    AlterPartitionsResponse,
    AllocateProducerIdsResponse,
    ElectLeadersResponse,
    AlterPartitionReassignmentsResponse,
    CreateAclsResponse,
    DeleteAclsResponse,
    AlterUserScramCredentialsResponse,
    AlterClientQuotasResponse,
    UpdateFeaturesResponse,
    DescribeQuorumResponse,
)

_REQUESTS = Codec(REQUEST_TYPES, InvalidRequestError)
_RESPONSES = Codec(RESPONSE_TYPES, InvalidRequestError)


def encode_request(request: object) -> bytes:
    """The request as CBOR bytes. Raises ValueError for an object that is not a controller request."""
    return _REQUESTS.encode(request)


def decode_request(data: bytes) -> object:
    """The controller request in `data`. Raises InvalidRequestError for anything else."""
    return _REQUESTS.decode(data)


def encode_response(response: object) -> bytes:
    """The response as CBOR bytes. Raises ValueError for an object that is not a controller response."""
    return _RESPONSES.encode(response)


def decode_response(data: bytes) -> object:
    """The controller response in `data`. Raises InvalidRequestError for anything else."""
    return _RESPONSES.decode(data)


def code_and_message(result: object) -> tuple[int, str]:
    """(error code, message) of a controller call's answer: None (no answer in time), a KafkaError (the call
    failed) or the controller's response."""
    if result is None:
        return ErrorCode.REQUEST_TIMED_OUT, "no answer from the controller"
    if isinstance(result, KafkaError):
        return result.code, result.message
    return result.error_code, getattr(result, "message", "")


def error_name(code: int) -> str:
    """The Kafka name of an error code (for messages and logs)."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"UNKNOWN_ERROR_{code}"
