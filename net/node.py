"""One Flotilla node: the trio runtime around the sans-IO cores.

Theory of operation (etcd-raft's "ready" loop, in trio): every piece of state lives in sans-IO objects
(`NodeState`: `RaftDriver`, `ControllerCore` + `QuorumController`, `BrokerCore` + `KafkaApis`); this module
only moves bytes and time between them and the sockets:
- the Raft shell ticks the driver and carries its messages over the controller port; after each Raft step
  the node replays committed metadata entries (controller state, then the broker's image delta);
- the Kafka listener feeds request frames to the dispatcher;
- a replica fetcher task per leader broker sends the requests `BrokerCore.next_replica_request` builds;
- controller calls (registration, heartbeats, AlterPartition, forwarded CreateTopics) are carried by
  broker/controller_calls.py, as in the simulator: to the local `ControllerCore` when this node is the active
  controller, else over the controller port as an RPC (a task per attempt);
- `_process()` runs after every event and every `TICK_INTERVAL_MS`: it lets the cores advance and delivers
  what they produced (deferred Kafka responses, controller answers).
Everything runs in one trio thread, so the cores are never entered concurrently.

Shutdown (SIGTERM / SIGINT / cancel): a broker first asks the controller to move its leaderships away
(controlled shutdown, bounded; not waited for when every other broker is fenced or shutting down too, as when
the whole cluster stops), then the node checkpoints high watermarks, flushes logs and closes the journal.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import math
import os
import random
import signal
import ssl
import sys
import time
from typing import Any, Callable

import trio

from metadata.requests import decode_request as decode_controller_request
from metadata.requests import encode_request as encode_controller_request
from broker.controller_calls import ControllerCalls, ControllerRpc, controller_reply, refuse_unless_leading
from broker.metadata_observer import MetadataObserver
from broker.core import BrokerRequest
from broker.quotas import ip_connection_rate
from broker.config import ClusterConfig, NodeConfig, parse_connection_overrides
from broker.controller_core import ControllerOutcome, UnreadableMetadataError
from net.connections import (DESCRIPTORS_FOR_CONTROLLER, ConnectionLimits, default_total_max,
                             raise_descriptor_limit, serve_listeners)
from net.dispatcher import KafkaDispatcher
from net.filestorage import FileStorage
from net.jwks_endpoint import JwksEndpoint, JwksFile
from net import plainsocket
from net.logs import get_logger
from net.malloc import keep_heap_pages
from net.heap import freeze_startup_heap, time_collections
from broker.node_state import RPC_KIND_CONTROLLER, RPC_KIND_METADATA_FETCH, NodeState
from net.client.connection import ClientConnection, ConnectionState
from net.client.security import ClientSecurity, OidcClientCredentials, reauthenticate_at, sasl_authenticate
from net.server import FrameServer, ServerLimits, keep_deadline_ahead
from net.tls import receive_available
from partitions.errors import ErrorCode, KafkaError
from partitions.storage import StorageError
from raftlog.shell import RaftShell, call_rpc, monotonic_ms

TICK_INTERVAL_MS = 20
REPLICA_REQUEST_TIMEOUT_MS = 10_000
CONTROLLED_SHUTDOWN_LEADERLESS_S_MAX = 1.0
OBSERVER_FETCH_TIMEOUT_MS = 5_000
FAILURE_LOG_INTERVAL_MS = 60_000  # an internal error that repeats (a poll that keeps raising): logged once a minute


def _registration_state(registration: Any) -> str:
    """A broker registration's state, as the node's log names it."""
    return "fenced" if registration.fenced else "shutting_down" if registration.in_controlled_shutdown else "active"


def wall_clock_ms() -> int:
    """Milliseconds since the epoch: the broker's clock (see NodeState); Raft keeps the monotonic one."""
    return time.time_ns() // 1_000_000


