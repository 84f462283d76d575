"""The Arrow column decoder against the record codec: every field of every record, any offset window."""

from __future__ import annotations

import datetime
import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partitions.compression import GZIP, NONE, ZSTD
from partitions.batch import CRC_POSITION, compute_crc
from partitions.errors import CorruptRecordError, InvalidRecordError
from partitions.records import ABORT, COMMIT, build_batch, build_control_batch, decode_batches
from spark import columns
from spark.columns import ColumnBuilder

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
])

payloads = st.one_of(st.none(), st.binary(max_size=300))
headers = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))), max_size=3)
records = st.tuples(payloads, payloads, headers, st.integers(min_value=0, max_value=2**41))
batches = st.lists(st.tuples(st.lists(records, min_size=1, max_size=20), st.sampled_from([NONE, GZIP, ZSTD]),
                             st.booleans()), min_size=1, max_size=5)


def _fetched(spec) -> bytes:
    parts, base = [], 0
    for items, compression, log_append_time in spec:
        parts.append(build_batch([(k, v, tuple(h), t) for k, v, h, t in items], base_offset=base,
                                 compression=compression, log_append_time=log_append_time))
        base += len(items)
    return b"".join(parts)


def _expected_rows(buffer: bytes, start: int, end: int) -> list[dict]:
    rows = []
    for decoded in decode_batches(buffer):
        for record in decoded.records:
            if start <= record.offset < end:
                rows.append({"key": record.key, "value": record.value, "offset": record.offset,
                             "timestamp_ms": record.timestamp, "timestampType": int(decoded.header.is_log_append_time),
                             "headers": [{"key": k, "value": v} for k, v in record.headers]})
    return rows


def _rows(batch: pa.RecordBatch) -> list[dict]:
    rows = []
    for row in batch.to_pylist():
        assert row["topic"] == "events" and row["partition"] == 7, row
        row["timestamp_ms"] = (row.pop("timestamp") - EPOCH) // datetime.timedelta(milliseconds=1)
        del row["topic"], row["partition"]
        rows.append(row)
    return rows


def _require_compiled(compiled: bool) -> None:
    if compiled and columns._decode_columns is None:
        pytest.fail("partitions/_recordscan.c was not compiled (python3 setup.py build_ext --inplace)")


@pytest.mark.parametrize("include_headers, compiled", [(True, False), (False, True), (False, False)])
@settings(max_examples=60, deadline=None)
@given(spec=batches, window=st.tuples(st.integers(0, 100), st.integers(0, 100)))
def test_columns_match_the_record_codec_for_any_offset_window(include_headers, compiled, spec, window):
    _require_compiled(compiled)
    buffer = _fetched(spec)
    start, end = min(window), max(window)
    builder = ColumnBuilder(start, end, include_headers=include_headers, compiled=compiled)
    assert builder.compiled == compiled
    builder.add_fetched(buffer)
    schema = ARROW_SCHEMA if include_headers else ARROW_SCHEMA.remove(7)
    batch = builder.to_arrow("events", 7, schema)
    assert batch.schema == schema
    expected = _expected_rows(buffer, start, end)
    if not include_headers:
        for row in expected:
            del row["headers"]
    assert _rows(batch) == expected


def test_columns_leave_headers_out_unless_asked():
    buffer = build_batch([(b"k", b"v", (("h", b"x"),), 5)])
    builder = ColumnBuilder(0, 10, include_headers=False)
    assert builder.add_fetched(buffer) == 1
    batch = builder.to_arrow("events", 7, ARROW_SCHEMA.remove(7))
    assert batch.column("value").to_pylist() == [b"v"] and batch.num_columns == 7


def test_control_batches_are_skipped_but_advance_the_next_offset():
    buffer = build_batch([(b"a", b"1")], base_offset=0) + build_control_batch(1, 9, 0, 0, 5, base_offset=1) + \
        build_batch([(b"b", b"2")], base_offset=2)
    builder = ColumnBuilder(0, 3, include_headers=False)
    assert builder.add_fetched(buffer) == 3
    assert builder.to_arrow("events", 7, ARROW_SCHEMA.remove(7)).column("offset").to_pylist() == [0, 2]


