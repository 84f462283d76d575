"""One message class per request and response, generated from `specs.py`.

Usage: `messages.ProduceRequest(acks=-1, timeout_ms=30000, topic_data=[...])`; nested structs are attributes of
their message class under Kafka's struct names, e.g. `messages.ProduceRequest.TopicProduceData(name="t",
partition_data=[messages.ProduceRequest.PartitionProduceData(index=0, records=batch)])`. Field names are
Kafka's JSON field names in snake_case. Every class takes keyword arguments only; omitted fields take their
defaults. `REQUESTS` and `RESPONSES` map api keys to classes.
"""

from __future__ import annotations

from net.protocol import specs
from net.protocol.schema import Message, build_message_class

ProduceRequest = build_message_class(specs.PRODUCE_REQUEST)
ProduceResponse = build_message_class(specs.PRODUCE_RESPONSE)
FetchRequest = build_message_class(specs.FETCH_REQUEST)
FetchResponse = build_message_class(specs.FETCH_RESPONSE)
ListOffsetsRequest = build_message_class(specs.LIST_OFFSETS_REQUEST)
ListOffsetsResponse = build_message_class(specs.LIST_OFFSETS_RESPONSE)
MetadataRequest = build_message_class(specs.METADATA_REQUEST)
MetadataResponse = build_message_class(specs.METADATA_RESPONSE)
OffsetCommitRequest = build_message_class(specs.OFFSET_COMMIT_REQUEST)
OffsetCommitResponse = build_message_class(specs.OFFSET_COMMIT_RESPONSE)
OffsetFetchRequest = build_message_class(specs.OFFSET_FETCH_REQUEST)
OffsetFetchResponse = build_message_class(specs.OFFSET_FETCH_RESPONSE)
FindCoordinatorRequest = build_message_class(specs.FIND_COORDINATOR_REQUEST)
FindCoordinatorResponse = build_message_class(specs.FIND_COORDINATOR_RESPONSE)
JoinGroupRequest = build_message_class(specs.JOIN_GROUP_REQUEST)
JoinGroupResponse = build_message_class(specs.JOIN_GROUP_RESPONSE)
HeartbeatRequest = build_message_class(specs.HEARTBEAT_REQUEST)
HeartbeatResponse = build_message_class(specs.HEARTBEAT_RESPONSE)
LeaveGroupRequest = build_message_class(specs.LEAVE_GROUP_REQUEST)
LeaveGroupResponse = build_message_class(specs.LEAVE_GROUP_RESPONSE)
SyncGroupRequest = build_message_class(specs.SYNC_GROUP_REQUEST)
SyncGroupResponse = build_message_class(specs.SYNC_GROUP_RESPONSE)
DescribeGroupsRequest = build_message_class(specs.DESCRIBE_GROUPS_REQUEST)
DescribeGroupsResponse = build_message_class(specs.DESCRIBE_GROUPS_RESPONSE)
ListGroupsRequest = build_message_class(specs.LIST_GROUPS_REQUEST)
ListGroupsResponse = build_message_class(specs.LIST_GROUPS_RESPONSE)
ApiVersionsRequest = build_message_class(specs.API_VERSIONS_REQUEST)
ApiVersionsResponse = build_message_class(specs.API_VERSIONS_RESPONSE)
CreateTopicsRequest = build_message_class(specs.CREATE_TOPICS_REQUEST)
CreateTopicsResponse = build_message_class(specs.CREATE_TOPICS_RESPONSE)
DeleteTopicsRequest = build_message_class(specs.DELETE_TOPICS_REQUEST)
DeleteTopicsResponse = build_message_class(specs.DELETE_TOPICS_RESPONSE)
DeleteRecordsRequest = build_message_class(specs.DELETE_RECORDS_REQUEST)
DeleteRecordsResponse = build_message_class(specs.DELETE_RECORDS_RESPONSE)
InitProducerIdRequest = build_message_class(specs.INIT_PRODUCER_ID_REQUEST)
InitProducerIdResponse = build_message_class(specs.INIT_PRODUCER_ID_RESPONSE)
OffsetForLeaderEpochRequest = build_message_class(specs.OFFSET_FOR_LEADER_EPOCH_REQUEST)
OffsetForLeaderEpochResponse = build_message_class(specs.OFFSET_FOR_LEADER_EPOCH_RESPONSE)
AddPartitionsToTxnRequest = build_message_class(specs.ADD_PARTITIONS_TO_TXN_REQUEST)
AddPartitionsToTxnResponse = build_message_class(specs.ADD_PARTITIONS_TO_TXN_RESPONSE)
AddOffsetsToTxnRequest = build_message_class(specs.ADD_OFFSETS_TO_TXN_REQUEST)
AddOffsetsToTxnResponse = build_message_class(specs.ADD_OFFSETS_TO_TXN_RESPONSE)
EndTxnRequest = build_message_class(specs.END_TXN_REQUEST)
EndTxnResponse = build_message_class(specs.END_TXN_RESPONSE)
TxnOffsetCommitRequest = build_message_class(specs.TXN_OFFSET_COMMIT_REQUEST)
TxnOffsetCommitResponse = build_message_class(specs.TXN_OFFSET_COMMIT_RESPONSE)
DescribeConfigsRequest = build_message_class(specs.DESCRIBE_CONFIGS_REQUEST)
DescribeConfigsResponse = build_message_class(specs.DESCRIBE_CONFIGS_RESPONSE)
AlterConfigsRequest = build_message_class(specs.ALTER_CONFIGS_REQUEST)
AlterConfigsResponse = build_message_class(specs.ALTER_CONFIGS_RESPONSE)
CreatePartitionsRequest = build_message_class(specs.CREATE_PARTITIONS_REQUEST)
CreatePartitionsResponse = build_message_class(specs.CREATE_PARTITIONS_RESPONSE)
DeleteGroupsRequest = build_message_class(specs.DELETE_GROUPS_REQUEST)
DeleteGroupsResponse = build_message_class(specs.DELETE_GROUPS_RESPONSE)
OffsetDeleteRequest = build_message_class(specs.OFFSET_DELETE_REQUEST)
OffsetDeleteResponse = build_message_class(specs.OFFSET_DELETE_RESPONSE)
IncrementalAlterConfigsRequest = build_message_class(specs.INCREMENTAL_ALTER_CONFIGS_REQUEST)
IncrementalAlterConfigsResponse = build_message_class(specs.INCREMENTAL_ALTER_CONFIGS_RESPONSE)
DescribeLogDirsRequest = build_message_class(specs.DESCRIBE_LOG_DIRS_REQUEST)
DescribeLogDirsResponse = build_message_class(specs.DESCRIBE_LOG_DIRS_RESPONSE)
DescribeClusterRequest = build_message_class(specs.DESCRIBE_CLUSTER_REQUEST)
DescribeClusterResponse = build_message_class(specs.DESCRIBE_CLUSTER_RESPONSE)
WriteTxnMarkersRequest = build_message_class(specs.WRITE_TXN_MARKERS_REQUEST)
WriteTxnMarkersResponse = build_message_class(specs.WRITE_TXN_MARKERS_RESPONSE)
DescribeProducersRequest = build_message_class(specs.DESCRIBE_PRODUCERS_REQUEST)
DescribeProducersResponse = build_message_class(specs.DESCRIBE_PRODUCERS_RESPONSE)
DescribeTransactionsRequest = build_message_class(specs.DESCRIBE_TRANSACTIONS_REQUEST)
DescribeTransactionsResponse = build_message_class(specs.DESCRIBE_TRANSACTIONS_RESPONSE)
ListTransactionsRequest = build_message_class(specs.LIST_TRANSACTIONS_REQUEST)
ListTransactionsResponse = build_message_class(specs.LIST_TRANSACTIONS_RESPONSE)
SaslHandshakeRequest = build_message_class(specs.SASL_HANDSHAKE_REQUEST)
SaslHandshakeResponse = build_message_class(specs.SASL_HANDSHAKE_RESPONSE)
SaslAuthenticateRequest = build_message_class(specs.SASL_AUTHENTICATE_REQUEST)
SaslAuthenticateResponse = build_message_class(specs.SASL_AUTHENTICATE_RESPONSE)
DescribeAclsRequest = build_message_class(specs.DESCRIBE_ACLS_REQUEST)
DescribeAclsResponse = build_message_class(specs.DESCRIBE_ACLS_RESPONSE)
CreateAclsRequest = build_message_class(specs.CREATE_ACLS_REQUEST)
CreateAclsResponse = build_message_class(specs.CREATE_ACLS_RESPONSE)
DeleteAclsRequest = build_message_class(specs.DELETE_ACLS_REQUEST)
DeleteAclsResponse = build_message_class(specs.DELETE_ACLS_RESPONSE)
DescribeClientQuotasRequest = build_message_class(specs.DESCRIBE_CLIENT_QUOTAS_REQUEST)
DescribeClientQuotasResponse = build_message_class(specs.DESCRIBE_CLIENT_QUOTAS_RESPONSE)
AlterClientQuotasRequest = build_message_class(specs.ALTER_CLIENT_QUOTAS_REQUEST)
AlterClientQuotasResponse = build_message_class(specs.ALTER_CLIENT_QUOTAS_RESPONSE)
DescribeUserScramCredentialsRequest = build_message_class(specs.DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST)
DescribeUserScramCredentialsResponse = build_message_class(specs.DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE)
AlterUserScramCredentialsRequest = build_message_class(specs.ALTER_USER_SCRAM_CREDENTIALS_REQUEST)
AlterUserScramCredentialsResponse = build_message_class(specs.ALTER_USER_SCRAM_CREDENTIALS_RESPONSE)

