"""The broker's state machine for partitions, replication and metadata (sans-IO: the node or the simulator
drives it).

Theory of operation: `BrokerCore` owns the partitions this broker hosts (a `partitions.replica.Partition`
over a `partitions.log.PartitionLog` each) and reacts to three kinds of input, each with `now_ms`:
- committed metadata, as image deltas (`apply_metadata`): it opens, leads, follows and deletes partition
  replicas exactly as the delta says (Kafka's `ReplicaManager.applyDelta`), and applies topic configs;
- the replica fetcher's traffic: `next_replica_request(leader_id)` builds the OffsetsForLeaderEpoch (on a new
  leader epoch, KIP-101) or Fetch request a follower sends to a leader, and `on_replica_response` applies the
  answer (truncation, append, high watermark): both are broker/replica_fetcher.py's;
- time (`tick`): ISR shrink decisions, flush policy, retention and compaction, the high-watermark checkpoint,
  broker heartbeats to the controller.
It never sends anything itself: controller requests (registration, heartbeats, AlterPartition, forwarded
CreateTopics) wait in `take_controller_requests()`, and their answers come back through
`on_controller_response`. The Kafka API handlers (broker/apis.py) call into it for produce and fetch.

Durability: a partition's log flushes as its topic's flush.messages / flush.ms say; the high watermarks are
checkpointed to `replication-offset-checkpoint` every `HW_CHECKPOINT_INTERVAL_MS` and on close, and a restart
clamps the checkpoint into the recovered log (Kafka's behaviour).

Leadership listeners (`add_leadership_listener`) hear when this broker becomes leader of a partition of a topic
(again at each new leader epoch) or stops leading it: the coordinators load and unload their shards from them.
"""

from __future__ import annotations

import enum
import itertools
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from broker import throttle
from broker.config_sources import TOPIC_TO_BROKER_CONFIG, broker_chain, effective_topic_configs
from broker.metrics import BrokerMetrics
from broker.replica_fetcher import REPLICA_FETCH_BACKOFF_MS, ReplicaFetcher, ReplicaRequest, after_follower_truncation
from coordinator.shard import Notice
from metadata.configs import PRODUCER_ID_EXPIRATION_MS, PRODUCER_ID_EXPIRATION_MS_DEFAULT
from metadata.features import SUPPORTED_FEATURES, supported_features
from metadata.image import LocalPartition, MetadataDelta, MetadataImage
from metadata.requests import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterPartitionRequest,
    AlterPartitionsRequest,
    AlterPartitionsResponse,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    code_and_message,
    error_name,
)
from partitions.errors import (RETRIABLE_CODES, ErrorCode, KafkaError, NotLeaderOrFollowerError,
                               UnknownTopicOrPartitionError)
from partitions.cleaner import CleaningPass
from partitions.log import AppendOrigin, LogClock, PartitionLog
from partitions.log_config import LogConfig
from partitions.replica import Partition
from partitions.storage import Storage, StorageError, read_file, write_file_atomically
from partitions.records import ABORT, COMMIT, build_control_batch
from txn.producer_ids import ProducerIdManager
from txn.producer_state import ProducerStateManager

LOGS_DIRECTORY = "logs"
HW_CHECKPOINT_FILE = "replication-offset-checkpoint"
# The broker epoch of a clean stop, in the layout of Kafka's clean shutdown file (KIP-966): {"version": 0,
# "brokerEpoch": N}. Read at start for the registration's previous_broker_epoch; rewritten at every clean stop.
CLEAN_SHUTDOWN_FILE = "broker-clean-shutdown.json"
PARTITION_METADATA_FILE = "partition.metadata"
HW_CHECKPOINT_INTERVAL_MS = 5_000
ISR_CHECK_INTERVAL_MS = 1_000
LOG_TICK_INTERVAL_MS = 100
ALTER_PARTITIONS_ITEMS_MAX = 1000
RETENTION_CHECK_INTERVAL_MS = 30_000
# Bytes of segments the log cleaner reads per broker tick, over all partitions (a pass then waits for the next
# tick; a tick whose retention check starts new passes gives them as much again): compaction runs beside the
# requests instead of holding them for the whole pass (some 20 MB/s here).
LOG_CLEANER_STEP_BYTES = 512 * 1024
CONTROLLED_SHUTDOWN_MS_MAX = 15_000
# How long a forwarded request's answer waits for this broker's image to reach the controller's (then it goes out
# anyway: the write is done, only the client's next read here might miss it).
IMAGE_WAIT_MS_MAX = 5_000

TopicPartition = tuple[str, int]


class BrokerState(enum.IntEnum):
    """Where this broker's incarnation is in its life, with the codes of Kafka's BrokerState (the
    `kafka.server:type=KafkaServer,name=BrokerState` gauge): STARTING until the controller accepted this
    process's registration (a restart finds its predecessor's registration in force until that one's session
    expires, and is refused as a duplicate until then), RECOVERY while registered and fenced, RUNNING once
    unfenced and serving, then the two steps of a controlled shutdown."""

    STARTING = 1
    RECOVERY = 2
    RUNNING = 3
    PENDING_CONTROLLED_SHUTDOWN = 6
    SHUTTING_DOWN = 7


@dataclass
class HostedPartition:
    """A replica this broker hosts: the replica state machine plus what the fetcher needs."""

    topic_id: bytes
    replica: Partition
    log: PartitionLog
    log_config: LogConfig
    producer_state: ProducerStateManager
    # Follower side: the leader epoch still needs its end offset checked (KIP-101) before fetching.
    needs_epoch_check: bool = False
    fetch_backoff_until_ms: int = 0
    follower_throttled: bool = False  # in follower.replication.throttled.replicas for this broker


@dataclass
class ControllerCall:
    """A request for the active controller, and what to do with its answer."""

    call_id: int
    request: Any
    on_response: Callable[[Any, int], None]  # (response or KafkaError, now_ms)
    # A client's request forwarded to the controller: answered once this broker's image has what the controller
    # had applied when it answered (see BrokerCore.on_controller_response).
    read_your_write: bool = False