class Node:
    """The runtime of one node of `config` (see the module docstring)."""

    def __init__(self, config: ClusterConfig, node_id: int) -> None:
        self.config = config
        self.node_config: NodeConfig = config.node(node_id)
        self.node_id = node_id
        self.log = get_logger(node_id=node_id)
        rng = random.Random(int.from_bytes(os.urandom(8), "big"))
        self.state = NodeState(config, node_id, FileStorage(self.node_config.data_dir), rng, monotonic_ms,
                               incarnation_id=os.urandom(16), broker_clock_ms=wall_clock_ms)
        self.raft = self.state.raft
        self.broker = self.state.broker
        self.controller_ids = self.state.controller_ids
        self.dispatcher: KafkaDispatcher | None = None
        if self.broker is not None:
            self.dispatcher = KafkaDispatcher(self.state.apis, wall_clock_ms, self._after_kafka_event, self.handle_admin,
                                              security=config.security)
        self.inter_broker_security = inter_broker_security(config, node_id)
        if self.broker is not None:
            self.broker.metrics.enabled = self.node_config.metrics_port is not None
        # OAUTHBEARER's keys (net/jwks_endpoint.py; the config sets either only with OAUTHBEARER enabled)
        self.jwks_endpoint: JwksEndpoint | None = None
        security = config.security
        if self.dispatcher is not None and security.sasl_oauthbearer_jwks_endpoint_url:
            self.jwks_endpoint = JwksEndpoint(security.sasl_oauthbearer_jwks_endpoint_url,
                                              security.sasl_oauthbearer_jwks_endpoint_refresh_ms,
                                              security.sasl_oauthbearer_jwks_endpoint_cafile, self.log)
            self.dispatcher.sasl_gate.jwks_source = self.jwks_endpoint
        elif self.dispatcher is not None and security.sasl_oauthbearer_jwks_file:
            self.dispatcher.sasl_gate.jwks_source = JwksFile(security.sasl_oauthbearer_jwks_file)
        self.controller_tls = controller_tls_contexts(config, node_id) if config.security.controller_tls else None
        self._operation_waiters: dict[int, trio.MemorySendChannel] = {}
        self._logged_quorum_leader: int | None = None  # _log_cluster_changes: what the log last said
        self._logged_image: Any = None
        self._logged_replicas = (0, 0)
        self._logged_registration_refused: tuple[str, str] | None = None
        self._logged_uncleanable: set[tuple[str, int]] = set()  # the uncleanable partitions already logged
        # (where, subject, exception type) -> (when last logged, times since): a failure that repeats (a poll that
        # keeps raising) is logged once a minute, not on every request; keyed by type, not message, to stay bounded.
        self._logged_failures: dict[tuple[str, str, str], tuple[int, int]] = {}
        # The controller calls (broker/controller_calls.py) and the scopes of their RPCs in flight, by RPC id
        self.controller_calls = ControllerCalls(self.state, _TrioControllerCallPort(self))
        self._controller_rpcs: dict[int, trio.CancelScope] = {}
        self._step_wanted = trio.Event()  # set to step at once rather than at the next tick
        # Observers' metadata fetches held here (the quorum leader) until an entry is committed or the leader
        # changes: what they wait for, and the event that wakes them (replaced each time it is set)
        self._metadata_news: tuple[int, int | None] | None = None
        self._metadata_news_event = trio.Event()
        self._metadata_news_waiters = 0
        self._nursery: trio.Nursery | None = None
        self._fetchers: dict[int, trio.CancelScope] = {}
        # The outbox's connections, one per (destination, API): requests are pipelined on each, and a quick
        # one (a KIP-890 verification) never waits behind one the destination answers after a replication
        # round (WriteTxnMarkers), since a broker answers a connection's requests in order.
        self._broker_connections: dict[tuple[int, int], KafkaConnection] = {}
        self._send_turns: dict[tuple[int, int], SendTurns] = {}  # the order of the outbox's sends per connection
        self._broker_opening: dict[tuple[int, int], trio.Lock] = {}
        self.kafka_port: int | None = None
        self.metrics_port: int | None = None
        # The Kafka listeners' and the controller port's connection counts and limits, set as they start
        self.connections: ConnectionLimits | None = None
        self.controller_connections: ConnectionLimits | None = None
        self.raft_shell: RaftShell | None = None
        # A broker-only node's fetches of the metadata log from the quorum leader (broker/metadata_observer.py)
        self.observer = MetadataObserver(self.state, _TrioMetadataFetchPort(self), OBSERVER_FETCH_TIMEOUT_MS)

    # ------------------------------------------------------------------ the event step

    def _process(self) -> None:
        """Let every core advance and deliver what it produced. Runs on the ticker and after Raft steps."""
        self._deliver(self.state.step(monotonic_ms()))
        self.controller_calls.abandon_moved()
        if self._metadata_news_waiters and self.state.metadata_news() != self._metadata_news:
            self._metadata_news_changed()
        self._log_cluster_changes()

    def _log_cluster_changes(self) -> None:
        """One log line per change an operator reconstructs an incident from: the quorum leader this node knows,
        broker registrations (registered, fenced, unfenced, shutting down, gone), this broker's registration
        refused for a reason retrying will not cure (a warning, once per reason), and how many partitions this
        broker leads and follows. Compared after each step; the image part only when the image changed."""
        leader_id = self.state.quorum_leader_id()
        if leader_id != self._logged_quorum_leader:
            self._logged_quorum_leader = leader_id
            if leader_id is not None:
                self.log.info("quorum_leader", leader_id=leader_id)
        refused = self.broker.registration_refused if self.broker is not None else None
        if refused != self._logged_registration_refused:
            self._logged_registration_refused = refused
            if refused is not None:  # the broker retries; the log says why it does not serve, once per reason
                self.log.warning("broker_registration_refused", error=refused[0], reason=refused[1])
        if self.broker is not None and self.broker.uncleanable_partitions.keys() != self._logged_uncleanable:
            for (topic, partition), reason in sorted(self.broker.uncleanable_partitions.items()):
                if (topic, partition) not in self._logged_uncleanable:
                    self.log.error("log_cleaning_failed", topic=topic, partition=partition, error=reason,
                                   action="not cleaned again until the node restarts")
            self._logged_uncleanable = set(self.broker.uncleanable_partitions)
        image = self.broker.image if self.broker is not None else None
        if image is None or image is self._logged_image:
            return
        previous, self._logged_image = self._logged_image, image
        before = {} if previous is None else previous.cluster.brokers
        for broker_id, registration in sorted(image.cluster.brokers.items()):
            old = before.get(broker_id)
            state = _registration_state(registration)
            same = old is not None and old.broker_epoch == registration.broker_epoch
            old_state = _registration_state(old) if same else None
            if state != old_state:
                event = "broker_registered" if old_state is None else f"broker_{state}"
                self.log.info(event, broker_id=broker_id, broker_epoch=registration.broker_epoch, state=state)
        for broker_id in sorted(set(before) - set(image.cluster.brokers)):
            self.log.info("broker_unregistered", broker_id=broker_id)
        if previous is not None and image.topics is previous.topics:
            return
        leading = sum(1 for hosted in self.broker.partitions.values() if hosted.replica.is_leader)
        following = len(self.broker.partitions) - leading
        if (leading, following) != self._logged_replicas:
            self._logged_replicas = (leading, following)
            self.log.info("partition_replicas", leading=leading, following=following)

    def _after_kafka_event(self) -> None:
        """After a Kafka request or a replica response: deliver what it completed (cheap; no Raft, no timers)."""
        self._deliver(self.state.after_kafka_event(wall_clock_ms()))

    def _deliver(self, output) -> None:
        if output.failures:
            self._report_failures(output.failures)
        for event, fields in output.notices:
            self.log.info(event, **fields)
        for outcome in output.controller_outcomes:
            if self.controller_calls.on_local_outcome(outcome):
                continue
            waiter = self._operation_waiters.pop(outcome.operation_id, None)
            if waiter is not None:
                waiter.send_nowait(outcome)
        if self.broker is not None:
            self.dispatcher.complete(output.kafka_completions)
            for call in output.controller_calls:
                self.controller_calls.start(call)
            for request in output.broker_requests:
                turns = self._send_turns.setdefault((request.destination, request.api_key), SendTurns())
                self._nursery.start_soon(self._run_broker_request, request, turns, turns.ticket())
            self._sync_fetchers()
        if output.proposed and self.raft_shell is not None:
            self.raft_shell.wake()  # ship the new entry now, not at the next heartbeat

    def _report_failures(self, failures: list) -> None:
        """Exceptions the broker survived (BrokerCore.failures: a handler group's poll, applying a leader's answer
        for one partition): count each and log it with its traceback, once a minute per kind while it repeats."""
        now_ms = monotonic_ms()
        for failure in failures:
            self.broker.metrics.record_internal_error(failure.where)
            key = (failure.where, failure.subject, type(failure.error).__name__)
            logged_ms, since = self._logged_failures.get(key, (None, 0))
            if logged_ms is not None and now_ms - logged_ms < FAILURE_LOG_INTERVAL_MS:
                self._logged_failures[key] = (logged_ms, since + 1)
                continue
            self._logged_failures[key] = (now_ms, 0)
            error = failure.error
            self.log.error("internal_error", where=failure.where, subject=failure.subject, repeated=since,
                           exc_info=(type(error), error, error.__traceback__))

    def handle_admin(self, request: dict) -> dict:
        return self.state.handle_admin(request, monotonic_ms())

    # ------------------------------------------------------------------ controller calls

    async def submit_to_controller(self, request: Any) -> Any:
        """Run a controller request on the active controller (here or remote), as the broker's own calls are
        run. Returns its response; raises KafkaError (NOT_CONTROLLER or REQUEST_TIMED_OUT once the call's
        timeout is over, or the controller's own error). Only on a node with the broker role."""
        answered = trio.Event()
        answers: list[Any] = []

        def on_response(response: Any, now_ms: int) -> None:
            answers.append(response)
            answered.set()

        self.broker.call_controller(request, on_response)
        self._process()
        await answered.wait()
        if isinstance(answers[0], KafkaError):
            raise answers[0]
        return answers[0]

    async def _submit_locally(self, request: Any) -> ControllerOutcome:
        """A remote node's request, on this node's controller: the outcome (an error names the leader)."""
        send, receive = trio.open_memory_channel[ControllerOutcome](1)
        operation_id = self.state.submit_controller_request(request, monotonic_ms())
        self._operation_waiters[operation_id] = send
        self._process()
        return await receive.receive()

    async def _carry_controller_rpc(self, rpc: ControllerRpc) -> None:
        """One attempt of a controller call at a remote controller; its answer, or failure, goes back to
        `controller_calls`. Cancelled when the call gives the attempt up (_TrioControllerCallPort.abandon_rpc)."""
        target = self.config.node(rpc.target)
        answer: dict | None = None
        with trio.CancelScope() as scope:
            self._controller_rpcs[rpc.rpc_id] = scope
            try:
                answer = await call_rpc(
                    target.host, target.controller_port, self.config.cluster_id, self.config.secret,
                    {"kind": RPC_KIND_CONTROLLER, "request": encode_controller_request(rpc.request)},
                    rpc.timeout_ms, node_id=self.node_id,
                    ssl_context=self.controller_tls[1] if self.controller_tls is not None else None,
                )
            except (KafkaError, OSError, trio.BrokenResourceError, trio.ClosedResourceError,
                    trio.TooSlowError) as error:
                # call_rpc's own failures (ControlRpcError, RequestTimedOutError) are KafkaErrors
                self.controller_calls.on_rpc_failed(
                    rpc.rpc_id, KafkaError(f"controller {rpc.target} unreachable: {error}", ErrorCode.REQUEST_TIMED_OUT))
            finally:
                del self._controller_rpcs[rpc.rpc_id]
        if answer is not None:
            self.controller_calls.on_rpc_reply(rpc.rpc_id, answer)
        self._process()

    async def _wait_for_metadata_news(self, hold_ms: int) -> None:
        """Hold an observer's fetch until `NodeState.metadata_news` changes, for at most `hold_ms`."""
        self._metadata_news = self.state.metadata_news()
        self._metadata_news_waiters += 1
        try:
            with trio.move_on_after(hold_ms / 1000):
                await self._metadata_news_event.wait()
        finally:
            self._metadata_news_waiters -= 1

    def _metadata_news_changed(self) -> None:
        self._metadata_news = self.state.metadata_news()
        self._metadata_news_event.set()
        self._metadata_news_event = trio.Event()

    async def handle_rpc(self, request: dict) -> dict:
        """Requests arriving on the controller port from other nodes and from the CLI."""
        kind = request.get("kind")
        if kind == RPC_KIND_METADATA_FETCH:
            try:
                hold_ms = self.state.metadata_fetch_hold_ms(request, monotonic_ms())
                if hold_ms:
                    await self._wait_for_metadata_news(hold_ms)
                return self.state.metadata_fetch_answer(request, monotonic_ms(), held=hold_ms > 0)
            except (KeyError, TypeError, ValueError) as error:
                return {"error": int(ErrorCode.INVALID_REQUEST), "message": f"bad metadata fetch: {error}"}
        if kind == RPC_KIND_CONTROLLER:
            try:
                controller_request = decode_controller_request(request["request"])
            except KafkaError as error:
                return {"error": int(error.code), "message": error.message}
            return controller_reply(refuse_unless_leading(self.state) or await self._submit_locally(controller_request))
        return self.handle_admin(request)

    # ------------------------------------------------------------------ replica fetchers

    def _sync_fetchers(self) -> None:
        wanted = self.broker.replica_leaders()
        for leader_id in list(self._fetchers):
            if leader_id not in wanted:
                self._fetchers.pop(leader_id).cancel()
        for leader_id in wanted - set(self._fetchers):
            scope = trio.CancelScope()
            self._fetchers[leader_id] = scope
            self._nursery.start_soon(self._run_fetcher, leader_id, scope)

    async def _run_fetcher(self, leader_id: int, scope: trio.CancelScope) -> None:
        with scope:
            while True:
                connection = None
                try:
                    # The leader's registered (inter-broker) endpoint: a broker that joined later is in no one's
                    # config file.
                    endpoint = self.broker.broker_endpoint(leader_id)
                    if endpoint is None:
                        raise KafkaError(f"broker {leader_id} is not registered", ErrorCode.NETWORK_EXCEPTION)
                    connection = await KafkaConnection.open(*endpoint, f"replica-{self.node_id}",
                                                            self.inter_broker_security)
                    await self._fetch_loop(leader_id, connection)
                except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, KafkaError) as error:
                    self.log.debug("replica_fetcher_error", leader_id=leader_id, error=str(error))
                finally:
                    if connection is not None:
                        await connection.aclose()
                await trio.sleep(0.2)

    async def _fetch_loop(self, leader_id: int, connection: "KafkaConnection") -> None:
        # One timeout scope for the loop, its deadline kept ahead lazily (keep_deadline_ahead, as the listener's
        # idle deadline): a request fails after 1 to 1.1 times REPLICA_REQUEST_TIMEOUT_MS, without a new cancel
        # scope and deadline per fetch.
        timeout_s = REPLICA_REQUEST_TIMEOUT_MS / 1000
        with trio.CancelScope() as timeout:
            while True:
                sent = self.broker.next_replica_request(leader_id, wall_clock_ms())
                if sent is None:
                    timeout.deadline = math.inf
                    await trio.sleep(0.05)
                    continue
                keep_deadline_ahead(timeout, timeout_s)
                try:
                    response = await connection.request(sent.api_key, sent.api_version, sent.request)
                except BaseException:
                    self.broker.on_replica_response(sent, None, wall_clock_ms())
                    raise
                self.broker.on_replica_response(sent, response, wall_clock_ms())
                self._after_kafka_event()
        if timeout.cancelled_caught:  # the request was answered with None above, as for any failure
            raise trio.TooSlowError(f"no answer from broker {leader_id} in {timeout_s} s")

    # ------------------------------------------------------------------ the outbox

    async def _run_broker_request(self, sent: BrokerRequest, turns: "SendTurns", ticket: int) -> None:
        """Deliver one outbox request over this node's connection for its destination and API, pipelined and
        sent in the order the broker queued them (as the simulator's runtime sends them: trio starts the tasks
        of one batch in any order, and a partition leader's KIP-890 verifications answered out of order would
        append a producer's batches out of order); answer it with the response or the typed error."""
        key = (sent.destination, sent.api_key)
        connection = None
        try:
            with trio.fail_after(max(0.0, (sent.deadline_ms - wall_clock_ms()) / 1000)):
                await turns.wait(ticket)
                connection = await self._broker_connection(key)
                if connection is None:
                    answer = KafkaError(f"broker {sent.destination} is not registered", ErrorCode.NETWORK_EXCEPTION)
                else:
                    answer = await connection.request(sent.api_key, sent.api_version, sent.request,
                                                      on_sent=functools.partial(turns.release, ticket))
        except trio.TooSlowError:
            answer = KafkaError(f"no answer from broker {sent.destination} in time", ErrorCode.REQUEST_TIMED_OUT)
            await self._drop_broker_connection(key, connection)  # its reply may still be on its way
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, KafkaError) as error:
            answer = KafkaError(f"broker {sent.destination}: {error}", ErrorCode.NETWORK_EXCEPTION)
            await self._drop_broker_connection(key, connection)
        finally:
            turns.release(ticket)  # not sent (no connection, a timeout, cancelled): the next one goes
        self.broker.on_broker_response(sent, answer, wall_clock_ms())
        self._after_kafka_event()

    async def _broker_connection(self, key: tuple[int, int]) -> "KafkaConnection | None":
        """The open connection for (destination, API), opened once by the first request that needs it."""
        async with self._broker_opening.setdefault(key, trio.Lock()):
            connection = self._broker_connections.get(key)
            if connection is None:
                endpoint = self.broker.broker_endpoint(key[0])
                if endpoint is None:
                    return None
                connection = await KafkaConnection.open(*endpoint, f"broker-{self.node_id}", self.inter_broker_security)
                self._broker_connections[key] = connection
            return connection

    async def _drop_broker_connection(self, key: tuple[int, int], connection: "KafkaConnection | None") -> None:
        """Close `connection` (the requests still in flight on it fail and are retried by their owners) and
        forget it, unless it was already replaced."""
        if connection is None:
            return
        if self._broker_connections.get(key) is connection:
            del self._broker_connections[key]
        await connection.aclose()

    # ------------------------------------------------------------------ running

    def _connection_limits(self) -> ConnectionLimits:
        """The node's max.connections (by default half its descriptor limit) and max.connections.per.ip; the
        inter-broker listener is exempt from the first when the node has other listeners (net/connections.py)."""
        settings = self.config.broker
        total_max = settings.connections_max if settings.connections_max is not None else default_total_max()
        listeners = self.node_config.listeners
        exempt = self.node_config.inter_broker_listener.name if len(listeners) > 1 else None
        names = {listener.name for listener in listeners}  # the cluster's file may name other nodes' listeners
        limits = ConnectionLimits(
            total_max, settings.connections_per_ip_max,
            parse_connection_overrides(settings.connections_per_ip_overrides), exempt,
            listener_max={name: count for name, count in settings.listener_connections_max.items() if name in names},
            listener_rate_max={name: float(rate)
                               for name, rate in settings.listener_connection_creation_rate_max.items() if name in names})
        broker = self.broker
        limits.ip_rate_quota = lambda host: ip_connection_rate(broker.image.quotas, host)  # KIP-612
        limits.rate_max = settings.connection_creation_rate_max
        self.log.info("connection_limits", connections_max=total_max,
                      connections_per_ip_max=settings.connections_per_ip_max, exempt_listener=exempt,
                      listener_connections_max=limits.listener_max or None,
                      listener_connection_creation_rate_max=limits.listener_rate_max or None)
        return limits

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            if self.raft is not None:
                peers = {n.id: (n.host, n.controller_port) for n in self.config.controllers if n.id != self.node_id}
                self.controller_connections = ConnectionLimits(default_total_max(DESCRIPTORS_FOR_CONTROLLER))
                self.raft_shell = RaftShell(
                    self.raft, self.node_id, self.node_config.host, self.node_config.controller_port, peers,
                    self.config.cluster_id, self.config.secret, rpc_handler=self.handle_rpc, on_step=self._process,
                    tls=self.controller_tls, serve_listeners=functools.partial(
                        serve_listeners, limits=self.controller_connections, name="CONTROLLER", log=self.log),
                )
                await nursery.start(self.raft_shell.run)
            else:
                self.observer.fetch()
            if self.jwks_endpoint is not None:
                nursery.start_soon(self.jwks_endpoint.run)
            if self.broker is not None:
                limits = ServerLimits(
                    request_bytes_max=self.config.broker.request_bytes_max,
                    inflight_requests_max=self.config.broker.inflight_requests_max,
                    idle_ms_max=self.config.broker.connections_idle_ms_max,
                )
                self.connections = self._connection_limits()
                for listener in self.node_config.listeners:
                    context = server_ssl_context(self.config, self.node_id) if listener.uses_tls else None
                    server = FrameServer(listener.host, listener.port, self.dispatcher, limits, name=listener.name,
                                         ssl_context=context, listener=listener, connections=self.connections)
                    bound = await nursery.start(server.run)
                    if listener.port == self.node_config.kafka_port:
                        self.kafka_port = bound
            if self.node_config.metrics_port is not None:
                from net.metrics import MetricsServer, NodeCollector

                collector = NodeCollector(self.node_id, self.broker.metrics if self.broker is not None else None,
                                          self.state, wall_clock_ms,
                                          {"kafka": self.connections, "controller": self.controller_connections})
                self.metrics_port = await nursery.start(
                    MetricsServer(self.node_config.host, self.node_config.metrics_port, collector).run)
            nursery.start_soon(self._ticker)
            self.log.info("node_started", kafka_port=self.kafka_port, controller_port=self.node_config.controller_port,
                          roles=list(self.node_config.roles))
            task_status.started(self)
            await self._wait_for_stop_signal()
            await self._controlled_shutdown()
            nursery.cancel_scope.cancel()
        self.close()

    async def _ticker(self) -> None:
        while True:
            self._step_wanted = trio.Event()
            self._process()
            with trio.move_on_after(TICK_INTERVAL_MS / 1000):
                await self._step_wanted.wait()

    async def _wait_for_stop_signal(self) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                self.log.info("node_stopping")
                return

    async def _controlled_shutdown(self) -> None:
        if self.broker is None or self.broker.broker_epoch is None:
            return
        self.broker.request_controlled_shutdown(wall_clock_ms())
        leaderless_since = None
        with trio.move_on_after(20):
            while not self.broker.controlled_shutdown_done(wall_clock_ms()):
                self._process()
                # With no quorum (the whole cluster stopping at once) nobody can move leadership: do not wait.
                if self.state.quorum_leader_id() is None:
                    leaderless_since = leaderless_since or trio.current_time()
                    if trio.current_time() - leaderless_since > CONTROLLED_SHUTDOWN_LEADERLESS_S_MAX:
                        break
                else:
                    leaderless_since = None
                await trio.sleep(0.05)
        self.log.info("controlled_shutdown_done", granted=self.broker.shutdown_granted,
                      no_successor=self.broker.no_successor())

    def close(self) -> None:
        self.state.close()

    async def _carry_metadata_fetch(self, target: int, request: dict) -> None:
        """An observer's fetch of the metadata log from controller `target`; its answer, or failure, goes back
        to `observer` unless the observer has given the fetch up (its timeout) and sent another since."""
        fetch_id = self.observer.fetch_id
        controller = self.config.node(target)
        try:
            answer = await call_rpc(
                controller.host, controller.controller_port, self.config.cluster_id, self.config.secret,
                {"kind": RPC_KIND_METADATA_FETCH, **request}, OBSERVER_FETCH_TIMEOUT_MS, node_id=self.node_id,
                ssl_context=self.controller_tls[1] if self.controller_tls is not None else None)
        except (KafkaError, OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError) as error:
            self.log.debug("metadata_fetch_failed", controller=target, error=str(error))
            if self.observer.fetch_id == fetch_id:
                self.observer.on_failure()
            return
        if "error" in answer:
            self.log.debug("metadata_fetch_failed", controller=target, error=answer.get("message", ""))
        if self.observer.fetch_id == fetch_id:
            self.observer.on_answer(target, answer)


