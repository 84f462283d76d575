"""What the data source asks the cluster: topic discovery, offset bounds, raw fetches, produce.

Theory of operation: every call goes through `net.client.sync.SyncKafkaClient`. `client_for(servers)` keeps
one client per bootstrap string per process, opened lazily on first use, so a Spark Python worker that runs
many tasks reuses its connections, and nothing unpicklable ever sits in a reader, a writer or a partition.
`fetch_raw` sends a Fetch request itself (through the client's `send()` to the partition leader, or to the
replica the leader named for the reader's rack) because the source wants the records field as bytes, to decode
it straight into Arrow columns (spark/columns.py), not as one Record object per record.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass

from net.client.aio import fetch_request
from net.client.errors import error_from_code
from net.client.results import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, PartitionMetadata
from net.client.security import ClientSecurity
from net.client.sync import SyncKafkaClient
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode, KafkaError, UnknownTopicOrPartitionError

FETCH_MAX_WAIT_MS = 100
FETCH_ATTEMPTS_MAX = 8
RETRY_BACKOFF_SECONDS = 0.2
LEADER_CHANGE_CODES = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.REPLICA_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.INCONSISTENT_TOPIC_ID,  # KIP-516: Fetch v13+ names the topic by id
})

_clients: dict[tuple, SyncKafkaClient] = {}
_clients_lock = threading.Lock()


def client_for(bootstrap_servers: str, request_timeout_ms: int = 30_000,
               security: tuple[tuple[str, str], ...] = ()) -> SyncKafkaClient:
    """This process's client for `bootstrap_servers` with the client security properties `security` (made on
    first use, kept for the process's life)."""
    key = (bootstrap_servers, request_timeout_ms, security)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            extra = {"security": ClientSecurity.from_properties(dict(security))} if security else {}
            client = SyncKafkaClient(bootstrap_servers, client_id="flotilla-spark",
                                     request_timeout_ms=request_timeout_ms, **extra)
            _clients[key] = client
        return client


def close_clients() -> None:
    """Close every cached client of this process (tests, and the driver when a query stops)."""
    with _clients_lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        client.close()


def topic_partitions(client: SyncKafkaClient, topics: list[str] | None) -> dict[str, list[int]]:
    """topic -> sorted partition ids, for `topics` (None: every non-internal topic). Topics the cluster does
    not know are left out. Raises NetworkError, NoBrokersAvailableError."""
    return _partitions_of(client.metadata(topics))


def _partitions_of(cluster) -> dict[str, list[int]]:
    found = {}
    for name, topic in cluster.topics.items():
        if topic.error_code == ErrorCode.NONE and not topic.is_internal and topic.partitions:
            found[name] = sorted(topic.partitions)
    return found


def list_offsets(client: SyncKafkaClient, partitions: dict[str, list[int]], timestamp: int,
                 isolation_level: int = 0) -> dict[str, dict[int, int]]:
    """topic -> partition -> offset for `timestamp` (EARLIEST_TIMESTAMP: log start offset, LATEST_TIMESTAMP:
    high watermark, or the last stable offset with isolation_level 1, else the first offset with a timestamp
    >= it, -1 when none). Raises the partitions' typed errors, NetworkError."""
    offsets: dict[str, dict[int, int]] = {}
    for topic, ids in sorted(partitions.items()):
        if ids:
            answers = client.list_offsets(topic, ids, timestamp, isolation_level=isolation_level)
            offsets[topic] = {partition: answer.offset for partition, answer in answers.items()}
    return offsets


def earliest_offsets(client: SyncKafkaClient, partitions: dict[str, list[int]]) -> dict[str, dict[int, int]]:
    return list_offsets(client, partitions, EARLIEST_TIMESTAMP)


def latest_offsets(client: SyncKafkaClient, partitions: dict[str, list[int]],
                   isolation_level: int = 0) -> dict[str, dict[int, int]]:
    return list_offsets(client, partitions, LATEST_TIMESTAMP, isolation_level)


@dataclass(frozen=True, slots=True)
class RawFetch:
    """One partition's Fetch answer with its records field left as bytes."""

    records: bytes
    high_watermark: int
    log_start_offset: int
    error: KafkaError | None  # OFFSET_OUT_OF_RANGE and other errors new metadata cannot fix
    aborted: tuple[tuple[int, int], ...] = ()  # read_committed: (first_offset, producer_id), sorted
    preferred_read_replica: int = -1  # KIP-392: the replica the leader sends this reader to, -1 for none


