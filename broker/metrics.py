"""The broker's metrics, sans-IO: counters the handlers bump, gauges read from the node's state when scraped.

Theory of operation: `BrokerMetrics` holds plain counters and fixed-bucket histograms (ints and dicts, no
Prometheus library, no clock: latencies arrive measured). The edge (net/dispatcher.py) counts requests,
their latency and their error codes; the partition handlers count messages and bytes per topic; BrokerCore
counts ISR shrinks and expands. Everything that is a level rather than an event (under-replicated
partitions, leaders, log sizes, the Raft status, group members and lag, open transactions) is computed by
`gauges(state, now_ms)` from the cores when a scrape asks, so the request path pays nothing for it.
net/metrics.py turns both into Prometheus text.

Names follow Prometheus conventions (`flotilla_` prefix, `_total` for counters, `_seconds`, `_bytes`); the
README lists them.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterator

from partitions.errors import ErrorCode

COORDINATOR_KEY_TYPE_GROUP = 0  # FindCoordinator's key types (broker/coordinators.py), the services' keys
COORDINATOR_KEY_TYPE_TRANSACTION = 1

# Request latency buckets (seconds), Prometheus' defaults extended down to 0.5 ms.
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass
class Histogram:
    """Counts per bucket (non-cumulative; the last slot is +Inf), their sum and count."""

    bounds: tuple[float, ...] = LATENCY_BUCKETS_S
    counts: list[int] = field(init=False)  # one per bound, +Inf last
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations <= bound) per bucket, +Inf last, as Prometheus exposes them."""
        running, out = 0, []
        for bound, count in zip((*self.bounds, float("inf")), self.counts):
            running += count
            out.append((bound, running))
        return out

    def quantile(self, q: float) -> float | None:
        """The upper bound of the bucket holding the q-quantile (what histogram_quantile approximates)."""
        if self.count == 0:
            return None
        rank = q * self.count
        for bound, running in self.cumulative():
            if running >= rank:
                return bound
        return float("inf")


class BrokerMetrics:
    """The counters of one broker (see the module docstring)."""

    def __init__(self, enabled: bool = True) -> None:
        # Off (no metrics_port): the record_* calls return at once, so a node without metrics pays nothing.
        self.enabled = enabled
        self.messages_in: dict[str, int] = defaultdict(int)  # topic -> records appended as leader
        self.bytes_in: dict[str, int] = defaultdict(int)  # topic -> record-batch bytes appended as leader
        self.bytes_out: dict[str, int] = defaultdict(int)  # topic -> record bytes fetched by consumers
        self.requests: dict[tuple[str, str], int] = defaultdict(int)  # (api, acks or "") -> requests
        self.request_errors: dict[tuple[str, str], int] = defaultdict(int)  # (api, error name) -> errors
        self.request_latency: dict[tuple[str, str], Histogram] = defaultdict(Histogram)  # (api, acks or "")
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.throttles: dict[str, int] = defaultdict(int)  # quota type -> answers throttled by a client quota
        self.throttle_ms: dict[str, int] = defaultdict(int)  # quota type -> their throttle times
        # (authentication | reauthentication, success | failure) -> SASL exchanges ended so
        self.authentications: dict[tuple[str, str], int] = defaultdict(int)
        self.expired_sessions = 0  # connections closed for a request after their SASL session expired (KIP-368)
        # where -> exceptions a bug raised that the node survived: "request" (a handler: that connection
        # closed), "answer" (building a deferred answer: that connection closed), "encode" (a response its
        # version cannot carry), "poll" (a handler group's poll: the others were polled, the node went on),
        # "replica" (applying a leader's answer for one partition: that replica stops fetching until re-followed),
        # "controller_call" and "outbox" (the callback given a controller's or another broker's answer)
        self.internal_errors: dict[str, int] = defaultdict(int)

    def record_produce(self, topic: str, records: int, size: int) -> None:
        if not self.enabled:
            return
        self.messages_in[topic] += records
        self.bytes_in[topic] += size

    def record_fetch(self, topic: str, size: int) -> None:
        if size and self.enabled:
            self.bytes_out[topic] += size

    def record_request(self, api: str, acks: str, latency_s: float, error_codes: Iterator[int]) -> None:
        key = (api, acks)
        self.requests[key] += 1
        self.request_latency[key].observe(latency_s)
        for code in error_codes:
            if code:
                self.request_errors[(api, _error_name(code))] += 1

    def record_throttle(self, quota_type: str, throttle_ms: int) -> None:
        if self.enabled:
            self.throttles[quota_type] += 1
            self.throttle_ms[quota_type] += throttle_ms

    def record_authentication(self, kind: str, succeeded: bool) -> None:
        if self.enabled:
            self.authentications[(kind, "success" if succeeded else "failure")] += 1

    def record_expired_session(self) -> None:
        if self.enabled:
            self.expired_sessions += 1

    def record_internal_error(self, where: str) -> None:
        self.internal_errors[where] += 1  # counted with metrics off too: rare, and what a test or operator asks

    def record_isr_change(self, before: int, after: int) -> None:
        if not self.enabled:
            return
        if after < before:
            self.isr_shrinks += 1
        elif after > before:
            self.isr_expands += 1


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def response_error_codes(message: Any) -> Iterator[int]:
    """Every `error_code` in a response message, at any depth (record bytes are not walked). A generated
    message class is walked by its plan (_walk_plan: whether it has an `error_code`, which fields are arrays
    of structs), not by a getattr of every slot of every item: a response is walked per request when metrics
    are on."""
    stack = [message]
    while stack:
        item = stack.pop()
        plan = _WALK_PLANS.get(type(item))
        if plan is None:
            plan = _walk_plan(type(item))
        has_code, nested = plan
        if has_code:
            code = getattr(item, "error_code", None)
            if isinstance(code, int):
                yield code
        for name in nested:
            value = getattr(item, name, None)
            if isinstance(value, list) and value and hasattr(value[0], "__slots__"):
                stack.extend(value)


