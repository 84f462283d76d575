"""CBOR codec for the metadata package's frozen dataclasses, by allow-list.

Theory of operation: metadata records, controller requests and controller responses are small frozen
dataclasses whose fields are primitives (int, float, bool, str, bytes, None), homogeneous tuples of those, or
nested dataclasses. `encode` writes one CBOR map `{"type": name, "v": version, field: value, ...}`; a
nested dataclass is a plain map of its fields (the outer annotation says what it is). `decode` looks the
name up in an allow-list (never pickle), checks the version and every field against the dataclass's own
annotations, and raises the caller's typed error for anything else: unknown type, unknown or missing
field, wrong type, out-of-range integer, oversized string / bytes / tuple, or bytes that are not CBOR.

Every top-level class carries a `version: int` field whose default is the newest version this code writes
and reads; an older or equal version decodes, a newer one is refused (its fields are not known here).

Evolution, so that nodes of two versions of this code read each other's records and controller requests
during a rolling upgrade (the part of Kafka's message schemas that KIP-482's tagged fields serve):
- A field equal to its default is not written, and a missing field takes its default. So a field added with
  a default costs an older reader nothing until a writer sets it, and a writer of this code can be read by
  the older code as long as it writes only what that code knows. A field's default never changes once
  released: readers fill it in.
- A field declared with `tagged(default)` is optional information an older reader may ignore. When it is
  not its default it travels in the map under "t" (`TAGGED_KEY`) rather than beside the other fields; a
  reader skips the names there that it does not know, as Kafka's readers skip unknown tagged fields, and
  refuses an unknown name anywhere else. Every other field a new version adds carries meaning an older
  reader must not drop: the writer sets it only once every node reads it (a finalized feature level,
  metadata/features.py), or the class's version goes up and older readers refuse the record.
- Nodes from before this rule read a missing field as its default too, and refuse any "t" map; what they
  receive from this code decodes as long as no tagged field is set.

Limits are per value, so a hostile peer cannot make the decoder build an unbounded structure beyond what
cbor2 itself reads from the (already size-bounded) input.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from typing import Any

import cbor2

from partitions.errors import KafkaError

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
encoded_bytes_max = 16 * 1024 * 1024  # one record / request / response
string_chars_max = 32 * 1024  # a host name, topic name or config value is far below this
bytes_field_max = 1024  # ids (16-byte uuids) and incarnation ids
tuple_items_max = 1_000_000  # replicas, topics in a request, records in a snapshot batch

TYPE_KEY = "type"
VERSION_KEY = "v"
VERSION_FIELD = "version"
TAGGED_KEY = "t"
_TAGGED = "codec_tagged"


def tagged(default: Any) -> Any:
    """A dataclass field that travels as a tagged field: written under TAGGED_KEY when not `default`, and
    skipped by a reader that does not know it. `default` must be immutable (None, a number, a string, a
    tuple)."""
    return dataclasses.field(default=default, metadata={_TAGGED: True})


class Codec:
    """An allow-list of top-level dataclasses and the typed error raised on bad input."""

    def __init__(self, classes: typing.Iterable[type], error: type[KafkaError]) -> None:
        self._by_name: dict[str, type] = {}
        for cls in classes:
            assert dataclasses.is_dataclass(cls), f"{cls!r} is not a dataclass"
            assert VERSION_FIELD in _field_names(cls), f"{cls.__name__} lacks a version field"
            assert cls.__name__ not in self._by_name, f"duplicate type name {cls.__name__}"
            self._by_name[cls.__name__] = cls
        self._error = error

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._by_name)

    def encode(self, value: Any) -> bytes:
        """CBOR bytes for an allow-listed dataclass instance. Raises ValueError for any other object."""
        cls = type(value)
        if self._by_name.get(cls.__name__) is not cls:
            raise ValueError(f"{cls.__name__} is not in the allow-list")
        body: dict[str, Any] = {TYPE_KEY: cls.__name__, VERSION_KEY: value.version}
        body.update(_plain_fields(value))
        data = cbor2.dumps(body)
        assert len(data) <= encoded_bytes_max, f"encoded {cls.__name__} is {len(data)} bytes"
        return data

    def decode(self, data: bytes) -> Any:
        """The dataclass instance encoded in `data`.

        Raises the codec's error type (a KafkaError subclass) for anything that is not a valid encoding of an
        allow-listed type at a supported version.
        """
        if len(data) > encoded_bytes_max:
            raise self._error(f"encoded value is {len(data)} bytes, more than {encoded_bytes_max}")
        try:
            body = cbor2.loads(data)
        except Exception as exc:  # cbor2 raises several types (CBORDecodeError, ValueError, ...)
            raise self._error(f"not valid CBOR: {exc}") from None
        if not isinstance(body, dict):
            raise self._error(f"expected a CBOR map, got {type(body).__name__}")
        name = body.pop(TYPE_KEY, None)
        cls = self._by_name.get(name) if isinstance(name, str) else None
        if cls is None:
            raise self._error(f"unknown type {name!r}")
        version = body.pop(VERSION_KEY, None)
        version_max = _version_max(cls)
        if type(version) is not int or not 0 <= version <= version_max:
            raise self._error(f"{name}: unsupported version {version!r} (this code reads 0..{version_max})")
        if VERSION_FIELD in body:
            raise self._error(f"{name}: unknown field {VERSION_FIELD!r} (the version travels as {VERSION_KEY!r})")
        body[VERSION_FIELD] = version
        return _build(cls, body, name, self._error)


def _field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _version_max(cls: type) -> int:
    for field in dataclasses.fields(cls):
        if field.name == VERSION_FIELD:
            return field.default
    raise AssertionError(f"{cls.__name__} has no version field")


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    name: str
    required: bool
    default: Any  # the default value, or dataclasses.MISSING (required, or a default_factory)
    factory: Any  # the default_factory, or dataclasses.MISSING
    tagged: bool


_FIELDS: dict[type, tuple[_Field, ...]] = {}
_PLAIN_NAMES: dict[type, frozenset[str]] = {}  # the fields that are not tagged


def _fields(cls: type) -> tuple[_Field, ...]:
    fields = _FIELDS.get(cls)
    if fields is None:
        fields = tuple(
            _Field(f.name,
                   f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
                   f.default, f.default_factory, bool(f.metadata.get(_TAGGED)))
            for f in dataclasses.fields(cls))
        assert all(f.name != TAGGED_KEY for f in fields), f"{cls.__name__}: a field may not be named {TAGGED_KEY!r}"
        assert all(not f.tagged or not f.required for f in fields), f"{cls.__name__}: a tagged field needs a default"
        _FIELDS[cls] = fields
        _PLAIN_NAMES[cls] = frozenset(field.name for field in fields if not field.tagged)
    return fields


def _is_default(value: Any, field: _Field) -> bool:
    if field.required:
        return False
    default = field.default if field.factory is dataclasses.MISSING else field.factory()
    return type(value) is type(default) and value == default


def _plain_fields(value: Any) -> dict[str, Any]:
    """The fields of a dataclass instance that differ from their defaults, the tagged ones under TAGGED_KEY."""
    body: dict[str, Any] = {}
    tags: dict[str, Any] = {}
    for field in _fields(type(value)):
        if field.name == VERSION_FIELD:
            continue
        item = getattr(value, field.name)
        if _is_default(item, field):
            continue
        (tags if field.tagged else body)[field.name] = _to_plain(item)
    if tags:
        body[TAGGED_KEY] = tags
    return body


def _to_plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return _plain_fields(value)
    if isinstance(value, (tuple, list)):
        return [_to_plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    return value


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


def _build(cls: type, body: Any, path: str, error: type[KafkaError]) -> Any:
    if not isinstance(body, dict):
        raise error(f"{path}: expected a map, got {type(body).__name__}")
    hints = _hints(cls)
    fields = _fields(cls)
    tags = body.get(TAGGED_KEY, {})
    if not isinstance(tags, dict):
        raise error(f"{path}.{TAGGED_KEY}: expected a map, got {type(tags).__name__}")
    plain = _PLAIN_NAMES[cls]
    unknown = [key for key in body if key not in plain and key != TAGGED_KEY]
    if unknown:
        raise error(f"{path}: unknown field(s) {sorted(map(str, unknown))}")
    misplaced = [key for key in tags if type(key) is not str or key in plain]
    if misplaced:
        raise error(f"{path}.{TAGGED_KEY}: not tagged field names {sorted(map(str, misplaced))}")
    kwargs = {}
    for field in fields:
        name = field.name
        # A tagged name this class does not know is skipped (a newer writer's); a known one read from the map.
        source = tags if field.tagged else body
        if name not in source:
            if field.required:
                raise error(f"{path}: missing field {name!r}")
            continue
        kwargs[name] = _convert(source[name], hints[name], f"{path}.{name}", error)
    return cls(**kwargs)


def _convert(value: Any, annotation: Any, path: str, error: type[KafkaError]) -> Any:
    origin = typing.get_origin(annotation)
    if origin in (types.UnionType, typing.Union):
        return _convert_union(value, typing.get_args(annotation), path, error)
    if origin is tuple:
        return _convert_tuple(value, typing.get_args(annotation), path, error)
    if dataclasses.is_dataclass(annotation):
        return _build(annotation, value, path, error)
    if isinstance(annotation, type) and issubclass(annotation, enum.IntEnum):
        converted = _convert(value, int, path, error)
        try:
            return annotation(converted)
        except ValueError:
            raise error(f"{path}: {converted} is not a {annotation.__name__}") from None
    return _convert_primitive(value, annotation, path, error)


def _convert_union(value: Any, arms: tuple, path: str, error: type[KafkaError]) -> Any:
    if value is None:
        if type(None) in arms:
            return None
        raise error(f"{path}: must not be null")
    others = [arm for arm in arms if arm is not type(None)]
    assert len(others) == 1, f"{path}: only `X | None` unions are supported, got {arms}"
    return _convert(value, others[0], path, error)


def _convert_tuple(value: Any, args: tuple, path: str, error: type[KafkaError]) -> tuple:
    assert len(args) == 2 and args[1] is Ellipsis, f"{path}: only tuple[X, ...] is supported, got {args}"
    if not isinstance(value, list):
        raise error(f"{path}: expected an array, got {type(value).__name__}")
    if len(value) > tuple_items_max:
        raise error(f"{path}: {len(value)} items, more than {tuple_items_max}")
    return tuple(_convert(item, args[0], f"{path}[{i}]", error) for i, item in enumerate(value))


def _convert_primitive(value: Any, annotation: Any, path: str, error: type[KafkaError]) -> Any:
    if annotation is bool:
        if type(value) is not bool:
            raise error(f"{path}: expected a bool, got {type(value).__name__}")
        return value
    if annotation is int:
        if type(value) is not int:
            raise error(f"{path}: expected an int, got {type(value).__name__}")
        if not INT64_MIN <= value <= INT64_MAX:
            raise error(f"{path}: {value} does not fit in 64 bits")
        return value
    if annotation is float:
        if type(value) is not float or not math.isfinite(value):
            raise error(f"{path}: expected a finite float, got {value!r}")
        return value
    if annotation is str:
        if type(value) is not str:
            raise error(f"{path}: expected a string, got {type(value).__name__}")
        if len(value) > string_chars_max:
            raise error(f"{path}: string of {len(value)} chars, more than {string_chars_max}")
        return value
    if annotation is bytes:
        if type(value) is not bytes:
            raise error(f"{path}: expected bytes, got {type(value).__name__}")
        if len(value) > bytes_field_max:
            raise error(f"{path}: {len(value)} bytes, more than {bytes_field_max}")
        return value
    raise AssertionError(f"{path}: unsupported annotation {annotation!r}")
