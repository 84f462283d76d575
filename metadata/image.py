"""The metadata image (immutable) and the delta that produces the next one.

Theory of operation: `MetadataImage` is the cluster's metadata as of one point of the metadata log
(`provenance`: the Raft index and term of the last record applied). It is never modified: a
`MetadataDelta(image)` replays committed records in log order and `apply()` yields the next image, sharing
every unchanged part with the old one. Brokers ask the delta what changed for them
(`local_changes(broker_id)`: "I became leader of t-3 at epoch 7"), controllers keep the newest image as
their state. `image_to_records` writes an image as records (the snapshot) and `records_to_image` reads it
back; the two are inverse.

Invariants (asserted wherever a partition state is built, so a bad record crashes loudly instead of
spreading): the leader is in the ISR or is NO_LEADER; the ISR is a non-empty, duplicate-free subset of the
replicas; leader epochs and partition epochs never go backwards; broker epochs only grow per broker id;
producer-id blocks only move forward; provenance only moves forward.

Replay is deterministic: the same records in the same order give equal images on every node.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeVar

from metadata.records import (
    NO_LEADER,
    AccessControlEntryRecord,
    RemoveAccessControlEntryRecord,
    ClientQuotaRecord,
    QuotaEntityPart,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    ConfigResourceType,
    FeatureLevelRecord,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    SupportedFeature,
    TopicRecord,
    UnregisterBrokerRecord,
)

K = TypeVar("K")
V = TypeVar("V")


class FrozenMap(Mapping[K, V]):
    """An immutable, hashable mapping (insertion-ordered; equality ignores order, like dict)."""

    __slots__ = ("_data", "_hash")

    def __init__(self, data: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        self._data: dict[K, V] = dict(data)
        self._hash: int | None = None

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMap):
            return self._data == other._data
        if isinstance(other, Mapping):
            return self._data == dict(other)
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._data.items()))
        return self._hash

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"


EMPTY_MAP: FrozenMap = FrozenMap()

_frozen = dataclasses.dataclass(frozen=True, slots=True)


@_frozen
class Provenance:
    """Where in the metadata log an image is: the Raft index and term of the last record applied."""

    raft_index: int = -1
    raft_term: int = -1


@_frozen
class BrokerRegistration:
    broker_id: int
    incarnation_id: bytes
    broker_epoch: int
    host: str
    port: int
    rack: str | None
    roles: tuple[str, ...]
    fenced: bool
    in_controlled_shutdown: bool
    features: tuple[SupportedFeature, ...] = ()  # the levels its code supports (RegisterBrokerRecord)

    @property
    def is_active(self) -> bool:
        """Kafka's "active": may lead partitions and join ISRs (unfenced and not shutting down)."""
        return not self.fenced and not self.in_controlled_shutdown


@_frozen
class ClusterImage:
    brokers: FrozenMap[int, BrokerRegistration] = EMPTY_MAP

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return self.brokers.get(broker_id)

    def is_active(self, broker_id: int) -> bool:
        registration = self.brokers.get(broker_id)
        return registration is not None and registration.is_active

    def active_broker_ids(self) -> tuple[int, ...]:
        return tuple(sorted(b for b, r in self.brokers.items() if r.is_active))


@_frozen
class PartitionRegistration:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        assert len(set(self.replicas)) == len(self.replicas) >= 1, f"replicas={self.replicas}"
        assert len(set(self.isr)) == len(self.isr) >= 1, f"isr={self.isr}"
        assert set(self.isr) <= set(self.replicas), f"isr={self.isr} replicas={self.replicas}"
        assert self.leader == NO_LEADER or self.leader in self.isr, f"leader={self.leader} isr={self.isr}"
        assert self.leader_epoch >= 0 and self.partition_epoch >= 0, (
            f"leader_epoch={self.leader_epoch} partition_epoch={self.partition_epoch}"
        )

    @classmethod
    def from_record(cls, record: PartitionRecord) -> PartitionRegistration:
        return cls(
            replicas=record.replicas,
            isr=record.isr,
            leader=record.leader,
            leader_epoch=record.leader_epoch,
            partition_epoch=record.partition_epoch,
            removing_replicas=record.removing_replicas,
            adding_replicas=record.adding_replicas,
        )

    def merge(self, change: PartitionChangeRecord) -> PartitionRegistration:
        """The state after `change`: a new leader bumps the leader epoch, every change the partition epoch."""
        leader, leader_epoch = self.leader, self.leader_epoch
        if change.leader is not None:
            leader, leader_epoch = change.leader, self.leader_epoch + 1
        return PartitionRegistration(
            replicas=_or(change.replicas, self.replicas),
            isr=_or(change.isr, self.isr),
            leader=leader,
            leader_epoch=leader_epoch,
            partition_epoch=self.partition_epoch + 1,
            removing_replicas=_or(change.removing_replicas, self.removing_replicas),
            adding_replicas=_or(change.adding_replicas, self.adding_replicas),
        )


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


