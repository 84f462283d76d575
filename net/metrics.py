"""The metrics endpoint: Prometheus text format on a node's `metrics_port`, built with prometheus_client.

Theory of operation: a custom collector turns the broker's counters (broker/metrics.py `BrokerMetrics`) and
the gauges read from the node's state at that moment (`broker.metrics.gauges`) into metric families; the
exposition is prometheus_client's own (`generate_latest`). The HTTP server is a few lines of trio inside the
node's nursery, so a scrape reads the cores from the one thread that changes them: no locks, no torn
reads. It answers `GET /metrics` (and `/`), refuses anything else with 404, bounds the request it reads and
the time it waits for it, and closes the connection after each answer.
"""

from __future__ import annotations

import gc
import re
from typing import Any, Callable, Iterator

import trio
from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from broker.metrics import BrokerMetrics, Histogram, gauges
from net.connections import ConnectionLimits, serve_listeners
from net.heap import GC_PAUSES
from net.logs import get_logger
from net.server import SENDFILE_STATS

REQUEST_BYTES_MAX = 8 * 1024
REQUEST_TIMEOUT_S = 5.0
CONNECTIONS_MAX = 32

GAUGE_HELP = {
    "flotilla_under_replicated_partitions": "Partitions this broker leads whose ISR is smaller than the replica set",
    "flotilla_under_min_isr_partitions": "Partitions this broker leads whose ISR is below min.insync.replicas",
    "flotilla_offline_partitions": "Partitions of the cluster without a leader (as this broker's metadata says)",
    "flotilla_leader_partitions": "Partitions this broker leads",
    "flotilla_partitions": "Replicas this broker hosts",
    "flotilla_uncleanable_partitions": "Compacted partitions the log cleaner stopped cleaning (a segment it "
                                       "cannot read) until the node restarts",
    "flotilla_log_size_bytes": "Bytes of a hosted partition's log",
    "flotilla_log_segments": "Segments of a hosted partition's log",
    "flotilla_log_end_offset": "Log end offset of a hosted partition",
    "flotilla_partition_high_watermark": "High watermark of a partition this broker leads",
    "flotilla_raft_leader": "Node id of the metadata quorum's leader (-1: none known)",
    "flotilla_raft_term": "The metadata quorum's term",
    "flotilla_raft_commit_index": "The metadata log's commit index on this node",
    "flotilla_raft_log_end_index": "The metadata log's last index on this node",
    "flotilla_raft_is_leader": "1 when this node leads the metadata quorum",
    "flotilla_raft_voter_lag": "Entries a voter is behind the leader's log end (on the leader)",
    "flotilla_group_members": "Members of a consumer group this broker coordinates",
    "flotilla_group_state": "A consumer group's state (1 for its current state)",
    "flotilla_group_lag": "A group's committed-offset lag (high watermark - committed) on a partition this coordinator hosts",
    "flotilla_transactions": "Transactional ids this broker coordinates, by state",
    "flotilla_transaction_oldest_open_seconds": "Age of the oldest ongoing transaction this broker coordinates",
}


CLIENT_LABELS = ("client_instance_id", "client_id", "client_software_name", "client_software_version")
_NOT_IN_NAME = re.compile(r"[^a-zA-Z0-9_]")


