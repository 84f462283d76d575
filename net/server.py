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
  replies by correlation id but expect them in order. While it owes nothing, a plaintext connection's
  reader writes the replies a read answers at once itself, in one write, without waking it.
- on a plaintext socket both read the descriptor directly (net/plainsocket.py): the reader into one reused
  buffer from which each frame is copied once, without trio's per-call checkpoints and allocations.
A dispatcher may mute a connection (`throttle_delay_s`, a client quota's throttle): the reader then handles
no further frame of it for that long (those already read wait in the buffer, the rest in the socket), after
the replies so far were handed over.
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

from net import plainsocket
from net.connections import ConnectionLimits, serve_listeners
from net.logs import get_logger
from partitions.storage import StorageError
from net.tls import receive_available

FRAME_LENGTH = struct.Struct(">i")
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
                 ssl_context: ssl.SSLContext | None = None, listener: Any = None,
                 connections: ConnectionLimits | None = None):
        self.host = host
        self.port = port
        self.dispatcher = dispatcher
        self.limits = limits
        self.name = name
        self.log = get_logger(listener=name)
        self.ssl_context = ssl_context
        self.listener = listener  # handed to the dispatcher with each connection (broker.config.Listener)
        self.connections = connections  # the node's connection counts and limits (net/connections.py)
        self.bound_port: int | None = None

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        self.bound_port = listeners[0].socket.getsockname()[1]
        task_status.started(self.bound_port)
        await serve_listeners(self._serve_connection, listeners, self.connections, self.name, self.log)

    async def _serve_connection(self, socket_stream: trio.SocketStream) -> None:
        try:
            peer_host = socket_stream.socket.getpeername()[0]
        except OSError:
            peer_host = ""
        connection_id = next(_CONNECTION_IDS)
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
        link = _Link(stream, plainsocket.descriptor(stream))
        try:
            async with stream, trio.open_nursery() as nursery:
                nursery.start_soon(self._write_replies, link, receive_slots, nursery.cancel_scope)
                await self._read_requests(connection_id, link, send_slots)
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

    async def _read_requests(self, connection_id: int, link: "_Link", slots) -> None:
        # One cancel scope for the connection's life, its deadline kept ahead lazily (keep_deadline_ahead):
        # a connection is closed between 1 and 1.1 times `idle_ms_max` after its last frame.
        with trio.CancelScope() as idle:
            await self._read_frames(connection_id, link, slots, idle, self.limits.idle_ms_max / 1000)
        if idle.cancelled_caught:
            self.log.info("connection_idle_closed", connection_id=connection_id)
            raise CloseConnection("idle")

    async def _read_frames(self, connection_id: int, link: "_Link", slots, idle: trio.CancelScope,
                           idle_seconds: float) -> None:
        received = _ReceiveBuffer()
        batch_begin = getattr(self.dispatcher, "batch_begin", None)
        throttle_delay_s = getattr(self.dispatcher, "throttle_delay_s", None)
        muted = False  # the last read's handling stopped at a throttle: its other frames wait in `received`
        while True:
            if muted:
                idle.deadline = math.inf  # a muted connection is not idle
                # Muted: nothing more is handled for that long, what the client sends waits in the socket.
                await trio.sleep(throttle_delay_s(connection_id))
            keep_deadline_ahead(idle, idle_seconds)
            if not muted and not await link.receive(received):
                return
            muted = False
            if batch_begin is not None:
                batch_begin()  # what the frames of this read complete is delivered once, after them
            # While the writer owes nothing, the replies this read answers at once are written here, together,
            # without waking it (`direct`); from the first reply that is not immediate bytes on, every reply
            # goes through the writer, in order.
            direct: list | None = [] if link.owed == 0 and link.fd is not None else None
            try:
                while True:
                    if throttle_delay_s is not None and throttle_delay_s(connection_id) > 0:
                        muted = True  # a client quota's throttle (KIP-219), after the replies so far
                        break
                    frame = self._next_frame(received, connection_id)
                    if frame is None:
                        break
                    reply = self.dispatcher.handle_frame(connection_id, frame)
                    if direct is not None:
                        if type(reply) is bytes:
                            direct.append(reply)
                            if len(direct) == DIRECT_REPLIES_MAX:  # the first answers of a long read leave early
                                direct = _write_direct(link, direct, slots)
                            continue
                        if reply is NO_REPLY:
                            continue
                        if direct:
                            link.owed += 1
                            slots.send_nowait(b"".join(direct))  # the writer owed nothing: there is room
                        direct = None
                    link.owed += 1
                    try:  # without a scheduler checkpoint while there is room: the frames of one read queue up
                        slots.send_nowait(reply)  # together and their replies can leave in one send
                    except trio.WouldBlock:
                        if batch_begin is not None:  # deliver before waiting: the replies awaited may need it
                            self.dispatcher.batch_end()
                            batch_begin()
                        idle.deadline = math.inf  # a full pipeline is not idleness
                        await slots.send(reply)
                        keep_deadline_ahead(idle, idle_seconds)
                    if isinstance(reply, CloseAfter):
                        return
                if direct:
                    _write_direct(link, direct, slots)
            finally:
                if batch_begin is not None:
                    self.dispatcher.batch_end()

    def _next_frame(self, received: _ReceiveBuffer, connection_id: int) -> bytes | None:
        try:
            return received.next_frame(self._request_bytes_max, connection_id)
        except FrameTooLarge as error:
            self.log.info("request_too_large", connection_id=connection_id, error=str(error))
            raise

    def _request_bytes_max(self, connection_id: int, length: int) -> int:
        if length <= PRE_AUTH_REQUEST_BYTES_MAX:
            return self.limits.request_bytes_max
        limit = getattr(self.dispatcher, "request_bytes_max", None)
        return self.limits.request_bytes_max if limit is None else min(limit(connection_id), self.limits.request_bytes_max)

    async def _write_replies(self, link: "_Link", slots, cancel_scope: trio.CancelScope) -> None:
        """Send the replies in request order. Replies already complete when the writer gets to them (pipelined
        requests answered at once) leave together, in one send. `link.owed` counts down as each is sent."""
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
                        link.owed -= 1
                        continue
                    if reply is CLOSE_REPLY:
                        return
                    if isinstance(reply, CloseAfter):
                        await trio.sleep(reply.delay_s)
                        await link.stream.send_all(reply.reply)
                        return
                    if isinstance(reply, FileReply):
                        await send_file_reply(link.stream, reply.parts, link)
                        reply = None
                        link.owed -= 1
                        continue
                    batch, count, reply = _ready_replies(slots, reply)
                    await link.send_all(batch)
                    link.owed -= count
        finally:
            cancel_scope.cancel()


