"""`KafkaClient`: Flotilla's trio Kafka client (metadata cache, leader routing, retries, typed calls).

Theory of operation: `async with KafkaClient(...) as client` opens a nursery that holds one reader task per
broker connection; leaving the block closes every connection. The client keeps a metadata cache (brokers,
controller id, and per topic its partitions, leaders and leader epochs), filled by Metadata requests and
refreshed when it is older than `metadata_max_age_ms` or marked stale. Partition calls (produce, fetch,
list_offsets, delete_records) go to the partition leader; topic admin calls go to the controller that
Metadata names (any broker forwards in KRaft); `send()` reaches any broker for anything else.

Retries: a call that fails with NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE,
FENCED/UNKNOWN_LEADER_EPOCH, NOT_CONTROLLER or a connection error marks the metadata stale and is tried again
after an exponential backoff (`retry_backoff_ms` doubling to `retry_backoff_max_ms`, with jitter), at most
`retries_max` times; then the typed error is raised. The default budget (about 18 s of backoff) outlasts a
leader failover after the broker session timeout (9 s). Until the client has reached the cluster once, a
cluster that accepts no connection is given only `first_contact_retries_max` retries, so a wrong address or a
stopped cluster is reported quickly. Produce also retries NOT_ENOUGH_REPLICAS and lost connections: without
idempotence (no producer id yet) that is Kafka's at-least-once producer, so a batch whose acknowledgement
was lost may be appended twice.

Errors are `partitions.errors` KafkaError subclasses, made from wire codes in `net.client.errors`;
`NoBrokersAvailableError` means no broker (known or bootstrap) accepted a connection.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TypeVar

import trio

from net.client import results
from net.client.errors import ConnectError, NetworkError, NoBrokersAvailableError, error_from_code, raise_for_code
from net.client.read_replica import ReadReplicas
from net.client.results import (
    AlterConfigOp,
    BrokerMetadata,
    ClusterDescription,
    ClusterMetadata,
    ConfigEntry,
    ConfigResourceType,
    ConfigSource,
    FetchResult,
    IsolationLevel,
    NewTopic,
    OffsetAndTimestamp,
    PartitionMetadata,
    TopicMetadata,
)
from net.client.security import ClientSecurity
from net.client.transport import BrokerConnection
from net.protocol import messages
from net.protocol.codec import ApiKey
from net.protocol.schema import Message
from partitions.compression import codec_from_id
from partitions.errors import (
    BrokerNotAvailableError,
    ErrorCode,
    KafkaError,
    LeaderNotAvailableError,
    UnknownTopicOrPartitionError,
)
from partitions.murmur2 import default_partition
from partitions.records import Record, build_batch, decode_batches, parse_control_record

T = TypeVar("T")

REQUEST_TIMEOUT_MS_DEFAULT = 30_000
CONNECT_TIMEOUT_MS_DEFAULT = 10_000
METADATA_MAX_AGE_MS_DEFAULT = 300_000
RETRIES_MAX_DEFAULT = 20
RETRY_BACKOFF_MS_DEFAULT = 100
RETRY_BACKOFF_MS_MAX_DEFAULT = 1_000
METADATA_FRESH_SECONDS = 0.1  # a partition missing from a cache older than this is asked for again
INFLIGHT_REQUESTS_MAX_DEFAULT = 32
PRODUCE_TIMEOUT_MS_DEFAULT = 30_000
FETCH_MAX_BYTES_DEFAULT = 1024 * 1024
FETCH_MAX_WAIT_MS_DEFAULT = 500
# Estimated bytes of one record's framing, for splitting produce_records into batches under batch_bytes_max.
RECORD_OVERHEAD_BYTES_ESTIMATE = 24
BATCH_BYTES_MAX_DEFAULT = 1024 * 1024 - 64 * 1024  # under the broker's message.max.bytes default (1 MiB + 12)
ADMIN_TIMEOUT_MS_DEFAULT = 30_000

# Errors after which fresh metadata may route the request elsewhere.
METADATA_REFRESH_CODES = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.BROKER_NOT_AVAILABLE,
    ErrorCode.NOT_CONTROLLER,
    ErrorCode.UNKNOWN_TOPIC_ID,  # KIP-516: a Fetch v13+ by an id the broker does not know (yet), or no longer
    ErrorCode.INCONSISTENT_TOPIC_ID,
})
# Produce: codes with which the broker certainly did not append the batch.
PRODUCE_RETRY_CODES = METADATA_REFRESH_CODES | {ErrorCode.NOT_ENOUGH_REPLICAS}
ADMIN_RETRY_CODES = frozenset({ErrorCode.NOT_CONTROLLER, ErrorCode.BROKER_NOT_AVAILABLE})


class KafkaClient:
    """A trio Kafka client. Use as `async with KafkaClient("127.0.0.1:9092") as client: ...`."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        client_id: str = "flotilla-client",
        request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT,
        *,
        connect_timeout_ms: int = CONNECT_TIMEOUT_MS_DEFAULT,
        metadata_max_age_ms: int = METADATA_MAX_AGE_MS_DEFAULT,
        retries_max: int = RETRIES_MAX_DEFAULT,
        first_contact_retries_max: int | None = None,
        retry_backoff_ms: int = RETRY_BACKOFF_MS_DEFAULT,
        retry_backoff_ms_max: int = RETRY_BACKOFF_MS_MAX_DEFAULT,
        inflight_requests_max: int = INFLIGHT_REQUESTS_MAX_DEFAULT,
        rng: random.Random | None = None,
        security: ClientSecurity | None = None,
        client_rack: str = "",
    ) -> None:
        assert request_timeout_ms > 0 and connect_timeout_ms > 0, (request_timeout_ms, connect_timeout_ms)
        assert retries_max >= 0 and 0 < retry_backoff_ms <= retry_backoff_ms_max, (retries_max, retry_backoff_ms)
        self.bootstrap = parse_bootstrap_servers(bootstrap_servers)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.retries_max = retries_max
        self.first_contact_retries_max = retries_max if first_contact_retries_max is None else first_contact_retries_max
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_ms_max = retry_backoff_ms_max
        self.inflight_requests_max = inflight_requests_max
        self.security = security  # TLS and SASL (net/client/security.py); None: plaintext
        # client.rack (KIP-392): fetches go to the replica a leader names in this rack (net/client/read_replica.py)
        self.read_replicas = ReadReplicas(client_rack)
        self._rng = rng or random.Random()
        self._nursery: trio.Nursery | None = None
        self._nursery_manager = None
        self._connections: dict[object, BrokerConnection] = {}
        self._connect_locks: dict[object, trio.Lock] = {}
        self._cluster = ClusterMetadata(None, -1, {}, {})
        self._metadata_at = -float("inf")
        self._metadata_stale = True
        self._sticky_partition: dict[str, int] = {}

    # Lifecycle.

    async def __aenter__(self) -> "KafkaClient":
        self._nursery_manager = trio.open_nursery()
        self._nursery = await self._nursery_manager.__aenter__()
        return self

    async def __aexit__(self, *exc_info) -> bool:
        await self.aclose()
        self._nursery.cancel_scope.cancel()
        manager, self._nursery_manager, self._nursery = self._nursery_manager, None, None
        # The body's exception is not handed to the nursery, so callers see it as itself, not wrapped in an
        # exception group; the nursery only holds reader tasks, which end quietly once cancelled.
        await manager.__aexit__(None, None, None)
        return False

    async def aclose(self) -> None:
        """Close every connection (their reader tasks end); waiting callers get NetworkError."""
        connections, self._connections = self._connections, {}
        for connection in connections.values():
            await connection.aclose()

    # Connections.

    async def _connection(self, key: object, host: str, port: int) -> BrokerConnection:
        """The open connection for `key`, opened on first use. Raises ConnectError, UnsupportedVersionError."""
        assert self._nursery is not None, "use KafkaClient inside `async with`"
        connection = self._connections.get(key)
        if connection is not None and connection.alive:
            return connection
        lock = self._connect_locks.setdefault(key, trio.Lock())
        async with lock:
            connection = self._connections.get(key)
            if connection is not None and connection.alive:
                return connection
            connection = BrokerConnection(host, port, self.client_id, self.inflight_requests_max, self.security)
            await connection.open(self._nursery, self.connect_timeout_ms / 1000)
            self._connections[key] = connection
            return connection

    async def _broker_connection(self, node_id: int) -> BrokerConnection:
        broker = self._cluster.brokers.get(node_id)
        if broker is None:
            await self._refresh_metadata()
            broker = self._cluster.brokers.get(node_id)
        if broker is None:
            raise NetworkError(f"broker {node_id} is not in the cluster metadata "
                               f"(brokers: {sorted(self._cluster.brokers)})")
        return await self._connection(node_id, broker.host, broker.port)

    async def _request(self, node_id: int, api_key: int, request: Message, timeout_ms: int = 0,
                       api_version: int | None = None) -> Message | None:
        connection = await self._broker_connection(node_id)
        timeout_s = (self.request_timeout_ms + timeout_ms) / 1000
        try:
            return await connection.request(api_key, request, timeout_s, api_version)
        except NetworkError:
            self._metadata_stale = True
            raise

    async def _request_any(self, api_key: int, request: Message, api_version: int | None = None,
                           extra_timeout_ms: int = 0) -> Message:
        """Send to any reachable broker: an open connection first, then known brokers, then bootstrap servers
        (`extra_timeout_ms`: the request's own timeout, added to the client's). Raises NoBrokersAvailableError
        when none accepts a connection."""
        failures = []
        for key, host, port in self._candidates():
            try:
                connection = await self._connection(key, host, port)
            except ConnectError as error:
                failures.append(str(error))
                continue
            timeout_s = (self.request_timeout_ms + extra_timeout_ms) / 1000
            return await connection.request(api_key, request, timeout_s, api_version)
        servers = ",".join(f"{host}:{port}" for host, port in self.bootstrap)
        raise NoBrokersAvailableError(f"no broker reachable (bootstrap {servers}): " + "; ".join(failures[-3:]))

    def _candidates(self) -> list[tuple[object, str, int]]:
        known = [(node_id, b.host, b.port) for node_id, b in self._cluster.brokers.items()]
        self._rng.shuffle(known)
        known.sort(key=lambda candidate: not self._is_open(candidate[0]))  # stable: open ones first
        bootstrap = [(("bootstrap", host, port), host, port) for host, port in self.bootstrap]
        return known + bootstrap

    def _is_open(self, key: object) -> bool:
        connection = self._connections.get(key)
        return connection is not None and connection.alive

    # Retries.

    async def _retrying(self, attempt: Callable[[], Awaitable[T]], retry_codes: frozenset) -> T:
        backoff_ms = self.retry_backoff_ms
        for attempt_number in range(self.retries_max + 1):
            try:
                return await attempt()
            except KafkaError as error:
                if attempt_number == self.retries_max or not self._retriable(error, retry_codes, attempt_number):
                    raise
                self._metadata_stale = True
                await trio.sleep(backoff_ms * (0.8 + 0.4 * self._rng.random()) / 1000)
                backoff_ms = min(2 * backoff_ms, self.retry_backoff_ms_max)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _retriable(self, error: KafkaError, retry_codes: frozenset, attempt_number: int) -> bool:
        never_reached = self._metadata_at == -float("inf")
        if isinstance(error, NoBrokersAvailableError) and never_reached:
            return attempt_number < self.first_contact_retries_max
        return isinstance(error, NetworkError) or error.code in retry_codes

    # Metadata.

    async def metadata(self, topics: Iterable[str] | None = None,
                       allow_auto_topic_creation: bool = False) -> ClusterMetadata:
        """Cluster metadata for `topics` (None: every topic); refreshes the cache. Raises
        NoBrokersAvailableError, NetworkError."""
        names = None if topics is None else list(topics)
        return await self._retrying(lambda: self._metadata_once(names, allow_auto_topic_creation), frozenset())

    async def _metadata_once(self, names: list[str] | None, allow_auto_topic_creation: bool) -> ClusterMetadata:
        request_class = messages.MetadataRequest
        request = request_class(
            topics=None if names is None else [request_class.MetadataRequestTopic(name=n) for n in names],
            allow_auto_topic_creation=allow_auto_topic_creation,
        )
        cluster = _parse_metadata(await self._request_any(ApiKey.METADATA, request))
        self._merge_metadata(cluster, replace_topics=names is None)
        return cluster

    def _merge_metadata(self, cluster: ClusterMetadata, replace_topics: bool) -> None:
        topics = {} if replace_topics else dict(self._cluster.topics)
        for name, topic in cluster.topics.items():
            if topic.error_code == ErrorCode.NONE:
                topics[name] = topic
            else:
                topics.pop(name, None)
        self._cluster = ClusterMetadata(cluster.cluster_id, cluster.controller_id, cluster.brokers, topics)
        self._metadata_at = time.monotonic()
        self._metadata_stale = False

    async def _refresh_metadata(self, topic: str | None = None, auto_create: bool = False) -> ClusterMetadata:
        """One Metadata round trip for the cached topics (and `topic`); the callers' retry loops retry it."""
        wanted = set(self._cluster.topics) | ({topic} if topic else set())
        return await self._metadata_once(sorted(wanted), auto_create)

    def _metadata_expired(self) -> bool:
        age_ms = (time.monotonic() - self._metadata_at) * 1000
        return self._metadata_stale or age_ms > self.metadata_max_age_ms

    def _metadata_fresh(self) -> bool:
        """Whether the cache was filled within the last METADATA_FRESH_SECONDS (not worth asking again)."""
        return not self._metadata_stale and time.monotonic() - self._metadata_at < METADATA_FRESH_SECONDS

    async def topic_metadata(self, topic: str, auto_create: bool = False) -> TopicMetadata:
        """The cached metadata of `topic`, refreshed when missing or stale. Raises
        UnknownTopicOrPartitionError (or the topic's error) when the cluster does not have it."""
        cached = self._cluster.topics.get(topic)
        if cached is None or self._metadata_expired():
            answer = (await self._refresh_metadata(topic, auto_create)).topics.get(topic)
            if answer is not None and answer.error_code != ErrorCode.NONE:
                raise error_from_code(answer.error_code, f"metadata of topic {topic!r}")
            cached = self._cluster.topics.get(topic)
        if cached is None:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} is not in the cluster metadata")
        return cached

    async def partitions_for(self, topic: str) -> list[int]:
        """The partition ids of `topic`, sorted. Raises UnknownTopicOrPartitionError."""
        return sorted((await self.topic_metadata(topic)).partitions)

    async def leader_for(self, topic: str, partition: int, auto_create: bool = False) -> PartitionMetadata:
        """The partition's metadata, with a live leader (`auto_create`: let the broker create the topic, as a
        producer's metadata request does). Raises UnknownTopicOrPartitionError, LeaderNotAvailableError (both
        retriable)."""
        partition_metadata = (await self.topic_metadata(topic, auto_create)).partitions.get(partition)
        if partition_metadata is None and not self._metadata_fresh():
            # A partition added since the cache was filled (CreatePartitions): ask once before calling it unknown.
            self._metadata_stale = True
            partition_metadata = (await self.topic_metadata(topic, auto_create)).partitions.get(partition)
        if partition_metadata is None:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist")
        if partition_metadata.leader < 0 or partition_metadata.leader not in self._cluster.brokers:
            raise LeaderNotAvailableError(f"{topic}-{partition} has no live leader ({partition_metadata.leader})")
        return partition_metadata

    async def _controller_id(self) -> int:
        if self._metadata_expired() or self._cluster.controller_id not in self._cluster.brokers:
            await self._refresh_metadata()
        if self._cluster.controller_id in self._cluster.brokers:
            return self._cluster.controller_id
        if not self._cluster.brokers:
            raise BrokerNotAvailableError("the cluster metadata lists no brokers (none registered yet?)")
        return min(self._cluster.brokers)

    # Produce.

    async def produce(self, topic: str, partition: int, batch_bytes: bytes, acks: int = -1,
                      timeout_ms: int = PRODUCE_TIMEOUT_MS_DEFAULT) -> int:
        """Append one record batch to `topic`-`partition`; the base offset assigned (-1 with acks=0).
        Raises the partition's typed error (e.g. NotEnoughReplicasError, RecordTooLargeError,
        CorruptRecordError), NetworkError, RequestTimedOutError."""
        assert acks in (-1, 0, 1), f"acks={acks}"
        produce_data = messages.ProduceRequest.PartitionProduceData(index=partition, records=batch_bytes)
        request = messages.ProduceRequest(acks=acks, timeout_ms=timeout_ms, topic_data=[
            messages.ProduceRequest.TopicProduceData(name=topic, partition_data=[produce_data])])

        async def attempt() -> int:
            leader = (await self.leader_for(topic, partition, auto_create=True)).leader
            response = await self._request(leader, ApiKey.PRODUCE, request, timeout_ms)
            if response is None:
                return -1
            answer = response.responses[0].partition_responses[0]
            raise_for_code(answer.error_code, answer.error_message, f"produce to {topic}-{partition}")
            return answer.base_offset

        return await self._retrying(attempt, PRODUCE_RETRY_CODES)

    async def produce_records(
        self,
        topic: str,
        records: Iterable[Record | tuple],
        acks: int = -1,
        compression: int = 0,
        partition: int | None = None,
        timeout_ms: int = PRODUCE_TIMEOUT_MS_DEFAULT,
        batch_bytes_max: int = BATCH_BYTES_MAX_DEFAULT,
        on_batch: Callable[[int, int, int], None] | None = None,
    ) -> dict[int, list[int]]:
        """Produce (key, value[, headers[, timestamp]]) tuples or Records, partitioned as Java's default
        partitioner does: `partition` if given, else murmur2(key) for keyed records, else one partition for
        all unkeyed records of this call (sticky, moving on with each call). Records of one partition keep
        their order. Returns partition -> base offsets of the batches sent; `on_batch(partition, base offset,
        record count)` hears of each acknowledged batch (base offset -1 with acks=0). Raises what produce raises,
        UnsupportedCompressionTypeError for an unknown codec id."""
        codec_from_id(compression)
        by_partition = await self._partition_records(topic, records, partition)
        now_ms = int(time.time() * 1000)
        base_offsets: dict[int, list[int]] = {}

        async def send_partition(partition_id: int, items: list) -> None:
            for chunk in _chunks_by_size(items, batch_bytes_max):
                batch = build_batch(chunk, base_timestamp=now_ms, compression=compression)
                base_offset = await self.produce(topic, partition_id, batch, acks, timeout_ms)
                base_offsets.setdefault(partition_id, []).append(base_offset)
                if on_batch is not None:
                    on_batch(partition_id, base_offset, len(chunk))

        await gather([lambda p=p, items=items: send_partition(p, items) for p, items in by_partition.items()])
        return base_offsets

    async def _partition_records(self, topic: str, records: Iterable, partition: int | None) -> dict[int, list]:
        items = [_as_tuple(record) for record in records]
        if partition is not None:
            return {partition: items} if items else {}
        topic_metadata = await self._retrying(
            lambda: self.topic_metadata(topic, auto_create=True), METADATA_REFRESH_CODES)
        count = len(topic_metadata.partitions)
        sticky = self._sticky_partition.get(topic, self._rng.randrange(count)) % count
        self._sticky_partition[topic] = sticky + 1
        by_partition: dict[int, list] = {}
        for item in items:
            key = item[0]
            target = sticky if key is None else default_partition(key, count)
            by_partition.setdefault(target, []).append(item)
        return by_partition

    # Fetch.

    async def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int = FETCH_MAX_BYTES_DEFAULT,
        max_wait_ms: int = FETCH_MAX_WAIT_MS_DEFAULT,
        isolation_level: int = IsolationLevel.READ_UNCOMMITTED,
        min_bytes: int = 1,
    ) -> FetchResult:
        """Records of `topic`-`partition` from `offset`, waiting up to max_wait_ms for min_bytes. A partition
        error that new metadata cannot fix (e.g. OFFSET_OUT_OF_RANGE) comes back in `FetchResult.error`;
        leader changes are retried. Raises NetworkError, RequestTimedOutError, CorruptRecordError for a
        batch that fails its CRC, and the partition's error once retries run out."""

        key = (topic, partition)
        routes = self.read_replicas
        context = f"fetch {topic}-{partition}"

        async def attempt() -> FetchResult:
            leader = await self.leader_for(topic, partition)
            topic_id = (await self.topic_metadata(topic)).topic_id
            replica = routes.replica(key)
            if replica is not None:  # KIP-392: the replica the leader named; any failure there: back to the leader
                request = fetch_request(topic, topic_id, partition, offset, max_bytes, max_wait_ms, isolation_level,
                                         min_bytes, leader.leader_epoch, routes.rack)
                try:
                    response = await self._request(replica, ApiKey.FETCH, request, max_wait_ms)
                except KafkaError:
                    response = None
                data = response.responses[0].partitions[0] if response is not None and \
                    response.error_code == ErrorCode.NONE else None
                if data is not None and data.error_code == ErrorCode.NONE:
                    return _fetch_result(data, offset, isolation_level, f"{context} at {offset}")
                routes.failed(key)
            request = fetch_request(topic, topic_id, partition, offset, max_bytes, max_wait_ms, isolation_level,
                                     min_bytes, leader.leader_epoch, routes.rack_for_leader(key))
            response = await self._request(leader.leader, ApiKey.FETCH, request, max_wait_ms)
            raise_for_code(response.error_code, None, context)
            data = response.responses[0].partitions[0]
            if data.error_code in METADATA_REFRESH_CODES:
                raise error_from_code(data.error_code, context)
            if data.error_code == ErrorCode.NONE and routes.named(key, data.preferred_read_replica, leader.leader) \
                    and not data.records:
                return await attempt()  # named instead of answered: ask the replica now (once: if it fails, the
            return _fetch_result(data, offset, isolation_level, f"{context} at {offset}")  # leader, rackless)

        return await self._retrying(attempt, METADATA_REFRESH_CODES)

    # Offsets.

    async def list_offsets(
        self,
        topic: str,
        partitions: Iterable[int] | None = None,
        timestamp: int = results.LATEST_TIMESTAMP,
        isolation_level: int = IsolationLevel.READ_UNCOMMITTED,
    ) -> dict[int, OffsetAndTimestamp]:
        """partition -> offset for `timestamp`: -2 the log start offset, -1 the high watermark (the last stable
        offset under read_committed), else the first offset with a timestamp >= it (-1 when none).
        `partitions` None means all. Raises the partitions' typed errors, NetworkError."""

        async def attempt() -> dict[int, OffsetAndTimestamp]:
            wanted = await self.partitions_for(topic) if partitions is None else list(partitions)
            by_leader: dict[int, list[int]] = {}
            for partition in wanted:
                by_leader.setdefault((await self.leader_for(topic, partition)).leader, []).append(partition)
            found: dict[int, OffsetAndTimestamp] = {}
            await gather([lambda leader=leader, ps=ps: self._list_offsets_of(leader, topic, ps, timestamp,
                                                                             isolation_level, found)
                          for leader, ps in by_leader.items()])
            return dict(sorted(found.items()))

        return await self._retrying(attempt, METADATA_REFRESH_CODES)

    async def _list_offsets_of(self, leader: int, topic: str, partitions: list[int], timestamp: int,
                               isolation_level: int, found: dict) -> None:
        request_class = messages.ListOffsetsRequest
        request = request_class(replica_id=-1, isolation_level=isolation_level, topics=[request_class.ListOffsetsTopic(
            name=topic, partitions=[request_class.ListOffsetsPartition(partition_index=p, timestamp=timestamp)
                                    for p in partitions])], timeout_ms=self.request_timeout_ms)  # v10: for tiered lookups
        response = await self._request(leader, ApiKey.LIST_OFFSETS, request)
        for topic_response in response.topics:
            for answer in topic_response.partitions:
                raise_for_code(answer.error_code, None, f"list_offsets {topic}-{answer.partition_index}")
                found[answer.partition_index] = OffsetAndTimestamp(answer.offset, answer.timestamp,
                                                                   answer.leader_epoch)

    async def delete_records(self, topic: str, offsets: dict[int, int],
                             timeout_ms: int = ADMIN_TIMEOUT_MS_DEFAULT) -> dict[int, int]:
        """Advance the log start offset of each partition to `offsets[partition]` (-1: the high watermark);
        partition -> new low watermark. Raises OffsetOutOfRangeError and the partitions' typed errors."""

        async def attempt() -> dict[int, int]:
            by_leader: dict[int, dict[int, int]] = {}
            for partition, offset in offsets.items():
                by_leader.setdefault((await self.leader_for(topic, partition)).leader, {})[partition] = offset
            low_watermarks: dict[int, int] = {}
            await gather([lambda leader=leader, part=part: self._delete_records_of(leader, topic, part, timeout_ms,
                                                                                   low_watermarks)
                          for leader, part in by_leader.items()])
            return dict(sorted(low_watermarks.items()))

        return await self._retrying(attempt, METADATA_REFRESH_CODES)

    async def _delete_records_of(self, leader: int, topic: str, offsets: dict[int, int], timeout_ms: int,
                                 low_watermarks: dict) -> None:
        request_class = messages.DeleteRecordsRequest
        request = request_class(timeout_ms=timeout_ms, topics=[request_class.DeleteRecordsTopic(
            name=topic, partitions=[request_class.DeleteRecordsPartition(partition_index=p, offset=o)
                                    for p, o in offsets.items()])])
        response = await self._request(leader, ApiKey.DELETE_RECORDS, request, timeout_ms)
        for topic_result in response.topics:
            for answer in topic_result.partitions:
                raise_for_code(answer.error_code, None, f"delete_records {topic}-{answer.partition_index}")
                low_watermarks[answer.partition_index] = answer.low_watermark

    # Topic administration.

    async def _admin(self, api_key: int, request: Message, timeout_ms: int = 0) -> Message:
        """Send an admin request to the controller, or, when the metadata's controller cannot be reached (it is
        down and the metadata not yet told, or the client cannot reach it), to any reachable broker: brokers
        forward admin requests to the controller, as Kafka's do, and answer the cluster's state."""
        async def attempt() -> Message:
            try:
                return await self._request(await self._controller_id(), api_key, request, timeout_ms)
            except ConnectError:
                self._metadata_stale = True
                return await self._request_any(api_key, request, extra_timeout_ms=timeout_ms)

        return await self._retrying(attempt, ADMIN_RETRY_CODES)

    async def create_topics(self, topics: Iterable[NewTopic | str], timeout_ms: int = ADMIN_TIMEOUT_MS_DEFAULT,
                            validate_only: bool = False) -> None:
        """Create topics (a name alone takes the broker's default partitions and replication factor). Raises
        the first topic's typed error: TopicAlreadyExistsError, InvalidConfigError, InvalidPartitionsError,
        InvalidReplicationFactorError, PolicyViolationError, InvalidTopicError..."""
        new_topics = [NewTopic(topic) if isinstance(topic, str) else topic for topic in topics]
        request = messages.CreateTopicsRequest(
            topics=[_creatable_topic(topic) for topic in new_topics], timeout_ms=timeout_ms,
            validate_only=validate_only)
        response = await self._admin(ApiKey.CREATE_TOPICS, request, timeout_ms)
        for result in response.topics:
            raise_for_code(result.error_code, result.error_message, f"create topic {result.name!r}")
        self._metadata_stale = True

    async def delete_topics(self, names: Iterable[str], timeout_ms: int = ADMIN_TIMEOUT_MS_DEFAULT) -> None:
        """Delete topics. Raises the first topic's typed error (UnknownTopicOrPartitionError...)."""
        names = list(names)
        request_class = messages.DeleteTopicsRequest
        # the names in both fields: TopicNames is v0-5's, Topics v6's; the negotiated version sends its own
        request = request_class(topic_names=names, topics=[request_class.DeleteTopicState(name=name) for name in names],
                                timeout_ms=timeout_ms)
        response = await self._admin(ApiKey.DELETE_TOPICS, request, timeout_ms)
        for result in response.responses:
            raise_for_code(result.error_code, result.error_message, f"delete topic {result.name!r}")
        self._metadata_stale = True

    async def create_partitions(self, counts: dict[str, int], timeout_ms: int = ADMIN_TIMEOUT_MS_DEFAULT,
                                validate_only: bool = False) -> None:
        """Grow each topic to `counts[topic]` partitions. Raises InvalidPartitionsError and other typed errors."""
        request_class = messages.CreatePartitionsRequest
        request = request_class(timeout_ms=timeout_ms, validate_only=validate_only, topics=[
            request_class.CreatePartitionsTopic(name=name, count=count, assignments=None)
            for name, count in counts.items()])
        response = await self._admin(ApiKey.CREATE_PARTITIONS, request, timeout_ms)
        for result in response.results:
            raise_for_code(result.error_code, result.error_message, f"create partitions of {result.name!r}")
        self._metadata_stale = True

    async def describe_configs(self, name: str, resource_type: int = ConfigResourceType.TOPIC,
                               keys: Iterable[str] | None = None) -> dict[str, ConfigEntry]:
        """The configs of a topic (or of broker `name`), by config name. Raises UnknownTopicOrPartitionError,
        the resource's other typed errors, NetworkError."""
        request_class = messages.DescribeConfigsRequest
        request = request_class(resources=[request_class.DescribeConfigsResource(
            resource_type=resource_type, resource_name=name,
            configuration_keys=None if keys is None else list(keys))])
        response = await self._resource_request(ApiKey.DESCRIBE_CONFIGS, request, name, resource_type)
        entries: dict[str, ConfigEntry] = {}
        for result in response.results:
            raise_for_code(result.error_code, result.error_message, f"describe configs of {_resource(result)}")
            for config in result.configs:
                entries[config.name] = _config_entry(config)
        return entries

    async def alter_configs(self, name: str, set: dict[str, str] | None = None,  # noqa: A002 - Kafka's verb
                            delete: Iterable[str] = (), resource_type: int = ConfigResourceType.TOPIC,
                            validate_only: bool = False) -> None:
        """IncrementalAlterConfigs: set `set`'s keys and reset `delete`'s to their defaults. Raises
        InvalidConfigError, UnknownTopicOrPartitionError, other typed errors."""
        request_class = messages.IncrementalAlterConfigsRequest
        alterations = [request_class.AlterableConfig(name=key, config_operation=AlterConfigOp.SET, value=value)
                       for key, value in (set or {}).items()]
        alterations += [request_class.AlterableConfig(name=key, config_operation=AlterConfigOp.DELETE, value=None)
                        for key in delete]
        request = request_class(validate_only=validate_only, resources=[request_class.AlterConfigsResource(
            resource_type=resource_type, resource_name=name, configs=alterations)])
        response = await self._resource_request(ApiKey.INCREMENTAL_ALTER_CONFIGS, request, name, resource_type)
        for result in response.responses:
            raise_for_code(result.error_code, result.error_message, f"alter configs of {_resource(result)}")

    async def _resource_request(self, api_key: int, request: Message, name: str, resource_type: int) -> Message:
        if resource_type == ConfigResourceType.BROKER and name.isdigit():
            return await self._retrying(lambda: self._request(int(name), api_key, request), ADMIN_RETRY_CODES)
        return await self._admin(api_key, request)

    async def describe_cluster(self) -> ClusterDescription:
        """Cluster id, controller id and live brokers (DescribeCluster). Raises NoBrokersAvailableError."""
        request = messages.DescribeClusterRequest(include_cluster_authorized_operations=False)
        response = await self._retrying(lambda: self._request_any(ApiKey.DESCRIBE_CLUSTER, request), frozenset())
        raise_for_code(response.error_code, response.error_message, "describe cluster")
        brokers = {b.broker_id: BrokerMetadata(b.broker_id, b.host, b.port, b.rack) for b in response.brokers}
        return ClusterDescription(response.cluster_id, response.controller_id, brokers)

    async def send(self, broker_id: int | None, api_key: int, request: Message,
                   api_version: int | None = None, timeout_ms: int = 0) -> Message | None:
        """Send any request to broker `broker_id` (None: any broker) at the negotiated (or given) version and
        return the raw response; error codes inside it are the caller's to read. Raises NetworkError,
        RequestTimedOutError, UnsupportedVersionError."""
        if broker_id is None:
            return await self._request_any(api_key, request, api_version)
        return await self._request(broker_id, api_key, request, timeout_ms, api_version)