def client_telemetry_families(manager: Any) -> Iterator[Any]:
    """What clients pushed (KIP-714; broker/telemetry.py): a gauge per OTLP metric, its name with every
    character outside [a-zA-Z0-9_] turned into `_` (as OpenTelemetry's Prometheus exporter does), labelled
    with the client instance and the data point's own attributes; and the instances known."""
    instances = GaugeMetricFamily("flotilla_client_telemetry_instances", "Client instances this broker holds "
                                  "telemetry subscriptions for (KIP-714)")
    instances.add_metric([], len(manager.instances))
    yield instances
    by_metric: dict[str, list[tuple[dict[str, str], float]]] = {}
    for instance in manager.instances.values():
        client = {label: instance.attributes.get(label) or "" for label in CLIENT_LABELS}
        for (name, attributes), value in instance.series.items():
            by_metric.setdefault(name, []).append(({**dict(attributes), **client}, value))
    for name, points in sorted(by_metric.items()):
        labels = sorted({label for point, _ in points for label in point} - set(CLIENT_LABELS))
        label_names = [*CLIENT_LABELS, *(_NOT_IN_NAME.sub("_", label) for label in labels)]
        family = GaugeMetricFamily(_NOT_IN_NAME.sub("_", name), f"{name} (pushed by clients, KIP-714)",
                                   labels=label_names)
        for point, value in points:
            family.add_metric([point.get(label, "") for label in (*CLIENT_LABELS, *labels)], value)
        yield family


def _buckets(histogram: Histogram) -> list[tuple[str, int]]:
    return [("+Inf" if bound == float("inf") else repr(bound), count) for bound, count in histogram.cumulative()]


