"""send_file_reply over a real socket pair: a response's buffers and small file slices leave in one send (no
sendfile for them), slices of SENDFILE_SLICE_BYTES_MIN or more go by os.sendfile, and the peer receives the
exact bytes in order either way."""

from __future__ import annotations

import os

import trio

from net import server
from net.filestorage import FileStorage
from partitions.log import FileSlice


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
