"""Moving partitions and brokers (sans-IO): ElectLeaders, AlterPartitionReassignments and UnregisterBroker
(forwarded to the active controller, answered when it answers) and ListPartitionReassignments (answered from
this broker's metadata image, which every reassignment step reaches as committed records).

Authorization (Kafka's): ElectLeaders, AlterPartitionReassignments and UnregisterBroker need ALTER on the
cluster, ListPartitionReassignments DESCRIBE on the cluster; refused requests answer
CLUSTER_AUTHORIZATION_FAILED and reach no controller.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from metadata import reassignment
from metadata.requests import (
    AlterPartitionReassignmentsRequest as ControllerAlterReassignments,
    ElectionType,
    ElectLeadersRequest as ControllerElectLeaders,
    ReassignablePartition,
    TopicPartitions,
    UnregisterBrokerRequest as ControllerUnregisterBroker,
)
from net.protocol import messages
from net.protocol.codec import ApiKey, RequestHeader
from partitions.errors import ErrorCode, KafkaError
from security.acl import AclOperation as Op

from broker.handlers_admin import code_and_message

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

    from broker.core import TopicPartition
    from broker.handlers_admin import AdminApis

_DENIED = "Cluster authorization failed."


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


def _election_results(entries: list[tuple[str, int, int, str | None]]) -> list[Any]:
    response_class = messages.ElectLeadersResponse
    by_topic: dict[str, list[Any]] = {}
    for topic, partition, code, message in entries:
        by_topic.setdefault(topic, []).append(
            response_class.PartitionResult(partition_id=partition, error_code=code, error_message=message))
    return [response_class.ReplicaElectionResult(topic=topic, partition_result=results)
            for topic, results in by_topic.items()]