# Helpers (module level: pure functions of their arguments).


def parse_bootstrap_servers(servers: str | Sequence[str]) -> list[tuple[str, int]]:
    """"h1:p1,h2:p2" (or a list of "host:port") -> [(host, port)]. Raises ValueError naming the bad entry."""
    entries = servers.split(",") if isinstance(servers, str) else list(servers)
    parsed = []
    for entry in (e.strip() for e in entries):
        if not entry:
            continue
        host, separator, port = entry.rpartition(":")
        if not separator or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bad bootstrap server {entry!r}: expected HOST:PORT")
        parsed.append((host.strip("[]"), int(port)))
    if not parsed:
        raise ValueError(f"no bootstrap servers in {servers!r}")
    return parsed


async def gather(calls: Sequence[Callable[[], Awaitable[object]]]) -> list:
    """Run `calls` concurrently; their results in order. If any fails, the others still finish and the first
    failure (in call order) is raised as itself, not wrapped in an exception group."""
    outcomes: list = [None] * len(calls)
    failures: list[BaseException | None] = [None] * len(calls)

    async def run(index: int) -> None:
        try:
            outcomes[index] = await calls[index]()
        except Exception as error:  # re-raised below, unwrapped
            failures[index] = error

    if len(calls) == 1:
        await run(0)
    else:
        async with trio.open_nursery() as nursery:
            for index in range(len(calls)):
                nursery.start_soon(run, index)
    for failure in failures:
        if failure is not None:
            raise failure
    return outcomes