def _write_direct(link: "_Link", replies: list[bytes], slots) -> list | None:
    """Write `replies` from the reader (the writer owes nothing). What the socket does not take goes to the
    writer; then the reader's next replies must follow it there (None), else they may go direct again ([])."""
    rest = plainsocket.write_now(link.fd, replies[0] if len(replies) == 1 else b"".join(replies))
    if not rest:
        return []
    link.owed += 1
    slots.send_nowait(rest)  # the writer owed nothing: its queue has room
    return None


# The reader writes a read's immediate replies at least every this many: a read of many small requests (a
# client that got ahead) answers its first ones before it handles the rest.
DIRECT_REPLIES_MAX = 32
# keep_deadline_ahead sets a deadline this many times its timeout ahead.
DEADLINE_SLACK = 1.1


def keep_deadline_ahead(scope: trio.CancelScope, seconds: float) -> None:
    """Keep `scope`'s deadline between `seconds` and DEADLINE_SLACK times `seconds` from now, moving it only
    when it falls outside (closer, or further: none set yet, or set to infinity while waiting for something
    that is not the timeout). Moving a deadline costs more than a small request's read, so a scope kept for
    a loop's life is pushed forward about once per tenth of its timeout, not once per turn; what it guards
    times out after 1 to DEADLINE_SLACK times `seconds`."""
    ahead = scope.deadline - trio.current_time()
    if not seconds <= ahead <= seconds * DEADLINE_SLACK:
        scope.deadline = trio.current_time() + seconds * DEADLINE_SLACK
