"""BrokerCore's leadership listeners (what coordinators load and unload shards from), driven by real metadata
deltas from a real QuorumController (Kafka's onElection / onResignation of the coordinator runtime)."""

from metadata.image import MetadataDelta, MetadataImage
from metadata.requests import (BrokerHeartbeatRequest, CreatableTopic, CreateTopicsRequest, DeleteTopicsRequest,
                               ReplicaAssignment)
from tests.broker.test_broker_sans_io import Cluster


def listening_cluster(topic="__internal"):
    cluster = Cluster()
    events = {broker_id: [] for broker_id in cluster.brokers}
    for broker_id, broker in cluster.brokers.items():
        broker.add_leadership_listener(topic, lambda t, p, epoch, leading, now, b=broker_id:
                                       events[b].append((t, p, epoch, leading)))
    cluster.commit(CreateTopicsRequest(topics=(CreatableTopic(name=topic, num_partitions=3, replication_factor=3),
                                               CreatableTopic(name="other", num_partitions=3, replication_factor=3))))
    return cluster, events


def leaders(cluster, topic="__internal"):
    return {p: (s.leader, s.leader_epoch) for p, s in cluster.images[1].topics.by_name[topic].partitions.items()}


def test_each_leader_hears_it_became_leader_of_its_partitions_and_nothing_of_other_topics():
    cluster, events = listening_cluster()
    for partition, (leader, epoch) in leaders(cluster).items():
        assert ("__internal", partition, epoch, True) in events[leader]
    assert sum(len(e) for e in events.values()) == 3  # one event per partition: the other topic is not heard


def test_a_leader_that_shuts_down_hears_it_resigned_and_the_new_leader_hears_it_leads():
    cluster, events = listening_cluster()
    before = leaders(cluster)
    victim = before[0][0]
    for broker_events in events.values():
        broker_events.clear()
    broker = cluster.brokers[victim]
    cluster.commit(BrokerHeartbeatRequest(broker_id=victim, broker_epoch=broker.broker_epoch,
                                          current_metadata_offset=cluster.raft_index, want_shutdown=True))
    after = leaders(cluster)
    moved = [p for p, (leader, _) in before.items() if leader == victim]
    assert moved and all(after[p][0] != victim for p in moved)
    for partition in moved:
        assert any(e[:2] == ("__internal", partition) and e[3] is False for e in events[victim])
        new_leader, new_epoch = after[partition]
        assert ("__internal", partition, new_epoch, True) in events[new_leader]
        assert new_epoch > before[partition][1]


def test_deleting_the_topic_resigns_every_leadership():
    cluster, events = listening_cluster()
    before = leaders(cluster)
    for broker_events in events.values():
        broker_events.clear()
    cluster.commit(DeleteTopicsRequest(names=("__internal",)))
    for partition, (leader, _) in before.items():
        assert [e for e in events[leader] if e[1] == partition and e[3] is False], events[leader]
    assert not any(e[3] for broker_events in events.values() for e in broker_events)


def test_a_leader_that_hears_of_a_deletion_and_a_new_topic_of_the_name_at_once_resigns_the_old_leadership():
    """A broker away while the topic was deleted and created again learns both from one metadata snapshot (as
    NodeState._restore installs it): the old topic's leaderships resign before the new topic's replicas start.
    Without it a coordinator kept its shard of the old topic and wrote into the new, empty log at the old leader
    epoch (the fuzz simulation's node error: an append whose offset went back to 0)."""
    cluster, events = listening_cluster()
    away = leaders(cluster)[0][0]
    led = sorted(p for p, (leader, _) in leaders(cluster).items() if leader == away)
    for broker_events in events.values():
        broker_events.clear()
    cluster.commit(DeleteTopicsRequest(names=("__internal",)), cut_off=(away,))
    replicas = (away,) + tuple(b for b in cluster.brokers if b != away)  # the away broker leads every new partition
    cluster.commit(CreateTopicsRequest(topics=(CreatableTopic(
        name="__internal", assignments=tuple(ReplicaAssignment(p, replicas) for p in range(3))),)), cut_off=(away,))
    assert events[away] == []
    snapshot = MetadataDelta(MetadataImage())
    for records, provenance in cluster.log:
        for record in records:
            snapshot.replay(record, provenance)
    image = snapshot.apply()
    broker = cluster.brokers[away]
    broker.drop_unassigned_partitions(image, cluster.now_ms)
    broker.apply_metadata(snapshot, image, cluster.now_ms)
    assert all(s.leader == away for s in image.topics.by_name["__internal"].partitions.values())
    for partition in range(3):
        heard = [e[3] for e in events[away] if e[1] == partition]
        assert heard == ([False, True] if partition in led else [True]), (partition, events[away])
