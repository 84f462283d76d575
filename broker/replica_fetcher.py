"""The replica fetcher, the follower side of replication (Kafka's ReplicaFetcherThread and
AbstractFetcherThread), sans-IO: what a follower asks each leader and what it does with the answers.

Theory of operation. The node (or the simulator) runs one fetcher task per leader broker; each asks
`next_replica_request(leader_id, now_ms)` for the request to send and hands the answer (or None for a lost
one) to `on_replica_response`. A partition whose leader epoch is new is first checked with
OffsetsForLeaderEpoch (KIP-101: truncate to where this replica and the leader agree); otherwise one Fetch
carries every partition followed from that leader, in an incremental fetch session (KIP-227) whose
positions `FollowerFetchSession` keeps. Fetched records are appended as follower; the leader's high
watermark and log start offset follow. A partition that errs backs off for REPLICA_FETCH_BACKOFF_MS. The
follower.replication.throttled.rate quota (broker/throttle.py) holds throttled partitions back.

`ReplicaFetcher` works on its BrokerCore's hosted partitions (`core.partitions`) and marks the partitions it
moved in `core.dirty_partitions` (waiting produce and fetch requests re-check them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker.fetch_session import next_epoch
from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode, KafkaError
from partitions.replica import EpochEndOffset
from partitions.storage import StorageError
from txn.producer_state import markers_in

if TYPE_CHECKING:
    from broker.core import BrokerCore, HostedPartition

TopicPartition = tuple[str, int]
REPLICA_FETCH_MAX_WAIT_MS = 500
REPLICA_FETCH_MIN_BYTES = 1
REPLICA_FETCH_RESPONSE_BYTES_MAX = 10 * 1024 * 1024
REPLICA_FETCH_PARTITION_BYTES_MAX = 1024 * 1024
REPLICA_FETCH_BACKOFF_MS = 200


@dataclass
class ReplicaRequest:
    """A request the fetcher sends to a leader, with what it was built from."""

    leader_id: int
    api_key: int
    api_version: int
    request: Any
    fetch_offsets: dict[TopicPartition, int] = field(default_factory=dict)
    # A Fetch in a session (KIP-227): every followed partition's position once this request is answered
    session_positions: dict[TopicPartition, tuple] | None = None


@dataclass
class FollowerFetchSession:
    """The fetcher's side of its incremental fetch session with one leader (KIP-227, broker/fetch_session.py):
    the session id the leader gave (0: none yet), the epoch of the next request (0: a full fetch that opens
    one) and each partition's position as the leader's session holds it."""

    session_id: int = 0
    epoch: int = 0
    positions: dict[TopicPartition, tuple] = field(default_factory=dict)
    # (the broker's partition generation, fetch offsets) when the last request named no partition although it
    # covered every partition followed from this leader: until the generation moves, partitions are dirtied
    # or an answer brings news, the next request is the same (ReplicaFetcher.next_replica_request)
    quiet: tuple[int, dict[TopicPartition, int]] | None = None


class ReplicaFetcher:
    """The follower side of replication for one broker (see the module docstring)."""

    def __init__(self, core: "BrokerCore") -> None:
        self.core = core
        self._following_cache: dict[int, list] | None = None  # see _following
        self.fetch_sessions: dict[int, FollowerFetchSession] = {}  # leader id -> our fetch session with it

    def forget_following(self) -> None:
        """Who follows whom changed (metadata applied, a replica removed): rebuild the cache on next use."""
        self._following_cache = None

    def replica_leaders(self) -> set[int]:
        """Brokers this broker currently fetches from."""
        return set(self._following())

    def _following(self) -> dict[int, list[tuple[TopicPartition, HostedPartition]]]:
        """leader id -> the partitions followed from it, in (topic, partition) order. Cached: who follows whom
        changes only when metadata is applied or a replica is removed (both drop the cache), and the node
        asks after every event."""
        if self._following_cache is None:
            following: dict[int, list[tuple[TopicPartition, HostedPartition]]] = {}
            for key, hosted in sorted(self.core.partitions.items()):
                if not hosted.replica.is_leader and hosted.replica.leader >= 0:
                    following.setdefault(hosted.replica.leader, []).append((key, hosted))
            self._following_cache = following
        return self._following_cache

    def next_replica_request(self, leader_id: int, now_ms: int) -> ReplicaRequest | None:
        """The next request to `leader_id`: OffsetsForLeaderEpoch for partitions whose leader epoch is new,
        otherwise one Fetch for every partition it leads for us. None when there is nothing to ask."""
        session = self.fetch_sessions.get(leader_id)
        if session is not None and session.quiet is not None and session.quiet[0] == self.core.partition_generation \
                and not self.core.dirty_partitions:
            return self._fetch_request_message(leader_id, session, {}, {}, session.quiet[1], session.positions)
        throttled = self.core.follower_quota.exceeded(now_ms)
        followed = [(key, hosted) for key, hosted in self._following().get(leader_id, ())
                    if hosted.fetch_backoff_until_ms <= now_ms and not (throttled and hosted.follower_throttled)]
        if not followed:
            return None
        checks = [(key, hosted) for key, hosted in followed if hosted.needs_epoch_check]
        if checks:
            return self._epoch_check_request(leader_id, checks, now_ms)
        return self._fetch_request(leader_id, followed, now_ms)

    def _epoch_check_request(self, leader_id: int, checks, now_ms: int) -> ReplicaRequest:
        request_class = messages.OffsetForLeaderEpochRequest
        topics: dict[str, list] = {}
        for (topic, partition), hosted in checks:
            fetch_state = hosted.replica.follower_fetch_request(now_ms)
            topics.setdefault(topic, []).append(
                request_class.OffsetForLeaderPartition(
                    partition=partition,
                    current_leader_epoch=hosted.replica.leader_epoch,
                    leader_epoch=fetch_state.last_fetched_epoch,
                )
            )
        request = request_class(
            replica_id=self.core.node_id,
            topics=[request_class.OffsetForLeaderTopic(topic=t, partitions=p) for t, p in topics.items()],
        )
        return ReplicaRequest(leader_id, ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, request)

    def _fetch_request(self, leader_id: int, followed, now_ms: int) -> ReplicaRequest:
        """One Fetch for every partition followed from `leader_id`: in full to open a session, then only the
        partitions whose position moved and those no longer followed (ForgottenTopicsData)."""
        request_class = messages.FetchRequest
        offsets = {}
        positions: dict[TopicPartition, tuple] = {}
        throttled_count = sum(1 for _, hosted in followed if hosted.follower_throttled)
        allowance = self.core.follower_quota.available(now_ms) if throttled_count else None
        throttled_bytes_max = None if allowance is None else max(1, min(REPLICA_FETCH_PARTITION_BYTES_MAX,
                                                                         allowance // throttled_count))
        for key, hosted in followed:
            # What Partition.follower_fetch_request says (our LEO, the leader epoch) without building it: this
            # loop runs for every followed partition on every fetch, most of an idle follower's work.
            log = hosted.log
            fetch_offset = log.log_end_offset
            offsets[key] = fetch_offset
            partition_max_bytes = (REPLICA_FETCH_PARTITION_BYTES_MAX
                                   if throttled_bytes_max is None or not hosted.follower_throttled else throttled_bytes_max)
            positions[key] = (hosted.replica.leader_epoch, fetch_offset, log.log_start_offset, partition_max_bytes)
        session = self.fetch_sessions.setdefault(leader_id, FollowerFetchSession())
        incremental = session.epoch != 0
        topics: dict[str, list] = {}
        for (topic, partition), position in positions.items():
            if incremental and session.positions.get((topic, partition)) == position:
                continue
            current_leader_epoch, fetch_offset, log_start_offset, partition_max_bytes = position
            topics.setdefault(topic, []).append(request_class.FetchPartition(
                partition=partition, current_leader_epoch=current_leader_epoch, fetch_offset=fetch_offset,
                log_start_offset=log_start_offset, partition_max_bytes=partition_max_bytes))
        forgotten: dict[str, list[int]] = {}
        if incremental:
            for topic, partition in session.positions.keys() - positions.keys():
                forgotten.setdefault(topic, []).append(partition)
        everything = len(followed) == len(self._following().get(leader_id, ()))
        quiet = incremental and not topics and not forgotten and not throttled_count and everything
        session.quiet = (self.core.partition_generation, offsets) if quiet else None
        return self._fetch_request_message(leader_id, session, topics, forgotten, offsets, positions)

    def _fetch_request_message(self, leader_id: int, session: FollowerFetchSession, topics: dict[str, list],
                               forgotten: dict[str, list[int]], offsets: dict[TopicPartition, int],
                               positions: dict[TopicPartition, tuple]) -> ReplicaRequest:
        request_class = messages.FetchRequest
        request = request_class(
            replica_id=self.core.node_id,
            max_wait_ms=REPLICA_FETCH_MAX_WAIT_MS,
            min_bytes=REPLICA_FETCH_MIN_BYTES,
            max_bytes=REPLICA_FETCH_RESPONSE_BYTES_MAX,
            isolation_level=0,
            session_id=session.session_id,
            session_epoch=session.epoch,
            topics=[request_class.FetchTopic(topic=t, partitions=p) for t, p in topics.items()],
            forgotten_topics_data=[request_class.ForgottenTopic(topic=t, partitions=sorted(p))
                                   for t, p in sorted(forgotten.items())],
            rack_id="",
        )
        return ReplicaRequest(leader_id, ApiKey.FETCH, 11, request, offsets, positions)

    def _fetch_session_answered(self, sent: ReplicaRequest, response: Any) -> None:
        """Move our session with the leader on after a Fetch: the next epoch (or the id of a session just
        opened), the positions the leader now holds; any failure starts over with a full fetch."""
        if response is None or response.error_code != ErrorCode.NONE or sent.session_positions is None:
            self.fetch_sessions.pop(sent.leader_id, None)
            return
        session = self.fetch_sessions.setdefault(sent.leader_id, FollowerFetchSession())
        if sent.request.session_epoch == 0:
            session.session_id = response.session_id
            session.epoch = 1 if response.session_id else 0  # no session given: full fetches
        else:
            session.epoch = next_epoch(session.epoch)
        session.positions = sent.session_positions

    def on_replica_response(self, sent: ReplicaRequest, response: Any, now_ms: int) -> None:
        """Apply a leader's answer; `response` is None when the request failed (connection lost)."""
        if sent.api_key == ApiKey.FETCH:
            self._fetch_session_answered(sent, response)
            session = self.fetch_sessions.get(sent.leader_id)  # gone after a failure or an error
            if session is not None and response.responses:
                session.quiet = None  # news or a partition error: the next request is worked out afresh
        if response is None:
            for hosted in self._followed_by(sent.leader_id):
                hosted.fetch_backoff_until_ms = now_ms + REPLICA_FETCH_BACKOFF_MS
            return
        if sent.api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
            self._apply_epoch_answers(sent.leader_id, response, now_ms)
        else:
            self._apply_fetch_response(sent, response, now_ms)

    def _followed_by(self, leader_id: int) -> list[HostedPartition]:
        return [h for h in self.core.partitions.values() if h.replica.leader == leader_id and not h.replica.is_leader]

    def _follower(self, leader_id: int, topic: str, partition: int) -> HostedPartition | None:
        hosted = self.core.partitions.get((topic, partition))
        if hosted is None or hosted.replica.is_leader or hosted.replica.leader != leader_id:
            return None  # the metadata moved on while the request was out
        return hosted

    def _apply_epoch_answers(self, leader_id: int, response: Any, now_ms: int) -> None:
        for topic_result in response.topics:
            for result in topic_result.partitions:
                key = (topic_result.topic, result.partition)
                hosted = self._follower(leader_id, *key)
                if hosted is None or not hosted.needs_epoch_check:
                    continue
                if result.error_code != ErrorCode.NONE:
                    hosted.fetch_backoff_until_ms = now_ms + REPLICA_FETCH_BACKOFF_MS
                    continue
                try:
                    self._apply_epoch_answer(hosted, result, now_ms)
                except StorageError:
                    raise  # the disk failed: not a bug to survive; the node stops (net/node.py)
                except Exception as error:  # a bug: this partition stops replicating, the others go on
                    self.core.replica_failed(key, hosted, error)
                self.core.dirty_partitions.add(key)

    @staticmethod
    def _apply_epoch_answer(hosted: HostedPartition, result: Any, now_ms: int) -> None:
        log_end_offset = hosted.log.log_end_offset
        complete = hosted.replica.follower_truncate_with_epoch_end_offset(
            EpochEndOffset(result.leader_epoch, result.end_offset)
        )
        after_follower_truncation(hosted, log_end_offset, now_ms)
        hosted.needs_epoch_check = not complete

    def _apply_fetch_response(self, sent: ReplicaRequest, response: Any, now_ms: int) -> None:
        if response.error_code in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH):
            return  # the session is dropped (_fetch_session_answered): the next Fetch is a full one, at once
        if response.error_code != ErrorCode.NONE:
            for hosted in self._followed_by(sent.leader_id):
                hosted.fetch_backoff_until_ms = now_ms + REPLICA_FETCH_BACKOFF_MS
            return
        for topic_response in response.responses:
            for data in topic_response.partitions:
                key = (topic_response.topic, data.partition_index)
                hosted = self._follower(sent.leader_id, *key)
                if hosted is None:
                    continue
                try:
                    self._apply_fetched_partition(hosted, key, data, sent.fetch_offsets.get(key), now_ms)
                except StorageError:
                    raise
                except Exception as error:  # a bug: this partition stops replicating, the others go on
                    self.core.replica_failed(key, hosted, error)
                    self.core.dirty_partitions.add(key)

    def _apply_fetched_partition(self, hosted: HostedPartition, key: TopicPartition, data: Any,
                                 fetch_offset: int | None, now_ms: int) -> None:
        replica = hosted.replica
        log_end_offset, log_start_offset = hosted.log.log_end_offset, hosted.log.log_start_offset
        if data.error_code == ErrorCode.NONE:
            records = bytes(data.records or b"")
            if hosted.follower_throttled:
                self.core.follower_quota.record(len(records), now_ms)
            try:
                outcome = replica.follower_handle_fetch_response(
                    records, data.high_watermark, data.log_start_offset, None, now_ms, fetch_offset=fetch_offset,
                    replicated_offset=data.last_stable_offset,
                )
            except KafkaError:
                # Records that do not continue our log: re-validate our end against the leader's epochs.
                hosted.needs_epoch_check = True
            else:
                if outcome.appended is not None and not self.core.bug_follower_skips_producer_state:
                    # every batch of `records`, each at or past our former end
                    headers = outcome.appended.batch_headers
                    hosted.producer_state.update(
                        headers, markers_in(records) if any(h.is_control for h in headers) else None)
                if hosted.log.log_start_offset != log_start_offset:  # a directory listing: only when it moved
                    hosted.producer_state.on_log_start_offset(hosted.log.log_start_offset)
                hosted.producer_state.last_stable_offset(replica.high_watermark)  # prunes decided transactions
            self.core.dirty_partitions.add(key)
            return
        if data.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            replica.follower_handle_offset_out_of_range(data.log_start_offset, data.high_watermark)
            after_follower_truncation(hosted, log_end_offset, now_ms)
            hosted.needs_epoch_check = True
        hosted.fetch_backoff_until_ms = now_ms + REPLICA_FETCH_BACKOFF_MS


def after_follower_truncation(hosted: "HostedPartition", log_end_offset_before: int, now_ms: int) -> None:
    """Keep the producer state in step with a log the replica truncated (or restarted elsewhere)."""
    log = hosted.log
    if log.log_end_offset < log_end_offset_before or log.log_start_offset > log_end_offset_before:
        if log.log_start_offset == log.log_end_offset:
            hosted.producer_state.truncate_fully_and_start_at(log.log_end_offset)
        else:
            hosted.producer_state.truncate_to(log, log.log_end_offset, now_ms)
