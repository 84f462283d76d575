"""Incremental fetch sessions (KIP-227): the leader's session cache (broker/fetch_session.py), the Fetch handler
answering only partitions with news, and followers whose idle fetches name no partition."""

from broker.fetch_session import FetchSessionCache
from net.protocol import messages
from net.protocol.codec import ApiKey
from metadata.requests import CreatableTopic, CreateTopicsRequest
from partitions.errors import ErrorCode
from tests.broker.test_broker_sans_io import cluster, leader_of, produce_request  # noqa: F401  (fixture)

Request = messages.FetchRequest


def fetch(session_id, epoch, partitions=(), forgotten=(), replica_id=-1, topic="t"):
    return Request(replica_id=replica_id, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                   session_id=session_id, session_epoch=epoch,
                   topics=[Request.FetchTopic(topic=topic, partitions=[
                       Request.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
                       for p, o in partitions])] if partitions else [],
                   forgotten_topics_data=[Request.ForgottenTopic(topic=topic, partitions=list(forgotten))]
                   if forgotten else [])


def partition_reads(cluster, leader) -> list:
    """From now on, each partition the leader's Fetch handler reads, as (requested topic, fetch partition)."""
    data = next(g for g in cluster.apis[leader]._groups if hasattr(g, "fetch_sessions"))
    reads = []
    original = data._read_fetch_partition
    data._read_fetch_partition = lambda *args: reads.append(args[1:3]) or original(*args)
    return reads


def test_the_session_id_and_epoch_rules_of_kip_227():
    cache = FetchSessionCache()
    assert cache.context(fetch(0, -1, [(0, 0)]), 1_000).session is None  # sessionless
    assert cache.context(fetch(0, 5, [(0, 0)]), 1_000).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    opened = cache.context(fetch(0, 0, [(0, 0), (1, 0)]), 1_000)
    session_id = opened.session_id
    assert session_id > 0 and not opened.incremental and len(opened.partitions()) == 2
    assert cache.context(fetch(session_id + 1, 1), 1_000).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert cache.context(fetch(session_id, 2), 1_000).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    first = cache.context(fetch(session_id, 1, [(2, 7)], forgotten=[0]), 1_000)
    assert first.incremental and first.partitions() == {("t", 1), ("t", 2)}
    assert cache.context(fetch(session_id, 1), 1_000).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH  # used
    assert cache.context(fetch(session_id, 2), 1_000).partitions() == {("t", 1), ("t", 2)}
    assert cache.context(fetch(session_id, -1, [(0, 0)]), 1_000).session is None  # closed, then sessionless
    assert cache.context(fetch(session_id, 3), 1_000).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_the_cache_is_bounded_and_gives_way_least_recently_used_first():
    cache = FetchSessionCache(slots=2)
    a = cache.context(fetch(0, 0, [(0, 0)]), 1).session_id
    b = cache.context(fetch(0, 0, [(0, 0)]), 1).session_id
    assert cache.context(fetch(a, 1), 1).error == ErrorCode.NONE  # a is now the most recently used
    c = cache.context(fetch(0, 0, [(0, 0)]), 1).session_id
    assert len({a, b, c}) == 3 and list(cache.sessions) == [a, c]
    assert cache.context(fetch(b, 1), 1).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_an_incremental_fetch_answers_only_the_partitions_with_news(cluster):
    leader = leader_of(cluster, 0)
    cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"a", b"b"]))
    cluster.replicate()
    own = [p for p in range(3) if leader_of(cluster, p) == leader]
    full = cluster.call(leader, ApiKey.FETCH, 11, fetch(0, 0, [(p, 0) for p in own]))
    assert full.session_id > 0 and full.error_code == ErrorCode.NONE
    assert sorted(p.partition_index for t in full.responses for p in t.partitions) == own
    # the position still says 0: the records are sent again, as long as the fetcher does not move on
    again = cluster.call(leader, ApiKey.FETCH, 11, fetch(full.session_id, 1))
    assert [(p.partition_index, bool(p.records)) for t in again.responses for p in t.partitions] == [(0, True)]
    moved = cluster.call(leader, ApiKey.FETCH, 11, fetch(full.session_id, 2, [(0, 2)]))  # named: answered
    assert [(p.partition_index, bool(p.records)) for t in moved.responses for p in t.partitions] == [(0, False)]
    idle = cluster.call(leader, ApiKey.FETCH, 11, fetch(full.session_id, 3))
    assert (idle.error_code, idle.session_id, idle.responses) == (ErrorCode.NONE, full.session_id, [])
    cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"c"]))
    cluster.replicate()
    news = cluster.call(leader, ApiKey.FETCH, 11, fetch(full.session_id, 4))
    assert [(p.partition_index, p.high_watermark, bool(p.records)) for t in news.responses for p in t.partitions] \
        == [(0, 3, True)]


