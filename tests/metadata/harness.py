"""A controller driven as the node drives it: handle, commit (here: a list standing in for the Raft log),
replay, then answer. No mocks: the real controller, the real records."""

import random

from metadata.controller import ControllerConfig, QuorumController
from metadata.records import decode_record_batch, encode_record_batch
from metadata.requests import (
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    ConfigEntry,
    CreatableTopic,
    CreateTopicsRequest,
)
from partitions.errors import ErrorCode


class Cluster:
    def __init__(self, config: ControllerConfig | None = None, seed: int = 7) -> None:
        self.controller = QuorumController(config or ControllerConfig(), random.Random(seed))
        self.log: list[bytes] = []  # committed Raft entries, one per result
        self.now_ms = 0

    def commit(self, records) -> None:
        if records:
            entry = encode_record_batch(records)
            self.log.append(entry)
            self.controller.replay_batch(decode_record_batch(entry))

    def run(self, request, now_ms: int | None = None):
        if now_ms is not None:
            self.now_ms = now_ms
        result = self.controller.handle(request, self.now_ms)
        self.commit(result.records)
        return result.response

    def tick(self, now_ms: int):
        self.now_ms = now_ms
        result = self.controller.tick(now_ms)
        self.commit(result.records)
        return result.response

    def tick_until(self, now_ms: int, step_ms: int = 250):
        """Tick every `step_ms` from the current time to `now_ms`, as a running controller does (a longer gap
        between ticks is a stall of the controller, which its sessions do not count); the last response."""
        while self.now_ms + step_ms < now_ms:
            self.tick(self.now_ms + step_ms)
        return self.tick(now_ms)

    @property
    def image(self):
        return self.controller.image()

    def epoch(self, broker_id: int) -> int:
        return self.image.cluster.broker(broker_id).broker_epoch

    def register(self, broker_id: int, rack: str | None = None, incarnation: int = 0, previous_epoch: int = -1):
        incarnation_id = bytes([broker_id % 256, incarnation % 256]) * 8
        return self.run(BrokerRegistrationRequest(broker_id, incarnation_id, "127.0.0.1", 9000 + broker_id, rack,
                                                  previous_broker_epoch=previous_epoch))

    def heartbeat(self, broker_id: int, **kwargs):
        offset = kwargs.pop("offset", self.image.provenance.raft_index)
        return self.run(BrokerHeartbeatRequest(broker_id, self.epoch(broker_id), offset, **kwargs))

    def start_brokers(self, *broker_ids: int, racks: dict | None = None) -> None:
        for broker_id in broker_ids:
            assert self.register(broker_id, (racks or {}).get(broker_id)).error_code == ErrorCode.NONE
        for broker_id in broker_ids:
            assert self.heartbeat(broker_id).is_fenced is False

    def create_topic(self, name: str, partitions: int, rf: int, configs: dict | None = None, assignments=None):
        entries = tuple(ConfigEntry(k, v) for k, v in (configs or {}).items())
        topic = CreatableTopic(name, partitions, rf, assignments, entries)
        return self.run(CreateTopicsRequest((topic,))).topics[0]

    def topic(self, name: str):
        return self.image.topics.by_name[name]

    def partition(self, name: str, partition: int):
        return self.topic(name).partitions[partition]

    def alter_isr(self, name: str, index: int, isr, **overrides):
        state = self.partition(name, index)
        fields = dict(
            broker_id=state.leader,
            broker_epoch=self.epoch(state.leader) if state.leader >= 0 else -1,
            topic_id=self.topic(name).topic_id,
            partition=index,
            leader_epoch=state.leader_epoch,
            partition_epoch=state.partition_epoch,
            new_isr=tuple(isr),
        )
        fields.update(overrides)
        return self.run(AlterPartitionRequest(**fields))

    def keep_alive(self, *broker_ids: int, now_ms: int) -> None:
        """Heartbeats from `broker_ids` at `now_ms`, without asking for anything."""
        for broker_id in broker_ids:
            self.now_ms = now_ms
            self.heartbeat(broker_id)
