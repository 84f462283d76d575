"""Hypothesis strategies derived from the message schemas (shared by the protocol tests), and their own checks.

`message_strategy(cls, version)` draws a message whose fields present in `version` hold arbitrary legal values
(nullable fields sometimes None, tagged fields sometimes at their default) and whose other fields keep their
defaults, so `decode(encode(m)) == m` must hold exactly.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings, strategies as st

from net.protocol import messages
from net.protocol.schema import Field, compiled_codec
from net.protocol.types import INT_BOUNDS

ARRAY_ITEMS_MAX = 3
SHORT_TEXT = st.text(max_size=12)


def _primitive(kind: str) -> st.SearchStrategy:
    if kind in INT_BOUNDS:
        low, high = INT_BOUNDS[kind]
        return st.integers(low, high)
    if kind == "float64":
        return st.floats(allow_nan=False)
    if kind == "bool":
        return st.booleans()
    if kind == "uuid":
        return st.uuids()
    if kind == "string":
        return SHORT_TEXT
    if kind in ("bytes", "records"):
        return st.binary(max_size=40)
    raise AssertionError(kind)


def _field_strategy(spec: Field, owner: type, version: int) -> st.SearchStrategy:
    if spec.is_struct:
        item = struct_strategy(owner._struct_classes[spec.name], version)
    else:
        item = _primitive(spec.item_type)
    value = st.lists(item, max_size=ARRAY_ITEMS_MAX) if spec.is_array else item
    if version in spec.nullable:
        value = st.none() | value
    return value


def struct_strategy(cls: type, version: int) -> st.SearchStrategy:
    codec = compiled_codec_for(cls, version)
    present = {name for name, _, _ in codec.plain} | {name for _, name, _, _, _ in codec.tagged}
    strategies = {
        spec.name: _field_strategy(spec, cls, version) for spec in cls._fields if spec.name in present
    }
    return st.builds(lambda **values: cls(**values), **strategies)


def compiled_codec_for(cls: type, version: int):
    """The codec of a message or nested struct class in `version` (nested classes are compiled via their parent)."""
    return compiled_codec(cls, version) if hasattr(cls, "SPEC") else _nested_codecs(cls, version)


def _nested_codecs(cls: type, version: int):
    from net.protocol import schema

    codec = schema._CODECS.get((cls, version))
    assert codec is not None, f"{cls.__qualname__} v{version} was not compiled through its message"
    return codec


def message_strategy(cls: type, version: int) -> st.SearchStrategy:
    compiled_codec(cls, version)  # compiles nested struct codecs as well
    return struct_strategy(cls, version)


def all_api_versions() -> list[tuple[int, int]]:
    return [
        (api_key, version)
        for api_key, cls in sorted(messages.REQUESTS.items())
        for version in range(cls.SPEC.valid.lowest, cls.SPEC.valid.highest + 1)
    ]


def in_version_dict(cls: type, value: Any, version: int) -> dict[str, Any]:
    """The fields of `value` that exist in `version`, as plain data (for comparisons with other codecs)."""
    codec = compiled_codec_for(cls, version)
    names = [name for name, _, _ in codec.plain] + [name for _, name, _, _, _ in codec.tagged]
    return {name: _plain(cls, name, getattr(value, name), version) for name in names}


def _plain(cls: type, name: str, value: Any, version: int) -> Any:
    struct_class = cls._struct_classes.get(name)
    if struct_class is not None and value is not None:
        if isinstance(value, list):
            return [in_version_dict(struct_class, item, version) for item in value]
        return in_version_dict(struct_class, value, version)
    if isinstance(value, memoryview):
        return bytes(value)
    return value


@settings(max_examples=20, deadline=None)
@given(st.data())
def test_strategy_draws_only_fields_present_in_the_version(data):
    # ListOffsets v1 has no isolation_level (v2+): the strategy must leave it at its default.
    message = data.draw(message_strategy(messages.ListOffsetsRequest, 1))
    assert message.isolation_level == 0
    assert "isolation_level" not in in_version_dict(messages.ListOffsetsRequest, message, 1)