def test_followers_fetch_incrementally_and_name_no_partition_when_idle(cluster):
    leader = leader_of(cluster, 0)
    cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"a"]))
    cluster.replicate(rounds=5)
    follower_id = next(b for b in cluster.brokers if b != leader)
    follower = cluster.brokers[follower_id]
    sent = follower.next_replica_request(leader, cluster.now_ms)
    assert sent.request.session_id > 0 and sent.request.session_epoch > 0
    assert sent.request.topics == [] and sent.request.forgotten_topics_data == []
    # a leader that lost the session (restarted) answers FETCH_SESSION_ID_NOT_FOUND: the next fetch is full
    next(g for g in cluster.apis[leader]._groups if hasattr(g, "fetch_sessions")).fetch_sessions.sessions.clear()
    response = cluster.call(leader, sent.api_key, sent.api_version, sent.request)
    assert response.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    follower.on_replica_response(sent, response, cluster.now_ms)
    again = follower.next_replica_request(leader, cluster.now_ms)
    assert (again.request.session_id, again.request.session_epoch) == (0, 0)
    assert {p.partition for t in again.request.topics for p in t.partitions} == {
        p for p in range(3) if leader_of(cluster, p) == leader}
    cluster.replicate(rounds=2)
    cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"b"]))
    cluster.replicate(rounds=3)
    assert all(b.hosted("t", 0).log.log_end_offset == 2 for b in cluster.brokers.values())


def test_a_partition_named_again_is_answered_even_without_news(cluster):
    # A fetcher names a partition again when its view of it changed (it may have dropped the last answer while
    # it briefly followed another leader): it gets the partition's state back, not silence.
    leader = leader_of(cluster, 0)
    cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"a"]))
    cluster.replicate()
    full = cluster.call(leader, ApiKey.FETCH, 11, fetch(0, 0, [(0, 1)]))
    assert [p.high_watermark for t in full.responses for p in t.partitions] == [1]
    assert cluster.call(leader, ApiKey.FETCH, 11, fetch(full.session_id, 1)).responses == []
    named = cluster.call(leader, ApiKey.FETCH, 11, fetch(full.session_id, 2, [(0, 1)]))
    assert [(p.partition_index, p.high_watermark) for t in named.responses for p in t.partitions] == [(0, 1)]


def test_a_waiting_incremental_fetch_that_nothing_touched_expires_empty_without_a_second_read(cluster):
    from broker.apis import Deferred

    leader = leader_of(cluster, 0)
    full = cluster.call(leader, ApiKey.FETCH, 11, fetch(0, 0, [(0, 0)]))
    cluster.apis[leader].poll(cluster.now_ms)  # what creating the topic marked is behind us
    reads = partition_reads(cluster, leader)
    waiting = fetch(full.session_id, 1)
    waiting.max_wait_ms = 500
    assert isinstance(cluster.call(leader, ApiKey.FETCH, 11, waiting), Deferred)
    assert len(reads) == 1  # read once on arrival: no news, so it waits
    cluster.now_ms += 501
    answered = cluster.apis[leader].poll(cluster.now_ms)
    assert [response.responses for _, _, response in answered] == [[]] and len(reads) == 1
    # one that a produce touched while it waited is read again, and answers with the records
    waiting = fetch(full.session_id, 2)
    waiting.max_wait_ms = 500
    parked = cluster.call(leader, ApiKey.FETCH, 11, waiting)
    cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"a"], acks=1))
    cluster.replicate()  # the followers fetch: the high watermark passes the record, the fetch wakes
    answer = {request_id: r for request_id, _, r in cluster.completed[leader]}[parked.request_id]
    assert [(p.partition_index, bool(p.records)) for t in answer.responses for p in t.partitions] == [(0, True)]


