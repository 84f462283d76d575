"""The request and response schemas this codec implements, as Python data mirroring Kafka's JSON message specs.

Source: Apache Kafka's clients/src/main/resources/common/message/<Name>Request.json / <Name>Response.json
(field names, types, versions, nullableVersions, taggedVersions, tags and defaults copied as facts), trimmed
to the versions in `valid` (the range this codec implements; see codec.SUPPORTED): fields that exist only
outside that range are left out. Versions that Kafka 4.0 removed (CreateTopics 0-1, DeleteTopics 0,
OffsetForLeaderEpoch 0-1, DescribeConfigs 0) were checked against the specs of Kafka 3.x, which still had them;
the field annotations kept for them here are the 3.x ones (e.g. DescribeConfigsResponse IsDefault is v0 only).

`flexible` is Kafka's flexibleVersions for the whole api, even where it starts above our highest version: it
is what decides compact encodings and tagged fields for a version.

Notation: field(KafkaName, type, versions, nullable=..., tagged=..., tag=..., default=..., fields=(...)).
"""

from __future__ import annotations

from net.protocol.schema import field, request, response

# Produce v12 (Kafka 4.0, KIP-890 part 2): the same fields as v11; in a transaction of a client that negotiated
# transaction.version 2 it also adds the partition to the transaction (the leader asks the coordinator).
PRODUCE_REQUEST = request(
    0, 'ProduceRequest', valid="3-12", flexible='9+', fields=(
        field('TransactionalId', 'string', '3+', nullable='3+', default=None),
        field('Acks', 'int16', '0+'),
        field('TimeoutMs', 'int32', '0+'),
        field('TopicData', '[]TopicProduceData', '0+', fields=(
            field('Name', 'string', '0-12'),
            field('PartitionData', '[]PartitionProduceData', '0+', fields=(
                field('Index', 'int32', '0+'),
                field('Records', 'records', '0+', nullable='0+'),
            )),
        )),
    ),
)

PRODUCE_RESPONSE = response(
    0, 'ProduceResponse', valid="3-12", flexible='9+', fields=(
        field('Responses', '[]TopicProduceResponse', '0+', fields=(
            field('Name', 'string', '0-12'),
            field('PartitionResponses', '[]PartitionProduceResponse', '0+', fields=(
                field('Index', 'int32', '0+'),
                field('ErrorCode', 'int16', '0+'),
                field('BaseOffset', 'int64', '0+'),
                field('LogAppendTimeMs', 'int64', '2+', default=-1),
                field('LogStartOffset', 'int64', '5+', default=-1),
                field('RecordErrors', '[]BatchIndexAndErrorMessage', '8+', fields=(
                    field('BatchIndex', 'int32', '8+'),
                    field('BatchIndexErrorMessage', 'string', '8+', nullable='8+', default=None),
                )),
                field('ErrorMessage', 'string', '8+', nullable='8+', default=None),
                field('CurrentLeader', 'LeaderIdAndEpoch', '10+', tagged='10+', tag=0, fields=(
                    field('LeaderId', 'int32', '10+', default=-1),
                    field('LeaderEpoch', 'int32', '10+', default=-1),
                )),
            )),
        )),
        field('ThrottleTimeMs', 'int32', '1+', default=0),
        field('NodeEndpoints', '[]NodeEndpoint', '10+', tagged='10+', tag=0, fields=(
            field('NodeId', 'int32', '10+'),
            field('Host', 'string', '10+'),
            field('Port', 'int32', '10+'),
            field('Rack', 'string', '10+', nullable='10+', default=None),
        )),
    ),
)

FETCH_REQUEST = request(
    1, 'FetchRequest', valid="4-17", flexible='12+', fields=(
        field('ClusterId', 'string', '12+', nullable='12+', tagged='12+', tag=0, default=None),
        field('ReplicaId', 'int32', '0-14', default=-1),
        field('ReplicaState', 'ReplicaState', '15+', tagged='15+', tag=1, fields=(
            field('ReplicaId', 'int32', '15+', default=-1),
            field('ReplicaEpoch', 'int64', '15+', default=-1),
        )),
        field('MaxWaitMs', 'int32', '0+'),
        field('MinBytes', 'int32', '0+'),
        field('MaxBytes', 'int32', '3+', default=2147483647),
        field('IsolationLevel', 'int8', '4+', default=0),
        field('SessionId', 'int32', '7+', default=0),
        field('SessionEpoch', 'int32', '7+', default=-1),
        field('Topics', '[]FetchTopic', '0+', fields=(
            field('Topic', 'string', '0-12'),
            field('TopicId', 'uuid', '13+'),
            field('Partitions', '[]FetchPartition', '0+', fields=(
                field('Partition', 'int32', '0+'),
                field('CurrentLeaderEpoch', 'int32', '9+', default=-1),
                field('FetchOffset', 'int64', '0+'),
                field('LastFetchedEpoch', 'int32', '12+', default=-1),
                field('LogStartOffset', 'int64', '5+', default=-1),
                field('PartitionMaxBytes', 'int32', '0+'),
                field('ReplicaDirectoryId', 'uuid', '17+', tagged='17+', tag=0),
            )),
        )),
        field('ForgottenTopicsData', '[]ForgottenTopic', '7+', fields=(
            field('Topic', 'string', '7-12'),
            field('TopicId', 'uuid', '13+'),
            field('Partitions', '[]int32', '7+'),
        )),
        field('RackId', 'string', '11+', default=''),
    ),
)

FETCH_RESPONSE = response(
    1, 'FetchResponse', valid="4-17", flexible='12+', fields=(
        field('ThrottleTimeMs', 'int32', '1+'),
        field('ErrorCode', 'int16', '7+'),
        field('SessionId', 'int32', '7+', default=0),
        field('Responses', '[]FetchableTopicResponse', '0+', fields=(
            field('Topic', 'string', '0-12'),
            field('TopicId', 'uuid', '13+'),
            field('Partitions', '[]PartitionData', '0+', fields=(
                field('PartitionIndex', 'int32', '0+'),
                field('ErrorCode', 'int16', '0+'),
                field('HighWatermark', 'int64', '0+'),
                field('LastStableOffset', 'int64', '4+', default=-1),
                field('LogStartOffset', 'int64', '5+', default=-1),
                field('DivergingEpoch', 'EpochEndOffset', '12+', tagged='12+', tag=0, fields=(
                    field('Epoch', 'int32', '12+', default=-1),
                    field('EndOffset', 'int64', '12+', default=-1),
                )),
                field('CurrentLeader', 'LeaderIdAndEpoch', '12+', tagged='12+', tag=1, fields=(
                    field('LeaderId', 'int32', '12+', default=-1),
                    field('LeaderEpoch', 'int32', '12+', default=-1),
                )),
                field('SnapshotId', 'SnapshotId', '12+', tagged='12+', tag=2, fields=(
                    field('EndOffset', 'int64', '0+', default=-1),
                    field('Epoch', 'int32', '0+', default=-1),
                )),
                field('AbortedTransactions', '[]AbortedTransaction', '4+', nullable='4+', fields=(
                    field('ProducerId', 'int64', '4+'),
                    field('FirstOffset', 'int64', '4+'),
                )),
                field('PreferredReadReplica', 'int32', '11+', default=-1),
                field('Records', 'records', '0+', nullable='0+'),
            )),
        )),
        field('NodeEndpoints', '[]NodeEndpoint', '16+', tagged='16+', tag=0, fields=(
            field('NodeId', 'int32', '16+'),
            field('Host', 'string', '16+'),
            field('Port', 'int32', '16+'),
            field('Rack', 'string', '16+', nullable='16+', default=None),
        )),
    ),
)

# ListOffsets v10 (Kafka 4.0, KIP-1075) adds TimeoutMs, how long a lookup in tiered storage may take; the
# response is v9's. Without tiered storage every answer is immediate and the timeout unused.
LIST_OFFSETS_REQUEST = request(
    2, 'ListOffsetsRequest', valid="1-10", flexible='6+', fields=(
        field('ReplicaId', 'int32', '0+'),
        field('IsolationLevel', 'int8', '2+'),
        field('Topics', '[]ListOffsetsTopic', '0+', fields=(
            field('Name', 'string', '0+'),
            field('Partitions', '[]ListOffsetsPartition', '0+', fields=(
                field('PartitionIndex', 'int32', '0+'),
                field('CurrentLeaderEpoch', 'int32', '4+', default=-1),
                field('Timestamp', 'int64', '0+'),
            )),
        )),
        field('TimeoutMs', 'int32', '10+', default=0),
    ),
)

LIST_OFFSETS_RESPONSE = response(
    2, 'ListOffsetsResponse', valid="1-10", flexible='6+', fields=(
        field('ThrottleTimeMs', 'int32', '2+'),
        field('Topics', '[]ListOffsetsTopicResponse', '0+', fields=(
            field('Name', 'string', '0+'),
            field('Partitions', '[]ListOffsetsPartitionResponse', '0+', fields=(
                field('PartitionIndex', 'int32', '0+'),
                field('ErrorCode', 'int16', '0+'),
                field('Timestamp', 'int64', '1+', default=-1),
                field('Offset', 'int64', '1+', default=-1),
                field('LeaderEpoch', 'int32', '4+', default=-1),
            )),
        )),
    ),
)

METADATA_REQUEST = request(
    3, 'MetadataRequest', valid="0-12", flexible='9+', fields=(
        field('Topics', '[]MetadataRequestTopic', '0+', nullable='1+', fields=(
            field('TopicId', 'uuid', '10+'),
            field('Name', 'string', '0+', nullable='10+'),
        )),
        field('AllowAutoTopicCreation', 'bool', '4+', default=True),
        field('IncludeClusterAuthorizedOperations', 'bool', '8-10'),
        field('IncludeTopicAuthorizedOperations', 'bool', '8+'),
    ),
)

