"""The consumer-group APIs (sans-IO): each request goes to the shard of its group's `__consumer_offsets`
partition through the coordinator runtime (broker/coordinators.py), and comes back when the shard's answer
is committed.

Served: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, TxnOffsetCommit, OffsetFetch, OffsetDelete, DescribeGroups,
ListGroups, DeleteGroups, and KIP-848's ConsumerGroupHeartbeat and ConsumerGroupDescribe, in the versions below
(what librdkafka, kafka-python and kcat negotiate; librdkafka's `group.protocol=consumer` needs
ConsumerGroupHeartbeat v1 with OffsetCommit and OffsetFetch v9). The consumer protocol's requests carry the
metadata image's topics (ids and partition counts) to the shard, which assigns partitions by topic id.
OffsetFetch v8+ names several groups: each is its own shard request, assembled like DescribeGroups. A request
for a group whose shard is not here gets NOT_COORDINATOR, one whose shard is loading
COORDINATOR_LOAD_IN_PROGRESS, and one before `__consumer_offsets` exists COORDINATOR_NOT_AVAILABLE: each in that
API's own error response (`*_error` below). DescribeGroups and DeleteGroups name several groups: each group is
its own shard request, and the response is assembled when all have answered. ListGroups reads the loaded
shards directly (answered at once; COORDINATOR_LOAD_IN_PROGRESS while a shard here is loading).

Authorization (Kafka's): the group APIs need READ on the group (OffsetFetch and DescribeGroups DESCRIBE,
OffsetDelete and DeleteGroups DELETE) or answer GROUP_AUTHORIZATION_FAILED; TxnOffsetCommit also WRITE on the
transactional id. Offsets of topics the principal may not READ (DESCRIBE for OffsetFetch) answer
TOPIC_AUTHORIZATION_FAILED per partition while the others go to the shard. ListGroups lists every group with
DESCRIBE on the cluster, else the groups the principal may DESCRIBE.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from broker.apis import Deferred, abortable_for
from broker.coordinators import CoordinatorApis, CoordinatorService
from broker.handlers_cluster import GROUP_OPERATIONS
from groupcoord.classic import join_error, sync_error
from groupcoord.offsets import offset_commit_error, offset_fetch_response, txn_offset_commit_error
from groupcoord.consumer import TopicInfo
from groupcoord.shard import GroupOffsetFetch, GroupRequest
from net.protocol import messages
from net.protocol.codec import ApiKey, RequestHeader
from partitions.errors import ErrorCode
from security.acl import AclOperation as Op, ResourceType

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

    from broker.apis import KafkaApis
    from broker.core import TopicPartition


TXN_OFFSET_COMMIT_VERSION_ADDS_PARTITION = 5  # KIP-890 part 2: no AddOffsetsToTxn before it
TXN_OFFSET_COMMIT_VERSION_TRANSACTION_ABORTABLE = 4  # KIP-890: not in the transaction is TRANSACTION_ABORTABLE
# What a TxnOffsetCommit answers when its partition could not be verified or added (the transaction coordinator's
# verdict as the partition leader's verifier words it): retriable ones as Kafka's TxnOffsetCommitHandler retries.
_ADD_OFFSETS_PARTITION_ERRORS = {ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}


class GroupApis:
    """The group APIs over the group coordinator service (see the module docstring)."""

    def __init__(self, apis: "KafkaApis", coordinators: CoordinatorApis, service: CoordinatorService) -> None:
        self.apis = apis
        self.coordinators = coordinators
        self.service = service
        self._txn_offset_commit_one = self._single(txn_offset_commit_error, Op.READ, Op.READ)
        self._topics_image: Any = None
        self._topics_view: dict[str, TopicInfo] = {}
        self._offset_fetch_one = self._single(_offset_fetch_error, Op.DESCRIBE, Op.DESCRIBE)

    def api_handlers(self):
        return [
            (ApiKey.JOIN_GROUP, 0, 9, self._single(lambda r, c: join_error(c, r.member_id), Op.READ)),
            (ApiKey.SYNC_GROUP, 0, 5, self._single(lambda r, c: sync_error(c), Op.READ)),
            (ApiKey.HEARTBEAT, 0, 4, self._single(
                lambda r, c: messages.HeartbeatResponse(throttle_time_ms=0, error_code=c), Op.READ)),
            (ApiKey.LEAVE_GROUP, 0, 5, self._single(
                lambda r, c: messages.LeaveGroupResponse(throttle_time_ms=0, error_code=c, members=[]), Op.READ)),
            (ApiKey.OFFSET_COMMIT, 2, 9, self._single(offset_commit_error, Op.READ, Op.READ)),
            # v5 is advertised at transaction.version 2 only (broker/transactions.py)
            (ApiKey.TXN_OFFSET_COMMIT, 0, TXN_OFFSET_COMMIT_VERSION_ADDS_PARTITION, self._txn_offset_commit),
            (ApiKey.OFFSET_FETCH, 1, 9, self._offset_fetch),
            (ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1, self._single(
                lambda r, c: messages.ConsumerGroupHeartbeatResponse(error_code=c, member_epoch=-1), Op.READ)),
            (ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 0, self._consumer_group_describe),
            (ApiKey.OFFSET_DELETE, 0, 0, self._single(
                lambda r, c: messages.OffsetDeleteResponse(throttle_time_ms=0, error_code=c, topics=[]), Op.DELETE)),
            (ApiKey.DESCRIBE_GROUPS, 0, 5, self._describe_groups),
            (ApiKey.LIST_GROUPS, 0, 5, self._list_groups),
            (ApiKey.DELETE_GROUPS, 0, 2, self._delete_groups),
        ]

    def poll(self, now_ms: int, changed: AbstractSet[TopicPartition]) -> None:
        """Answers come out of CoordinatorApis.poll."""

    def next_deadline_ms(self) -> int | None:
        return None

    def _request(self, header: RequestHeader, message: Any) -> GroupRequest:
        topics = None
        if header.api_key in (ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE, ApiKey.JOIN_GROUP,
                              ApiKey.SYNC_GROUP):  # (the last two for classic members of consumer groups)
            topics = self._topics()
        return GroupRequest(header.api_key, header.api_version, message, header.client_id or "",
                            self.apis.client_host, topics)

    def _topics(self) -> dict[str, TopicInfo]:
        """The image's topics as the consumer protocol sees them (built once per metadata image)."""
        image = self.apis.broker.image
        if self._topics_image is not image:
            self._topics_view = {name: TopicInfo(uuid.UUID(bytes=topic.topic_id), len(topic.partitions))
                                 for name, topic in image.topics.by_name.items()}
            self._topics_image = image
        return self._topics_view

    def _single(self, error_response, group_operation: Op, topic_operation: Op | None = None):
        """A handler for an API about one group (its `group_id`), authorized with `group_operation` on the
        group and, for the offset APIs, `topic_operation` on each topic of the request."""

        def handle(header: RequestHeader, request: Any, now_ms: int, on_done=None) -> Any:
            """The answer, a Deferred, or, with `on_done(answer, now_ms)`, None once handed to the shard."""
            refused = self._refused(header, request, group_operation)
            if refused is not None:
                return error_response(request, refused)
            denied = self._deny_topics(request, topic_operation) if topic_operation is not None else []
            if denied and not request.topics:
                return _with_denied_topics(error_response(request, ErrorCode.NONE), denied)
            partition = self.service.partition_for(request.group_id) if request.group_id else 0
            if partition is None:
                return _with_denied_topics(error_response(request, ErrorCode.COORDINATOR_NOT_AVAILABLE), denied)

            every_topic = header.api_key == ApiKey.OFFSET_FETCH and request.topics is None
            session = self.apis.session  # the answer is built later, for this request's principal

            def build(answers: list) -> Any:
                answer = answers[0] if not isinstance(answers[0], ErrorCode) else error_response(request, answers[0])
                if every_topic and self.apis.authorizer is not None:  # only the topics the principal may describe
                    answer.topics = [t for t in answer.topics
                                     if self.apis.authorize(Op.DESCRIBE, ResourceType.TOPIC, t.name, session)]
                return _with_denied_topics(answer, denied)

            items = [(self.service, partition, self._request(header, request))]
            if on_done is not None:
                self.coordinators.submit_internal(items, build, on_done, now_ms)
                return None
            return self.coordinators.submit_all(header, items, build, now_ms)

        return handle

    def _txn_offset_commit(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        """TxnOffsetCommit, written only once the transaction coordinator confirms that the group's partition of
        __consumer_offsets is in the producer's ongoing transaction (KIP-890 part 1, as Kafka verifies it since
        KAFKA-15449): a request that arrives after its transaction ended (the client timed out, aborted, and the
        request was still on its way) would otherwise leave offsets pending under a marker that never comes, and
        OffsetFetch with require_stable would answer UNSTABLE_OFFSET_COMMIT for them for ever. From v5 (KIP-890
        part 2: a transaction version 2 client sends no AddOffsetsToTxn) the coordinator adds the partition
        instead, as a Produce v12 has its partition added."""
        verify = self.apis.transaction_verifier
        partition = self.service.partition_for(request.group_id) if request.group_id else None
        if verify is None or partition is None or self._refused(header, request, Op.READ) is not None:
            return self._txn_offset_commit_one(header, request, now_ms)
        key = (self.service.topic.name, partition)
        request_id = self.apis.defer()

        def done(response: Any, now: int) -> None:
            self.apis.completed.append((request_id, header, response))

        def on_verified(codes: dict, now: int) -> None:
            code = codes.get(key, ErrorCode.NONE)
            if code != ErrorCode.NONE:
                code = abortable_for(header.api_version, TXN_OFFSET_COMMIT_VERSION_TRANSACTION_ABORTABLE, code)
                done(txn_offset_commit_error(request, _ADD_OFFSETS_PARTITION_ERRORS.get(code, code)), now)
                return
            self.apis.answer_deferred(request_id, header,
                                      lambda: self._txn_offset_commit_one(header, request, now, on_done=done))

        verify(request.transactional_id, request.producer_id, request.producer_epoch, [key], on_verified, now_ms,
               add=header.api_version >= TXN_OFFSET_COMMIT_VERSION_ADDS_PARTITION)
        return Deferred(request_id)

    def _refused(self, header: RequestHeader, request: Any, group_operation: Op) -> ErrorCode | None:
        if self.apis.authorizer is None:
            return None
        if header.api_key == ApiKey.TXN_OFFSET_COMMIT and not self.apis.authorize(
                Op.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        if not self.apis.authorize(group_operation, ResourceType.GROUP, request.group_id):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED
        return None

    def _deny_topics(self, request: Any, operation: Op) -> list[tuple[str, list[int]]]:
        """Takes the topics the principal may not `operation` out of the request: (topic, partitions) of each."""
        if self.apis.authorizer is None or not request.topics:
            return []
        denied, kept = [], []
        for topic in request.topics:
            if self.apis.authorize(operation, ResourceType.TOPIC, topic.name):
                kept.append(topic)
            else:
                partitions = getattr(topic, "partition_indexes", None)
                if partitions is None:
                    partitions = [p.partition_index for p in topic.partitions]
                denied.append((topic.name, list(partitions)))
        request.topics = kept
        return denied

    def _per_group(self, header: RequestHeader, group_ids: list[str], build, now_ms: int,
                   skip: set[str] = frozenset(), messages_=None) -> Any:
        """One shard request per group; `build(answers)` once every group has answered (an answer is the
        shard's item or an ErrorCode). Groups in `skip` (refused) are not asked: GROUP_AUTHORIZATION_FAILED.
        The shard's message is the group id, or `messages_[index]` when given."""
        items, early = [], {}
        for index, group_id in enumerate(group_ids):
            if group_id in skip:
                early[index] = ErrorCode.GROUP_AUTHORIZATION_FAILED
                continue
            partition = self.service.partition_for(group_id) if group_id else None
            if partition is None:
                early[index] = ErrorCode.COORDINATOR_NOT_AVAILABLE if group_id else ErrorCode.INVALID_GROUP_ID
                continue
            message = group_id if messages_ is None else messages_[index]
            items.append((self.service, partition, self._request(header, message)))

        def assemble(answers: list) -> Any:
            merged, it = [], iter(answers)
            for index in range(len(group_ids)):
                merged.append(early[index] if index in early else next(it))
            return build(merged)

        return self.coordinators.submit_all(header, items, assemble, now_ms)

    def _describe_groups(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.DescribeGroupsResponse
        return self._describe_each(
            header, list(request.groups), getattr(request, "include_authorized_operations", False),
            lambda group_id, code: response_class.DescribedGroup(
                error_code=code, group_id=group_id, group_state="", protocol_type="", protocol_data="", members=[]),
            lambda described: response_class(throttle_time_ms=0, groups=described), now_ms)

    def _consumer_group_describe(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.ConsumerGroupDescribeResponse
        return self._describe_each(
            header, list(request.group_ids), request.include_authorized_operations,
            lambda group_id, code: response_class.DescribedGroup(error_code=code, group_id=group_id),
            lambda described: response_class(throttle_time_ms=0, groups=described), now_ms)

    def _describe_each(self, header: RequestHeader, group_ids: list[str], include_operations: bool,
                       error_item, response, now_ms: int) -> Any:
        """DescribeGroups and ConsumerGroupDescribe: each group's item from its shard (DESCRIBE on the group,
        else GROUP_AUTHORIZATION_FAILED), `error_item(group_id, code)` for a group answered with an error code,
        and KIP-430 authorized operations on the described ones when asked (with no authorizer: every group
        operation)."""
        denied = {g for g in group_ids if not self.apis.authorize(Op.DESCRIBE, ResourceType.GROUP, g)}
        session = self.apis.session  # the answer is built later, for this request's principal

        def build(answers: list) -> Any:
            described = []
            for group_id, answer in zip(group_ids, answers):
                if isinstance(answer, ErrorCode):
                    answer = error_item(group_id, answer)
                elif include_operations and answer.error_code == ErrorCode.NONE:
                    bits = self.apis.authorized_operations(ResourceType.GROUP, group_id, session)
                    answer.authorized_operations = GROUP_OPERATIONS if bits is None else bits
                described.append(answer)
            return response(described)

        return self._per_group(header, group_ids, build, now_ms, skip=denied)

    def _offset_fetch(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        """OffsetFetch: one group (v1-7, through `_single`) or several (v8+, one shard request each)."""
        if header.api_version < 8:
            return self._offset_fetch_one(header, request, now_ms)
        response_class = messages.OffsetFetchResponse
        groups = list(request.groups)
        group_ids = [group.group_id for group in groups]
        denied_groups = {g for g in group_ids if not self.apis.authorize(Op.DESCRIBE, ResourceType.GROUP, g)}
        session = self.apis.session
        fetches, denied_topics = [], []
        for group in groups:
            denied = self._deny_topics(group, Op.DESCRIBE) if group.topics else []
            denied_topics.append(denied)
            fetches.append(GroupOffsetFetch(group.group_id, group.topics, bool(request.require_stable),
                                            group.member_id, group.member_epoch))

        def build(answers: list) -> Any:
            out = []
            for group, answer, denied in zip(groups, answers, denied_topics):
                if isinstance(answer, ErrorCode):
                    out.append(response_class.OffsetFetchResponseGroup(group_id=group.group_id, topics=[],
                                                                       error_code=answer))
                    continue
                if group.topics is None and self.apis.authorizer is not None:
                    answer.topics = [t for t in answer.topics
                                     if self.apis.authorize(Op.DESCRIBE, ResourceType.TOPIC, t.name, session)]
                answer = _with_denied_topics(answer, denied)
                out.append(response_class.OffsetFetchResponseGroup(
                    group_id=group.group_id, error_code=answer.error_code, topics=[
                        response_class.OffsetFetchResponseTopics(name=t.name, partitions=[
                            response_class.OffsetFetchResponsePartitions(
                                partition_index=p.partition_index, committed_offset=p.committed_offset,
                                committed_leader_epoch=p.committed_leader_epoch, metadata=p.metadata,
                                error_code=p.error_code) for p in t.partitions]) for t in answer.topics]))
            return response_class(throttle_time_ms=0, groups=out)

        return self._per_group(header, group_ids, build, now_ms, skip=denied_groups, messages_=fetches)

    def _delete_groups(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        group_ids = list(request.groups_names)
        response_class = messages.DeleteGroupsResponse
        denied = {g for g in group_ids if not self.apis.authorize(Op.DELETE, ResourceType.GROUP, g)}

        def build(answers: list) -> Any:
            results = []
            for group_id, answer in zip(group_ids, answers):
                code = answer if isinstance(answer, ErrorCode) else answer[1]
                results.append(response_class.DeletableGroupResult(group_id=group_id, error_code=code))
            return response_class(throttle_time_ms=0, results=results)

        return self._per_group(header, group_ids, build, now_ms, skip=denied)

    def _list_groups(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.ListGroupsResponse
        runtime = self.service.runtime
        loading = set(runtime.led_partitions()) - set(runtime.loaded_partitions())
        listed = []
        for partition in runtime.loaded_partitions():
            listed += runtime.shard(partition).list_groups()
        # KIP-518 (v4) filters by state, KIP-848 (v5) by type; names compare case-insensitively, as Kafka's do.
        states = {s.lower() for s in getattr(request, "states_filter", None) or ()}
        types = {t.lower() for t in getattr(request, "types_filter", None) or ()}
        groups = [response_class.ListedGroup(group_id=group.group_id, protocol_type=group.protocol_type,
                                             group_state=group.state, group_type=group.group_type)
                  for group in sorted(listed, key=lambda g: g.group_id)
                  if (not states or group.state.lower() in states) and (not types or group.group_type in types)]
        if self.apis.authorizer is not None and not self.apis.authorize_cluster(Op.DESCRIBE):
            groups = [g for g in groups if self.apis.authorize(Op.DESCRIBE, ResourceType.GROUP, g.group_id)]
        code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if loading else ErrorCode.NONE
        return response_class(throttle_time_ms=0, error_code=code, groups=groups)


def _with_denied_topics(answer: Any, denied: list[tuple[str, list[int]]]) -> Any:
    """The answer of an offset API with TOPIC_AUTHORIZATION_FAILED partitions added for the refused topics."""
    if denied:
        answer.topics = list(answer.topics) + _error_rows(answer, denied)
    return answer


def _error_rows(answer: Any, denied: list[tuple[str, list[int]]]) -> list:
    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if isinstance(answer, messages.OffsetFetchResponse):
        return offset_fetch_response([(t, [(p, -1, -1, "", code) for p in ps]) for t, ps in denied]).topics
    if isinstance(answer, messages.TxnOffsetCommitResponse):
        return txn_offset_commit_error(_Topics(denied), code).topics
    return offset_commit_error(_Topics(denied), code).topics


class _Topics:
    """The shape `offset_commit_error` reads: request.topics[].name / .partitions[].partition_index."""

    def __init__(self, denied: list[tuple[str, list[int]]]) -> None:
        self.topics = [_Topic(name, partitions) for name, partitions in denied]


class _Topic:
    def __init__(self, name: str, partitions: list[int]) -> None:
        self.name = name
        self.partitions = [_Partition(p) for p in partitions]


class _Partition:
    def __init__(self, partition_index: int) -> None:
        self.partition_index = partition_index


def _offset_fetch_error(request: Any, code: ErrorCode) -> Any:
    """OffsetFetch's error answer: the top-level code (v2+) and, for v1 clients, each requested partition's."""
    rows = [(t.name, [(p, -1, -1, "", code) for p in t.partition_indexes]) for t in (request.topics or [])]
    return offset_fetch_response(rows, code)
