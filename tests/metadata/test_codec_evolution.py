"""The metadata codec across versions of a class: defaults not written, tagged fields skipped by older readers.

Two codecs stand for two releases of this code: `OLD` knows `Broker` as released, `NEW` a later `Broker` with
a plain field added (meaning an old reader must not drop) and a tagged one (information it may ignore).
"""

import dataclasses

import cbor2
import pytest
from hypothesis import given, settings

from metadata import records as r
from metadata.codec import TAGGED_KEY, Codec, tagged
from metadata.records import decode_record, encode_record
from partitions.errors import CorruptRecordError
from tests.metadata.strategies import any_record


def _classes():
    @dataclasses.dataclass(frozen=True)
    class Endpoint:
        host: str
        port: int
        note: str = tagged("")

    @dataclasses.dataclass(frozen=True)
    class Broker:
        broker_id: int
        rack: str | None = None
        version: int = dataclasses.field(default=0, kw_only=True)

    old = Broker

    @dataclasses.dataclass(frozen=True)
    class Broker:  # noqa: F811 - the same name, a later release
        broker_id: int
        rack: str | None = None
        cordoned: bool = False
        endpoint: Endpoint | None = None
        zone_hint: str = tagged("")
        labels: tuple[str, ...] = tagged(())
        version: int = dataclasses.field(default=0, kw_only=True)

    return old, Broker, Endpoint


OldBroker, NewBroker, Endpoint = _classes()
OLD = Codec([OldBroker], CorruptRecordError)
NEW = Codec([NewBroker], CorruptRecordError)


def test_fields_at_their_defaults_are_not_written():
    body = cbor2.loads(NEW.encode(NewBroker(7)))
    assert body == {"type": "Broker", "v": 0, "broker_id": 7}
    register = r.RegisterBrokerRecord(1, b"i" * 16, 5, "h", 9092, None, ("broker",))
    assert set(cbor2.loads(encode_record(register))) == {
        "type", "v", "broker_id", "incarnation_id", "broker_epoch", "host", "port", "rack", "roles"}


def test_an_older_reader_reads_a_newer_record_that_sets_nothing_new():
    assert OLD.decode(NEW.encode(NewBroker(7, rack="r1"))) == OldBroker(7, rack="r1")


def test_an_older_reader_skips_tagged_fields_and_a_newer_reader_keeps_them():
    newer = NewBroker(7, rack="r1", zone_hint="z", labels=("a", "b"))
    data = NEW.encode(newer)
    assert cbor2.loads(data)[TAGGED_KEY] == {"zone_hint": "z", "labels": ["a", "b"]}
    assert OLD.decode(data) == OldBroker(7, rack="r1")
    assert NEW.decode(data) == newer


def test_an_older_reader_refuses_a_plain_field_it_does_not_know():
    with pytest.raises(CorruptRecordError, match=r"unknown field\(s\) \['cordoned'\]"):
        OLD.decode(NEW.encode(NewBroker(7, cordoned=True)))


def test_a_newer_reader_fills_in_the_defaults_of_an_older_record():
    assert NEW.decode(OLD.encode(OldBroker(3, rack="r2"))) == NewBroker(3, rack="r2")


def test_tagged_fields_of_nested_classes():
    newer = NewBroker(1, endpoint=Endpoint("h", 1, note="n"))
    data = NEW.encode(newer)
    assert cbor2.loads(data)["endpoint"] == {"host": "h", "port": 1, TAGGED_KEY: {"note": "n"}}
    assert NEW.decode(data) == newer
    assert NEW.decode(NEW.encode(NewBroker(1, endpoint=Endpoint("h", 1)))).endpoint == Endpoint("h", 1)


def test_an_unknown_tagged_name_is_skipped_but_a_known_one_is_still_checked():
    body = {"type": "Broker", "v": 0, "broker_id": 1, TAGGED_KEY: {"from_the_future": [1, 2], "zone_hint": "z"}}
    assert NEW.decode(cbor2.dumps(body)) == NewBroker(1, zone_hint="z")
    body[TAGGED_KEY]["zone_hint"] = 5
    with pytest.raises(CorruptRecordError, match=r"Broker.zone_hint: expected a string"):
        NEW.decode(cbor2.dumps(body))


@pytest.mark.parametrize(
    "tags, fragment",
    [
        ([1, 2], "expected a map"),
        ({"rack": "r"}, "not tagged field names ['rack']"),  # a plain field never travels tagged
        ({1: "x"}, "not tagged field names ['1']"),
    ],
)
def test_a_malformed_tagged_map_is_refused(tags, fragment):
    with pytest.raises(CorruptRecordError) as info:
        NEW.decode(cbor2.dumps({"type": "Broker", "v": 0, "broker_id": 1, TAGGED_KEY: tags}))
    assert fragment in info.value.message


def test_a_tagged_field_outside_the_tagged_map_is_an_unknown_field():
    with pytest.raises(CorruptRecordError, match="unknown field"):
        NEW.decode(cbor2.dumps({"type": "Broker", "v": 0, "broker_id": 1, "zone_hint": "z"}))


def _written_in_full(value):
    """The encoding of releases before defaults were left out: every field written."""
    if dataclasses.is_dataclass(value):
        return {f.name: _written_in_full(getattr(value, f.name))
                for f in dataclasses.fields(value) if f.name != "version"}
    if isinstance(value, tuple):
        return [_written_in_full(item) for item in value]
    return value.value if hasattr(value, "value") else value


@settings(max_examples=300, deadline=None)
@given(any_record)
def test_records_written_in_full_by_earlier_releases_still_decode(record):
    body = {"type": type(record).__name__, "v": record.version, **_written_in_full(record)}
    assert decode_record(cbor2.dumps(body)) == record