METADATA_RESPONSE = response(
    3, 'MetadataResponse', valid="0-12", flexible='9+', fields=(
        field('ThrottleTimeMs', 'int32', '3+'),
        field('Brokers', '[]MetadataResponseBroker', '0+', fields=(
            field('NodeId', 'int32', '0+'),
            field('Host', 'string', '0+'),
            field('Port', 'int32', '0+'),
            field('Rack', 'string', '1+', nullable='1+', default=None),
        )),
        field('ClusterId', 'string', '2+', nullable='2+', default=None),
        field('ControllerId', 'int32', '1+', default=-1),
        field('Topics', '[]MetadataResponseTopic', '0+', fields=(
            field('ErrorCode', 'int16', '0+'),
            field('Name', 'string', '0+', nullable='12+'),
            field('TopicId', 'uuid', '10+'),
            field('IsInternal', 'bool', '1+', default=False),
            field('Partitions', '[]MetadataResponsePartition', '0+', fields=(
                field('ErrorCode', 'int16', '0+'),
                field('PartitionIndex', 'int32', '0+'),
                field('LeaderId', 'int32', '0+'),
                field('LeaderEpoch', 'int32', '7+', default=-1),
                field('ReplicaNodes', '[]int32', '0+'),
                field('IsrNodes', '[]int32', '0+'),
                field('OfflineReplicas', '[]int32', '5+'),
            )),
            field('TopicAuthorizedOperations', 'int32', '8+', default=-2147483648),
        )),
        field('ClusterAuthorizedOperations', 'int32', '8-10', default=-2147483648),
    ),
)

OFFSET_COMMIT_REQUEST = request(
    8, 'OffsetCommitRequest', valid="2-9", flexible='8+', fields=(
        field('GroupId', 'string', '0+'),
        field('GenerationIdOrMemberEpoch', 'int32', '1+', default=-1),
        field('MemberId', 'string', '1+'),
        field('GroupInstanceId', 'string', '7+', nullable='7+', default=None),
        field('RetentionTimeMs', 'int64', '2-4', default=-1),
        field('Topics', '[]OffsetCommitRequestTopic', '0+', fields=(
            field('Name', 'string', '0-9'),
            field('Partitions', '[]OffsetCommitRequestPartition', '0+', fields=(
                field('PartitionIndex', 'int32', '0+'),
                field('CommittedOffset', 'int64', '0+'),
                field('CommittedLeaderEpoch', 'int32', '6+', default=-1),
                field('CommittedMetadata', 'string', '0+', nullable='0+'),
            )),
        )),
    ),
)

OFFSET_COMMIT_RESPONSE = response(
    8, 'OffsetCommitResponse', valid="2-9", flexible='8+', fields=(
        field('ThrottleTimeMs', 'int32', '3+'),
        field('Topics', '[]OffsetCommitResponseTopic', '0+', fields=(
            field('Name', 'string', '0-9'),
            field('Partitions', '[]OffsetCommitResponsePartition', '0+', fields=(
                field('PartitionIndex', 'int32', '0+'),
                field('ErrorCode', 'int16', '0+'),
            )),
        )),
    ),
)

OFFSET_FETCH_REQUEST = request(
    9, 'OffsetFetchRequest', valid="1-9", flexible='6+', fields=(
        field('GroupId', 'string', '0-7', default=''),
        field('Topics', '[]OffsetFetchRequestTopic', '0-7', nullable='2-7', fields=(
            field('Name', 'string', '0-7'),
            field('PartitionIndexes', '[]int32', '0-7'),
        )),
        field('Groups', '[]OffsetFetchRequestGroup', '8+', fields=(
            field('GroupId', 'string', '8+'),
            field('MemberId', 'string', '9+', nullable='9+', default=None),
            field('MemberEpoch', 'int32', '9+', default=-1),
            field('Topics', '[]OffsetFetchRequestTopics', '8+', nullable='8+', fields=(
                field('Name', 'string', '8+'),
                field('PartitionIndexes', '[]int32', '8+'),
            )),
        )),
        field('RequireStable', 'bool', '7+', default=False),
    ),
)

OFFSET_FETCH_RESPONSE = response(
    9, 'OffsetFetchResponse', valid="1-9", flexible='6+', fields=(
        field('ThrottleTimeMs', 'int32', '3+'),
        field('Topics', '[]OffsetFetchResponseTopic', '0-7', fields=(
            field('Name', 'string', '0-7'),
            field('Partitions', '[]OffsetFetchResponsePartition', '0-7', fields=(
                field('PartitionIndex', 'int32', '0-7'),
                field('CommittedOffset', 'int64', '0-7'),
                field('CommittedLeaderEpoch', 'int32', '5-7', default=-1),
                field('Metadata', 'string', '0-7', nullable='0-7'),
                field('ErrorCode', 'int16', '0-7'),
            )),
        )),
        field('ErrorCode', 'int16', '2-7', default=0),
        field('Groups', '[]OffsetFetchResponseGroup', '8+', fields=(
            field('GroupId', 'string', '8+'),
            field('Topics', '[]OffsetFetchResponseTopics', '8+', fields=(
                field('Name', 'string', '8+'),
                field('Partitions', '[]OffsetFetchResponsePartitions', '8+', fields=(
                    field('PartitionIndex', 'int32', '8+'),
                    field('CommittedOffset', 'int64', '8+'),
                    field('CommittedLeaderEpoch', 'int32', '8+', default=-1),
                    field('Metadata', 'string', '8+', nullable='8+'),
                    field('ErrorCode', 'int16', '8+'),
                )),
            )),
            field('ErrorCode', 'int16', '8+', default=0),
        )),
    ),
)

# FindCoordinator v5 and InitProducerId v5 are v4 again: a client that sends them can take the
# TRANSACTION_ABORTABLE error (KIP-890).
FIND_COORDINATOR_REQUEST = request(
    10, 'FindCoordinatorRequest', valid="0-6", flexible='3+', fields=(
        field('Key', 'string', '0-3', default=''),
        field('KeyType', 'int8', '1+', default=0),
        field('CoordinatorKeys', '[]string', '4+'),
    ),
)

FIND_COORDINATOR_RESPONSE = response(
    10, 'FindCoordinatorResponse', valid="0-6", flexible='3+', fields=(
        field('ThrottleTimeMs', 'int32', '1+'),
        field('ErrorCode', 'int16', '0-3', default=0),
        field('ErrorMessage', 'string', '1-3', nullable='1-3', default=None),
        field('NodeId', 'int32', '0-3', default=-1),
        field('Host', 'string', '0-3', default=''),
        field('Port', 'int32', '0-3', default=-1),
        field('Coordinators', '[]Coordinator', '4+', fields=(
            field('Key', 'string', '4+'),
            field('NodeId', 'int32', '4+'),
            field('Host', 'string', '4+'),
            field('Port', 'int32', '4+'),
            field('ErrorCode', 'int16', '4+'),
            field('ErrorMessage', 'string', '4+', nullable='4+'),
        )),
    ),
)

JOIN_GROUP_REQUEST = request(
    11, 'JoinGroupRequest', valid="0-9", flexible='6+', fields=(
        field('GroupId', 'string', '0+'),
        field('SessionTimeoutMs', 'int32', '0+'),
        field('RebalanceTimeoutMs', 'int32', '1+', default=-1),
        field('MemberId', 'string', '0+'),
        field('GroupInstanceId', 'string', '5+', nullable='5+', default=None),
        field('ProtocolType', 'string', '0+'),
        field('Protocols', '[]JoinGroupRequestProtocol', '0+', fields=(
            field('Name', 'string', '0+'),
            field('Metadata', 'bytes', '0+'),
        )),
        field('Reason', 'string', '8+', nullable='8+', default=None),
    ),
)

JOIN_GROUP_RESPONSE = response(
    11, 'JoinGroupResponse', valid="0-9", flexible='6+', fields=(
        field('ThrottleTimeMs', 'int32', '2+'),
        field('ErrorCode', 'int16', '0+'),
        field('GenerationId', 'int32', '0+', default=-1),
        field('ProtocolType', 'string', '7+', nullable='7+', default=None),
        field('ProtocolName', 'string', '0+', nullable='7+'),
        field('Leader', 'string', '0+'),
        field('SkipAssignment', 'bool', '9+', default=False),
        field('MemberId', 'string', '0+'),
        field('Members', '[]JoinGroupResponseMember', '0+', fields=(
            field('MemberId', 'string', '0+'),
            field('GroupInstanceId', 'string', '5+', nullable='5+', default=None),
            field('Metadata', 'bytes', '0+'),
        )),
    ),
)

HEARTBEAT_REQUEST = request(
    12, 'HeartbeatRequest', valid="0-4", flexible='4+', fields=(
        field('GroupId', 'string', '0+'),
        field('GenerationId', 'int32', '0+'),
        field('MemberId', 'string', '0+'),
        field('GroupInstanceId', 'string', '3+', nullable='3+', default=None),
    ),
)

HEARTBEAT_RESPONSE = response(
    12, 'HeartbeatResponse', valid="0-4", flexible='4+', fields=(
        field('ThrottleTimeMs', 'int32', '1+'),
        field('ErrorCode', 'int16', '0+'),
    ),
)

LEAVE_GROUP_REQUEST = request(
    13, 'LeaveGroupRequest', valid="0-5", flexible='4+', fields=(
        field('GroupId', 'string', '0+'),
        field('MemberId', 'string', '0-2'),
        field('Members', '[]MemberIdentity', '3+', fields=(
            field('MemberId', 'string', '3+'),
            field('GroupInstanceId', 'string', '3+', nullable='3+', default=None),
            field('Reason', 'string', '5+', nullable='5+', default=None),
        )),
    ),
)

