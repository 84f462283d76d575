"""Reassignment through the brokers, sans-IO: a new replica fetches, joins the ISR through the leader's
AlterPartition, the move completes and the removed replica's log is deleted; and the follower replication
throttle (broker/throttle.py) holds a moving replica to its rate while other replicas fetch freely."""

from __future__ import annotations

from broker.throttle import ReplicationQuota, is_throttled
from metadata.records import ConfigResourceType
from metadata.requests import (
    AlterableConfig,
    AlterPartitionReassignmentsRequest,
    ConfigResource,
    CreatableTopic,
    CreateTopicsRequest,
    IncrementalAlterConfigsRequest,
    ReassignablePartition,
    ReplicaAssignment,
)
from partitions.errors import ErrorCode
from tests.broker.test_broker_sans_io import Cluster, produce_request

VALUE = b"v" * 1000


def moving_cluster() -> Cluster:
    cluster = Cluster(min_isr=1)
    topic = CreatableTopic(name="m", num_partitions=-1, replication_factor=-1, assignments=(
        ReplicaAssignment(0, (1, 2)), ReplicaAssignment(1, (1, 2))))
    assert cluster.commit(CreateTopicsRequest(topics=(topic,))).topics[0].error_code == ErrorCode.NONE
    for partition in (0, 1):
        for _ in range(10):
            response = cluster.call(1, 0, 8, produce_request("m", partition, [VALUE] * 5, acks=1))
            assert response.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    cluster.replicate()
    return cluster


def partition_state(cluster: Cluster, partition: int = 0):
    return cluster.images[1].topics.by_name["m"].partitions[partition]


def log_values(broker, partition: int = 0) -> list[bytes]:
    hosted = broker.partitions[("m", partition)]
    records = hosted.log.read(0, 1 << 30).records
    from partitions.records import decode_batches
    return [record.value for batch in decode_batches(records) for record in batch.records]


def test_a_move_completes_through_the_brokers_and_deletes_the_old_replica():
    cluster = moving_cluster()
    response = cluster.commit(AlterPartitionReassignmentsRequest((ReassignablePartition("m", 0, (3, 1)),)))
    assert response.partitions[0].error_code == ErrorCode.NONE
    assert partition_state(cluster).adding_replicas == (3,)
    assert ("m", 0) in cluster.brokers[3].partitions  # the new replica exists and fetches
    cluster.replicate(rounds=6)
    state = partition_state(cluster)
    assert (state.replicas, state.isr, state.adding_replicas, state.removing_replicas) == ((3, 1), (1, 3), (), ())
    assert ("m", 0) not in cluster.brokers[2].partitions
    assert not cluster.brokers[2].storage.exists("logs/m-0")
    assert log_values(cluster.brokers[3]) == log_values(cluster.brokers[1]) and len(log_values(cluster.brokers[1])) == 50


def test_the_follower_throttle_holds_a_moving_replica_to_its_rate_and_leaves_others_alone():
    cluster = moving_cluster()
    rate = 5_000  # bytes per second; a batch of 5 records is about 5 KB
    cluster.commit(IncrementalAlterConfigsRequest((
        ConfigResource(ConfigResourceType.BROKER, "", (AlterableConfig("follower.replication.throttled.rate", str(rate)),)),
        ConfigResource(ConfigResourceType.TOPIC, "m", (
            AlterableConfig("follower.replication.throttled.replicas", "0:3"),)),
    )))
    follower = cluster.brokers[3]
    assert follower.follower_quota.rate == rate
    cluster.commit(AlterPartitionReassignmentsRequest((ReassignablePartition("m", 0, (3, 1)),
                                                       ReassignablePartition("m", 1, (3, 1)))))
    assert follower.partitions[("m", 0)].follower_throttled and not follower.partitions[("m", 1)].follower_throttled
    end = cluster.brokers[1].partitions[("m", 0)].log.log_end_offset
    progress = []
    for _ in range(6):  # six seconds, many fetch rounds each
        for _ in range(5):
            cluster.replicate(rounds=2)
            cluster.now_ms += 200
        progress.append(follower.partitions[("m", 0)].log.log_end_offset)
    assert follower.partitions[("m", 1)].log.log_end_offset == end  # unthrottled: caught up at once
    fetched_bytes = [offset * len(VALUE) for offset in progress]
    # About `rate` per second (a fetch may overdraw the bucket by one response, never more).
    assert fetched_bytes[0] <= 2 * rate + 6_000
    assert all(b - a <= rate + 6_000 for a, b in zip(fetched_bytes, fetched_bytes[1:]))
    assert progress[-1] > progress[0] and progress[-1] < end  # it progresses, at the rate: 50 KB take > 6 s
    cluster.commit(IncrementalAlterConfigsRequest((
        ConfigResource(ConfigResourceType.BROKER, "", (
            AlterableConfig("follower.replication.throttled.rate", None, op=1),)),)))
    assert follower.follower_quota.rate is None
    cluster.replicate(rounds=4)
    assert follower.partitions[("m", 0)].log.log_end_offset == end


def test_quota_and_throttled_replica_lists():
    quota = ReplicationQuota(1_000)
    assert not quota.exceeded(0)
    quota.record(1_500, 0)
    assert quota.exceeded(0) and quota.exceeded(400) and not quota.exceeded(600)
    assert not ReplicationQuota(None).exceeded(0)
    assert is_throttled("0:3,1:4", 0, 3) and not is_throttled("0:3,1:4", 1, 3) and is_throttled(" * ", 7, 9)
    assert not is_throttled(None, 0, 3) and not is_throttled("", 0, 3)
