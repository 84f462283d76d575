"""The broker's side of the coordinators (sans-IO): internal topics, the runtime's port over hosted partitions,
FindCoordinator, and the deferred answers of coordinator requests.

Theory of operation. A `CoordinatorService` is one coordinator (groups, later transactions): its internal
topic (`__consumer_offsets`), a `CoordinatorRuntime` (coordinator/runtime.py) whose shards live on the
partitions of that topic this broker leads, and the key -> partition rule (Java's hashCode, so a key lands
where a Java broker puts it). The service hears leadership changes of its topic from BrokerCore's
leadership listeners and loads or unloads shards accordingly.

`CoordinatorApis` is the handler group (broker/apis.py) that serves FindCoordinator for every service and
carries coordinator requests to shards: `submit_all(header, items, build)` hands each (service, partition,
request) to its shard and answers `build(answers)` once every shard has answered (an answer is the shard's, or
the ErrorCode that stopped it: NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, a failed write); at once when no
shard took a request, else through a `Deferred` that `poll` completes.

The internal topic is created through the controller the first time a client looks for a coordinator
(COORDINATOR_NOT_AVAILABLE meanwhile), with the node's settings: partitions, cleanup.policy=compact,
min.insync.replicas as the topic defaults say, and the configured replication factor capped at the cluster's
size (the broker nodes of the config file, or the brokers registered if there are more). As Kafka does, the
topic is not created while fewer brokers than that are unfenced: an internal topic created with the brokers
that happened to be up at the first lookup would keep fewer replicas for good.

`CoordinatorPartitionsPort` is the runtime's port: appends go through the partition leader's normal path
(`Partition.append_records` with acks=all semantics: refused below min.insync.replicas), reads decode the
log's batches (control batches included) into `LoadedRecord`s.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from broker.apis import Deferred
from broker.core import BrokerCore, HostedPartition, TopicPartition
from coordinator.batches import coordinator_batch, loaded_records
from coordinator.keys import partition_for_key
from coordinator.runtime import CoordinatorRuntime
from coordinator.shard import CoordinatorRecord, CoordinatorShard, LoadedRecord, TransactionalWrite
from metadata.requests import ConfigEntry, CreatableTopic, CreateTopicsRequest as ControllerCreateTopics
from net.protocol import messages
from net.protocol.codec import ApiKey, RequestHeader
from security.acl import AclOperation, ResourceType
from partitions.errors import ErrorCode, NotLeaderOrFollowerError
from partitions.log import AppendOrigin

if TYPE_CHECKING:
    from broker.apis import KafkaApis

COORDINATOR_KEY_TYPE_GROUP = 0
COORDINATOR_KEY_TYPE_TRANSACTION = 1
COORDINATOR_KEY_TYPE_SHARE = 2  # KIP-932, from FindCoordinator v6: no share coordinator here (nor in Kafka 3.9)
FIND_COORDINATOR_KEYS_MAX = 1_000  # v4 batches many keys in one request; more is a hostile request
KEY_BYTES_MAX = 32_767  # a Kafka string's limit


@dataclass(frozen=True)
class InternalTopic:
    """An internal topic as the node creates it."""

    name: str
    partitions: int
    replication_factor: int
    configs: tuple[tuple[str, str], ...] = (("cleanup.policy", "compact"),)


class CoordinatorPartitionsPort:
    """coordinator.runtime.CoordinatorPartitions over this broker's hosted partitions of one topic."""

    def __init__(self, broker: BrokerCore, topic: str) -> None:
        self.broker = broker
        self.topic = topic

    def _hosted(self, partition: int) -> HostedPartition:
        hosted = self.broker.hosted(self.topic, partition)
        if hosted is None or not hosted.replica.is_leader:
            raise NotLeaderOrFollowerError(f"{self.topic}-{partition}: not the leader here")
        return hosted

    def append(self, partition: int, leader_epoch: int, records: list[CoordinatorRecord],
               transactional: TransactionalWrite | None, now_ms: int) -> int:
        hosted = self._hosted(partition)
        if not self.broker.serving:  # this incarnation is not unfenced yet: it writes nothing (BrokerCore.serving)
            raise NotLeaderOrFollowerError(f"{self.topic}-{partition}: this broker does not serve yet")
        if hosted.replica.leader_epoch != leader_epoch:
            raise NotLeaderOrFollowerError(
                f"{self.topic}-{partition}: leader epoch {hosted.replica.leader_epoch}, the shard's is {leader_epoch}")
        if transactional is not None:
            # A fenced producer's late TxnOffsetCommit must not open a transaction its marker already closed.
            hosted.producer_state.check_transactional_epoch(transactional.producer_id, transactional.producer_epoch)
        result = hosted.replica.append_records(bytearray(coordinator_batch(records, transactional, now_ms)), -1, now_ms,
                                               origin=AppendOrigin.COORDINATOR)
        if result.append_info is not None:
            hosted.producer_state.update(result.append_info.batch_headers)
        self.broker.dirty_partitions.add((self.topic, partition))
        return result.last_offset

    def read(self, partition: int, offset: int, bytes_max: int) -> tuple[list[LoadedRecord], int]:
        data = self._hosted(partition).log.read(offset, bytes_max)
        return loaded_records(data.records, offset)

    def log_start_offset(self, partition: int) -> int:
        return self._hosted(partition).log.log_start_offset

    def log_end_offset(self, partition: int) -> int:
        return self._hosted(partition).log.log_end_offset

    def high_watermark(self, partition: int) -> int:
        return self._hosted(partition).replica.high_watermark


