"""`BrokerConnection`: one pipelined trio TCP connection to one broker, driving a sans-IO `ClientConnection`.

Theory of operation: `open()` connects, negotiates versions (ApiVersions, with the KIP-511 fallback) before
anything else is sent, then starts one reader task in the owner's nursery. Any number of tasks may call
`request()` at once: writes are serialized by a lock (a request is written whole, in correlation-id order),
and each caller waits on its own slot, which the reader fills as responses arrive in request order. At
most `inflight_requests_max` callers wait at a time (a semaphore), so the sans-IO bound is never hit.

Re-authentication (KIP-368): when the broker announces a SASL session lifetime, the connection runs the
SASL exchange again at a random 85-95% of it, as Kafka's clients do: the next request to be sent after that
point waits (holding the write lock) until every request in flight has been answered, re-authenticates,
then goes out. A refused re-authentication closes the connection and raises the broker's error.

Failure: a refused or timed-out connect raises ConnectError (nothing was sent). A connection that breaks,
sends bad bytes, or lets a request exceed its timeout is closed and every waiting caller gets a
NetworkError (or RequestTimedOutError for the one that timed out), as Kafka's NetworkClient disconnects on a
request timeout: a late response could otherwise be matched to the wrong request. The owner opens a new
connection for the next request.
"""

from __future__ import annotations

import trio

from net.client.connection import ClientConnection, ClientProtocolError, ConnectionState
from net.client.errors import ConnectError, NetworkError
from net.client.security import ClientSecurity, reauthenticate_at, sasl_authenticate
from net.plainsocket import RECEIVE_BYTES_MAX
from net.protocol.codec import ApiKey
from net.protocol.schema import Message
from partitions.errors import KafkaError, RequestTimedOutError


class _Slot:
    __slots__ = ("event", "response", "error")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.response: Message | None = None
        self.error: KafkaError | None = None