class NodeCollector:
    """prometheus_client collector over one node's counters and state."""

    def __init__(self, node_id: int, metrics: BrokerMetrics | None, state: Any, now_ms: Callable[[], int],
                 connections: dict[str, ConnectionLimits | None] | None = None) -> None:
        self.node_id = node_id
        self.metrics = metrics
        self.state = state
        self.now_ms = now_ms
        # "kafka", "controller" and (added by MetricsServer) "metrics" -> the connection limits there
        self.connections = {port: limits for port, limits in (connections or {}).items() if limits is not None}

    def collect(self) -> Iterator[Any]:
        if self.metrics is not None:
            yield from self._counters(self.metrics)
        yield from self._connections(self.connections)
        families: dict[str, GaugeMetricFamily] = {}
        for sample in gauges(self.state, self.now_ms()):
            family = families.get(sample.name)
            if family is None:
                labels = [name for name, _ in sample.labels]
                family = families[sample.name] = GaugeMetricFamily(
                    sample.name, GAUGE_HELP.get(sample.name, sample.name), labels=labels)
            family.add_metric([value for _, value in sample.labels], sample.value)
        yield from families.values()
        broker = getattr(self.state, "broker", None)
        if broker is not None:
            yield CounterMetricFamily(
                "flotilla_forwarded_answers_unapplied", "Admin requests this broker forwarded to the controller and "
                "answered without its own metadata image having the controller's answer (it waited 5 s): the "
                "client's next read here may miss its write", value=broker.image_waits_expired)
        if getattr(self.state, "raft", None) is not None:
            fetches = CounterMetricFamily(
                "flotilla_observer_metadata_fetches", "Broker-only nodes' fetches of the metadata log this controller "
                "answered: with entries, empty after holding them up to 500 ms (the quorum leader), or empty at "
                "once (not the leader)", labels=["answer"])
            for answer, count in sorted(self.state.metadata_fetch_answers.items()):
                fetches.add_metric([answer], count)
            yield fetches
        yield from self._garbage_collector()
        manager = getattr(self.state, "telemetry", None)
        if manager is not None:
            yield from client_telemetry_families(manager)

    @staticmethod
    def _connections(limits: dict[str, ConnectionLimits]) -> Iterator[Any]:
        """Per port kind ("kafka": the Kafka listeners together; "controller": the Raft port; "metrics")."""
        open_now = GaugeMetricFamily("flotilla_connections", "Open connections, by listener", labels=["listener"])
        maxima = GaugeMetricFamily("flotilla_connections_max", "Connections the node admits at once (Kafka's "
                                   "max.connections; the inter-broker listener exempt when there are others)",
                                   labels=["port"])
        refused = CounterMetricFamily("flotilla_connections_refused", "Connections closed as soon as accepted "
                                      "because their address had max.connections.per.ip open", labels=["port"])
        listener_maxima = GaugeMetricFamily("flotilla_listener_connections_max", "Connections a listener admits at "
                                            "once (Kafka's listener.name.<name>.max.connections), for the listeners "
                                            "that have such a limit", labels=["listener"])
        waits = CounterMetricFamily("flotilla_connection_accept_waits", "Times a listener stopped accepting: the node "
                                    "had its maximum open (max_connections), or the listener its own "
                                    "(listener_max_connections), or its new connections a second were over "
                                    "max.connection.creation.rate or the listener's (creation_rate); the new ones "
                                    "wait in the kernel's queue", labels=["port", "reason"])
        failures = CounterMetricFamily("flotilla_connection_accept_failures", "accept() calls that failed for want "
                                       "of file descriptors or memory (retried after 100 ms)", labels=["port"])
        throttled = CounterMetricFamily("flotilla_connections_throttled", "Connections held unanswered, then "
                                        "closed, because their address was over its connection_creation_rate "
                                        "quota (KIP-612)", labels=["port"])
        for port, connections in sorted(limits.items()):
            for listener, count in sorted(connections.open_by_listener.items()):
                open_now.add_metric([listener], count)
            maxima.add_metric([port], connections.total_max)
            for listener, count in sorted(connections.listener_max.items()):
                listener_maxima.add_metric([listener], count)
            refused.add_metric([port], connections.refused_per_ip)
            waits.add_metric([port, "max_connections"], connections.accept_waits)
            waits.add_metric([port, "listener_max_connections"], connections.listener_waits)
            waits.add_metric([port, "creation_rate"], connections.rate_waits)
            failures.add_metric([port], connections.accept_failures)
            throttled.add_metric([port], connections.throttled)
        yield from (open_now, maxima, listener_maxima, refused, waits, failures, throttled)

    @staticmethod
    def _garbage_collector() -> Iterator[Any]:
        pauses = HistogramMetricFamily("flotilla_gc_pause_seconds", "Python's cyclic garbage collections of this "
                                       "node's process and their pauses, by generation", labels=["generation"])
        for generation, histogram in sorted(GC_PAUSES.items()):
            pauses.add_metric([str(generation)], _buckets(histogram), histogram.total)
        yield pauses
        yield GaugeMetricFamily("flotilla_gc_frozen_objects", "Objects of the start-up heap moved to the permanent "
                                "generation, which collections do not walk", value=gc.get_freeze_count())

    @staticmethod
    def _counters(metrics: BrokerMetrics) -> Iterator[Any]:
        per_topic = (("flotilla_messages_in", "Records appended as leader", metrics.messages_in),
                     ("flotilla_bytes_in", "Record-batch bytes appended as leader", metrics.bytes_in),
                     ("flotilla_bytes_out", "Record bytes answered to consumer fetches", metrics.bytes_out))
        for name, text, values in per_topic:
            family = CounterMetricFamily(name, text, labels=["topic"])
            for topic, value in sorted(values.items()):
                family.add_metric([topic], value)
            yield family
        requests = CounterMetricFamily("flotilla_requests", "Kafka requests answered", labels=["api", "acks"])
        for (api, acks), value in sorted(metrics.requests.items()):
            requests.add_metric([api, acks], value)
        yield requests
        errors = CounterMetricFamily("flotilla_request_errors", "Error codes in Kafka responses (each partition's)",
                                     labels=["api", "error"])
        for (api, error), value in sorted(metrics.request_errors.items()):
            errors.add_metric([api, error], value)
        yield errors
        latency = HistogramMetricFamily("flotilla_request_latency_seconds",
                                        "Time from a request's arrival to its answer", labels=["api", "acks"])
        for (api, acks), histogram in sorted(metrics.request_latency.items()):
            latency.add_metric([api, acks], _buckets(histogram), histogram.total)
        yield latency
        isr = CounterMetricFamily("flotilla_isr_changes", "ISR changes this broker committed as leader",
                                  labels=["direction"])
        isr.add_metric(["shrink"], metrics.isr_shrinks)
        isr.add_metric(["expand"], metrics.isr_expands)
        yield isr
        sendfile = CounterMetricFamily("flotilla_sendfile", "os.sendfile calls of fetch responses (records sent "
                                       "from segment files without a copy through Python)", labels=["what"])
        sendfile.add_metric(["calls"], SENDFILE_STATS["calls"])
        sendfile.add_metric(["bytes"], SENDFILE_STATS["bytes"])
        yield sendfile
        throttles = CounterMetricFamily("flotilla_client_throttles", "Answers throttled by a client quota (the "
                                        "connection muted for their throttle_time_ms)", labels=["quota"])
        throttle_seconds = CounterMetricFamily("flotilla_client_throttle_seconds", "Throttle time of the answers "
                                               "throttled by a client quota", labels=["quota"])
        for quota_type in sorted(metrics.throttles):
            throttles.add_metric([quota_type], metrics.throttles[quota_type])
            throttle_seconds.add_metric([quota_type], metrics.throttle_ms[quota_type] / 1000)
        yield throttles
        yield throttle_seconds
        authentications = CounterMetricFamily("flotilla_sasl_authentications", "SASL exchanges ended, first "
                                              "authentications and re-authentications (KIP-368), by result",
                                              labels=["kind", "result"])
        for (kind, result), count in sorted(metrics.authentications.items()):
            authentications.add_metric([kind, result], count)
        yield authentications
        yield CounterMetricFamily("flotilla_expired_sessions_closed", "Connections closed because a request "
                                  "arrived after their SASL session expired without re-authentication",
                                  value=metrics.expired_sessions)
        internal_errors = CounterMetricFamily("flotilla_internal_errors", "Exceptions out of the broker's own code "
                                              "that the node survived (each logged with its traceback), by where "
                                              "they were caught", labels=["where"])
        for where in ("request", "answer", "encode", "poll", "replica", "controller_call", "outbox"):
            internal_errors.add_metric([where], metrics.internal_errors.get(where, 0))
        yield internal_errors


