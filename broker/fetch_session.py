"""Incremental fetch sessions (KIP-227), sans-IO: the leader's side.

A fetcher (a follower broker or a client) that sends SessionId 0 with SessionEpoch 0 asks for a session: the
leader answers the full fetch with a new session id and remembers the partitions and their fetch positions.
Each following request names the session and the next epoch (1, 2, ... wrapping to 1) and lists only the
partitions whose position changed (added or updated) and those it drops (ForgottenTopicsData); the response
lists only the partitions that have something new: records, an error, or a high watermark, last stable offset
or log start offset other than last sent. An idle fetcher of a thousand partitions sends and receives
requests of a few bytes; the leader still reads every partition of the session (a follower's fetch position
keeps its place in the ISR, as in Kafka), except while nothing can have changed: a follower's session whose
every partition was found quiet (broker/handlers_data.py) at a `quiet_generation` of the broker's partitions
that still holds, and whose follower names no partition, is parked without a walk (see DataPlaneApis._fetch).

Kafka's rules for the (SessionId, SessionEpoch) pair:
  (0, -1)        no session: a full fetch, answered in full with SessionId 0;
  (0, 0)         a full fetch that opens a session (when the cache has room; else as (0, -1));
  (id, -1)       close session `id`, then as (0, -1);
  (id, n > 0)    an incremental fetch: FETCH_SESSION_ID_NOT_FOUND for an unknown id,
                 INVALID_FETCH_SESSION_EPOCH unless n is the session's next epoch;
  (0, n > 0)     INVALID_FETCH_SESSION_EPOCH.
The cache holds at most `slots` sessions (Kafka's max.incremental.fetch.session.cache.slots, 1000); when it is
full, the least recently used session gives way to a new one.

Topic ids (KIP-516, Fetch v13+): a request names topics by id, and a session opened by such a request knows its
partitions by (topic id, partition), each with the name the id had when it was added (None while this broker
does not know the id: answered UNKNOWN_TOPIC_ID, and named at a later fetch once the id is known, as Kafka's
CachedPartition.maybeResolveUnknownName). A session keeps the kind of key it was opened with: an incremental
fetch of the other kind (by names into a session of ids, or the reverse) is refused with
FETCH_SESSION_TOPIC_ID_ERROR (Kafka's FetchManager.newContext).
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from net.protocol.types import NULL_UUID
from partitions.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
SESSION_SLOTS_DEFAULT = 1000
INT32_MAX = 2**31 - 1

TopicPartition = tuple[str, int]
SessionKey = tuple[Any, int]  # (topic name, partition), or (topic id, partition) in a session of topic ids
TopicNamer = Callable[[uuid.UUID], "str | None"]  # a topic id's name in the broker's metadata image, if known


class RequestedTopic(NamedTuple):
    """A topic of a fetch, as the handler reads it. `key` is how the request and its session know the topic:
    its name below Fetch v13, its id from v13 (KIP-516). `name` is None for an id this broker does not know
    (UNKNOWN_TOPIC_ID); `topic_id` is NULL_UUID below v13 (nothing to check against the log's)."""

    key: Any
    name: str | None
    topic_id: uuid.UUID
    partitions: list[Any]


def next_epoch(epoch: int) -> int:
    """The session epoch after `epoch`: 1, 2, ... wrapping to 1 after INT32_MAX (0 and -1 are not epochs of
    an incremental fetch)."""
    return 1 if epoch >= INT32_MAX else epoch + 1


@dataclass
class SessionPartition:
    """A partition of a session: the fetcher's position (the last FetchPartition it sent for it) and what the
    leader last answered for it."""

    fetch_partition: Any  # the request's FetchPartition (partition, fetch_offset, log_start_offset, ...)
    topic: str | None  # its topic's name (None: a topic id not known yet, see the module docstring)
    high_watermark: int = -2  # -2: never answered, so the first read is sent whatever it holds
    last_stable_offset: int = -2
    log_start_offset: int = -2


@dataclass
class FetchSession:
    session_id: int
    next_epoch: int
    partitions: dict[SessionKey, SessionPartition] = field(default_factory=dict)
    uses_topic_ids: bool = False  # opened by a Fetch v13+: `partitions` are keyed by topic id
    # The broker's partition generation at the last walk that found every partition quiet for a follower
    # (-1: none since the partitions last changed), and when that walk touched them.
    quiet_generation: int = -1
    quiet_walk_ms: int = 0
    _keys: frozenset[TopicPartition] | None = None

    def changed(self) -> None:
        """The partitions or the fetcher's positions changed: no quiet walk holds, no cached key set."""
        self.quiet_generation = -1
        self._keys = None

    def keys(self) -> frozenset[TopicPartition]:
        """The (topic name, partition) of every partition of the session whose topic is known (what a parked
        fetch waits on)."""
        if self._keys is None:
            if self.uses_topic_ids:
                self._keys = frozenset((entry.topic, partition) for (_, partition), entry in self.partitions.items()
                                       if entry.topic is not None)
            else:
                self._keys = frozenset(self.partitions)
        return self._keys

    def fetch_topics(self, topic_name: TopicNamer | None) -> list[RequestedTopic]:
        """The topics of every partition of the session, in the order they were added; a topic id not known
        when its partition was added is looked up again with `topic_name`."""
        if not self.uses_topic_ids:
            grouped: dict[Any, list[Any]] = {}
            for (topic, _), entry in self.partitions.items():
                grouped.setdefault(topic, []).append(entry.fetch_partition)
            return [RequestedTopic(topic, topic, NULL_UUID, partitions) for topic, partitions in grouped.items()]
        by_id: dict[tuple[uuid.UUID, str | None], list[Any]] = {}
        for (topic_id, _), entry in self.partitions.items():
            if entry.topic is None and topic_name is not None:
                entry.topic = topic_name(topic_id)
                if entry.topic is not None:
                    self._keys = None
            by_id.setdefault((topic_id, entry.topic), []).append(entry.fetch_partition)
        return [RequestedTopic(topic_id, name, topic_id, partitions) for (topic_id, name), partitions in by_id.items()]


@dataclass
class FetchContext:
    """What a Fetch request reads and how its response is cut: `session` is None for a sessionless fetch;
    `incremental` responses carry only the partitions with news; `error` refuses the request. An incremental
    context lists its session's partitions (`topics`) only when asked; `unchanged` when the request named no
    partition and forgot none."""

    _topics: list[RequestedTopic] | None
    session: FetchSession | None = None
    incremental: bool = False
    error: ErrorCode = ErrorCode.NONE
    unchanged: bool = False
    topic_name: TopicNamer | None = None  # for a session of topic ids: names ids it did not know yet

    @property
    def session_id(self) -> int:
        return 0 if self.session is None else self.session.session_id

    @property
    def topics(self) -> list[RequestedTopic]:
        if self._topics is None:
            self._topics = self.session.fetch_topics(self.topic_name)
        return self._topics

    def partitions(self) -> frozenset[TopicPartition]:
        """The (topic name, partition) of every partition it reads whose topic is known."""
        if self.incremental:
            return self.session.keys()
        return frozenset((topic.name, p.partition) for topic in self.topics if topic.name is not None
                         for p in topic.partitions)

    def keep(self, key: Any, data: Any) -> bool:
        """Whether partition data read for this fetch (of the topic the session knows as `key`, see
        RequestedTopic) goes into the response: every one unless incremental, then only those with news since
        the last response sent (`sent`); a preferred read replica (KIP-392) and a diverging epoch (KIP-320)
        are news."""
        if not self.incremental:
            return True
        entry = self.session.partitions.get((key, data.partition_index))
        return (entry is None or bool(data.records) or data.error_code != ErrorCode.NONE
                or data.preferred_read_replica >= 0
                or data.high_watermark != entry.high_watermark
                or data.last_stable_offset != entry.last_stable_offset
                or data.log_start_offset != entry.log_start_offset
                or data.diverging_epoch.epoch >= 0)

    def sent(self, response: Any) -> None:
        """Remember what `response` (about to be sent) told the fetcher of each partition."""
        if self.session is None:
            return
        uses_topic_ids = self.session.uses_topic_ids
        for topic_response in response.responses:
            key = topic_response.topic_id if uses_topic_ids else topic_response.topic
            for data in topic_response.partitions:
                entry = self.session.partitions.get((key, data.partition_index))
                if entry is not None:
                    entry.high_watermark = data.high_watermark
                    entry.last_stable_offset = data.last_stable_offset
                    entry.log_start_offset = data.log_start_offset


class FetchSessionCache:
    """The sessions of one broker (see the module docstring). Session ids come from a counter started from the
    clock at the first session: deterministic under the simulator's clock, and unlikely to meet an id a
    fetcher kept from this broker's previous run (that fetcher is answered FETCH_SESSION_ID_NOT_FOUND or
    INVALID_FETCH_SESSION_EPOCH and starts over)."""

    def __init__(self, slots: int = SESSION_SLOTS_DEFAULT) -> None:
        self.slots = slots
        self.sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first
        self._next_id: int | None = None
        # A planted bug for the simulator (simulations/reassign_sim.py), never configured: a partition named
        # again keeps what the session last sent, so it is answered only if something changed since.
        self.bug_named_partition_keeps_last_sent = False

    def context(self, request: Any, now_ms: int, topic_name: TopicNamer | None = None) -> FetchContext:
        """The context of a Fetch request: by topic names, or with `topic_name` (Fetch v13+) by topic ids."""
        session_id, epoch = request.session_id, request.session_epoch
        uses_topic_ids = topic_name is not None
        requested = _requested_topics(request, topic_name)
        if session_id == 0:
            if epoch == FINAL_EPOCH:
                return FetchContext(requested)
            if epoch != INITIAL_EPOCH:
                return FetchContext([], error=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
            return FetchContext(requested, self._open(requested, uses_topic_ids, now_ms))
        if epoch == FINAL_EPOCH:
            self.sessions.pop(session_id, None)
            return FetchContext(requested)
        session = self.sessions.get(session_id)
        if session is None:
            return FetchContext([], error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if epoch != session.next_epoch:
            return FetchContext([], error=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            return FetchContext([], error=ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        self.sessions.move_to_end(session_id)
        session.next_epoch = next_epoch(session.next_epoch)
        unchanged = not requested and not request.forgotten_topics_data
        if not unchanged:
            session.changed()
        for forgotten in request.forgotten_topics_data:
            key = forgotten.topic_id if uses_topic_ids else forgotten.topic
            for partition in forgotten.partitions:
                session.partitions.pop((key, partition), None)
        for topic in requested:
            for fetch_partition in topic.partitions:
                key = (topic.key, fetch_partition.partition)
                # Added or updated: answered in this response whatever it holds (the fetcher's view of the
                # partition changed, e.g. it dropped an answer while it followed another leader). An updated
                # partition keeps the name it had (Kafka's CachedPartition.updateRequestParams).
                entry = session.partitions.get(key)
                if self.bug_named_partition_keeps_last_sent and entry is not None:
                    entry.fetch_partition = fetch_partition
                else:
                    name = topic.name if entry is None or entry.topic is None else entry.topic
                    session.partitions[key] = SessionPartition(fetch_partition, name)
        return FetchContext(None, session, incremental=True, unchanged=unchanged, topic_name=topic_name)

    def _open(self, requested: list[RequestedTopic], uses_topic_ids: bool, now_ms: int) -> FetchSession | None:
        if self.slots <= 0:
            return None
        while len(self.sessions) >= self.slots:
            self.sessions.popitem(last=False)
        if self._next_id is None:
            self._next_id = (now_ms * 2654435761) % (INT32_MAX // 2) + 1
        session_id = self._next_id
        self._next_id = 1 if self._next_id >= INT32_MAX else self._next_id + 1
        session = FetchSession(session_id, next_epoch=1, uses_topic_ids=uses_topic_ids)
        for topic in requested:
            for fetch_partition in topic.partitions:
                session.partitions[(topic.key, fetch_partition.partition)] = SessionPartition(fetch_partition,
                                                                                             topic.name)
        self.sessions[session_id] = session
        return session


def _requested_topics(request: Any, topic_name: TopicNamer | None) -> list[RequestedTopic]:
    """The request's topics: by name, or with `topic_name` (Fetch v13+) by id, named when this broker knows the
    id (Kafka's FetchRequest.fetchData(topicNames))."""
    if topic_name is None:
        return [RequestedTopic(t.topic, t.topic, NULL_UUID, list(t.partitions)) for t in request.topics]
    return [RequestedTopic(t.topic_id, topic_name(t.topic_id), t.topic_id, list(t.partitions)) for t in request.topics]