LEAVE_GROUP_RESPONSE = response(
    13, 'LeaveGroupResponse', valid="0-5", flexible='4+', fields=(
        field('ThrottleTimeMs', 'int32', '1+'),
        field('ErrorCode', 'int16', '0+'),
        field('Members', '[]MemberResponse', '3+', fields=(
            field('MemberId', 'string', '3+'),
            field('GroupInstanceId', 'string', '3+', nullable='3+'),
            field('ErrorCode', 'int16', '3+'),
        )),
    ),
)

SYNC_GROUP_REQUEST = request(
    14, 'SyncGroupRequest', valid="0-5", flexible='4+', fields=(
        field('GroupId', 'string', '0+'),
        field('GenerationId', 'int32', '0+'),
        field('MemberId', 'string', '0+'),
        field('GroupInstanceId', 'string', '3+', nullable='3+', default=None),
        field('ProtocolType', 'string', '5+', nullable='5+', default=None),
        field('ProtocolName', 'string', '5+', nullable='5+', default=None),
        field('Assignments', '[]SyncGroupRequestAssignment', '0+', fields=(
            field('MemberId', 'string', '0+'),
            field('Assignment', 'bytes', '0+'),
        )),
    ),
)

SYNC_GROUP_RESPONSE = response(
    14, 'SyncGroupResponse', valid="0-5", flexible='4+', fields=(
        field('ThrottleTimeMs', 'int32', '1+'),
        field('ErrorCode', 'int16', '0+'),
        field('ProtocolType', 'string', '5+', nullable='5+', default=None),
        field('ProtocolName', 'string', '5+', nullable='5+', default=None),
        field('Assignment', 'bytes', '0+'),
    ),
)

DESCRIBE_GROUPS_REQUEST = request(
    15, 'DescribeGroupsRequest', valid="0-5", flexible='5+', fields=(
        field('Groups', '[]string', '0+'),
        field('IncludeAuthorizedOperations', 'bool', '3+'),
    ),
)

DESCRIBE_GROUPS_RESPONSE = response(
    15, 'DescribeGroupsResponse', valid="0-5", flexible='5+', fields=(
        field('ThrottleTimeMs', 'int32', '1+'),
        field('Groups', '[]DescribedGroup', '0+', fields=(
            field('ErrorCode', 'int16', '0+'),
            field('GroupId', 'string', '0+'),
            field('GroupState', 'string', '0+'),
            field('ProtocolType', 'string', '0+'),
            field('ProtocolData', 'string', '0+'),
            field('Members', '[]DescribedGroupMember', '0+', fields=(
                field('MemberId', 'string', '0+'),
                field('GroupInstanceId', 'string', '4+', nullable='4+', default=None),
                field('ClientId', 'string', '0+'),
                field('ClientHost', 'string', '0+'),
                field('MemberMetadata', 'bytes', '0+'),
                field('MemberAssignment', 'bytes', '0+'),
            )),
            field('AuthorizedOperations', 'int32', '3+', default=-2147483648),
        )),
    ),
)

LIST_GROUPS_REQUEST = request(
    16, 'ListGroupsRequest', valid="0-5", flexible='3+', fields=(
        field('StatesFilter', '[]string', '4+'),
        field('TypesFilter', '[]string', '5+'),
    ),
)

LIST_GROUPS_RESPONSE = response(
    16, 'ListGroupsResponse', valid="0-5", flexible='3+', fields=(
        field('ThrottleTimeMs', 'int32', '1+'),
        field('ErrorCode', 'int16', '0+'),
        field('Groups', '[]ListedGroup', '0+', fields=(
            field('GroupId', 'string', '0+'),
            field('ProtocolType', 'string', '0+'),
            field('GroupState', 'string', '4+', default=''),
            field('GroupType', 'string', '5+', default=''),
        )),
    ),
)

API_VERSIONS_REQUEST = request(
    18, 'ApiVersionsRequest', valid="0-4", flexible='3+', fields=(
        field('ClientSoftwareName', 'string', '3+'),
        field('ClientSoftwareVersion', 'string', '3+'),
    ),
)

API_VERSIONS_RESPONSE = response(
    18, 'ApiVersionsResponse', valid="0-4", flexible='3+', fields=(
        field('ErrorCode', 'int16', '0+'),
        field('ApiKeys', '[]ApiVersion', '0+', fields=(
            field('ApiKey', 'int16', '0+'),
            field('MinVersion', 'int16', '0+'),
            field('MaxVersion', 'int16', '0+'),
        )),
        field('ThrottleTimeMs', 'int32', '1+'),
        field('SupportedFeatures', '[]SupportedFeatureKey', '3+', tagged='3+', tag=0, fields=(
            field('Name', 'string', '3+'),
            field('MinVersion', 'int16', '3+'),
            field('MaxVersion', 'int16', '3+'),
        )),
        field('FinalizedFeaturesEpoch', 'int64', '3+', tagged='3+', tag=1, default=-1),
        field('FinalizedFeatures', '[]FinalizedFeatureKey', '3+', tagged='3+', tag=2, fields=(
            field('Name', 'string', '3+'),
            field('MaxVersionLevel', 'int16', '3+'),
            field('MinVersionLevel', 'int16', '3+'),
        )),
        field('ZkMigrationReady', 'bool', '3+', tagged='3+', tag=3, default=False),
    ),
)

CREATE_TOPICS_REQUEST = request(
    19, 'CreateTopicsRequest', valid="0-7", flexible='5+', fields=(
        field('Topics', '[]CreatableTopic', '0+', fields=(
            field('Name', 'string', '0+'),
            field('NumPartitions', 'int32', '0+'),
            field('ReplicationFactor', 'int16', '0+'),
            field('Assignments', '[]CreatableReplicaAssignment', '0+', fields=(
                field('PartitionIndex', 'int32', '0+'),
                field('BrokerIds', '[]int32', '0+'),
            )),
            field('Configs', '[]CreatableTopicConfig', '0+', fields=(
                field('Name', 'string', '0+'),
                field('Value', 'string', '0+', nullable='0+'),
            )),
        )),
        field('timeoutMs', 'int32', '0+', default=60000),
        field('validateOnly', 'bool', '1+', default=False),
    ),
)

CREATE_TOPICS_RESPONSE = response(
    19, 'CreateTopicsResponse', valid="0-7", flexible='5+', fields=(
        field('ThrottleTimeMs', 'int32', '2+'),
        field('Topics', '[]CreatableTopicResult', '0+', fields=(
            field('Name', 'string', '0+'),
            field('TopicId', 'uuid', '7+'),
            field('ErrorCode', 'int16', '0+'),
            field('ErrorMessage', 'string', '1+', nullable='0+'),
            field('TopicConfigErrorCode', 'int16', '5+', tagged='5+', tag=0),
            field('NumPartitions', 'int32', '5+', default=-1),
            field('ReplicationFactor', 'int16', '5+', default=-1),
            field('Configs', '[]CreatableTopicConfigs', '5+', nullable='5+', fields=(
                field('Name', 'string', '5+'),
                field('Value', 'string', '5+', nullable='5+'),
                field('ReadOnly', 'bool', '5+'),
                field('ConfigSource', 'int8', '5+', default=-1),
                field('IsSensitive', 'bool', '5+'),
            )),
        )),
    ),
)

DELETE_TOPICS_REQUEST = request(
    20, 'DeleteTopicsRequest', valid="0-6", flexible='4+', fields=(
        field('Topics', '[]DeleteTopicState', '6+', fields=(
            field('Name', 'string', '6+', nullable='6+', default=None),
            field('TopicId', 'uuid', '6+'),
        )),
        field('TopicNames', '[]string', '0-5'),
        field('TimeoutMs', 'int32', '0+'),
    ),
)

DELETE_TOPICS_RESPONSE = response(
    20, 'DeleteTopicsResponse', valid="0-6", flexible='4+', fields=(
        field('ThrottleTimeMs', 'int32', '1+'),
        field('Responses', '[]DeletableTopicResult', '0+', fields=(
            field('Name', 'string', '0+', nullable='6+'),
            field('TopicId', 'uuid', '6+'),
            field('ErrorCode', 'int16', '0+'),
            field('ErrorMessage', 'string', '5+', nullable='5+', default=None),
        )),
    ),
)

DELETE_RECORDS_REQUEST = request(
    21, 'DeleteRecordsRequest', valid="0-2", flexible='2+', fields=(
        field('Topics', '[]DeleteRecordsTopic', '0+', fields=(
            field('Name', 'string', '0+'),
            field('Partitions', '[]DeleteRecordsPartition', '0+', fields=(
                field('PartitionIndex', 'int32', '0+'),
                field('Offset', 'int64', '0+'),
            )),
        )),
        field('TimeoutMs', 'int32', '0+'),
    ),
)

DELETE_RECORDS_RESPONSE = response(
    21, 'DeleteRecordsResponse', valid="0-2", flexible='2+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('Topics', '[]DeleteRecordsTopicResult', '0+', fields=(
            field('Name', 'string', '0+'),
            field('Partitions', '[]DeleteRecordsPartitionResult', '0+', fields=(
                field('PartitionIndex', 'int32', '0+'),
                field('LowWatermark', 'int64', '0+'),
                field('ErrorCode', 'int16', '0+'),
            )),
        )),
    ),
)

INIT_PRODUCER_ID_REQUEST = request(
    22, 'InitProducerIdRequest', valid="0-5", flexible='2+', fields=(
        field('TransactionalId', 'string', '0+', nullable='0+'),
        field('TransactionTimeoutMs', 'int32', '0+'),
        field('ProducerId', 'int64', '3+', default=-1),
        field('ProducerEpoch', 'int16', '3+', default=-1),
    ),
)