@_frozen
class TopicImage:
    name: str
    topic_id: bytes
    partitions: FrozenMap[int, PartitionRegistration] = EMPTY_MAP


@_frozen
class TopicsImage:
    by_id: FrozenMap[bytes, TopicImage] = EMPTY_MAP
    by_name: FrozenMap[str, TopicImage] = EMPTY_MAP

    def partition(self, topic_id: bytes, partition: int) -> PartitionRegistration | None:
        topic = self.by_id.get(topic_id)
        return None if topic is None else topic.partitions.get(partition)


@_frozen
class ConfigsImage:
    """Non-default configs per resource, keyed by (ConfigResourceType, resource name)."""

    resources: FrozenMap[tuple[int, str], FrozenMap[str, str]] = EMPTY_MAP

    def get(self, resource_type: int, resource_name: str) -> FrozenMap[str, str]:
        return self.resources.get((int(resource_type), resource_name), EMPTY_MAP)

    def topic(self, name: str) -> FrozenMap[str, str]:
        return self.get(ConfigResourceType.TOPIC, name)


@_frozen
class ProducerIdsImage:
    next_producer_id: int = 0


@_frozen
class FeaturesImage:
    """Each feature's level as the last FeatureLevelRecord set it, 0 included (turned off, not finalized); a
    feature never written is absent (metadata/features.py)."""

    levels: FrozenMap[str, int] = EMPTY_MAP

    def finalized(self) -> dict[str, int]:
        """The finalized features: those at a level above 0 (what ApiVersions advertises)."""
        return {name: level for name, level in self.levels.items() if level > 0}


@_frozen
class AclsImage:
    """Every ACL binding, by id (the records as replayed)."""

    by_id: FrozenMap[bytes, AccessControlEntryRecord] = EMPTY_MAP


@_frozen
class ScramImage:
    """SCRAM credentials by (user name, ScramMechanism)."""

    credentials: FrozenMap[tuple[str, int], UserScramCredentialRecord] = EMPTY_MAP


# A client quota entity: its (type, name) parts sorted by type; a None name is the type's default entity.
QuotaEntity = tuple[tuple[str, str | None], ...]


def quota_entity(parts) -> QuotaEntity:
    """The entity of `parts` (QuotaEntityPart or (type, name) pairs), in its canonical order."""
    pairs = [(p.entity_type, p.entity_name) if isinstance(p, QuotaEntityPart) else tuple(p) for p in parts]
    return tuple(sorted(pairs, key=_quota_part_order))


def _quota_part_order(part: tuple[str, str | None]) -> tuple[str, bool, str]:
    """A (type, name) part's sort key: by type, the default (None) name first (None does not compare with a
    string)."""
    return part[0], part[1] is not None, part[1] or ""


@_frozen
class ClientQuotasImage:
    """Client quotas by entity: each a map of quota key (producer_byte_rate, ...) to value."""

    entities: FrozenMap[QuotaEntity, FrozenMap[str, float]] = EMPTY_MAP

    def value(self, entity: QuotaEntity, key: str) -> float | None:
        values = self.entities.get(entity)
        return None if values is None else values.get(key)


