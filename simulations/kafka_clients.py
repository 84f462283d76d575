"""In-process Kafka clients for the cluster simulation: a producer and a consumer over the real codec.

Theory of operation. A client is a node of the simulated network (ids from `CLIENT_ID_BASE`) that speaks the
Kafka protocol: every request is encoded with `net.protocol.codec.encode_request` and every response
decoded with `decode_response`, exactly the bytes a real client exchanges with a broker. On the simulated
stream a Kafka frame is tagged with one channel byte (`CHANNEL_KAFKA_REQUEST` / `CHANNEL_KAFKA_RESPONSE`),
because one stream between two nodes also carries their Raft and controller traffic.

`KafkaClientBase` owns the connections: per broker, the outstanding requests by correlation id. A reset
stream fails them (callback with None), as does a request that waits longer than `REQUEST_TIMEOUT_MS`
(its late answer is then ignored). It learns partition leaders with Metadata v8 and refreshes them after
errors and periodically.

`SimProducer` sends records "<name>:<sequence>" to one topic with acks=all (-1) or acks=1, keyed (Kafka's
murmur2 partitioner over a small key space) or unkeyed (round robin), batching what accumulated per
partition into one batch (`partitions.records.build_batch`) and keeping at most one request in flight per
partition so that a retry cannot overtake. Retriable errors retry the same batch after a backoff until
`DELIVERY_TIMEOUT_MS`; an acks=all acknowledgement is reported to the checkers record by record.

`SimConsumer` reads every partition from offset 0 with Fetch v11 (read_uncommitted, so up to the high
watermark), checks every batch's CRC-32C (a corrupt batch is counted and fetched again, never consumed),
and reports every record it consumes with the high watermark of the response that carried it. With
`fetch_version` 17 (the follower-fetch workload) it fetches as a client of Kafka 3.9's newest version does:
the topic by its id (learnt with Metadata v12), and each partition with the epoch of the last batch it
consumed (LastFetchedEpoch, KIP-320). An answer naming a DivergingEpoch is checked as Kafka's consumer checks
it (its offset validation): OffsetForLeaderEpoch at the partition's leader for that epoch. An end offset at or
past the consumer's position means nothing it read is gone (a replica behind the consumer answered), and it
fetches again from the leader; one below it means records it consumed were truncated away, which
`on_truncation` reports to the checkers.

SASL (the sasl workload): a client with a `sasl_user` authenticates every connection with SaslHandshake and
SaslAuthenticate v1 (PLAIN, or OAUTHBEARER with an unsecured token that lives `token_life_ms` from the moment
it is made) before anything else is sent on it (`send` returns False until then, as for a
broker it is not connected to). When the broker announces a session lifetime, a client that `reauthenticates`
(KIP-368) starts the exchange again at a random 85-95% of it, once the requests in flight on that connection
have been answered, sending nothing else meanwhile (Kafka's clients do the same); one that does not is an old
client, whose connection the broker closes when the session has ended. A refused or unanswered exchange
closes the connection (the network then connects again).

Everything is driven by loop events; randomness comes from the client's own derived RNG stream.
"""

from __future__ import annotations

import random
import struct
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from net.client.security import REAUTH_SHARE_MAX, REAUTH_SHARE_MIN
from net.protocol import messages
from net.protocol.codec import ApiKey, RequestHeader, decode_response, encode_request
from partitions.batch import iter_batches
from partitions.errors import ErrorCode, KafkaError
from partitions.murmur2 import murmur2
from partitions.records import build_batch, decode_batch
from security.oauthbearer import OAUTHBEARER, client_first, unsecured_token
from simulations.loop import US_PER_MS, EventLoop
from simulations.network import Network

CHANNEL_KAFKA_REQUEST = b"Q"
CHANNEL_KAFKA_RESPONSE = b"A"
CLIENT_ID_BASE = 100
REQUEST_TIMEOUT_MS = 5_000
METADATA_REFRESH_MS = 2_000
RETRY_BACKOFF_MS = 100
DELIVERY_TIMEOUT_MS = 30_000
PRODUCE_TIMEOUT_MS = 5_000
PRODUCER_TICK_MS = 25  # records are generated and lingering batches checked at this pace
CONSUMER_TICK_MS = 100  # retries and metadata refreshes only: a fetch answer sends the next fetch at once
# A partition's records wait this long for company before a batch leaves (linger.ms). Longer than a real
# producer's default: the simulation's cost is per request, and a safety property does not care how many
# records a batch carries.
LINGER_MS = 100
PRODUCER_QUEUE_RECORDS_MAX = 20_000
BATCH_RECORDS_MAX = 500
KEY_SPACE = 64
CONSUMER_MAX_WAIT_MS = 200
CONSUMER_PARTITION_BYTES_MAX = 256 * 1024
PRODUCE_VERSION = 7
FETCH_VERSION = 11
FETCH_VERSION_TOPIC_IDS = 13  # KIP-516: a Fetch names its topics by id
FETCH_VERSION_LAST_FETCHED_EPOCH = 12  # KIP-320 for consumers: LastFetchedEpoch, answered by DivergingEpoch
METADATA_VERSION_TOPIC_IDS = 12
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
PREFERRED_REPLICA_MS = 5_000  # how long a consumer reads from the replica a leader named (librdkafka: metadata age)
METADATA_VERSION = 8
CREATE_TOPICS_VERSION = 4
SASL_HANDSHAKE_VERSION = 1
SASL_AUTHENTICATE_VERSION = 1
_CORRELATION = struct.Struct(">i")