def test_a_waiting_fetch_whose_arrival_read_found_news_without_records_carries_it_at_the_deadline(cluster):
    """A partition named again at the log end has no records to send but news for the session (its high
    watermark was never answered there): the fetch waits for records, and the answer at the deadline reads
    again to carry the news. An empty answer would leave the session's entry unanswered, so every later
    wait would end empty too and the fetcher would never learn the high watermark (a follower stuck behind
    its leader's high watermark until something else moved the partition)."""
    from broker.apis import Deferred

    leader = leader_of(cluster, 0)
    cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"a"]))
    cluster.replicate()
    full = cluster.call(leader, ApiKey.FETCH, 11, fetch(0, 0, [(0, 1)]))
    cluster.apis[leader].poll(cluster.now_ms)  # nothing left marked dirty: only the deadline ends a wait
    for epoch in (1, 2):
        waiting = fetch(full.session_id, epoch, [(0, 1)] if epoch == 1 else ())
        waiting.max_wait_ms = 500
        parked = cluster.call(leader, ApiKey.FETCH, 11, waiting)
        assert isinstance(parked, Deferred)
        cluster.now_ms += 501
        answered = {request_id: r for request_id, _, r in cluster.apis[leader].poll(cluster.now_ms)}
        news = [(p.partition_index, p.high_watermark, bool(p.records))
                for t in answered[parked.request_id].responses for p in t.partitions]
        assert news == ([(0, 1, False)] if epoch == 1 else [])  # told once, then nothing new


def test_an_idle_followers_incremental_fetch_reads_no_partition_and_keeps_it_in_the_isr(cluster):
    leader = leader_of(cluster, 0)
    cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"a"]))
    cluster.replicate(rounds=5)
    reads = partition_reads(cluster, leader)
    cluster.now_ms += 20_000
    cluster.replicate(rounds=2)
    assert reads == []  # every partition quiet: touched, not read
    follower = next(b for b in cluster.brokers if b != leader)
    state = cluster.brokers[leader].hosted("t", 0).replica.follower_states[follower]
    assert state.last_caught_up_time_ms == cluster.now_ms


def test_an_idle_followers_fetch_reads_no_partition_while_another_replica_is_out_of_the_isr(cluster):
    """Once a follower has been told that a replica is out of the ISR (the replicated offset -1, in LastStableOffset),
    its idle fetches find the partition quiet again: a broker down costs its peers no read per fetch."""
    leader = leader_of(cluster, 0)
    behind, follower = [b for b in cluster.brokers if b != leader]
    fetching = {leader, follower}
    cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"a"]))
    cluster.replicate(rounds=5)
    cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"b"]))
    cluster.replicate(rounds=3, fetching=fetching)
    cluster.now_ms += 31_000
    cluster.brokers[leader].tick(cluster.now_ms)  # proposes the shrink; the next round commits it
    cluster.replicate(rounds=3, fetching=fetching)
    replica = cluster.brokers[leader].hosted("t", 0).replica
    assert behind not in replica.isr and replica.replicated_offset == -1
    assert cluster.brokers[follower].hosted("t", 0).replica.replicated_offset == -1
    reads = partition_reads(cluster, leader)
    cluster.now_ms += 1_000
    cluster.replicate(rounds=2, fetching=fetching)
    assert reads == []  # every partition quiet: touched, not read


