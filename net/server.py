"""The trio TCP server for length-framed protocols (the Kafka listener).

Theory of operation: one task per connection (inside the server's nursery, no detached tasks). A connection
is a reader and a writer joined by a bounded FIFO of reply slots:
- the reader splits the byte stream into frames (4-byte big-endian length + payload), refuses a frame larger
  than `request_bytes_max` by closing the connection, and hands each frame to the dispatcher *synchronously*,
  in arrival order. That order matters: the dispatcher appends produce requests to the log in that call, so
  two pipelined produce requests reach a partition in the order the client sent them.
- the dispatcher answers with bytes (an immediate reply), `NO_REPLY` (acks=0 produce), a `PendingReply`
  that completes later (acks=all produce, long-poll fetch, a request forwarded to the controller), or a
  `FileReply`: a Fetch response whose records are slices of segment files. On a plaintext connection the
  writer sends those slices with os.sendfile (no copy of record bytes through Python, as Kafka's broker
  does); on a TLS connection it reads them (the kernel cannot encrypt a sendfile here).
- the writer sends replies strictly in request order, waiting on each slot in turn; Kafka clients match
  replies by correlation id but expect them in order.
At most `inflight_requests_max` replies may be outstanding per connection: when the FIFO is full the reader
stops reading, which is TCP backpressure on that client alone. A connection idle for `idle_ms_max` is closed.
Anything the dispatcher cannot parse raises `CloseConnection`: garbage bytes get a closed connection, never
a crashed node.

TLS listeners wrap each connection in a `trio.SSLStream` and finish the handshake (bounded by
`TLS_HANDSHAKE_S_MAX`) before the first frame; a peer that sends anything but a TLS ClientHello, or a client
certificate the CA does not vouch for, is closed without a word. The dispatcher learns the listener and the
verified client certificate's subject in `connection_opened`. Before a connection has authenticated
(`dispatcher.request_bytes_max(connection_id)`) frames are limited to `PRE_AUTH_REQUEST_BYTES_MAX`, and an
answer can be `CloseAfter`: sent after a delay (a failed authentication), then the connection closes.
"""

from __future__ import annotations

import itertools
import math
import os
import ssl
import struct
from dataclasses import dataclass
from typing import Any, Protocol

import trio

from net.logs import get_logger
from partitions.storage import StorageError
from net.tls import receive_available

FRAME_LENGTH = struct.Struct(">i")
RECEIVE_BYTES_MAX = 1024 * 1024
PRE_AUTH_REQUEST_BYTES_MAX = 512 * 1024  # Kafka's sasl.server.max.receive.size
TLS_HANDSHAKE_S_MAX = 10.0
# Connection ids are unique across every listener of the process (one dispatcher serves them all).
_CONNECTION_IDS = itertools.count(1)


class CloseConnection(Exception):
    """Raised by a dispatcher to drop the connection (malformed or hostile input)."""


class _NoReply:
    def __repr__(self) -> str:
        return "NO_REPLY"


NO_REPLY = _NoReply()


class _CloseReply:
    def __repr__(self) -> str:
        return "CLOSE_REPLY"


# A deferred reply that could not be built: the writer closes the connection (the client retries elsewhere)
# instead of leaving it waiting for an answer that will never come.
CLOSE_REPLY = _CloseReply()


@dataclass(frozen=True)
class CloseAfter:
    """Send `reply` after `delay_s`, then close the connection; nothing more is read from it."""

    reply: bytes
    delay_s: float = 0.0


@dataclass(frozen=True)
class FileReply:
    """A response frame as chunks: buffers, and file slices (`.handle.fileno()`, `.position`, `.size`,
    `.read()`) to send with os.sendfile."""

    parts: list