_WALK_PLANS: dict[type, tuple[bool, tuple[str, ...]]] = {}


def _walk_plan(cls: type) -> tuple[bool, tuple[str, ...]]:
    """(may have an `error_code`, the fields to descend into) for a response class: a generated message's own
    field and arrays of structs; for another class, whatever its instances carry and every slot, as the walk
    looks at any object."""
    fields = getattr(cls, "_fields", None)
    if fields is not None:
        plan = ("error_code" in cls._names, tuple(f.name for f in fields if f.is_array and f.is_struct))
    else:
        plan = (True, tuple(getattr(cls, "__slots__", ())))
    _WALK_PLANS[cls] = plan
    return plan


# ---- gauges, read when scraped -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


def gauges(state: Any, now_ms: int) -> list[Sample]:
    """Levels of a node (broker.node_state.NodeState) right now."""
    samples: list[Sample] = []
    if state.broker is not None:
        samples.append(Sample("flotilla_broker_state", (), int(state.broker.state)))
        samples += _partition_gauges(state.broker)
        samples += _group_gauges(state)
        samples += _transaction_gauges(state, now_ms)
    samples += _raft_gauges(state, now_ms)
    return samples


def _partition_gauges(broker: Any) -> list[Sample]:
    under_replicated = under_min_isr = leaders = 0
    samples = []
    for (topic, partition), hosted in broker.partitions.items():
        replica = hosted.replica
        labels = (("topic", topic), ("partition", str(partition)))
        samples.append(Sample("flotilla_log_size_bytes", labels, hosted.log.size_bytes))
        samples.append(Sample("flotilla_log_segments", labels, len(hosted.log.segments)))
        samples.append(Sample("flotilla_log_end_offset", labels, hosted.log.log_end_offset))
        if not replica.is_leader:
            continue
        leaders += 1
        samples.append(Sample("flotilla_partition_high_watermark", labels, replica.high_watermark))
        if len(replica.isr) < len(replica.replicas):
            under_replicated += 1
        if replica.is_under_min_isr:
            under_min_isr += 1
    image = broker.image
    offline = sum(1 for topic in image.topics.by_name.values() for state in topic.partitions.values()
                  if state.leader < 0)
    samples += [Sample("flotilla_under_replicated_partitions", (), under_replicated),
                Sample("flotilla_under_min_isr_partitions", (), under_min_isr),
                Sample("flotilla_offline_partitions", (), offline),
                Sample("flotilla_leader_partitions", (), leaders),
                Sample("flotilla_partitions", (), len(broker.partitions)),
                Sample("flotilla_uncleanable_partitions", (), len(broker.uncleanable_partitions))]
    return samples