class KafkaConnection:
    """A trio connection for broker-to-broker requests (replica fetching, the outbox) over the Kafka client's
    sans-IO `ClientConnection` (net/client/connection.py): versions negotiated once when it opens (ApiVersions,
    with KIP-511's fallback), then requests at the version the caller names. Several tasks may have requests in
    flight at once: each is sent whole, in turn, and the responses, which come back in that order, are read by
    whichever waiting task holds the read lock and handed to their owners. When the listener's SASL sessions
    expire (KIP-368) the connection re-authenticates at a random 85-95% of the lifetime, as Kafka's clients
    do: the next request waits, holding the write lock, until nothing is in flight, and the exchange runs
    again."""

    def __init__(self, stream: Any, connection: ClientConnection, security: ClientSecurity | None = None) -> None:
        self.stream = stream
        self.connection = connection
        self.security = security
        self._fd = plainsocket.descriptor(stream)  # None on TLS
        self._room = trio.Semaphore(connection.inflight_requests_max)  # more wait their turn to be sent
        self._send_lock = trio.Lock()
        self._read_lock = trio.Lock()
        self._answers: dict[int, Any] = {}  # correlation id -> response read for a task not yet back for it
        self._outstanding = 0  # requests sent and not yet answered
        self._idle: trio.Event | None = None  # set when the last of them is answered
        self._reauthenticate_at: float | None = None  # trio time; None: the session does not expire
        self.reauthentications = 0

    @classmethod
    async def open(cls, host: str, port: int, client_id: str,
                   security: ClientSecurity | None = None) -> "KafkaConnection":
        """Connect (over TLS and authenticated with SASL when `security` says so) and negotiate versions."""
        stream: Any = await trio.open_tcp_stream(host, port)
        if security is not None and security.uses_tls:
            stream = trio.SSLStream(stream, security.ssl_context(), server_hostname=host)
        opened = cls(stream, ClientConnection(client_id), security)
        try:
            await stream.send_all(opened.connection.initiate())
            while opened.connection.state is not ConnectionState.READY:
                await opened._next_response()
                if opened.connection.state is ConnectionState.NEW:  # KIP-511: try the version it offered
                    await stream.send_all(opened.connection.initiate())
            if security is not None and security.uses_sasl:
                lifetime_ms = await sasl_authenticate(opened._call_holding_send_lock, security)
                opened._reauthenticate_at = reauthenticate_at(lifetime_ms, trio.current_time())
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        return opened

    async def request(self, api_key: int, api_version: int, request: Any,
                      on_sent: Callable[[], None] | None = None) -> Any:
        """The response to `request`. Raises KafkaError (a protocol violation, or a refused re-authentication:
        the connection is unusable), trio.BrokenResourceError when the peer closed it. A request cancelled after
        it was sent leaves the connection unusable (its response would be read for nobody): the caller closes
        it. `on_sent()` is called once the request is on its way (the next one may be sent)."""
        if self._reauthenticate_at is not None and trio.current_time() >= self._reauthenticate_at:
            await self._reauthenticate()
        # The locks are taken without a scheduler checkpoint when free: a replica fetcher, the only user of
        # its connection, pays nothing for them on every fetch.
        await _acquire(self._room)
        try:
            await _acquire(self._send_lock)  # the correlation id is taken and the bytes sent in the same turn
            try:
                correlation_id = await self._send(api_key, api_version, request)
            finally:
                self._send_lock.release()
            if on_sent is not None:
                on_sent()
            return await self._answer(correlation_id)
        finally:
            self._room.release()

    async def _send(self, api_key: int, api_version: int, request: Any) -> int:
        correlation_id, data = self.connection.send_request(api_key, request, api_version)
        if self._fd is None:
            await self.stream.send_all(data)
        else:
            await plainsocket.send_all(self._fd, data)
        self._outstanding += 1
        return correlation_id

    async def _answer(self, correlation_id: int) -> Any:
        await _acquire(self._read_lock)
        try:
            while correlation_id not in self._answers:
                answered, response = await self._next_answer()
                self._answers[answered] = response
            return self._answers.pop(correlation_id)
        finally:
            self._read_lock.release()
            self._outstanding -= 1
            if not self._outstanding and self._idle is not None:
                self._idle.set()

    async def _call_holding_send_lock(self, api_key: int, request: Any, api_version: int) -> Any:
        """One request of the SASL exchange (sasl_authenticate's `call`), sent while nothing else is."""
        return await self._answer(await self._send(api_key, api_version, request))

    async def _reauthenticate(self) -> None:
        await self._send_lock.acquire()
        try:
            if self._reauthenticate_at is None or trio.current_time() < self._reauthenticate_at:
                return  # another task re-authenticated while this one waited for the lock
            while self._outstanding:
                self._idle = trio.Event()
                await self._idle.wait()
            lifetime_ms = await sasl_authenticate(self._call_holding_send_lock, self.security)
            self._reauthenticate_at = reauthenticate_at(lifetime_ms, trio.current_time())
            self.reauthentications += 1
        finally:
            self._send_lock.release()

    async def _next_response(self) -> Any:
        return (await self._next_answer())[1]

    async def _next_answer(self) -> tuple[int, Any]:
        while True:
            answer = self.connection.next_response()
            if answer is not None:
                return answer
            if self._fd is None:
                data = await self.stream.receive_some(plainsocket.RECEIVE_BYTES_MAX)
                data = receive_available(self.stream, data, plainsocket.RECEIVE_BYTES_MAX) if data else data
            else:
                data = await plainsocket.receive_some(self._fd, plainsocket.RECEIVE_BYTES_MAX)
            if not data:
                raise trio.BrokenResourceError("connection closed by the peer")
            self.connection.receive_data(data)

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)


