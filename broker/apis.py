"""The Kafka API handlers' registry (Kafka's KafkaApis), sans-IO: decoded request in, response message out.

Theory of operation: handlers come in groups by area (`broker/handlers_data.py`: produce, fetch and the other
partition APIs; `broker/handlers_admin.py`: topics and configs, forwarded to the controller;
`broker/handlers_cluster.py`: ApiVersions, Metadata, DescribeCluster; the coordinators' groups in
`broker/groups.py` and later `broker/transactions.py`). A group lists `(api_key, lowest, highest, handler)`
entries in `api_handlers()` and is added with `KafkaApis.register(group)`; ApiVersions advertises exactly what
is registered (`supported_apis`). `handle(header, request, now_ms)` answers at once (a response message), not
at all (None: an acks=0 produce), or later (a `Deferred` carrying a request id from `defer()`): an acks=all
produce waits for the high watermark, a fetch for min_bytes or max_wait_ms, a forwarded request for the
controller, a coordinator request for its shard's write to commit. A group answers a deferred request by
appending `(request_id, header, response)` to `completed`. Whoever drives this object calls `poll(now_ms)`
after every event that may complete a deferred request (a produce, a follower fetch, a controller answer, a
metadata change, time passing): every group's `poll(now_ms, changed)` runs with the partitions that changed
since the previous poll (`BrokerCore.dirty_partitions`: appended to, or their high watermark, ISR, log start or
leadership moved), so a group looks only at what can have moved, and what completed is returned. A group
that waits on a partition for another reason keeps its own list (an answer held behind a write already
committed, a timer). Errors are per partition (or per topic) Kafka error codes, as the protocol wants; an
exception escaping `handle` is a bug, and the connection is closed.
"""

from __future__ import annotations

import itertools
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from broker.core import BrokerCore, InternalFailure, TopicPartition
from broker.quotas import ClientQuotas, quota_user
from net.protocol.codec import SUPPORTED, RequestHeader
from partitions.errors import ErrorCode
from security.acl import CLUSTER_RESOURCE_NAME, AclOperation, Authorizer, ResourceType
from security.session import Session, anonymous_session
from partitions.storage import StorageError

Handler = Callable[[RequestHeader, Any, int], Any]


def abortable_for(version: int, first_version_with_abortable: int, code: ErrorCode) -> ErrorCode:
    """A failed transaction verification (KIP-890) as the client's request version knows it: TRANSACTION_ABORTABLE
    from the version that added it (Produce v11, TxnOffsetCommit v4), INVALID_TXN_STATE before, as Kafka's
    AddPartitionsToTxnManager answers older clients."""
    if code == ErrorCode.TRANSACTION_ABORTABLE and version < first_version_with_abortable:
        return ErrorCode.INVALID_TXN_STATE
    return code


@dataclass(frozen=True)
class Deferred:
    """The answer to this request comes later, out of `poll`."""

    request_id: int


@dataclass(frozen=True)
class RequestFailed:
    """In place of a deferred request's answer: building it raised (a bug). The listener closes that request's
    connection and logs the error; the simulator reports it as a node error."""

    error: BaseException


class HandlerGroup(Protocol):
    """A set of API handlers that plugs into KafkaApis."""

    def api_handlers(self) -> list[tuple[int, int, int, Handler]]:
        """(api_key, lowest version, highest version, handler) for each API the group serves."""

    def poll(self, now_ms: int, changed: AbstractSet[TopicPartition]) -> None:
        """Complete deferred requests that can be answered now (append to `KafkaApis.completed`); `changed`:
        the partitions that moved since the previous poll (read only)."""

    def next_deadline_ms(self) -> int | None:
        """When `poll` must run at the latest, or None."""


POLL_ROUNDS_MAX = 4  # a completion may move a high watermark that completes another request