def _parse_metadata(response: Message) -> ClusterMetadata:
    brokers = {b.node_id: BrokerMetadata(b.node_id, b.host, b.port, b.rack) for b in response.brokers}
    topics = {}
    for topic in response.topics:
        partitions = {
            p.partition_index: PartitionMetadata(
                p.partition_index, p.leader_id, p.leader_epoch, tuple(p.replica_nodes), tuple(p.isr_nodes),
                tuple(p.offline_replicas), p.error_code)
            for p in topic.partitions
        }
        topics[topic.name] = TopicMetadata(topic.name, topic.error_code, topic.is_internal, partitions, topic.topic_id)
    return ClusterMetadata(response.cluster_id, response.controller_id, brokers, topics)


def _as_tuple(record: Record | tuple) -> tuple:
    if isinstance(record, Record):
        return (record.key, record.value, record.headers, record.timestamp)
    assert 2 <= len(record) <= 4, f"a record is (key, value[, headers[, timestamp]]), not {len(record)} items"
    return tuple(record)


def _chunks_by_size(items: list[tuple], bytes_max: int) -> Iterable[list[tuple]]:
    chunk: list[tuple] = []
    chunk_bytes = 0
    for item in items:
        size = RECORD_OVERHEAD_BYTES_ESTIMATE + len(item[0] or b"") + len(item[1] or b"")
        if len(item) > 2 and item[2]:
            size += sum(len(k) + len(v or b"") + 4 for k, v in item[2])
        if chunk and chunk_bytes + size > bytes_max:
            yield chunk
            chunk, chunk_bytes = [], 0
        chunk.append(item)
        chunk_bytes += size
    if chunk:
        yield chunk


