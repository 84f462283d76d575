"""Moving partitions and brokers, and the quorum that decides it (sans-IO): ElectLeaders,
AlterPartitionReassignments, UnregisterBroker and DescribeQuorum (forwarded to the active controller, answered
when it answers) and ListPartitionReassignments (answered from this broker's metadata image, which every
reassignment step reaches as committed records).

Authorization (Kafka's): ElectLeaders, AlterPartitionReassignments and UnregisterBroker need ALTER on the
cluster, ListPartitionReassignments and DescribeQuorum DESCRIBE on the cluster; refused requests answer
CLUSTER_AUTHORIZATION_FAILED and reach no controller.

DescribeQuorum (KIP-595, KIP-836, KIP-853) describes the metadata log, `__cluster_metadata` partition 0, as
its Raft leader knows it: the leader and its epoch (the Raft term), the high watermark (the commit index; Raft
indexes count from 1, so an index is also the count of entries below it, Kafka's offset), each voter's log end
offset with the time the leader last heard from it, and the broker-only nodes that follow the log as
observers. A request that names anything else is answered UNKNOWN_TOPIC_OR_PARTITION, as Kafka's Raft client
does. The voters' listeners (v2) are their controller ports, which speak this project's controller RPC, not
Kafka's protocol, and voters carry no directory ids (no KIP-853 reconfiguration here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from metadata import reassignment
from metadata.requests import (
    AlterPartitionReassignmentsRequest as ControllerAlterReassignments,
    DescribeQuorumRequest as ControllerDescribeQuorum,
    ElectionType,
    ElectLeadersRequest as ControllerElectLeaders,
    ReassignablePartition,
    TopicPartitions,
    UnregisterBrokerRequest as ControllerUnregisterBroker,
)
from net.protocol import messages
from net.protocol.codec import ApiKey, RequestHeader
from net.protocol.types import NULL_UUID
from partitions.errors import ErrorCode, KafkaError
from security.acl import AclOperation as Op

from broker.handlers_admin import code_and_message

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

    from broker.core import TopicPartition
    from broker.handlers_admin import AdminApis

_DENIED = "Cluster authorization failed."
METADATA_TOPIC, METADATA_PARTITION = "__cluster_metadata", 0  # Kafka's metadata log, which the quorum keeps
_NOT_HOSTED = "This server does not host this topic-partition."  # Kafka's message for UNKNOWN_TOPIC_OR_PARTITION
CONTROLLER_LISTENER = "CONTROLLER"


class ElasticityApis:
    """Leader elections, partition reassignment and broker removal (see the module docstring)."""

    def __init__(self, admin: "AdminApis") -> None:
        self.admin = admin
        self.apis = admin.apis

    def api_handlers(self):
        return [
            (ApiKey.ELECT_LEADERS, 0, 2, self._elect_leaders),
            (ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 0, self._alter_reassignments),
            (ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 0, self._list_reassignments),
            (ApiKey.DESCRIBE_QUORUM, 0, 2, self._describe_quorum),
            (ApiKey.UNREGISTER_BROKER, 0, 0, self._unregister_broker),
        ]

    def poll(self, now_ms: int, changed: AbstractSet[TopicPartition]) -> None:
        """Forwarded requests complete from the controller's callbacks."""

    def next_deadline_ms(self) -> int | None:
        return None

    def _elect_leaders(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.ElectLeadersResponse
        asked = None if request.topic_partitions is None else [
            (tp.topic, p) for tp in request.topic_partitions for p in tp.partitions]
        if not self.apis.authorize_cluster(Op.ALTER):
            # Kafka: every asked partition fails; asked for all, the list is empty.
            return response_class(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                  replica_election_results=_election_results(
                                      [(t, p, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, _DENIED) for t, p in asked or ()]))
        election_type = request.election_type if header.api_version >= 1 else ElectionType.PREFERRED
        partitions = None if request.topic_partitions is None else tuple(
            TopicPartitions(tp.topic, tuple(tp.partitions)) for tp in request.topic_partitions)

        def build(results: list[Any]) -> Any:
            result = results[0]
            if result is None or isinstance(result, KafkaError):
                code, _ = code_and_message(result)
                return response_class(throttle_time_ms=0, error_code=code, replica_election_results=_election_results(
                    [(t, p, code, None) for t, p in asked or ()]))
            entries = [(r.topic, r.partition, r.error_code, r.message or None) for r in result.partitions]
            return response_class(throttle_time_ms=0, error_code=result.error_code,
                                  replica_election_results=_election_results(entries))

        return self.admin.forward(header, [ControllerElectLeaders(election_type, partitions)], build)

    def _alter_reassignments(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.AlterPartitionReassignmentsResponse
        targets = tuple(
            ReassignablePartition(topic.name, p.partition_index, None if p.replicas is None else tuple(p.replicas))
            for topic in request.topics for p in topic.partitions)

        def respond(code: int, message: str | None, entries: list[tuple[str, int, int, str | None]]) -> Any:
            by_topic: dict[str, list[Any]] = {}
            for topic, partition, partition_code, partition_message in entries:
                by_topic.setdefault(topic, []).append(response_class.ReassignablePartitionResponse(
                    partition_index=partition, error_code=partition_code, error_message=partition_message))
            return response_class(throttle_time_ms=0, error_code=code, error_message=message, responses=[
                response_class.ReassignableTopicResponse(name=name, partitions=partitions)
                for name, partitions in by_topic.items()])

        if not self.apis.authorize_cluster(Op.ALTER):
            return respond(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, _DENIED, [])

        def build(results: list[Any]) -> Any:
            result = results[0] if results else None
            if result is None or isinstance(result, KafkaError):
                return respond(*code_and_message(result), [])
            return respond(ErrorCode.NONE, None, [
                (r.topic, r.partition, r.error_code, r.message or None) for r in result.partitions])

        return self.admin.forward(header, [ControllerAlterReassignments(targets)] if targets else [], build)

    def _list_reassignments(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.ListPartitionReassignmentsResponse
        if not self.apis.authorize_cluster(Op.DESCRIBE):
            return response_class(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                  error_message=_DENIED, topics=[])
        image = self.apis.broker.image
        wanted = None if request.topics is None else {t.name: set(t.partition_indexes) for t in request.topics}
        topics = []
        for name in sorted(image.topics.by_name if wanted is None else wanted):
            topic = image.topics.by_name.get(name)
            if topic is None:
                continue
            partitions = [
                response_class.OngoingPartitionReassignment(
                    partition_index=index, replicas=list(state.replicas), adding_replicas=list(state.adding_replicas),
                    removing_replicas=list(state.removing_replicas))
                for index, state in sorted(topic.partitions.items())
                if reassignment.is_reassigning(state) and (wanted is None or index in wanted[name])
            ]
            if partitions:
                topics.append(response_class.OngoingTopicReassignment(name=name, partitions=partitions))
        return response_class(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, topics=topics)

    def _unregister_broker(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.UnregisterBrokerResponse
        if not self.apis.authorize_cluster(Op.ALTER):
            return response_class(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                  error_message=_DENIED)

        def build(results: list[Any]) -> Any:
            code, message = code_and_message(results[0])
            return response_class(throttle_time_ms=0, error_code=code, error_message=message or None)

        return self.admin.forward(header, [ControllerUnregisterBroker(request.broker_id)], build)

    def _describe_quorum(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.DescribeQuorumResponse
        if not self.apis.authorize_cluster(Op.DESCRIBE):
            return response_class(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=_DENIED, topics=[],
                                  nodes=[])
        asked = [(topic.topic_name, [p.partition_index for p in topic.partitions]) for topic in request.topics]
        if asked != [(METADATA_TOPIC, [METADATA_PARTITION])]:  # Kafka's KafkaRaftClient.hasValidTopicPartition
            return _describe_quorum_errors(asked, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, _NOT_HOSTED)

        def build(results: list[Any]) -> Any:
            result = results[0]
            code, message = code_and_message(result)
            if code == ErrorCode.NOT_CONTROLLER:  # no leader to answer: Kafka's answer of a Raft non-leader
                return _describe_quorum_errors(asked, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                               "For requests intended only for the leader, this error indicates "
                                               "that the broker is not the current leader.")
            if code != ErrorCode.NONE:
                return response_class(error_code=code, error_message=message or None, topics=[], nodes=[])
            return _describe_quorum_answer(result, self.admin.answered_at_ms)

        return self.admin.forward(header, [ControllerDescribeQuorum()], build)


def _describe_quorum_errors(asked: list[tuple[str, list[int]]], code: int, message: str) -> Any:
    """Kafka's DescribeQuorumRequest.getPartitionLevelErrorResponse: every asked partition with `code`."""
    response_class = messages.DescribeQuorumResponse
    return response_class(error_code=ErrorCode.NONE, error_message=None, nodes=[], topics=[
        response_class.TopicData(topic_name=name, partitions=[
            response_class.PartitionData(partition_index=index, error_code=code, error_message=message, leader_id=-1,
                                         leader_epoch=-1, high_watermark=-1, current_voters=[], observers=[])
            for index in indexes])
        for name, indexes in asked])


def _describe_quorum_answer(result: Any, now_ms: int) -> Any:
    """The controller's DescribeQuorumResponse as Kafka's RaftUtil.singletonDescribeQuorumResponse lays it out:
    the leader's timestamps are now; another replica's last fetch is when the leader last heard from it, and it
    was last caught up then if it had every entry (otherwise unknown, -1)."""
    response_class = messages.DescribeQuorumResponse

    def state(replica: Any) -> Any:
        if replica.replica_id == result.leader_id:
            fetched = caught_up = now_ms
        else:
            fetched = -1 if replica.last_fetch_age_ms < 0 else now_ms - replica.last_fetch_age_ms
            caught_up = fetched if replica.caught_up else -1
        return response_class.ReplicaState(replica_id=replica.replica_id, replica_directory_id=NULL_UUID,
                                           log_end_offset=replica.log_end_offset, last_fetch_timestamp=fetched,
                                           last_caught_up_timestamp=caught_up)

    partition = response_class.PartitionData(
        partition_index=METADATA_PARTITION, error_code=ErrorCode.NONE, error_message=None, leader_id=result.leader_id,
        leader_epoch=result.leader_epoch, high_watermark=result.high_watermark,
        current_voters=[state(voter) for voter in result.voters],
        observers=[state(observer) for observer in result.observers])
    nodes = [response_class.Node(node_id=voter.replica_id, listeners=[
        response_class.Listener(name=CONTROLLER_LISTENER, host=voter.host, port=voter.port)])
        for voter in result.voters if voter.host]
    return response_class(error_code=ErrorCode.NONE, error_message=None, nodes=nodes, topics=[
        response_class.TopicData(topic_name=METADATA_TOPIC, partitions=[partition])])


def _election_results(entries: list[tuple[str, int, int, str | None]]) -> list[Any]:
    response_class = messages.ElectLeadersResponse
    by_topic: dict[str, list[Any]] = {}
    for topic, partition, code, message in entries:
        by_topic.setdefault(topic, []).append(
            response_class.PartitionResult(partition_id=partition, error_code=code, error_message=message))
    return [response_class.ReplicaElectionResult(topic=topic, partition_result=results)
            for topic, results in by_topic.items()]