class MetricsServer:
    """Serves `GET /metrics` on host:port (see the module docstring)."""

    def __init__(self, host: str, port: int, collector: NodeCollector) -> None:
        self.host = host
        self.port = port
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        self.log = get_logger(component="metrics")
        self.bound_port: int | None = None
        # Scrapes are short: a few at once is plenty, and a flood waits in the kernel's queue
        self.connections = ConnectionLimits(CONNECTIONS_MAX)
        collector.connections["metrics"] = self.connections

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        self.bound_port = listeners[0].socket.getsockname()[1]
        task_status.started(self.bound_port)
        await serve_listeners(self._serve, listeners, self.connections, "METRICS", self.log)

    async def _serve(self, stream: trio.SocketStream) -> None:
        async with stream:
            try:
                with trio.fail_after(REQUEST_TIMEOUT_S):
                    request = await self._read_request(stream)
                    try:
                        answer = self._answer(request)
                    except Exception as error:  # a metrics bug must never take the node down
                        self.log.error("metrics_scrape_failed", error=repr(error))
                        answer = b"HTTP/1.0 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    await stream.send_all(answer)
            except (trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                return

    @staticmethod
    async def _read_request(stream: trio.SocketStream) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data and len(data) < REQUEST_BYTES_MAX:
            chunk = await stream.receive_some(REQUEST_BYTES_MAX)
            if not chunk:
                break
            data += chunk
        return data

    def _answer(self, request: bytes) -> bytes:
        line = request.split(b"\r\n", 1)[0].split()
        if len(line) < 2 or line[0] != b"GET" or line[1].split(b"?")[0] not in (b"/metrics", b"/"):
            return b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        body = generate_latest(self.registry)
        head = (f"HTTP/1.0 200 OK\r\nContent-Type: {CONTENT_TYPE_LATEST}\r\nContent-Length: {len(body)}\r\n"
                f"Connection: close\r\n\r\n").encode()
        return head + body
