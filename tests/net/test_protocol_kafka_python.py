"""Cross-check against encoders no one here wrote: kafka-python 3.0.12's protocol classes.

Two independent implementations are used:
  * `kafka.protocol.*` (kafka-python's JSON-schema-driven classes), for every api/version both codecs implement;
  * `kafka.protocol.old.*` (kafka-python's older hand-written struct schemas), for every non-flexible version it
    has: these were written from the protocol guide, independently of the JSON specs our schemas mirror.

For each case a hypothesis-drawn message is encoded by both sides: the bytes must be identical, each side must
decode the other's bytes to the same field values. Whole frames (headers, length prefix) are compared too.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from net.protocol import codec, messages
from net.protocol.codec import RequestHeader
from tests.net.test_protocol_strategies import (
    all_api_versions,
    compiled_codec_for,
    in_version_dict,
    message_strategy,
)

kafka_protocol = pytest.importorskip("kafka.protocol.api_message")


def _kafka_python_classes() -> dict[tuple[int, str], type]:
    for package in ("kafka.protocol.admin", "kafka.protocol.consumer", "kafka.protocol.metadata", "kafka.protocol.producer"):
        importlib.import_module(package)
        for module in pkgutil.iter_modules(importlib.import_module(package).__path__):
            importlib.import_module(f"{package}.{module.name}")
    found = {}
    pending = [kafka_protocol.ApiMessage]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls is not kafka_protocol.ApiMessage and getattr(cls, "_class_version", None) is None:
            found[(cls.API_KEY, cls.type)] = cls
    return found


def _old_classes() -> dict[str, type]:
    package = importlib.import_module("kafka.protocol.old")
    found = {}
    for module in pkgutil.iter_modules(package.__path__):
        for name, value in vars(importlib.import_module(f"kafka.protocol.old.{module.name}")).items():
            if isinstance(value, type) and "_v" in name:
                found[name] = value
    return found


KAFKA_PYTHON = _kafka_python_classes()
OLD = _old_classes()
# Old structs that disagree with the protocol guide, left out (their JSON-schema classes are still compared):
# DescribeLogDirsRequest_v0 declares each topic's `partitions` as one int32 where the guide has an array.
OLD_WRONG = {"DescribeLogDirsRequest_v0"}


def _ours(api_key: int, kind: str) -> type:
    return (messages.REQUESTS if kind == "request" else messages.RESPONSES)[api_key]


def _new_cases() -> list[tuple[int, int, str]]:
    cases = []
    for api_key, version in all_api_versions():
        for kind in ("request", "response"):
            theirs = KAFKA_PYTHON.get((api_key, kind))
            if theirs is not None and version <= theirs.max_version:
                cases.append((api_key, version, kind))
    return cases


def _old_cases() -> list[tuple[int, int, str]]:
    cases = []
    for api_key, version in all_api_versions():
        for kind in ("request", "response"):
            ours = _ours(api_key, kind)
            name = f"{ours.__name__}_v{version}"
            if version not in ours.SPEC.flexible and name in OLD and name not in OLD_WRONG:
                cases.append((api_key, version, kind))
    return cases


def _id(case: tuple[int, int, str]) -> str:
    api_key, version, kind = case
    return f"{codec.ApiKey(api_key).name}-{kind}-v{version}"


# Conversions between our messages and kafka-python's data containers.

# kafka-python patches a few JSON fields (json_patch): authorized-operations int32 fields become "bitfield"
# (a set of bit indexes, None for Kafka's -2^31 "not provided"), some renamed to `authorized_operations`.
THEIR_NAMES = {
    ("MetadataResponse", "cluster_authorized_operations"): "authorized_operations",
    ("MetadataResponse.MetadataResponseTopic", "topic_authorized_operations"): "authorized_operations",
    ("DescribeClusterResponse", "cluster_authorized_operations"): "authorized_operations",
}


def _their_name(ours: type, name: str) -> str:
    return THEIR_NAMES.get((ours.__qualname__, name), name)


def _is_bitfield(theirs: type, their_name: str) -> bool:
    return theirs._struct.fields[their_name].type_str == "bitfield"


def _int32_to_bitfield(value: int) -> set[int] | None:
    bits = {index for index in range(32) if (value & 0xFFFFFFFF) >> index & 1}
    return None if bits == {31} else bits


def _bitfield_to_int32(bits: set[int] | None) -> int:
    unsigned = sum(1 << index for index in ({31} if bits is None else bits))
    return unsigned - (1 << 32) if unsigned >= 1 << 31 else unsigned


def _to_kafka_python(theirs: type, ours: type, value: Any, version: int) -> Any:
    values = {}
    # kafka-python writes a tagged struct it is given even at its default (FetchRequest v15's ReplicaState);
    # Kafka's generated code, and ours, leave a tagged field at its default off the wire: give it only the others.
    at_default = {name for _, name, _, _, make_default in compiled_codec_for(ours, version).tagged
                  if getattr(value, name) == make_default()}
    for name, field_value in in_version_dict(ours, value, version).items():
        if name in at_default:
            continue
        their_name = _their_name(ours, name)
        if _is_bitfield(theirs, their_name):
            values[their_name] = _int32_to_bitfield(field_value)
            continue
        values[their_name] = _to_kafka_python_value(theirs, ours, name, getattr(value, name), field_value, version)
    return theirs(version=version, **values)


def _from_kafka_python_dict(theirs: type, ours: type, their_dict: dict) -> dict:
    """kafka-python's to_dict(json=False) with our field names and int32 authorized operations."""
    result = {}
    for name, struct_class in [(spec.name, ours._struct_classes.get(spec.name)) for spec in ours._fields]:
        their_name = _their_name(ours, name)
        if their_name not in their_dict:
            continue
        value = their_dict[their_name]
        if _is_bitfield(theirs, their_name):
            value = _bitfield_to_int32(value)
        elif struct_class is not None and value is not None:
            data_class = theirs._struct.fields[their_name].data_class
            if isinstance(value, list):
                value = [_from_kafka_python_dict(data_class, struct_class, item) for item in value]
            else:
                value = _from_kafka_python_dict(data_class, struct_class, value)
        result[name] = value
    return result