# Errors after which the same batch is sent again (to the leader the refreshed metadata names).
RETRIABLE_PRODUCE_ERRORS = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.CORRUPT_MESSAGE, ErrorCode.NETWORK_EXCEPTION,
})


@dataclass
class _Outstanding:
    api_key: int
    api_version: int
    callback: Callable[[Any], None]
    timeout_handle: int


@dataclass
class PartitionLeader:
    leader_id: int
    leader_epoch: int


class ClientHost:
    """What a client needs from the simulation."""

    loop: EventLoop
    network: Network
    node_ids: list[int]

    def trace(self, kind: str, *fields: int | str) -> None: ...


class KafkaClientBase:
    """Connections, correlation ids, timeouts and partition leaders (see the module docstring)."""

    def __init__(self, host: Any, client_id: int, name: str, topic: str, partitions: int) -> None:
        self.host = host
        self.loop: EventLoop = host.loop
        self.client_id = client_id
        self.name = name
        self.topic = topic
        self.partitions = partitions
        self.rng: random.Random = self.loop.derive_rng(f"client-{name}")
        self.connected: set[int] = set()
        self._outstanding: dict[int, dict[int, _Outstanding]] = {}  # broker -> correlation id -> request
        # broker -> the correlation ids of this connection's requests still owed an answer, in the order sent
        # (those given up on included: their answers still come, in turn). A broker answers a connection in
        # request order; Kafka's clients take an answer out of turn for a broken connection (Java's
        # NetworkClient.correlate), and here it fails the answers_in_order checker.
        self._owed: dict[int, deque[int]] = {}
        self._next_correlation_id = 0
        self.leaders: dict[int, PartitionLeader] = {}
        self.metadata_version = METADATA_VERSION
        self.topic_id: Any = None  # the topic's uuid.UUID once Metadata v10+ named it
        self._metadata_inflight = False
        self._metadata_due_ms = 0
        self.running = True
        # SASL (see the module docstring): set by a workload before the client starts
        self.sasl_user: str | None = None
        self.sasl_password = ""
        self.sasl_mechanism = "PLAIN"
        self.token_life_ms = 0  # OAUTHBEARER: the lifetime of each token the client makes
        self.reauth_user: str | None = None  # re-authenticate as someone else (an impostor; refused)
        self.reauthenticates = True
        self._sasl_state: dict[int, str] = {}  # broker -> "exchange", "ready" or "draining" (re-auth due)
        self._connection_number: dict[int, int] = {}  # broker -> connection count, to tell stale timers
        self._reauthenticating: set[int] = set()  # brokers whose exchange is a re-authentication
        self.sasl_counts = {"authenticated": 0, "reauthenticated": 0, "refused": 0}

    # --- endpoint ---------------------------------------------------------------------------------------

    def on_connected(self, peer_id: int) -> None:
        if peer_id in self.host.node_ids:  # the network also links clients to each other; they never talk
            self.connected.add(peer_id)
            self._connection_number[peer_id] = self._connection_number.get(peer_id, 0) + 1
            if self.sasl_user is not None:
                self._authenticate(peer_id, self.sasl_user)

    def on_disconnected(self, peer_id: int) -> None:
        self.connected.discard(peer_id)
        self._sasl_state.pop(peer_id, None)
        self._reauthenticating.discard(peer_id)
        self._owed.pop(peer_id, None)
        outstanding = self._outstanding.pop(peer_id, {})
        for correlation_id in sorted(outstanding):
            request = outstanding[correlation_id]
            self.loop.cancel(request.timeout_handle)
            request.callback(None)

    def on_message(self, peer_id: int, data: bytes) -> None:
        assert data[:1] == CHANNEL_KAFKA_RESPONSE, f"client {self.name} got channel {data[:1]!r} from {peer_id}"
        frame = memoryview(data)[5:]  # channel byte, then the frame's 4-byte length prefix
        correlation_id = _CORRELATION.unpack_from(frame)[0]
        owed = self._owed.get(peer_id)
        expected = owed.popleft() if owed else None
        if expected != correlation_id:
            checkers = getattr(self.host, "checkers", None)
            if checkers is not None:
                checkers.violate("answers_in_order", f"client {self.name}: broker {peer_id} answered correlation id "
                                                     f"{correlation_id} when {expected} was owed first")
        request = self._outstanding.get(peer_id, {}).pop(correlation_id, None)
        if request is None:
            return  # timed out earlier: its late answer is ignored
        self.loop.cancel(request.timeout_handle)
        _, response = decode_response(request.api_key, request.api_version, frame)
        request.callback(response)
        if self._sasl_state.get(peer_id) == "draining" and not self._outstanding.get(peer_id):
            self._reauthenticate(peer_id)

    # --- SASL -------------------------------------------------------------------------------------------

    def _authenticate(self, broker_id: int, user: str) -> None:
        self._sasl_state[broker_id] = "exchange"
        connection = self._connection_number[broker_id]
        self._transmit(broker_id, ApiKey.SASL_HANDSHAKE, SASL_HANDSHAKE_VERSION,
                       messages.SaslHandshakeRequest(mechanism=self.sasl_mechanism),
                       lambda response: self._on_handshake(broker_id, connection, user, response))

    def _on_handshake(self, broker_id: int, connection: int, user: str, response: Any) -> None:
        if self._connection_number.get(broker_id) != connection or broker_id not in self.connected:
            return
        if response is None or response.error_code != ErrorCode.NONE:
            self._sasl_failed(broker_id)
            return
        if self.sasl_mechanism == OAUTHBEARER:
            token = client_first(unsecured_token(user, self.loop.now_ms, self.token_life_ms / 1000))
        else:
            token = f"\x00{user}\x00{self.sasl_password}".encode()
        self._transmit(broker_id, ApiKey.SASL_AUTHENTICATE, SASL_AUTHENTICATE_VERSION,
                       messages.SaslAuthenticateRequest(auth_bytes=token),
                       lambda answer: self._on_authenticate(broker_id, connection, answer))

    def _on_authenticate(self, broker_id: int, connection: int, response: Any) -> None:
        if self._connection_number.get(broker_id) != connection or broker_id not in self.connected:
            return
        if response is None or response.error_code != ErrorCode.NONE or response.auth_bytes:
            self._sasl_failed(broker_id)  # (auth bytes: OAUTHBEARER's error for a refused token)
            return
        again = broker_id in self._reauthenticating
        self._reauthenticating.discard(broker_id)
        self._sasl_state[broker_id] = "ready"
        self.sasl_counts["reauthenticated" if again else "authenticated"] += 1
        self.host.trace("client.sasl", self.name, broker_id, "reauthenticated" if again else "authenticated",
                        response.session_lifetime_ms)
        if response.session_lifetime_ms > 0 and self.reauthenticates:
            share = self.rng.uniform(REAUTH_SHARE_MIN, REAUTH_SHARE_MAX)
            self.loop.call_later(int(response.session_lifetime_ms * share) * US_PER_MS, self._reauth_due,
                                 broker_id, connection)

    def _reauth_due(self, broker_id: int, connection: int) -> None:
        if self._connection_number.get(broker_id) != connection or self._sasl_state.get(broker_id) != "ready":
            return
        self._sasl_state[broker_id] = "draining"
        if not self._outstanding.get(broker_id):
            self._reauthenticate(broker_id)

    def _reauthenticate(self, broker_id: int) -> None:
        self._reauthenticating.add(broker_id)
        self._authenticate(broker_id, self.reauth_user or self.sasl_user)

    def _sasl_failed(self, broker_id: int) -> None:
        self.sasl_counts["refused"] += 1
        self.host.trace("client.sasl", self.name, broker_id, "refused", 0)
        self._sasl_state.pop(broker_id, None)
        self._reauthenticating.discard(broker_id)
        self.host.network.close(self.client_id, broker_id)

    # --- requests ---------------------------------------------------------------------------------------

    def send(self, broker_id: int, api_key: int, api_version: int, request: Any,
             callback: Callable[[Any], None], timeout_ms: int = REQUEST_TIMEOUT_MS) -> bool:
        """Send `request` to `broker_id`; `callback(response or None)` later, None after `timeout_ms` without an
        answer. False when not connected (or not authenticated)."""
        if self.sasl_user is not None and self._sasl_state.get(broker_id) != "ready":
            return False
        return self._transmit(broker_id, api_key, api_version, request, callback, timeout_ms)

    def _transmit(self, broker_id: int, api_key: int, api_version: int, request: Any,
                  callback: Callable[[Any], None], timeout_ms: int = REQUEST_TIMEOUT_MS) -> bool:
        if broker_id not in self.connected:
            return False
        self._next_correlation_id += 1
        correlation_id = self._next_correlation_id
        header = RequestHeader(api_key, api_version, correlation_id, self.name)
        frame = encode_request(header, request)
        if not self.host.network.send(self.client_id, broker_id, CHANNEL_KAFKA_REQUEST + frame):
            return False
        if api_key != ApiKey.PRODUCE or request.acks != 0:  # an acks=0 produce is never answered
            self._owed.setdefault(broker_id, deque()).append(correlation_id)
        timeout_handle = self.loop.call_later(timeout_ms * US_PER_MS, self._timeout, broker_id, correlation_id)
        self._outstanding.setdefault(broker_id, {})[correlation_id] = _Outstanding(
            api_key, api_version, callback, timeout_handle)
        return True

    def _timeout(self, broker_id: int, correlation_id: int) -> None:
        request = self._outstanding.get(broker_id, {}).pop(correlation_id, None)
        if request is not None:
            request.callback(None)
            if self._sasl_state.get(broker_id) == "draining" and not self._outstanding.get(broker_id):
                self._reauthenticate(broker_id)

    def any_broker(self) -> int | None:
        candidates = sorted(self.connected)
        return self.rng.choice(candidates) if candidates else None

    # --- metadata ---------------------------------------------------------------------------------------

    def refresh_metadata(self) -> None:
        if self._metadata_inflight:
            return
        broker_id = self.any_broker()
        if broker_id is None:
            return
        request_class = messages.MetadataRequest
        request = request_class(topics=[request_class.MetadataRequestTopic(name=self.topic)],
                                allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                                include_topic_authorized_operations=False)
        if self.send(broker_id, ApiKey.METADATA, self.metadata_version, request, self._on_metadata):
            self._metadata_inflight = True

    def _on_metadata(self, response: Any) -> None:
        self._metadata_inflight = False
        self._metadata_due_ms = self.loop.now_ms + METADATA_REFRESH_MS
        if response is None:
            return
        for topic in response.topics:
            if topic.name != self.topic or topic.error_code != ErrorCode.NONE:
                continue
            if self.metadata_version >= METADATA_VERSION_TOPIC_IDS:
                self.topic_id = topic.topic_id
            for partition in topic.partitions:
                if partition.error_code == ErrorCode.NONE and partition.leader_id >= 0:
                    self.leaders[partition.partition_index] = PartitionLeader(partition.leader_id, partition.leader_epoch)
                else:
                    self.leaders.pop(partition.partition_index, None)

    def maybe_refresh_metadata(self) -> None:
        if self.loop.now_ms >= self._metadata_due_ms or len(self.leaders) < self.partitions:
            self.refresh_metadata()