# The reused receive buffer of a connection; it grows to hold a larger frame whole, and is kept up to
# RECEIVE_BUFFER_KEEP_BYTES for the next one (a producer of 1 MB batches), replaced when larger.
RECEIVE_BUFFER_BYTES = 64 * 1024
RECEIVE_BUFFER_KEEP_BYTES = 2 * 1024 * 1024


class FrameTooLarge(CloseConnection):
    """A frame length that is negative or above the connection's limit."""


class _ReceiveBuffer:
    """Received bytes not yet taken as frames (4-byte big-endian length + payload), in one reused bytearray: a
    plaintext socket is read into it directly (os.readv) and each frame is copied out once, as bytes. When a
    frame does not fit, the buffer doubles (up to the frame's size) as its bytes arrive, never ahead of them;
    once it is empty again it goes back to RECEIVE_BUFFER_BYTES, unless it is small enough to keep for the
    next large frame."""

    __slots__ = ("data", "view", "start", "end", "wanted")

    def __init__(self) -> None:
        self.data = bytearray(RECEIVE_BUFFER_BYTES)
        self.view = memoryview(self.data)
        self.start = self.end = 0  # data[start:end] is received and not yet taken
        self.wanted = 0  # the size of the frame being received, length prefix included (0: not known yet)

    def room(self) -> memoryview:
        """The free space after what is buffered; never empty."""
        if self.end == len(self.data):
            held = self.end - self.start
            if self.start > 0 and (self.wanted <= len(self.data) or held <= len(self.data) // 2):
                self._move(self.data)  # to the front
            else:  # double, but not past the frame being received
                size = 2 * len(self.data)
                self._move(bytearray(min(size, self.wanted) if self.wanted > len(self.data) else size))
        return self.view[self.end:]

    def extend(self, data: bytes | bytearray) -> None:
        """Copy `data` in (a TLS read), into the room as os.readv would, growing as it fills."""
        while data:
            room = self.room()
            taken = min(len(room), len(data))
            room[:taken] = data[:taken]
            self.end += taken
            data = data[taken:]

    def next_frame(self, bytes_max: Any, connection_id: int) -> bytes | None:
        """The next complete frame's payload, or None. Raises FrameTooLarge for a negative length or one
        above `bytes_max(connection_id, length)`."""
        start = self.start
        if self.end - start < 4:
            return None
        (length,) = FRAME_LENGTH.unpack_from(self.data, start)
        if length < 0 or length > bytes_max(connection_id, length):
            raise FrameTooLarge(f"frame length {length}")
        if self.end - start - 4 < length:
            self.wanted = 4 + length
            return None
        self.wanted = 0
        frame = bytes(self.view[start + 4 : start + 4 + length])
        start += 4 + length
        if start < self.end:
            self.start = start
            return frame
        self.start = self.end = 0
        if len(self.data) > RECEIVE_BUFFER_KEEP_BYTES:
            self._move(bytearray(RECEIVE_BUFFER_BYTES))
        return frame

    def _move(self, data: bytearray) -> None:
        """What is buffered, moved to the front of `data` (the same buffer, or a new one that replaces it)."""
        held = self.end - self.start
        if data is self.data:
            self.view[:held] = bytes(self.view[self.start : self.end])
        else:
            data[:held] = self.view[self.start : self.end]
            self.view.release()
            self.data, self.view = data, memoryview(data)
        self.start, self.end = 0, held


class _Link:
    """A connection's byte stream, with its socket's descriptor when it is plaintext (None on TLS), and the
    replies handed to the writer and not yet sent (`owed`): while none are, the writer is idle, and the reader
    may write what a read answered at once itself. On a plaintext socket both ends call the descriptor
    directly (os.readv, os.write), without trio's socket wrappers and their scheduler checkpoints."""

    __slots__ = ("stream", "fd", "owed")

    def __init__(self, stream: Any, fd: int | None) -> None:
        self.stream = stream
        self.fd = fd
        self.owed = 0

    async def receive(self, buffer: _ReceiveBuffer) -> bool:
        """Receive into `buffer`; False at the end of the stream. Raises trio.BrokenResourceError."""
        if self.fd is None:
            data = await self.stream.receive_some(plainsocket.RECEIVE_BYTES_MAX)
            if not data:
                return False
            buffer.extend(receive_available(self.stream, data, plainsocket.RECEIVE_BYTES_MAX))
            return True
        received, waited = await plainsocket.read_into(self.fd, buffer.room())
        buffer.end += received
        if not waited:  # the bytes were already there: the node's other tasks run before they are handled
            await trio.lowlevel.checkpoint()
        return received > 0

    async def send_all(self, data: bytes) -> None:
        if self.fd is None:
            await self.stream.send_all(data)
        else:
            await plainsocket.send_all(self.fd, data)


_BUFFERS = (bytes, bytearray, memoryview)
COALESCED_REPLIES_MAX = 64


def _ready_replies(slots: Any, first: bytes) -> tuple[bytes, int, Any]:
    """`first` joined with the replies behind it that are already complete, how many replies that is (with
    the empty ones skipped), and the first one that is not complete (a pending, file or closing reply, to
    handle next; None when the queue ran dry)."""
    batch = [first]
    count = 1
    while len(batch) < COALESCED_REPLIES_MAX:
        try:
            reply = slots.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel):
            break
        if isinstance(reply, PendingReply) and reply.done:
            reply = reply._reply
        if reply is NO_REPLY:
            count += 1
            continue
        if not isinstance(reply, _BUFFERS):
            return b"".join(batch), count, reply
        batch.append(reply)
        count += 1
    return (first if len(batch) == 1 else b"".join(batch)), count, None