def _to_kafka_python_value(theirs, ours, name, raw, plain, version):
    struct_class = ours._struct_classes.get(name)
    if struct_class is None or raw is None:
        return plain
    data_class = theirs._struct.fields[_their_name(ours, name)].data_class
    if isinstance(raw, list):
        return [_to_kafka_python(data_class, struct_class, item, version) for item in raw]
    return _to_kafka_python(data_class, struct_class, raw, version)


def _to_wire_tuple(ours: type, value: Any, version: int, their_schema: Any) -> tuple:
    """Field values in wire order, nested structs as tuples: the shape kafka-python's old structs use.

    Their schemas group fields differently in places, with the same wire bytes: an array of a primitive where
    ours has an array of one-field structs (MetadataRequest v0 topics), an inline struct around consecutive
    fields of ours (CreatePartitionsRequest v0-1 new_partitions), a BitField for an int32 bit set.
    """
    ours_in_order = iter(
        (name, getattr(value, name), ours._struct_classes.get(name))
        for name, _, _ in compiled_codec_for(ours, version).plain
    )
    result = _consume(ours_in_order, version, their_schema)
    assert next(ours_in_order, None) is None, f"{ours.__qualname__} has more fields than {their_schema.names}"
    return result


def _consume(ours_in_order, version: int, their_schema: Any) -> tuple:
    result = []
    for their_type in their_schema.fields:
        if hasattr(their_type, "names"):  # an inline struct of theirs spanning several of our fields
            result.append(_consume(ours_in_order, version, their_type))
            continue
        _, field_value, struct_class = next(ours_in_order)
        if struct_class is not None and field_value is not None:
            element = their_type.array_of if isinstance(field_value, list) else their_type
            convert = _wire_converter(struct_class, version, element)
            field_value = [convert(item) for item in field_value] if isinstance(field_value, list) else convert(field_value)
        elif getattr(their_type, "__name__", "") == "BitField":
            field_value = _int32_to_bitfield(field_value)
        elif isinstance(field_value, memoryview):
            field_value = bytes(field_value)
        result.append(field_value)
    return tuple(result)


def _wire_converter(struct_class: type, version: int, their_element: Any):
    if hasattr(their_element, "names"):
        return lambda item: _to_wire_tuple(struct_class, item, version, their_element)
    (only_name, _, _), = compiled_codec_for(struct_class, version).plain
    return lambda item: getattr(item, only_name)


def _old_struct_as_tuple(value: Any) -> Any:
    if hasattr(value, "SCHEMA"):
        return tuple(_old_struct_as_tuple(getattr(value, name)) for name in value.SCHEMA.names)
    if isinstance(value, (list, tuple)):
        return type(value)(_old_struct_as_tuple(item) for item in value)
    return value