@_frozen
class MetadataImage:
    provenance: Provenance = Provenance()
    cluster: ClusterImage = ClusterImage()
    topics: TopicsImage = TopicsImage()
    configs: ConfigsImage = ConfigsImage()
    producer_ids: ProducerIdsImage = ProducerIdsImage()
    features: FeaturesImage = FeaturesImage()
    acls: AclsImage = AclsImage()
    scram: ScramImage = ScramImage()
    quotas: ClientQuotasImage = ClientQuotasImage()


EMPTY_IMAGE = MetadataImage()


@_frozen
class LocalPartition:
    """One partition's new state as a broker sees it in a delta."""

    topic_name: str
    topic_id: bytes
    partition: int
    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@_frozen
class LocalReplicaChanges:
    """What a delta means for one broker (Kafka's LocalReplicaChanges)."""

    leaders: tuple[LocalPartition, ...]
    followers: tuple[LocalPartition, ...]
    deleted: tuple[LocalPartition, ...]  # the last state of a replica this broker no longer hosts


class MetadataDelta:
    """Replays records over an image; `apply()` yields the next image. Not thread-safe; one owner."""

    def __init__(self, image: MetadataImage) -> None:
        self._image = image
        self._provenance = image.provenance
        self._brokers: dict[int, BrokerRegistration | None] = {}  # None: unregistered
        self._created_topics: dict[bytes, str] = {}  # topic_id -> name, for topics born in this delta
        self._deleted_topics: dict[bytes, TopicImage] = {}  # base-image topics removed in this delta
        self._partitions: dict[bytes, dict[int, PartitionRegistration]] = {}  # changed or new partitions
        self._configs: dict[tuple[int, str], dict[str, str | None]] = {}  # None: deleted
        self._next_producer_id: int | None = None
        self._features: dict[str, int] = {}  # level 0: turned off (kept)
        self._acls: dict[bytes, AccessControlEntryRecord | None] = {}  # None: removed
        self._scram: dict[tuple[str, int], UserScramCredentialRecord | None] = {}  # None: removed
        self._quotas: dict[QuotaEntity, dict[str, float | None]] = {}  # None: removed

    @property
    def image(self) -> MetadataImage:
        """The image this delta started from."""
        return self._image

    # ---- replay -------------------------------------------------------------------------------------------

    def replay(self, record: MetadataRecord, provenance: Provenance | None = None) -> None:
        """Apply one committed record.

        `provenance` is the record's Raft index and term; without it the index counts up by one from the
        image's (for callers that do not track Raft positions, such as tests). A snapshot replays all its
        records at the snapshot's provenance. Raises AssertionError for a record that breaks an invariant
        (a bug in whoever wrote it); a valid record never raises.
        """
        if provenance is None:
            provenance = Provenance(self._provenance.raft_index + 1, self._provenance.raft_term)
        assert provenance.raft_index >= self._provenance.raft_index, f"{provenance} < {self._provenance}"
        handler = _REPLAY_HANDLERS.get(type(record))
        assert handler is not None, f"no replay for {type(record).__name__}"
        handler(self, record)
        self._provenance = provenance

    def _replay_register_broker(self, record: RegisterBrokerRecord) -> None:
        previous = self.broker(record.broker_id)
        assert previous is None or record.broker_epoch > previous.broker_epoch, (
            f"broker {record.broker_id} epoch {record.broker_epoch} <= {previous.broker_epoch}"
        )
        self._brokers[record.broker_id] = BrokerRegistration(
            broker_id=record.broker_id,
            incarnation_id=record.incarnation_id,
            broker_epoch=record.broker_epoch,
            host=record.host,
            port=record.port,
            rack=record.rack,
            roles=record.roles,
            fenced=record.fenced,
            in_controlled_shutdown=record.in_controlled_shutdown,
            features=record.features,
        )

    def _replay_broker_change(self, record: BrokerRegistrationChangeRecord) -> None:
        previous = self._registered_broker(record.broker_id, record.broker_epoch)
        self._brokers[record.broker_id] = dataclasses.replace(
            previous,
            fenced=_or(record.fenced, previous.fenced),
            in_controlled_shutdown=_or(record.in_controlled_shutdown, previous.in_controlled_shutdown),
        )

    def _replay_unregister_broker(self, record: UnregisterBrokerRecord) -> None:
        self._registered_broker(record.broker_id, record.broker_epoch)
        self._brokers[record.broker_id] = None

    def _replay_topic(self, record: TopicRecord) -> None:
        assert self.topic_name(record.topic_id) is None, f"topic id {record.topic_id.hex()} exists"
        assert self.topic_id(record.name) is None, f"topic {record.name!r} exists"
        self._created_topics[record.topic_id] = record.name
        self._partitions[record.topic_id] = {}

    def _replay_partition(self, record: PartitionRecord) -> None:
        assert self.topic_name(record.topic_id) is not None, f"unknown topic id {record.topic_id.hex()}"
        state = PartitionRegistration.from_record(record)
        previous = self.partition(record.topic_id, record.partition)
        if previous is not None:
            _assert_epochs_grow(previous, state)
        self._partitions.setdefault(record.topic_id, {})[record.partition] = state

    def _replay_partition_change(self, record: PartitionChangeRecord) -> None:
        previous = self.partition(record.topic_id, record.partition)
        assert previous is not None, f"unknown partition {record.topic_id.hex()}-{record.partition}"
        state = previous.merge(record)
        _assert_epochs_grow(previous, state)
        self._partitions.setdefault(record.topic_id, {})[record.partition] = state

    def _replay_config(self, record: ConfigRecord) -> None:
        key = (int(record.resource_type), record.resource_name)
        self._configs.setdefault(key, {})[record.name] = record.value

    def _replay_remove_topic(self, record: RemoveTopicRecord) -> None:
        name = self.topic_name(record.topic_id)
        assert name is not None, f"unknown topic id {record.topic_id.hex()}"
        if record.topic_id in self._created_topics:
            del self._created_topics[record.topic_id]
        else:
            self._deleted_topics[record.topic_id] = self._image.topics.by_id[record.topic_id]
        self._partitions.pop(record.topic_id, None)
        for config_name in self.configs(ConfigResourceType.TOPIC, name):
            self._configs.setdefault((int(ConfigResourceType.TOPIC), name), {})[config_name] = None

    def _replay_producer_ids(self, record: ProducerIdsRecord) -> None:
        current = self.next_producer_id()
        assert record.next_producer_id > current, f"next_producer_id {record.next_producer_id} <= {current}"
        self._next_producer_id = record.next_producer_id

    def _replay_feature_level(self, record: FeatureLevelRecord) -> None:
        assert record.level >= 0, f"feature {record.name} level {record.level}"
        self._features[record.name] = record.level

    def _replay_no_op(self, record: NoOpRecord) -> None:
        pass

    def _replay_acl(self, record: AccessControlEntryRecord) -> None:
        assert self.acl(record.id) is None, f"ACL {record.id.hex()} exists"
        self._acls[record.id] = record

    def _replay_remove_acl(self, record: RemoveAccessControlEntryRecord) -> None:
        assert self.acl(record.id) is not None, f"ACL {record.id.hex()} does not exist"
        self._acls[record.id] = None

    def _replay_scram(self, record: UserScramCredentialRecord) -> None:
        self._scram[(record.name, record.mechanism)] = record

    def _replay_remove_scram(self, record: RemoveUserScramCredentialRecord) -> None:
        key = (record.name, record.mechanism)
        assert self.scram_credential(*key) is not None, f"no SCRAM credential {key}"
        self._scram[key] = None

    def _replay_client_quota(self, record: ClientQuotaRecord) -> None:
        entity = quota_entity(record.entity)
        self._quotas.setdefault(entity, {})[record.key] = None if record.remove else record.value

    # ---- the state as of the records replayed so far --------------------------------------------------------

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        if broker_id in self._brokers:
            return self._brokers[broker_id]
        return self._image.cluster.broker(broker_id)

    def _registered_broker(self, broker_id: int, broker_epoch: int) -> BrokerRegistration:
        registration = self.broker(broker_id)
        assert registration is not None, f"broker {broker_id} is not registered"
        assert registration.broker_epoch == broker_epoch, (
            f"broker {broker_id} epoch {broker_epoch} != registered {registration.broker_epoch}"
        )
        return registration

    def topic_name(self, topic_id: bytes) -> str | None:
        """The name of a live topic (as of the records replayed so far), None if there is none."""
        if topic_id in self._created_topics:
            return self._created_topics[topic_id]
        if topic_id in self._deleted_topics:
            return None
        topic = self._image.topics.by_id.get(topic_id)
        return None if topic is None else topic.name

    def topic_id(self, name: str) -> bytes | None:
        for topic_id, created_name in self._created_topics.items():
            if created_name == name:
                return topic_id
        topic = self._image.topics.by_name.get(name)
        if topic is None or topic.topic_id in self._deleted_topics:
            return None
        return topic.topic_id

    def partition(self, topic_id: bytes, partition: int) -> PartitionRegistration | None:
        if self.topic_name(topic_id) is None:
            return None
        changed = self._partitions.get(topic_id, {})
        if partition in changed:
            return changed[partition]
        return self._image.topics.partition(topic_id, partition)

    def configs(self, resource_type: int, resource_name: str) -> dict[str, str]:
        merged = dict(self._image.configs.get(resource_type, resource_name))
        for name, value in self._configs.get((int(resource_type), resource_name), {}).items():
            if value is None:
                merged.pop(name, None)
            else:
                merged[name] = value
        return merged

    def acl(self, acl_id: bytes) -> AccessControlEntryRecord | None:
        if acl_id in self._acls:
            return self._acls[acl_id]
        return self._image.acls.by_id.get(acl_id)

    def acls(self) -> dict[bytes, AccessControlEntryRecord]:
        """Every ACL as of the records replayed so far."""
        merged = dict(self._image.acls.by_id)
        for acl_id, record in self._acls.items():
            if record is None:
                merged.pop(acl_id, None)
            else:
                merged[acl_id] = record
        return merged

    def scram_credential(self, name: str, mechanism: int) -> UserScramCredentialRecord | None:
        key = (name, mechanism)
        if key in self._scram:
            return self._scram[key]
        return self._image.scram.credentials.get(key)

    def client_quotas(self, entity: QuotaEntity) -> dict[str, float]:
        """The quotas of `entity` as of the records replayed so far."""
        merged = dict(self._image.quotas.entities.get(entity, {}))
        for key, value in self._quotas.get(entity, {}).items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        return merged

    def next_producer_id(self) -> int:
        if self._next_producer_id is not None:
            return self._next_producer_id
        return self._image.producer_ids.next_producer_id

    # ---- apply ----------------------------------------------------------------------------------------------

    def apply(self) -> MetadataImage:
        """The image after every record replayed so far (the delta stays usable)."""
        return MetadataImage(
            provenance=self._provenance,
            cluster=self._apply_cluster(),
            topics=self._apply_topics(),
            configs=self._apply_configs(),
            producer_ids=self._apply_producer_ids(),
            features=self._apply_features(),
            acls=self._apply_acls(),
            scram=self._apply_scram(),
            quotas=self._apply_quotas(),
        )

    def _apply_quotas(self) -> ClientQuotasImage:
        if not self._quotas:
            return self._image.quotas
        entities = dict(self._image.quotas.entities)
        for entity in self._quotas:
            values = self.client_quotas(entity)
            if values:
                entities[entity] = FrozenMap(sorted(values.items()))
            else:
                entities.pop(entity, None)
        return ClientQuotasImage(FrozenMap(sorted(entities.items(),
                                                  key=lambda item: tuple(map(_quota_part_order, item[0])))))

    def _apply_acls(self) -> AclsImage:
        if not self._acls:
            return self._image.acls
        return AclsImage(FrozenMap(sorted(self.acls().items())))

    def _apply_scram(self) -> ScramImage:
        if not self._scram:
            return self._image.scram
        credentials = dict(self._image.scram.credentials)
        for key, record in self._scram.items():
            if record is None:
                credentials.pop(key, None)
            else:
                credentials[key] = record
        return ScramImage(FrozenMap(sorted(credentials.items())))

    def _apply_cluster(self) -> ClusterImage:
        if not self._brokers:
            return self._image.cluster
        brokers = dict(self._image.cluster.brokers)
        for broker_id, registration in self._brokers.items():
            if registration is None:
                brokers.pop(broker_id, None)
            else:
                brokers[broker_id] = registration
        return ClusterImage(FrozenMap(sorted(brokers.items())))

    def _apply_topics(self) -> TopicsImage:
        if not (self._partitions or self._deleted_topics or self._created_topics):
            return self._image.topics
        by_id = dict(self._image.topics.by_id)
        for topic_id in self._deleted_topics:
            del by_id[topic_id]
        for topic_id, changed in self._partitions.items():
            base = by_id.get(topic_id)
            name = base.name if base is not None else self._created_topics[topic_id]
            partitions = dict(base.partitions) if base is not None else {}
            partitions.update(changed)
            by_id[topic_id] = TopicImage(name, topic_id, FrozenMap(sorted(partitions.items())))
        by_name = FrozenMap(sorted((topic.name, topic) for topic in by_id.values()))
        return TopicsImage(FrozenMap(sorted(by_id.items())), by_name)

    def _apply_configs(self) -> ConfigsImage:
        if not self._configs:
            return self._image.configs
        resources = dict(self._image.configs.resources)
        for key in self._configs:
            merged = self.configs(*key)
            if merged:
                resources[key] = FrozenMap(sorted(merged.items()))
            else:
                resources.pop(key, None)
        return ConfigsImage(FrozenMap(sorted(resources.items())))

    def _apply_producer_ids(self) -> ProducerIdsImage:
        if self._next_producer_id is None:
            return self._image.producer_ids
        return ProducerIdsImage(self._next_producer_id)

    def _apply_features(self) -> FeaturesImage:
        if not self._features:
            return self._image.features
        levels = dict(self._image.features.levels)
        levels.update(self._features)
        return FeaturesImage(FrozenMap(sorted(levels.items())))

    # ---- what changed ---------------------------------------------------------------------------------------

    def changed_partitions(self) -> tuple[LocalPartition, ...]:
        """Every partition of a live topic created or changed in this delta, in (topic name, partition) order."""
        changed = []
        for topic_id, partitions in self._partitions.items():
            name = self.topic_name(topic_id)
            assert name is not None, f"changed partitions of a deleted topic {topic_id.hex()}"
            changed.extend(_local(name, topic_id, p, state) for p, state in partitions.items())
        return tuple(sorted(changed, key=lambda c: (c.topic_name, c.partition)))

    def changed_partition_ids(self, topic_id: bytes) -> frozenset[int]:
        """The partitions of `topic_id` created or changed in this delta."""
        return frozenset(self._partitions.get(topic_id, ()))

    def deleted_partitions(self) -> tuple[LocalPartition, ...]:
        """The last state of every partition of a topic deleted in this delta (base-image topics only)."""
        deleted = [
            _local(topic.name, topic_id, p, state)
            for topic_id, topic in self._deleted_topics.items()
            for p, state in topic.partitions.items()
        ]
        return tuple(sorted(deleted, key=lambda c: (c.topic_name, c.partition)))

    def changed_broker_ids(self) -> tuple[int, ...]:
        return tuple(sorted(self._brokers))

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        """What this delta means for `broker_id` (Kafka's TopicsDelta.localChanges).

        leaders: changed partitions it now leads; followers: changed partitions it replicates but does not
        lead; deleted: partitions it hosted that were deleted or reassigned away from it.
        """
        leaders, followers, deleted = [], [], []
        for change in self.changed_partitions():
            if change.leader == broker_id:
                leaders.append(change)
            elif broker_id in change.replicas:
                followers.append(change)
            else:
                before = self._image.topics.partition(change.topic_id, change.partition)
                if before is not None and broker_id in before.replicas:
                    deleted.append(change)
        deleted.extend(p for p in self.deleted_partitions() if broker_id in p.replicas)
        return LocalReplicaChanges(tuple(leaders), tuple(followers), tuple(deleted))


