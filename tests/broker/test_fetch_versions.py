"""Fetch v12-v17 on the broker, sans-IO, each version's semantics as Kafka 3.9 answers them: LastFetchedEpoch and
DivergingEpoch (v12, KIP-320/KIP-595), topics by id in requests, responses and fetch sessions (v13, KIP-516),
ReplicaState (v15, KIP-903), CurrentLeader and NodeEndpoints (v16, KIP-951)."""

import uuid

from metadata.requests import BrokerHeartbeatRequest, CreatableTopic, CreateTopicsRequest, DeleteTopicsRequest
from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode
from tests.broker import test_broker_sans_io
from tests.broker.test_broker_sans_io import leader_of, produce_request

cluster = test_broker_sans_io.cluster  # the fixture

Request = messages.FetchRequest
UNKNOWN_ID = uuid.UUID(int=0xF1077111A)


def topic_id(cluster, name="t"):
    return uuid.UUID(bytes=cluster.images[1].topics.by_name[name].topic_id)


def fetch(partitions, topic="t", topic_id=None, session_id=0, epoch=-1, forgotten=(), replica_state=None,
          max_wait_ms=0):
    """A Fetch naming `topic` (below v13) or `topic_id` (v13+): partitions as (partition, offset) or
    (partition, offset, last_fetched_epoch, current_leader_epoch)."""
    fetch_partitions = []
    for partition, offset, *epochs in partitions:
        last_fetched_epoch, current_leader_epoch = (epochs + [-1, -1])[:2]
        fetch_partitions.append(Request.FetchPartition(partition=partition, fetch_offset=offset,
                                                       last_fetched_epoch=last_fetched_epoch,
                                                       current_leader_epoch=current_leader_epoch,
                                                       partition_max_bytes=1 << 20))
    named = {"topic_id": topic_id} if topic_id is not None else {"topic": topic}
    return Request(max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                   session_id=session_id, session_epoch=epoch,
                   topics=[Request.FetchTopic(partitions=fetch_partitions, **named)] if partitions else [],
                   forgotten_topics_data=[Request.ForgottenTopic(partitions=list(forgotten), **named)]
                   if forgotten else [],
                   replica_state=replica_state or Request.ReplicaState())


def answered(response):
    """(topic, topic id, partition, error, high watermark, has records) of every partition of a response."""
    return [(t.topic, t.topic_id, p.partition_index, p.error_code, p.high_watermark, bool(p.records))
            for t in response.responses for p in t.partitions]


def move_leadership(cluster, partition=0):
    """The leader asks to shut down: the controller elects another ISR member, at the next leader epoch."""
    old = leader_of(cluster, partition)
    broker = cluster.brokers[old]
    cluster.commit(BrokerHeartbeatRequest(broker_id=old, broker_epoch=broker.broker_epoch,
                                          current_metadata_offset=cluster.raft_index, want_shutdown=True))
    new = leader_of(cluster, partition)
    assert new != old
    return old, new


def test_v13_names_topics_by_id_and_answers_an_unknown_id_with_unknown_topic_id(cluster):  # KIP-516
    leader = leader_of(cluster, 0)
    cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"a", b"b"]))
    cluster.replicate()
    t_id = topic_id(cluster)
    by_id = cluster.call(leader, ApiKey.FETCH, 13, fetch([(0, 0)], topic_id=t_id))
    assert answered(by_id) == [("", t_id, 0, ErrorCode.NONE, 2, True)]  # no name on the wire from v13
    unknown = cluster.call(leader, ApiKey.FETCH, 13, fetch([(0, 0)], topic_id=UNKNOWN_ID))
    assert answered(unknown) == [("", UNKNOWN_ID, 0, ErrorCode.UNKNOWN_TOPIC_ID, -1, False)]
    by_name = cluster.call(leader, ApiKey.FETCH, 12, fetch([(0, 0)], topic="t"))
    assert answered(by_name) == [("t", uuid.UUID(int=0), 0, ErrorCode.NONE, 2, True)]
    # An id naming this broker's topic is read, the unknown one answered beside it, in one request.
    both = fetch([(0, 0)], topic_id=t_id)
    both.topics.append(Request.FetchTopic(topic_id=UNKNOWN_ID, partitions=[Request.FetchPartition(
        partition=1, fetch_offset=0, partition_max_bytes=1 << 20)]))
    assert [(tid, p, error) for _, tid, p, error, _, _ in answered(cluster.call(leader, ApiKey.FETCH, 17, both))] \
        == [(t_id, 0, ErrorCode.NONE), (UNKNOWN_ID, 1, ErrorCode.UNKNOWN_TOPIC_ID)]