class CoordinatorService:
    """One coordinator over its internal topic (see the module docstring)."""

    def __init__(self, broker: BrokerCore, key_type: int, topic: InternalTopic,
                 shard_factory: Callable[[int], CoordinatorShard], *, min_insync_replicas: int,
                 configured_brokers: int = 1) -> None:
        self.broker = broker
        self.key_type = key_type
        self.topic = topic
        self.min_insync_replicas = min_insync_replicas
        self.configured_brokers = configured_brokers  # the broker nodes of the config file
        self.runtime = CoordinatorRuntime(topic.name, shard_factory, CoordinatorPartitionsPort(broker, topic.name))
        self._creating = False
        broker.add_leadership_listener(topic.name, self._on_leadership)

    def _on_leadership(self, topic: str, partition: int, leader_epoch: int, is_leader: bool, now_ms: int) -> None:
        if is_leader:
            self.runtime.on_became_leader(partition, leader_epoch, now_ms)
        else:
            self.runtime.on_resigned(partition, now_ms)

    def changed_partitions(self, changed: AbstractSet[TopicPartition]) -> set[int]:
        """The partitions of the internal topic among `changed` (a poll's changed partitions)."""
        name = self.topic.name
        return {partition for topic, partition in changed if topic == name}

    def partition_count(self) -> int | None:
        """The internal topic's partition count from the metadata image (None until it exists)."""
        topic = self.broker.image.topics.by_name.get(self.topic.name)
        return len(topic.partitions) if topic is not None else None

    def partition_for(self, key: str) -> int | None:
        count = self.partition_count()
        return None if count is None else partition_for_key(key, count)

    def coordinator_for(self, key: str) -> tuple[ErrorCode, int]:
        """(NONE, broker id) of the coordinator of `key`, or (COORDINATOR_NOT_AVAILABLE, -1) while the topic
        is being created or the partition has no live leader."""
        partition = self.partition_for(key)
        if partition is None:
            self._create_topic()
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1
        leader = self.broker.leader_of(self.topic.name, partition)
        brokers = self.broker.image.cluster.brokers
        if leader < 0 or leader not in brokers or brokers[leader].fenced:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1
        return ErrorCode.NONE, leader

    def _replication_factor_and_live(self) -> tuple[int, int]:
        """(the replication factor the internal topic is created with, the brokers unfenced now)."""
        brokers = [b for b in self.broker.image.cluster.brokers.values() if "broker" in b.roles]
        size = max(self.configured_brokers, len(brokers))
        return max(1, min(self.topic.replication_factor, size)), sum(1 for b in brokers if not b.fenced)

    def _create_topic(self) -> None:
        if self._creating:
            return
        replication_factor, live = self._replication_factor_and_live()
        if live < replication_factor:
            return  # COORDINATOR_NOT_AVAILABLE until enough brokers are up (Kafka's rule)
        self._creating = True
        configs = dict(self.topic.configs)
        configs.setdefault("min.insync.replicas", str(min(self.min_insync_replicas, replication_factor)))
        request = ControllerCreateTopics(topics=(CreatableTopic(
            name=self.topic.name, num_partitions=self.topic.partitions,
            replication_factor=replication_factor,
            configs=tuple(ConfigEntry(name=k, value=v) for k, v in sorted(configs.items()))),))

        def on_response(response: Any, now_ms: int) -> None:
            self._creating = False  # created, or failed: the next lookup tries again if it is still absent

        self.broker.call_controller(request, on_response)


