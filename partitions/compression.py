"""Compression codecs of the record batch v2 records section.

Theory of operation: a batch's attributes bits 0-2 name the codec that compressed its records section as a
whole (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd). `compress` writes what the Java client writes, so every
Kafka client can read our batches; `decompress` accepts what the Java client, librdkafka and kafka-python
write, so we can read theirs:

- gzip: RFC 1952 members (Java's GZIPOutputStream); concatenated members are read as one stream.
- snappy: the xerial "SNAPPY" stream framing that Java's SnappyOutputStream writes: a 16-byte header
  (0x82 "SNAPPY" 0x00, version int32 = 1, compatible version int32 = 1), then blocks of int32 length +
  raw snappy, each block compressing at most 32 KiB. librdkafka writes bare raw snappy; a payload without
  the xerial magic is read as raw snappy, as Java's SnappyInputStream does.
- lz4: the LZ4 frame format with independent 64 KiB blocks and no content checksum, as Java's
  KafkaLZ4BlockOutputStream writes it (its reader refuses linked blocks).
- zstd: zstd frames as Java's ZstdOutputStream writes them, usually without the content size, so
  decompression is streaming; concatenated frames are read as one stream.

Decompression is bounded: no codec may produce more than `size_max` bytes, whatever the payload claims,
so a zip bomb costs at most about `size_max` (plus one bounded step) of memory. Every library failure is
wrapped: garbage or a truncated stream raises CorruptRecordError, output over the bound raises
RecordTooLargeError, an unknown codec id raises UnsupportedCompressionTypeError. Nothing else escapes
(a failed assert would be our own bug).
"""

from __future__ import annotations

import enum
import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from partitions.errors import CorruptRecordError, RecordTooLargeError, UnsupportedCompressionTypeError


