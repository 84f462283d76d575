"""Metadata records: the entries of the metadata log (KRaft's record types, Kafka's names).

Theory of operation: the metadata log is the only source of truth for the cluster's metadata. The active
controller turns requests into records; every node (controllers and brokers) replays the committed records
in log order into a `MetadataDelta` and from it the next `MetadataImage`. A snapshot is an image written
back as records of these same types (`image.image_to_records`).

Each record is a small frozen dataclass with a `version` (the newest schema version this code knows is the
default). On the wire and on disk it is a CBOR map `{"type": name, "v": version, ...fields}`
(`encode_record`), decoded by an allow-list (`decode_record`), never by pickle. A record never carries
derived state that replay can compute: a PartitionChangeRecord says what changed; the leader epoch and
partition epoch bumps are replay's job, as in Kafka (`PartitionRegistration.merge`).
"""

from __future__ import annotations

import dataclasses
import enum

import cbor2

from metadata.codec import Codec, encoded_bytes_max
from partitions.errors import CorruptRecordError

NO_LEADER = -1  # Kafka's LeaderConstants.NO_LEADER: the partition is offline
UUID_BYTES = 16


class ConfigResourceType(enum.IntEnum):
    """Kafka's ConfigResource.Type wire values (the ones the controller stores)."""

    TOPIC = 2
    BROKER = 4
    CLIENT_METRICS = 16  # a client telemetry subscription (KIP-714)


_record = dataclasses.dataclass(frozen=True, slots=True)


@dataclasses.dataclass(frozen=True, slots=True)
class SupportedFeature:
    """A feature and the range of its levels a node's code supports (KIP-584)."""

    name: str
    min_level: int
    max_level: int


def _version(default: int = 0):
    return dataclasses.field(default=default, kw_only=True)


@_record
class RegisterBrokerRecord:
    """A broker registered (or re-registered with a new incarnation). Written fenced, as in KRaft.

    `features`: the feature levels the broker's code supports (Kafka's BrokerFeature of the record); empty in
    the records of nodes that predate them (metadata/features.py reads that as LEGACY_SUPPORTED)."""

    broker_id: int
    incarnation_id: bytes
    broker_epoch: int
    host: str
    port: int
    rack: str | None
    roles: tuple[str, ...]
    fenced: bool = True
    in_controlled_shutdown: bool = False
    features: tuple[SupportedFeature, ...] = ()
    version: int = _version()


@_record
class BrokerRegistrationChangeRecord:
    """Fence / unfence a broker, or mark it in controlled shutdown. None means "unchanged"."""

    broker_id: int
    broker_epoch: int
    fenced: bool | None = None
    in_controlled_shutdown: bool | None = None
    version: int = _version()


@_record
class UnregisterBrokerRecord:
    """A broker left the cluster; its registration is gone."""

    broker_id: int
    broker_epoch: int
    version: int = _version()


@_record
class TopicRecord:
    """A topic was created; its partitions follow as PartitionRecords."""

    name: str
    topic_id: bytes
    version: int = _version()


@_record
class PartitionRecord:
    """A partition's complete state (creation, and in snapshots)."""

    topic_id: bytes
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    version: int = _version()


@_record
class PartitionChangeRecord:
    """A change to a partition. None means "unchanged".

    Replay rule (Kafka's): a record with a leader bumps the leader epoch; every record bumps the partition
    epoch.
    """

    topic_id: bytes
    partition: int
    leader: int | None = None
    isr: tuple[int, ...] | None = None
    replicas: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None
    version: int = _version()


@_record
class ConfigRecord:
    """Set (value) or delete (value None) one config of a topic or broker ("" = cluster default)."""

    resource_type: int
    resource_name: str
    name: str
    value: str | None
    version: int = _version()


@_record
class RemoveTopicRecord:
    """A topic was deleted, with its partitions and configs."""

    topic_id: bytes
    version: int = _version()


@_record
class ProducerIdsRecord:
    """A producer-id block was handed out; the next block starts at `next_producer_id`."""

    broker_id: int
    broker_epoch: int
    next_producer_id: int
    version: int = _version()


@_record
class FeatureLevelRecord:
    """A cluster feature's finalized level; level 0 turns the feature off (no longer finalized), and the image
    keeps that 0 so the controller's bootstrap levels never overwrite it (metadata/features.py)."""

    name: str
    level: int
    version: int = _version()


