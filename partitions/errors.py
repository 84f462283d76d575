"""Kafka's error table and the typed exceptions that carry it.

Theory of operation: every expected failure in Flotilla (a client's bad request, a replica that is not the
leader, a record batch with a bad CRC) is raised as a `KafkaError` subclass that carries its Kafka error
code and whether a client may retry. Cores raise these; the edge (net/) translates them to wire codes in
exactly one place (`ErrorCode` values are the wire values). Programmer errors are plain exceptions or
failed asserts and must crash loudly in tests.

The numbers and retriable flags follow Apache Kafka's `org.apache.kafka.common.protocol.Errors`.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    """Kafka's error codes (wire values)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    TRANSACTION_ABORTABLE = 120  # KIP-890: abort the transaction, then go on with the same producer
    INVALID_REGULAR_EXPRESSION = 128


# Codes a client may retry (Kafka's RetriableException subclasses).
RETRIABLE_CODES: frozenset[ErrorCode] = frozenset(
    {
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
        ErrorCode.INVALID_FETCH_SESSION_EPOCH,
        ErrorCode.LISTENER_NOT_FOUND,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
        ErrorCode.THROTTLING_QUOTA_EXCEEDED,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
    }
)


class KafkaError(Exception):
    """An expected failure with a Kafka error code.

    Subclasses fix `code`; a bare `KafkaError(code, message)` is allowed where no subclass exists.
    """

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str = "", code: ErrorCode | None = None) -> None:
        if code is not None:
            self.code = code
        super().__init__(message or self.code.name)
        self.message = message or self.code.name

    @property
    def retriable(self) -> bool:
        return self.code in RETRIABLE_CODES

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.name}: {self.message})"


def _error_class(name: str, code: ErrorCode) -> type[KafkaError]:
    return type(name, (KafkaError,), {"code": code, "__doc__": f"Kafka error {code.name} ({int(code)})."})


# One typed exception per code that the cores raise, named as Kafka names its exceptions.
CorruptRecordError = _error_class("CorruptRecordError", ErrorCode.CORRUPT_MESSAGE)
InvalidRecordError = _error_class("InvalidRecordError", ErrorCode.INVALID_RECORD)
RecordTooLargeError = _error_class("RecordTooLargeError", ErrorCode.MESSAGE_TOO_LARGE)
RecordListTooLargeError = _error_class("RecordListTooLargeError", ErrorCode.RECORD_LIST_TOO_LARGE)
UnsupportedCompressionTypeError = _error_class(
    "UnsupportedCompressionTypeError", ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
)
UnsupportedForMessageFormatError = _error_class(
    "UnsupportedForMessageFormatError", ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT
)
InvalidTimestampError = _error_class("InvalidTimestampError", ErrorCode.INVALID_TIMESTAMP)
OffsetOutOfRangeError = _error_class("OffsetOutOfRangeError", ErrorCode.OFFSET_OUT_OF_RANGE)
UnknownTopicOrPartitionError = _error_class("UnknownTopicOrPartitionError", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
NotLeaderOrFollowerError = _error_class("NotLeaderOrFollowerError", ErrorCode.NOT_LEADER_OR_FOLLOWER)
LeaderNotAvailableError = _error_class("LeaderNotAvailableError", ErrorCode.LEADER_NOT_AVAILABLE)
FencedLeaderEpochError = _error_class("FencedLeaderEpochError", ErrorCode.FENCED_LEADER_EPOCH)
UnknownLeaderEpochError = _error_class("UnknownLeaderEpochError", ErrorCode.UNKNOWN_LEADER_EPOCH)
NotEnoughReplicasError = _error_class("NotEnoughReplicasError", ErrorCode.NOT_ENOUGH_REPLICAS)
NotEnoughReplicasAfterAppendError = _error_class(
    "NotEnoughReplicasAfterAppendError", ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
)
InvalidRequiredAcksError = _error_class("InvalidRequiredAcksError", ErrorCode.INVALID_REQUIRED_ACKS)
RequestTimedOutError = _error_class("RequestTimedOutError", ErrorCode.REQUEST_TIMED_OUT)
KafkaStorageError = _error_class("KafkaStorageError", ErrorCode.KAFKA_STORAGE_ERROR)
InvalidRequestError = _error_class("InvalidRequestError", ErrorCode.INVALID_REQUEST)
UnsupportedVersionError = _error_class("UnsupportedVersionError", ErrorCode.UNSUPPORTED_VERSION)
InvalidTopicError = _error_class("InvalidTopicError", ErrorCode.INVALID_TOPIC_EXCEPTION)
TopicAlreadyExistsError = _error_class("TopicAlreadyExistsError", ErrorCode.TOPIC_ALREADY_EXISTS)
InvalidPartitionsError = _error_class("InvalidPartitionsError", ErrorCode.INVALID_PARTITIONS)
InvalidReplicationFactorError = _error_class("InvalidReplicationFactorError", ErrorCode.INVALID_REPLICATION_FACTOR)
InvalidConfigError = _error_class("InvalidConfigError", ErrorCode.INVALID_CONFIG)
NotControllerError = _error_class("NotControllerError", ErrorCode.NOT_CONTROLLER)
StaleBrokerEpochError = _error_class("StaleBrokerEpochError", ErrorCode.STALE_BROKER_EPOCH)
BrokerNotAvailableError = _error_class("BrokerNotAvailableError", ErrorCode.BROKER_NOT_AVAILABLE)
InvalidUpdateVersionError = _error_class("InvalidUpdateVersionError", ErrorCode.INVALID_UPDATE_VERSION)
PolicyViolationError = _error_class("PolicyViolationError", ErrorCode.POLICY_VIOLATION)