class SendTurns:
    """Requests sent over one connection in the order they were queued, by tasks that trio may start in any
    order: `ticket()` when queued (synchronously, in order), `await wait(ticket)` before sending,
    `release(ticket)` once sent or given up (idempotent; a ticket released before its turn is skipped)."""

    def __init__(self) -> None:
        self._next_ticket = 0
        self._turn = 0  # the ticket that may send now
        self._released: set[int] = set()  # tickets given up before their turn
        self._waiting: dict[int, trio.Event] = {}

    def ticket(self) -> int:
        ticket = self._next_ticket
        self._next_ticket += 1
        return ticket

    async def wait(self, ticket: int) -> None:
        if ticket != self._turn:
            event = self._waiting[ticket] = trio.Event()
            await event.wait()

    def release(self, ticket: int) -> None:
        if ticket < self._turn:
            return
        self._released.add(ticket)
        self._waiting.pop(ticket, None)
        while self._turn in self._released:
            self._released.discard(self._turn)
            self._turn += 1
        event = self._waiting.pop(self._turn, None)
        if event is not None:
            event.set()


async def _acquire(lock: trio.Lock | trio.Semaphore) -> None:
    """Take `lock` at once when it is free (no scheduler checkpoint), else wait for it."""
    try:
        lock.acquire_nowait()
    except trio.WouldBlock:
        await lock.acquire()


