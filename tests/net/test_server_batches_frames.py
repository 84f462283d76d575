"""The frames of one read are handed to the dispatcher between one batch_begin and one batch_end, so what they
complete is delivered once (KafkaDispatcher polls the cores once per read, not once per request); a full
pipeline delivers before it waits."""

from __future__ import annotations

import struct

import trio

from net.dispatcher import KafkaDispatcher
from net.protocol import messages
from net.protocol.codec import ApiKey, RequestHeader, decode_response, encode_request
from net.server import FrameServer, PendingReply, ServerLimits
from tests.broker.test_broker_sans_io import Cluster


class RecordingDispatcher:
    """Echoes each frame: at once, or (`deferred`) as a PendingReply completed when the batch ends, as an
    acks=all produce is answered by the poll of the cores after the frames of a read."""

    def __init__(self, deferred: bool = False) -> None:
        self.calls: list[str] = []
        self.deferred = deferred
        self._pending: list[tuple[PendingReply, bytes]] = []

    def handle_frame(self, connection_id: int, frame: bytes) -> bytes | PendingReply:
        self.calls.append("frame")
        echo = struct.pack(">i", len(frame)) + frame
        if not self.deferred:
            return echo
        pending = PendingReply()
        self._pending.append((pending, echo))
        return pending

    def connection_closed(self, connection_id: int) -> None:
        pass

    def batch_begin(self) -> None:
        self.calls.append("begin")

    def batch_end(self) -> None:
        self.calls.append("end")
        for pending, echo in self._pending:
            pending.set(echo)
        self._pending.clear()


async def _exchange(dispatcher, frames: list[bytes], limits: ServerLimits = ServerLimits()) -> bytes:
    """Send `frames` in one write to a real FrameServer on 127.0.0.1 and read back every echoed byte."""
    server = FrameServer("127.0.0.1", 0, dispatcher, limits)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.run)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        payload = b"".join(struct.pack(">i", len(f)) + f for f in frames)
        await stream.send_all(payload)
        received = bytearray()
        with trio.fail_after(10):
            while len(received) < len(payload):
                received += await stream.receive_some(65536)
        await stream.aclose()
        nursery.cancel_scope.cancel()
    return bytes(received)


async def test_the_frames_of_one_read_are_one_batch():
    dispatcher = RecordingDispatcher()
    frames = [bytes([i]) * 10 for i in range(5)]
    echoed = await _exchange(dispatcher, frames)
    assert echoed == b"".join(struct.pack(">i", 10) + f for f in frames)
    assert dispatcher.calls == ["begin", "frame", "frame", "frame", "frame", "frame", "end"]


async def test_a_full_pipeline_ends_the_batch_before_it_waits():
    dispatcher = RecordingDispatcher(deferred=True)
    frames = [bytes([i]) * 10 for i in range(4)]
    await _exchange(dispatcher, frames, ServerLimits(inflight_requests_max=1))
    calls = dispatcher.calls
    assert calls[0] == "begin" and calls[-1] == "end" and calls.count("frame") == 4
    # Every wait for room is preceded by a batch_end: no frame's completions are held across a wait.
    assert calls.count("begin") == calls.count("end") > 1


def test_kafka_dispatcher_delivers_once_per_batch():
    cluster = Cluster()
    delivered = []
    dispatcher = KafkaDispatcher(cluster.apis[1], lambda: cluster.now_ms, lambda: delivered.append(1))
    dispatcher.connection_opened(1, "127.0.0.1")
    request = encode_request(RequestHeader(ApiKey.METADATA, 8, 7, "c"), messages.MetadataRequest(topics=None))[4:]
    dispatcher.batch_begin()
    replies = [dispatcher.handle_frame(1, request) for _ in range(3)]
    assert delivered == []
    dispatcher.batch_end()
    assert delivered == [1]
    assert all(decode_response(ApiKey.METADATA, 8, reply[4:])[0] == 7 for reply in replies)
    dispatcher.handle_frame(1, request)  # outside a batch: at once, as before
    assert delivered == [1, 1]
