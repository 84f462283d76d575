"""send_file_reply over a real socket pair: a response's buffers and small file slices leave in one send (no
sendfile for them), slices of SENDFILE_SLICE_BYTES_MIN or more go by os.sendfile, and the peer receives the
exact bytes in order either way."""

from __future__ import annotations

import uuid

import pytest
import trio

from net import server
from net.dispatcher import encode_reply
from net.filestorage import FileStorage
from net.protocol import codec, messages
from net.protocol.codec import ApiKey, RequestHeader
from net.server import FileReply
from partitions.log import FetchData, FileSlice


def _file(tmp_path, size: int):
    handle = FileStorage(str(tmp_path)).open("segment.log", create=True)
    handle.write_at(0, bytes(i % 251 for i in range(size)))
    return handle


async def _send_and_receive(parts: list) -> tuple[bytes, int, int]:
    """(the bytes the peer read, sendfile calls, sends) for one send_file_reply."""
    left, right = trio.socket.socketpair()
    stream = trio.SocketStream(left)
    sends = 0
    original = stream.send_all

    async def counting_send_all(data) -> None:
        nonlocal sends
        sends += 1
        await original(data)

    stream.send_all = counting_send_all
    expected = sum(len(part) for part in parts)
    calls_before = server.SENDFILE_STATS["calls"]
    received = bytearray()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.send_file_reply, stream, parts)
        while len(received) < expected:
            received += await right.recv(1 << 20)
    left.close()
    right.close()
    return bytes(received), server.SENDFILE_STATS["calls"] - calls_before, sends


def test_small_slices_are_read_and_sent_with_the_buffers_in_one_send(tmp_path):
    handle = _file(tmp_path, 3_000)
    try:
        parts = [b"header", FileSlice(handle, 0, 1_000), b"middle", FileSlice(handle, 1_000, 2_000), b"end"]
        received, sendfile_calls, sends = trio.run(_send_and_receive, parts)
        data = handle.read_at(0, 3_000)
    finally:
        handle.close()
    assert received == b"header" + data[:1_000] + b"middle" + data[1_000:] + b"end"
    assert (sendfile_calls, sends) == (0, 1)


def test_large_slices_go_by_sendfile(tmp_path):
    size = server.SENDFILE_SLICE_BYTES_MIN * 3
    handle = _file(tmp_path, size)
    try:
        parts = [b"header", FileSlice(handle, 0, size), b"trailer"]
        received, sendfile_calls, sends = trio.run(_send_and_receive, parts)
        data = handle.read_at(0, size)
    finally:
        handle.close()
    assert received == b"header" + data + b"trailer"
    assert sendfile_calls >= 1 and sends == 2


async def _send_expecting_a_closed_connection(parts: list, before_sendfile=None) -> BaseException | None:
    """Run send_file_reply with the peer reading; the exception it ends with (None when it completed).
    `before_sendfile` runs inside the send that precedes a sendfile (a wait during which files may close)."""
    left, right = trio.socket.socketpair()
    stream = trio.SocketStream(left)
    if before_sendfile is not None:
        original = stream.send_all

        async def send_all_then(data) -> None:
            await original(data)
            before_sendfile()

        stream.send_all = send_all_then
    outcome: list = [None]

    async def send() -> None:
        try:
            await server.send_file_reply(stream, parts)
        except trio.BrokenResourceError as error:
            outcome[0] = error
        finally:
            left.close()  # the server closes the connection: the peer reads its end

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send)
        with trio.move_on_after(2):
            while await right.recv(1 << 20):
                pass
    right.close()
    return outcome[0]


def test_a_small_slice_of_a_file_closed_before_the_send_closes_the_connection_not_the_node(tmp_path):
    # A replica moved away by a reassignment closes its segment files while a fetch reply that points into
    # them waits to be written: the node once died of "file is closed" here.
    handle = _file(tmp_path, 3_000)
    parts = [b"header", FileSlice(handle, 0, 1_000)]
    handle.close()
    error = trio.run(_send_expecting_a_closed_connection, parts)
    assert isinstance(error, trio.BrokenResourceError) and "file is closed" in str(error.__cause__)


def test_a_large_slice_whose_file_closes_during_an_earlier_send_is_not_sent_from_a_reused_descriptor(tmp_path):
    size = server.SENDFILE_SLICE_BYTES_MIN * 2
    handle = _file(tmp_path, size)
    other = FileStorage(str(tmp_path)).open("other.log", create=True)
    other.write_at(0, b"\xff" * size)
    reopened = []

    def close_and_reuse() -> None:  # the descriptor number may now name another file
        handle.close()
        reopened.append(FileStorage(str(tmp_path)).open("other.log"))

    try:
        error = trio.run(_send_expecting_a_closed_connection, [b"header", FileSlice(handle, 0, size)],
                         close_and_reuse)
    finally:
        other.close()
        for extra in reopened:
            extra.close()
    assert isinstance(error, trio.BrokenResourceError) and "closed before it was sent" in str(error)


def test_a_slice_cut_short_since_the_response_was_built_closes_the_connection(tmp_path):
    handle = _file(tmp_path, 3_000)
    try:
        parts = [FileSlice(handle, 0, 3_000)]
        handle.truncate(1_000)
        error = trio.run(_send_expecting_a_closed_connection, parts)
    finally:
        handle.close()
    assert isinstance(error, trio.BrokenResourceError) and "short" in str(error)


@pytest.mark.parametrize("api_version", [11, 12, 13, 16, 17])
def test_a_flexible_fetch_response_of_file_slices_sends_the_bytes_of_its_in_memory_encoding(tmp_path, api_version):
    # From Fetch v12 the records field is compact (an unsigned varint of size + 1, three bytes for this size) and
    # the partition's tagged fields (here a DivergingEpoch and a CurrentLeader) follow the records on the wire:
    # the parts sent around the sendfile'd slices must be the very bytes the in-memory encoding makes.
    size = server.SENDFILE_SLICE_BYTES_MIN * 3
    handle = _file(tmp_path, size)
    try:
        data = handle.read_at(0, size)

        def response(records):
            response_class = messages.FetchResponse
            partition = response_class.PartitionData(
                partition_index=0, high_watermark=size, aborted_transactions=None, records=records,
                diverging_epoch=response_class.EpochEndOffset(epoch=3, end_offset=7),
                current_leader=response_class.LeaderIdAndEpoch(leader_id=1, leader_epoch=4))
            return response_class(throttle_time_ms=0, error_code=0, session_id=0, responses=[
                response_class.FetchableTopicResponse(topic="t", topic_id=uuid.UUID(int=5), partitions=[partition])])

        header = RequestHeader(ApiKey.FETCH, api_version, 9, "c")
        reply = encode_reply(header, response(FetchData(0, (FileSlice(handle, 0, size // 2),
                                                            FileSlice(handle, size // 2, size - size // 2)))))
        assert isinstance(reply, FileReply)
        received, sendfile_calls, _ = trio.run(_send_and_receive, reply.parts)
    finally:
        handle.close()
    assert received == codec.encode_response(header, response(data))
    assert sendfile_calls >= 1
    if api_version >= 12:
        assert bytes([(size + 1) & 0x7F | 0x80, (size + 1) >> 7 & 0x7F | 0x80, (size + 1) >> 14]) + data in received