def test_a_v13_session_keeps_partitions_by_id_and_refuses_requests_by_name(cluster):  # KIP-516 over KIP-227
    from broker.apis import Deferred

    leader = leader_of(cluster, 0)
    t_id = topic_id(cluster)
    full = cluster.call(leader, ApiKey.FETCH, 13, fetch([(0, 0)], topic_id=t_id, epoch=0))
    assert full.session_id > 0 and answered(full) == [("", t_id, 0, ErrorCode.NONE, 0, False)]
    session_id = full.session_id
    assert cluster.call(leader, ApiKey.FETCH, 13, fetch([], session_id=session_id, epoch=1)).responses == []
    # An incremental fetch of the other kind (by name into a session of ids) is refused, as Kafka's FetchManager.
    refused = cluster.call(leader, ApiKey.FETCH, 12, fetch([], session_id=session_id, epoch=2))
    assert (refused.error_code, refused.responses) == (ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR, [])
    # A parked incremental fetch of ids wakes when its partition gets records, and answers them by id.
    parked = cluster.call(leader, ApiKey.FETCH, 13, fetch([], session_id=session_id, epoch=2, max_wait_ms=500))
    assert isinstance(parked, Deferred)
    cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"a"], acks=1))
    cluster.replicate()
    woken = {request_id: r for request_id, _, r in cluster.completed[leader]}[parked.request_id]
    assert [a[1:] for a in answered(woken)] == [(t_id, 0, ErrorCode.NONE, 1, True)]  # (not through the codec)
    # An unknown id added to the session is answered UNKNOWN_TOPIC_ID at every fetch (an error is always news).
    unknown = cluster.call(leader, ApiKey.FETCH, 13, fetch([(2, 0)], topic_id=UNKNOWN_ID, session_id=session_id,
                                                           epoch=3))
    assert (UNKNOWN_ID, 2, ErrorCode.UNKNOWN_TOPIC_ID) in [(tid, p, e) for _, tid, p, e, _, _ in answered(unknown)]
    again = cluster.call(leader, ApiKey.FETCH, 13, fetch([], session_id=session_id, epoch=4))
    assert (UNKNOWN_ID, 2, ErrorCode.UNKNOWN_TOPIC_ID) in [(tid, p, e) for _, tid, p, e, _, _ in answered(again)]
    # Forgotten by id: neither partition is read again.
    forget = fetch([], session_id=session_id, epoch=5)
    forget.forgotten_topics_data = [Request.ForgottenTopic(topic_id=UNKNOWN_ID, partitions=[2]),
                                    Request.ForgottenTopic(topic_id=t_id, partitions=[0])]
    assert cluster.call(leader, ApiKey.FETCH, 13, forget).responses == []
    data_plane = next(g for g in cluster.apis[leader]._groups if hasattr(g, "fetch_sessions"))
    assert data_plane.fetch_sessions.sessions[session_id].partitions == {}
    # And the reverse: a session of names takes no request by id.
    named = cluster.call(leader, ApiKey.FETCH, 12, fetch([(0, 0)], epoch=0))
    refused = cluster.call(leader, ApiKey.FETCH, 13, fetch([], session_id=named.session_id, epoch=1))
    assert refused.error_code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR


def test_a_session_whose_topic_was_recreated_under_its_name_answers_inconsistent_topic_id(cluster):  # KIP-516
    leader = leader_of(cluster, 0)
    old_id = topic_id(cluster)
    full = cluster.call(leader, ApiKey.FETCH, 13, fetch([(0, 0)], topic_id=old_id, epoch=0))
    assert answered(full)[0][3] == ErrorCode.NONE
    cluster.commit(DeleteTopicsRequest(names=("t",)))
    cluster.commit(CreateTopicsRequest(topics=(CreatableTopic(name="t", num_partitions=3, replication_factor=3),)))
    assert topic_id(cluster) != old_id
    # The session's partition still has the name it was added with, and the log under that name is another
    # topic's now (Kafka's ReplicaManager.readFromLog); a new request naming the old id finds no topic.
    again = cluster.call(leader, ApiKey.FETCH, 13, fetch([], session_id=full.session_id, epoch=1))
    assert [(tid, p, e) for _, tid, p, e, _, _ in answered(again)] == [(old_id, 0, ErrorCode.INCONSISTENT_TOPIC_ID)]
    stale = cluster.call(leader, ApiKey.FETCH, 13, fetch([(0, 0)], topic_id=old_id))
    assert answered(stale)[0][3] == ErrorCode.UNKNOWN_TOPIC_ID


