"""The FrameServer's plaintext reads and writes: frames taken from a reused receive buffer however the bytes
arrive, replies written by the reader while the writer owes nothing and in request order whatever mix of
immediate, deferred and partly written replies, and idle connections closed."""

from __future__ import annotations

import math
import random
import struct

import pytest
import trio

from net.server import (
    RECEIVE_BUFFER_BYTES,
    RECEIVE_BUFFER_KEEP_BYTES,
    FrameServer,
    FrameTooLarge,
    PendingReply,
    ServerLimits,
    _ReceiveBuffer,
    keep_deadline_ahead,
)


def _framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _no_limit(connection_id: int, length: int) -> int:
    return 1 << 30


def _take_all(buffer: _ReceiveBuffer) -> list[bytes]:
    frames = []
    while (frame := buffer.next_frame(_no_limit, 1)) is not None:
        frames.append(frame)
    return frames


def test_frames_come_out_whole_however_the_bytes_are_split():
    rng = random.Random(5)
    payloads = [bytes([i % 251]) * size for i, size in enumerate(
        [0, 1, 3, 100, RECEIVE_BUFFER_BYTES - 4, RECEIVE_BUFFER_BYTES, 3 * RECEIVE_BUFFER_BYTES + 7, 10, 5])]
    stream = b"".join(_framed(p) for p in payloads)
    for cuts in range(8):
        buffer = _ReceiveBuffer()
        taken, position = [], 0
        while position < len(stream):
            step = rng.choice([1, 3, 4, 5, 4096, 65_537, RECEIVE_BUFFER_BYTES, 200_000])
            buffer.extend(stream[position : position + step])
            position += step
            taken += _take_all(buffer)
        assert taken == payloads, f"split {cuts}"
        assert buffer.start == buffer.end == 0


def test_a_frame_larger_than_the_buffer_grows_it_with_its_bytes_and_a_huge_one_gives_the_space_back():
    buffer = _ReceiveBuffer()
    large = bytes(RECEIVE_BUFFER_KEEP_BYTES + 1)
    data = _framed(large)
    buffer.extend(data[:RECEIVE_BUFFER_BYTES])
    assert buffer.next_frame(_no_limit, 1) is None
    assert len(buffer.data) == RECEIVE_BUFFER_BYTES  # not grown ahead of the bytes that arrived
    buffer.room()
    assert len(buffer.data) == 2 * RECEIVE_BUFFER_BYTES  # doubled once full
    buffer.extend(data[RECEIVE_BUFFER_BYTES:])
    assert buffer.next_frame(_no_limit, 1) == large
    assert len(buffer.data) == RECEIVE_BUFFER_BYTES
    kept = bytes(2 * RECEIVE_BUFFER_BYTES)  # small enough to keep for the next one
    buffer.extend(_framed(kept))
    assert buffer.next_frame(_no_limit, 1) == kept and len(buffer.data) > RECEIVE_BUFFER_BYTES


def test_a_negative_or_oversized_length_is_refused_before_its_bytes_arrive():
    buffer = _ReceiveBuffer()
    buffer.extend(struct.pack(">i", -1))
    with pytest.raises(FrameTooLarge):
        buffer.next_frame(_no_limit, 1)
    buffer = _ReceiveBuffer()
    buffer.extend(struct.pack(">i", 1000))
    with pytest.raises(FrameTooLarge):
        buffer.next_frame(lambda connection_id, length: 999, 1)


def test_extend_takes_a_tls_read_larger_than_the_room():
    buffer = _ReceiveBuffer()
    payloads = [bytes([7]) * 100_000, b"x", bytes([9]) * 300_000]
    buffer.extend(b"".join(_framed(p) for p in payloads))
    assert _take_all(buffer) == payloads