ElectLeadersRequest = build_message_class(specs.ELECT_LEADERS_REQUEST)
ElectLeadersResponse = build_message_class(specs.ELECT_LEADERS_RESPONSE)
AlterPartitionReassignmentsRequest = build_message_class(specs.ALTER_PARTITION_REASSIGNMENTS_REQUEST)
AlterPartitionReassignmentsResponse = build_message_class(specs.ALTER_PARTITION_REASSIGNMENTS_RESPONSE)
ListPartitionReassignmentsRequest = build_message_class(specs.LIST_PARTITION_REASSIGNMENTS_REQUEST)
ListPartitionReassignmentsResponse = build_message_class(specs.LIST_PARTITION_REASSIGNMENTS_RESPONSE)
UnregisterBrokerRequest = build_message_class(specs.UNREGISTER_BROKER_REQUEST)
UnregisterBrokerResponse = build_message_class(specs.UNREGISTER_BROKER_RESPONSE)
ConsumerGroupHeartbeatRequest = build_message_class(specs.CONSUMER_GROUP_HEARTBEAT_REQUEST)
ConsumerGroupHeartbeatResponse = build_message_class(specs.CONSUMER_GROUP_HEARTBEAT_RESPONSE)
ConsumerGroupDescribeRequest = build_message_class(specs.CONSUMER_GROUP_DESCRIBE_REQUEST)
ConsumerGroupDescribeResponse = build_message_class(specs.CONSUMER_GROUP_DESCRIBE_RESPONSE)
DescribeTopicPartitionsRequest = build_message_class(specs.DESCRIBE_TOPIC_PARTITIONS_REQUEST)
DescribeTopicPartitionsResponse = build_message_class(specs.DESCRIBE_TOPIC_PARTITIONS_RESPONSE)
DescribeQuorumRequest = build_message_class(specs.DESCRIBE_QUORUM_REQUEST)
DescribeQuorumResponse = build_message_class(specs.DESCRIBE_QUORUM_RESPONSE)

def _by_api_key(kind: str) -> dict[int, type[Message]]:
    table = {}
    for value in list(globals().values()):
        if isinstance(value, type) and issubclass(value, Message) and value is not Message and value.SPEC.kind == kind:
            assert value.API_KEY not in table, f"two {kind} classes for api key {value.API_KEY}"
            table[value.API_KEY] = value
    return table


REQUESTS: dict[int, type[Message]] = _by_api_key("request")
RESPONSES: dict[int, type[Message]] = _by_api_key("response")
assert REQUESTS.keys() == RESPONSES.keys(), sorted(REQUESTS.keys() ^ RESPONSES.keys())
for _api_key, _request in REQUESTS.items():
    assert _request.SPEC.valid == RESPONSES[_api_key].SPEC.valid, (_request.SPEC, RESPONSES[_api_key].SPEC.valid)