def fetch_request(topic: str, topic_id: uuid.UUID, partition: int, offset: int, max_bytes: int, max_wait_ms: int,
                   isolation_level: int, min_bytes: int, leader_epoch: int, rack_id: str = "") -> Message:
    """A sessionless consumer Fetch of one partition. The topic goes by name and by id: the negotiated version
    sends its own (the name below v13, the id from v13, KIP-516)."""
    request_class = messages.FetchRequest
    fetch_partition = request_class.FetchPartition(
        partition=partition, current_leader_epoch=leader_epoch, fetch_offset=offset, log_start_offset=-1,
        partition_max_bytes=max_bytes)
    return request_class(
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
        isolation_level=isolation_level, session_id=0, session_epoch=-1,  # sessionless fetch (KIP-227)
        topics=[request_class.FetchTopic(topic=topic, topic_id=topic_id, partitions=[fetch_partition])],
        rack_id=rack_id)


def _fetch_result(data: Message, offset: int, isolation_level: int, context: str) -> FetchResult:
    if data.error_code != ErrorCode.NONE:
        return FetchResult([], data.high_watermark, data.log_start_offset, data.last_stable_offset,
                           error_from_code(data.error_code, context), offset)
    aborted = None
    if isolation_level == IsolationLevel.READ_COMMITTED and data.aborted_transactions:
        aborted = sorted((a.first_offset, a.producer_id) for a in data.aborted_transactions)
    records, next_offset = decode_fetched(data.records, offset, aborted)
    return FetchResult(records, data.high_watermark, data.log_start_offset, data.last_stable_offset, None,
                       next_offset)