def server_ssl_context(config: ClusterConfig, node_id: int) -> ssl.SSLContext:
    """The TLS context of a node's TLS listeners: its certificate and key, TLS 1.2+, client certificates
    verified against the CA when `ssl_client_auth` asks for them."""
    security = config.security
    certfile, keyfile, cafile = security.ssl_files(node_id)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile, keyfile)
    if cafile is not None:
        context.load_verify_locations(cafile)
    context.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                           "required": ssl.CERT_REQUIRED}[security.ssl_client_auth]
    return context


def controller_tls_contexts(config: ClusterConfig, node_id: int) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server, client) contexts of the controller port: mutual TLS 1.2+ with the nodes' certificates."""
    certfile, keyfile, cafile = config.security.ssl_files(node_id)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=cafile)
    server.minimum_version = ssl.TLSVersion.TLSv1_2
    server.load_cert_chain(certfile, keyfile)
    server.verify_mode = ssl.CERT_REQUIRED
    client = ssl.create_default_context(cafile=cafile)
    client.minimum_version = ssl.TLSVersion.TLSv1_2
    client.load_cert_chain(certfile, keyfile)
    return server, client


def inter_broker_security(config: ClusterConfig, node_id: int) -> ClientSecurity | None:
    """How this node connects to other brokers' inter-broker listeners: their protocol, the credentials of
    `[security.inter_broker]`, the CA, and this node's own certificate as the client certificate."""
    node = config.node(node_id)
    listener = node.inter_broker_listener if node.listeners else None
    if listener is None or listener.security_protocol == "PLAINTEXT":
        return None
    certfile, keyfile, cafile = config.security.ssl_files(node_id)
    credentials = config.security.inter_broker
    oidc = None
    if credentials.oauthbearer_token_endpoint_url is not None:
        oidc = OidcClientCredentials(credentials.oauthbearer_token_endpoint_url, credentials.oauthbearer_client_id or "",
                                     credentials.oauthbearer_client_secret or "", credentials.oauthbearer_scope,
                                     credentials.oauthbearer_ca_file)
    unsecured = ({"principal": credentials.oauthbearer_unsecured_principal}
                 if credentials.oauthbearer_unsecured_principal is not None else None)
    return ClientSecurity(security_protocol=listener.security_protocol, sasl_mechanism=credentials.sasl_mechanism,
                          username=credentials.username, password=credentials.password, ssl_cafile=cafile,
                          ssl_certfile=certfile, ssl_keyfile=keyfile,
                          oauthbearer_token_file=credentials.oauthbearer_token_file,
                          oauthbearer_unsecured=unsecured, oauthbearer_oidc=oidc)