class PendingReply:
    """A reply that a later event completes (set exactly once)."""

    __slots__ = ("_event", "_reply")

    def __init__(self) -> None:
        self._event = trio.Event()
        self._reply: bytes | _NoReply | _CloseReply | None = None

    def set(self, reply: bytes | _NoReply | _CloseReply) -> None:
        assert self._reply is None, "a pending reply completes exactly once"
        self._reply = reply
        self._event.set()

    @property
    def done(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> bytes | _NoReply:
        await self._event.wait()
        assert self._reply is not None
        return self._reply


Reply = bytes | _NoReply | PendingReply | CloseAfter


class Dispatcher(Protocol):
    def handle_frame(self, connection_id: int, frame: bytes) -> Reply:
        """Handle one request frame (without its length prefix). Raises CloseConnection."""

    def connection_closed(self, connection_id: int) -> None:
        """Forget per-connection state (pending replies are abandoned)."""

    # Optional: `batch_begin()` before the frames of one read and `batch_end()` after them (and before the
    # server waits for room), so the dispatcher may deliver what they completed once instead of per frame.


@dataclass(frozen=True)
class ServerLimits:
    request_bytes_max: int = 100 * 1024 * 1024
    inflight_requests_max: int = 64
    idle_ms_max: int = 600_000

    def __post_init__(self) -> None:
        assert self.request_bytes_max > 0 and self.inflight_requests_max > 0 and self.idle_ms_max > 0, self


class FrameServer:
    """Serves length-framed requests on host:port with `dispatcher`."""

    def __init__(self, host: str, port: int, dispatcher: Dispatcher, limits: ServerLimits, name: str = "kafka",
                 ssl_context: ssl.SSLContext | None = None, listener: Any = None):
        self.host = host
        self.port = port
        self.dispatcher = dispatcher
        self.limits = limits
        self.log = get_logger(listener=name)
        self.ssl_context = ssl_context
        self.listener = listener  # handed to the dispatcher with each connection (broker.config.Listener)
        self.bound_port: int | None = None

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        self.bound_port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            task_status.started(self.bound_port)
            await trio.serve_listeners(self._serve_connection, listeners, handler_nursery=nursery)

    async def _serve_connection(self, socket_stream: trio.SocketStream) -> None:
        connection_id = next(_CONNECTION_IDS)
        try:
            peer_host = socket_stream.socket.getpeername()[0]
        except OSError:
            peer_host = ""
        stream: Any = socket_stream
        certificate = None
        if self.ssl_context is not None:
            stream, certificate = await self._tls_handshake(connection_id, socket_stream)
            if stream is None:
                return
        opened = getattr(self.dispatcher, "connection_opened", None)
        if opened is not None:
            opened(connection_id, peer_host, self.listener, certificate)
        send_slots, receive_slots = trio.open_memory_channel[Reply](self.limits.inflight_requests_max)
        try:
            async with stream, trio.open_nursery() as nursery:
                nursery.start_soon(self._write_replies, stream, receive_slots, nursery.cancel_scope)
                await self._read_requests(connection_id, stream, send_slots)
                # The client closed its side: let the writer flush what is owed, then stop.
                await send_slots.aclose()
        except* (trio.BrokenResourceError, trio.ClosedResourceError, CloseConnection):
            pass  # the peer went away, or sent what gets a closed connection
        except* OSError as group:
            self.log.info("connection_error", connection_id=connection_id, error=str(group.exceptions[0]))
        finally:
            self.dispatcher.connection_closed(connection_id)

    async def _tls_handshake(self, connection_id: int, socket_stream: trio.SocketStream) -> tuple[Any, bytes | None]:
        """(the TLS stream, the client certificate in DER or None), or (None, None) after closing the connection."""
        stream = trio.SSLStream(socket_stream, self.ssl_context, server_side=True)
        try:
            with trio.fail_after(TLS_HANDSHAKE_S_MAX):
                await stream.do_handshake()
            return stream, stream.getpeercert(binary_form=True)
        except (trio.BrokenResourceError, trio.TooSlowError, ssl.SSLError, OSError) as error:
            cause = error.__cause__ if isinstance(error, trio.BrokenResourceError) and error.__cause__ else error
            self.log.info("tls_handshake_failed", connection_id=connection_id, error=str(cause) or type(cause).__name__)
            await trio.aclose_forcefully(socket_stream)
            return None, None

    async def _read_requests(self, connection_id: int, stream: trio.SocketStream, slots) -> None:
        idle_seconds = self.limits.idle_ms_max / 1000
        # One cancel scope for the connection's life, its deadline pushed forward on every read: cheaper than
        # a new timeout scope per receive on the hot path.
        with trio.CancelScope() as idle:
            await self._read_frames(connection_id, stream, slots, idle, idle_seconds)
        if idle.cancelled_caught:
            self.log.info("connection_idle_closed", connection_id=connection_id)
            raise CloseConnection("idle")

    async def _read_frames(self, connection_id: int, stream: trio.SocketStream, slots, idle: trio.CancelScope,
                           idle_seconds: float) -> None:
        buffer = bytearray()
        while True:
            idle.deadline = trio.current_time() + idle_seconds
            data = await stream.receive_some(RECEIVE_BYTES_MAX)
            if not data:
                return
            buffer += receive_available(stream, data, RECEIVE_BYTES_MAX)
            position = 0
            batch_begin = getattr(self.dispatcher, "batch_begin", None)
            if batch_begin is not None:
                batch_begin()  # what the frames of this read complete is delivered once, after them
            try:
                while len(buffer) - position >= 4:
                    (length,) = FRAME_LENGTH.unpack_from(buffer, position)
                    if length < 0 or length > self._request_bytes_max(connection_id, length):
                        self.log.info("request_too_large", connection_id=connection_id, size=length)
                        raise CloseConnection(f"frame length {length}")
                    if len(buffer) - position - 4 < length:
                        break
                    frame = bytes(buffer[position + 4 : position + 4 + length])
                    position += 4 + length
                    reply = self.dispatcher.handle_frame(connection_id, frame)
                    idle.deadline = math.inf  # a deferred reply or a full pipeline is not idleness
                    try:  # without a scheduler checkpoint while there is room: the frames of one read queue up
                        slots.send_nowait(reply)  # together and their replies can leave in one send
                    except trio.WouldBlock:
                        if batch_begin is not None:  # deliver before waiting: the replies awaited may need it
                            self.dispatcher.batch_end()
                            batch_begin()
                        await slots.send(reply)
                    if isinstance(reply, CloseAfter):
                        return
            finally:
                if batch_begin is not None:
                    self.dispatcher.batch_end()
            del buffer[:position]

    def _request_bytes_max(self, connection_id: int, length: int) -> int:
        if length <= PRE_AUTH_REQUEST_BYTES_MAX:
            return self.limits.request_bytes_max
        limit = getattr(self.dispatcher, "request_bytes_max", None)
        return self.limits.request_bytes_max if limit is None else min(limit(connection_id), self.limits.request_bytes_max)

    async def _write_replies(self, stream: trio.SocketStream, slots, cancel_scope: trio.CancelScope) -> None:
        """Send the replies in request order. Replies already complete when the writer gets to them (pipelined
        requests answered at once) leave together, in one send."""
        try:
            async with slots:
                reply: Any = None
                while True:
                    if reply is None:
                        try:
                            reply = await slots.receive()
                        except trio.EndOfChannel:
                            return
                    if isinstance(reply, PendingReply):
                        reply = await reply.wait()
                    if reply is NO_REPLY:
                        reply = None
                        continue
                    if reply is CLOSE_REPLY:
                        return
                    if isinstance(reply, CloseAfter):
                        await trio.sleep(reply.delay_s)
                        await stream.send_all(reply.reply)
                        return
                    if isinstance(reply, FileReply):
                        await send_file_reply(stream, reply.parts)
                        reply = None
                        continue
                    batch, reply = _ready_replies(slots, reply)
                    await stream.send_all(batch)
        finally:
            cancel_scope.cancel()


_BUFFERS = (bytes, bytearray, memoryview)
COALESCED_REPLIES_MAX = 64


def _ready_replies(slots: Any, first: bytes) -> tuple[bytes, Any]:
    """`first` joined with the replies behind it that are already complete, and the first one that is not (a
    pending, file or closing reply, to handle next; None when the queue ran dry)."""
    batch = [first]
    while len(batch) < COALESCED_REPLIES_MAX:
        try:
            reply = slots.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel):
            break
        if isinstance(reply, PendingReply) and reply.done:
            reply = reply._reply
        if reply is NO_REPLY:
            continue
        if not isinstance(reply, _BUFFERS):
            return b"".join(batch), reply
        batch.append(reply)
    return (first if len(batch) == 1 else b"".join(batch)), None