def decode_fetched(buffer, offset: int, aborted: list[tuple[int, int]] | None = None) -> tuple[list[Record], int]:
    """The data records at or after `offset` in a fetched records field, and the offset after the last whole
    batch. Control batches are skipped; with `aborted` ((first_offset, producer_id) sorted, from a
    read_committed fetch) the batches of aborted transactions are skipped too, as Kafka's consumer does.
    Raises CorruptRecordError and the other errors of decode_batch."""
    records: list[Record] = []
    next_offset = offset
    if not buffer:
        return records, next_offset
    aborting: set[int] = set()
    position = 0
    for decoded in decode_batches(buffer):
        header = decoded.header
        next_offset = max(next_offset, header.next_offset)
        if aborted is not None:
            while position < len(aborted) and aborted[position][0] <= header.last_offset:
                aborting.add(aborted[position][1])
                position += 1
            if _skip_for_abort(header, decoded.records, aborting):
                continue
        if header.is_control or header.last_offset < offset:
            continue
        batch_records = decoded.records
        if batch_records and batch_records[0].offset < offset:
            batch_records = [record for record in batch_records if record.offset >= offset]
        records.extend(batch_records)
    return records, next_offset


def _skip_for_abort(header, batch_records: list[Record], aborting: set[int]) -> bool:
    if header.is_control:
        if batch_records and header.producer_id in aborting:
            kind, _ = parse_control_record(batch_records[0])
            if kind == 0:  # ABORT marker: the transaction ends here
                aborting.discard(header.producer_id)
        return True
    return header.is_transactional and header.producer_id in aborting


