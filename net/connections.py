"""How many connections a node's Kafka listeners admit: Kafka's max.connections and max.connections.per.ip.

Theory of operation: every accepted connection costs the process a file descriptor, and so does every segment
file, index and checkpoint the node's logs open. Without a bound, a client that opens connections without end
takes the node's last descriptor, and the next segment roll or checkpoint write fails. So a node admits:
- at most `total_max` connections over all its Kafka listeners. At that limit a listener stops accepting
  until a connection closes: the new connections wait in the kernel's accept queue and are served in turn,
  as Kafka's acceptor waits at max.connections (KIP-402). By default `total_max` is half of the process's
  descriptor limit, which the node first raises to its hard limit (`raise_descriptor_limit`, as the JVM does
  for Kafka), so the other half is the logs'.
- at most `per_ip_max` connections from one address (`per_ip_overrides` for named ones). One over is
  accepted and closed at once, as Kafka closes it (TooManyConnectionsException).
- the inter-broker listener is exempt from `total_max` when it is not the only listener: followers and the
  coordinators' marker requests reach their leaders even while clients hold every other connection, the room
  KIP-402 keeps for that listener. A node with one listener shares it with its clients.
- at most `listener_max[name]` connections on listener `name` (Kafka's listener.name.<name>.max.connections),
  the inter-broker listener included: at its limit that listener alone stops accepting, as at `total_max`.
- over `rate_max` new connections a second (Kafka's max.connection.creation.rate, broker-wide; the exempt
  inter-broker listener aside), or over `listener_rate_max[name]` on listener `name` (Kafka's
  listener.name.<name>.max.connection.creation.rate, the inter-broker listener included), a listener pauses
  after an accept, for the longer of the times that bring the node's and the listener's rates back to their
  limits (at most one quota window), before it serves that connection and accepts the next, as Kafka's
  acceptor waits.
- an address over its `connection_creation_rate` quota (KIP-612: an ip entity of AlterClientQuotas, or the
  default ip entity) has the new connection held unanswered, then closed, after the time that brings its rate
  back to the quota (at most one quota window), as Kafka's acceptor delays the close of a throttled
  connection. The rate is Kafka's sampled rate (broker/quotas.py SampledRate: 11 windows of 1 s).
- accept() failing for want of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) waits
  `ACCEPT_RETRY_S` and tries again; the failures are counted and logged once a minute, not once a try.

The counts are per node (one `ConnectionLimits` shared by its listeners) and exported by net/metrics.py.
"""

from __future__ import annotations

import errno
import math
import resource
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import trio

from broker.quotas import WINDOW_MS_DEFAULT, WINDOW_NUM_DEFAULT, SampledRate

ACCEPT_RETRY_S = 0.1
ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
DESCRIPTORS_FOR_CONNECTIONS = 0.5  # of the process's descriptor limit, when max.connections is not set
DESCRIPTORS_FOR_CONTROLLER = 0.125  # for the controller listener (Raft peers, brokers' RPCs, handshakes)
LOG_INTERVAL_S = 60.0
IP_RATES_MAX = 100_000  # addresses whose connection rates are kept; the least recently seen go beyond it


def raise_descriptor_limit() -> tuple[int, int]:
    """Raise this process's soft limit of open files to its hard limit; returns (soft, hard) after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):  # a hard limit the kernel's nr_open caps: keep the soft one
            pass
    return soft, hard


def default_total_max(share: float = DESCRIPTORS_FOR_CONNECTIONS) -> int:
    """max.connections when the config does not set it: `share` of the descriptor limit (at least 16)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(16, int(soft * share))