@dataclass
class BrokerRequest:
    """A request this broker sends to another broker's Kafka listener (the outbox: WriteTxnMarkers and the like).
    The runtime delivers it and calls `on_response` exactly once: with the decoded response, or a KafkaError
    (NETWORK_EXCEPTION when the destination cannot be reached, REQUEST_TIMED_OUT past `deadline_ms`)."""

    request_id: int
    destination: int
    api_key: int
    api_version: int
    request: Any
    deadline_ms: int
    on_response: Callable[[Any, int], None]  # (response or KafkaError, now_ms)


@dataclass(frozen=True)
class InternalFailure:
    """An exception out of the broker's own code that it survived (a bug): where it was caught ("poll": a
    handler group's poll, the other groups were polled; "replica": applying a leader's answer for one partition,
    which stops replicating until its leadership changes, as Kafka's fetcher marks a partition failed;
    "controller_call" and "outbox": the callback given a controller's or another broker's answer), what it
    concerned (the group, the partition, the request) and the exception. The runtime counts and logs it; the
    simulator reports it as a node error."""

    where: str
    subject: str
    error: BaseException


LeadershipListener = Callable[[str, int, int, bool, int], None]
OUTBOX_REQUESTS_MAX = 10_000
REPLICA_FAILED_BACKOFF_MS = 2**62  # a replica whose fetch answer could not be applied: no fetch until re-followed
INTER_BROKER_TIMEOUT_MS_DEFAULT = 30_000


