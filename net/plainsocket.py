"""Reads and writes on a plaintext TCP socket's descriptor, for the hot paths of the node's connections.

trio's SocketStream wraps every send and receive in a scheduler checkpoint, a context manager and a
conflict check, and receive_some(n) allocates n bytes whatever arrives. On a loopback connection carrying
small requests that was most of a request's cost in the node, so the Kafka listener (net/server.py) and the
node's broker-to-broker connections (replica fetchers, the outbox) call the descriptor directly: a read
that finds bytes returns them without a checkpoint, a write that the socket takes whole returns at once, and
only a read with nothing to read or a write to a full socket waits (trio.lowlevel.wait_readable/_writable).
The trio stream still owns the socket: it closes it, and TLS connections use it alone.
"""

from __future__ import annotations

import os

import trio

# Asked of a stream per receive (a TLS stream, a client's connection). A larger request costs an allocation
# of its size whatever arrives, and above glibc's default mmap threshold (128 KiB) that is a mmap and munmap
# per read: 1 MiB made every read of a small message ~15 us dearer. A large one takes a few more reads.
RECEIVE_BYTES_MAX = 64 * 1024


def write_now(fd: int, data: bytes | memoryview) -> bytes | memoryview:
    """Write what the socket takes at once; the rest (empty when all was written). Raises
    trio.BrokenResourceError when the connection is gone."""
    try:
        written = os.write(fd, data)
    except BlockingIOError:
        return data
    except OSError as error:
        raise trio.BrokenResourceError(f"send: {error}") from error
    return data[written:] if written < len(data) else b""


async def send_all(fd: int, data: bytes | memoryview) -> None:
    """Write all of `data`, waiting while the socket's buffer is full. Raises trio.BrokenResourceError."""
    while data := write_now(fd, data):
        await trio.lowlevel.wait_writable(fd)


async def read_into(fd: int, buffer: memoryview) -> tuple[int, bool]:
    """(bytes read into `buffer`, whether it waited for them); 0 bytes at the end of the stream. Raises
    trio.BrokenResourceError."""
    waited = False
    while True:
        try:
            return os.readv(fd, [buffer]), waited
        except BlockingIOError:
            await trio.lowlevel.wait_readable(fd)
            waited = True
        except OSError as error:
            raise trio.BrokenResourceError(f"receive: {error}") from error


async def receive_some(fd: int, size_max: int) -> bytes:
    """Up to `size_max` bytes, waiting for the first; b"" at the end of the stream. Raises
    trio.BrokenResourceError."""
    while True:
        try:
            return os.read(fd, size_max)
        except BlockingIOError:
            await trio.lowlevel.wait_readable(fd)
        except OSError as error:
            raise trio.BrokenResourceError(f"receive: {error}") from error


def descriptor(stream: object) -> int | None:
    """The socket descriptor of a plaintext trio.SocketStream; None for anything else (TLS)."""
    return stream.socket.fileno() if isinstance(stream, trio.SocketStream) else None