class CompressionType(enum.IntEnum):
    """Kafka's codec ids, the attributes bits 0-2 of a record batch."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


NONE = CompressionType.NONE
GZIP = CompressionType.GZIP
SNAPPY = CompressionType.SNAPPY
LZ4 = CompressionType.LZ4
ZSTD = CompressionType.ZSTD

DECOMPRESSED_BYTES_MAX_DEFAULT = 64 * 1024 * 1024

GZIP_LEVEL = 6  # Java's GZIPOutputStream default (zlib's Z_DEFAULT_COMPRESSION)
ZSTD_LEVEL = 3  # Kafka's compression.zstd.level default
LZ4_BLOCK_BYTES_MAX = 64 * 1024  # Kafka's KafkaLZ4BlockOutputStream default block size

# xerial snappy-java stream framing (SnappyCodec / SnappyOutputStream).
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = struct.Struct(
    ">8s"  # magic: 0x82 "SNAPPY" 0x00
    "i"  # version: 1
    "i"  # minimum compatible version: 1
)
XERIAL_VERSION = 1
XERIAL_BLOCK_BYTES_MAX = 32 * 1024  # SnappyOutputStream's default block size (uncompressed bytes)
XERIAL_BLOCK_LENGTH = struct.Struct(">i")  # compressed length of the block that follows

# A zstd block of at most 128 KiB can be coded in 4 bytes (3-byte header + 1 RLE byte), so one input
# byte yields at most this many output bytes; feeding input in budget-sized steps bounds the output.
ZSTD_EXPANSION_MAX = 32 * 1024
ZSTD_INPUT_STEP_BYTES_MIN = 64
# zlib and lz4 take an output bound per call; this is the size of each bounded step.
DECOMPRESS_STEP_BYTES = 1024 * 1024


def codec_from_id(codec: int) -> CompressionType:
    """The CompressionType for a codec id. Raises UnsupportedCompressionTypeError for any other id."""
    try:
        return CompressionType(codec)
    except ValueError:
        raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec}") from None


def compress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    """`data` compressed with `codec` (bytes unchanged for NONE), in the framing the Java client writes.
    Raises UnsupportedCompressionTypeError for an unknown codec id."""
    codec = codec_from_id(codec)
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return compressor.compress(data) + compressor.flush()
    if codec == SNAPPY:
        return _xerial_snappy_compress(data)
    if codec == LZ4:
        return lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    assert codec == ZSTD, codec
    return zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=False).compress(data)


def decompress(
    codec: int, data: bytes | bytearray | memoryview, size_max: int = DECOMPRESSED_BYTES_MAX_DEFAULT
) -> bytes:
    """`data` decompressed with `codec`, at most `size_max` bytes of output.
    Raises UnsupportedCompressionTypeError (unknown codec id), RecordTooLargeError (output would exceed
    `size_max`), CorruptRecordError (garbage, truncated or trailing bytes)."""
    assert size_max >= 0, f"size_max={size_max}"
    codec = codec_from_id(codec)
    if codec == NONE:
        if len(data) > size_max:
            raise _too_large(codec, size_max)
        return bytes(data)
    decoder = _DECODERS[codec]
    try:
        return decoder(data, size_max)
    except (RecordTooLargeError, CorruptRecordError):
        raise
    except (zlib.error, cramjam.DecompressionError, zstandard.ZstdError, RuntimeError, ValueError) as error:
        # lz4 reports corrupt frames as RuntimeError; the others have their own error types.
        raise CorruptRecordError(f"{codec.name.lower()} payload corrupt: {error}") from None


def _too_large(codec: CompressionType, size_max: int) -> RecordTooLargeError:
    return RecordTooLargeError(f"{codec.name.lower()} payload decompresses to more than {size_max} bytes")


def _gzip_decompress(data: bytes | bytearray | memoryview, size_max: int) -> bytes:
    output: list[bytes] = []
    produced = 0
    pending = bytes(data)
    if not pending:
        raise CorruptRecordError("gzip payload empty")
    while pending:  # one iteration per gzip member
        decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
        while not decompressor.eof:
            chunk = decompressor.decompress(pending, min(DECOMPRESS_STEP_BYTES, size_max - produced + 1))
            pending = decompressor.unconsumed_tail
            produced += len(chunk)
            if produced > size_max:
                raise _too_large(GZIP, size_max)
            output.append(chunk)
            if not chunk and not pending and not decompressor.eof:
                raise CorruptRecordError("gzip payload truncated")
        pending = decompressor.unused_data
    return b"".join(output)


def _xerial_snappy_compress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    parts = [XERIAL_HEADER.pack(XERIAL_MAGIC, XERIAL_VERSION, XERIAL_VERSION)]
    for start in range(0, len(view), XERIAL_BLOCK_BYTES_MAX):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_BYTES_MAX]))
        parts.append(XERIAL_BLOCK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: bytes | bytearray | memoryview, size_max: int) -> bytes:
    data = bytes(data)
    if len(data) >= XERIAL_HEADER.size and data.startswith(XERIAL_MAGIC):
        # Version fields are not checked: some producers write them little-endian (kafka-python #2414).
        return _xerial_blocks_decompress(data, XERIAL_HEADER.size, size_max)
    return _raw_snappy_decompress(data, size_max, size_max)


def _xerial_blocks_decompress(data: bytes, position: int, size_max: int) -> bytes:
    output: list[bytes] = []
    produced = 0
    end = len(data)
    while position < end:
        if end - position < XERIAL_BLOCK_LENGTH.size:
            raise CorruptRecordError(f"snappy block length truncated at byte {position}")
        (block_length,) = XERIAL_BLOCK_LENGTH.unpack_from(data, position)
        position += XERIAL_BLOCK_LENGTH.size
        if block_length < 0 or position + block_length > end:
            raise CorruptRecordError(f"snappy block length {block_length} at byte {position} past the end {end}")
        block = _raw_snappy_decompress(data[position : position + block_length], size_max - produced, size_max)
        produced += len(block)
        output.append(block)
        position += block_length
    return b"".join(output)


def _raw_snappy_decompress(block: bytes, budget: int, size_max: int) -> bytes:
    # Raw snappy starts with the uncompressed length, so the bound is checked before any allocation.
    declared = cramjam.snappy.decompress_raw_len(block)
    if declared > budget:
        raise _too_large(SNAPPY, size_max)
    output = bytes(cramjam.snappy.decompress_raw(block))
    if len(output) != declared:
        raise CorruptRecordError(f"snappy block declares {declared} bytes but holds {len(output)}")
    return output


def _lz4_decompress(data: bytes | bytearray | memoryview, size_max: int) -> bytes:
    output: list[bytes] = []
    produced = 0
    pending = bytes(data)
    if not pending:
        raise CorruptRecordError("lz4 payload empty")
    while pending:  # one iteration per lz4 frame
        decompressor = lz4.frame.LZ4FrameDecompressor()
        while not decompressor.eof:
            chunk = decompressor.decompress(pending, min(DECOMPRESS_STEP_BYTES, size_max - produced + 1))
            pending = b""  # the decompressor keeps what it did not consume
            produced += len(chunk)
            if produced > size_max:
                raise _too_large(LZ4, size_max)
            output.append(chunk)
            if decompressor.needs_input and not decompressor.eof:
                raise CorruptRecordError("lz4 payload truncated")
        pending = decompressor.unused_data or b""
    return b"".join(output)


def _zstd_decompress(data: bytes | bytearray | memoryview, size_max: int) -> bytes:
    output: list[bytes] = []
    produced = 0
    view = memoryview(bytes(data))
    position = 0
    if not view:
        raise CorruptRecordError("zstd payload empty")
    decompressor = zstandard.ZstdDecompressor().decompressobj()
    while position < len(view):
        # Never feed more input than the remaining output budget could expand from.
        step = max(ZSTD_INPUT_STEP_BYTES_MIN, (size_max - produced) // ZSTD_EXPANSION_MAX)
        piece = view[position : position + step]
        chunk = decompressor.decompress(piece)
        position += len(piece)
        produced += len(chunk)
        if produced > size_max:
            raise _too_large(ZSTD, size_max)
        output.append(chunk)
        if decompressor.eof:
            # A frame ended inside this step: rewind to its end and start on the next frame.
            position -= len(decompressor.unused_data)
            if position < len(view):
                decompressor = zstandard.ZstdDecompressor().decompressobj()
    if not decompressor.eof:
        raise CorruptRecordError("zstd payload truncated")
    return b"".join(output)


_DECODERS = {
    GZIP: _gzip_decompress,
    SNAPPY: _snappy_decompress,
    LZ4: _lz4_decompress,
    ZSTD: _zstd_decompress,
}
