"""Metadata records: CBOR round trips and the allow-list decoder's refusals."""

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata import records as r
from metadata.records import decode_record, decode_record_batch, encode_record, encode_record_batch
from partitions.errors import CorruptRecordError, ErrorCode
from tests.metadata.strategies import RECORD_STRATEGIES, any_record


def test_every_record_type_has_a_strategy():
    assert set(RECORD_STRATEGIES) == set(r.RECORD_TYPES)


@settings(max_examples=300, deadline=None)
@given(any_record)
def test_record_round_trips_through_cbor(record):
    data = encode_record(record)
    decoded = decode_record(data)
    assert decoded == record
    assert type(decoded) is type(record)


@settings(max_examples=50, deadline=None)
@given(st.lists(any_record, max_size=20))
def test_record_batch_round_trips(records):
    assert decode_record_batch(encode_record_batch(records)) == records


def test_record_is_a_cbor_map_with_type_and_version():
    body = cbor2.loads(encode_record(r.TopicRecord("orders", b"\x01" * 16)))
    assert body == {"type": "TopicRecord", "v": 0, "name": "orders", "topic_id": b"\x01" * 16}


def _encoded(body):
    return cbor2.dumps(body)


@pytest.mark.parametrize(
    "body, fragment",
    [
        ({"type": "PickleRecord", "v": 0}, "unknown type"),
        ({"type": "__reduce__", "v": 0}, "unknown type"),
        ({"v": 0, "name": "x", "topic_id": b"1" * 16}, "unknown type"),
        ({"type": "TopicRecord", "v": 1, "name": "x", "topic_id": b"1" * 16}, "unsupported version"),
        ({"type": "TopicRecord", "name": "x", "topic_id": b"1" * 16}, "unsupported version"),
        ({"type": "TopicRecord", "v": 0, "name": "x"}, "missing field 'topic_id'"),
        ({"type": "TopicRecord", "v": 0, "name": 7, "topic_id": b"1" * 16}, "TopicRecord.name: expected a string"),
        ({"type": "TopicRecord", "v": 0, "name": "x", "topic_id": b"1" * 16, "extra": 1}, "unknown field"),
        ({"type": "UnregisterBrokerRecord", "v": 0, "broker_id": True, "broker_epoch": 1}, "expected an int"),
        ({"type": "UnregisterBrokerRecord", "v": 0, "broker_id": 1, "broker_epoch": 2**64}, "64 bits"),
        (
            {"type": "PartitionChangeRecord", "v": 0, "topic_id": b"1" * 16, "partition": 0, "isr": [1, "2"]},
            "isr[1]: expected an int",
        ),
        ({"type": "NoOpRecord", "v": 0, "version": 0}, "unknown field"),
    ],
)
def test_decoder_rejects_bad_records_with_a_typed_error(body, fragment):
    with pytest.raises(CorruptRecordError) as info:
        decode_record(_encoded(body))
    assert fragment in info.value.message
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("data", [b"", b"\xff", b"\x1f", cbor2.dumps([1, 2]), cbor2.dumps("TopicRecord")])
def test_decoder_rejects_bytes_that_are_not_a_record_map(data):
    with pytest.raises(CorruptRecordError):
        decode_record(data)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_decoder_never_raises_anything_but_corrupt_record_on_garbage(data):
    try:
        decode_record(data)
    except CorruptRecordError:
        pass


def test_batch_decoder_rejects_an_array_of_non_bytes():
    with pytest.raises(CorruptRecordError):
        decode_record_batch(cbor2.dumps([{"type": "NoOpRecord", "v": 0}]))


def test_encoder_refuses_objects_outside_the_allow_list():
    with pytest.raises(ValueError):
        encode_record({"type": "TopicRecord"})
