"""DescribeQuorum v0-2 (KIP-595, KIP-836, KIP-853; DescribeQuorumRequest/Response.json, Kafka's
KafkaRaftClient.handleDescribeQuorumRequest and RaftUtil.singletonDescribeQuorumResponse), sans-IO.

The broker side: a real BrokerCore's handler, every request and answer through the codec, forwarded to the
controller as a controller call that the test answers. The controller side: a real NodeState whose single-voter
Raft elects itself, answering from its Raft progress (observers as far as it served them)."""

from __future__ import annotations

import random
import uuid

from broker.config import parse_config
from broker.apis import Deferred
from broker.node_state import NodeState
from metadata.requests import DescribeQuorumRequest as ControllerDescribeQuorum
from metadata.requests import DescribeQuorumResponse as ControllerAnswer
from metadata.requests import QuorumReplica
from net.protocol import messages
from net.protocol.codec import ApiKey, RequestHeader, decode_request, decode_response, encode_request, encode_response
from partitions.errors import ErrorCode, KafkaError
from security.acl import AclOperation as Op
from security.acl import ResourceType as RT
from simulations.disk import SimDisk
from tests.broker.test_admin_versions import secure
from tests.broker.test_broker_sans_io import Cluster

Request = messages.DescribeQuorumRequest
METADATA = "__cluster_metadata"
NOW_MS = 1_700_000_000_000


def request(*topics):
    return Request(topics=[Request.TopicData(topic_name=name, partitions=[
        Request.PartitionData(partition_index=index) for index in indexes]) for name, indexes in topics])


def ask(cluster, version, described=request((METADATA, [0])), answer=None):
    """DescribeQuorum to broker 1; a forwarded request is answered with `answer` (a controller response or a
    KafkaError) at NOW_MS. Returns the decoded response and the controller requests the broker sent."""
    header = RequestHeader(ApiKey.DESCRIBE_QUORUM, version, 1, "test")
    decoded_header, decoded = decode_request(encode_request(header, described)[4:])
    apis = cluster.apis[1]
    result = apis.handle(decoded_header, decoded, cluster.now_ms)
    sent = []
    if isinstance(result, Deferred):
        for call in cluster.brokers[1].take_controller_requests():
            sent.append(call.request)
            call.on_response(answer, NOW_MS)
        ((_, _, result),) = apis.poll(cluster.now_ms)
    return decode_response(ApiKey.DESCRIBE_QUORUM, version, encode_response(decoded_header, result)[4:])[1], sent


ANSWER = ControllerAnswer(
    error_code=ErrorCode.NONE, leader_id=2, leader_epoch=7, high_watermark=40,
    voters=(QuorumReplica(1, 40, 30, True, "h1", 9101), QuorumReplica(2, 41, 0, True, "h2", 9102),
            QuorumReplica(3, 35, -1, False, "h3", 9103)),
    observers=(QuorumReplica(4, 38, 250, False),))


def test_the_leaders_answer_with_kafkas_timestamps_and_v2_listeners():
    cluster = Cluster()
    response, sent = ask(cluster, 2, answer=ANSWER)
    assert sent == [ControllerDescribeQuorum()]
    assert (response.error_code, response.error_message) == (ErrorCode.NONE, None)
    ((topic_name, (partition,)),) = [(t.topic_name, t.partitions) for t in response.topics]
    assert topic_name == METADATA
    assert (partition.partition_index, partition.error_code, partition.error_message, partition.leader_id,
            partition.leader_epoch, partition.high_watermark) == (0, ErrorCode.NONE, None, 2, 7, 40)
    zero = uuid.UUID(int=0)
    states = [(r.replica_id, r.replica_directory_id, r.log_end_offset, r.last_fetch_timestamp,
               r.last_caught_up_timestamp) for r in partition.current_voters]
    # The leader's own timestamps are now; another voter's last fetch is when the leader last heard from it,
    # caught up then only if it had every entry; unknown is -1.
    assert states == [(1, zero, 40, NOW_MS - 30, NOW_MS - 30), (2, zero, 41, NOW_MS, NOW_MS), (3, zero, 35, -1, -1)]
    assert [(o.replica_id, o.log_end_offset, o.last_fetch_timestamp, o.last_caught_up_timestamp)
            for o in partition.observers] == [(4, 38, NOW_MS - 250, -1)]
    assert [(n.node_id, [(l.name, l.host, l.port) for l in n.listeners]) for n in response.nodes] == [
        (1, [("CONTROLLER", "h1", 9101)]), (2, [("CONTROLLER", "h2", 9102)]), (3, [("CONTROLLER", "h3", 9103)])]


def test_older_versions_leave_out_what_they_do_not_carry():
    cluster = Cluster()
    v0, _ = ask(cluster, 0, answer=ANSWER)
    (partition,) = v0.topics[0].partitions
    assert [(r.replica_id, r.log_end_offset, r.last_fetch_timestamp) for r in partition.current_voters] == [
        (1, 40, -1), (2, 41, -1), (3, 35, -1)]  # v0 has no timestamps: the decoder's default
    assert v0.nodes == [] and partition.error_message is None
    v1, _ = ask(cluster, 1, answer=ANSWER)
    assert v1.topics[0].partitions[0].current_voters[0].last_fetch_timestamp == NOW_MS - 30 and v1.nodes == []


