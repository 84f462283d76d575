"""Kafka's LogValidator rules that a leader applies on produce (kafka.log.LogValidator)."""

import pytest

from partitions.errors import ErrorCode, InvalidRecordError
from partitions.records import build_batch
from tests.partitions.logtools import open_log


def test_a_compacted_topic_refuses_a_batch_with_a_keyless_record_and_names_it():  # KIP-467 record errors
    log = open_log(cleanup_policy=("compact",))
    batch = build_batch([(b"k1", b"a"), (None, b"b"), (b"k3", b"c"), (None, b"d")], base_timestamp=1_000)
    with pytest.raises(InvalidRecordError) as refused:
        log.append_as_leader(bytearray(batch), 0, 1_000)
    assert refused.value.code == ErrorCode.INVALID_RECORD
    assert [index for index, _ in refused.value.record_errors] == [1, 3]
    assert "Compacted topic cannot accept message without key" in refused.value.message
    assert log.log_end_offset == 0  # nothing of the batch was appended


def test_keyed_records_to_a_compacted_topic_and_keyless_ones_elsewhere_are_appended():
    compacted = open_log(cleanup_policy=("compact",))
    compacted.append_as_leader(bytearray(build_batch([(b"k", b"v")], base_timestamp=1_000)), 0, 1_000)
    assert compacted.log_end_offset == 1
    deleting = open_log()
    deleting.append_as_leader(bytearray(build_batch([(None, b"v")], base_timestamp=1_000)), 0, 1_000)
    assert deleting.log_end_offset == 1


# ---- the record walk (partitions/validation.py): every record of a client's batch, as Kafka's LogValidator


import struct

from hypothesis import given, settings, strategies as st

from partitions import validation
from partitions.batch import CRC_POSITION, compute_crc
from partitions.compression import ZSTD, compress
from partitions.errors import CorruptRecordError, InvalidTimestampError
from partitions.records import HEADER_SIZE, Record, encode_varint

SCANNERS = [validation.scan_records_python] + ([validation.scan_records] if validation.COMPILED else [])
LAST_OFFSET_DELTA_AT, RECORDS_COUNT_AT = 23, 57


def resealed(batch: bytes, section: bytes | None = None, count: int | None = None) -> bytearray:
    """`batch` with its records section and/or records_count (and last_offset_delta) replaced, CRC recomputed:
    what a buggy or hostile client could send that passes every header check."""
    out = bytearray(batch[:HEADER_SIZE] + (batch[HEADER_SIZE:] if section is None else section))
    struct.pack_into(">i", out, 8, len(out) - 12)
    if count is not None:
        struct.pack_into(">i", out, LAST_OFFSET_DELTA_AT, count - 1)
        struct.pack_into(">i", out, RECORDS_COUNT_AT, count)
    struct.pack_into(">I", out, CRC_POSITION, compute_crc(out))
    return out


def test_the_compiled_record_walk_was_built():
    # setup.py builds it as an optional extension: without it every produce walks its records in Python
    assert validation.COMPILED, "partitions/_recordscan.c was not compiled (no C compiler at install time?)"


@pytest.mark.parametrize("scan", SCANNERS)
def test_a_well_formed_section_gives_its_timestamp_spread_and_keyless_records(scan):
    batch = build_batch([Record(0, 5_000, b"k", b"v", ()), Record(1, 4_000, None, b"v", (("h", None),)),
                         Record(2, 9_000, b"k", None, (("h", b"x"),))], base_timestamp=5_000)
    assert scan(batch[HEADER_SIZE:], 3, True) == (-1_000, 4_000, [1])
    assert scan(batch[HEADER_SIZE:], 3, False)[2] is None


@pytest.mark.parametrize("scan", SCANNERS)
def test_a_section_is_refused_when_records_count_disagrees_with_its_records(scan):
    section = build_batch([(b"k", b"v")] * 3)[HEADER_SIZE:]
    with pytest.raises(ValueError, match="missing"):
        scan(section, 4, False)
    with pytest.raises(ValueError, match="after the last"):
        scan(section, 2, False)


@pytest.mark.parametrize("scan", SCANNERS)
def test_non_consecutive_offset_deltas_are_refused(scan):
    section = build_batch([Record(0, 1, b"k", b"v", ()), Record(2, 1, b"k", b"v", ())], base_timestamp=1)[HEADER_SIZE:]
    with pytest.raises(ValueError, match="offset delta 2, expected 1"):
        scan(section, 2, False)


