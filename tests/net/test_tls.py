"""net/tls.py: every TLS record already received is decrypted in one step, and nothing is lost or reordered."""

import os
import ssl

import pytest
import trio
import trio.testing
import trustme

from net.tls import _HAS_INTERNALS, receive_available


async def tls_pair():
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    left, right = trio.testing.memory_stream_pair()
    server = trio.SSLStream(left, server_context, server_side=True)
    client = trio.SSLStream(right, client_context, server_hostname="127.0.0.1")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.do_handshake)
        nursery.start_soon(client.do_handshake)
    return server, client


def test_the_internals_it_reads_exist_in_this_trio():
    assert _HAS_INTERNALS


@pytest.mark.trio
async def test_receive_available_returns_every_record_already_received_in_order():
    server, client = await tls_pair()
    payload = os.urandom(1 << 20)  # 64 TLS records
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.send_all, payload)
        received = bytearray()
        largest = 0
        while len(received) < len(payload):
            first = await server.receive_some(1 << 20)
            chunk = receive_available(server, first, 1 << 20)
            largest = max(largest, len(chunk))
            received += chunk
    assert bytes(received) == payload
    assert largest > 16 * 1024  # more than one record per step


@pytest.mark.trio
async def test_plain_streams_and_empty_reads_pass_through():
    left, right = trio.testing.memory_stream_pair()
    assert receive_available(left, b"abc", 100) == b"abc"
    server, client = await tls_pair()
    assert receive_available(server, b"", 100) == b""