# Process-wide counts of os.sendfile calls and the bytes they sent (flotilla_sendfile_* in the metrics).
SENDFILE_STATS = {"calls": 0, "bytes": 0}


# A file slice smaller than this is read (one pread) and sent with the buffers around it: a follower's or a
# caught-up consumer's fetch of a few small batches then leaves in one send instead of a send and a sendfile
# per partition (each a syscall, a TCP segment and a wake-up of the reader). Larger slices go by sendfile.
SENDFILE_SLICE_BYTES_MIN = 64 * 1024


async def send_file_reply(stream: Any, parts: list) -> None:
    """Send a FileReply's chunks in order: buffers and small slices gathered into one send, the other file
    slices by os.sendfile on a plain socket (read into bytes on TLS, or for a handle without a descriptor).

    A slice's file may be closed before its bytes leave: the replica was deleted (moved away by a
    reassignment) or its segment removed after the response was built. The frame's length is already
    promised, so the connection is closed (trio.BrokenResourceError) and the client fetches again; the node
    keeps serving. The descriptor is looked up again before every sendfile, after any wait, so a number the
    kernel reused for another file is never sent from."""
    raw = getattr(stream, "socket", None)  # trio.SocketStream; a trio.SSLStream has none
    pending: list = []
    for part in parts:
        if isinstance(part, _BUFFERS):
            pending.append(part)
            continue
        if raw is None or part.size < SENDFILE_SLICE_BYTES_MIN or part.handle.fileno() is None:
            pending.append(_slice_bytes(part))
            continue
        if pending:
            await stream.send_all(b"".join(pending))
            pending = []
        await _sendfile(raw, part)
    if pending:
        await stream.send_all(b"".join(pending))


def _slice_bytes(part: Any) -> bytes:
    try:
        return part.read()
    except StorageError as error:
        raise trio.BrokenResourceError(f"file slice unreadable: {error}") from error


async def _sendfile(sock: Any, part: Any) -> None:
    out_fd = sock.fileno()
    position, size = part.position, part.size
    while size > 0:
        fd = part.handle.fileno()  # again after every wait (see send_file_reply)
        if fd is None:
            raise trio.BrokenResourceError(f"the file of a slice at {position} was closed before it was sent")
        try:
            sent = os.sendfile(out_fd, fd, position, size)
        except BlockingIOError:
            await trio.lowlevel.wait_writable(sock)
            continue
        SENDFILE_STATS["calls"] += 1
        SENDFILE_STATS["bytes"] += sent
        if sent == 0:  # the file is shorter than the slice (truncated since the read): the frame cannot finish
            raise trio.BrokenResourceError(f"sendfile: {size} bytes missing at {position}")
        position += sent
        size -= sent


def monotonic_ms() -> int:
    return math.floor(trio.current_time() * 1000)