class FaultedClient:
    """The lifecycle of a client the workload's faults crash, restart, pause and resume (a mixin beside a
    `KafkaClientBase`). A subclass names its trace lines (`TRACE_KIND`) and its tick (`TICK_MS`), keeps
    `running`, `paused` and `_deferred`, and provides `_reset` (a crash forgets everything; a new guard token
    begins), `_tick`, `_guard_token` (answers to requests of an older token are dropped) and, optionally,
    `_on_restart` and `_answered` (after each answer it handled)."""

    TRACE_KIND = "client"
    TICK_MS = 100

    def start(self) -> None:
        self.running = True
        self.loop.call_later(self.TICK_MS * US_PER_MS, self._tick)

    def crash(self) -> None:
        self.host.trace(f"{self.TRACE_KIND}.crash", self.name)
        self.running = False
        self._reset()

    def restart(self) -> None:
        if self.running:
            return
        self.host.trace(f"{self.TRACE_KIND}.restart", self.name)
        self._on_restart()
        self._reset()
        self.start()

    def pause(self) -> None:
        self.host.trace(f"{self.TRACE_KIND}.pause", self.name)
        self.paused = True

    def resume(self) -> None:
        self.host.trace(f"{self.TRACE_KIND}.resume", self.name)
        self.paused = False
        deferred, self._deferred = self._deferred, []
        for callback in deferred:
            callback()

    def _on_restart(self) -> None:
        pass

    def _answered(self) -> None:
        pass

    def _guarded(self, token: int, callback: Callable[[Any], None]) -> Callable[[Any], None]:
        """An answer handler that ignores answers of an older guard token and waits out a pause."""

        def handle(response: Any) -> None:
            if not self.running or token != self._guard_token():
                return
            if self.paused:
                self._deferred.append(lambda: handle(response))
                return
            callback(response)
            self._answered()

        return handle