INIT_PRODUCER_ID_RESPONSE = response(
    22, 'InitProducerIdResponse', valid="0-5", flexible='2+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('ErrorCode', 'int16', '0+'),
        field('ProducerId', 'int64', '0+', default=-1),
        field('ProducerEpoch', 'int16', '0+'),
    ),
)

OFFSET_FOR_LEADER_EPOCH_REQUEST = request(
    23, 'OffsetForLeaderEpochRequest', valid="0-4", flexible='4+', fields=(
        field('ReplicaId', 'int32', '3+', default=-2),
        field('Topics', '[]OffsetForLeaderTopic', '0+', fields=(
            field('Topic', 'string', '0+'),
            field('Partitions', '[]OffsetForLeaderPartition', '0+', fields=(
                field('Partition', 'int32', '0+'),
                field('CurrentLeaderEpoch', 'int32', '2+', default=-1),
                field('LeaderEpoch', 'int32', '0+'),
            )),
        )),
    ),
)

OFFSET_FOR_LEADER_EPOCH_RESPONSE = response(
    23, 'OffsetForLeaderEpochResponse', valid="0-4", flexible='4+', fields=(
        field('ThrottleTimeMs', 'int32', '2+'),
        field('Topics', '[]OffsetForLeaderTopicResult', '0+', fields=(
            field('Topic', 'string', '0+'),
            field('Partitions', '[]EpochEndOffset', '0+', fields=(
                field('ErrorCode', 'int16', '0+'),
                field('Partition', 'int32', '0+'),
                field('LeaderEpoch', 'int32', '1+', default=-1),
                field('EndOffset', 'int64', '0+', default=-1),
            )),
        )),
    ),
)

ADD_PARTITIONS_TO_TXN_REQUEST = request(
    24, 'AddPartitionsToTxnRequest', valid="0-5", flexible='3+', fields=(
        # v4+ is sent by brokers only (KIP-890): many transactions per request, VerifyOnly checks membership.
        field('Transactions', '[]AddPartitionsToTxnTransaction', '4+', fields=(
            field('TransactionalId', 'string', '4+'),
            field('ProducerId', 'int64', '4+'),
            field('ProducerEpoch', 'int16', '4+'),
            field('VerifyOnly', 'bool', '4+', default=False),
            field('Topics', '[]AddPartitionsToTxnTopic', '4+', fields=(
                field('Name', 'string', '0+'),
                field('Partitions', '[]int32', '0+'),
            )),
        )),
        field('V3AndBelowTransactionalId', 'string', '0-3'),
        field('V3AndBelowProducerId', 'int64', '0-3'),
        field('V3AndBelowProducerEpoch', 'int16', '0-3'),
        field('V3AndBelowTopics', '[]AddPartitionsToTxnTopic', '0-3', fields=(
            field('Name', 'string', '0+'),
            field('Partitions', '[]int32', '0+'),
        )),
    ),
)

ADD_PARTITIONS_TO_TXN_RESPONSE = response(
    24, 'AddPartitionsToTxnResponse', valid="0-5", flexible='3+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('ErrorCode', 'int16', '4+', default=0),
        field('ResultsByTransaction', '[]AddPartitionsToTxnResult', '4+', fields=(
            field('TransactionalId', 'string', '4+'),
            field('TopicResults', '[]AddPartitionsToTxnTopicResult', '4+', fields=(
                field('Name', 'string', '0+'),
                field('ResultsByPartition', '[]AddPartitionsToTxnPartitionResult', '0+', fields=(
                    field('PartitionIndex', 'int32', '0+'),
                    field('PartitionErrorCode', 'int16', '0+'),
                )),
            )),
        )),
        field('ResultsByTopicV3AndBelow', '[]AddPartitionsToTxnTopicResult', '0-3', fields=(
            field('Name', 'string', '0+'),
            field('ResultsByPartition', '[]AddPartitionsToTxnPartitionResult', '0+', fields=(
                field('PartitionIndex', 'int32', '0+'),
                field('PartitionErrorCode', 'int16', '0+'),
            )),
        )),
    ),
)

ADD_OFFSETS_TO_TXN_REQUEST = request(
    25, 'AddOffsetsToTxnRequest', valid="0-4", flexible='3+', fields=(
        field('TransactionalId', 'string', '0+'),
        field('ProducerId', 'int64', '0+'),
        field('ProducerEpoch', 'int16', '0+'),
        field('GroupId', 'string', '0+'),
    ),
)

ADD_OFFSETS_TO_TXN_RESPONSE = response(
    25, 'AddOffsetsToTxnResponse', valid="0-4", flexible='3+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('ErrorCode', 'int16', '0+'),
    ),
)

# EndTxn v4 adds the TRANSACTION_ABORTABLE error; v5 (KIP-890 part 2) bumps the producer epoch at the end of
# every transaction and answers with the producer id and epoch to use next.
END_TXN_REQUEST = request(
    26, 'EndTxnRequest', valid="0-5", flexible='3+', fields=(
        field('TransactionalId', 'string', '0+'),
        field('ProducerId', 'int64', '0+'),
        field('ProducerEpoch', 'int16', '0+'),
        field('Committed', 'bool', '0+'),
    ),
)

END_TXN_RESPONSE = response(
    26, 'EndTxnResponse', valid="0-5", flexible='3+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('ErrorCode', 'int16', '0+'),
        field('ProducerId', 'int64', '5+', default=-1),
        field('ProducerEpoch', 'int16', '5+', default=-1),
    ),
)

# TxnOffsetCommit v4 adds the TRANSACTION_ABORTABLE error; v5 (Kafka 4.0, KIP-890 part 2) is sent without
# AddOffsetsToTxn by a client on transaction.version 2: the group coordinator has the offsets partition added.
TXN_OFFSET_COMMIT_REQUEST = request(
    28, 'TxnOffsetCommitRequest', valid="0-5", flexible='3+', fields=(
        field('TransactionalId', 'string', '0+'),
        field('GroupId', 'string', '0+'),
        field('ProducerId', 'int64', '0+'),
        field('ProducerEpoch', 'int16', '0+'),
        field('GenerationId', 'int32', '3+', default=-1),
        field('MemberId', 'string', '3+', default=''),
        field('GroupInstanceId', 'string', '3+', nullable='3+', default=None),
        field('Topics', '[]TxnOffsetCommitRequestTopic', '0+', fields=(
            field('Name', 'string', '0+'),
            field('Partitions', '[]TxnOffsetCommitRequestPartition', '0+', fields=(
                field('PartitionIndex', 'int32', '0+'),
                field('CommittedOffset', 'int64', '0+'),
                field('CommittedLeaderEpoch', 'int32', '2+', default=-1),
                field('CommittedMetadata', 'string', '0+', nullable='0+'),
            )),
        )),
    ),
)

TXN_OFFSET_COMMIT_RESPONSE = response(
    28, 'TxnOffsetCommitResponse', valid="0-5", flexible='3+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('Topics', '[]TxnOffsetCommitResponseTopic', '0+', fields=(
            field('Name', 'string', '0+'),
            field('Partitions', '[]TxnOffsetCommitResponsePartition', '0+', fields=(
                field('PartitionIndex', 'int32', '0+'),
                field('ErrorCode', 'int16', '0+'),
            )),
        )),
    ),
)

DESCRIBE_CONFIGS_REQUEST = request(
    32, 'DescribeConfigsRequest', valid="0-4", flexible='4+', fields=(
        field('Resources', '[]DescribeConfigsResource', '0+', fields=(
            field('ResourceType', 'int8', '0+'),
            field('ResourceName', 'string', '0+'),
            field('ConfigurationKeys', '[]string', '0+', nullable='0+'),
        )),
        field('IncludeSynonyms', 'bool', '1+', default=False),
        field('IncludeDocumentation', 'bool', '3+', default=False),
    ),
)

DESCRIBE_CONFIGS_RESPONSE = response(
    32, 'DescribeConfigsResponse', valid="0-4", flexible='4+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('Results', '[]DescribeConfigsResult', '0+', fields=(
            field('ErrorCode', 'int16', '0+'),
            field('ErrorMessage', 'string', '0+', nullable='0+'),
            field('ResourceType', 'int8', '0+'),
            field('ResourceName', 'string', '0+'),
            field('Configs', '[]DescribeConfigsResourceResult', '0+', fields=(
                field('Name', 'string', '0+'),
                field('Value', 'string', '0+', nullable='0+'),
                field('ReadOnly', 'bool', '0+'),
                field('ConfigSource', 'int8', '1+', default=-1),
                field('IsDefault', 'bool', '0'),
                field('IsSensitive', 'bool', '0+'),
                field('Synonyms', '[]DescribeConfigsSynonym', '1+', fields=(
                    field('Name', 'string', '1+'),
                    field('Value', 'string', '1+', nullable='0+'),
                    field('Source', 'int8', '1+'),
                )),
                field('ConfigType', 'int8', '3+', default=0),
                field('Documentation', 'string', '3+', nullable='0+'),
            )),
        )),
    ),
)

ALTER_CONFIGS_REQUEST = request(
    33, 'AlterConfigsRequest', valid="0-2", flexible='2+', fields=(
        field('Resources', '[]AlterConfigsResource', '0+', fields=(
            field('ResourceType', 'int8', '0+'),
            field('ResourceName', 'string', '0+'),
            field('Configs', '[]AlterableConfig', '0+', fields=(
                field('Name', 'string', '0+'),
                field('Value', 'string', '0+', nullable='0+'),
            )),
        )),
        field('ValidateOnly', 'bool', '0+'),
    ),
)