EXIT_CONFIG = 2
EXIT_STORAGE = 1  # the data directory failed (net/node.py run_node_forever)
EXIT_METADATA = 4  # the metadata log holds an entry this code cannot read (a later release's, or damaged)
LOCK_FILE = ".lock"
LISTEN_ERRNOS = (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL)


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    leaves = []
    for error in group.exceptions:
        leaves += _leaves(error) if isinstance(error, BaseExceptionGroup) else [error]
    return leaves


async def _run_with_frozen_startup_heap(node: Node) -> None:
    """Run the node; once it serves, freeze what start-up left alive (net/heap.py)."""
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        node.log.info("startup_heap_frozen", objects=freeze_startup_heap())


def run_node_forever(config: ClusterConfig, node_id: int) -> int:
    """Run the node until SIGTERM or Ctrl-C. A port another program holds or a data directory another node
    uses is one line on stderr and exit code 2, before anything of the node starts."""
    node_config = config.node(node_id)
    os.makedirs(node_config.data_dir, exist_ok=True)
    lock = open(os.path.join(node_config.data_dir, LOCK_FILE), "a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        print(f"flotilla: node {node_id}: data directory {node_config.data_dir} is in use by another flotilla "
              "node; stop it first", file=sys.stderr)
        return EXIT_CONFIG
    failure: OSError | None = None
    storage_failure: StorageError | None = None
    unreadable: UnreadableMetadataError | None = None
    raise_descriptor_limit()
    keep_heap_pages()
    time_collections()
    try:
        try:
            trio.run(_run_with_frozen_startup_heap, Node(config, node_id))
        except* OSError as group:
            cannot_listen = [e for e in _leaves(group) if e.errno in LISTEN_ERRNOS]
            if not cannot_listen:
                raise
            failure = cannot_listen[0]
        except* StorageError as group:
            # The disk failed (full, read-only, gone): Kafka halts a broker whose log directories all failed. The
            # node stops at once, without writing more; its leaderships move to other replicas, and a restart
            # recovers its logs.
            storage_failure = _leaves(group)[0]
            get_logger(node_id=node_id).error("storage_failed", error=str(storage_failure),
                                              exc_info=(type(storage_failure), storage_failure,
                                                        storage_failure.__traceback__))
        except* UnreadableMetadataError as group:
            # Applying the rest of the log without the entry would leave this node's image wrong; every node
            # holding it stops at it, and starts again once it runs code that reads it.
            unreadable = _leaves(group)[0]
            get_logger(node_id=node_id).error("metadata_unreadable", where=unreadable.where, reason=unreadable.reason)
    except KeyboardInterrupt:
        pass
    finally:
        lock.close()
    if failure is not None:
        print(f"flotilla: node {node_id}: cannot listen on {node_config.host} (kafka_port {node_config.kafka_port}, "
              f"controller_port {node_config.controller_port}): {failure.strerror or failure}", file=sys.stderr)
        return EXIT_CONFIG
    if storage_failure is not None:
        print(f"flotilla: node {node_id}: stopped: its data directory {node_config.data_dir} failed: {storage_failure}. "
              "Fix the disk (free space, permissions) and start the node again: it recovers its logs from what is on "
              "disk.", file=sys.stderr)
        return EXIT_STORAGE
    if unreadable is not None:
        print(f"flotilla: node {node_id}: stopped: this release cannot read the {unreadable.where} "
              f"({unreadable.reason}). A node of a later release wrote it: start this node on that release (README, "
              "Upgrading). If no node runs a later release, the entry is damaged.", file=sys.stderr)
        return EXIT_METADATA
    return 0