def test_anything_but_the_metadata_partition_is_unknown_and_reaches_no_controller():
    cluster = Cluster()
    for asked in ([(METADATA, [1])], [("t", [0])], [(METADATA, [0, 0])], [(METADATA, [0]), ("t", [0])], []):
        response, sent = ask(cluster, 2, request(*asked))
        assert sent == [] and response.error_code == ErrorCode.NONE, asked
        assert [(t.topic_name, [(p.partition_index, p.error_code, p.error_message, p.leader_id)
                                for p in t.partitions]) for t in response.topics] == [
            (name, [(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.", -1)
                    for index in indexes]) for name, indexes in asked]


def test_no_leader_answers_not_leader_and_other_failures_the_top_level_error():
    cluster = Cluster()
    response, _ = ask(cluster, 2, answer=KafkaError("no active controller", ErrorCode.NOT_CONTROLLER))
    assert response.error_code == ErrorCode.NONE
    assert [(p.partition_index, p.error_code) for p in response.topics[0].partitions] == [
        (0, ErrorCode.NOT_LEADER_OR_FOLLOWER)]
    response, _ = ask(cluster, 2, answer=KafkaError("controller unreachable", ErrorCode.REQUEST_TIMED_OUT))
    assert (response.error_code, response.error_message, response.topics) == (
        ErrorCode.REQUEST_TIMED_OUT, "controller unreachable", [])


def test_describe_on_the_cluster_is_required():
    cluster = Cluster()
    secure(cluster, "User:erin", (RT.TOPIC, "t", Op.DESCRIBE))
    response, sent = ask(cluster, 2)
    assert sent == [] and (response.error_code, response.error_message, response.topics) == (
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.", [])
    secure(cluster, "User:erin", (RT.CLUSTER, "kafka-cluster", Op.DESCRIBE))
    response, sent = ask(cluster, 2, answer=ANSWER)
    assert sent == [ControllerDescribeQuorum()] and response.topics[0].partitions[0].leader_id == 2


# ---- the controller side ------------------------------------------------------------------------------------

CONFIG = parse_config({
    "cluster_id": "quorum",
    "nodes": [{"id": 1, "kafka_port": 9001, "controller_port": 9101, "roles": ["broker", "controller"]},
              {"id": 4, "kafka_port": 9004, "roles": ["broker"]}],
    "topic_defaults": {"partitions": 1, "replication_factor": 1, "min_insync_replicas": 1},
}, "<test>", "/")


def node(node_id: int, clock: list[int]) -> NodeState:
    storage = SimDisk(random.Random(node_id))
    storage.makedirs("metadata")
    storage.makedirs("logs")
    return NodeState(CONFIG, node_id, storage, random.Random(node_id), lambda: clock[0],
                     incarnation_id=bytes([node_id]) * 16)


def outcome(state: NodeState, now_ms: int):
    operation_id = state.submit_controller_request(ControllerDescribeQuorum(), now_ms)
    (answered,) = [o for o in state.step(now_ms).controller_outcomes if o.operation_id == operation_id]
    return answered


def test_the_raft_leader_answers_from_its_progress_and_a_voter_before_the_election_refuses():
    clock = [0]
    controller = node(1, clock)
    refused = outcome(controller, 0)  # no leader elected yet: the broker's forward retries until one answers
    assert refused.error is not None and refused.error.code == ErrorCode.NOT_CONTROLLER
    while controller.quorum_leader_id() != 1:
        clock[0] += 50
        controller.raft.tick(clock[0])
        controller.step(clock[0])
        assert clock[0] < 10_000, "the single voter did not elect itself"
    now_ms = clock[0]
    controller.metadata_fetch_answer({"from": 1, "node_id": 4}, now_ms)  # node 4 follows the log, as an observer
    answered = outcome(controller, now_ms + 20)
    assert answered.error is None
    answer = answered.response
    status = controller.handle_admin({"kind": "quorum_status"}, now_ms + 20)["status"]
    assert (answer.error_code, answer.leader_id, answer.leader_epoch, answer.high_watermark) == (
        ErrorCode.NONE, 1, status["epoch"], status["commit_index"])
    assert answer.high_watermark >= 1
    assert answer.voters == (QuorumReplica(1, status["voters"][0]["last_index"], 0, True, "127.0.0.1", 9101),)
    assert answer.observers == (QuorumReplica(4, 0, 20, answer.high_watermark == 0),)


def test_a_voter_the_leader_has_not_heard_from_in_its_term_is_unknown_not_at_index_0():
    """pysyncobj's new leader starts every other voter at match index 0 and its response clock at the election;
    a voter that has not answered since (here 1, which died as the old leader) is shown unknown, as Kafka
    answers -1 for a voter that has not fetched in this epoch, not as 16 entries behind and recently heard."""
    from broker.node_state import describe_quorum_response, quorum_status_dict
    from raftlog.port import MemberProgress, RaftStatus

    status = RaftStatus(node_id=3, leader_id=3, term=2, raft_commit_index=16, last_applied=16, is_leader=True,
                        log_start_index=1, log_end_index=16, snapshot_index=None, members=(
                            MemberProgress(1, match_index=0, last_contact_ms=5_000),
                            MemberProgress(2, match_index=15, last_contact_ms=9_950)))
    view = quorum_status_dict(status, [1, 2, 3], now_ms=10_000)
    assert view["voters"] == [{"id": 1, "last_index": -1, "lag": None, "last_contact_ms": None},
                              {"id": 2, "last_index": 15, "lag": 1, "last_contact_ms": 50},
                              {"id": 3, "last_index": 16, "lag": 0, "last_contact_ms": 0}]
    answer = describe_quorum_response(view, {})
    assert [(v.replica_id, v.log_end_offset, v.last_fetch_age_ms, v.caught_up) for v in answer.voters] == [
        (1, -1, -1, False), (2, 15, 50, False), (3, 16, 0, True)]