def test_a_consumer_whose_last_fetched_epoch_diverged_gets_the_diverging_epoch(cluster):  # KIP-320, v12
    leader = leader_of(cluster, 0)
    cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"a", b"b"]))
    cluster.replicate()
    first_epoch = cluster.brokers[leader].hosted("t", 0).replica.leader_epoch
    _, new_leader = move_leadership(cluster)
    cluster.call(new_leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"c"], acks=1))
    cluster.replicate()
    hosted = cluster.brokers[new_leader].hosted("t", 0)
    assert (hosted.log.log_end_offset, hosted.replica.high_watermark) == (3, 3)
    # The consumer read offsets 0-2 under the first epoch (from a log that diverged at 2): the first epoch ends
    # at 2 here, before its fetch offset 3, so it is told where to truncate, with no records, at once.
    diverged = cluster.call(new_leader, ApiKey.FETCH, 12, fetch([(0, 3, first_epoch)]))
    data = diverged.responses[0].partitions[0]
    assert (data.error_code, bool(data.records)) == (ErrorCode.NONE, False)
    assert (data.diverging_epoch.epoch, data.diverging_epoch.end_offset) == (first_epoch, 2)
    # Below v12 there is no LastFetchedEpoch: the same position is only the log end.
    blind = cluster.call(new_leader, ApiKey.FETCH, 11, fetch([(0, 3)])).responses[0].partitions[0]
    assert (blind.error_code, bool(blind.records), blind.diverging_epoch.epoch) == (ErrorCode.NONE, False, -1)
    # A consumer that stopped at 2 under the first epoch has not diverged: it reads the new epoch's record.
    caught_up = cluster.call(new_leader, ApiKey.FETCH, 12, fetch([(0, 2, first_epoch)])).responses[0].partitions[0]
    assert (caught_up.error_code, bool(caught_up.records), caught_up.diverging_epoch.epoch) == (ErrorCode.NONE, True, -1)
    # An epoch past any this log holds cannot be placed: OFFSET_OUT_OF_RANGE (Kafka's Partition.readRecords).
    ahead = cluster.call(new_leader, ApiKey.FETCH, 12, fetch([(0, 3, hosted.replica.leader_epoch + 5)]))
    assert ahead.responses[0].partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_a_follower_fetching_at_v15_is_recognised_by_its_replica_state(cluster):  # KIP-903
    leader = leader_of(cluster, 0)
    follower = next(b for b in cluster.brokers if b != leader)
    cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"a", b"b"], acks=1))
    replica = cluster.brokers[leader].hosted("t", 0).replica
    assert replica.high_watermark == 0  # nobody has fetched yet
    t_id = topic_id(cluster)
    state = Request.ReplicaState(replica_id=follower, replica_epoch=cluster.brokers[follower].broker_epoch)
    as_follower = cluster.call(leader, ApiKey.FETCH, 15, fetch([(0, 0)], topic_id=t_id, replica_state=state))
    # A follower reads up to the log end, not the high watermark, and its fetch position is recorded.
    assert answered(as_follower) == [("", t_id, 0, ErrorCode.NONE, 0, True)]
    assert replica.follower_states[follower].log_end_offset == 0
    assert replica.follower_states[follower].last_fetch_time_ms == cluster.now_ms
    # The top-level ReplicaId is not on the wire from v15: without a ReplicaState the fetcher is a consumer,
    # which reads nothing above the high watermark.
    as_consumer = fetch([(0, 0)], topic_id=t_id)
    as_consumer.replica_id = follower
    assert answered(cluster.call(leader, ApiKey.FETCH, 15, as_consumer)) == [("", t_id, 0, ErrorCode.NONE, 0, False)]
    # A follower whose last fetched epoch this leader does not hold at its offset is told to truncate, and its
    # fetch state is left alone.
    caught_up = fetch([(0, 2, replica.leader_epoch)], topic_id=t_id, replica_state=state)
    cluster.call(leader, ApiKey.FETCH, 15, caught_up)
    assert replica.follower_states[follower].log_end_offset == 2
    diverged = cluster.call(leader, ApiKey.FETCH, 15, fetch([(0, 3, replica.leader_epoch)], topic_id=t_id,
                                                            replica_state=state))
    data = diverged.responses[0].partitions[0]
    assert (data.diverging_epoch.epoch, data.diverging_epoch.end_offset) == (replica.leader_epoch, 2)
    assert replica.follower_states[follower].log_end_offset == 2