ALTER_CONFIGS_RESPONSE = response(
    33, 'AlterConfigsResponse', valid="0-2", flexible='2+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('Responses', '[]AlterConfigsResourceResponse', '0+', fields=(
            field('ErrorCode', 'int16', '0+'),
            field('ErrorMessage', 'string', '0+', nullable='0+'),
            field('ResourceType', 'int8', '0+'),
            field('ResourceName', 'string', '0+'),
        )),
    ),
)

CREATE_PARTITIONS_REQUEST = request(
    37, 'CreatePartitionsRequest', valid="0-3", flexible='2+', fields=(
        field('Topics', '[]CreatePartitionsTopic', '0+', fields=(
            field('Name', 'string', '0+'),
            field('Count', 'int32', '0+'),
            field('Assignments', '[]CreatePartitionsAssignment', '0+', nullable='0+', fields=(
                field('BrokerIds', '[]int32', '0+'),
            )),
        )),
        field('TimeoutMs', 'int32', '0+'),
        field('ValidateOnly', 'bool', '0+'),
    ),
)

CREATE_PARTITIONS_RESPONSE = response(
    37, 'CreatePartitionsResponse', valid="0-3", flexible='2+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('Results', '[]CreatePartitionsTopicResult', '0+', fields=(
            field('Name', 'string', '0+'),
            field('ErrorCode', 'int16', '0+'),
            field('ErrorMessage', 'string', '0+', nullable='0+', default=None),
        )),
    ),
)

DELETE_GROUPS_REQUEST = request(
    42, 'DeleteGroupsRequest', valid="0-2", flexible='2+', fields=(
        field('GroupsNames', '[]string', '0+'),
    ),
)

DELETE_GROUPS_RESPONSE = response(
    42, 'DeleteGroupsResponse', valid="0-2", flexible='2+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('Results', '[]DeletableGroupResult', '0+', fields=(
            field('GroupId', 'string', '0+'),
            field('ErrorCode', 'int16', '0+'),
        )),
    ),
)

OFFSET_DELETE_REQUEST = request(
    47, 'OffsetDeleteRequest', valid="0-0", flexible='none', fields=(
        field('GroupId', 'string', '0+'),
        field('Topics', '[]OffsetDeleteRequestTopic', '0+', fields=(
            field('Name', 'string', '0+'),
            field('Partitions', '[]OffsetDeleteRequestPartition', '0+', fields=(
                field('PartitionIndex', 'int32', '0+'),
            )),
        )),
    ),
)

OFFSET_DELETE_RESPONSE = response(
    47, 'OffsetDeleteResponse', valid="0-0", flexible='none', fields=(
        field('ErrorCode', 'int16', '0+'),
        field('ThrottleTimeMs', 'int32', '0+'),
        field('Topics', '[]OffsetDeleteResponseTopic', '0+', fields=(
            field('Name', 'string', '0+'),
            field('Partitions', '[]OffsetDeleteResponsePartition', '0+', fields=(
                field('PartitionIndex', 'int32', '0+'),
                field('ErrorCode', 'int16', '0+'),
            )),
        )),
    ),
)

INCREMENTAL_ALTER_CONFIGS_REQUEST = request(
    44, 'IncrementalAlterConfigsRequest', valid="0-1", flexible='1+', fields=(
        field('Resources', '[]AlterConfigsResource', '0+', fields=(
            field('ResourceType', 'int8', '0+'),
            field('ResourceName', 'string', '0+'),
            field('Configs', '[]AlterableConfig', '0+', fields=(
                field('Name', 'string', '0+'),
                field('ConfigOperation', 'int8', '0+'),
                field('Value', 'string', '0+', nullable='0+'),
            )),
        )),
        field('ValidateOnly', 'bool', '0+'),
    ),
)

INCREMENTAL_ALTER_CONFIGS_RESPONSE = response(
    44, 'IncrementalAlterConfigsResponse', valid="0-1", flexible='1+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('Responses', '[]AlterConfigsResourceResponse', '0+', fields=(
            field('ErrorCode', 'int16', '0+'),
            field('ErrorMessage', 'string', '0+', nullable='0+'),
            field('ResourceType', 'int8', '0+'),
            field('ResourceName', 'string', '0+'),
        )),
    ),
)

DESCRIBE_CLUSTER_REQUEST = request(
    60, 'DescribeClusterRequest', valid="0-2", flexible='0+', fields=(
        field('IncludeClusterAuthorizedOperations', 'bool', '0+'),
        field('EndpointType', 'int8', '1+', default=1),  # KIP-919: 1 = brokers, 2 = controllers
        field('IncludeFencedBrokers', 'bool', '2+'),  # KIP-1073
    ),
)

DESCRIBE_CLUSTER_RESPONSE = response(
    60, 'DescribeClusterResponse', valid="0-2", flexible='0+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('ErrorCode', 'int16', '0+'),
        field('ErrorMessage', 'string', '0+', nullable='0+', default=None),
        field('EndpointType', 'int8', '1+', default=1),
        field('ClusterId', 'string', '0+'),
        field('ControllerId', 'int32', '0+', default=-1),
        field('Brokers', '[]DescribeClusterBroker', '0+', fields=(
            field('BrokerId', 'int32', '0+'),
            field('Host', 'string', '0+'),
            field('Port', 'int32', '0+'),
            field('Rack', 'string', '0+', nullable='0+', default=None),
            field('IsFenced', 'bool', '2+'),
        )),
        field('ClusterAuthorizedOperations', 'int32', '0+', default=-2147483648),
    ),
)


# AlterReplicaLogDirs: v1 as v0, v2 flexible.
ALTER_REPLICA_LOG_DIRS_REQUEST = request(
    34, 'AlterReplicaLogDirsRequest', valid="0-2", flexible='2+', fields=(
        field('Dirs', '[]AlterReplicaLogDir', '0+', fields=(
            field('Path', 'string', '0+'),
            field('Topics', '[]AlterReplicaLogDirTopic', '0+', fields=(
                field('Name', 'string', '0+'),
                field('Partitions', '[]int32', '0+'),
            )),
        )),
    ),
)

ALTER_REPLICA_LOG_DIRS_RESPONSE = response(
    34, 'AlterReplicaLogDirsResponse', valid="0-2", flexible='2+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('Results', '[]AlterReplicaLogDirTopicResult', '0+', fields=(
            field('TopicName', 'string', '0+'),
            field('Partitions', '[]AlterReplicaLogDirPartitionResult', '0+', fields=(
                field('PartitionIndex', 'int32', '0+'),
                field('ErrorCode', 'int16', '0+'),
            )),
        )),
    ),
)


# DescribeLogDirs v4 (KIP-827) adds TotalBytes and UsableBytes to each log directory; v3 the top-level ErrorCode.
DESCRIBE_LOG_DIRS_REQUEST = request(
    35, 'DescribeLogDirsRequest', valid="0-4", flexible='2+', fields=(
        field('Topics', '[]DescribableLogDirTopic', '0+', nullable='0+', default=None, fields=(
            field('Topic', 'string', '0+'),
            field('Partitions', '[]int32', '0+'),
        )),
    ),
)

DESCRIBE_LOG_DIRS_RESPONSE = response(
    35, 'DescribeLogDirsResponse', valid="0-4", flexible='2+', fields=(
        field('ThrottleTimeMs', 'int32', '0+', default=0),
        field('ErrorCode', 'int16', '3+', default=0),
        field('Results', '[]DescribeLogDirsResult', '0+', fields=(
            field('ErrorCode', 'int16', '0+'),
            field('LogDir', 'string', '0+'),
            field('Topics', '[]DescribeLogDirsTopic', '0+', fields=(
                field('Name', 'string', '0+'),
                field('Partitions', '[]DescribeLogDirsPartition', '0+', fields=(
                    field('PartitionIndex', 'int32', '0+'),
                    field('PartitionSize', 'int64', '0+'),
                    field('OffsetLag', 'int64', '0+'),
                    field('IsFutureKey', 'bool', '0+'),
                )),
            )),
            field('TotalBytes', 'int64', '4+', default=-1),
            field('UsableBytes', 'int64', '4+', default=-1),
        )),
    ),
)


ELECT_LEADERS_REQUEST = request(
    43, 'ElectLeadersRequest', valid="0-2", flexible='2+', fields=(
        field('ElectionType', 'int8', '1+', default=0),
        field('TopicPartitions', '[]TopicPartitions', '0+', nullable='0+', default=None, fields=(
            field('Topic', 'string', '0+'),
            field('Partitions', '[]int32', '0+'),
        )),
        field('TimeoutMs', 'int32', '0+', default=60000),
    ),
)

ELECT_LEADERS_RESPONSE = response(
    43, 'ElectLeadersResponse', valid="0-2", flexible='2+', fields=(
        field('ThrottleTimeMs', 'int32', '0+', default=0),
        field('ErrorCode', 'int16', '1+', default=0),
        field('ReplicaElectionResults', '[]ReplicaElectionResult', '0+', fields=(
            field('Topic', 'string', '0+'),
            field('PartitionResult', '[]PartitionResult', '0+', fields=(
                field('PartitionId', 'int32', '0+'),
                field('ErrorCode', 'int16', '0+'),
                field('ErrorMessage', 'string', '0+', nullable='0+', default=None),
            )),
        )),
    ),
)

ALTER_PARTITION_REASSIGNMENTS_REQUEST = request(
    45, 'AlterPartitionReassignmentsRequest', valid="0-0", flexible='0+', fields=(
        field('TimeoutMs', 'int32', '0+', default=60000),
        field('Topics', '[]ReassignableTopic', '0+', fields=(
            field('Name', 'string', '0+'),
            field('Partitions', '[]ReassignablePartition', '0+', fields=(
                field('PartitionIndex', 'int32', '0+'),
                field('Replicas', '[]int32', '0+', nullable='0+', default=None),
            )),
        )),
    ),
)