class KafkaApis:
    """The registry of API handlers and the deferred-answer machinery they share (see the module docstring)."""

    def __init__(
        self,
        broker: BrokerCore,
        cluster_id: str,
        controller_id: Callable[[], int],
        *,
        auto_create_topics_enable: bool = True,
    ) -> None:
        from broker.handlers_admin import AdminApis
        from broker.handlers_elastic import ElasticityApis
        from broker.handlers_cluster import ClusterApis
        from broker.handlers_data import DataPlaneApis
        from broker.handlers_features import FeatureApis
        from broker.handlers_quotas import QuotaApis
        from broker.handlers_security import SecurityApis

        self.broker = broker
        self.cluster_id = cluster_id
        self.controller_id = controller_id
        self.auto_create_topics_enable = auto_create_topics_enable
        self.completed: list[tuple[int, RequestHeader, Any]] = []
        # The address of the client whose request is being handled ("/127.0.0.1", as Kafka writes it), set
        # by the runtime that knows the connection; coordinators record it as a member's client host.
        self.client_host = ""
        self.client_software: tuple[str | None, str | None] = (None, None)  # ApiVersions v3+ (name, version)
        # The security session of the request being handled (set by the dispatcher; anonymous without one),
        # and Kafka's standard authorizer over the image's ACLs, or None when no authorizer is configured
        # (then every request is allowed, as Kafka without authorizer.class.name).
        self.session: Session = anonymous_session()
        self.authorizer: Authorizer | None = None
        # broker id -> {listener name: (host, port)} from the cluster file, when nodes have several listeners;
        # empty: every broker is advertised at its registered endpoint.
        self.listener_endpoints: dict[int, dict[str, tuple[str, int]]] = {}
        # KIP-890 part 1: `verify(transactional_id, producer_id, producer_epoch, partitions, on_done, now_ms,
        # add=False)` asks the transaction coordinator whether the partitions are in the producer's ongoing
        # transaction (part 2, add=True for Produce v12: adds them); `on_done({partition: ErrorCode}, now_ms)`.
        # Installed by broker/transactions.py; None without it.
        self.transaction_verifier: Callable[..., None] | None = None
        # The features ApiVersions v3+ advertises (net.protocol.codec.Features), None for none; installed by
        # broker/transactions.py (transaction.version).
        self.features: Callable[[], Any] = lambda: None
        # Client quotas (broker/quotas.py): the byte and request rates of the clients of this broker.
        self.quotas = ClientQuotas()
        # Planted bugs for the simulator (simulations/quota_sim.py), never configured: a throttled answer
        # carries throttle_time_ms but the connection is not muted, so a client that does not back off is not
        # held back; the partitions a client deletes are not counted against its controller_mutation_rate.
        self.bug_throttle_not_muted = False
        self.bug_deletions_not_counted = False
        # Planted bug for the simulator (simulations/fuzz_sim.py), never configured: a CreateTopics that forwards
        # nothing to the controller indexes the controller result it never asked for.
        self.bug_create_topics_forward_nothing = False
        self._request_ids = itertools.count(1)
        self._handlers: dict[int, Handler] = {}
        self.supported_apis: dict[int, tuple[int, int]] = {}
        self._registered: dict[int, tuple[int, int]] = {}  # the versions each group registered
        self._groups: list[HandlerGroup] = []
        admin = AdminApis(self)
        for group in (ClusterApis(self), DataPlaneApis(self), admin, SecurityApis(self, admin), QuotaApis(self, admin),
                      FeatureApis(self, admin),
                      ElasticityApis(admin)):
            self.register(group)

    def register(self, group: HandlerGroup) -> None:
        """Serve the group's APIs (each api key once across all groups, within what the codec implements)."""
        for api_key, lowest, highest, handler in group.api_handlers():
            assert api_key not in self._handlers, f"api_key {api_key} registered twice"
            assert SUPPORTED[api_key][0] <= lowest <= highest <= SUPPORTED[api_key][1], (api_key, SUPPORTED[api_key])
            self._handlers[api_key] = handler
            self.supported_apis[api_key] = (lowest, highest)
            self._registered[api_key] = (lowest, highest)
        self._groups.append(group)

    def limit_highest(self, api_key: int, highest: int) -> None:
        """Serve and advertise `api_key` up to `highest` at most, within what its group registered (a version
        a cluster feature gates); a key not registered stays unserved."""
        registered = self._registered.get(api_key)
        if registered is not None:
            lowest, registered_highest = registered
            assert lowest <= highest, (api_key, lowest, highest)
            self.supported_apis[api_key] = (lowest, min(highest, registered_highest))

    def is_supported(self, api_key: int, api_version: int) -> bool:
        versions = self.supported_apis.get(api_key)
        return versions is not None and versions[0] <= api_version <= versions[1]

    def handle(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        """The response message, None (no response), or a Deferred. Callers check `is_supported` first."""
        return self._handlers[header.api_key](header, request, now_ms)

    # ---- authorization (security/acl.py) ------------------------------------------------------------------

    def authorize(self, operation: AclOperation, resource_type: ResourceType, name: str,
                  session: Session | None = None) -> bool:
        """Whether the current request's principal (or `session`'s, for an answer built later) may do
        `operation` on the resource."""
        if self.authorizer is None:
            return True
        session = session or self.session
        self.authorizer.update(self.broker.image.acls.by_id)
        return self.authorizer.authorize(session.principal, session.host, operation, resource_type, name)

    def authorize_cluster(self, operation: AclOperation) -> bool:
        return self.authorize(operation, ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME)

    def authorize_any(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Whether the principal may do `operation` on some resource of the type (Kafka's
        authorizeByResourceType, used for idempotent producers without IDEMPOTENT_WRITE)."""
        if self.authorizer is None:
            return True
        self.authorizer.update(self.broker.image.acls.by_id)
        return self.authorizer.authorize_any(self.session.principal, self.session.host, operation, resource_type)

    def authorized_operations(self, resource_type: ResourceType, name: str, session: Session | None = None) -> int | None:
        """KIP-430's bitfield for the principal, or None when no authorizer is on (every operation)."""
        if self.authorizer is None:
            return None
        session = session or self.session
        self.authorizer.update(self.broker.image.acls.by_id)
        return self.authorizer.authorized_operations(session.principal, session.host, resource_type, name)

    def advertised_endpoint(self, registration: Any, session: Session | None = None) -> tuple[str, int] | None:
        """Where clients of the current request's listener (or of `session`'s, for a request answered later)
        reach the broker (None: it has no such listener, and is left out, as Kafka does)."""
        endpoints = self.listener_endpoints.get(registration.broker_id)
        if not endpoints:
            return registration.host, registration.port
        return endpoints.get((session or self.session).listener_name)

    def client_throttle_ms(self, quota_type: str, session: Session | None, client_id: str | None, value: float,
                           now_ms: int) -> int:
        """Record `value` against the client's quota of `quota_type`; the throttle time (ms) it calls for, with
        the session marked throttled (the listener then reads nothing more from the connection for that
        long, KIP-219). 0 without a quota."""
        quotas = self._client_quotas()
        if quotas is None or session is None:
            return 0
        throttle_ms = quotas.record(quota_type, quota_user(session), client_id or "", value, now_ms)
        if throttle_ms:
            self.broker.metrics.record_throttle(quota_type, throttle_ms)
            if not self.bug_throttle_not_muted:
                session.throttled_until_ms = max(session.throttled_until_ms, now_ms + throttle_ms)
        return throttle_ms

    def client_unrecord(self, quota_type: str, session: Session, client_id: str | None, value: float,
                        now_ms: int) -> None:
        """Take back what `client_throttle_ms` recorded for an answer that is not sent (a throttled fetch)."""
        quotas = self._client_quotas()
        if quotas is not None:
            quotas.unrecord(quota_type, quota_user(session), client_id or "", value, now_ms)

    def client_max_bytes(self, quota_type: str, session: Session | None, client_id: str | None) -> int | None:
        """The most one answer may carry without being throttled for sure, None without a quota."""
        quotas = self._client_quotas()
        if quotas is None or session is None:
            return None
        return quotas.max_bytes(quota_type, quota_user(session), client_id or "")

    def client_quotas_enabled(self) -> bool:
        """The current image has a user or client-id quota: requests are counted against client quotas."""
        image_quotas = self.broker.image.quotas
        if not image_quotas.entities:
            return False
        self.quotas.update(image_quotas)  # (the same image: one identity test)
        return self.quotas.enabled

    def _client_quotas(self) -> ClientQuotas | None:
        """The quota manager over the current image's quotas, None when no request is counted."""
        return self.quotas if self.client_quotas_enabled() else None

    def defer(self) -> int:
        """A request id for a Deferred answer."""
        return next(self._request_ids)

    def answer_deferred(self, request_id: int, header: RequestHeader, build: Callable[[], Any]) -> None:
        """Build a deferred request's answer out of a callback (the controller's answer to a forwarded request,
        a transaction verification): a response completes the request, None or a Deferred leaves it to later.
        A build that raises fails that request alone (`RequestFailed`) where the exception would have ended
        the node's loop."""
        try:
            response = build()
        except StorageError:
            raise  # the disk failed: not a bug to survive; the node stops (net/node.py)
        except Exception as error:  # a handler's bug: this request's connection closes, the node goes on
            response = RequestFailed(error)
        if response is not None and not isinstance(response, Deferred):
            self.completed.append((request_id, header, response))

    def poll(self, now_ms: int) -> list[tuple[int, RequestHeader, Any]]:
        """Deferred requests that are now answered: (request id, header, response or RequestFailed)."""
        broker = self.broker
        for _ in range(POLL_ROUNDS_MAX):
            changed, broker.dirty_partitions = broker.dirty_partitions, set()
            if changed:
                broker.partition_generation += 1  # what a follower's quiet walk found may no longer hold
            for group in self._groups:
                try:
                    group.poll(now_ms, changed)
                except StorageError:
                    raise
                except Exception as error:  # one group's bug must not end the node or starve the other groups
                    broker.failures.append(InternalFailure("poll", type(group).__name__, error))
            if not broker.dirty_partitions:
                break
        completed, self.completed = self.completed, []
        return completed

    def next_deadline_ms(self) -> int | None:
        deadlines = [d for d in (group.next_deadline_ms() for group in self._groups) if d is not None]
        return min(deadlines) if deadlines else None