def test_v16_names_the_current_leader_and_its_endpoint_on_a_leadership_error(cluster):  # KIP-951
    leader = leader_of(cluster, 0)
    other = next(b for b in cluster.brokers if b != leader)
    epoch = cluster.brokers[leader].hosted("t", 0).replica.leader_epoch
    at_follower = cluster.call(other, ApiKey.FETCH, 16, fetch([(0, 0)], topic_id=topic_id(cluster)))
    data = at_follower.responses[0].partitions[0]
    assert data.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (data.current_leader.leader_id, data.current_leader.leader_epoch) == (leader, epoch)
    assert [(n.node_id, n.host, n.port, n.rack) for n in at_follower.node_endpoints] == \
        [(leader, "127.0.0.1", 9000 + leader, None)]
    # v15 has the tagged CurrentLeader field but Kafka fills it only from v16, and has no NodeEndpoints.
    older = cluster.call(other, ApiKey.FETCH, 15, fetch([(0, 0)], topic_id=topic_id(cluster)))
    assert older.responses[0].partitions[0].current_leader.leader_id == -1 and older.node_endpoints == []
    # FENCED_LEADER_EPOCH: a consumer still on the old epoch, at the new leader.
    _, new_leader = move_leadership(cluster)
    new_epoch = cluster.brokers[new_leader].hosted("t", 0).replica.leader_epoch
    fenced = cluster.call(new_leader, ApiKey.FETCH, 16, fetch([(0, 0, -1, epoch)], topic_id=topic_id(cluster)))
    data = fenced.responses[0].partitions[0]
    assert data.error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert (data.current_leader.leader_id, data.current_leader.leader_epoch) == (new_leader, new_epoch)
    assert [n.node_id for n in fenced.node_endpoints] == [new_leader]
    # Other errors name no leader.
    unknown = cluster.call(new_leader, ApiKey.FETCH, 16, fetch([(0, 0)], topic_id=UNKNOWN_ID))
    assert unknown.responses[0].partitions[0].current_leader.leader_id == -1 and unknown.node_endpoints == []


def test_a_parked_fetch_of_a_topic_recreated_under_its_name_is_answered_when_it_moves_not_at_its_deadline(cluster):
    # KIP-516: the parked fetch names the old topic id. When the partition under its name moves, a read would answer
    # INCONSISTENT_TOPIC_ID: it is not "nothing to read" even where the new log holds nothing past the fetch offset.
    from broker.apis import Deferred

    leader = leader_of(cluster, 0)
    old_id = topic_id(cluster)
    full = cluster.call(leader, ApiKey.FETCH, 13, fetch([(0, 0)], topic_id=old_id, epoch=0))
    assert answered(full)[0][3] == ErrorCode.NONE
    parked = cluster.call(leader, ApiKey.FETCH, 13, fetch([], session_id=full.session_id, epoch=1, max_wait_ms=500))
    assert isinstance(parked, Deferred)
    cluster.commit(DeleteTopicsRequest(names=("t",)))
    cluster.commit(CreateTopicsRequest(topics=(CreatableTopic(name="t", num_partitions=3, replication_factor=3),)))
    assert leader_of(cluster, 0) == leader
    # An acks=all record appended under the name: the log end moves, the high watermark waits for the followers.
    cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"a"], acks=-1))
    done = {request_id: r for request_id, _, r in cluster.apis[leader].poll(cluster.now_ms)}
    assert parked.request_id in done, "the parked fetch of the old topic id waited for its deadline"
    assert [(tid, p, e) for _, tid, p, e, _, _ in answered(done[parked.request_id])] == \
        [(old_id, 0, ErrorCode.INCONSISTENT_TOPIC_ID)]