# Process-wide counts of os.sendfile calls and the bytes they sent (flotilla_sendfile_* in the metrics).
SENDFILE_STATS = {"calls": 0, "bytes": 0}


# A file slice smaller than this is read (one pread) and sent with the buffers around it: a follower's or a
# caught-up consumer's fetch of a few small batches then leaves in one send instead of a send and a sendfile
# per partition (each a syscall, a TCP segment and a wake-up of the reader). Larger slices go by sendfile.
SENDFILE_SLICE_BYTES_MIN = 64 * 1024


async def send_file_reply(stream: Any, parts: list, link: "_Link | None" = None) -> None:
    """Send a FileReply's chunks in order: buffers and small slices gathered into one send, the other file
    slices by os.sendfile on a plain socket (read into bytes on TLS, or for a handle without a descriptor).

    A slice's file may be closed before its bytes leave: the replica was deleted (moved away by a
    reassignment) or its segment removed after the response was built. The frame's length is already
    promised, so the connection is closed (trio.BrokenResourceError) and the client fetches again; the node
    keeps serving. The descriptor is looked up again before every sendfile, after any wait, so a number the
    kernel reused for another file is never sent from."""
    raw = getattr(stream, "socket", None)  # trio.SocketStream; a trio.SSLStream has none
    send_all = stream.send_all if link is None else link.send_all
    pending: list = []
    for part in parts:
        if isinstance(part, _BUFFERS):
            pending.append(part)
            continue
        if raw is None or part.size < SENDFILE_SLICE_BYTES_MIN or part.handle.fileno() is None:
            pending.append(_slice_bytes(part))
            continue
        if pending:
            await send_all(b"".join(pending))
            pending = []
        await _sendfile(raw, part)
    if pending:
        await send_all(b"".join(pending))


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
