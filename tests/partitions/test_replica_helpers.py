"""Shared wiring for the replica tests: batches, logs over MemoryStorage, and a pure "cluster" of Partitions
joined by direct calls (no sockets), in the spirit of h11's and etcd-raft's paired-state-machine tests.

Every replica runs the real `partitions.log.PartitionLog` over its own MemoryStorage; reopening a replica
reopens its log from that storage, as a restarted process would.
"""

from __future__ import annotations

from partitions.log import PartitionLog
from partitions.log_config import LogConfig
from partitions.records import build_batch, iter_records
from partitions.replica import Partition
from partitions.storage import MemoryStorage

TOPIC = "orders"
FETCH_BYTES_MAX = 1 << 20


def batch(*values: bytes, timestamp_ms: int = 1_000) -> bytes:
    """One uncompressed batch holding `values` (no keys), as a producer would send it."""
    return build_batch([(None, value) for value in values], base_timestamp=timestamp_ms)


def values_of(records: bytes) -> list[bytes]:
    return [record.value for _, record in iter_records(records)]


def offsets_and_values(records: bytes) -> list[tuple[int, bytes]]:
    return [(record.offset, record.value) for _, record in iter_records(records)]


def make_log(storage: MemoryStorage, partition: int = 0, now_ms: int = 0) -> PartitionLog:
    """Open (or reopen and recover, as after a crash) the partition's log in `storage`."""
    return PartitionLog.open(storage, f"{TOPIC}-{partition}", LogConfig(), now_ms)


class Cluster:
    """Three (or n) Partitions of one topic-partition, one per broker, each with its own MemoryStorage.
    `fetch(follower)` carries one follower fetch and its response by direct calls."""

    def __init__(self, broker_ids=(1, 2, 3), *, min_insync_replicas: int = 2, replica_lag_time_max_ms: int = 30_000):
        self.broker_ids = tuple(broker_ids)
        self.storages = {broker: MemoryStorage() for broker in self.broker_ids}
        self.min_insync_replicas = min_insync_replicas
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.partitions = {broker: self.open(broker) for broker in self.broker_ids}
        self.leader_id: int | None = None
        self.leader_epoch = -1
        self.partition_epoch = -1

    def open(self, broker: int) -> Partition:
        """(Re)open broker's replica over its storage, as after a process restart."""
        return Partition(
            TOPIC, 0, broker, make_log(self.storages[broker]),
            min_insync_replicas=self.min_insync_replicas, replica_lag_time_max_ms=self.replica_lag_time_max_ms,
        )

    def __getitem__(self, broker: int) -> Partition:
        return self.partitions[broker]

    def elect(self, leader: int, isr=None, now_ms: int = 0, followers=None) -> None:
        """The controller's decision, delivered to `leader` and to `followers` (default: every other broker)."""
        isr = tuple(isr if isr is not None else self.broker_ids)
        self.leader_id = leader
        self.leader_epoch += 1
        self.partition_epoch += 1
        self[leader].become_leader(self.leader_epoch, self.partition_epoch, self.broker_ids, isr, now_ms)
        for broker in followers if followers is not None else self.broker_ids:
            if broker != leader:
                self[broker].become_follower(leader, self.leader_epoch, self.partition_epoch, self.broker_ids, isr)

    def fetch(self, follower: int, now_ms: int, max_bytes: int = FETCH_BYTES_MAX):
        """One follower fetch round trip. Returns the leader's FollowerFetchResult. An ISR expansion the fetch
        proposes is left pending (the test decides when the controller commits it)."""
        request = self[follower].follower_fetch_request(now_ms)
        result = self[self.leader_id].handle_follower_fetch(
            follower, request.fetch_offset, request.last_fetched_epoch, now_ms, max_bytes,
            current_leader_epoch=request.current_leader_epoch,
        )
        self[follower].follower_handle_fetch_response(
            result.records, result.high_watermark, result.log_start_offset, result.diverging_epoch, now_ms,
            fetch_offset=request.fetch_offset, replicated_offset=self[self.leader_id].replicated_offset,
        )
        return result

    def commit_isr(self, new_isr, now_ms: int) -> None:
        """The controller commits an ISR change: the leader applies it (AlterPartition response)."""
        self.partition_epoch += 1
        assert self[self.leader_id].apply_isr_change(tuple(new_isr), self.partition_epoch, now_ms)

    def log_values(self, broker: int) -> list[tuple[int, bytes]]:
        log = self[broker].log
        return offsets_and_values(log.read(log.log_start_offset, 1 << 30, None, True).records)