@dataclass
class ConnectionLimits:
    """The connection counts and limits of one node's Kafka listeners, or of its controller or metrics port
    (see the module docstring)."""

    total_max: int
    per_ip_max: int | None = None
    per_ip_overrides: dict[str, int] = field(default_factory=dict)
    exempt_listener: str | None = None  # the inter-broker listener's name, when the node has several
    listener_max: dict[str, int] = field(default_factory=dict)  # listener name -> its max.connections
    listener_rate_max: dict[str, float] = field(default_factory=dict)  # -> its max.connection.creation.rate
    open_total: int = 0  # connections counted against total_max (not the exempt listener's)
    open_by_listener: dict[str, int] = field(default_factory=dict)
    open_by_host: dict[str, int] = field(default_factory=dict)
    refused_per_ip: int = 0
    rate_max: float | None = None  # new connections a second over the node's listeners (the exempt one aside)
    accept_waits: int = 0  # times a listener stopped accepting at total_max
    listener_waits: int = 0  # times a listener stopped accepting at its own listener_max
    rate_waits: int = 0  # times a listener paused for rate_max or its listener_rate_max
    accept_failures: int = 0  # accept() calls that failed for want of descriptors or memory
    throttled: int = 0  # connections closed unanswered for their address's connection_creation_rate
    ip_rate_quota: Callable[[str], float | None] | None = None  # an address -> its connection_creation_rate
    _ip_rates: dict[str, SampledRate] = field(default_factory=dict)
    _rate: SampledRate = field(default_factory=lambda: SampledRate(WINDOW_NUM_DEFAULT, WINDOW_MS_DEFAULT))
    _listener_rates: dict[str, SampledRate] = field(default_factory=dict)  # one per listener_rate_max entry
    _reserved_by_listener: dict[str, int] = field(default_factory=dict)  # what listener_max counts
    _room: trio.Event = field(default_factory=trio.Event)
    _waiting: int = 0  # listeners waiting in `reserve` for room
    _logged_at: dict[str, float] = field(default_factory=dict)  # event -> trio time it was last logged

    def __post_init__(self) -> None:
        assert self.total_max > 0 and (self.per_ip_max is None or self.per_ip_max >= 0), self
        assert all(count > 0 for count in self.listener_max.values()), self.listener_max
        assert all(rate > 0 for rate in self.listener_rate_max.values()), self.listener_rate_max
        self._listener_rates = {name: SampledRate(WINDOW_NUM_DEFAULT, WINDOW_MS_DEFAULT)
                                for name in self.listener_rate_max}

    def is_full(self, listener: str) -> bool:
        return self._listener_full(listener) or (listener != self.exempt_listener and self.open_total >= self.total_max)

    def _listener_full(self, listener: str) -> bool:
        limit = self.listener_max.get(listener)
        return limit is not None and self._reserved_by_listener.get(listener, 0) >= limit

    async def reserve(self, listener: str) -> None:
        """Wait until `listener` may accept one more connection, and count it against the total and the
        listener's own limit: call before accept(), then `admit` the accepted connection or `unreserve` if none
        came."""
        if self.is_full(listener):
            if self._listener_full(listener):  # Kafka checks the listener's limit first too
                self.listener_waits += 1
            else:
                self.accept_waits += 1
            self._waiting += 1
            try:
                while self.is_full(listener):
                    await self._room.wait()
            finally:
                self._waiting -= 1
        self._reserved_by_listener[listener] = self._reserved_by_listener.get(listener, 0) + 1
        if listener != self.exempt_listener:
            self.open_total += 1

    def unreserve(self, listener: str) -> None:
        self._reserved_by_listener[listener] -= 1
        if listener != self.exempt_listener:
            self.open_total -= 1
        if self._waiting:  # a listener may be waiting for this room
            self._room.set()
            self._room = trio.Event()

    def record_accept(self, listener: str, now_ms: int) -> float:
        """Record a connection just accepted in the node's rate and its listener's; the seconds the listener
        must pause before serving it: the longer of the two throttle times (0 within `rate_max` and the
        listener's rate). Kafka's recordConnectionAndGetThrottleTimeMs."""
        throttle_ms = 0
        if self.rate_max is not None and listener != self.exempt_listener:
            self._rate.record(1.0, now_ms)
            throttle_ms = self._rate.throttle_ms(self.rate_max, now_ms)
        rate = self._listener_rates.get(listener)
        if rate is not None:
            rate.record(1.0, now_ms)
            throttle_ms = max(throttle_ms, rate.throttle_ms(self.listener_rate_max[listener], now_ms))
        if not throttle_ms:
            return 0.0
        self.rate_waits += 1
        return min(WINDOW_MS_DEFAULT, throttle_ms) / 1000

    def admit(self, listener: str, host: str, now_ms: int) -> float | None:
        """Count a connection accepted after `reserve`; None when admitted. Otherwise the seconds after which
        to close it unanswered (0: at once, its address holds max.connections.per.ip; more: its address is
        over its connection_creation_rate), then `unreserve`; `closed` is not called for it."""
        quota = self.ip_rate_quota(host) if self.ip_rate_quota is not None else None
        if quota is not None:
            throttle_ms = self._record_ip_connection(host, quota, now_ms)
            if throttle_ms:
                self.throttled += 1
                # Not a connection the node or the listener took: Kafka un-records it from both rates too.
                if self.rate_max is not None and listener != self.exempt_listener:
                    self._rate.record(-1.0, now_ms)
                if listener in self._listener_rates:
                    self._listener_rates[listener].record(-1.0, now_ms)
                return throttle_ms / 1000
        limit = self.per_ip_overrides.get(host, self.per_ip_max)
        if limit is not None and self.open_by_host.get(host, 0) >= limit:
            self.refused_per_ip += 1
            return 0.0
        self.open_by_host[host] = self.open_by_host.get(host, 0) + 1
        self.open_by_listener[listener] = self.open_by_listener.get(listener, 0) + 1
        return None

    def _record_ip_connection(self, host: str, quota: float, now_ms: int) -> int:
        """Kafka's recordIpConnectionMaybeThrottle: record one connection; over the quota, take it back and
        return the throttle time (ms, at most one window), else 0."""
        rate = self._ip_rates.pop(host, None) or SampledRate(WINDOW_NUM_DEFAULT, WINDOW_MS_DEFAULT)
        if len(self._ip_rates) >= IP_RATES_MAX:
            del self._ip_rates[next(iter(self._ip_rates))]  # the least recently seen address
        self._ip_rates[host] = rate
        rate.record(1.0, now_ms)
        throttle_ms = rate.throttle_ms(quota, now_ms)
        if throttle_ms:
            rate.record(-1.0, now_ms)
        return min(WINDOW_MS_DEFAULT, throttle_ms)

    def closed(self, listener: str, host: str) -> None:
        """Forget a connection `admit` counted."""
        remaining = self.open_by_host[host] - 1
        if remaining:
            self.open_by_host[host] = remaining
        else:
            del self.open_by_host[host]
        self.open_by_listener[listener] -= 1
        self.unreserve(listener)

    def log_now_and_then(self, log: Any, event: str, **fields: Any) -> None:
        """Log `event` at most once a LOG_INTERVAL_S: a flood must not flood the log too."""
        now = trio.current_time()
        if now - self._logged_at.get(event, -math.inf) >= LOG_INTERVAL_S:
            self._logged_at[event] = now
            log.warning(event, **fields)


