"""The simulated network: TCP-like streams between nodes, with loss, delay, partitions and pauses.

Theory of operation. Between every pair of live nodes there is at most one stream (a TCP connection). A
stream has two directions; each is a FIFO queue, so messages arrive in the order they were sent, at most
once, and only on the stream they were sent on. A stream ends by a reset: both ends are told
`on_disconnected`, everything in flight in both directions is discarded, and a new stream (a new
incarnation number) is opened after a reconnect delay, once both nodes are up and the link is open both ways
(a TCP handshake needs both). Hence:
- "dropping a message" resets its stream: TCP never loses one message and delivers the next;
- a partition of a->b stalls that direction (messages wait, as TCP retransmits); healing before the stall
  timeout delivers them in order, otherwise the stream resets (TCP user timeout) and they are gone;
  b->a keeps flowing meanwhile (a one-way partition);
- a paused node (a stopped process) receives nothing until resumed, but its streams stay up (the kernel still
  acknowledges); a crashed node's streams reset at once (the kernel answers RST for a dead process).

Endpoint callbacks run from loop events, never from inside `send`, so a node is never re-entered while it is
sending. Every connect, reset, delivery and partition change is a trace line.
"""

from __future__ import annotations

import collections
import random
import zlib
from dataclasses import dataclass
from typing import Protocol

from simulations.loop import EventLoop


class Endpoint(Protocol):
    """What a simulated node offers the network. Called from loop events only."""

    def on_connected(self, peer_id: int) -> None: ...

    def on_disconnected(self, peer_id: int) -> None: ...

    def on_message(self, peer_id: int, data: bytes) -> None: ...


@dataclass
class NetworkConfig:
    """Link timing and loss. Latency per message = latency_us_min + uniform(0, latency_us_jitter) + slow extra."""

    latency_us_min: int = 100
    latency_us_jitter: int = 900
    connect_delay_us: int = 2_000  # handshake after both ends can reach each other
    reconnect_backoff_us_max: int = 50_000  # random extra wait before a reconnect, as real clients back off
    stall_reset_us: int = 3_000_000  # a direction stalled this long resets its stream (TCP user timeout)
    drop_probability: float = 0.0  # per message; a drop resets the stream

    def __post_init__(self) -> None:
        assert 0 <= self.latency_us_min and 0 <= self.latency_us_jitter, f"latency {self}"
        assert self.connect_delay_us > 0, f"connect_delay_us={self.connect_delay_us}"
        assert 0.0 <= self.drop_probability <= 1.0, f"drop_probability={self.drop_probability}"


class _Direction:
    """One direction of a stream: a FIFO of (ready_us, payload) and the event that delivers its head."""

    __slots__ = ("queue", "pump_handle", "last_ready_us", "stall_handle", "closing")

    def __init__(self) -> None:
        self.queue: collections.deque[tuple[int, bytes]] = collections.deque()
        self.pump_handle: int | None = None
        self.last_ready_us = 0
        self.stall_handle: int | None = None
        self.closing = False  # the sender closes the stream once this direction's queue is delivered


class _Stream:
    __slots__ = ("stream_id", "low", "high", "directions")

    def __init__(self, stream_id: int, low: int, high: int) -> None:
        self.stream_id = stream_id
        self.low = low
        self.high = high
        self.directions = {(low, high): _Direction(), (high, low): _Direction()}


def _pair(a: int, b: int) -> tuple[int, int]:
    return (a, b) if a < b else (b, a)


# last_disturbed_us: trace kinds about given nodes -> how many of the fields name them; kinds about the links of
# every node.
_NODE_EVENTS = {"net.up": 1, "net.down": 1, "net.pause": 1, "net.resume": 1, "net.reset": 2}
_LINK_EVENTS = frozenset({"net.block", "net.slow", "net.drop_probability", "net.heal"})


