"""Compression codecs: round trips, the Java client's framings, bounded decompression, hostile payloads."""

import gzip
import struct

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_python_codec

from partitions.compression import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    XERIAL_BLOCK_BYTES_MAX,
    ZSTD,
    CompressionType,
    compress,
    decompress,
)
from partitions.errors import (
    CorruptRecordError,
    KafkaError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
)

ALL_CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
COMPRESSED_CODECS = [GZIP, SNAPPY, LZ4, ZSTD]
PAYLOAD = b"".join(b"record-%06d:" % i + bytes(range(i % 97)) for i in range(2000))


def test_codec_ids_are_kafkas_attribute_values():
    assert [int(c) for c in (NONE, GZIP, SNAPPY, LZ4, ZSTD)] == [0, 1, 2, 3, 4]
    assert CompressionType(4).name == "ZSTD"


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(ALL_CODECS), st.binary(max_size=5000) | st.just(PAYLOAD))
def test_compress_then_decompress_returns_the_data(codec, data):
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", [GZIP, LZ4, ZSTD])
def test_concatenated_streams_decompress_as_one(codec):
    assert decompress(codec, compress(codec, b"first") + compress(codec, b"second")) == b"firstsecond"


def test_snappy_writes_xerial_framing_in_32_kib_blocks_like_snappy_java():
    framed = compress(SNAPPY, PAYLOAD)
    assert framed[:16] == b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x01"
    position, blocks = 16, []
    while position < len(framed):
        (length,) = struct.unpack_from(">i", framed, position)
        blocks.append(bytes(cramjam.snappy.decompress_raw(framed[position + 4 : position + 4 + length])))
        position += 4 + length
    assert position == len(framed)
    assert all(len(block) == XERIAL_BLOCK_BYTES_MAX for block in blocks[:-1])
    assert b"".join(blocks) == PAYLOAD


def test_snappy_reads_raw_snappy_as_librdkafka_writes_it():
    assert decompress(SNAPPY, bytes(cramjam.snappy.compress_raw(PAYLOAD))) == PAYLOAD


def test_snappy_reads_xerial_header_with_little_endian_versions():  # kafka-python #2414 (redpanda)
    framed = compress(SNAPPY, b"hello snappy")
    swapped = framed[:8] + b"\x01\x00\x00\x00\x01\x00\x00\x00" + framed[16:]
    assert decompress(SNAPPY, swapped) == b"hello snappy"


def test_lz4_writes_independent_blocks_without_content_checksum_like_kafka_lz4_block_output_stream():
    framed = compress(LZ4, PAYLOAD)
    assert framed[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    flags, block_descriptor = framed[4], framed[5]
    assert flags & 0x20, "block independence flag must be set"
    assert not flags & 0x04, "no content checksum"
    assert not flags & 0x08, "no content size"
    assert (block_descriptor >> 4) & 0x07 == 4, "64 KiB maximum block size"


def test_zstd_reads_frames_without_content_size_as_java_writes_them():
    compressor = zstandard.ZstdCompressor(write_content_size=False)
    framed = compressor.compress(PAYLOAD)
    assert zstandard.get_frame_parameters(framed).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert decompress(ZSTD, framed) == PAYLOAD


def test_gzip_reads_what_the_standard_library_writes():
    assert decompress(GZIP, gzip.compress(PAYLOAD)) == PAYLOAD


@pytest.mark.parametrize("codec", [GZIP, LZ4, ZSTD])
def test_kafka_python_reads_what_we_compress(codec):
    decoders = {GZIP: kafka_python_codec.gzip_decode, LZ4: kafka_python_codec.lz4_decode}
    decoders[ZSTD] = kafka_python_codec.zstd_decode
    assert decoders[codec](compress(codec, PAYLOAD)) == PAYLOAD


@pytest.mark.parametrize("codec", [GZIP, LZ4, ZSTD])
def test_we_read_what_kafka_python_compresses(codec):
    encoders = {GZIP: kafka_python_codec.gzip_encode, LZ4: kafka_python_codec.lz4_encode}
    encoders[ZSTD] = kafka_python_codec.zstd_encode
    assert decompress(codec, encoders[codec](PAYLOAD)) == PAYLOAD


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_output_over_the_bound_raises_record_too_large(codec):
    with pytest.raises(RecordTooLargeError):
        decompress(codec, compress(codec, PAYLOAD), size_max=len(PAYLOAD) - 1)
    assert decompress(codec, compress(codec, PAYLOAD), size_max=len(PAYLOAD)) == PAYLOAD


@pytest.mark.parametrize("codec", COMPRESSED_CODECS)
def test_zip_bomb_is_refused_at_the_bound(codec):
    bomb = compress(codec, bytes(32 * 1024 * 1024))
    assert len(bomb) < 2 * 1024 * 1024
    with pytest.raises(RecordTooLargeError):
        decompress(codec, bomb, size_max=1024 * 1024)


def test_snappy_bomb_is_refused_from_its_declared_length_before_decompressing():
    # A raw snappy block that claims 2**31 bytes of output but carries none.
    claim = b"\x80\x80\x80\x80\x08" + b"\x00"
    with pytest.raises(RecordTooLargeError):
        decompress(SNAPPY, claim, size_max=1024)


@pytest.mark.parametrize("codec_id", [5, 6, 7, -1, 99])
def test_unknown_codec_id_raises_unsupported_compression_type(codec_id):
    with pytest.raises(UnsupportedCompressionTypeError):
        decompress(codec_id, b"abc")
    with pytest.raises(UnsupportedCompressionTypeError):
        compress(codec_id, b"abc")


@pytest.mark.parametrize("codec", COMPRESSED_CODECS)
def test_truncated_payload_raises_corrupt_record(codec):
    framed = compress(codec, PAYLOAD)
    for cut in (0, 1, len(framed) // 2, len(framed) - 1):
        with pytest.raises(CorruptRecordError):
            decompress(codec, framed[:cut])


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(COMPRESSED_CODECS), st.binary(max_size=200))
def test_garbage_raises_only_kafka_errors(codec, garbage):
    try:
        decompress(codec, garbage, size_max=1 << 20)
    except KafkaError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(COMPRESSED_CODECS), st.data())
def test_mutated_payload_raises_only_kafka_errors_or_decodes(codec, data):
    framed = bytearray(compress(codec, PAYLOAD[:3000]))
    position = data.draw(st.integers(0, len(framed) - 1))
    framed[position] ^= data.draw(st.integers(1, 255))
    try:
        decompress(codec, bytes(framed), size_max=1 << 20)
    except KafkaError:
        pass


def test_lz4_frame_with_content_checksum_from_other_producers_is_read():
    framed = lz4.frame.compress(PAYLOAD, content_checksum=True, block_linked=False)
    assert decompress(LZ4, framed) == PAYLOAD