ALTER_PARTITION_REASSIGNMENTS_RESPONSE = response(
    45, 'AlterPartitionReassignmentsResponse', valid="0-0", flexible='0+', fields=(
        field('ThrottleTimeMs', 'int32', '0+', default=0),
        field('ErrorCode', 'int16', '0+', default=0),
        field('ErrorMessage', 'string', '0+', nullable='0+', default=None),
        field('Responses', '[]ReassignableTopicResponse', '0+', fields=(
            field('Name', 'string', '0+'),
            field('Partitions', '[]ReassignablePartitionResponse', '0+', fields=(
                field('PartitionIndex', 'int32', '0+'),
                field('ErrorCode', 'int16', '0+'),
                field('ErrorMessage', 'string', '0+', nullable='0+', default=None),
            )),
        )),
    ),
)

LIST_PARTITION_REASSIGNMENTS_REQUEST = request(
    46, 'ListPartitionReassignmentsRequest', valid="0-0", flexible='0+', fields=(
        field('TimeoutMs', 'int32', '0+', default=60000),
        field('Topics', '[]ListPartitionReassignmentsTopics', '0+', nullable='0+', default=None, fields=(
            field('Name', 'string', '0+'),
            field('PartitionIndexes', '[]int32', '0+'),
        )),
    ),
)

LIST_PARTITION_REASSIGNMENTS_RESPONSE = response(
    46, 'ListPartitionReassignmentsResponse', valid="0-0", flexible='0+', fields=(
        field('ThrottleTimeMs', 'int32', '0+', default=0),
        field('ErrorCode', 'int16', '0+', default=0),
        field('ErrorMessage', 'string', '0+', nullable='0+', default=None),
        field('Topics', '[]OngoingTopicReassignment', '0+', fields=(
            field('Name', 'string', '0+'),
            field('Partitions', '[]OngoingPartitionReassignment', '0+', fields=(
                field('PartitionIndex', 'int32', '0+'),
                field('Replicas', '[]int32', '0+'),
                field('AddingReplicas', '[]int32', '0+'),
                field('RemovingReplicas', '[]int32', '0+'),
            )),
        )),
    ),
)

UNREGISTER_BROKER_REQUEST = request(
    64, 'UnregisterBrokerRequest', valid="0-0", flexible='0+', fields=(
        field('BrokerId', 'int32', '0+'),
    ),
)

UNREGISTER_BROKER_RESPONSE = response(
    64, 'UnregisterBrokerResponse', valid="0-0", flexible='0+', fields=(
        field('ThrottleTimeMs', 'int32', '0+', default=0),
        field('ErrorCode', 'int16', '0+', default=0),
        field('ErrorMessage', 'string', '0+', nullable='0+', default=None),
    ),
)


WRITE_TXN_MARKERS_REQUEST = request(
    27, 'WriteTxnMarkersRequest', valid="0-1", flexible='1+', fields=(
        field('Markers', '[]WritableTxnMarker', '0+', fields=(
            field('ProducerId', 'int64', '0+'),
            field('ProducerEpoch', 'int16', '0+'),
            field('TransactionResult', 'bool', '0+'),
            field('Topics', '[]WritableTxnMarkerTopic', '0+', fields=(
                field('Name', 'string', '0+'),
                field('PartitionIndexes', '[]int32', '0+'),
            )),
            field('CoordinatorEpoch', 'int32', '0+'),
        )),
    ),
)

WRITE_TXN_MARKERS_RESPONSE = response(
    27, 'WriteTxnMarkersResponse', valid="0-1", flexible='1+', fields=(
        field('Markers', '[]WritableTxnMarkerResult', '0+', fields=(
            field('ProducerId', 'int64', '0+'),
            field('Topics', '[]WritableTxnMarkerTopicResult', '0+', fields=(
                field('Name', 'string', '0+'),
                field('Partitions', '[]WritableTxnMarkerPartitionResult', '0+', fields=(
                    field('PartitionIndex', 'int32', '0+'),
                    field('ErrorCode', 'int16', '0+'),
                )),
            )),
        )),
    ),
)

DESCRIBE_PRODUCERS_REQUEST = request(
    61, 'DescribeProducersRequest', valid="0", flexible='0+', fields=(
        field('Topics', '[]TopicRequest', '0+', fields=(
            field('Name', 'string', '0+'),
            field('PartitionIndexes', '[]int32', '0+'),
        )),
    ),
)

DESCRIBE_PRODUCERS_RESPONSE = response(
    61, 'DescribeProducersResponse', valid="0", flexible='0+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('Topics', '[]TopicResponse', '0+', fields=(
            field('Name', 'string', '0+'),
            field('Partitions', '[]PartitionResponse', '0+', fields=(
                field('PartitionIndex', 'int32', '0+'),
                field('ErrorCode', 'int16', '0+'),
                field('ErrorMessage', 'string', '0+', nullable='0+', default=None),
                field('ActiveProducers', '[]ProducerState', '0+', fields=(
                    field('ProducerId', 'int64', '0+'),
                    field('ProducerEpoch', 'int32', '0+'),
                    field('LastSequence', 'int32', '0+', default=-1),
                    field('LastTimestamp', 'int64', '0+', default=-1),
                    field('CoordinatorEpoch', 'int32', '0+'),
                    field('CurrentTxnStartOffset', 'int64', '0+', default=-1),
                )),
            )),
        )),
    ),
)

DESCRIBE_TRANSACTIONS_REQUEST = request(
    65, 'DescribeTransactionsRequest', valid="0", flexible='0+', fields=(
        field('TransactionalIds', '[]string', '0+'),
    ),
)

DESCRIBE_TRANSACTIONS_RESPONSE = response(
    65, 'DescribeTransactionsResponse', valid="0", flexible='0+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('TransactionStates', '[]TransactionState', '0+', fields=(
            field('ErrorCode', 'int16', '0+'),
            field('TransactionalId', 'string', '0+'),
            field('TransactionState', 'string', '0+'),
            field('TransactionTimeoutMs', 'int32', '0+'),
            field('TransactionStartTimeMs', 'int64', '0+'),
            field('ProducerId', 'int64', '0+'),
            field('ProducerEpoch', 'int16', '0+'),
            field('Topics', '[]TopicData', '0+', fields=(
                field('Topic', 'string', '0+'),
                field('Partitions', '[]int32', '0+'),
            )),
        )),
    ),
)

LIST_TRANSACTIONS_REQUEST = request(
    66, 'ListTransactionsRequest', valid="0-1", flexible='0+', fields=(
        field('StateFilters', '[]string', '0+'),
        field('ProducerIdFilters', '[]int64', '0+'),
        field('DurationFilter', 'int64', '1+', default=-1),
    ),
)

LIST_TRANSACTIONS_RESPONSE = response(
    66, 'ListTransactionsResponse', valid="0-1", flexible='0+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('ErrorCode', 'int16', '0+'),
        field('UnknownStateFilters', '[]string', '0+'),
        field('TransactionStates', '[]TransactionState', '0+', fields=(
            field('TransactionalId', 'string', '0+'),
            field('ProducerId', 'int64', '0+'),
            field('TransactionState', 'string', '0+'),
        )),
    ),
)

SASL_HANDSHAKE_REQUEST = request(
    17, 'SaslHandshakeRequest', valid="0-1", flexible='none', fields=(
        field('Mechanism', 'string', '0+'),
    ),
)

SASL_HANDSHAKE_RESPONSE = response(
    17, 'SaslHandshakeResponse', valid="0-1", flexible='none', fields=(
        field('ErrorCode', 'int16', '0+'),
        field('Mechanisms', '[]string', '0+'),
    ),
)

SASL_AUTHENTICATE_REQUEST = request(
    36, 'SaslAuthenticateRequest', valid="0-2", flexible='2+', fields=(
        field('AuthBytes', 'bytes', '0+'),
    ),
)

SASL_AUTHENTICATE_RESPONSE = response(
    36, 'SaslAuthenticateResponse', valid="0-2", flexible='2+', fields=(
        field('ErrorCode', 'int16', '0+'),
        field('ErrorMessage', 'string', '0+', nullable='0+', default=None),
        field('AuthBytes', 'bytes', '0+'),
        field('SessionLifetimeMs', 'int64', '1+', default=0),
    ),
)

DESCRIBE_ACLS_REQUEST = request(
    29, 'DescribeAclsRequest', valid="0-3", flexible='2+', fields=(
        field('ResourceTypeFilter', 'int8', '0+'),
        field('ResourceNameFilter', 'string', '0+', nullable='0+'),
        field('PatternTypeFilter', 'int8', '1+', default=3),
        field('PrincipalFilter', 'string', '0+', nullable='0+'),
        field('HostFilter', 'string', '0+', nullable='0+'),
        field('Operation', 'int8', '0+'),
        field('PermissionType', 'int8', '0+'),
    ),
)

DESCRIBE_ACLS_RESPONSE = response(
    29, 'DescribeAclsResponse', valid="0-3", flexible='2+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('ErrorCode', 'int16', '0+'),
        field('ErrorMessage', 'string', '0+', nullable='0+', default=None),
        field('Resources', '[]DescribeAclsResource', '0+', fields=(
            field('ResourceType', 'int8', '0+'),
            field('ResourceName', 'string', '0+'),
            field('PatternType', 'int8', '1+', default=3),
            field('Acls', '[]AclDescription', '0+', fields=(
                field('Principal', 'string', '0+'),
                field('Host', 'string', '0+'),
                field('Operation', 'int8', '0+'),
                field('PermissionType', 'int8', '0+'),
            )),
        )),
    ),
)

