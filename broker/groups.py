"""The consumer-group APIs (sans-IO): each request goes to the shard of its group's `__consumer_offsets`
partition through the coordinator runtime (broker/coordinators.py), and comes back when the shard's answer
is committed.

Served: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, TxnOffsetCommit, OffsetFetch, OffsetDelete, DescribeGroups,
ListGroups, DeleteGroups, in the versions below (what librdkafka, kafka-python and kcat negotiate). A request
for a group whose shard is not here gets NOT_COORDINATOR, one whose shard is loading
COORDINATOR_LOAD_IN_PROGRESS, and one before `__consumer_offsets` exists COORDINATOR_NOT_AVAILABLE: each in that
API's own error response (`*_error` below). DescribeGroups and DeleteGroups name several groups: each group is
its own shard request, and the response is assembled when all have answered. ListGroups reads the loaded
shards directly (answered at once; COORDINATOR_LOAD_IN_PROGRESS while a shard here is loading).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.coordinators import CoordinatorApis, CoordinatorService
from broker.handlers_cluster import GROUP_OPERATIONS
from groupcoord.classic import join_error, sync_error
from groupcoord.offsets import offset_commit_error, offset_fetch_response, txn_offset_commit_error
from groupcoord.shard import GroupRequest
from net.protocol import messages
from net.protocol.codec import ApiKey, RequestHeader
from partitions.errors import ErrorCode

if TYPE_CHECKING:
    from broker.apis import KafkaApis


class GroupApis:
    """The group APIs over the group coordinator service (see the module docstring)."""

    def __init__(self, apis: "KafkaApis", coordinators: CoordinatorApis, service: CoordinatorService) -> None:
        self.apis = apis
        self.coordinators = coordinators
        self.service = service

    def api_handlers(self):
        return [
            (ApiKey.JOIN_GROUP, 0, 5, self._single(lambda r, c: join_error(c, r.member_id))),
            (ApiKey.SYNC_GROUP, 0, 3, self._single(lambda r, c: sync_error(c))),
            (ApiKey.HEARTBEAT, 0, 3, self._single(
                lambda r, c: messages.HeartbeatResponse(throttle_time_ms=0, error_code=c))),
            (ApiKey.LEAVE_GROUP, 0, 3, self._single(
                lambda r, c: messages.LeaveGroupResponse(throttle_time_ms=0, error_code=c, members=[]))),
            (ApiKey.OFFSET_COMMIT, 2, 7, self._single(offset_commit_error)),
            (ApiKey.TXN_OFFSET_COMMIT, 0, 3, self._single(txn_offset_commit_error)),
            (ApiKey.OFFSET_FETCH, 1, 7, self._single(_offset_fetch_error)),
            (ApiKey.OFFSET_DELETE, 0, 0, self._single(
                lambda r, c: messages.OffsetDeleteResponse(throttle_time_ms=0, error_code=c, topics=[]))),
            (ApiKey.DESCRIBE_GROUPS, 0, 4, self._describe_groups),
            (ApiKey.LIST_GROUPS, 0, 5, self._list_groups),
            (ApiKey.DELETE_GROUPS, 0, 1, self._delete_groups),
        ]

    def poll(self, now_ms: int) -> None:
        """Answers come out of CoordinatorApis.poll."""

    def next_deadline_ms(self) -> int | None:
        return None

    def _request(self, header: RequestHeader, message: Any) -> GroupRequest:
        return GroupRequest(header.api_key, header.api_version, message, header.client_id or "",
                            self.apis.client_host)

    def _single(self, error_response):
        """A handler for an API about one group (its `group_id`)."""

        def handle(header: RequestHeader, request: Any, now_ms: int) -> Any:
            partition = self.service.partition_for(request.group_id) if request.group_id else 0
            if partition is None:
                return error_response(request, ErrorCode.COORDINATOR_NOT_AVAILABLE)
            return self.coordinators.submit_all(
                header, [(self.service, partition, self._request(header, request))],
                lambda answers: answers[0] if not isinstance(answers[0], ErrorCode) else error_response(request, answers[0]),
                now_ms)

        return handle

    def _per_group(self, header: RequestHeader, group_ids: list[str], build, now_ms: int) -> Any:
        """One shard request per group; `build(answers)` once every group has answered (an answer is the
        shard's item or an ErrorCode)."""
        items, early = [], {}
        for index, group_id in enumerate(group_ids):
            partition = self.service.partition_for(group_id) if group_id else None
            if partition is None:
                early[index] = ErrorCode.COORDINATOR_NOT_AVAILABLE if group_id else ErrorCode.INVALID_GROUP_ID
                continue
            items.append((self.service, partition, self._request(header, group_id)))

        def assemble(answers: list) -> Any:
            merged, it = [], iter(answers)
            for index in range(len(group_ids)):
                merged.append(early[index] if index in early else next(it))
            return build(merged)

        return self.coordinators.submit_all(header, items, assemble, now_ms)

    def _describe_groups(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        group_ids = list(request.groups)
        response_class = messages.DescribeGroupsResponse

        include_operations = getattr(request, "include_authorized_operations", False)

        def build(answers: list) -> Any:
            described = []
            for group_id, answer in zip(group_ids, answers):
                if isinstance(answer, ErrorCode):
                    answer = response_class.DescribedGroup(error_code=answer, group_id=group_id, group_state="",
                                                           protocol_type="", protocol_data="", members=[])
                elif include_operations:  # KIP-430, with no authorizer: every group operation
                    answer.authorized_operations = GROUP_OPERATIONS
                described.append(answer)
            return response_class(throttle_time_ms=0, groups=described)

        return self._per_group(header, group_ids, build, now_ms)

    def _delete_groups(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        group_ids = list(request.groups_names)
        response_class = messages.DeleteGroupsResponse

        def build(answers: list) -> Any:
            results = []
            for group_id, answer in zip(group_ids, answers):
                code = answer if isinstance(answer, ErrorCode) else answer[1]
                results.append(response_class.DeletableGroupResult(group_id=group_id, error_code=code))
            return response_class(throttle_time_ms=0, results=results)

        return self._per_group(header, group_ids, build, now_ms)

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
        code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if loading else ErrorCode.NONE
        return response_class(throttle_time_ms=0, error_code=code, groups=groups)


def _offset_fetch_error(request: Any, code: ErrorCode) -> Any:
    """OffsetFetch's error answer: the top-level code (v2+) and, for v1 clients, each requested partition's."""
    rows = [(t.name, [(p, -1, -1, "", code) for p in t.partition_indexes]) for t in (request.topics or [])]
    return offset_fetch_response(rows, code)