class BrokerCore:
    """Partitions, replication and the broker's side of the metadata protocol. See the module docstring."""

    def __init__(
        self,
        node_id: int,
        host: str,
        port: int,
        roles: tuple[str, ...],
        storage: Storage,
        *,
        incarnation_id: bytes,
        default_min_insync_replicas: int = 1,
        replica_lag_time_max_ms: int = 30_000,
        heartbeat_interval_ms: int = 2_000,
        log_flush_messages: int | None = None,
        log_flush_ms: int | None = None,
        log_retention_check_interval_ms: int = RETENTION_CHECK_INTERVAL_MS,
        log_cleaner_step_bytes: int = LOG_CLEANER_STEP_BYTES,
        rack: str | None = None,
        replica_selector: str = "",
        topic_config_defaults: Mapping[str, str] | None = None,
        producer_id_expiration_ms: int | None = None,
    ) -> None:
        self.node_id = node_id
        self.rack = rack
        self.replica_selector = replica_selector  # KIP-392: "" or "rack" (broker/handlers_data.py)
        self.host = host
        self.port = port
        self.roles = roles
        self.storage = storage
        self.incarnation_id = incarnation_id
        # The feature levels this broker's code supports, as it registers them (metadata/features.py).
        self.supported_features: dict[str, tuple[int, int]] = dict(SUPPORTED_FEATURES)
        self.default_min_insync_replicas = default_min_insync_replicas
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.log_retention_check_interval_ms = log_retention_check_interval_ms
        self.log_cleaner_step_bytes = log_cleaner_step_bytes
        self._cleaning: dict[TopicPartition, CleaningPass] = {}  # passes in progress, advanced every tick
        self.base_log_config = LogConfig(flush_messages=log_flush_messages, flush_ms=log_flush_ms)
        # The broker-level configs of the node's file (Kafka's STATIC_BROKER_CONFIG), by Kafka's names.
        self.follower_quota = throttle.ReplicationQuota()  # follower.replication.throttled.rate (broker/throttle.py)
        self.static_configs: dict[str, str] = {"min.insync.replicas": str(default_min_insync_replicas)}
        if log_flush_messages is not None:
            self.static_configs["log.flush.interval.messages"] = str(log_flush_messages)
        if log_flush_ms is not None:
            self.static_configs["log.flush.interval.ms"] = str(log_flush_ms)
        for name, value in (topic_config_defaults or {}).items():  # [topic_defaults.configs], by topic names
            self.static_configs[TOPIC_TO_BROKER_CONFIG[name]] = value
        if producer_id_expiration_ms is not None:
            self.static_configs[PRODUCER_ID_EXPIRATION_MS] = str(producer_id_expiration_ms)
        self.image = MetadataImage()
        # producer.id.expiration.ms as it stands (dynamic: every hosted partition's producer state follows it)
        self.producer_id_expiration_ms = self._effective_producer_id_expiration_ms()
        self.partitions: dict[TopicPartition, HostedPartition] = {}
        self.dirty_partitions: set[TopicPartition] = set()  # appended or HW moved since the last poll
        self.failures: list[InternalFailure] = []  # survived exceptions, taken by the runtime (take_failures)
        self.notices: list[Notice] = []  # the coordinators' decisions for the node's log (take_notices)
        # Moves on whenever partitions may have changed (dirty partitions polled, metadata applied, a replica
        # removed): a follower's fetch session found quiet at one generation stays quiet while it holds.
        self.partition_generation = 0
        self.metrics = BrokerMetrics()  # counters for the metrics endpoint (broker/metrics.py)
        self.fetcher = ReplicaFetcher(self)  # the follower side of replication (broker/replica_fetcher.py)
        self.broker_epoch: int | None = None
        self.is_fenced = True
        # Kafka's BrokerServer enables request processing only once this incarnation is unfenced: a broker
        # restarted before the controller noticed still finds itself leader in its replayed metadata, and
        # serving there in the old leader epoch would let two incarnations write different batches at the same
        # offsets and epoch (found by the transactions simulation, seed 189). Until then it leads nothing.
        self.serving = False
        self.metadata_offset = 0
        self.shutdown_requested_ms: int | None = None
        self.shutdown_granted = False
        self._controller_calls: list[ControllerCall] = []
        # Answered forwarded calls waiting for the image: (metadata index wanted, give-up time ms, call, answer).
        self._awaiting_image: list[tuple[int, int, ControllerCall, Any]] = []
        self.image_waits_expired = 0  # forwarded answers sent after IMAGE_WAIT_MS_MAX without the image
        self._call_ids = itertools.count(1)
        self._registration_in_flight = False
        self._clean_shutdown_file_found = self.storage.exists(CLEAN_SHUTDOWN_FILE)
        self.previous_broker_epoch = self._read_clean_shutdown_epoch() if self._clean_shutdown_file_found else -1
        # The controller's last refusal of this broker's registration that retrying will not cure (an
        # unsupported feature level, a request an older controller cannot read): (error name, message), for
        # the node's log; None once registered or while the refusals are retriable (no controller yet).
        self.registration_refused: tuple[str, str] | None = None
        self.registrations_refused: Counter[str] = Counter()  # error name -> refusals of this process's registration
        self._heartbeat_in_flight = False
        self._next_heartbeat_ms = 0
        self._next_isr_check_ms = 0
        self._next_log_tick_ms = 0
        self.log_clock = LogClock()
        self._next_hw_checkpoint_ms = 0
        self._next_retention_ms = 0
        self._hw_checkpoint = self._read_hw_checkpoint()
        self.producer_ids = ProducerIdManager()
        self._leadership_listeners: dict[str, list[LeadershipListener]] = {}
        self._outbox: list[BrokerRequest] = []
        self._outbox_ids = itertools.count(1)
        if not self.storage.exists(LOGS_DIRECTORY):
            self.storage.makedirs(LOGS_DIRECTORY)
            self.storage.fsync_dir("")
        # Test-only planted bugs for the simulator's checkers (see partitions/replica.py); never configured.
        self.bug_hw_from_leader_leo = False
        # A planted bug for the simulator (simulations/cluster_sim.py, idle phase), never configured: a quiet
        # follower session stays parked without a walk however old its last touches are.
        self.bug_quiet_sessions_never_age = False
        self.bug_truncate_to_own_hw = False
        self.bug_follower_reads_past_hw = False
        # A planted bug for the simulator (simulations/acl_sim.py), never configured: a forwarded request is
        # answered as soon as the controller answers, before this broker's image has what it applied.
        self.bug_answer_before_image = False
        self.bug_diverges_at_epoch_end = False  # planted (follower-fetch workload): see Partition
        self.bug_lso_ignores_open_transactions = False  # test-only, the transactions simulation
        self.bug_dedup_last_batch_only = False  # test-only, the idempotence simulation
        # test-only, the idempotence simulation: a follower appends what it fetches without its producers' state
        self.bug_follower_skips_producer_state = False
        # Planted (the compaction simulations): "cleaner_past_lso" cleans up to the active segment whatever the
        # last stable offset, "cleaner_forgets_aborted" hands the cleaner no aborted transactions,
        # "cleaner_trusts_own_image" lets a follower judge whether every replica is in sync by its own metadata
        # image (a sans-IO test's, not a simulation's: with three nodes the raft leader that a trailing follower
        # does not hear from is the third replica, which must fall out of the ISR meanwhile, while the faults come
        # one network episode at a time); the others are the cleaner's own (partitions/cleaner.py CLEANER_BUGS).
        self.bug_cleaner: frozenset[str] = frozenset()
        # Partitions whose last cleaning pass failed (a segment it cannot read: Kafka's uncleanable partitions), with
        # why: not cleaned again until the node restarts; the node logs each one, the metrics count them.
        self.uncleanable_partitions: dict[TopicPartition, str] = {}

    # ------------------------------------------------------------------ metadata

    def apply_metadata(self, delta: MetadataDelta, image: MetadataImage, now_ms: int) -> None:
        """React to a committed metadata delta (Kafka's ReplicaManager.applyDelta)."""
        self.fetcher.forget_following()
        self.partition_generation += 1
        self.image = image
        self.metadata_offset = image.provenance.raft_index
        changes = delta.local_changes(self.node_id)
        for local in changes.deleted:
            self.remove_partition(local.topic_name, local.partition, now_ms)
        for local in changes.leaders:
            hosted = self._ensure_partition(local, now_ms)
            if hosted is not None:
                if hosted.replica.is_leader:  # an ISR change the controller made (a fenced broker dropped)
                    self.metrics.record_isr_change(len(hosted.replica.isr), len(local.isr))
                hosted.replica.become_leader(local.leader_epoch, local.partition_epoch, local.replicas, local.isr, now_ms)
                self.dirty_partitions.add((local.topic_name, local.partition))
                # A stale leadership (the replica already knows a newer epoch: a restarted node replaying its
                # metadata log, or an older metadata snapshot installed) is ignored by the replica, which stays
                # a follower with its truncation still owed; listeners hear only of a leadership it holds.
                if hosted.replica.is_leader and hosted.replica.leader_epoch == local.leader_epoch:
                    hosted.needs_epoch_check = False
                    self._notify_leadership(local.topic_name, local.partition, local.leader_epoch, True, now_ms)
        for local in changes.followers:
            hosted = self._ensure_partition(local, now_ms)  # a replica of an older topic of the name resigns there
            if hosted is None:
                continue
            if hosted.replica.is_leader:
                self._notify_leadership(local.topic_name, local.partition, local.leader_epoch, False, now_ms)
            log_end_offset = hosted.log.log_end_offset
            if hosted.replica.become_follower(
                local.leader, local.leader_epoch, local.partition_epoch, local.replicas, local.isr
            ):
                hosted.needs_epoch_check = True
                hosted.fetch_backoff_until_ms = 0
            after_follower_truncation(hosted, log_end_offset, now_ms)
        self._apply_topic_configs(now_ms)
        self._apply_ineligible_replicas(now_ms)
        self.fetcher.forget_following()  # replicas became leaders or followers above

    def drop_unassigned_partitions(self, image: MetadataImage, now_ms: int) -> None:
        """After a metadata snapshot replaced the image (it carries no delta against what this broker hosts):
        remove every hosted replica the snapshot no longer assigns here, deleted topics and replicas moved
        to other brokers alike, as the deleted changes of a delta would."""
        for topic, partition in sorted(self.partitions):
            named = image.topics.by_name.get(topic)
            state = None if named is None else named.partitions.get(partition)
            if state is not None and self.node_id in state.replicas:
                continue
            self.remove_partition(topic, partition, now_ms)

    def add_leadership_listener(self, topic: str, listener: "LeadershipListener") -> None:
        """Call `listener(topic, partition, leader_epoch, is_leader, now_ms)` whenever this broker becomes
        leader of a partition of `topic` (also again, at a new leader epoch) or stops leading one (it became a
        follower, or the partition was deleted). Coordinators load and unload their shards from these calls."""
        self._leadership_listeners.setdefault(topic, []).append(listener)

    def _notify_leadership(self, topic: str, partition: int, leader_epoch: int, is_leader: bool, now_ms: int) -> None:
        for listener in self._leadership_listeners.get(topic, ()):
            listener(topic, partition, leader_epoch, is_leader, now_ms)

    def _ensure_partition(self, local: LocalPartition, now_ms: int) -> HostedPartition | None:
        key = (local.topic_name, local.partition)
        hosted = self.partitions.get(key)
        if hosted is not None and hosted.topic_id == local.topic_id:
            return hosted
        if hosted is not None:  # same name, new topic: the old replica is gone
            self.remove_partition(*key, now_ms)
        directory = partition_directory(*key)
        recorded = self._discard_if_other_topic(directory, local.topic_id)
        log_config = self._log_config(local.topic_name)
        log = PartitionLog.open(self.storage, directory, log_config, now_ms, self.log_clock)
        if not recorded:
            # Once per directory, not at every load (a temporary file and two fsyncs each time), and only with the
            # first segment file: a directory without partition.metadata holds no records, so a broker that
            # finds one adopts it whatever topic left it (and a new replica costs a file creation less).
            path, topic_id = f"{directory}/{PARTITION_METADATA_FILE}", local.topic_id.hex().encode()
            log.before_first_segment_file(lambda: write_file_atomically(self.storage, path, topic_id))
        replica = Partition(
            local.topic_name,
            local.partition,
            self.node_id,
            log,
            min_insync_replicas=self._min_insync_replicas(local.topic_name),
            replica_lag_time_max_ms=self.replica_lag_time_max_ms,
        )
        replica.bug_hw_from_leader_leo = self.bug_hw_from_leader_leo
        replica.bug_truncate_to_own_hw = self.bug_truncate_to_own_hw
        replica.bug_follower_reads_past_hw = self.bug_follower_reads_past_hw
        replica.bug_diverges_at_epoch_end = self.bug_diverges_at_epoch_end
        checkpointed = self._hw_checkpoint.get(key)
        if checkpointed is not None:
            replica.set_high_watermark_on_restart(checkpointed)
        producer_state = ProducerStateManager(self.storage, directory,
                                              segment_bases=lambda: [segment.base_offset for segment in log.segments],
                                              producer_id_expiration_ms=self.producer_id_expiration_ms)
        producer_state.rebuild(log, now_ms)
        producer_state.bug_lso_ignores_open_transactions = self.bug_lso_ignores_open_transactions
        producer_state.bug_dedup_last_batch_only = self.bug_dedup_last_batch_only
        replica.set_last_stable_offset_hook(producer_state.last_stable_offset)
        hosted = HostedPartition(local.topic_id, replica, log, log_config, producer_state)
        self.partitions[key] = hosted
        return hosted

    def _discard_if_other_topic(self, directory: str, topic_id: bytes) -> bool:
        """Delete `directory` when its partition.metadata names another topic; True when it names this one."""
        path = f"{directory}/{PARTITION_METADATA_FILE}"
        if not self.storage.exists(path):
            return False
        if read_file(self.storage, path).strip() != topic_id.hex().encode():
            self.storage.delete_tree(directory)
            return False
        return True

    def remove_partition(self, topic: str, partition: int, now_ms: int) -> None:
        """Delete the replica (its topic deleted or replaced by one of the same name, or the replica moved away);
        the leadership listeners hear that a partition this broker led is no longer led here. A coordinator
        that missed it would go on writing at the old topic's leader epoch into the new topic's log."""
        self.fetcher.forget_following()
        self.partition_generation += 1
        hosted = self.partitions.pop((topic, partition), None)
        was_leading = hosted is not None and hosted.replica.is_leader
        if hosted is not None:
            leader_epoch = hosted.replica.leader_epoch
            hosted.replica.become_follower(None, leader_epoch + 1, hosted.replica.partition_epoch,
                                           hosted.replica.replicas, hosted.replica.isr)
            hosted.log.close()
        self._hw_checkpoint.pop((topic, partition), None)
        self.uncleanable_partitions.pop((topic, partition), None)
        cleaning = self._cleaning.pop((topic, partition), None)
        if cleaning is not None:
            cleaning.abandon()
        self.storage.delete_tree(partition_directory(topic, partition))
        if was_leading:
            self._notify_leadership(topic, partition, leader_epoch, False, now_ms)

    def _topic_configs(self, topic: str) -> dict[str, str]:
        """The topic's override, else this broker's dynamic config, else the dynamic default, else the file
        (broker/config_sources.py)."""
        return effective_topic_configs(self.image, self.node_id, self.static_configs, topic)

    def _log_config(self, topic: str, configs: dict[str, str] | None = None) -> LogConfig:
        """The topic's log config (from `configs`, its effective configs, when the caller has them)."""
        try:
            return LogConfig.from_topic_configs(self._topic_configs(topic) if configs is None else configs,
                                                self.base_log_config)
        except KafkaError:
            return self.base_log_config  # the controller validated them; a newer key we cannot read yet

    def _min_insync_replicas(self, topic: str, configs: dict[str, str] | None = None) -> int:
        value = (self._topic_configs(topic) if configs is None else configs).get("min.insync.replicas")
        return int(value) if value is not None else self.default_min_insync_replicas

    def _effective_producer_id_expiration_ms(self) -> int:
        chain = broker_chain(self.image, self.node_id, self.static_configs, PRODUCER_ID_EXPIRATION_MS)
        return int(chain[0][1]) if chain else PRODUCER_ID_EXPIRATION_MS_DEFAULT

    def _apply_topic_configs(self, now_ms: int) -> None:
        rate = broker_chain(self.image, self.node_id, self.static_configs, throttle.FOLLOWER_RATE_CONFIG)
        self.follower_quota.set_rate(throttle.parse_rate(rate[0][1]) if rate else None)
        expiration_ms = self._effective_producer_id_expiration_ms()
        if expiration_ms != self.producer_id_expiration_ms:
            self.producer_id_expiration_ms = expiration_ms
            for hosted in self.partitions.values():
                hosted.producer_state.producer_id_expiration_ms = expiration_ms
        configs_by_topic: dict[str, dict[str, str]] = {}
        for (topic, partition), hosted in self.partitions.items():
            configs = configs_by_topic.get(topic)
            if configs is None:
                configs = configs_by_topic[topic] = self._topic_configs(topic)  # once per topic, not per use
            hosted.follower_throttled = throttle.is_throttled(
                configs.get(throttle.FOLLOWER_REPLICAS_CONFIG), partition, self.node_id)
            log_config = self._log_config(topic, configs)
            if log_config != hosted.log_config:
                hosted.log_config = log_config
                hosted.log.config = log_config
                if hosted.log.has_timed_work:  # a flush.ms set over records not yet flushed
                    self.log_clock.timed.add(hosted.log)
            min_isr = self._min_insync_replicas(topic, configs)
            if min_isr != hosted.replica.min_insync_replicas:
                hosted.replica.set_min_insync_replicas(min_isr, now_ms)

    def _apply_ineligible_replicas(self, now_ms: int) -> None:
        brokers = self.image.cluster.brokers
        ineligible = frozenset(
            broker_id for broker_id, registration in brokers.items() if not registration.is_active
        )
        for hosted in self.partitions.values():
            if hosted.replica.is_leader and hosted.replica.ineligible_replicas != ineligible:
                hosted.replica.set_ineligible_replicas(ineligible, now_ms)

    # ------------------------------------------------------------------ lookups for the API handlers

    def hosted(self, topic: str, partition: int) -> HostedPartition | None:
        return self.partitions.get((topic, partition))

    def leader_of(self, topic: str, partition: int) -> int:
        topic_image = self.image.topics.by_name.get(topic)
        if topic_image is None or partition not in topic_image.partitions:
            return -1
        return topic_image.partitions[partition].leader

    # ------------------------------------------------------------------ time

    def tick(self, now_ms: int) -> None:
        """Periodic work. Cheap when nothing is due."""
        if self._awaiting_image:
            self._release_awaiting_image(now_ms)
        self._maybe_register_or_heartbeat(now_ms)
        self._maybe_request_producer_ids(now_ms)
        if now_ms >= self._next_isr_check_ms:
            # Kafka checks every replica.lag.time.max.ms / 2; a quarter of it here, and at least every second
            # when it is short: a walk over every hosted partition that finds nothing to do when all is well.
            self._next_isr_check_ms = now_ms + max(ISR_CHECK_INTERVAL_MS, self.replica_lag_time_max_ms // 4)
            for hosted in self.partitions.values():
                proposal = hosted.replica.maybe_shrink_isr(now_ms)
                if proposal is not None:
                    self._send_alter_partition(hosted, proposal)
        if now_ms >= self._next_log_tick_ms:
            # Time-based log work (flush.ms, file.delete.delay.ms) is due at most every LOG_TICK_INTERVAL_MS,
            # and only the logs that have some are visited (partitions/log.py LogClock): a call per log every
            # tick made idle cost grow with the partitions hosted.
            self._next_log_tick_ms = now_ms + LOG_TICK_INTERVAL_MS
            clock = self.log_clock
            clock.ms = max(clock.ms, now_ms)
            for log in list(clock.timed):
                if not log.closed:
                    log.maybe_flush(now_ms)
                if log.closed or not log.has_timed_work:
                    clock.timed.discard(log)
        if now_ms >= self._next_hw_checkpoint_ms:
            self._next_hw_checkpoint_ms = now_ms + HW_CHECKPOINT_INTERVAL_MS
            self.checkpoint_high_watermarks()
        if self._cleaning:
            self._advance_cleaning(now_ms, self.log_cleaner_step_bytes)
        if now_ms >= self._next_retention_ms:
            self._next_retention_ms = now_ms + self.log_retention_check_interval_ms
            self._run_log_cleanup(now_ms)

    def _run_log_cleanup(self, now_ms: int) -> None:
        # Every replica applies retention on its own, as Kafka's LogManager does. A compaction pass starts here and
        # goes on for as much of this tick's cleaner budget as is left; what it does not finish, the next ticks do.
        budget = self.log_cleaner_step_bytes
        for key, hosted in self.partitions.items():
            if hosted.log_config.delete:
                log_start_offset = hosted.log.log_start_offset
                hosted.log.apply_retention(now_ms)
                if hosted.log.log_start_offset != log_start_offset:  # nothing deleted: nothing to follow
                    hosted.replica.log_start_moved()
                    hosted.producer_state.on_log_start_offset(hosted.log.log_start_offset)
                    self.dirty_partitions.add(key)  # fetchers learn the new log start
            hosted.producer_state.remove_expired(now_ms)
            if hosted.log_config.compact and key not in self.uncleanable_partitions and key not in self._cleaning:
                # Open transactions are not cleaned: the cleanable range ends at the last stable offset.
                state = hosted.producer_state
                aborted = [(e.producer_id, e.first_offset, e.last_offset) for e in state.aborted_index.entries]
                if "cleaner_forgets_aborted" in self.bug_cleaner:
                    aborted = []
                last_stable_offset = first_uncleanable = hosted.replica.last_stable_offset
                if "cleaner_past_lso" in self.bug_cleaner:
                    first_uncleanable = None
                # Tombstones and markers outlive their horizon while a replica may hold what they delete without
                # having fetched them (partitions/cleaner.py): unless every replica holds the cleanable range, as the
                # leader knows it (a follower's metadata image may trail the leader's ISR).
                if "cleaner_trusts_own_image" in self.bug_cleaner:
                    in_sync = set(hosted.replica.replicas) <= set(hosted.replica.isr)
                else:
                    in_sync = last_stable_offset <= hosted.replica.replicated_offset
                self._cleaning[key] = hosted.log.start_compaction(
                    now_ms, first_uncleanable_offset=first_uncleanable, aborted=aborted,
                    last_records=state.last_records_of_active_producers(), drop_aborted=state.aborted_index.remove,
                    bugs=self.bug_cleaner, all_replicas_in_sync=in_sync)
                budget -= self._advance_cleaning(now_ms, budget, key)
            hosted.producer_state.aborted_index.sync()

    def _advance_cleaning(self, now_ms: int, budget: int, only: TopicPartition | None = None) -> int:
        """Advance the compaction passes in progress (or `only` that one) by about `budget` bytes in all.
        Returns the bytes read. A pass that cannot read a batch leaves its partition uncleanable."""
        spent = 0
        for key in [only] if only is not None else list(self._cleaning):
            if spent >= budget:
                break
            cleaning = self._cleaning[key]
            hosted = self.partitions.get(key)
            if hosted is None or hosted.log is not cleaning.log:
                cleaning.abandon()
                del self._cleaning[key]
                continue
            try:
                spent += cleaning.advance(budget - spent)
            except KafkaError as error:  # a batch the pass cannot read: the log is as it was; the broker goes on
                self.uncleanable_partitions[key] = error.message
            if cleaning.done:
                del self._cleaning[key]
                hosted.log.delete_due_files(now_ms)
                hosted.producer_state.aborted_index.sync()
        return spent

    def close(self) -> None:
        for cleaning in self._cleaning.values():
            cleaning.abandon()
        self._cleaning.clear()
        self.checkpoint_high_watermarks()
        for hosted in self.partitions.values():
            hosted.log.flush()
            hosted.producer_state.write_snapshot(hosted.log.log_end_offset)
            hosted.log.close()
        self.partitions.clear()
        if self.broker_epoch is not None:  # last: the process of this epoch serves nothing more
            write_file_atomically(self.storage, CLEAN_SHUTDOWN_FILE,
                                  json.dumps({"version": 0, "brokerEpoch": self.broker_epoch}).encode())

    def _read_clean_shutdown_epoch(self) -> int:
        """The epoch the clean shutdown file (which exists) names, -1 if this code cannot read it: the new
        incarnation then waits out the old session, as without the file."""
        try:
            document = json.loads(read_file(self.storage, CLEAN_SHUTDOWN_FILE))
            epoch = document["brokerEpoch"]
        except (StorageError, ValueError, TypeError, KeyError):
            return -1
        valid = isinstance(epoch, int) and not isinstance(epoch, bool) and 0 <= epoch < 2**63
        return epoch if valid else -1

    # ------------------------------------------------------------------ high-watermark checkpoint

    def _read_hw_checkpoint(self) -> dict[TopicPartition, int]:
        """Kafka's text layout: version line, count line, then "topic partition offset" lines."""
        if not self.storage.exists(HW_CHECKPOINT_FILE):
            return {}
        lines = read_file(self.storage, HW_CHECKPOINT_FILE).decode(errors="replace").splitlines()
        result = {}
        for line in lines[2:]:
            parts = line.rsplit(" ", 2)
            if len(parts) == 3 and parts[1].isdigit() and parts[2].lstrip("-").isdigit():
                result[(parts[0], int(parts[1]))] = int(parts[2])
        return result

    def checkpoint_high_watermarks(self) -> None:
        entries = {key: hosted.replica.high_watermark for key, hosted in self.partitions.items()}
        if entries == self._hw_checkpoint:
            return
        lines = ["0", str(len(entries))] + [f"{topic} {partition} {hw}" for (topic, partition), hw in sorted(entries.items())]
        write_file_atomically(self.storage, HW_CHECKPOINT_FILE, ("\n".join(lines) + "\n").encode())
        self._hw_checkpoint = entries

    # ------------------------------------------------------------------ ISR changes through the controller

    def after_follower_fetch(self, hosted: HostedPartition, isr_proposal: tuple[int, ...] | None) -> None:
        if isr_proposal is not None:
            self._send_alter_partition(hosted, isr_proposal)

    def _send_alter_partition(self, hosted: HostedPartition, proposed_isr: tuple[int, ...]) -> None:
        pending = hosted.replica.pending_isr_change
        if self.broker_epoch is None or pending is None:
            return
        request = AlterPartitionRequest(
            broker_id=self.node_id,
            broker_epoch=self.broker_epoch,
            topic_id=hosted.topic_id,
            partition=hosted.replica.partition,
            leader_epoch=pending.leader_epoch,
            partition_epoch=pending.partition_epoch,
            new_isr=tuple(proposed_isr),
        )

        def on_response(response: Any, now_ms: int) -> None:
            current = self.partitions.get((hosted.replica.topic, hosted.replica.partition))
            if current is not hosted:
                return
            if isinstance(response, AlterPartitionResponse) and response.error_code == ErrorCode.NONE:
                self.metrics.record_isr_change(len(hosted.replica.isr), len(response.isr))
                hosted.replica.apply_isr_change(response.isr, response.partition_epoch, now_ms,
                                                leader_epoch=response.leader_epoch)
                self.dirty_partitions.add((hosted.replica.topic, hosted.replica.partition))
                return
            code = response.code if isinstance(response, KafkaError) else ErrorCode(response.error_code)
            if hosted.replica.alter_partition_failed(code) and hosted.replica.pending_isr_change is not None:
                self._send_alter_partition(hosted, hosted.replica.pending_isr_change.proposed_isr)

        self.call_controller(request, on_response)

    # ------------------------------------------------------------------ controller calls

    def call_controller(self, request: Any, on_response: Callable[[Any, int], None],
                        read_your_write: bool = False) -> None:
        self._controller_calls.append(ControllerCall(next(self._call_ids), request, on_response, read_your_write))

    def take_controller_requests(self) -> list[ControllerCall]:
        """The calls waiting for the controller, AlterPartition items coalesced into AlterPartitions requests
        of at most ALTER_PARTITIONS_ITEMS_MAX (one Raft entry each, not one per partition)."""
        calls, self._controller_calls = self._controller_calls, []
        alters = [call for call in calls if isinstance(call.request, AlterPartitionRequest)]
        if len(alters) <= 1 or self.broker_epoch is None:
            return calls
        others = [call for call in calls if not isinstance(call.request, AlterPartitionRequest)]
        for start in range(0, len(alters), ALTER_PARTITIONS_ITEMS_MAX):
            others.append(self._alter_partitions_call(alters[start : start + ALTER_PARTITIONS_ITEMS_MAX]))
        return others

    def _alter_partitions_call(self, alters: list[ControllerCall]) -> ControllerCall:
        request = AlterPartitionsRequest(broker_id=self.node_id, broker_epoch=self.broker_epoch,
                                         items=tuple(call.request for call in alters))

        def on_response(response: Any, now_ms: int) -> None:
            if isinstance(response, AlterPartitionsResponse) and len(response.items) == len(alters):
                for call, item in zip(alters, response.items):
                    call.on_response(item, now_ms)
                return
            failure = response if isinstance(response, KafkaError) else KafkaError(
                f"unexpected answer to AlterPartitions: {type(response).__name__}", ErrorCode.UNKNOWN_SERVER_ERROR)
            for call in alters:
                call.on_response(failure, now_ms)

        return ControllerCall(next(self._call_ids), request, on_response)

    # ------------------------------------------------------------------ transaction markers

    def write_txn_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                         coordinator_epoch: int, committed: bool, now_ms: int) -> int:
        """Append a COMMIT or ABORT marker for the producer's transaction as this partition's leader (a
        control batch; acks=all rules: refused below min.insync.replicas). Returns the marker's offset; the
        caller waits for the high watermark to pass it. Raises UNKNOWN_TOPIC_OR_PARTITION,
        NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, TRANSACTION_COORDINATOR_FENCED (a deposed coordinator),
        INVALID_PRODUCER_EPOCH (an older producer epoch), as KafkaError."""
        hosted = self.hosted(topic, partition)
        if hosted is None:
            if topic in self.image.topics.by_name:
                raise NotLeaderOrFollowerError(f"{topic}-{partition}: not a replica here")
            raise UnknownTopicOrPartitionError(f"{topic}-{partition}: unknown")
        if not hosted.replica.is_leader or not self.serving:
            raise NotLeaderOrFollowerError(f"{topic}-{partition}: not the leader here")
        hosted.producer_state.check_marker(producer_id, producer_epoch, coordinator_epoch)
        batch = build_control_batch(COMMIT if committed else ABORT, producer_id, producer_epoch,
                                    coordinator_epoch, now_ms)
        result = hosted.replica.append_records(bytearray(batch), -1, now_ms, origin=AppendOrigin.COORDINATOR)
        if result.append_info is not None:
            headers = result.append_info.batch_headers
            hosted.producer_state.update(headers, {headers[0].base_offset: (committed, coordinator_epoch)})
        self.dirty_partitions.add((topic, partition))
        return result.last_offset

    # ------------------------------------------------------------------ the outbox

    def send_to_broker(self, destination: int, api_key: int, api_version: int, request: Any,
                       on_response: Callable[[Any, int], None], now_ms: int,
                       timeout_ms: int = INTER_BROKER_TIMEOUT_MS_DEFAULT) -> None:
        """Queue a Kafka request for broker `destination`; the runtime answers `on_response` exactly once.
        With `OUTBOX_REQUESTS_MAX` requests already queued, the answer is REQUEST_TIMED_OUT at once."""
        if len(self._outbox) >= OUTBOX_REQUESTS_MAX:
            on_response(KafkaError(f"outbox full ({OUTBOX_REQUESTS_MAX} requests)", ErrorCode.REQUEST_TIMED_OUT), now_ms)
            return
        self._outbox.append(BrokerRequest(next(self._outbox_ids), destination, api_key, api_version, request,
                                          now_ms + timeout_ms, on_response))

    def replica_failed(self, key: TopicPartition, hosted: HostedPartition, error: BaseException) -> None:
        """Applying a leader's answer for `key` raised (a bug): the replica stops fetching until its leadership
        changes (become_follower with a new epoch clears the backoff), as Kafka's fetcher marks the partition
        failed; the other partitions replicate on."""
        hosted.fetch_backoff_until_ms = REPLICA_FAILED_BACKOFF_MS
        self.failures.append(InternalFailure("replica", f"{key[0]}-{key[1]}", error))

    def take_failures(self) -> list[InternalFailure]:
        failures, self.failures = self.failures, []
        return failures

    def take_notices(self) -> list[Notice]:
        notices, self.notices = self.notices, []
        return notices

    def take_broker_requests(self) -> list[BrokerRequest]:
        requests, self._outbox = self._outbox, []
        return requests

    def broker_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        """(host, Kafka port) of a registered broker, from the metadata image."""
        broker = self.image.cluster.brokers.get(broker_id)
        return None if broker is None else (broker.host, broker.port)

    def _maybe_register_or_heartbeat(self, now_ms: int) -> None:
        if self.broker_epoch is None:
            if not self._registration_in_flight and now_ms >= self._next_heartbeat_ms:
                self._registration_in_flight = True
                self.call_controller(
                    BrokerRegistrationRequest(
                        broker_id=self.node_id, incarnation_id=self.incarnation_id, host=self.host, port=self.port,
                        rack=self.rack, roles=tuple(self.roles),
                        features=supported_features(self.supported_features),
                        previous_broker_epoch=self.previous_broker_epoch,
                    ),
                    self._on_registration,
                )
            return
        if self._heartbeat_in_flight or now_ms < self._next_heartbeat_ms:
            return
        self._heartbeat_in_flight = True
        self.call_controller(
            BrokerHeartbeatRequest(
                broker_id=self.node_id,
                broker_epoch=self.broker_epoch,
                current_metadata_offset=self.metadata_offset,
                want_fence=False,
                want_shutdown=self.shutdown_requested_ms is not None,
            ),
            self._on_heartbeat,
        )

    def _on_registration(self, response: Any, now_ms: int) -> None:
        self._registration_in_flight = False
        if isinstance(response, BrokerRegistrationResponse) and response.error_code == ErrorCode.NONE:
            self.broker_epoch = response.broker_epoch
            self.registration_refused = None
            self._next_heartbeat_ms = now_ms
            if self._clean_shutdown_file_found:
                # It spoke of a process that has ended, and this one is registered: as Kafka's broker, delete it,
                # so the data directory holds one only after a clean stop (the next close() writes it again).
                self._clean_shutdown_file_found = False
                try:
                    self.storage.delete(CLEAN_SHUTDOWN_FILE)
                except StorageError:
                    pass  # left behind, it names an epoch below this one's, which no registration ever has again
            return
        self._next_heartbeat_ms = now_ms + REPLICA_FETCH_BACKOFF_MS * 5
        if isinstance(response, (BrokerRegistrationResponse, KafkaError)):
            code, message = code_and_message(response)
            if code not in RETRIABLE_CODES:
                self.registration_refused = (error_name(code), message)
                self.registrations_refused[error_name(code)] += 1
                if code != ErrorCode.DUPLICATE_BROKER_REGISTRATION:
                    # A controller of a release that refuses tagged fields it does not know: ask it plainly.
                    self.previous_broker_epoch = -1

    def _on_heartbeat(self, response: Any, now_ms: int) -> None:
        self._heartbeat_in_flight = False
        interval = self.heartbeat_interval_ms
        if self.shutdown_requested_ms is not None or self.is_fenced:
            interval = min(interval, 250)  # converge quickly while starting up or shutting down
        self._next_heartbeat_ms = now_ms + interval
        if not isinstance(response, BrokerHeartbeatResponse):
            return
        if response.error_code == ErrorCode.STALE_BROKER_EPOCH or response.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED:
            self.broker_epoch = None  # register again (e.g. after being unregistered)
            self._next_heartbeat_ms = now_ms
            return
        if response.error_code != ErrorCode.NONE:
            return
        self.is_fenced = response.is_fenced
        if not response.is_fenced:
            self.serving = True
        if response.should_shut_down:
            self.shutdown_granted = True

    def _maybe_request_producer_ids(self, now_ms: int) -> None:
        if self.broker_epoch is None or not self.producer_ids.needs_block(now_ms):
            return
        self.producer_ids.on_block_requested(now_ms)

        def on_response(response: Any, now_ms: int) -> None:
            if isinstance(response, AllocateProducerIdsResponse) and response.error_code == ErrorCode.NONE:
                self.producer_ids.on_block(response.producer_id_start, response.producer_id_len)
            else:
                self.producer_ids.on_block_failed(now_ms)

        self.call_controller(AllocateProducerIdsRequest(broker_id=self.node_id, broker_epoch=self.broker_epoch),
                             on_response)

    @property
    def state(self) -> BrokerState:
        if self.shutdown_granted:
            return BrokerState.SHUTTING_DOWN
        if self.shutdown_requested_ms is not None:
            return BrokerState.PENDING_CONTROLLED_SHUTDOWN
        if self.broker_epoch is None:
            return BrokerState.STARTING
        return BrokerState.RUNNING if self.serving and not self.is_fenced else BrokerState.RECOVERY

    def request_controlled_shutdown(self, now_ms: int) -> None:
        """Ask the controller to move leadership away; `shutdown_granted` turns True when it has."""
        if self.shutdown_requested_ms is None:
            self.shutdown_requested_ms = now_ms
            self._next_heartbeat_ms = now_ms

    def controlled_shutdown_done(self, now_ms: int) -> bool:
        """Granted, or not worth waiting for: never registered, waited CONTROLLED_SHUTDOWN_MS_MAX, or no other
        broker can take this one's leaderships (`no_successor`)."""
        assert self.shutdown_requested_ms is not None, "no controlled shutdown was requested"
        return (
            self.shutdown_granted
            or self.broker_epoch is None
            or now_ms - self.shutdown_requested_ms >= CONTROLLED_SHUTDOWN_MS_MAX
            or self.no_successor()
        )

    def no_successor(self) -> bool:
        """Every other broker is fenced or shutting down, as the committed metadata says: the whole cluster is
        stopping (`flotilla up` interrupted, every node sent SIGTERM at once). Nobody can take this broker's
        leaderships, so the grant moves nothing, and waiting for it may outlast the quorum: the nodes granted
        first leave, and a shutdown that is not committed yet then never is."""
        return not any(registration.is_active for broker_id, registration in self.image.cluster.brokers.items()
                       if broker_id != self.node_id and "broker" in registration.roles)

    def on_controller_response(self, call: ControllerCall, response: Any, now_ms: int, applied_index: int = 0) -> None:
        """Hand a controller call its answer (or KafkaError). A callback that raises (a bug) is a failure the
        node survives (`failures`), as Kafka's network client logs an uncaught error in a completion handler.

        `applied_index` is the controller's last applied metadata index when it answered. A client's forwarded
        request (`read_your_write`) is held until this broker's image has reached it, for at most
        IMAGE_WAIT_MS_MAX: the client's next read here (DescribeConfigs after IncrementalAlterConfigs, Metadata
        after CreateTopics) then sees its write, as on the controller itself. So this broker can name itself the
        controller to clients (NodeState.controller_id_for_clients) without them missing their own writes."""
        if call.read_your_write and applied_index > self.image.provenance.raft_index and not self.bug_answer_before_image:
            self._awaiting_image.append((applied_index, now_ms + IMAGE_WAIT_MS_MAX, call, response))
            return
        self._complete_controller_call(call, response, now_ms)

    @property
    def awaiting_image(self) -> bool:
        """Answers are held for this broker's image (an observer's runtime then fetches the metadata at once)."""
        return bool(self._awaiting_image)

    def _release_awaiting_image(self, now_ms: int) -> None:
        """The held answers whose index the image has reached, or whose wait is over."""
        applied = self.image.provenance.raft_index
        held, self._awaiting_image = self._awaiting_image, []
        for index, give_up_ms, call, response in held:
            if index <= applied or now_ms >= give_up_ms:
                self.image_waits_expired += index > applied
                self._complete_controller_call(call, response, now_ms)
            else:
                self._awaiting_image.append((index, give_up_ms, call, response))

    def _complete_controller_call(self, call: ControllerCall, response: Any, now_ms: int) -> None:
        try:
            call.on_response(response, now_ms)
        except StorageError:
            raise  # the disk failed: not a bug to survive; the node stops (net/node.py)
        except Exception as error:
            self.failures.append(InternalFailure("controller_call", type(call.request).__name__, error))

    def on_broker_response(self, sent: BrokerRequest, answer: Any, now_ms: int) -> None:
        """Hand an outbox request its answer (the response, or KafkaError); a callback that raises (a bug) is a
        failure the node survives, as in `on_controller_response`."""
        try:
            sent.on_response(answer, now_ms)
        except StorageError:
            raise
        except Exception as error:
            self.failures.append(InternalFailure("outbox", f"api {sent.api_key} to broker {sent.destination}", error))

    # ------------------------------------------------------------------ replica fetcher (broker/replica_fetcher.py)

    def replica_leaders(self) -> set[int]:
        """Brokers this broker currently fetches from."""
        return self.fetcher.replica_leaders()

    def next_replica_request(self, leader_id: int, now_ms: int) -> ReplicaRequest | None:
        return self.fetcher.next_replica_request(leader_id, now_ms)

    def on_replica_response(self, sent: ReplicaRequest, response: Any, now_ms: int) -> None:
        self.fetcher.on_replica_response(sent, response, now_ms)


def partition_directory(topic: str, partition: int) -> str:
    return f"{LOGS_DIRECTORY}/{topic}-{partition}"