class _TrioControllerCallPort:
    """ControllerCalls' port on the real node: an RPC per attempt over the controller port, each a task of
    the node's nursery; timers as tasks that sleep; a step at once by waking the ticker."""

    def __init__(self, node: Node) -> None:
        self._node = node

    def reachable(self, node_id: int) -> bool:
        return True  # the attempt itself finds out

    def send_rpc(self, rpc: ControllerRpc) -> bool:
        self._node._nursery.start_soon(self._node._carry_controller_rpc, rpc)
        return True

    def abandon_rpc(self, rpc_id: int) -> None:
        scope = self._node._controller_rpcs.get(rpc_id)
        if scope is not None:
            scope.cancel()

    def call_later(self, delay_ms: int, action: Callable[[], None]) -> None:
        self._node._nursery.start_soon(self._later, delay_ms, action)

    async def _later(self, delay_ms: int, action: Callable[[], None]) -> None:
        await trio.sleep(delay_ms / 1000)
        action()
        self._node._process()

    def step_soon(self) -> None:
        self._node._step_wanted.set()

    def answered(self, fetch_metadata_now: bool) -> None:
        if fetch_metadata_now:
            self._node.observer.fetch_now()
        self._node._step_wanted.set()


class _TrioMetadataFetchPort:
    """MetadataObserver's port on the real node: each fetch an RPC over the controller port in a task of the
    node's nursery; timers as tasks that sleep, each in a cancel scope of its own."""

    def __init__(self, node: Node) -> None:
        self._node = node

    def reachable(self, node_id: int) -> bool:
        return True  # the fetch itself finds out

    def send_fetch(self, target: int, request: dict) -> bool:
        self._node._nursery.start_soon(self._node._carry_metadata_fetch, target, request)
        return True

    def call_later(self, delay_ms: int, action: Callable[[], None]) -> trio.CancelScope:
        scope = trio.CancelScope()
        self._node._nursery.start_soon(self._later, scope, delay_ms, action)
        return scope

    async def _later(self, scope: trio.CancelScope, delay_ms: int, action: Callable[[], None]) -> None:
        with scope:
            await trio.sleep(delay_ms / 1000)
            action()

    def cancel(self, handle: trio.CancelScope) -> None:
        handle.cancel()

    def applied(self) -> None:
        self._node._process()