class MixedDispatcher:
    """Echoes each frame's payload; frames whose first byte is odd are answered later, by a task, out of order."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery

    def handle_frame(self, connection_id: int, frame: bytes):
        echo = _framed(frame)
        if frame[0] % 2 == 0:
            return echo
        pending = PendingReply()

        async def later() -> None:
            await trio.sleep(0.001 * (frame[0] % 7))
            pending.set(echo)

        self.nursery.start_soon(later)
        return pending

    def connection_closed(self, connection_id: int) -> None:
        pass


async def _serve(dispatcher_factory, limits: ServerLimits, client) -> None:
    async with trio.open_nursery() as nursery:
        server = FrameServer("127.0.0.1", 0, dispatcher_factory(nursery), limits)
        port = await nursery.start(server.run)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        with trio.fail_after(30):
            await client(stream)
        await stream.aclose()
        nursery.cancel_scope.cancel()


async def _read_exactly(stream, size: int) -> bytes:
    received = bytearray()
    while len(received) < size:
        chunk = await stream.receive_some(size - len(received))
        assert chunk, "closed early"
        received += chunk
    return bytes(received)


@pytest.mark.parametrize("inflight", [1, 3, 64])
async def test_replies_leave_in_request_order_whatever_the_mix(inflight):
    rng = random.Random(inflight)
    payloads = [bytes([rng.randrange(256)]) + rng.randbytes(rng.choice([1, 50, 5_000, 300_000])) for _ in range(60)]
    expected = b"".join(_framed(p) for p in payloads)

    async def client(stream) -> None:
        received = []

        async def read() -> None:
            await trio.sleep(0.2)  # let the server's socket buffer fill: its direct writes go partly through
            received.append(await _read_exactly(stream, len(expected)))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            for payload in payloads:  # in bursts, so that one read carries several frames
                await stream.send_all(_framed(payload))
        assert received[0] == expected

    await _serve(MixedDispatcher, ServerLimits(inflight_requests_max=inflight), client)


class Echo:
    def handle_frame(self, connection_id: int, frame: bytes) -> bytes:
        return _framed(frame)

    def connection_closed(self, connection_id: int) -> None:
        pass


class Throttling:
    """Echoes, and mutes the connection after a frame starting with b"T" for `mute_s` (a quota's throttle)."""

    def __init__(self, mute_s: float) -> None:
        self.mute_s = mute_s
        self.handled: list[bytes] = []
        self.muted_until = 0.0

    def handle_frame(self, connection_id: int, frame: bytes) -> bytes:
        self.handled.append(frame)
        if frame.startswith(b"T"):
            self.muted_until = trio.current_time() + self.mute_s
        return _framed(frame)

    def throttle_delay_s(self, connection_id: int) -> float:
        return max(0.0, self.muted_until - trio.current_time())

    def connection_closed(self, connection_id: int) -> None:
        pass


async def test_a_throttled_connection_gets_its_answer_and_nothing_more_is_handled_while_muted():
    dispatcher = Throttling(mute_s=60.0)

    async def client(stream) -> None:
        await stream.send_all(_framed(b"T1") + _framed(b"x2") + _framed(b"x3"))  # one read: three frames
        assert await _read_exactly(stream, 6) == _framed(b"T1")  # the throttled answer leaves at once
        with trio.move_on_after(0.3):
            await stream.receive_some(100)
            raise AssertionError("answered while muted")
        assert dispatcher.handled == [b"T1"]  # the frames behind it wait, though already read

    await _serve(lambda nursery: dispatcher, ServerLimits(), client)


async def test_the_frames_behind_a_throttle_are_handled_in_order_once_it_is_over():
    dispatcher = Throttling(mute_s=0.05)

    async def client(stream) -> None:
        await stream.send_all(_framed(b"T1") + _framed(b"x2") + _framed(b"T3") + _framed(b"x4"))
        assert await _read_exactly(stream, 24) == b"".join(_framed(f) for f in (b"T1", b"x2", b"T3", b"x4"))
        assert dispatcher.handled == [b"T1", b"x2", b"T3", b"x4"]

    await _serve(lambda nursery: dispatcher, ServerLimits(), client)


async def test_a_connection_idle_for_idle_ms_max_is_closed_and_a_busy_one_is_not():
    async def client(stream) -> None:
        for _ in range(8):  # 0.4 s of frames every 50 ms: never idle for 200 ms
            await trio.sleep(0.05)
            await stream.send_all(_framed(b"ping"))
            assert await _read_exactly(stream, 8) == _framed(b"ping")
        started = trio.current_time()
        assert await stream.receive_some(10) == b""  # closed by the server
        waited = trio.current_time() - started
        assert waited >= 0.2 * 0.95  # not before idle_ms_max after the last frame (5%: the last reply's trip)

    await _serve(lambda nursery: Echo(), ServerLimits(idle_ms_max=200), client)


async def test_plainsocket_reads_and_writes_a_descriptor_and_reports_a_closed_peer():
    from net import plainsocket

    left, right = trio.socket.socketpair()
    with left, right:
        payload = bytes(range(256)) * 20_000  # 5 MB: more than the socket takes at once
        received = bytearray()

        async def read_all() -> None:
            while len(received) < len(payload):
                chunk = await plainsocket.receive_some(right.fileno(), 65536)
                assert chunk
                received.extend(chunk)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_all)
            await plainsocket.send_all(left.fileno(), payload)
        assert bytes(received) == payload
        buffer = memoryview(bytearray(10))
        left.close()
        assert await plainsocket.read_into(right.fileno(), buffer) == (0, False)  # end of stream, at once
        with pytest.raises(trio.BrokenResourceError):
            for _ in range(100):  # the first write after the peer closed may still be taken
                await plainsocket.send_all(right.fileno(), b"x" * 65536)


async def test_keep_deadline_ahead_arms_an_unset_deadline_and_moves_it_only_when_it_comes_near(mock_clock):
    with trio.CancelScope() as scope:
        keep_deadline_ahead(scope, 10)  # none set yet (infinite): armed, a tenth over
        armed = scope.deadline
        assert armed == pytest.approx(trio.current_time() + 11)
        mock_clock.jump(0.9)
        keep_deadline_ahead(scope, 10)  # 10.1 s left: not moved
        assert scope.deadline == armed
        mock_clock.jump(0.2)
        keep_deadline_ahead(scope, 10)  # 9.9 s left: moved
        assert scope.deadline == pytest.approx(trio.current_time() + 11)
        scope.deadline = math.inf  # set aside while waiting for something else
        keep_deadline_ahead(scope, 10)
        assert scope.deadline == pytest.approx(trio.current_time() + 11)
    assert not scope.cancelled_caught