def _raft_gauges(state: Any, now_ms: int) -> list[Sample]:
    if state.raft is None:  # a broker-only node: the quorum as the controllers last told it
        leader = state.quorum_leader_id()
        return [Sample("flotilla_raft_leader", (), leader if leader is not None else -1),
                Sample("flotilla_raft_is_leader", (), 0),
                Sample("flotilla_raft_commit_index", (), state.metadata_image.provenance.raft_index)]
    status = state.raft.status()
    samples = [Sample("flotilla_raft_leader", (), status.leader_id if status.leader_id is not None else -1),
               Sample("flotilla_raft_term", (), status.term),
               Sample("flotilla_raft_commit_index", (), status.raft_commit_index),
               Sample("flotilla_raft_log_end_index", (), status.log_end_index),
               Sample("flotilla_raft_is_leader", (), 1 if status.is_leader else 0)]
    for member in status.members:  # progress is known on the leader only
        if member.match_index is not None and status.is_leader:
            samples.append(Sample("flotilla_raft_voter_lag", (("voter", str(member.id)),),
                                  max(0, status.log_end_index - member.match_index)))
    return samples


def _group_gauges(state: Any) -> list[Sample]:
    service = state.coordinators.services.get(COORDINATOR_KEY_TYPE_GROUP) if state.coordinators else None
    if service is None:
        return []
    runtime = service.runtime
    samples = []
    # The high watermark of this broker's replica (a follower's trails the leader's by a fetch): lag is known
    # for the partitions the coordinator hosts, which with the default replication is all of them.
    ends = {key: hosted.replica.high_watermark for key, hosted in state.broker.partitions.items()}
    for partition in runtime.loaded_partitions():
        shard = runtime.shard(partition)
        for group in shard.list_groups():
            labels = (("group", group.group_id),)
            samples.append(Sample("flotilla_group_members", labels, _members(shard, group.group_id)))
            samples.append(Sample("flotilla_group_state", labels + (("state", group.state),), 1))
        for group_id, topic, index, offset in _committed_offsets(shard):
            end = ends.get((topic, index))
            if end is not None:
                samples.append(Sample("flotilla_group_lag", (("group", group_id), ("topic", topic),
                                                               ("partition", str(index))), max(0, end - offset)))
    return samples


def _members(shard: Any, group_id: str) -> int:
    group = shard.groups.get(group_id)
    return len(group.members) if group is not None else 0


def _committed_offsets(shard: Any) -> Iterator[tuple[str, str, int, int]]:
    for group_id, offsets in shard.offsets.committed.items():
        for (topic, partition), value in offsets.items():
            yield group_id, topic, partition, value.offset


def _transaction_gauges(state: Any, now_ms: int) -> list[Sample]:
    service = state.coordinators.services.get(COORDINATOR_KEY_TYPE_TRANSACTION) if state.coordinators else None
    if service is None:
        return []
    runtime = service.runtime
    by_state: dict[str, int] = defaultdict(int)
    oldest_open_ms = 0
    for partition in runtime.loaded_partitions():
        for metadata in runtime.shard(partition).transactions.values():
            by_state[metadata.state.name_for_clients] += 1
            if metadata.state.name_for_clients == "Ongoing" and metadata.value.start_ms > 0:
                oldest_open_ms = max(oldest_open_ms, now_ms - metadata.value.start_ms)
    samples = [Sample("flotilla_transactions", (("state", name),), count) for name, count in sorted(by_state.items())]
    samples.append(Sample("flotilla_transaction_oldest_open_seconds", (), oldest_open_ms / 1000))
    return samples