@pytest.mark.parametrize("case", _new_cases(), ids=_id)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_bodies_match_kafka_python_byte_for_byte_both_ways(case, data):
    api_key, version, kind = case
    ours, theirs = _ours(api_key, kind), KAFKA_PYTHON[(api_key, kind)]
    message = data.draw(message_strategy(ours, version))
    our_bytes = message.encode(version)
    their_message = _to_kafka_python(theirs, ours, message, version)
    their_bytes = bytes(their_message.encode(version=version))
    assert our_bytes == their_bytes
    assert ours.decode(their_bytes, version, strict=True) == message
    if api_key == codec.ApiKey.API_VERSIONS and kind == "response" and message.error_code != 0:
        return  # kafka-python then decodes as v0 (its KIP-511 fallback); covered by the golden-bytes tests
    decoded_by_them = theirs.decode(our_bytes, version=version)
    assert _from_kafka_python_dict(theirs, ours, decoded_by_them.to_dict(json=False)) == in_version_dict(
        ours, message, version
    )


@pytest.mark.parametrize("case", _old_cases(), ids=_id)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_bodies_match_kafka_python_hand_written_structs(case, data):
    api_key, version, kind = case
    ours = _ours(api_key, kind)
    theirs = OLD[f"{ours.__name__}_v{version}"]
    message = data.draw(message_strategy(ours, version))
    wire = _to_wire_tuple(ours, message, version, theirs.SCHEMA)
    our_bytes = message.encode(version)
    their_bytes = bytes(theirs(*wire).encode())
    assert our_bytes == their_bytes
    assert ours.decode(their_bytes, version, strict=True) == message
    if api_key == codec.ApiKey.API_VERSIONS and kind == "response" and message.error_code != 0:
        return  # kafka-python then decodes as v0 (its KIP-511 fallback); covered by the golden-bytes tests
    assert _old_struct_as_tuple(theirs.decode(our_bytes)) == _old_struct_as_tuple(wire)


def test_old_struct_cross_check_covers_the_removed_kafka_4_versions():
    covered = {(api_key, version) for api_key, version, _ in _old_cases()}
    # Versions Kafka 4.0 dropped from its JSON specs are checked against the hand-written structs.
    assert {(19, 0), (19, 1), (20, 0), (23, 0), (23, 1), (32, 0)} <= covered


# kafka-python has no class for these (UnregisterBroker is an operator's API: kafka-cluster.sh; kafka-python
# has no KIP-848 consumer and pushes no telemetry); their bytes are pinned in tests/net/test_protocol_golden.py
# instead.
NOT_IN_KAFKA_PYTHON = {codec.ApiKey.UNREGISTER_BROKER, codec.ApiKey.CONSUMER_GROUP_HEARTBEAT,
                       codec.ApiKey.CONSUMER_GROUP_DESCRIBE, codec.ApiKey.GET_TELEMETRY_SUBSCRIPTIONS,
                       codec.ApiKey.PUSH_TELEMETRY}
CROSS_CHECKED = sorted(set(codec.SUPPORTED) - NOT_IN_KAFKA_PYTHON)


def test_only_the_listed_apis_lack_a_kafka_python_cross_check():
    assert {api_key for api_key in codec.SUPPORTED if (api_key, "request") not in KAFKA_PYTHON} == NOT_IN_KAFKA_PYTHON


@pytest.mark.parametrize("api_key", CROSS_CHECKED, ids=lambda key: codec.ApiKey(key).name)
def test_request_frames_match_kafka_python_including_the_header(api_key):
    lowest, highest = codec.SUPPORTED[api_key]
    theirs = KAFKA_PYTHON[(api_key, "request")]
    for version in range(lowest, min(highest, theirs.max_version) + 1):
        ours = messages.REQUESTS[api_key]()
        their_message = _to_kafka_python(theirs, type(ours), ours, version)
        their_message.with_header(correlation_id=77, client_id="cross-check")
        their_frame = bytes(their_message.encode(version=version, header=True, framed=True))
        our_frame = codec.encode_request(RequestHeader(api_key, version, 77, "cross-check"), ours)
        assert our_frame == their_frame, f"v{version}"
        header, decoded = codec.decode_request(their_frame[4:], strict=True)
        assert header == RequestHeader(api_key, version, 77, "cross-check") and decoded == ours


@pytest.mark.parametrize("api_key", CROSS_CHECKED, ids=lambda key: codec.ApiKey(key).name)
def test_response_frames_decode_in_kafka_python_including_the_header(api_key):
    lowest, highest = codec.SUPPORTED[api_key]
    theirs = KAFKA_PYTHON[(api_key, "response")]
    for version in range(lowest, min(highest, theirs.max_version) + 1):
        ours = messages.RESPONSES[api_key]()
        frame = codec.encode_response(RequestHeader(api_key, version, 4242, "c"), ours)
        decoded = theirs.decode(frame, version=version, header=True, framed=True)
        assert decoded.header.correlation_id == 4242, f"v{version}"
        their_dict = _from_kafka_python_dict(theirs, type(ours), decoded.to_dict(json=False))
        assert their_dict == in_version_dict(type(ours), ours, version)