@pytest.mark.parametrize("compiled", [True, False])
def test_aborted_transactions_are_dropped_up_to_their_abort_marker(compiled):
    # read_committed, as Kafka's consumer: the fetch lists (first_offset, producer_id) of aborted transactions
    _require_compiled(compiled)
    buffer = b"".join([
        build_batch([(b"a", b"aborted")], base_offset=0, producer_id=9, producer_epoch=0, is_transactional=True),
        build_batch([(b"b", b"committed")], base_offset=1, producer_id=10, producer_epoch=0, is_transactional=True),
        build_control_batch(ABORT, 9, 0, 0, 5, base_offset=2),
        build_control_batch(COMMIT, 10, 0, 0, 5, base_offset=3),
        build_batch([(b"c", b"next")], base_offset=4, producer_id=9, producer_epoch=0, is_transactional=True),
    ])
    builder = ColumnBuilder(0, 5, include_headers=False, compiled=compiled)
    assert builder.add_fetched(buffer, aborted=((0, 9),)) == 5
    batch = builder.to_arrow("events", 7, ARROW_SCHEMA.remove(7))
    assert batch.column("offset").to_pylist() == [1, 4]
    assert batch.column("value").to_pylist() == [b"committed", b"next"]


def test_a_partial_batch_at_the_end_of_a_fetch_is_left_for_the_next_fetch():
    buffer = build_batch([(b"a", b"1")] * 3, base_offset=0) + build_batch([(b"b", b"2")] * 3, base_offset=3)
    builder = ColumnBuilder(0, 6, include_headers=False)
    assert builder.add_fetched(buffer[:-5]) == 3
    assert builder.rows == 3


def test_a_batch_with_a_bad_crc_is_refused():
    buffer = bytearray(build_batch([(b"a", b"value")]))
    buffer[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        ColumnBuilder(0, 1, include_headers=False).add_fetched(bytes(buffer))


@pytest.mark.parametrize("compiled", [True, False])
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_a_mangled_records_section_raises_only_corrupt_record_errors(compiled, data):
    _require_compiled(compiled)
    items = [(b"k%d" % i, b"v" * i, (), 1000 + i) for i in range(data.draw(st.integers(1, 12)))]
    batch = bytearray(build_batch(items))
    for _ in range(data.draw(st.integers(1, 4))):  # change bytes past the header, then fix the CRC
        position = data.draw(st.integers(61, len(batch) - 1))
        batch[position] = data.draw(st.integers(0, 255))
    struct.pack_into(">I", batch, CRC_POSITION, compute_crc(batch))
    builder = ColumnBuilder(0, 100, include_headers=False, compiled=compiled)
    try:
        builder.add_fetched(bytes(batch))
    except (CorruptRecordError, InvalidRecordError):
        return
    assert builder.to_arrow("events", 7, ARROW_SCHEMA.remove(7)).num_rows <= len(items)


def test_a_varint_past_32_bits_is_the_same_clear_error_on_both_record_paths():
    # Five bytes carry 35 bits: 0xff 0xff 0xff 0xff 0x7f is a valid encoding of a value no int32 holds.
    from partitions.errors import CorruptRecordError
    from partitions.records import decode_varint
    from spark import columns

    hostile = b"\xff\xff\xff\xff\x7f"
    with pytest.raises(CorruptRecordError, match="overflows 32 bits"):
        decode_varint(hostile)
    with pytest.raises(CorruptRecordError, match="overflows 32 bits"):
        columns.read_varint(hostile, 0, columns.VARINT_BYTES_MAX)


@pytest.mark.parametrize("compiled", [True, False])
@given(st.lists(records, min_size=1, max_size=30), st.binary(min_size=1, max_size=8))
@settings(max_examples=100, deadline=None)
def test_stray_bytes_after_the_records_are_refused_by_both_decoders(compiled, items, tail):
    """partitions/_recordscan.c decode_columns and the Python loop alike: a batch whose records section has
    bytes after its records_count records is corrupt. The compiled one also leaves its columns as they were."""
    _require_compiled(compiled)
    stray = bytearray(build_batch([(k, v, tuple(h), t) for k, v, h, t in items], base_offset=1) + tail)
    struct.pack_into(">i", stray, 8, len(stray) - 12)  # batch_length: everything after itself
    struct.pack_into(">I", stray, CRC_POSITION, compute_crc(stray))
    builder = ColumnBuilder(0, 100, include_headers=False, compiled=compiled)
    assert builder.add_fetched(build_batch([(b"k", b"v", (), 7)], base_offset=0)) == 1
    with pytest.raises(CorruptRecordError):
        builder.add_fetched(bytes(stray))
    if not compiled:
        return  # the Python loop appends as it goes; the read fails as a whole either way
    batch = builder.to_arrow("events", 7, ARROW_SCHEMA.remove(7))
    assert _rows(batch) == [{"key": b"k", "value": b"v", "offset": 0, "timestamp_ms": 7, "timestampType": 0}]