class Network:
    """Streams between registered nodes; all timing from the loop, all randomness from per-link streams."""

    def __init__(self, loop: EventLoop, config: NetworkConfig | None = None) -> None:
        self.loop = loop
        self.config = config or NetworkConfig()
        self._endpoints: dict[int, Endpoint] = {}  # nodes that are up (a crashed node is absent)
        self._node_ids: list[int] = []
        self._paused: set[int] = set()
        self._blocked: set[tuple[int, int]] = set()  # directed (src, dst) pairs that do not deliver
        self._slow_us: dict[tuple[int, int], int] = {}  # directed extra latency
        self._streams: dict[tuple[int, int], _Stream] = {}
        self._connect_handles: dict[tuple[int, int], int] = {}
        self._next_stream_id = 0
        self._rngs: dict[tuple[int, int], random.Random] = {}
        self._deferred_disconnects: dict[int, list[tuple[int, Endpoint]]] = {}
        self.messages_delivered = 0
        self.bytes_delivered = 0
        # node id -> the last time its connectivity changed: it went up, down, paused or resumed, a stream of it
        # was reset, or links changed anywhere (a block, slow link, drop rate or heal touches every node). For
        # checkers (cluster_checkers.live_brokers_kept): what befalls a node untouched for a while is its peers' doing.
        self.last_disturbed_us: dict[int, int] = {}

    # --- membership -------------------------------------------------------------------------------------

    def add_node(self, node_id: int) -> None:
        """Declare a node (down until `node_up`)."""
        assert node_id not in self._node_ids, f"node {node_id} added twice"
        self._node_ids.append(node_id)
        self._node_ids.sort()
        for other in self._node_ids:
            if other != node_id:
                for src, dst in ((node_id, other), (other, node_id)):
                    self._rngs[(src, dst)] = self.loop.derive_rng(f"link-{src}-{dst}")

    def node_up(self, node_id: int, endpoint: Endpoint) -> None:
        """A (re)started node process: streams to reachable peers open after the connect delay."""
        assert node_id in self._node_ids, f"unknown node {node_id}"
        assert node_id not in self._endpoints, f"node {node_id} is already up"
        self._endpoints[node_id] = endpoint
        self._paused.discard(node_id)
        self._trace("net.up", node_id)
        for peer in self._node_ids:
            if peer != node_id:
                self._schedule_connect(node_id, peer)

    def node_down(self, node_id: int) -> None:
        """The node's process died: its streams reset; peers are told, it is not."""
        assert node_id in self._endpoints, f"node {node_id} is not up"
        self._trace("net.down", node_id)
        del self._endpoints[node_id]
        self._paused.discard(node_id)
        self._deferred_disconnects.pop(node_id, None)
        for peer in self._node_ids:
            if peer != node_id:
                self._reset(node_id, peer, "peer_down")

    def pause(self, node_id: int) -> None:
        """Stop delivering to `node_id` (a stopped process); its streams stay open."""
        self._paused.add(node_id)
        self._trace("net.pause", node_id)

    def resume(self, node_id: int) -> None:
        self._paused.discard(node_id)
        self._trace("net.resume", node_id)
        for peer, endpoint in self._deferred_disconnects.pop(node_id, []):
            self.loop.call_later(0, self._notify_disconnected, node_id, peer, endpoint)
        self._repump_all()
        for peer in self._node_ids:
            if peer != node_id:
                self._schedule_connect(node_id, peer)

    def is_up(self, node_id: int) -> bool:
        return node_id in self._endpoints

    def is_paused(self, node_id: int) -> bool:
        return node_id in self._paused

    def is_connected(self, a: int, b: int) -> bool:
        return _pair(a, b) in self._streams

    @property
    def links_impaired(self) -> bool:
        """A partition, a slow link or a drop rate is in force now: a disturbance of every node that lasts past
        the moment `last_disturbed_us` records (a heartbeat lost in a long partition is its doing)."""
        return bool(self._blocked or self._slow_us or self.config.drop_probability)

    # --- faults -----------------------------------------------------------------------------------------

    def block(self, src: int, dst: int) -> None:
        """One-way partition: src->dst stops delivering (b->a still flows until the stall timeout resets)."""
        if (src, dst) not in self._blocked:
            self._blocked.add((src, dst))
            self._trace("net.block", src, dst)

    def partition(self, side: list[int]) -> None:
        """Two-way partition between `side` and every other node."""
        others = [n for n in self._node_ids if n not in side]
        for a in sorted(side):
            for b in others:
                self.block(a, b)
                self.block(b, a)

    def isolate(self, node_id: int) -> None:
        self.partition([node_id])

    def slow(self, src: int, dst: int, extra_latency_us: int) -> None:
        """Add latency to src->dst (a congested link) until `heal`."""
        self._slow_us[(src, dst)] = extra_latency_us
        self._trace("net.slow", src, dst, extra_latency_us)

    def set_drop_probability(self, probability: float) -> None:
        assert 0.0 <= probability <= 1.0, f"probability={probability}"
        self.config.drop_probability = probability
        self._trace("net.drop_probability", f"{probability:.6f}")

    def heal(self) -> None:
        """Remove every partition and slow link; stalled messages flow again, streams reconnect."""
        self._trace("net.heal")
        self._blocked.clear()
        self._slow_us.clear()
        self._repump_all()
        for a in self._node_ids:
            for b in self._node_ids:
                if a < b:
                    self._schedule_connect(a, b)

    def reset(self, a: int, b: int) -> None:
        """Reset the stream between a and b now, if there is one."""
        self._reset(a, b, "fault")

    def close(self, src: int, dst: int) -> None:
        """`src` closes its stream to `dst` after what it already sent has been delivered (a socket closed
        after its last write); the stream then resets like any other."""
        stream = self._streams.get(_pair(src, dst))
        if stream is None:
            return
        direction = stream.directions[(src, dst)]
        if direction.queue:
            direction.closing = True
        else:
            self._reset(src, dst, "closed")

    # --- traffic ----------------------------------------------------------------------------------------

    def send(self, src: int, dst: int, data: bytes) -> bool:
        """Queue `data` on the stream src->dst; False (and nothing sent) when there is no stream."""
        stream = self._streams.get((src, dst) if src < dst else (dst, src))
        if stream is None or src not in self._endpoints:
            return False
        rng = self._rngs[(src, dst)]
        config = self.config
        if config.drop_probability and rng.random() < config.drop_probability:
            self._reset(src, dst, "drop")
            return True  # the sender's write succeeded; the loss shows up as a reset
        latency_us = config.latency_us_min + rng.randint(0, config.latency_us_jitter)
        if self._slow_us:
            latency_us += self._slow_us.get((src, dst), 0)
        direction = stream.directions[(src, dst)]
        ready_us = self.loop.now_us + latency_us
        if ready_us < direction.last_ready_us:
            ready_us = direction.last_ready_us
        direction.last_ready_us = ready_us
        queue = direction.queue
        queue.append((ready_us, bytes(data)))
        if direction.pump_handle is None and len(queue) == 1:
            direction.pump_handle = self.loop.call_at(ready_us, self._pump, stream, src, dst)
        return True

    def _pump(self, stream: _Stream, src: int, dst: int) -> None:
        direction = stream.directions[(src, dst)]
        direction.pump_handle = None
        if self._streams.get((src, dst) if src < dst else (dst, src)) is not stream or not direction.queue:
            return
        if (src, dst) in self._blocked or dst in self._paused:
            if (src, dst) in self._blocked and direction.stall_handle is None:
                direction.stall_handle = self.loop.call_later(
                    self.config.stall_reset_us, self._stall_timeout, stream, src, dst
                )
            return  # stays queued; `heal`/`resume` pump again
        if direction.stall_handle is not None:
            self.loop.cancel(direction.stall_handle)
            direction.stall_handle = None
        _, data = direction.queue.popleft()
        self.messages_delivered += 1
        self.bytes_delivered += len(data)
        loop = self.loop
        loop.trace.append(loop.now_us, "net.deliver", src, dst, stream.stream_id, len(data), zlib.crc32(data))
        self._endpoints[dst].on_message(src, data)
        if self._streams.get((src, dst) if src < dst else (dst, src)) is not stream:
            return
        if direction.queue:
            self._schedule_pump(stream, src, dst)
        elif direction.closing:
            self._reset(src, dst, "closed")

    def _schedule_pump(self, stream: _Stream, src: int, dst: int) -> None:
        direction = stream.directions[(src, dst)]
        if direction.pump_handle is None and direction.queue:
            direction.pump_handle = self.loop.call_at(direction.queue[0][0], self._pump, stream, src, dst)

    def _repump_all(self) -> None:
        for key in sorted(self._streams):
            stream = self._streams[key]
            for (src, dst) in ((stream.low, stream.high), (stream.high, stream.low)):
                direction = stream.directions[(src, dst)]
                self.loop.cancel(direction.stall_handle)
                direction.stall_handle = None
                self._schedule_pump(stream, src, dst)

    def _stall_timeout(self, stream: _Stream, src: int, dst: int) -> None:
        direction = stream.directions[(src, dst)]
        direction.stall_handle = None
        if self._streams.get(_pair(src, dst)) is stream and (src, dst) in self._blocked:
            self._reset(src, dst, "stall_timeout")

    # --- streams ----------------------------------------------------------------------------------------

    def _reset(self, a: int, b: int, reason: str) -> None:
        stream = self._streams.pop(_pair(a, b), None)
        if stream is None:
            return
        for direction in stream.directions.values():
            self.loop.cancel(direction.pump_handle)
            self.loop.cancel(direction.stall_handle)
            direction.queue.clear()
        self._trace("net.reset", stream.low, stream.high, stream.stream_id, reason)
        for node, peer in ((stream.low, stream.high), (stream.high, stream.low)):
            if node in self._endpoints:
                self.loop.call_later(0, self._notify_disconnected, node, peer, self._endpoints[node])
        self._schedule_connect(a, b)

    def _notify_disconnected(self, node: int, peer: int, endpoint: Endpoint) -> None:
        if self._endpoints.get(node) is not endpoint:
            return  # that process is gone; a restarted one never knew the stream
        if node in self._paused:
            self._deferred_disconnects.setdefault(node, []).append((peer, endpoint))
            return  # a stopped process learns of the reset when it runs again
        endpoint.on_disconnected(peer)

    def _can_connect(self, a: int, b: int) -> bool:
        return (
            a in self._endpoints
            and b in self._endpoints
            and a not in self._paused
            and b not in self._paused
            and (a, b) not in self._blocked
            and (b, a) not in self._blocked
        )

    def _schedule_connect(self, a: int, b: int) -> None:
        key = _pair(a, b)
        if key in self._streams or key in self._connect_handles or not self._can_connect(a, b):
            return
        backoff_us = self._rngs[key].randint(0, self.config.reconnect_backoff_us_max)
        self._connect_handles[key] = self.loop.call_later(self.config.connect_delay_us + backoff_us, self._connect, key)

    def _connect(self, key: tuple[int, int]) -> None:
        del self._connect_handles[key]
        low, high = key
        if key in self._streams or not self._can_connect(low, high):
            return
        self._next_stream_id += 1
        stream = _Stream(self._next_stream_id, low, high)
        self._streams[key] = stream
        self._trace("net.connect", low, high, stream.stream_id)
        self._endpoints[low].on_connected(high)
        if self._streams.get(key) is stream and high in self._endpoints:
            self._endpoints[high].on_connected(low)

    def _trace(self, kind: str, *fields: object) -> None:
        self.loop.trace.append(self.loop.now_us, kind, *fields)
        if kind in _NODE_EVENTS:
            touched = fields[:_NODE_EVENTS[kind]]
        elif kind in _LINK_EVENTS:
            touched = self._node_ids
        else:
            return
        for node_id in touched:
            self.last_disturbed_us[node_id] = self.loop.now_us