def _creatable_topic(topic: NewTopic) -> Message:
    request_class = messages.CreateTopicsRequest
    assignments = [request_class.CreatableReplicaAssignment(partition_index=p, broker_ids=list(ids))
                   for p, ids in sorted((topic.assignments or {}).items())]
    counts = (-1, -1) if assignments else (topic.num_partitions, topic.replication_factor)
    return request_class.CreatableTopic(
        name=topic.name, num_partitions=counts[0], replication_factor=counts[1], assignments=assignments,
        configs=[request_class.CreatableTopicConfig(name=k, value=v) for k, v in topic.configs.items()])


def _resource(result: Message) -> str:
    """A config resource as messages name it: its name, or what the BROKER resource "" is."""
    if result.resource_type == ConfigResourceType.BROKER and not result.resource_name:
        return "the cluster-wide broker defaults"
    return repr(result.resource_name)


def _config_entry(config: Message) -> ConfigEntry:
    try:
        source = ConfigSource(config.config_source)
    except ValueError:
        source = ConfigSource.UNKNOWN
    if config.config_source == -1:  # v0 has no source, only IsDefault
        source = ConfigSource.DEFAULT_CONFIG if config.is_default else ConfigSource.UNKNOWN
    is_default = config.is_default or source == ConfigSource.DEFAULT_CONFIG
    return ConfigEntry(config.name, config.value, config.read_only, source, is_default, config.is_sensitive)