@pytest.mark.parametrize("scan", SCANNERS)
@pytest.mark.parametrize("corrupt", ["length-past-end", "key-past-record", "negative-header-key", "fields-short"])
def test_malformed_records_are_refused(scan, corrupt):
    section = bytearray(build_batch([(b"key", b"value", [("h", b"v")])], base_timestamp=1)[HEADER_SIZE:])
    if corrupt == "length-past-end":
        section[0] = encode_varint(len(section))[0]
    elif corrupt == "key-past-record":
        section[4] = encode_varint(60)[0]  # length, attributes, timestamp, offset delta, then the key length
    elif corrupt == "negative-header-key":
        section[-5] = encode_varint(-2)[0]  # header count 1, then the header key's length
    else:
        section[0] = encode_varint(len(section) - 2)[0]  # a record one byte shorter than its fields
        section = section[:-1]
    with pytest.raises(ValueError):
        scan(bytes(section), 1, False)


@settings(max_examples=300, deadline=None)
@given(records=st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=20)), st.binary(max_size=300),
                                  st.integers(-10**6, 10**6)), min_size=1, max_size=20),
       flip=st.integers(0, 10_000), value=st.integers(0, 255))
def test_both_walks_agree_on_any_section_and_any_one_byte_change(records, flip, value):
    section = bytearray(build_batch([(key, val, [], 10**9 + ts) for key, val, ts in records])[HEADER_SIZE:])
    section[flip % len(section)] = value
    outcomes = []
    for scan in SCANNERS:
        try:
            outcomes.append(scan(bytes(section), len(records), True))
        except ValueError:
            outcomes.append("refused")
    assert len(set(map(repr, outcomes))) == 1, outcomes


@pytest.mark.parametrize("count", [2, 4])
def test_the_log_refuses_a_batch_whose_count_disagrees_with_its_records_and_appends_nothing(count):
    log = open_log()
    log.append_as_leader(bytearray(build_batch([(b"k", b"before")], base_timestamp=1_000)), 0, 1_000)
    batch = resealed(build_batch([(b"k", b"v")] * 3, base_timestamp=1_000), count=count)
    with pytest.raises(InvalidRecordError, match="records_count"):
        log.append_as_leader(batch, 0, 1_000)
    assert log.log_end_offset == 1


def test_the_log_refuses_non_consecutive_relative_offsets():
    log = open_log()
    gapped = build_batch([Record(0, 1_000, b"k", b"v", ()), Record(1, 1_000, b"k", b"v", ()),
                          Record(5, 1_000, b"k", b"v", ())], base_timestamp=1_000)
    batch = resealed(gapped, count=3)  # the header agrees with itself (count 3, last delta 2)
    with pytest.raises(InvalidRecordError, match="consecutive") as refused:
        log.append_as_leader(batch, 0, 1_000)
    assert refused.value.code == ErrorCode.INVALID_RECORD
    assert log.log_end_offset == 0


def test_a_compressed_batch_of_garbage_is_corrupt_and_one_of_bad_records_invalid():
    log = open_log()
    batch = build_batch([(b"k", b"v")] * 3, base_timestamp=1_000, compression=ZSTD)
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(resealed(batch, section=b"\x28\xb5\x2f\xfd" + b"garbage" * 10), 0, 1_000)
    two_records = build_batch([(b"k", b"v")] * 2, base_timestamp=1_000)[HEADER_SIZE:]
    with pytest.raises(InvalidRecordError, match="missing"):
        log.append_as_leader(resealed(batch, section=compress(ZSTD, two_records)), 0, 1_000)
    log.append_as_leader(bytearray(batch), 0, 1_000)  # the untouched batch is fine
    assert log.log_end_offset == 3


def test_each_records_timestamp_is_checked_not_only_the_header():
    log = open_log(message_timestamp_before_max_ms=60_000)
    now = 10_000_000
    batch = bytearray(build_batch([(b"k", b"v", [], now), (b"k", b"v", [], now - 3_600_000), (b"k", b"v", [], now)]))
    # the header claims the first record's timestamp for both ends; the middle record is an hour old
    struct.pack_into(">q", batch, 35, now)
    struct.pack_into(">I", batch, CRC_POSITION, compute_crc(batch))
    with pytest.raises(InvalidTimestampError, match="too far before"):
        log.append_as_leader(batch, 0, now)
    assert log.log_end_offset == 0
    log.append_as_leader(bytearray(build_batch([(b"k", b"v")])), 0, now)  # no timestamp (-1) is not checked
    assert log.log_end_offset == 1


def test_an_idempotent_batch_without_a_sequence_is_refused():
    log = open_log()
    batch = bytearray(build_batch([(b"k", b"v")], base_timestamp=1_000, producer_id=7, producer_epoch=0))
    with pytest.raises(InvalidRecordError, match="invalid sequence number -1"):
        log.append_as_leader(batch, 0, 1_000)
