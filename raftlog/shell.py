"""RaftShell: runs one RaftDriver inside a trio nursery, over authenticated TCP streams.

Theory of operation: the driver is sans-IO; this shell is its only I/O. One task ticks the driver when
`next_deadline_ms()` is reached (or at once when woken by a proposal); one sender task per peer keeps an
outgoing TCP stream (connect, handshake, then `driver.connected(peer)`; frames in driver order; any error,
EOF or overflow ends the stream with `driver.disconnected(peer)` and a reconnect after a growing backoff,
so every reconnect is a *new* stream and a dead stream's queued messages are dropped, never replayed). The
listener accepts peers' outgoing streams and feeds their frames to `driver.receive`; a newer stream from a
peer cancels the older one so frames of two streams never interleave. All driver calls happen in trio
tasks of one thread; after each, `_pump` moves the driver's released outputs (already fsynced) to the
sender channels, the proposal waiters and the committed feed.

Wire: every frame is `u32 big-endian length | payload`, length <= the frame limit (small before
authentication). The first frames are fixed binary layouts, never CBOR or pickle, so nothing is decoded
from an unauthenticated peer:

    hello     (client) b"FLRH" | u8 version | u8 kind (1 raft, 2 rpc) | i32 node_id | 32B client nonce
                       | u16 len | cluster_id (utf-8)
    challenge (server) b"FLRC" | 32B server nonce | 32B sha256(cluster_id) | 32B server proof
    proof     (client) b"FLRP" | 32B client proof
    proof = HMAC-SHA256(secret, role | cluster_id | kind | node_id | client nonce | server nonce), or 32
    zero bytes when no secret is configured (then only the cluster id is checked).

With `tls` (the `[security] controller_tls` setting) every connection runs over TLS first, both ways
authenticated by the nodes' certificates; the HMAC handshake then runs inside it unchanged.

A peer with a wrong secret or cluster id is closed. "rpc" connections carry CBOR request/response frames
for `rpc_handler` (broker registration, heartbeats, AlterPartition...); `call_rpc` is the client.
This module is the only one in raftlog/ that imports trio, socket, time, random or os.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import random
import ssl
import struct
import time
from typing import Any, Awaitable, Callable

import cbor2
import structlog
import trio

from partitions.errors import ErrorCode, RequestTimedOutError
from partitions.storage import Storage
from raftlog.driver import RaftDriver
from raftlog.port import RaftConfig, RaftError, RaftStatus, RestoreFn, SnapshotFn

log = structlog.get_logger("raftlog.shell")

PROTOCOL_VERSION = 1
KIND_RAFT = 1
KIND_RPC = 2
_KINDS = {"raft": KIND_RAFT, "rpc": KIND_RPC}
_LENGTH = struct.Struct(">I")
_HELLO = struct.Struct(">4sBBi32sH")
_CHALLENGE = struct.Struct(">4s32s32s32s")
_PROOF = struct.Struct(">4s32s")
handshake_frame_bytes_max = 512
cluster_id_bytes_max = 255
handshake_timeout_ms = 5_000
connect_timeout_ms = 2_000
reconnect_backoff_min_ms = 50
reconnect_backoff_max_ms = 2_000
peer_queue_messages_max = 10_000
committed_feed_entries_max = 1_000_000
rpc_frame_bytes_max = 4 * 1024 * 1024
receive_batch_frames_max = 256
step_wait_checkpoints_max = 8  # scheduler rounds a deferred on_step waits for the frames queued before it

assert reconnect_backoff_min_ms < reconnect_backoff_max_ms


class HandshakeError(RaftError):
    """A peer failed the hello/challenge/proof exchange (wrong secret, cluster id, kind or framing)."""

    code = ErrorCode.SASL_AUTHENTICATION_FAILED


class ControlRpcError(RaftError):
    """A control RPC could not be delivered or answered."""

    code = ErrorCode.NETWORK_EXCEPTION


def monotonic_ms() -> int:
    """The clock a shell-driven RaftDriver must use (`clock_ms=monotonic_ms`)."""
    return time.monotonic_ns() // 1_000_000


# -- framing and handshake ---------------------------------------------------------------------------------------


class _FramedStream:
    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self._buffer = bytearray()

    async def _read_exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            chunk = await self.stream.receive_some(max(65536, size - len(self._buffer)))
            if not chunk:
                raise trio.EndOfChannel("stream closed")
            self._buffer += chunk
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    async def receive_frame(self, frame_bytes_max: int) -> bytes:
        """Raises EndOfChannel at EOF and HandshakeError (closing) for a frame over the limit."""
        (length,) = _LENGTH.unpack(await self._read_exactly(_LENGTH.size))
        if length > frame_bytes_max:
            raise HandshakeError(f"frame of {length} bytes > limit {frame_bytes_max}")
        return await self._read_exactly(length)

    async def receive_frames(self, frame_bytes_max: int, batch_frames_max: int) -> list[bytes]:
        """At least one frame, plus every further complete frame already buffered (up to the batch max)."""
        frames = [await self.receive_frame(frame_bytes_max)]
        while len(frames) < batch_frames_max and len(self._buffer) >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(self._buffer)
            if length > frame_bytes_max:
                raise HandshakeError(f"frame of {length} bytes > limit {frame_bytes_max}")
            if len(self._buffer) < _LENGTH.size + length:
                break
            frames.append(bytes(self._buffer[_LENGTH.size:_LENGTH.size + length]))
            del self._buffer[:_LENGTH.size + length]
        return frames

    async def send_frame(self, payload: bytes) -> None:
        await self.stream.send_all(_LENGTH.pack(len(payload)) + payload)


def _proof(secret: bytes | None, role: bytes, cluster_id: bytes, kind: int, node_id: int, client_nonce: bytes,
           server_nonce: bytes) -> bytes:
    if secret is None:
        return bytes(32)
    message = b"|".join([role, cluster_id, bytes([kind]), str(node_id).encode(), client_nonce, server_nonce])
    return hmac.new(secret, message, hashlib.sha256).digest()


async def _client_handshake(framed: _FramedStream, cluster_id: str, secret: bytes | None, kind: int,
                            node_id: int) -> None:
    cluster = cluster_id.encode()
    client_nonce = os.urandom(32)
    await framed.send_frame(_HELLO.pack(b"FLRH", PROTOCOL_VERSION, kind, node_id, client_nonce, len(cluster)) + cluster)
    challenge = await framed.receive_frame(handshake_frame_bytes_max)
    if len(challenge) != _CHALLENGE.size:
        raise HandshakeError("malformed challenge")
    magic, server_nonce, cluster_digest, server_proof = _CHALLENGE.unpack(challenge)
    if magic != b"FLRC" or not hmac.compare_digest(cluster_digest, hashlib.sha256(cluster).digest()):
        raise HandshakeError("server belongs to another cluster")
    expected = _proof(secret, b"server", cluster, kind, node_id, client_nonce, server_nonce)
    if not hmac.compare_digest(server_proof, expected):
        raise HandshakeError("server failed to prove the cluster secret")
    await framed.send_frame(_PROOF.pack(b"FLRP", _proof(secret, b"client", cluster, kind, node_id, client_nonce,
                                                        server_nonce)))


async def _server_handshake(framed: _FramedStream, cluster_id: str, secret: bytes | None) -> tuple[int, int]:
    """Returns (kind, node_id) of an authenticated client; raises HandshakeError otherwise."""
    cluster = cluster_id.encode()
    hello = await framed.receive_frame(handshake_frame_bytes_max)
    if len(hello) < _HELLO.size:
        raise HandshakeError("malformed hello")
    magic, version, kind, node_id, client_nonce, cluster_length = _HELLO.unpack_from(hello)
    if magic != b"FLRH" or version != PROTOCOL_VERSION or kind not in (KIND_RAFT, KIND_RPC):
        raise HandshakeError(f"bad hello (version {version}, kind {kind})")
    if not hmac.compare_digest(hello[_HELLO.size:_HELLO.size + cluster_length], cluster) \
            or len(hello) != _HELLO.size + cluster_length:
        raise HandshakeError("client belongs to another cluster")
    server_nonce = os.urandom(32)
    server_proof = _proof(secret, b"server", cluster, kind, node_id, client_nonce, server_nonce)
    await framed.send_frame(_CHALLENGE.pack(b"FLRC", server_nonce, hashlib.sha256(cluster).digest(), server_proof))
    proof = await framed.receive_frame(handshake_frame_bytes_max)
    expected = _proof(secret, b"client", cluster, kind, node_id, client_nonce, server_nonce)
    if len(proof) != _PROOF.size or proof[:4] != b"FLRP" or not hmac.compare_digest(proof[4:], expected):
        raise HandshakeError(f"node {node_id} failed to prove the cluster secret")
    return kind, node_id


# -- the shell -----------------------------------------------------------------------------------------------------


class RaftShell:
    """One quorum member on the network. See the module docstring."""

    def __init__(self, driver: RaftDriver, node_id: int, listen_host: str, listen_port: int,
                 peers: dict[int, tuple[str, int]], cluster_id: str, secret: bytes | None,
                 rpc_handler: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]] | None = None,
                 on_committed: Callable[[int, bytes], None] | None = None,
                 on_step: Callable[[], None] | None = None,
                 tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None,
                 serve_listeners: Callable[..., Awaitable[None]] = trio.serve_listeners) -> None:
        """`on_step`, when given, makes the caller the owner of the driver's completions and committed
        entries: after every driver step the shell only ships the outbox and then calls `on_step()`, which
        must drain `take_completions`/`take_committed` itself (the node's ControllerCore does). `propose`
        and `committed_feed` are then unavailable. `serve_listeners(handler, listeners)` accepts the inbound
        connections (the node's bounds them, net/connections.py)."""
        assert driver.node_id == node_id, f"driver is node {driver.node_id}, shell is node {node_id}"
        assert sorted(peers) == driver.peer_ids, f"peers {sorted(peers)} != driver peers {driver.peer_ids}"
        assert len(cluster_id.encode()) <= cluster_id_bytes_max, f"cluster_id longer than {cluster_id_bytes_max}"
        self.driver = driver
        self.node_id = node_id
        self.listen_host = listen_host
        self.listen_port = listen_port
        self.peers = dict(peers)
        self.cluster_id = cluster_id
        self.secret = secret
        # (server context, client context): the controller port over TLS, under the HMAC handshake.
        self.tls = tls
        self._serve_listeners = serve_listeners
        self.rpc_handler = rpc_handler
        self._on_committed = on_committed
        self._on_step = on_step
        self._frame_bytes_max = driver.config.message_bytes_max
        self._committed_send, self._committed_receive = trio.open_memory_channel[tuple[int, bytes]](
            committed_feed_entries_max)
        self._peer_queues: dict[int, tuple[trio.MemorySendChannel, trio.MemoryReceiveChannel]] = {
            p: trio.open_memory_channel(peer_queue_messages_max) for p in peers
        }
        self._peer_up: dict[int, bool] = {p: False for p in peers}
        self._overflowed: set[int] = set()
        self._inbound: dict[int, trio.CancelScope] = {}
        self._waiters: dict[int, trio.Event] = {}
        self._outcomes: dict[int, int | RaftError] = {}
        self._wakeup = trio.Event()
        self._step_soon = False  # an `on_step` deferred until the frames queued before it are sent (_pump)
        # Frames handed to the peers' senders (less those dropped with a broken or overflowed stream), and frames
        # they wrote to their streams: a deferred step waits until the second reaches the first.
        self.frames_queued = 0
        self.frames_sent = 0
        self._proposal_queue: list[tuple[bytes, int, trio.Event, list[int]]] = []
        self.rejected_handshakes = 0

    @classmethod
    def create(cls, node_id: int, peers: dict[int, tuple[str, int]], listen_host: str, listen_port: int,
               storage: Storage, directory: str, snapshot_fn: SnapshotFn, restore_fn: RestoreFn,
               cluster_id: str, secret: bytes | None, config: RaftConfig | None = None,
               rpc_handler: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]] | None = None,
               on_committed: Callable[[int, bytes], None] | None = None) -> RaftShell:
        """A shell over a new RaftDriver on the wall clock with an OS-seeded RNG."""
        driver = RaftDriver(node_id, sorted(peers), storage, directory, monotonic_ms, random.Random(),
                            snapshot_fn, restore_fn, config)
        return cls(driver, node_id, listen_host, listen_port, peers, cluster_id, secret, rpc_handler, on_committed)

    # -- public API ------------------------------------------------------------------------------------------------
    async def run(self, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve and tick until cancelled; `task_status.started(port)` reports the bound port."""
        listeners = await trio.open_tcp_listeners(self.listen_port, host=self.listen_host)
        self.listen_port = listeners[0].socket.getsockname()[1]
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._serve_listeners, self._handle_inbound, listeners)
                for peer_id in sorted(self.peers):
                    nursery.start_soon(self._peer_sender, peer_id)
                nursery.start_soon(self._tick_loop)
                task_status.started(self.listen_port)
        finally:
            for listener in listeners:
                await trio.aclose_forcefully(listener)
            self.driver.close()

    async def propose(self, data: bytes, timeout_ms: int) -> int:
        """Commit `data`; returns its raft index. Raises NotLeaderError(leader_hint), ProposalTimeoutError,
        ProposalDiscardedError, ProposalQueueFullError or ProposalTooLargeError. Proposals made while the
        tick task is busy are batched into one driver step (one fsync, one append per follower)."""
        event = trio.Event()
        box: list[int] = []
        self._proposal_queue.append((bytes(data), monotonic_ms() + timeout_ms, event, box))
        self._wake()
        await event.wait()
        outcome = self._outcomes.pop(box[0])
        if isinstance(outcome, RaftError):
            raise outcome
        return outcome

    def _submit_queued_proposals(self) -> None:
        queued, self._proposal_queue = self._proposal_queue, []
        if not queued:
            return
        tickets = self.driver.propose_many([(data, deadline_ms) for data, deadline_ms, _, _ in queued])
        for ticket, (_, _, event, box) in zip(tickets, queued):
            box.append(ticket)
            self._waiters[ticket] = event
        self._pump()

    def committed_feed(self) -> trio.MemoryReceiveChannel[tuple[int, bytes]]:
        """Committed entries (raft index, data) in order, each once (unless `on_committed` was given)."""
        return self._committed_receive

    def status(self) -> RaftStatus:
        return self.driver.status()

    def leadership(self) -> tuple[bool, int, int | None]:
        return self.driver.leadership()

    # -- driver plumbing -------------------------------------------------------------------------------------------
    def wake(self) -> None:
        """Run a driver step now (after the owner proposed through the driver)."""
        self._wakeup.set()

    def _wake(self) -> None:
        self._wakeup.set()

    def _pump(self) -> None:
        queued = False
        for peer_id, payload in self.driver.take_outbox():
            if not self._peer_up.get(peer_id):
                continue
            try:
                self._peer_queues[peer_id][0].send_nowait(payload)
                self.frames_queued += 1
                queued = True
            except trio.WouldBlock:
                self._overflowed.add(peer_id)  # the sender resets this stream: like a full TCP buffer
        if self._on_step is not None:
            if queued or self._step_soon:
                # A step can take seconds (a metadata delta that creates a thousand replicas). The frames just
                # queued (a leader's new commit index, a follower's acknowledgement) leave first, from the
                # senders' tasks, so that the other nodes apply the same entries meanwhile, not after this one:
                # the tick loop runs the step once they are written.
                self._step_soon = True
                self._wake()
            else:
                self._on_step()
            return
        for ticket, outcome in self.driver.take_completions():
            self._outcomes[ticket] = outcome
            event = self._waiters.pop(ticket, None)
            if event is not None:
                event.set()
        for ticket, outcome in self.driver.take_late_completions():
            log.warning("raft_late_outcome", node_id=self.node_id, ticket=ticket, outcome=repr(outcome))
        for index, data in self.driver.take_committed():
            if self._on_committed is not None:
                self._on_committed(index, data)
            else:
                self._committed_send.send_nowait((index, data))  # WouldBlock: the node stopped consuming

    async def _tick_loop(self) -> None:
        while True:
            if self._step_soon:
                queued = self.frames_queued
                for _ in range(step_wait_checkpoints_max):  # the senders write what was queued before the step
                    await trio.lowlevel.checkpoint()
                    if self.frames_sent >= queued:
                        break
                self._step_soon = False
                self._on_step()
                await trio.lowlevel.checkpoint()
                continue
            wait_ms = self.driver.next_deadline_ms() - monotonic_ms()
            if wait_ms > 0:
                with trio.move_on_after(wait_ms / 1000.0):
                    await self._wakeup.wait()
            self._wakeup = trio.Event()
            self._submit_queued_proposals()
            self.driver.tick(monotonic_ms())
            self._pump()
            await trio.lowlevel.checkpoint()

    # -- outgoing streams ------------------------------------------------------------------------------------------
    async def _peer_sender(self, peer_id: int) -> None:
        backoff_ms = reconnect_backoff_min_ms
        while True:
            try:
                await self._run_outgoing_stream(peer_id)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.EndOfChannel,
                    trio.TooSlowError, HandshakeError) as error:
                log.debug("raft_stream_down", node_id=self.node_id, peer=peer_id, error=repr(error))
            finally:
                if self._peer_up[peer_id]:
                    self._peer_up[peer_id] = False
                    backoff_ms = reconnect_backoff_min_ms  # it was up: retry quickly
                    self.driver.disconnected(peer_id)
                    self._pump()
                self._drain_queue(peer_id)
            await trio.sleep(backoff_ms / 1000.0)
            backoff_ms = min(backoff_ms * 2, reconnect_backoff_max_ms)

    def _drain_queue(self, peer_id: int) -> None:
        self._overflowed.discard(peer_id)
        receive = self._peer_queues[peer_id][1]
        while True:
            try:
                receive.receive_nowait()
            except trio.WouldBlock:
                return
            self.frames_queued -= 1  # never to be sent: a deferred step no longer waits for it

    async def _run_outgoing_stream(self, peer_id: int) -> None:
        """Connect, authenticate, then send frames until the stream breaks (returns or raises)."""
        host, port = self.peers[peer_id]
        with trio.fail_after(connect_timeout_ms / 1000.0):
            stream = await trio.open_tcp_stream(host, port)
        if self.tls is not None:
            stream = trio.SSLStream(stream, self.tls[1], server_hostname=host)
        async with stream:
            framed = _FramedStream(stream)
            with trio.fail_after(handshake_timeout_ms / 1000.0):
                await _client_handshake(framed, self.cluster_id, self.secret, KIND_RAFT, self.node_id)
            self._peer_up[peer_id] = True
            self.driver.connected(peer_id)
            self._pump()
            self._wake()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch_eof, stream, nursery.cancel_scope)
                try:
                    await self._send_frames(peer_id, framed)
                except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as error:
                    log.debug("raft_stream_send_failed", node_id=self.node_id, peer=peer_id, error=repr(error))
                nursery.cancel_scope.cancel()

    async def _send_frames(self, peer_id: int, framed: _FramedStream) -> None:
        receive = self._peer_queues[peer_id][1]
        while True:
            payload = await receive.receive()
            if peer_id in self._overflowed:
                self.frames_queued -= 1  # dropped, as the rest of the queue will be (_drain_queue)
                return  # messages were dropped: this stream is no longer FIFO-complete
            try:
                await framed.send_frame(payload)
            except BaseException:
                self.frames_queued -= 1  # lost with the stream: a deferred step no longer waits for it
                raise
            self.frames_sent += 1

    async def _watch_eof(self, stream: trio.abc.Stream, scope: trio.CancelScope) -> None:
        # Raft streams are one-way: any byte or EOF from the peer means the stream is over.
        try:
            await stream.receive_some(1)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()

    # -- incoming streams ------------------------------------------------------------------------------------------
    async def _handle_inbound(self, stream: trio.SocketStream) -> None:
        if self.tls is not None:
            stream = trio.SSLStream(stream, self.tls[0], server_side=True)
        async with stream:
            framed = _FramedStream(stream)
            try:
                with trio.fail_after(handshake_timeout_ms / 1000.0):
                    kind, node_id = await _server_handshake(framed, self.cluster_id, self.secret)
            except (HandshakeError, trio.TooSlowError, trio.EndOfChannel, trio.BrokenResourceError, OSError) as error:
                self.rejected_handshakes += 1
                log.info("raft_handshake_rejected", node_id=self.node_id, error=repr(error))
                return
            try:
                if kind == KIND_RAFT and node_id in self.peers:
                    await self._serve_raft_stream(framed, node_id)
                elif kind == KIND_RPC and self.rpc_handler is not None:
                    await self._serve_rpc(framed)
            except (trio.EndOfChannel, trio.BrokenResourceError, trio.ClosedResourceError, HandshakeError, OSError):
                return

    async def _serve_raft_stream(self, framed: _FramedStream, peer_id: int) -> None:
        previous = self._inbound.get(peer_id)
        if previous is not None:
            previous.cancel()  # frames of an older stream must never interleave with this one
        with trio.CancelScope() as scope:
            self._inbound[peer_id] = scope
            try:
                while True:
                    # Every frame already here goes into one driver step: one fsync for the whole batch.
                    frames = await framed.receive_frames(self._frame_bytes_max, receive_batch_frames_max)
                    self.driver.receive_many([(peer_id, frame) for frame in frames])
                    self._pump()
            finally:
                if self._inbound.get(peer_id) is scope:
                    del self._inbound[peer_id]

    async def _serve_rpc(self, framed: _FramedStream) -> None:
        assert self.rpc_handler is not None
        while True:
            payload = await framed.receive_frame(rpc_frame_bytes_max)
            try:
                request = cbor2.loads(payload)
            except (cbor2.CBORDecodeError, ValueError, TypeError):
                return
            if not isinstance(request, dict):
                return
            response = await self.rpc_handler(request)
            await framed.send_frame(cbor2.dumps(response))


async def call_rpc(host: str, port: int, cluster_id: str, secret: bytes | None, request: dict[str, Any],
                   timeout_ms: int, node_id: int = -1, ssl_context: ssl.SSLContext | None = None) -> dict[str, Any]:
    """Send one control RPC and return the response map. Raises RequestTimedOutError after `timeout_ms`,
    HandshakeError when the server rejects or fails authentication, ControlRpcError on a broken stream."""
    try:
        with trio.fail_after(timeout_ms / 1000.0):
            stream = await trio.open_tcp_stream(host, port)
            if ssl_context is not None:
                stream = trio.SSLStream(stream, ssl_context, server_hostname=host)
            async with stream:
                framed = _FramedStream(stream)
                await _client_handshake(framed, cluster_id, secret, KIND_RPC, node_id)
                await framed.send_frame(cbor2.dumps(request))
                response = cbor2.loads(await framed.receive_frame(rpc_frame_bytes_max))
    except trio.TooSlowError:
        raise RequestTimedOutError(f"control rpc to {host}:{port} timed out after {timeout_ms} ms") from None
    except (OSError, trio.BrokenResourceError, trio.EndOfChannel) as error:
        raise ControlRpcError(f"control rpc to {host}:{port} failed: {error!r}") from error
    if not isinstance(response, dict):
        raise ControlRpcError(f"control rpc response is not a map: {type(response).__name__}")
    return response
