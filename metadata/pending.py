"""`Pending`: the records a controller handler has decided on so far, replayed on a scratch delta so that every
later check of the same request sees their effect (a topic and its partitions, an election after a fence).
Shared by the QuorumController (metadata/controller.py) and its topic operations (metadata/topic_control.py)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from metadata import reassignment
from metadata.image import MetadataDelta, MetadataImage, PartitionRegistration
from metadata.records import MetadataRecord, PartitionChangeRecord


class Pending:
    """The records a handler has decided on so far, replayed on a scratch delta so later checks see them."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.delta = MetadataDelta(image)
        self.records: list[MetadataRecord] = []

    def emit(self, record: MetadataRecord | None) -> None:
        """Decide on `record`. A change that brings a reassigned partition's target into the ISR is followed,
        in the same batch, by the change completing the reassignment (as Kafka's PartitionChangeBuilder)."""
        if record is None:
            return
        self.delta.replay(record)
        self.records.append(record)
        if isinstance(record, PartitionChangeRecord):
            state = self.delta.partition(record.topic_id, record.partition)
            if reassignment.is_reassigning(state):
                self.emit(reassignment.completion_change(record.topic_id, record.partition, state, self.is_active))

    def is_active(self, broker_id: int) -> bool:
        registration = self.delta.broker(broker_id)
        return registration is not None and registration.is_active

    def partitions_among(self, candidates: Mapping[bytes, frozenset[int]]
                         ) -> list[tuple[str, bytes, int, PartitionRegistration]]:
        """What `partitions` yields, for the partitions in `candidates` (by topic id) and those this batch has
        changed only: a scan for a state that the base image indexes (leaderless partitions, say) without a
        walk over every partition. Same order as `partitions`."""
        found = []
        for topic in self.image.topics.by_name.values():
            chosen = candidates.get(topic.topic_id, frozenset()) | self.delta.changed_partition_ids(topic.topic_id)
            for partition in sorted(chosen):
                if partition not in topic.partitions:
                    continue  # created in this batch: `partitions` covers the base image's partitions
                state = self.delta.partition(topic.topic_id, partition)
                if state is not None:
                    found.append((topic.name, topic.topic_id, partition, state))
        return found

    def partitions(self) -> Iterator[tuple[str, bytes, int, PartitionRegistration]]:
        """(topic name, topic id, partition, state) of every partition of the base image's live topics."""
        for topic in self.image.topics.by_name.values():
            for partition in topic.partitions:
                state = self.delta.partition(topic.topic_id, partition)
                if state is not None:
                    yield topic.name, topic.topic_id, partition, state