@_record
class NoOpRecord:
    """Written by a newly elected active controller; its commit proves the log before it is committed."""

    version: int = _version()


@_record
class AccessControlEntryRecord:
    """An ACL binding was created (Kafka's AccessControlEntryRecord); `id` names it for removal."""

    id: bytes
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int
    version: int = _version()


@_record
class RemoveAccessControlEntryRecord:
    """An ACL binding was deleted."""

    id: bytes
    version: int = _version()


@_record
class UserScramCredentialRecord:
    """A user's SCRAM credential for one mechanism was set (salted: never the password)."""

    name: str
    mechanism: int  # security.sasl.ScramMechanism
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int
    version: int = _version()


@_record
class RemoveUserScramCredentialRecord:
    """A user's SCRAM credential for one mechanism was deleted."""

    name: str
    mechanism: int
    version: int = _version()


@dataclasses.dataclass(frozen=True, slots=True)
class QuotaEntityPart:
    """One part of a client quota entity: its type ("user" or "client-id") and name (None: the default)."""

    entity_type: str
    entity_name: str | None


@_record
class ClientQuotaRecord:
    """A client quota of an entity was set to `value` or, with `remove`, removed (Kafka's ClientQuotaRecord)."""

    entity: tuple[QuotaEntityPart, ...]
    key: str  # producer_byte_rate, consumer_byte_rate, ...
    value: float = 0.0
    remove: bool = False
    version: int = _version()


RECORD_TYPES: tuple[type, ...] = (
    RegisterBrokerRecord,
    BrokerRegistrationChangeRecord,
    UnregisterBrokerRecord,
    TopicRecord,
    PartitionRecord,
    PartitionChangeRecord,
    ConfigRecord,
    RemoveTopicRecord,
    ProducerIdsRecord,
    FeatureLevelRecord,
    NoOpRecord,
    AccessControlEntryRecord,
    RemoveAccessControlEntryRecord,
    UserScramCredentialRecord,
    RemoveUserScramCredentialRecord,
    ClientQuotaRecord,
)

MetadataRecord = (
    RegisterBrokerRecord
    | BrokerRegistrationChangeRecord
    | UnregisterBrokerRecord
    | TopicRecord
    | PartitionRecord
    | PartitionChangeRecord
    | ConfigRecord
    | RemoveTopicRecord
    | ProducerIdsRecord
    | FeatureLevelRecord
    | NoOpRecord
    | AccessControlEntryRecord
    | RemoveAccessControlEntryRecord
    | UserScramCredentialRecord
    | RemoveUserScramCredentialRecord
    | ClientQuotaRecord
)

_CODEC = Codec(RECORD_TYPES, CorruptRecordError)
records_per_batch_max = 1_000_000


def encode_record(record: MetadataRecord) -> bytes:
    """The record as CBOR bytes. Raises ValueError if `record` is not a metadata record type."""
    return _CODEC.encode(record)


def decode_record(data: bytes) -> MetadataRecord:
    """The record encoded in `data`.

    Raises CorruptRecordError for bytes that are not CBOR, an unknown record type, an unsupported version,
    or a missing, unknown or mistyped field.
    """
    return _CODEC.decode(data)


def encode_record_batch(records: list[MetadataRecord]) -> bytes:
    """The records of one controller result as one Raft entry: a CBOR array of encoded records.

    Committing a result as one entry makes it atomic (a topic never commits without its partitions).
    Raises ValueError for a non-record.
    """
    assert len(records) <= records_per_batch_max, f"{len(records)} records in one batch"
    return cbor2.dumps([encode_record(record) for record in records])


def decode_record_batch(data: bytes) -> list[MetadataRecord]:
    """The records of one Raft entry written by `encode_record_batch`.

    Raises CorruptRecordError for anything else (see `decode_record`).
    """
    if len(data) > encoded_bytes_max:
        raise CorruptRecordError(f"record batch is {len(data)} bytes, more than {encoded_bytes_max}")
    try:
        items = cbor2.loads(data)
    except Exception as exc:  # cbor2 raises several types
        raise CorruptRecordError(f"record batch is not valid CBOR: {exc}") from None
    if not isinstance(items, list) or len(items) > records_per_batch_max:
        raise CorruptRecordError(f"record batch is not an array of at most {records_per_batch_max} records")
    if not all(type(item) is bytes for item in items):
        raise CorruptRecordError("record batch items must be byte strings")
    return [decode_record(item) for item in items]
