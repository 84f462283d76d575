"""The generated codecs (net/protocol/codegen.py) against the field walk they are generated from
(`schema.reference_codec`): the same bytes from the same message, the same message from the same bytes, and
the same refusals of truncated or corrupted bytes, on every message and version."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from net.protocol import messages
from net.protocol.schema import compiled_codec, reference_codec
from net.protocol.types import ProtocolDecodeError, Reader
from tests.net.test_protocol_strategies import message_strategy

ALL_MESSAGE_VERSIONS = [
    (cls, version)
    for registry in (messages.REQUESTS, messages.RESPONSES)
    for _, cls in sorted(registry.items())
    for version in range(cls.SPEC.valid.lowest, cls.SPEC.valid.highest + 1)
]


def _ids(case) -> str:
    cls, version = case
    return f"{cls.__name__}-v{version}"


def _outcome(codec, data: bytes):
    """The decoded message and the bytes consumed, or the error type for bytes that are not a message."""
    reader = Reader(data)
    try:
        value = codec.decode(reader)
    except ProtocolDecodeError:
        return ProtocolDecodeError
    return value, reader.pos


def _same(first, second) -> bool:
    """Equal outcomes, a float64 field that a corrupted byte made NaN included (NaN is not equal to itself; its
    repr is): the reprs show every field with its type, so equal reprs are equal outcomes."""
    return first == second or repr(first) == repr(second)


@pytest.mark.parametrize("case", ALL_MESSAGE_VERSIONS, ids=_ids)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_generated_codec_matches_the_field_walk(case, data):
    cls, version = case
    generated, reference = compiled_codec(cls, version), reference_codec(cls, version)
    assert generated.decode is not reference.decode and hasattr(generated, "source")
    message = data.draw(message_strategy(cls, version))
    out_generated, out_reference = [], []
    generated.encode(message, out_generated)
    reference.encode(message, out_reference)
    body = b"".join(bytes(chunk) for chunk in out_reference)
    assert b"".join(bytes(chunk) for chunk in out_generated) == body
    decoded = _outcome(generated, body)
    assert decoded == _outcome(reference, body)
    assert repr(decoded) == repr(_outcome(reference, body))  # bools stay bools, bytes stay bytes
    assert decoded[0] == message and decoded[1] == len(body)
    # Every truncation, and a corrupted byte, is refused (or read) the same way by both.
    for cut in range(len(body)):
        assert _same(_outcome(generated, body[:cut]), _outcome(reference, body[:cut])), f"cut at {cut}"
    if body:
        index = data.draw(st.integers(0, len(body) - 1))
        corrupted = bytearray(body)
        corrupted[index] = data.draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]))
        assert _same(_outcome(generated, bytes(corrupted)), _outcome(reference, bytes(corrupted)))


def test_a_string_that_is_not_utf8_is_a_decode_error_on_the_fast_path():
    body = messages.FindCoordinatorRequest(key="ab").encode(1)
    broken = body.replace(b"ab", b"\xff\xfe")
    for codec in (compiled_codec(messages.FindCoordinatorRequest, 1),
                  reference_codec(messages.FindCoordinatorRequest, 1)):
        with pytest.raises(ProtocolDecodeError, match="UTF-8"):
            codec.decode(Reader(broken))


def test_generated_source_reads_a_run_of_fixed_fields_in_one_unpack():
    source = compiled_codec(messages.ProduceRequest, 7).source
    assert "(v.acks, v.timeout_ms,) = unpack_" in source


def _struct_classes(cls: type) -> list[type]:
    found = [cls]
    for nested in cls._struct_classes.values():
        found += _struct_classes(nested)
    return found


def test_generated_init_gives_each_field_its_default_and_takes_keywords():
    classes = [c for registry in (messages.REQUESTS, messages.RESPONSES) for top in registry.values()
               for c in _struct_classes(top)]
    for cls in classes:
        built = cls()
        for name, make in zip(cls._names, cls._default_factories):
            expected = make()
            assert repr(getattr(built, name)) == repr(expected), (cls.__qualname__, name)
            if isinstance(expected, list):
                assert getattr(built, name) is not getattr(cls(), name), "a list default shared between instances"
    request = messages.ConsumerGroupHeartbeatRequest(group_id="g")
    assert request.group_id == "g" and request.subscribed_topic_names is None  # the spec's null default
    with pytest.raises(TypeError):
        messages.ProduceRequest(acks=1, no_such_field=2)


@pytest.mark.parametrize("version", [7, 9])
def test_strings_and_arrays_past_the_one_byte_lengths_take_the_checked_paths_with_the_same_bytes(version):
    # The generated fast paths cover compact lengths below 127; the strategies draw short values only.
    produce = messages.ProduceRequest
    request = produce(acks=1, timeout_ms=5, topic_data=[produce.TopicProduceData(
        name="t" * 200, partition_data=[produce.PartitionProduceData(index=i, records=b"x") for i in range(300)])])
    generated, reference = compiled_codec(produce, version), reference_codec(produce, version)
    out_generated, out_reference = [], []
    generated.encode(request, out_generated)
    reference.encode(request, out_reference)
    body = b"".join(bytes(chunk) for chunk in out_reference)
    assert b"".join(bytes(chunk) for chunk in out_generated) == body
    assert _outcome(generated, body) == _outcome(reference, body) == (request, len(body))