def test_a_quiet_followers_session_is_parked_without_a_walk_until_a_partition_moves_or_its_touches_age(cluster):
    """A follower's incremental fetch that names nothing, on a session whose last walk found every partition
    quiet while nothing moved since, is parked without touching a partition (DataPlaneApis._still_quiet). A
    walk comes back when a partition moves anywhere on the broker, or once the last touches are a quarter of
    replica.lag.time.max.ms old, so the follower keeps its ISR place through a long idle spell."""
    from broker.apis import Deferred

    leader = leader_of(cluster, 0)
    cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"a"]))
    cluster.replicate(rounds=5)
    broker = cluster.brokers[leader]
    follower_id = next(b for b in cluster.brokers if b != leader)
    follower = cluster.brokers[follower_id]
    led = [p for p in range(3) if leader_of(cluster, p) == leader]
    walks = []
    data = next(g for g in cluster.apis[leader]._groups if hasattr(g, "fetch_sessions"))
    original = data._quiet_follower_partition
    data._quiet_follower_partition = lambda *args: walks.append(args[2:4]) or original(*args)

    def follower_fetch(wait_ms=500):
        """One long-polled fetch of the follower's, waited out; the answer handed back to the follower."""
        sent = follower.next_replica_request(leader, cluster.now_ms)
        assert sent.request.topics == [] and sent.api_key == ApiKey.FETCH
        sent.request.max_wait_ms = wait_ms
        result = cluster.call(leader, sent.api_key, sent.api_version, sent.request)
        assert isinstance(result, Deferred)
        cluster.now_ms += wait_ms
        answered = {request_id: r for request_id, _, r in cluster.apis[leader].poll(cluster.now_ms)}
        follower.on_replica_response(sent, answered[result.request_id], cluster.now_ms)
        return answered[result.request_id]

    cluster.apis[leader].poll(cluster.now_ms)
    follower_fetch()  # walks, unless the last walk of replicate() found every partition quiet already
    assert len(walks) in (0, len(led))
    walks.clear()
    states = [broker.hosted("t", p).replica.follower_states[follower_id] for p in led]
    touched_at = [state.last_fetch_time_ms for state in states]
    for _ in range(10):
        assert follower_fetch().responses == []
    assert walks == []  # parked without a walk: no partition touched
    assert [state.last_fetch_time_ms for state in states] == touched_at

    # A record on a partition moves the generation: the next fetch walks again, and its answer carries news.
    cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", led[0], [b"b"], acks=1))
    cluster.apis[leader].poll(cluster.now_ms)
    sent = follower.next_replica_request(leader, cluster.now_ms)
    answer = cluster.call(leader, sent.api_key, sent.api_version, sent.request)
    assert [(p.partition_index, bool(p.records)) for t in answer.responses for p in t.partitions] == [(led[0], True)]
    follower.on_replica_response(sent, answer, cluster.now_ms)
    # The follower's next request names its new position (its own quiet request no longer holds), so the
    # leader's high watermark passes the record.
    moved = follower.next_replica_request(leader, cluster.now_ms)
    assert [(p.partition, p.fetch_offset) for t in moved.request.topics for p in t.partitions] == [(led[0], 2)]
    cluster.replicate(rounds=3)
    assert broker.hosted("t", led[0]).replica.high_watermark == 2
    assert all(b.hosted("t", led[0]).log.log_end_offset == 2 for b in cluster.brokers.values())

    # An idle spell three times replica.lag.time.max.ms long: walks come back once a quarter of it has passed,
    # so the follower's touches never age out and the leader never drops it from the ISR.
    lag_ms = broker.replica_lag_time_max_ms
    walks.clear()
    for _ in range(3 * lag_ms // 500):
        follower_fetch()
        broker.tick(cluster.now_ms)
        cluster.deliver_controller_calls()
        assert all(follower_id in broker.hosted("t", p).replica.isr for p in led)
        assert all(cluster.now_ms - state.last_caught_up_time_ms <= lag_ms // 4 + 500 for state in states)
    fetches = 3 * lag_ms // 500
    # one walk per quarter of the lag at most, beside the few while the last record's high watermark settles
    assert 0 < len(walks) // len(led) <= fetches // (lag_ms // 4 // 500) + 5 < fetches // 4

    # New partitions led by the same leader (metadata moves the generation): the follower's next request
    # names them, although its last one was quiet.
    assert follower.next_replica_request(leader, cluster.now_ms).request.topics == []
    created = cluster.commit(CreateTopicsRequest(topics=(CreatableTopic(name="u", num_partitions=6,
                                                                        replication_factor=3),)))
    assert created.topics[0].error_code == ErrorCode.NONE
    led_u = {p for p, state in cluster.images[1].topics.by_name["u"].partitions.items() if state.leader == leader}
    assert led_u
    named = follower.next_replica_request(leader, cluster.now_ms).request
    assert {p.partition for t in named.topics if t.topic == "u" for p in t.partitions} == led_u


def test_a_parked_follower_fetch_at_the_log_end_is_not_read_again_when_only_the_high_watermark_moves(cluster):
    """Kafka's DelayedFetch.tryComplete for a follower: a parked fetch whose follower is at the leader's log end
    stays parked without a read when the partition moves without new records (the other follower's fetch
    moving the high watermark of an acks=all write). It carries the high watermark at its deadline, and a
    record wakes it with the record."""
    from broker.apis import Deferred

    leader = leader_of(cluster, 0)
    cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"a"]))
    cluster.replicate(rounds=5)
    first, second = sorted(b for b in cluster.brokers if b != leader)
    partition = cluster.brokers[leader].hosted("t", 0).replica
    data = next(g for g in cluster.apis[leader]._groups if hasattr(g, "fetch_sessions"))
    reads = []
    original = data._read_fetch
    data._read_fetch = lambda header, request, *rest: reads.append(request.replica_id) or original(
        header, request, *rest)

    def fetch_now(follower_id):
        follower = cluster.brokers[follower_id]
        sent = follower.next_replica_request(leader, cluster.now_ms)
        sent.request.max_wait_ms = 0
        follower.on_replica_response(sent, cluster.call(leader, sent.api_key, sent.api_version, sent.request),
                                     cluster.now_ms)

    def park(follower_id):
        follower = cluster.brokers[follower_id]
        sent = follower.next_replica_request(leader, cluster.now_ms)
        sent.request.max_wait_ms = 500
        parked = cluster.call(leader, sent.api_key, sent.api_version, sent.request)
        assert isinstance(parked, Deferred)
        return follower, sent, parked

    def answered(parked):
        cluster.completed.setdefault(leader, []).extend(cluster.apis[leader].poll(cluster.now_ms))
        return {request_id: r for request_id, _, r in cluster.completed[leader]}.get(parked.request_id)

    cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"b"], acks=1))
    fetch_now(first)  # the record
    follower, sent, parked = park(first)  # at the log end; the high watermark waits for the other follower
    assert partition.high_watermark == 1 and answered(parked) is None
    reads.clear()
    fetch_now(second)  # the record
    fetch_now(second)  # its new position: the high watermark passes the record, the partition moves
    assert partition.high_watermark == 2
    assert answered(parked) is None and first not in reads  # still parked, and not read again
    cluster.now_ms += 500
    response = answered(parked)
    assert [(p.partition_index, p.high_watermark, bool(p.records)) for t in response.responses
            for p in t.partitions] == [(0, 2, False)]
    assert reads.count(first) == 1  # read once, at the deadline, to carry the news
    follower.on_replica_response(sent, response, cluster.now_ms)
    assert cluster.brokers[first].hosted("t", 0).replica.high_watermark == 2
    # parked again at the log end: a record wakes it at once, with the record
    follower, sent, parked = park(first)
    assert answered(parked) is None
    cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"c"], acks=1))
    response = answered(parked)
    assert [(p.partition_index, bool(p.records)) for t in response.responses for p in t.partitions] == [(0, True)]


def test_an_incremental_fetch_carries_a_preferred_read_replica_as_news():  # KIP-392 over KIP-227
    from tests.broker.test_broker_sans_io import RACKS, racked_cluster

    cluster = racked_cluster("rack")
    leader = leader_of(cluster, 0)
    follower = min(b for b in RACKS if b != leader)
    cluster.call(leader, ApiKey.PRODUCE, 7, produce_request("t", 0, [b"a"]))
    cluster.replicate()
    full = cluster.call(leader, ApiKey.FETCH, 11, fetch(0, 0, [(0, 1)]))  # at the end: nothing new after it
    assert full.session_id > 0 and full.responses[0].partitions[0].preferred_read_replica == -1
    moved = fetch(full.session_id, 1)
    moved.rack_id = RACKS[follower]  # the same session, now from a consumer that names its rack
    answer = cluster.call(leader, ApiKey.FETCH, 11, moved)
    assert [(p.partition_index, p.preferred_read_replica, p.high_watermark) for t in answer.responses
            for p in t.partitions] == [(0, follower, 1)]
