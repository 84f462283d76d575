"""Interop with kafka-python 3.0.12's record batch v2 code (kafka.record.default_records): batches it builds
decode with ours, and batches we build pass its reader, CRC check included."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_python_codec
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from partitions.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from partitions.records import COMMIT, Record, build_batch, build_control_batch, decode_batch, iter_records

# kafka-python reads snappy only with python-snappy installed; the other codecs use our own dependencies.
KAFKA_PYTHON_CODECS = [NONE, GZIP, LZ4, ZSTD] + ([SNAPPY] if kafka_python_codec.has_snappy() else [])

payloads = st.none() | st.binary(max_size=200)
header_lists = st.lists(st.tuples(st.text(max_size=10), payloads), max_size=3)
timestamps = st.integers(0, 2**41)


def kafka_python_batch(items, codec, producer=(-1, -1, -1), transactional=False):
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=transactional, producer_id=producer[0],
        producer_epoch=producer[1], base_sequence=producer[2], batch_size=1 << 30,
    )  # fmt: skip
    for offset, (key, value, headers, timestamp) in enumerate(items):
        assert builder.append(offset, timestamp, key, value, list(headers)) is not None
    return bytes(builder.build())


@settings(max_examples=120, deadline=None)
@given(
    st.lists(st.tuples(payloads, payloads, header_lists, timestamps), min_size=1, max_size=15),
    st.sampled_from(KAFKA_PYTHON_CODECS),
)
def test_batches_built_by_kafka_python_decode_with_ours(items, codec):
    decoded = decode_batch(kafka_python_batch(items, codec))
    assert [(r.key, r.value, list(r.headers), r.timestamp) for r in decoded.records] == items
    assert [r.offset for r in decoded.records] == list(range(len(items)))
    assert decoded.header.max_timestamp == max(item[3] for item in items)


@settings(max_examples=120, deadline=None)
@given(
    st.lists(st.tuples(payloads, payloads, header_lists.map(tuple), timestamps), min_size=1, max_size=15),
    st.sampled_from(KAFKA_PYTHON_CODECS),
    st.integers(0, 2**40),
)
def test_batches_we_build_pass_kafka_pythons_reader_and_crc(items, codec, base_offset):
    batch = build_batch(items, base_offset=base_offset, compression=codec)
    theirs = DefaultRecordBatch(batch)
    assert theirs.validate_crc()
    assert theirs.compression_type == codec
    records = list(theirs)
    assert [(r.key, r.value, tuple(r.headers), r.timestamp) for r in records] == items
    assert [r.offset for r in records] == list(range(base_offset, base_offset + len(items)))
    assert theirs.max_timestamp == max(item[3] for item in items)


@pytest.mark.parametrize("codec", KAFKA_PYTHON_CODECS)
def test_idempotent_transactional_batch_fields_agree_with_kafka_python(codec):
    items = [(b"k%d" % i, b"v" * i, [("h", b"x")], 1_700_000_000_000 + i) for i in range(50)]
    theirs = kafka_python_batch(items, codec, producer=(42, 3, 1000), transactional=True)
    header = decode_batch(theirs).header
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 1000)
    assert header.is_transactional and header.last_offset_delta == 49
    ours = DefaultRecordBatch(
        build_batch([tuple(i) for i in items], compression=codec, producer_id=42, producer_epoch=3,
                    base_sequence=1000, is_transactional=True)
    )  # fmt: skip
    assert ours.validate_crc()
    assert (ours.producer_id, ours.producer_epoch, ours.base_sequence) == (42, 3, 1000)
    assert ours.is_transactional and ours.last_offset_delta == 49


def test_uncompressed_batches_are_byte_identical_to_kafka_pythons():
    # kafka-python leaves base_offset and partition_leader_epoch at 0 for the broker to assign.
    items = [(b"key", b"value", [("a", b"1"), ("b", None)], 1_700_000_000_123), (None, b"", [], 1_700_000_000_100)]
    ours = build_batch([(k, v, tuple(h), t) for k, v, h, t in items], partition_leader_epoch=0)
    assert ours == kafka_python_batch(items, NONE)


def test_kafka_python_reads_our_control_batch_as_a_commit_marker():
    theirs = DefaultRecordBatch(build_control_batch(COMMIT, 7, 1, 12, 1_000, base_offset=30))
    assert theirs.validate_crc() and theirs.is_control_batch and theirs.is_transactional
    [marker] = list(theirs)
    assert marker.commit and marker.offset == 30


def test_kafka_python_memory_records_walks_our_concatenated_batches():
    data = build_batch([(b"a", b"1")], compression=GZIP) + build_batch([(b"b", b"2"), (b"c", b"3")], base_offset=1)
    memory = MemoryRecords(data)
    keys = []
    while (batch := memory.next_batch()) is not None:
        keys.extend(record.key for record in batch)
    assert keys == [b"a", b"b", b"c"] == [record.key for _, record in iter_records(data)]


def test_records_with_gapped_offsets_read_back_in_kafka_python():  # a compacted batch
    records = [Record(10, 5, b"a", b"1"), Record(13, 6, b"b", None), Record(19, 7, b"c", b"3")]
    theirs = list(DefaultRecordBatch(build_batch(records, base_offset=10)))
    assert [(r.offset, r.key, r.value) for r in theirs] == [(10, b"a", b"1"), (13, b"b", None), (19, b"c", b"3")]