class TopicCreator(KafkaClientBase):
    """Creates the workload's topic with CreateTopics v4, retrying until it exists."""

    def __init__(self, host: Any, client_id: int, topic: str, partitions: int, replication_factor: int,
                 configs: dict[str, str]) -> None:
        super().__init__(host, client_id, "admin", topic, partitions)
        self.replication_factor = replication_factor
        self.configs = configs
        self.created = False
        self._inflight = False

    def start(self) -> None:
        self.loop.call_later(RETRY_BACKOFF_MS * US_PER_MS, self._attempt)

    def _attempt(self) -> None:
        if self.created:
            return
        broker_id = self.any_broker()
        if broker_id is not None and not self._inflight:
            request_class = messages.CreateTopicsRequest
            topic = request_class.CreatableTopic(
                name=self.topic, num_partitions=self.partitions, replication_factor=self.replication_factor,
                assignments=[], configs=[request_class.CreatableTopicConfig(name=k, value=v)
                                         for k, v in sorted(self.configs.items())])
            request = request_class(topics=[topic], timeout_ms=REQUEST_TIMEOUT_MS, validate_only=False)
            self._inflight = self.send(broker_id, ApiKey.CREATE_TOPICS, CREATE_TOPICS_VERSION, request, self._on_response)
        self.loop.call_later(500 * US_PER_MS, self._attempt)

    def _on_response(self, response: Any) -> None:
        self._inflight = False
        if response is None:
            return
        result = response.topics[0]
        if result.error_code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            if not self.created:
                self.created = True
                self.host.trace("client.topic_created", self.topic, int(result.error_code))