def _local(name: str, topic_id: bytes, partition: int, state: PartitionRegistration) -> LocalPartition:
    return LocalPartition(
        topic_name=name,
        topic_id=topic_id,
        partition=partition,
        leader=state.leader,
        leader_epoch=state.leader_epoch,
        partition_epoch=state.partition_epoch,
        replicas=state.replicas,
        isr=state.isr,
    )


def _assert_epochs_grow(before: PartitionRegistration, after: PartitionRegistration) -> None:
    assert after.leader_epoch >= before.leader_epoch, f"leader_epoch {before.leader_epoch}->{after.leader_epoch}"
    assert after.partition_epoch >= before.partition_epoch, (
        f"partition_epoch {before.partition_epoch}->{after.partition_epoch}"
    )


_REPLAY_HANDLERS = {
    RegisterBrokerRecord: MetadataDelta._replay_register_broker,
    BrokerRegistrationChangeRecord: MetadataDelta._replay_broker_change,
    UnregisterBrokerRecord: MetadataDelta._replay_unregister_broker,
    TopicRecord: MetadataDelta._replay_topic,
    PartitionRecord: MetadataDelta._replay_partition,
    PartitionChangeRecord: MetadataDelta._replay_partition_change,
    ConfigRecord: MetadataDelta._replay_config,
    RemoveTopicRecord: MetadataDelta._replay_remove_topic,
    ProducerIdsRecord: MetadataDelta._replay_producer_ids,
    FeatureLevelRecord: MetadataDelta._replay_feature_level,
    NoOpRecord: MetadataDelta._replay_no_op,
    AccessControlEntryRecord: MetadataDelta._replay_acl,
    RemoveAccessControlEntryRecord: MetadataDelta._replay_remove_acl,
    UserScramCredentialRecord: MetadataDelta._replay_scram,
    RemoveUserScramCredentialRecord: MetadataDelta._replay_remove_scram,
    ClientQuotaRecord: MetadataDelta._replay_client_quota,
}