CREATE_ACLS_REQUEST = request(
    30, 'CreateAclsRequest', valid="0-3", flexible='2+', fields=(
        field('Creations', '[]AclCreation', '0+', fields=(
            field('ResourceType', 'int8', '0+'),
            field('ResourceName', 'string', '0+'),
            field('ResourcePatternType', 'int8', '1+', default=3),
            field('Principal', 'string', '0+'),
            field('Host', 'string', '0+'),
            field('Operation', 'int8', '0+'),
            field('PermissionType', 'int8', '0+'),
        )),
    ),
)

CREATE_ACLS_RESPONSE = response(
    30, 'CreateAclsResponse', valid="0-3", flexible='2+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('Results', '[]AclCreationResult', '0+', fields=(
            field('ErrorCode', 'int16', '0+'),
            field('ErrorMessage', 'string', '0+', nullable='0+', default=None),
        )),
    ),
)

DELETE_ACLS_REQUEST = request(
    31, 'DeleteAclsRequest', valid="0-3", flexible='2+', fields=(
        field('Filters', '[]DeleteAclsFilter', '0+', fields=(
            field('ResourceTypeFilter', 'int8', '0+'),
            field('ResourceNameFilter', 'string', '0+', nullable='0+'),
            field('PatternTypeFilter', 'int8', '1+', default=3),
            field('PrincipalFilter', 'string', '0+', nullable='0+'),
            field('HostFilter', 'string', '0+', nullable='0+'),
            field('Operation', 'int8', '0+'),
            field('PermissionType', 'int8', '0+'),
        )),
    ),
)

DELETE_ACLS_RESPONSE = response(
    31, 'DeleteAclsResponse', valid="0-3", flexible='2+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('FilterResults', '[]DeleteAclsFilterResult', '0+', fields=(
            field('ErrorCode', 'int16', '0+'),
            field('ErrorMessage', 'string', '0+', nullable='0+', default=None),
            field('MatchingAcls', '[]DeleteAclsMatchingAcl', '0+', fields=(
                field('ErrorCode', 'int16', '0+'),
                field('ErrorMessage', 'string', '0+', nullable='0+', default=None),
                field('ResourceType', 'int8', '0+'),
                field('ResourceName', 'string', '0+'),
                field('PatternType', 'int8', '1+', default=3),
                field('Principal', 'string', '0+'),
                field('Host', 'string', '0+'),
                field('Operation', 'int8', '0+'),
                field('PermissionType', 'int8', '0+'),
            )),
        )),
    ),
)

DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST = request(
    50, 'DescribeUserScramCredentialsRequest', valid="0", flexible='0+', fields=(
        field('Users', '[]UserName', '0+', nullable='0+', fields=(
            field('Name', 'string', '0+'),
        )),
    ),
)

DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE = response(
    50, 'DescribeUserScramCredentialsResponse', valid="0", flexible='0+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('ErrorCode', 'int16', '0+'),
        field('ErrorMessage', 'string', '0+', nullable='0+', default=None),
        field('Results', '[]DescribeUserScramCredentialsResult', '0+', fields=(
            field('User', 'string', '0+'),
            field('ErrorCode', 'int16', '0+'),
            field('ErrorMessage', 'string', '0+', nullable='0+', default=None),
            field('CredentialInfos', '[]CredentialInfo', '0+', fields=(
                field('Mechanism', 'int8', '0+'),
                field('Iterations', 'int32', '0+'),
            )),
        )),
    ),
)

ALTER_USER_SCRAM_CREDENTIALS_REQUEST = request(
    51, 'AlterUserScramCredentialsRequest', valid="0", flexible='0+', fields=(
        field('Deletions', '[]ScramCredentialDeletion', '0+', fields=(
            field('Name', 'string', '0+'),
            field('Mechanism', 'int8', '0+'),
        )),
        field('Upsertions', '[]ScramCredentialUpsertion', '0+', fields=(
            field('Name', 'string', '0+'),
            field('Mechanism', 'int8', '0+'),
            field('Iterations', 'int32', '0+'),
            field('Salt', 'bytes', '0+'),
            field('SaltedPassword', 'bytes', '0+'),
        )),
    ),
)

ALTER_USER_SCRAM_CREDENTIALS_RESPONSE = response(
    51, 'AlterUserScramCredentialsResponse', valid="0", flexible='0+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('Results', '[]AlterUserScramCredentialsResult', '0+', fields=(
            field('User', 'string', '0+'),
            field('ErrorCode', 'int16', '0+'),
            field('ErrorMessage', 'string', '0+', nullable='0+', default=None),
        )),
    ),
)

DESCRIBE_CLIENT_QUOTAS_REQUEST = request(
    48, 'DescribeClientQuotasRequest', valid="0-1", flexible='1+', fields=(
        field('Components', '[]ComponentData', '0+', fields=(
            field('EntityType', 'string', '0+'),
            field('MatchType', 'int8', '0+'),
            field('Match', 'string', '0+', nullable='0+'),
        )),
        field('Strict', 'bool', '0+'),
    ),
)

DESCRIBE_CLIENT_QUOTAS_RESPONSE = response(
    48, 'DescribeClientQuotasResponse', valid="0-1", flexible='1+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('ErrorCode', 'int16', '0+'),
        field('ErrorMessage', 'string', '0+', nullable='0+', default=None),
        field('Entries', '[]EntryData', '0+', nullable='0+', fields=(
            field('Entity', '[]EntityData', '0+', fields=(
                field('EntityType', 'string', '0+'),
                field('EntityName', 'string', '0+', nullable='0+'),
            )),
            field('Values', '[]ValueData', '0+', fields=(
                field('Key', 'string', '0+'),
                field('Value', 'float64', '0+'),
            )),
        )),
    ),
)

ALTER_CLIENT_QUOTAS_REQUEST = request(
    49, 'AlterClientQuotasRequest', valid="0-1", flexible='1+', fields=(
        field('Entries', '[]EntryData', '0+', fields=(
            field('Entity', '[]EntityData', '0+', fields=(
                field('EntityType', 'string', '0+'),
                field('EntityName', 'string', '0+', nullable='0+'),
            )),
            field('Ops', '[]OpData', '0+', fields=(
                field('Key', 'string', '0+'),
                field('Value', 'float64', '0+'),
                field('Remove', 'bool', '0+'),
            )),
        )),
        field('ValidateOnly', 'bool', '0+'),
    ),
)

ALTER_CLIENT_QUOTAS_RESPONSE = response(
    49, 'AlterClientQuotasResponse', valid="0-1", flexible='1+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('Entries', '[]EntryData', '0+', fields=(
            field('ErrorCode', 'int16', '0+'),
            field('ErrorMessage', 'string', '0+', nullable='0+', default=None),
            field('Entity', '[]EntityData', '0+', fields=(
                field('EntityType', 'string', '0+'),
                field('EntityName', 'string', '0+', nullable='0+'),
            )),
        )),
    ),
)

# UpdateFeatures (KIP-584): v1 replaces AllowDowngrade with UpgradeType (1 upgrade, 2 safe downgrade, 3 unsafe
# downgrade) and adds ValidateOnly; v2 drops the per-feature Results (KAFKA-16308: one top-level answer).
UPDATE_FEATURES_REQUEST = request(
    57, 'UpdateFeaturesRequest', valid="0-2", flexible='0+', fields=(
        field('TimeoutMs', 'int32', '0+', default=60000),
        field('FeatureUpdates', '[]FeatureUpdateKey', '0+', fields=(
            field('Feature', 'string', '0+'),
            field('MaxVersionLevel', 'int16', '0+'),
            field('AllowDowngrade', 'bool', '0', default=False),
            field('UpgradeType', 'int8', '1+', default=1),
        )),
        field('ValidateOnly', 'bool', '1+', default=False),
    ),
)

UPDATE_FEATURES_RESPONSE = response(
    57, 'UpdateFeaturesResponse', valid="0-2", flexible='0+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('ErrorCode', 'int16', '0+'),
        field('ErrorMessage', 'string', '0+', nullable='0+', default=None),
        field('Results', '[]UpdatableFeatureResult', '0-1', fields=(
            field('Feature', 'string', '0+'),
            field('ErrorCode', 'int16', '0+'),
            field('ErrorMessage', 'string', '0+', nullable='0+', default=None),
        )),
    ),
)

CONSUMER_GROUP_HEARTBEAT_REQUEST = request(
    68, 'ConsumerGroupHeartbeatRequest', valid="0-1", flexible='0+', fields=(
        field('GroupId', 'string', '0+'),
        field('MemberId', 'string', '0+'),
        field('MemberEpoch', 'int32', '0+'),
        field('InstanceId', 'string', '0+', nullable='0+', default=None),
        field('RackId', 'string', '0+', nullable='0+', default=None),
        field('RebalanceTimeoutMs', 'int32', '0+', default=-1),
        field('SubscribedTopicNames', '[]string', '0+', nullable='0+', default=None),
        field('SubscribedTopicRegex', 'string', '1+', nullable='1+', default=None),
        field('ServerAssignor', 'string', '0+', nullable='0+', default=None),
        field('TopicPartitions', '[]TopicPartitions', '0+', nullable='0+', default=None, fields=(
            field('TopicId', 'uuid', '0+'),
            field('Partitions', '[]int32', '0+'),
        )),
    ),
)

CONSUMER_GROUP_HEARTBEAT_RESPONSE = response(
    68, 'ConsumerGroupHeartbeatResponse', valid="0-1", flexible='0+', fields=(
        field('ThrottleTimeMs', 'int32', '0+', default=0),
        field('ErrorCode', 'int16', '0+', default=0),
        field('ErrorMessage', 'string', '0+', nullable='0+', default=None),
        field('MemberId', 'string', '0+', nullable='0+', default=None),
        field('MemberEpoch', 'int32', '0+', default=-1),
        field('HeartbeatIntervalMs', 'int32', '0+', default=0),
        field('Assignment', 'Assignment', '0+', nullable='0+', default=None, fields=(
            field('TopicPartitions', '[]TopicPartitions', '0+', fields=(
                field('TopicId', 'uuid', '0+'),
                field('Partitions', '[]int32', '0+'),
            )),
        )),
    ),
)

