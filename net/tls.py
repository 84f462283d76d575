"""TLS at the edge: reading every TLS record that has already arrived in one step.

`trio.SSLStream.receive_some` returns the plaintext of at most one TLS record (16 KiB) per call, and each
call is a trio round trip (locks, a checkpoint): a 1 MiB produce request took 64 of them, which made SASL_SSL
produce a third of plaintext. `receive_available(stream, first)` returns `first` (the plaintext of one
`receive_some`) followed by the plaintext of every record already sitting in the stream's incoming buffer,
decrypted synchronously. It reads trio's SSLStream internals (`_ssl_object`, `_incoming`), checked once at
import; without them it only returns `first`, which is correct and slower. Only decrypted bytes are taken:
anything the TLS layer wants to send in answer (an alert, a key update) waits in the outgoing buffer until
the stream's next send or receive flushes it, as trio's own calls do.
"""

from __future__ import annotations

import ssl

import trio

_HAS_INTERNALS = all(name in trio.SSLStream.__init__.__code__.co_names for name in ("_ssl_object", "_incoming"))


def receive_available(stream: object, first: bytes | bytearray, limit: int) -> bytes | bytearray:
    """`first` and the plaintext of the TLS records already received, up to about `limit` bytes."""
    if not _HAS_INTERNALS or not isinstance(stream, trio.SSLStream) or not first:
        return first
    ssl_object, incoming = stream._ssl_object, stream._incoming
    data = bytearray(first)
    while len(data) < limit and (incoming.pending or ssl_object.pending()):
        try:
            chunk = ssl_object.read(limit - len(data))
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            break
        if not chunk:
            break
        data += chunk
    return data