# ---- snapshots --------------------------------------------------------------------------------------------


def image_to_records(image: MetadataImage) -> list[MetadataRecord]:
    """The image as records (a snapshot); `records_to_image(image_to_records(i), i.provenance) == i`."""
    records: list[MetadataRecord] = [FeatureLevelRecord(n, level) for n, level in image.features.levels.items()]
    records.extend(_broker_record(r) for r in image.cluster.brokers.values())
    for topic in image.topics.by_name.values():
        records.append(TopicRecord(topic.name, topic.topic_id))
        records.extend(_partition_record(topic.topic_id, p, s) for p, s in topic.partitions.items())
    for (resource_type, resource_name), configs in image.configs.resources.items():
        records.extend(ConfigRecord(resource_type, resource_name, n, v) for n, v in configs.items())
    if image.producer_ids.next_producer_id > 0:
        records.append(ProducerIdsRecord(-1, -1, image.producer_ids.next_producer_id))
    records.extend(image.acls.by_id.values())
    records.extend(image.scram.credentials.values())
    for entity, values in image.quotas.entities.items():
        parts = tuple(QuotaEntityPart(entity_type, name) for entity_type, name in entity)
        records.extend(ClientQuotaRecord(parts, key, value) for key, value in values.items())
    return records


def records_to_image(records: Iterable[MetadataRecord], provenance: Provenance) -> MetadataImage:
    """The image a snapshot's records describe, stamped with the snapshot's provenance."""
    delta = MetadataDelta(EMPTY_IMAGE)
    for record in records:
        delta.replay(record, provenance)
    return delta.apply()


def _broker_record(registration: BrokerRegistration) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(
        broker_id=registration.broker_id,
        incarnation_id=registration.incarnation_id,
        broker_epoch=registration.broker_epoch,
        host=registration.host,
        port=registration.port,
        rack=registration.rack,
        roles=registration.roles,
        fenced=registration.fenced,
        in_controlled_shutdown=registration.in_controlled_shutdown,
        features=registration.features,
    )


def _partition_record(topic_id: bytes, partition: int, state: PartitionRegistration) -> PartitionRecord:
    return PartitionRecord(
        topic_id=topic_id,
        partition=partition,
        replicas=state.replicas,
        isr=state.isr,
        leader=state.leader,
        leader_epoch=state.leader_epoch,
        partition_epoch=state.partition_epoch,
        removing_replicas=state.removing_replicas,
        adding_replicas=state.adding_replicas,
    )
