"""DescribeTopicPartitions v0 (KIP-966; DescribeTopicPartitionsRequest/Response.json, Kafka's
DescribeTopicPartitionsRequestHandler and KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse), sans-IO:
real BrokerCores and a real controller (tests/broker/test_broker_sans_io.Cluster), every request and answer
through the codec. The pages: topics in name order from the cursor, at most ResponsePartitionLimit partitions
(capped at 2,000), NextCursor where the next page starts."""

import uuid

from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode
from security.acl import AclOperation as Op
from security.acl import ResourceType as RT
from tests.broker.test_admin_versions import create, secure, topic_id
from tests.broker.test_broker_sans_io import Cluster

Request = messages.DescribeTopicPartitionsRequest
ZERO = uuid.UUID(int=0)


def describe(cluster, names=(), limit=2000, cursor=None):
    request = Request(topics=[Request.TopicRequest(name=name) for name in names], response_partition_limit=limit,
                      cursor=None if cursor is None else Request.Cursor(topic_name=cursor[0], partition_index=cursor[1]))
    return cluster.call(1, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, request)


def pages(answer):
    return [(t.name, [p.partition_index for p in t.partitions]) for t in answer.topics]


def cursor_of(answer):
    return None if answer.next_cursor is None else (answer.next_cursor.topic_name, answer.next_cursor.partition_index)


def test_every_topic_page_by_page_from_the_cursor():
    cluster = Cluster()
    for name, partitions in (("b", 3), ("a", 2), ("c", 1)):
        assert create(cluster, 7, name, partitions=partitions).topics[0].error_code == ErrorCode.NONE
    whole = describe(cluster)
    assert pages(whole) == [("a", [0, 1]), ("b", [0, 1, 2]), ("c", [0])] and whole.next_cursor is None
    (a, _, _) = whole.topics
    assert a.topic_id == topic_id(cluster, "a") and not a.is_internal
    state = cluster.images[1].topics.by_name["a"].partitions[0]
    (p0, _) = a.partitions
    assert (p0.leader_id, p0.leader_epoch, p0.replica_nodes, p0.isr_nodes) == \
        (state.leader, state.leader_epoch, list(state.replicas), list(state.isr))
    assert (p0.eligible_leader_replicas, p0.last_known_elr, p0.offline_replicas) == ([], [], [])
    # Three partitions a page: the page ends inside b, and the next starts there.
    first = describe(cluster, limit=3)
    assert pages(first) == [("a", [0, 1]), ("b", [0])] and cursor_of(first) == ("b", 1)
    second = describe(cluster, limit=3, cursor=cursor_of(first))
    assert pages(second) == [("b", [1, 2]), ("c", [0])] and second.next_cursor is None
    # A page filled exactly by a's partitions points at the start of b.
    exact = describe(cluster, limit=2)
    assert pages(exact) == [("a", [0, 1])] and cursor_of(exact) == ("b", 0)
    assert pages(describe(cluster, limit=0)) == [("a", [0])]  # (at least one partition a page)


def test_named_topics_errors_and_a_bad_cursor():
    cluster = Cluster()
    create(cluster, 7, "t", partitions=2)
    answer = describe(cluster, names=["t", "missing", "bad/name"])
    by_name = {t.name: t for t in answer.topics}
    assert by_name["t"].error_code == ErrorCode.NONE and len(by_name["t"].partitions) == 2
    assert by_name["missing"].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert by_name["bad/name"].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert by_name["missing"].topic_id == ZERO
    # The cursor's topic must be among the named ones, its partition not negative: else every named topic is
    # INVALID_REQUEST (Kafka's DescribeTopicPartitionsRequest.getErrorResponse).
    for names, cursor in ((["t"], ("other", 0)), (["t"], ("t", -1))):
        refused = describe(cluster, names=names, cursor=cursor)
        assert [(t.name, t.error_code) for t in refused.topics] == [("t", ErrorCode.INVALID_REQUEST)]
    assert pages(describe(cluster, names=["t"], cursor=("t", 1))) == [("t", [1])]


def test_a_principal_sees_what_it_may_describe():
    cluster = Cluster()
    for name in ("mine", "theirs"):
        create(cluster, 7, name, partitions=1)
    secure(cluster, "User:erin", (RT.TOPIC, "mine", Op.DESCRIBE))
    assert pages(describe(cluster)) == [("mine", [0])]  # every topic: the others are not mentioned
    named = {t.name: t for t in describe(cluster, names=["mine", "theirs"]).topics}
    assert named["theirs"].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED and named["theirs"].topic_id == ZERO
    assert named["theirs"].partitions == []
    assert named["mine"].topic_authorized_operations == 1 << Op.DESCRIBE.value