Handler = Callable[[trio.SocketStream], Awaitable[None]]


async def serve_listeners(handler: Handler, listeners: list[trio.SocketListener], limits: ConnectionLimits | None,
                          name: str, log: Any) -> None:
    """trio.serve_listeners within `limits` (counted as listener `name`), as the module docstring says: waits
    at the node-wide maximum and over its connection rate, a close at once over an address's maximum and a
    held close over its rate quota, a retry after ACCEPT_RETRY_S when accept() finds no descriptor. `limits`
    None: no limit, the same retries."""
    limits = limits if limits is not None else ConnectionLimits(total_max=1 << 62)
    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(_accept, handler, listener, limits, name, log, nursery)


async def _accept(handler: Handler, listener: Any, limits: ConnectionLimits, name: str, log: Any,
                  nursery: trio.Nursery) -> None:
    async with listener:
        while True:
            await limits.reserve(name)
            try:
                stream = await listener.accept()
            except BaseException as error:
                limits.unreserve(name)
                if not isinstance(error, OSError) or error.errno not in ACCEPT_CAPACITY_ERRNOS:
                    raise
                limits.accept_failures += 1
                limits.log_now_and_then(log, "accept_failed", error=error.strerror, open_connections=limits.open_total,
                                        failures_so_far=limits.accept_failures)
                await trio.sleep(ACCEPT_RETRY_S)
                continue
            pause_s = limits.record_accept(name, int(trio.current_time() * 1000))
            if pause_s:
                limits.log_now_and_then(log, "accept_paused", reason="max.connection.creation.rate",
                                        pauses_so_far=limits.rate_waits)
                try:
                    await trio.sleep(pause_s)
                except BaseException:  # the server stops meanwhile
                    limits.unreserve(name)
                    await trio.aclose_forcefully(stream)
                    raise
            nursery.start_soon(_serve, handler, stream, limits, name, log)


async def _serve(handler: Handler, stream: trio.SocketStream, limits: ConnectionLimits, name: str, log: Any) -> None:
    try:
        host = stream.socket.getpeername()[0]
    except OSError:
        host = ""
    close_after_s = limits.admit(name, host, int(trio.current_time() * 1000))
    if close_after_s is not None:
        if close_after_s:
            limits.log_now_and_then(log, "connection_throttled", reason="connection_creation_rate", peer=host,
                                    throttled_so_far=limits.throttled)
        else:
            limits.log_now_and_then(log, "connection_refused", reason="max.connections.per.ip", peer=host,
                                    refused_so_far=limits.refused_per_ip)
        try:
            await trio.sleep(close_after_s)  # held unanswered meanwhile, and still counted
            await trio.aclose_forcefully(stream)
        finally:
            limits.unreserve(name)
        return
    try:
        await handler(stream)
    finally:
        limits.closed(name, host)