class BrokerConnection:
    """A connection to `host:port`. Use `open()` once, then `request()` from any number of tasks."""

    def __init__(self, host: str, port: int, client_id: str | None, inflight_requests_max: int,
                 security: ClientSecurity | None = None) -> None:
        self.host = host
        self.port = port
        self.security = security
        self.protocol = ClientConnection(client_id, inflight_requests_max=inflight_requests_max)
        self._stream: trio.SocketStream | None = None
        self._send_lock = trio.Lock()
        self._inflight = trio.Semaphore(inflight_requests_max)
        self._waiters: dict[int, _Slot] = {}
        self._drained: trio.Event | None = None  # set when the last request in flight is answered
        self._reauthenticate_at: float | None = None  # trio time (KIP-368); None: the session does not expire
        self.reauthentications = 0
        self.failure: NetworkError | None = None

    @property
    def alive(self) -> bool:
        return self._stream is not None and self.failure is None

    def __repr__(self) -> str:
        return f"BrokerConnection({self.host}:{self.port}, alive={self.alive})"

    async def open(self, nursery: trio.Nursery, connect_timeout_s: float) -> None:
        """Connect and negotiate versions. Raises ConnectError, UnsupportedVersionError."""
        try:
            with trio.fail_after(connect_timeout_s):
                self._stream = await trio.open_tcp_stream(self.host, self.port)
                if self.security is not None and self.security.uses_tls:
                    self._stream = trio.SSLStream(self._stream, self.security.ssl_context(), server_hostname=self.host)
                await self._negotiate()
                if self.security is not None and self.security.uses_sasl:
                    lifetime_ms = await sasl_authenticate(self._call_before_reading, self.security)
                    self._reauthenticate_at = reauthenticate_at(lifetime_ms, trio.current_time())
        except (OSError, trio.TooSlowError, trio.BrokenResourceError, NetworkError, ClientProtocolError) as error:
            await self.aclose()
            raise ConnectError(f"cannot connect to {self.host}:{self.port}: {_describe(error)}") from None
        except KafkaError:  # refused authentication: the broker's own words
            await self.aclose()
            raise
        except BaseException:
            await self.aclose()
            raise
        nursery.start_soon(self._read_loop)

    async def _negotiate(self) -> None:
        while self.protocol.state is ConnectionState.NEW:
            await self._stream.send_all(self.protocol.initiate())
            while self.protocol.state is ConnectionState.NEGOTIATING:
                data = await self._stream.receive_some(RECEIVE_BYTES_MAX)
                if not data:
                    raise NetworkError("broker closed the connection during ApiVersions")
                self.protocol.receive_data(data)
                self.protocol.next_response()

    async def _call_before_reading(self, api_key: int, request: Message, api_version: int) -> Message:
        """One request and its response, before the reader task runs (the SASL exchange)."""
        _, data = self.protocol.send_request(api_key, request, api_version)
        await self._stream.send_all(data)
        while True:
            item = self.protocol.next_response()
            if item is not None:
                return item[1]
            data = await self._stream.receive_some(RECEIVE_BYTES_MAX)
            if not data:
                raise NetworkError(f"{self.host}:{self.port} closed the connection during authentication")
            self.protocol.receive_data(data)

    async def _reauthenticate(self) -> None:
        """Run the SASL exchange again once nothing is in flight (the caller holds the write lock)."""
        while self._waiters and self.failure is None:
            self._drained = trio.Event()
            await self._drained.wait()
        if self.failure is not None:
            raise self.failure
        try:
            lifetime_ms = await sasl_authenticate(self._call_locked, self.security)
            self._reauthenticate_at = reauthenticate_at(lifetime_ms, trio.current_time())
        except KafkaError as error:
            if not isinstance(error, NetworkError):
                self.fail(NetworkError(f"re-authentication to {self.host}:{self.port} refused: {error.message}"))
            raise
        self.reauthentications += 1

    async def _call_locked(self, api_key: int, request: Message, api_version: int) -> Message:
        """One request and its response while the caller holds the write lock (the re-authentication)."""
        correlation_id, parts, _ = self.protocol.send_request_parts(api_key, request, api_version)
        slot = self._waiters[correlation_id] = _Slot()
        try:
            await self._stream.send_all(b"".join(parts))
        except (OSError, trio.BrokenResourceError) as error:
            self.fail(NetworkError(f"send to {self.host}:{self.port} failed: {_describe(error)}"))
            raise self.failure from None
        await slot.event.wait()
        if slot.error is not None:
            raise slot.error
        return slot.response

    async def request(
        self, api_key: int, request: Message, timeout_s: float, api_version: int | None = None
    ) -> Message | None:
        """Send `request` and wait for its response (None for acks=0 Produce). Raises NetworkError,
        RequestTimedOutError, UnsupportedVersionError, ProtocolEncodeError."""
        if self.failure is not None:
            raise self.failure
        async with self._inflight:
            with trio.move_on_after(timeout_s) as deadline:
                slot = await self._send(api_key, request, api_version)
                if slot is None:
                    return None
                await slot.event.wait()
            if deadline.cancelled_caught:
                error = RequestTimedOutError(f"api_key={ApiKey(api_key).name} to {self.host}:{self.port}: "
                                             f"no response within {timeout_s:.3f} s")
                self.fail(NetworkError(f"connection to {self.host}:{self.port} closed after a request timeout"))
                raise error
        if slot.error is not None:
            raise slot.error
        return slot.response

    async def _send(self, api_key: int, request: Message, api_version: int | None) -> _Slot | None:
        async with self._send_lock:
            if self.failure is not None:
                raise self.failure
            if self._reauthenticate_at is not None and trio.current_time() >= self._reauthenticate_at:
                await self._reauthenticate()
            correlation_id, parts, expects_response = self.protocol.send_request_parts(api_key, request, api_version)
            slot = _Slot() if expects_response else None
            if slot is not None:
                self._waiters[correlation_id] = slot
            try:
                await self._stream.send_all(b"".join(parts))
            except BaseException as error:  # a half-written request poisons the stream, whatever interrupted it
                self.fail(NetworkError(f"send to {self.host}:{self.port} failed: {_describe(error)}"))
                raise self.failure if isinstance(error, (OSError, trio.BrokenResourceError)) else error
            return slot

    async def _read_loop(self) -> None:
        try:
            while True:
                data = await self._stream.receive_some(RECEIVE_BYTES_MAX)
                if not data:
                    raise NetworkError(f"{self.host}:{self.port} closed the connection")
                self.protocol.receive_data(data)
                while (item := self.protocol.next_response()) is not None:
                    slot = self._waiters.pop(item[0], None)
                    if slot is not None:  # None when the caller was cancelled and left
                        slot.response = item[1]
                        slot.event.set()
                if not self._waiters and self._drained is not None:
                    self._drained.set()
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, KafkaError) as error:
            self.fail(error if isinstance(error, NetworkError) else NetworkError(
                f"connection to {self.host}:{self.port} failed: {_describe(error)}"))

    def fail(self, error: NetworkError) -> None:
        """Close the connection and hand `error` to every waiting caller (idempotent)."""
        if self.failure is None:
            self.failure = error
        waiters, self._waiters = self._waiters, {}
        for slot in waiters.values():
            slot.error = self.failure
            slot.event.set()
        if self._drained is not None:
            self._drained.set()
        if self._stream is not None:
            stream, self._stream = self._stream, None
            _close_now(stream)

    async def aclose(self) -> None:
        self.fail(self.failure or NetworkError(f"connection to {self.host}:{self.port} closed by the client"))


def _close_now(stream) -> None:
    # Closing the socket synchronously wakes the reader task with ClosedResourceError; no await needed, so
    # fail() can run from any context (including a cancelled one).
    while isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
    try:
        stream.socket.close()
    except OSError:
        pass


def _describe(error: BaseException) -> str:
    if isinstance(error, trio.TooSlowError):
        return "timed out"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror.lower()
    return str(error) or type(error).__name__