@dataclass
class _Batch:
    partition: int
    values: list[bytes]
    keys: list[bytes | None]
    first_sent_ms: int
    attempts: int = 0
    sending: bool = False


@dataclass
class ProducerStats:
    sent_records: int = 0
    acked_records: int = 0
    failed_records: int = 0
    retries: int = 0
    dropped_records: int = 0  # the bounded queue was full


class SimProducer(KafkaClientBase):
    """acks=all or acks=1, keyed or unkeyed (see the module docstring)."""

    def __init__(self, host: Any, client_id: int, name: str, topic: str, partitions: int, acks: int,
                 keyed: bool, records_per_s: int, on_ack: Callable[[tuple[str, int], int, bytes], None]) -> None:
        super().__init__(host, client_id, name, topic, partitions)
        assert acks in (-1, 1), f"acks={acks}"
        self.acks = acks
        self.keyed = keyed
        self.records_per_s = records_per_s
        self.on_ack = on_ack
        self.stats = ProducerStats()
        self.generating = True
        self._sequence = 0
        self._credit_milli = 0  # records owed, in thousandths (rate * tick is not always whole)
        self._round_robin = 0
        self._queues: dict[int, list[tuple[bytes | None, bytes]]] = {p: [] for p in range(partitions)}
        self._inflight: dict[int, _Batch] = {}
        self._retry_at_ms: dict[int, int] = {}
        self._oldest_queued_ms: dict[int, int] = {}
        # Kafka's default partitioner, once per key of the key space (index -> key, partition).
        self._keys = [(key, (murmur2(key) & 0x7FFFFFFF) % partitions)
                      for key in (f"k{index}".encode() for index in range(KEY_SPACE))]

    def start(self) -> None:
        self.loop.call_later(PRODUCER_TICK_MS * US_PER_MS, self._tick)

    def pending_records(self) -> int:
        return sum(len(q) for q in self._queues.values()) + sum(len(b.values) for b in self._inflight.values())

    def _tick(self) -> None:
        if not self.running:
            return
        if self.generating:
            self._generate()
        self.maybe_refresh_metadata()
        for partition in range(self.partitions):
            self._maybe_send(partition)
        self.loop.call_later(PRODUCER_TICK_MS * US_PER_MS, self._tick)

    def _generate(self) -> None:
        self._credit_milli += self.records_per_s * PRODUCER_TICK_MS
        while self._credit_milli >= 1_000:
            self._credit_milli -= 1_000
            self._sequence += 1
            value = self._next_value()
            if self.keyed:
                key, partition = self._keys[self._key_index()]
            else:
                key = None
                partition = self._round_robin % self.partitions
                self._round_robin += 1
            queue = self._queues[partition]
            if len(queue) >= PRODUCER_QUEUE_RECORDS_MAX:
                self.stats.dropped_records += 1
                continue
            if not queue:
                self._oldest_queued_ms[partition] = self.loop.now_ms
            queue.append((key, value))

    def _key_index(self) -> int:
        """The index in `_keys` of the next keyed record's key."""
        return self.rng.randrange(KEY_SPACE)

    def _next_value(self) -> bytes | None:
        """The value of the record numbered `_sequence`: unique, "name:sequence" (a workload's producer may
        return None, a tombstone)."""
        return f"{self.name}:{self._sequence}".encode()

    def _maybe_send(self, partition: int) -> None:
        batch = self._inflight.get(partition)
        if batch is None:
            queue = self._queues[partition]
            if not queue:
                return
            lingering = self.generating and len(queue) < BATCH_RECORDS_MAX
            if lingering and self.loop.now_ms - self._oldest_queued_ms.get(partition, 0) < LINGER_MS:
                return
            self._oldest_queued_ms[partition] = self.loop.now_ms
            taken, self._queues[partition] = queue[:BATCH_RECORDS_MAX], queue[BATCH_RECORDS_MAX:]
            batch = _Batch(partition, [v for _, v in taken], [k for k, _ in taken], self.loop.now_ms)
            self._inflight[partition] = batch
            self.stats.sent_records += len(batch.values)
        elif batch.sending or self.loop.now_ms < self._retry_at_ms.get(partition, 0):
            return
        self._send_batch(batch)

    def _send_batch(self, batch: _Batch) -> None:
        if self.loop.now_ms - batch.first_sent_ms > DELIVERY_TIMEOUT_MS:
            self._fail(batch)
            return
        leader = self.leaders.get(batch.partition)
        if leader is None:
            return
        records = build_batch(zip(batch.keys, batch.values), base_timestamp=self.loop.now_ms)
        request = self._produce_request(batch.partition, records)
        if self.send(leader.leader_id, ApiKey.PRODUCE, PRODUCE_VERSION, request,
                     lambda response, batch=batch: self._on_response(batch, response)):
            batch.attempts += 1
            batch.sending = True
            self.host.trace("client.produce", self.name, batch.partition, leader.leader_id, len(batch.values),
                            batch.attempts)

    def _produce_request(self, partition: int, records: bytes) -> Any:
        """A Produce request of `records` (one batch) to `partition` of the topic, with this producer's acks."""
        request_class = messages.ProduceRequest
        return request_class(
            transactional_id=None, acks=self.acks, timeout_ms=PRODUCE_TIMEOUT_MS,
            topic_data=[request_class.TopicProduceData(name=self.topic, partition_data=[
                request_class.PartitionProduceData(index=partition, records=records)])])

    def _on_response(self, batch: _Batch, response: Any) -> None:
        batch.sending = False
        if self._inflight.get(batch.partition) is not batch:
            return
        if response is None:
            self._retry(batch, "network")
            return
        answer = response.responses[0].partition_responses[0]
        if answer.error_code == ErrorCode.NONE:
            self._acknowledged(batch, answer.base_offset)
        elif answer.error_code in RETRIABLE_PRODUCE_ERRORS:
            self._retry(batch, ErrorCode(answer.error_code).name)
        else:
            self.host.trace("client.produce_error", self.name, batch.partition, int(answer.error_code))
            self._fail(batch)

    def _acknowledged(self, batch: _Batch, base_offset: int) -> None:
        del self._inflight[batch.partition]
        self._report_acknowledged(batch.partition, batch.values, base_offset)
        self._maybe_send(batch.partition)  # records that lingered behind this batch need not wait for a tick

    def _report_acknowledged(self, partition: int, values: list[bytes], base_offset: int) -> None:
        """Count, trace and hand on (`on_ack`) the records of a batch acknowledged at `base_offset`."""
        self.stats.acked_records += len(values)
        self.host.trace("client.ack", self.name, partition, base_offset, len(values), self.acks)
        key = (self.topic, partition)
        for index, value in enumerate(values):
            self.on_ack(key, base_offset + index, value)

    def _retry(self, batch: _Batch, reason: str) -> None:
        self.stats.retries += 1
        self.host.trace("client.retry", self.name, batch.partition, reason)
        self._retry_at_ms[batch.partition] = self.loop.now_ms + RETRY_BACKOFF_MS
        self._metadata_due_ms = 0  # refresh before the next attempt

    def _fail(self, batch: _Batch) -> None:
        del self._inflight[batch.partition]
        self.stats.failed_records += len(batch.values)
        self.host.trace("client.produce_failed", self.name, batch.partition, len(batch.values))