def fetch_raw(client: SyncKafkaClient, topic: str, partition: int, offset: int, bytes_max: int,
              isolation_level: int = 0, rack_id: str = "", replica: int | None = None) -> RawFetch:
    """Fetch `topic`-`partition` from `offset` (read_uncommitted, or read_committed with isolation_level 1:
    up to the last stable offset, with the aborted transactions of the range), routed to the leader, retried
    over leader changes. Raises NetworkError, the partition's error once FETCH_ATTEMPTS_MAX attempts fail.

    `rack_id` is the reader's rack (KIP-392, `kafka.client.rack`): a leader whose cluster has a replica selector
    may answer with no records and the replica to read from in `preferred_read_replica`. `replica` sends the
    fetch to that replica instead of the leader, once: whatever fails there (an error code, the connection)
    comes back in `error`, for the caller to go back to the leader."""
    for attempt in range(FETCH_ATTEMPTS_MAX):
        try:
            leader = client.leader_for(topic, partition)
            topic_id = client.topic_metadata(topic).topic_id
        except KafkaError as error:  # a partition this client's broker has not applied yet, or no leader yet
            if error.code not in LEADER_CHANGE_CODES:
                raise
            failure = error
        else:
            answer = _fetch_once(client, leader, topic_id, topic, partition, offset, bytes_max, isolation_level,
                                 rack_id, replica)
            if isinstance(answer, RawFetch):
                return answer
            failure = answer
        if attempt == FETCH_ATTEMPTS_MAX - 1:
            raise failure
        client.metadata([topic])  # refresh the leader before the next attempt
        time.sleep(RETRY_BACKOFF_SECONDS * (attempt + 1))
    raise AssertionError("unreachable: the last attempt returns or raises")


def _fetch_once(client: SyncKafkaClient, leader: PartitionMetadata, topic_id: uuid.UUID, topic: str, partition: int, offset: int,
                bytes_max: int, isolation_level: int, rack_id: str, replica: int | None) -> RawFetch | KafkaError:
    """One Fetch of `fetch_raw`: its result, or the leader-change error to retry after a metadata refresh."""
    request = fetch_request(topic, topic_id, partition, offset, bytes_max, FETCH_MAX_WAIT_MS, isolation_level, 1,
                            leader.leader_epoch, rack_id)
    context = f"fetch {topic}-{partition} at offset {offset}"
    if replica is not None:
        try:
            response = client.send(replica, ApiKey.FETCH, request, timeout_ms=FETCH_MAX_WAIT_MS)
        except KafkaError as error:  # the replica is gone or unreachable: back to the leader
            return RawFetch(b"", -1, -1, error)
    else:
        response = client.send(leader.leader, ApiKey.FETCH, request, timeout_ms=FETCH_MAX_WAIT_MS)
    code = response.error_code
    data = response.responses[0].partitions[0] if code == ErrorCode.NONE else None
    if data is not None:
        code = data.error_code
    if code == ErrorCode.NONE:
        aborted = tuple(sorted((a.first_offset, a.producer_id) for a in (data.aborted_transactions or ())))
        return RawFetch(bytes(data.records or b""), data.high_watermark, data.log_start_offset, None, aborted,
                        data.preferred_read_replica)  # -1 below Fetch v11, as the codec defaults it
    if replica is not None or code not in LEADER_CHANGE_CODES:
        return RawFetch(b"", -1, -1, error_from_code(code, context))
    return error_from_code(code, context)


def require_topics(client: SyncKafkaClient, topics: list[str], option: str) -> dict[str, list[int]]:
    """The partitions of `topics`; raises TopicAuthorizationFailedError naming `option` when the principal may not
    describe one, UnknownTopicOrPartitionError when one is missing."""
    cluster = client.metadata(topics)
    denied = sorted(name for name in topics if name in cluster.topics
                    and cluster.topics[name].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    if denied:
        raise error_from_code(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                              f"option '{option}': not authorized to describe topic(s) {denied}")
    found = _partitions_of(cluster)
    missing = sorted(set(topics) - set(found))
    if missing:
        raise UnknownTopicOrPartitionError(f"option '{option}': unknown topic(s) {missing} on the cluster")
    return found