@dataclass
class _Gather:
    """A Kafka request whose answer waits for one or more shard answers."""

    request_id: int  # KafkaApis' id of the deferred answer
    header: RequestHeader | None
    answers: list
    remaining: int
    build: Callable[[list], Any]
    on_done: Callable[[Any, int], None] | None = None  # an internal request: build's result goes here


class CoordinatorApis:
    """FindCoordinator and the deferred answers of coordinator requests (see the module docstring)."""

    def __init__(self, apis: "KafkaApis") -> None:
        self.apis = apis
        self.broker = apis.broker
        self.services: dict[int, CoordinatorService] = {}
        self._waiting: dict[tuple[int, int], tuple[_Gather, int]] = {}  # (key type, runtime id) -> (gather, slot)
        # A planted bug for the simulator (simulations/txn_sim.py), never configured: the runtimes are told
        # that nothing changed, so an answer held for the high watermark leaves only at its write timeout.
        self.bug_poll_ignores_changes = False

    def add_service(self, service: CoordinatorService) -> None:
        assert service.key_type not in self.services, service.key_type
        self.services[service.key_type] = service

    def api_handlers(self):
        # v5: v4, TRANSACTION_ABORTABLE known; v6: v5, the share key type known
        return [(ApiKey.FIND_COORDINATOR, 0, 6, self._find_coordinator)]

    def submit_all(self, header: RequestHeader, items: list[tuple[CoordinatorService, int, Any]],
                   build: Callable[[list], Any], now_ms: int) -> Any:
        """Hand each (service, partition, request) to its shard; the response is `build(answers)`, with one
        answer per item in order: the shard's answer, or the ErrorCode that stopped it (absent or loading
        shard, failed write). Returned at once when no shard took a request, else as a Deferred."""
        gather = self._submit(header, items, build, None, now_ms)
        return gather if not isinstance(gather, _Gather) else Deferred(gather.request_id)

    def submit_internal(self, items: list[tuple[CoordinatorService, int, Any]], build: Callable[[list], Any],
                        on_done: Callable[[Any, int], None], now_ms: int) -> None:
        """As submit_all, for a request of the broker itself (a produce's transaction verification):
        `on_done(build(answers), now_ms)` once every shard answered, at once when none took its request."""
        gather = self._submit(None, items, build, on_done, now_ms)
        if not isinstance(gather, _Gather):
            on_done(gather, now_ms)

    def _submit(self, header: RequestHeader | None, items: list[tuple[CoordinatorService, int, Any]],
                build: Callable[[list], Any], on_done: Callable[[Any, int], None] | None, now_ms: int) -> Any:
        """A _Gather waiting for shard answers, or build(answers) when no shard took a request."""
        answers: list = [None] * len(items)
        taken = []
        for slot, (service, partition, request) in enumerate(items):
            code = service.runtime.status(partition)
            if code != ErrorCode.NONE:
                answers[slot] = code
                continue
            taken.append((slot, service.key_type, service.runtime.submit(partition, request, now_ms)))
        if not taken:
            return build(answers)
        gather = _Gather(self.apis.defer(), header, answers, len(taken), build, on_done)
        for slot, key_type, runtime_id in taken:
            self._waiting[(key_type, runtime_id)] = (gather, slot)
        return gather

    def poll(self, now_ms: int, changed: AbstractSet[TopicPartition]) -> None:
        for key_type, service in self.services.items():
            runtime = service.runtime
            if not runtime.has_shards() and not runtime.has_answers():
                continue  # leads none of its partitions (most polls of most brokers with few of them)
            moved = set() if self.bug_poll_ignores_changes else service.changed_partitions(changed)
            answers = runtime.poll(now_ms, moved)
            self.broker.notices += runtime.take_notices()
            for runtime_id, answer in answers:
                waiting = self._waiting.pop((key_type, runtime_id), None)
                if waiting is None:
                    continue  # already answered (a request both parked and failed), or internal
                gather, slot = waiting
                gather.answers[slot] = answer
                gather.remaining -= 1
                if gather.remaining == 0:
                    if gather.on_done is not None:
                        gather.on_done(gather.build(gather.answers), now_ms)
                    else:
                        self.apis.completed.append((gather.request_id, gather.header, gather.build(gather.answers)))

    def next_deadline_ms(self) -> int | None:
        deadlines = [d for d in (s.runtime.next_deadline_ms() for s in self.services.values()) if d is not None]
        return min(deadlines) if deadlines else None

    # FindCoordinator (KIP-699 batches keys from v4)

    def _find_coordinator(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.FindCoordinatorResponse
        if header.api_version >= 4:
            keys = list(request.coordinator_keys)[:FIND_COORDINATOR_KEYS_MAX + 1]
            if len(keys) > FIND_COORDINATOR_KEYS_MAX:
                return response_class(throttle_time_ms=0, coordinators=[response_class.Coordinator(
                    key="", node_id=-1, host="", port=-1, error_code=ErrorCode.INVALID_REQUEST,
                    error_message=f"more than {FIND_COORDINATOR_KEYS_MAX} keys")])
            coordinators = []
            for key in keys:
                code, message, node_id, host, port = self._lookup(header.api_version, request.key_type, key)
                coordinators.append(response_class.Coordinator(key=key, node_id=node_id, host=host, port=port,
                                                               error_code=code, error_message=message))
            return response_class(throttle_time_ms=0, coordinators=coordinators)
        code, message, node_id, host, port = self._lookup(header.api_version, request.key_type, request.key)
        return response_class(throttle_time_ms=0, error_code=code, error_message=message, node_id=node_id,
                              host=host, port=port)

    def _lookup(self, version: int, key_type: int, key: str) -> tuple[ErrorCode, str | None, int, str, int]:
        if key_type == COORDINATOR_KEY_TYPE_SHARE and version >= 6:
            return self._share_coordinator()
        service = self.services.get(key_type)
        if service is None:
            return ErrorCode.INVALID_REQUEST, f"coordinator key type {key_type} is not served", -1, "", -1
        if not key or len(key.encode()) > KEY_BYTES_MAX:
            code = ErrorCode.INVALID_GROUP_ID if key_type == COORDINATOR_KEY_TYPE_GROUP else ErrorCode.INVALID_REQUEST
            return code, "an empty or over-long key", -1, "", -1
        if key_type == COORDINATOR_KEY_TYPE_GROUP:
            if not self.apis.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, key):
                return ErrorCode.GROUP_AUTHORIZATION_FAILED, None, -1, "", -1
        elif not self.apis.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None, -1, "", -1
        code, node_id = service.coordinator_for(key)
        if code != ErrorCode.NONE:
            return code, None, -1, "", -1
        endpoint = self.apis.advertised_endpoint(self.broker.image.cluster.brokers[node_id])
        if endpoint is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None, -1, "", -1
        return ErrorCode.NONE, None, node_id, *endpoint

    def _share_coordinator(self) -> tuple[ErrorCode, str | None, int, str, int]:
        """FindCoordinator v6's share key type, as Kafka 3.9's KafkaApis answers it without a share
        coordinator: CLUSTER_AUTHORIZATION_FAILED without CLUSTER_ACTION (only brokers look share coordinators
        up), else COORDINATOR_NOT_AVAILABLE. Before v6 the key type is unknown: INVALID_REQUEST (see _lookup)."""
        if not self.apis.authorize_cluster(AclOperation.CLUSTER_ACTION):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None, -1, "", -1
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, "no share coordinator is served", -1, "", -1