@dataclass
class ConsumerStats:
    records: int = 0
    fetches: int = 0
    corrupt_batches: int = 0
    errors: int = 0
    redirects: int = 0  # answers naming a preferred read replica (KIP-392)
    follower_records: int = 0  # records read from a preferred read replica
    diverged: int = 0  # answers naming a DivergingEpoch (Fetch v12+), each validated at the leader


@dataclass
class _ConsumerPartition:
    position: int = 0
    fetching: bool = False
    retry_at_ms: int = 0
    high_watermark: int = 0
    read_from: int | None = None  # KIP-392: the preferred read replica a leader named (None: the leader)
    read_from_until_ms: int = 0
    last_epoch: int = -1  # the partition leader epoch of the last batch consumed (LastFetchedEpoch)


class SimConsumer(KafkaClientBase):
    """Reads every partition from offset 0 (see the module docstring)."""

    def __init__(self, host: Any, client_id: int, name: str, topic: str, partitions: int,
                 on_record: Callable[[tuple[str, int], int, bytes, int], None]) -> None:
        super().__init__(host, client_id, name, topic, partitions)
        self.on_record = on_record
        self.stats = ConsumerStats()
        self.state = {p: _ConsumerPartition() for p in range(partitions)}
        # KIP-392 (client.rack): with a rack the consumer fetches from the replica a leader names, as librdkafka
        # does, until an error there or `PREFERRED_REPLICA_MS` have passed; then it asks the leader again.
        self.rack_id = ""
        self.fetch_version = FETCH_VERSION
        # Called with (partition, position, epoch, end offset) when the leader's log ends the epoch of the
        # last batch consumed before the consumer's position: records it consumed are gone.
        self.on_truncation: Callable[[int, int, int, int], None] = lambda *_: None
        # A consumer of a compacted topic moves past each batch's last offset, as Kafka's does, over emptied batches
        # and removed records (the compaction workload's reader); the others move past the last record read.
        self.past_batch_ends = False

    def use_fetch_version(self, version: int) -> None:
        """Fetch at `version` (11-17; topic ids from 13 need Metadata v12)."""
        self.fetch_version = version
        if version >= FETCH_VERSION_TOPIC_IDS:
            self.metadata_version = METADATA_VERSION_TOPIC_IDS

    def start(self) -> None:
        self.loop.call_later(CONSUMER_TICK_MS * US_PER_MS, self._tick)

    def position(self, partition: int) -> int:
        return self.state[partition].position

    def _tick(self) -> None:
        if not self.running:
            return
        self.maybe_refresh_metadata()
        for partition in range(self.partitions):
            self._maybe_fetch(partition)
        self.loop.call_later(CONSUMER_TICK_MS * US_PER_MS, self._tick)

    def _maybe_fetch(self, partition: int) -> None:
        state = self.state[partition]
        leader = self.leaders.get(partition)
        if state.fetching or leader is None or self.loop.now_ms < state.retry_at_ms:
            return
        target = leader.leader_id
        if state.read_from is not None:
            if self.loop.now_ms < state.read_from_until_ms:
                target = state.read_from
            else:
                state.read_from = None
        version = self.fetch_version
        if version >= FETCH_VERSION_TOPIC_IDS and self.topic_id is None:
            self._metadata_due_ms = 0  # the topic's id first
            return
        request_class = messages.FetchRequest
        fetch_partition = request_class.FetchPartition(
            partition=partition, current_leader_epoch=leader.leader_epoch, fetch_offset=state.position,
            log_start_offset=-1, partition_max_bytes=CONSUMER_PARTITION_BYTES_MAX,
            last_fetched_epoch=state.last_epoch if version >= FETCH_VERSION_LAST_FETCHED_EPOCH else -1)
        fetch_topic = (request_class.FetchTopic(topic_id=self.topic_id, partitions=[fetch_partition])
                       if version >= FETCH_VERSION_TOPIC_IDS else
                       request_class.FetchTopic(topic=self.topic, partitions=[fetch_partition]))
        request = request_class(
            replica_id=-1, max_wait_ms=CONSUMER_MAX_WAIT_MS, min_bytes=1, max_bytes=CONSUMER_PARTITION_BYTES_MAX,
            isolation_level=0, session_id=0, session_epoch=-1, topics=[fetch_topic],
            forgotten_topics_data=[], rack_id=self.rack_id)
        if self.send(target, ApiKey.FETCH, version, request,
                     lambda response, p=partition, position=state.position: self._on_fetch(p, position, response)):
            state.fetching = True
            self.stats.fetches += 1

    def _on_fetch(self, partition: int, position: int, response: Any) -> None:
        state = self.state[partition]
        state.fetching = False
        if response is None or position != state.position:
            state.retry_at_ms = self.loop.now_ms + RETRY_BACKOFF_MS
            return
        if not response.responses:  # throttled by a client quota: an empty answer; again once the throttle is over
            state.retry_at_ms = self.loop.now_ms + max(response.throttle_time_ms, RETRY_BACKOFF_MS)
            return
        data = response.responses[0].partitions[0]
        if response.error_code != ErrorCode.NONE or data.error_code != ErrorCode.NONE:
            self.stats.errors += 1
            code = data.error_code or response.error_code
            self.host.trace("client.fetch_error", self.name, partition, int(code))
            state.retry_at_ms = self.loop.now_ms + RETRY_BACKOFF_MS
            state.read_from = None
            self._metadata_due_ms = 0
            return
        if data.diverging_epoch.epoch >= 0:
            self._validate_position(partition, data.diverging_epoch)
            return
        if data.preferred_read_replica >= 0:
            state.read_from = data.preferred_read_replica
            state.read_from_until_ms = self.loop.now_ms + PREFERRED_REPLICA_MS
            self.stats.redirects += 1
            self.host.trace("client.fetch_redirect", self.name, partition, data.preferred_read_replica)
            self._maybe_fetch(partition)
            return
        state.high_watermark = max(state.high_watermark, data.high_watermark)
        records = bytes(data.records or b"")
        try:
            consumed = self._consume(partition, records, data.high_watermark)
        except KafkaError as error:
            # A CRC mismatch (a flipped byte on the broker's read): nothing of the batch is consumed.
            self.stats.corrupt_batches += 1
            self.host.trace("client.corrupt_batch", self.name, partition, state.position, type(error).__name__)
            state.retry_at_ms = self.loop.now_ms + RETRY_BACKOFF_MS
            return
        if consumed:
            self.host.trace("client.consume", self.name, partition, position, consumed)
            if state.read_from is not None:
                self.stats.follower_records += consumed
        self._maybe_fetch(partition)

    def _validate_position(self, partition: int, diverging: Any) -> None:
        """A DivergingEpoch answer (see the module docstring): OffsetForLeaderEpoch at the partition's leader
        for the epoch of the last batch consumed; fetching goes on, from the leader, once it is answered."""
        state = self.state[partition]
        self.stats.diverged += 1
        self.host.trace("client.diverged", self.name, partition, state.position, diverging.epoch,
                        diverging.end_offset)
        state.read_from = None
        state.retry_at_ms = self.loop.now_ms + RETRY_BACKOFF_MS
        leader = self.leaders.get(partition)
        if leader is None:
            return
        request_class = messages.OffsetForLeaderEpochRequest
        request = request_class(replica_id=-1, topics=[request_class.OffsetForLeaderTopic(
            topic=self.topic, partitions=[request_class.OffsetForLeaderPartition(
                partition=partition, current_leader_epoch=leader.leader_epoch, leader_epoch=state.last_epoch)])])
        position, epoch = state.position, state.last_epoch
        if self.send(leader.leader_id, ApiKey.OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION, request,
                     lambda response: self._on_validated(partition, position, epoch, response)):
            state.fetching = True

    def _on_validated(self, partition: int, position: int, epoch: int, response: Any) -> None:
        state = self.state[partition]
        state.fetching = False
        if response is None or position != state.position:
            return
        answer = response.topics[0].partitions[0] if response.topics and response.topics[0].partitions else None
        if answer is None or answer.error_code != ErrorCode.NONE:
            self._metadata_due_ms = 0
            return
        if 0 <= answer.end_offset < position:  # (an undefined end offset: nothing to tell; the next fetch asks again)
            self.on_truncation(partition, position, epoch, answer.end_offset)

    def _consume(self, partition: int, records: bytes, high_watermark: int) -> int:
        """Validate every whole batch first, then hand its records to the checkers. Returns the count."""
        decoded = [decode_batch(records[position:position + header.size])
                   for position, header in iter_batches(records)]
        state = self.state[partition]
        key = (self.topic, partition)
        consumed = 0
        for batch in decoded:
            for record in batch.records:
                if record.offset < state.position:
                    continue
                self._report(key, record, high_watermark)
                state.position = record.offset + 1
                state.last_epoch = batch.header.partition_leader_epoch
                consumed += 1
            if self.past_batch_ends and batch.header.last_offset >= state.position:
                state.position = batch.header.last_offset + 1
                state.last_epoch = batch.header.partition_leader_epoch
        self.stats.records += consumed
        return consumed

    def _report(self, key: tuple[str, int], record: Any, high_watermark: int) -> None:
        self.on_record(key, record.offset, bytes(record.value or b""), high_watermark)