CONSUMER_GROUP_DESCRIBE_REQUEST = request(
    69, 'ConsumerGroupDescribeRequest', valid="0", flexible='0+', fields=(
        field('GroupIds', '[]string', '0+'),
        field('IncludeAuthorizedOperations', 'bool', '0+', default=False),
    ),
)

CONSUMER_GROUP_DESCRIBE_RESPONSE = response(
    69, 'ConsumerGroupDescribeResponse', valid="0", flexible='0+', fields=(
        field('ThrottleTimeMs', 'int32', '0+', default=0),
        field('Groups', '[]DescribedGroup', '0+', fields=(
            field('ErrorCode', 'int16', '0+', default=0),
            field('ErrorMessage', 'string', '0+', nullable='0+', default=None),
            field('GroupId', 'string', '0+'),
            field('GroupState', 'string', '0+', default=''),
            field('GroupEpoch', 'int32', '0+', default=0),
            field('AssignmentEpoch', 'int32', '0+', default=0),
            field('AssignorName', 'string', '0+', default=''),
            field('Members', '[]Member', '0+', fields=(
                field('MemberId', 'string', '0+'),
                field('InstanceId', 'string', '0+', nullable='0+', default=None),
                field('RackId', 'string', '0+', nullable='0+', default=None),
                field('MemberEpoch', 'int32', '0+'),
                field('ClientId', 'string', '0+'),
                field('ClientHost', 'string', '0+'),
                field('SubscribedTopicNames', '[]string', '0+'),
                field('SubscribedTopicRegex', 'string', '0+', nullable='0+', default=None),
                field('Assignment', 'Assignment', '0+', fields=(
                    field('TopicPartitions', '[]TopicPartitions', '0+', fields=(
                        field('TopicId', 'uuid', '0+'),
                        field('TopicName', 'string', '0+'),
                        field('Partitions', '[]int32', '0+'),
                    )),
                )),
                field('TargetAssignment', 'Assignment', '0+', fields=(
                    field('TopicPartitions', '[]TopicPartitions', '0+', fields=(
                        field('TopicId', 'uuid', '0+'),
                        field('TopicName', 'string', '0+'),
                        field('Partitions', '[]int32', '0+'),
                    )),
                )),
            )),
            field('AuthorizedOperations', 'int32', '0+', default=-2147483648),
        )),
    ),
)

# DescribeTopicPartitions (KIP-966; Kafka 3.7+): what Kafka's Java admin client's describeTopics asks a broker
# that serves it, a page of partitions at a time from a cursor.
DESCRIBE_TOPIC_PARTITIONS_REQUEST = request(
    75, 'DescribeTopicPartitionsRequest', valid="0", flexible='0+', fields=(
        field('Topics', '[]TopicRequest', '0+', fields=(
            field('Name', 'string', '0+'),
        )),
        field('ResponsePartitionLimit', 'int32', '0+', default=2000),
        field('Cursor', 'Cursor', '0+', nullable='0+', default=None, fields=(
            field('TopicName', 'string', '0+'),
            field('PartitionIndex', 'int32', '0+'),
        )),
    ),
)

DESCRIBE_TOPIC_PARTITIONS_RESPONSE = response(
    75, 'DescribeTopicPartitionsResponse', valid="0", flexible='0+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('Topics', '[]DescribeTopicPartitionsResponseTopic', '0+', fields=(
            field('ErrorCode', 'int16', '0+'),
            field('Name', 'string', '0+', nullable='0+'),
            field('TopicId', 'uuid', '0+'),
            field('IsInternal', 'bool', '0+', default=False),
            field('Partitions', '[]DescribeTopicPartitionsResponsePartition', '0+', fields=(
                field('ErrorCode', 'int16', '0+'),
                field('PartitionIndex', 'int32', '0+'),
                field('LeaderId', 'int32', '0+'),
                field('LeaderEpoch', 'int32', '0+', default=-1),
                field('ReplicaNodes', '[]int32', '0+'),
                field('IsrNodes', '[]int32', '0+'),
                field('EligibleLeaderReplicas', '[]int32', '0+', nullable='0+', default=None),
                field('LastKnownElr', '[]int32', '0+', nullable='0+', default=None),
                field('OfflineReplicas', '[]int32', '0+'),
            )),
            field('TopicAuthorizedOperations', 'int32', '0+', default=-2147483648),
        )),
        field('NextCursor', 'Cursor', '0+', nullable='0+', default=None, fields=(
            field('TopicName', 'string', '0+'),
            field('PartitionIndex', 'int32', '0+'),
        )),
    ),
)

# DescribeQuorum (KIP-595): v1 adds LastFetchTimestamp and LastCaughtUpTimestamp (KIP-836), v2 ErrorMessage,
# the partition's ErrorMessage, ReplicaDirectoryId and the voters' Nodes (KIP-853). The request is the same in all.
DESCRIBE_QUORUM_REQUEST = request(
    55, 'DescribeQuorumRequest', valid="0-2", flexible='0+', fields=(
        field('Topics', '[]TopicData', '0+', fields=(
            field('TopicName', 'string', '0+'),
            field('Partitions', '[]PartitionData', '0+', fields=(
                field('PartitionIndex', 'int32', '0+'),
            )),
        )),
    ),
)

_QUORUM_REPLICA_STATE = (  # Kafka's common struct ReplicaState, of the voters and of the observers
    field('ReplicaId', 'int32', '0+'),
    field('ReplicaDirectoryId', 'uuid', '2+'),
    field('LogEndOffset', 'int64', '0+'),
    field('LastFetchTimestamp', 'int64', '1+', default=-1),
    field('LastCaughtUpTimestamp', 'int64', '1+', default=-1),
)

DESCRIBE_QUORUM_RESPONSE = response(
    55, 'DescribeQuorumResponse', valid="0-2", flexible='0+', fields=(
        field('ErrorCode', 'int16', '0+'),
        field('ErrorMessage', 'string', '2+', nullable='2+', default=None),
        field('Topics', '[]TopicData', '0+', fields=(
            field('TopicName', 'string', '0+'),
            field('Partitions', '[]PartitionData', '0+', fields=(
                field('PartitionIndex', 'int32', '0+'),
                field('ErrorCode', 'int16', '0+'),
                field('ErrorMessage', 'string', '2+', nullable='2+', default=None),
                field('LeaderId', 'int32', '0+'),
                field('LeaderEpoch', 'int32', '0+'),
                field('HighWatermark', 'int64', '0+'),
                field('CurrentVoters', '[]ReplicaState', '0+', fields=_QUORUM_REPLICA_STATE),
                field('Observers', '[]ReplicaState', '0+', fields=_QUORUM_REPLICA_STATE),
            )),
        )),
        field('Nodes', '[]Node', '2+', fields=(
            field('NodeId', 'int32', '2+'),
            field('Listeners', '[]Listener', '2+', fields=(
                field('Name', 'string', '2+'),
                field('Host', 'string', '2+'),
                field('Port', 'uint16', '2+'),
            )),
        )),
    ),
)

# Client telemetry (KIP-714): a client asks which of its metrics to push and how often, then pushes them as
# OpenTelemetry (OTLP) metrics, compressed as it chooses among the types the broker accepts. Api key 74 is
# ListClientMetricsResources (Kafka 3.7-4.0), which Kafka 4.1 renames ListConfigResources and widens in v1.
GET_TELEMETRY_SUBSCRIPTIONS_REQUEST = request(
    71, 'GetTelemetrySubscriptionsRequest', valid="0", flexible='0+', fields=(
        field('ClientInstanceId', 'uuid', '0+'),
    ),
)

GET_TELEMETRY_SUBSCRIPTIONS_RESPONSE = response(
    71, 'GetTelemetrySubscriptionsResponse', valid="0", flexible='0+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('ErrorCode', 'int16', '0+'),
        field('ClientInstanceId', 'uuid', '0+'),
        field('SubscriptionId', 'int32', '0+'),
        field('AcceptedCompressionTypes', '[]int8', '0+'),
        field('PushIntervalMs', 'int32', '0+'),
        field('TelemetryMaxBytes', 'int32', '0+'),
        field('DeltaTemporality', 'bool', '0+'),
        field('RequestedMetrics', '[]string', '0+'),
    ),
)

PUSH_TELEMETRY_REQUEST = request(
    72, 'PushTelemetryRequest', valid="0", flexible='0+', fields=(
        field('ClientInstanceId', 'uuid', '0+'),
        field('SubscriptionId', 'int32', '0+'),
        field('Terminating', 'bool', '0+'),
        field('CompressionType', 'int8', '0+'),
        field('Metrics', 'bytes', '0+'),
    ),
)

PUSH_TELEMETRY_RESPONSE = response(
    72, 'PushTelemetryResponse', valid="0", flexible='0+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('ErrorCode', 'int16', '0+'),
    ),
)

LIST_CLIENT_METRICS_RESOURCES_REQUEST = request(
    74, 'ListConfigResourcesRequest', valid="0", flexible='0+', fields=(),
)

# v0 as Kafka 4.1 names it (ListConfigResources; the same bytes as 3.7's ListClientMetricsResources v0).
LIST_CLIENT_METRICS_RESOURCES_RESPONSE = response(
    74, 'ListConfigResourcesResponse', valid="0", flexible='0+', fields=(
        field('ThrottleTimeMs', 'int32', '0+'),
        field('ErrorCode', 'int16', '0+'),
        field('ConfigResources', '[]ConfigResource', '0+', fields=(
            field('ResourceName', 'string', '0+'),
        )),
    ),
)
