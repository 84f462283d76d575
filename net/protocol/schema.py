"""Message schemas as Python data, and how they become message classes and per-version codecs.

Theory of operation: each request and response is described the way Kafka's JSON message specs describe it
(clients/src/main/resources/common/message/*.json): a tree of `Field`s, each with the versions it exists in,
the versions in which it may be null, the versions in which it is a tagged field (and its tag), a default, and
nested fields for structs. `specs.py` holds that data; this module turns it into

  * a class per message and per nested struct (`Struct` subclasses with `__slots__`, keyword construction,
    defaults for every field, `__eq__`, `__repr__`), and
  * for each (struct, version) a compiled `StructCodec`: a flat list of field encoders/decoders chosen once,
    so encoding and decoding walk no schema at run time, whose `encode`/`decode` are then written out as
    generated Python functions (net/protocol/codegen.py; message classes get a generated `__init__` too).
    `reference_codec` keeps the plain field walk, which the generated functions are tested against.

Field names are Kafka's JSON names in snake_case (`ThrottleTimeMs` -> `throttle_time_ms`). A field that does
not exist in a version is skipped on encode and takes its default on decode (Kafka's generated code does the
same; Kafka additionally refuses to drop a non-default, non-ignorable field, which we do not check).

Flexible versions (KIP-482) switch strings, bytes, records and arrays to their compact forms and give every
struct a tagged-field section; tagged fields are written only when they differ from their default, in tag
order, and unknown tags are skipped on decode.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field as dataclass_field
from typing import Any, Callable

from net.protocol import types as t
from net.protocol.codegen import default_expression, specialize
from net.protocol.types import ProtocolDecodeError, ProtocolEncodeError, Reader

VERSION_MAX = 0x7FFF  # "N+" means up to the largest int16 version


@dataclass(frozen=True)
class Versions:
    """An inclusive version range; `lowest > highest` is the empty range ("none")."""

    lowest: int
    highest: int

    @classmethod
    def parse(cls, text: str | None) -> "Versions":
        """Parse Kafka's notation: "3+", "0-5", "7", "none" (or None)."""
        if text is None or text == "none":
            return NO_VERSIONS
        if text.endswith("+"):
            return cls(int(text[:-1]), VERSION_MAX)
        low, _, high = text.partition("-")
        return cls(int(low), int(high or low))

    def __contains__(self, version: int) -> bool:
        return self.lowest <= version <= self.highest

    def __str__(self) -> str:
        if self.lowest > self.highest:
            return "none"
        return f"{self.lowest}+" if self.highest == VERSION_MAX else f"{self.lowest}-{self.highest}"


NO_VERSIONS = Versions(1, 0)

PRIMITIVE_TYPES = frozenset(
    {"int8", "int16", "int32", "int64", "uint16", "uint32", "float64", "bool", "string", "bytes", "records", "uuid"}
)
NULLABLE_TYPES = frozenset({"string", "bytes", "records"})
_MISSING = object()


@dataclass(frozen=True)
class Field:
    """One field of a message or struct, as in Kafka's JSON spec."""

    kafka_name: str
    type: str  # a primitive, "[]<primitive>", "[]<StructName>" or "<StructName>"
    versions: Versions
    nullable: Versions = NO_VERSIONS
    tagged: Versions = NO_VERSIONS
    tag: int | None = None
    default: Any = _MISSING
    fields: tuple["Field", ...] = ()

    @property
    def name(self) -> str:
        return snake_case(self.kafka_name)

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def item_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.item_type not in PRIMITIVE_TYPES


@dataclass(frozen=True)
class MessageSpec:
    """A request or response: its api key, the versions this codec implements, and its flexible versions."""

    api_key: int
    name: str
    kind: str  # "request" or "response"
    valid: Versions
    flexible: Versions
    fields: tuple[Field, ...] = dataclass_field(default=())


def field(
    kafka_name: str,
    type_: str,
    versions: str,
    *,
    nullable: str | None = None,
    tagged: str | None = None,
    tag: int | None = None,
    default: Any = _MISSING,
    fields: tuple[Field, ...] = (),
) -> Field:
    """A field in Kafka's JSON notation (versions as strings such as "3+" or "0-5")."""
    spec = Field(
        kafka_name, type_, Versions.parse(versions), Versions.parse(nullable), Versions.parse(tagged), tag, default,
        tuple(fields),
    )
    item = spec.item_type
    assert item in PRIMITIVE_TYPES or item[:1].isupper(), f"{kafka_name}: unknown type {type_!r}"
    assert spec.is_struct == bool(fields), f"{kafka_name}: struct fields {bool(fields)} for type {type_!r}"
    assert (tag is None) == (tagged is None), f"{kafka_name}: tag={tag} tagged={tagged}"
    assert spec.nullable.lowest > spec.nullable.highest or spec.is_array or spec.is_struct or item in NULLABLE_TYPES, (
        f"{kafka_name}: type {type_!r} cannot be nullable"
    )
    return spec


def request(api_key: int, name: str, *, valid: str, flexible: str, fields: tuple[Field, ...]) -> MessageSpec:
    return MessageSpec(api_key, name, "request", Versions.parse(valid), Versions.parse(flexible), tuple(fields))


def response(api_key: int, name: str, *, valid: str, flexible: str, fields: tuple[Field, ...]) -> MessageSpec:
    return MessageSpec(api_key, name, "response", Versions.parse(valid), Versions.parse(flexible), tuple(fields))


_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def snake_case(kafka_name: str) -> str:
    """`ThrottleTimeMs` -> `throttle_time_ms`, `timeoutMs` -> `timeout_ms`, `IsrNodes` -> `isr_nodes`."""
    return _CAMEL_BOUNDARY.sub("_", kafka_name).lower()


# Defaults, as Kafka's generated code chooses them when the spec gives none.


def default_factory(spec: Field, struct_class: type | None) -> Callable[[], Any]:
    if spec.default is not _MISSING:
        value = spec.default
        assert not isinstance(value, (list, dict)), f"{spec.kafka_name}: mutable default"
        return lambda: value
    if spec.is_array:
        return list
    if spec.is_struct:
        assert struct_class is not None, spec.kafka_name
        return struct_class
    zero = {"bool": False, "float64": 0.0, "string": "", "bytes": b"", "records": None, "uuid": t.NULL_UUID}
    value = zero.get(spec.type, 0)
    return lambda: value


# The data model: one class per message and per nested struct.


class Struct:
    """A message or nested struct: keyword construction with defaults, value equality, a readable repr."""

    __slots__ = ()
    _fields: tuple[Field, ...] = ()
    _names: tuple[str, ...] = ()
    _default_factories: tuple[Callable[[], Any], ...] = ()

    def __init__(self, **values: Any) -> None:
        for name, make in zip(self._names, self._default_factories):
            setattr(self, name, values.pop(name) if name in values else make())
        if values:
            raise TypeError(f"{type(self).__name__} has no field(s) {sorted(values)}; fields: {self._names}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self._names)

    __hash__ = None  # mutable value objects

    def __repr__(self) -> str:
        parts = []
        for spec, name in zip(self._fields, self._names):
            value = getattr(self, name)
            if spec.type == "records" and value is not None:
                parts.append(f"{name}=<{len(value)} bytes>")
            else:
                parts.append(f"{name}={value!r}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def to_dict(self) -> dict[str, Any]:
        """Field values as plain data (nested structs as dicts, records as bytes), for logs and tests."""
        return {name: _plain(getattr(self, name)) for name in self._names}


def _plain(value: Any) -> Any:
    if isinstance(value, Struct):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, memoryview):
        return bytes(value)
    return value


class Message(Struct):
    """A request or response body. `SPEC` is its schema; `API_KEY` its Kafka api key."""

    __slots__ = ()
    SPEC: MessageSpec
    API_KEY: int

    def encode(self, version: int) -> bytes:
        """The body (no header, no length prefix) in `version`. Raises ProtocolEncodeError."""
        out: list = []
        encode_body(self, version, out)
        return b"".join(out)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, version: int, *, strict: bool = False) -> "Message":
        """Decode a body in `version`. Trailing bytes are ignored unless `strict`. Raises ProtocolDecodeError."""
        if version not in cls.SPEC.valid:
            raise ProtocolDecodeError(f"{cls.__name__} v{version} is outside the implemented versions {cls.SPEC.valid}")
        reader = Reader(data)
        message = compiled_codec(cls, version).decode(reader)
        if strict and reader.remaining:
            raise ProtocolDecodeError(f"{reader.remaining} trailing bytes after {cls.__name__} v{version}")
        return message


MESSAGES_MODULE = "net.protocol.messages"  # where the generated classes are published


def build_message_class(spec: MessageSpec) -> type[Message]:
    """The class for `spec`, with its nested struct classes attached by their Kafka struct names."""
    structs: dict[str, type[Struct]] = {}
    attributes = _class_attributes(spec.fields, structs)
    attributes.update(SPEC=spec, API_KEY=spec.api_key)
    cls = type(spec.name, (Message,), attributes)
    cls.__module__ = MESSAGES_MODULE
    for struct_name, struct_class in structs.items():
        setattr(cls, struct_name, struct_class)
        struct_class.__qualname__ = f"{spec.name}.{struct_name}"
        struct_class.__module__ = MESSAGES_MODULE
    return cls


def _class_attributes(fields: tuple[Field, ...], structs: dict[str, type[Struct]]) -> dict[str, Any]:
    factories = []
    for spec in fields:
        struct_class = _struct_class(spec, structs) if spec.is_struct else None
        factories.append(default_factory(spec, struct_class))
    names = tuple(spec.name for spec in fields)
    assert len(set(names)) == len(names), f"duplicate field names {names}"
    return {
        "__slots__": names,
        "__init__": _generated_init(fields, factories),
        "__eq__": _generated_eq(names),
        "_fields": fields,
        "_names": names,
        "_default_factories": tuple(factories),
        "_struct_classes": {spec.name: structs[spec.item_type] for spec in fields if spec.is_struct},
    }


def _generated_init(fields: tuple[Field, ...], factories: list[Callable[[], Any]]) -> Callable[..., None]:
    """`Struct.__init__` written out for these fields (keyword-only, each default made only when the field is
    not given): a message is built per request and per response, and the generic loop was a tenth of a small
    request's cost. An unknown keyword is a TypeError, as from the generic one."""
    namespace: dict[str, Any] = {"MISSING": _MISSING}
    parameters, lines = [], []
    for spec, make in zip(fields, factories):
        name = spec.name
        parameters.append(f"{name}=MISSING")
        lines.append(f"    self.{name} = {default_expression(name, make, namespace)} if {name} is MISSING else {name}")
    signature = f"def __init__(self, *, {', '.join(parameters)}):" if parameters else "def __init__(self):"
    source = "\n".join([signature, *lines, "    return None"]) + "\n"
    exec(compile(source, "<struct __init__>", "exec"), namespace)
    return namespace["__init__"]


def _generated_eq(names: tuple[str, ...]) -> Callable[[Any, Any], Any]:
    """`Struct.__eq__` written out for these fields: encoders compare tagged struct fields with their
    defaults on every message (a produce response's current leader), and the generic loop over getattr cost
    a few microseconds each time."""
    compared = " and ".join(f"self.{name} == other.{name}" for name in names) or "True"
    source = (f"def __eq__(self, other):\n"
              f"    if type(other) is not type(self):\n"
              f"        return NotImplemented\n"
              f"    return {compared}\n")
    namespace: dict[str, Any] = {}
    exec(compile(source, "<struct __eq__>", "exec"), namespace)
    return namespace["__eq__"]


def _struct_class(spec: Field, structs: dict[str, type[Struct]]) -> type[Struct]:
    name = spec.item_type
    existing = structs.get(name)
    if existing is not None:
        # Kafka's "common structs" are shared by name within a message; they must agree field for field.
        assert existing._fields == spec.fields, f"struct {name} defined twice with different fields"
        return existing
    cls = type(name, (Struct,), _class_attributes(spec.fields, structs))
    structs[name] = cls
    return cls


# Codecs: compiled once per (class, version).

Encoder = Callable[[Any, list], None]
Decoder = Callable[[Reader], Any]

_FIXED = {
    "int8": t.INT8, "int16": t.INT16, "int32": t.INT32, "int64": t.INT64,
    "uint16": t.UINT16, "uint32": t.UINT32, "float64": t.FLOAT64,
}
_FIXED_READERS = {
    "int8": Reader.int8, "int16": Reader.int16, "int32": Reader.int32, "int64": Reader.int64,
    "uint16": Reader.uint16, "uint32": Reader.uint32, "float64": Reader.float64,
}


@dataclass
class StructCodec:
    """Encoder and decoder of one struct class in one version."""

    cls: type
    version: int
    flexible: bool
    plain: list[tuple[str, Encoder, Decoder]]
    tagged: list[tuple[int, str, Encoder, Decoder, Callable[[], Any]]]
    absent: list[tuple[str, Callable[[], Any]]]
    bytes_min: int
    tagged_by_tag: dict[int, tuple[str, Decoder]] = dataclass_field(default_factory=dict)

    def __post_init__(self) -> None:
        self.tagged_by_tag = {tag: (name, decode) for tag, name, _, decode, _ in self.tagged}

    def encode(self, value: Any, out: list) -> None:
        for name, encode, _ in self.plain:
            encode(getattr(value, name), out)
        if self.flexible:
            self._encode_tagged(value, out)

    def _encode_tagged(self, value: Any, out: list) -> None:
        present = []
        for tag, name, encode, _, make_default in self.tagged:
            field_value = getattr(value, name)
            if field_value != make_default():
                payload: list = []
                encode(field_value, payload)
                present.append((tag, b"".join(payload)))
        t.write_tagged_fields(present, out)

    def decode(self, reader: Reader) -> Any:
        value = object.__new__(self.cls)
        for name, _, decode in self.plain:
            setattr(value, name, decode(reader))
        for name, make_default in self.absent:
            setattr(value, name, make_default())
        if self.flexible:
            self._decode_tagged(value, reader)
        return value

    def _decode_tagged(self, value: Any, reader: Reader) -> None:
        for tag, payload in reader.tagged_fields():
            known = self.tagged_by_tag.get(tag)
            if known is None:
                continue  # an unknown tagged field: skipped, as KIP-482 requires
            name, decode = known
            field_reader = Reader(payload)
            setattr(value, name, decode(field_reader))
            if field_reader.remaining:
                raise ProtocolDecodeError(f"tagged field {tag} ({name}) has {field_reader.remaining} extra bytes")


_CODECS: dict[tuple[type, int], StructCodec] = {}
_REFERENCE_CODECS: dict[tuple[type, int], StructCodec] = {}


def compiled_codec(cls: type, version: int) -> StructCodec:
    """The codec of `cls` in `version` (built on first use, then cached)."""
    codec = _CODECS.get((cls, version))
    if codec is None:
        codec = _compile(cls, version, _is_flexible(cls, version))
        _CODECS[(cls, version)] = codec
    return codec


def reference_codec(cls: type, version: int) -> StructCodec:
    """The same codec without generated functions: the field walk that `compiled_codec`'s generated
    `encode`/`decode` must match (tests/net/test_protocol_codegen.py)."""
    codec = _REFERENCE_CODECS.get((cls, version))
    if codec is None:
        codec = _compile(cls, version, _is_flexible(cls, version), generated=False)
        _REFERENCE_CODECS[(cls, version)] = codec
    return codec


def _is_flexible(cls: type, version: int) -> bool:
    spec: MessageSpec = cls.SPEC
    return version in spec.flexible


def _compile(cls: type, version: int, flexible: bool, generated: bool = True) -> StructCodec:
    """The codec of `cls` in `version`: its field walk, with `encode`/`decode` generated from it
    (net/protocol/codegen.py) unless `generated` is False (the reference the generated ones are tested against)."""
    plain, tagged, absent = [], [], []
    plain_specs, nested = [], {}
    bytes_min = 1 if flexible else 0  # the tagged-field count
    for spec, make_default in zip(cls._fields, cls._default_factories):
        if flexible and version in spec.tagged:
            encode, decode, _ = _field_codec(spec, cls, version, flexible, generated)
            tagged.append((spec.tag, spec.name, encode, decode, make_default))
            absent.append((spec.name, make_default))  # default unless the tag is on the wire
        elif version in spec.versions and version not in spec.tagged:
            encode, decode, size_min = _field_codec(spec, cls, version, flexible, generated)
            plain.append((spec.name, encode, decode))
            plain_specs.append(spec)
            if spec.is_array and spec.is_struct:
                nested[spec.name] = _nested_codec(cls._struct_classes[spec.name], version, flexible, generated)
            bytes_min += size_min
        else:
            absent.append((spec.name, make_default))
    tagged.sort(key=lambda entry: entry[0])
    tags = [entry[0] for entry in tagged]
    assert len(set(tags)) == len(tags), f"{cls.__name__} v{version}: duplicate tags {tags}"
    codec = StructCodec(cls, version, flexible, plain, tagged, absent, bytes_min)
    if generated:
        specialize(codec, plain_specs, nested)
    return codec


def _field_codec(spec: Field, owner: type, version: int, flexible: bool,
                 generated: bool) -> tuple[Encoder, Decoder, int]:
    nullable = version in spec.nullable
    if spec.is_array:
        item = _item_codec(spec, owner, version, flexible, generated)
        return _array_codec(item, flexible, nullable)
    return _item_codec(spec, owner, version, flexible, generated, nullable)


def _item_codec(
    spec: Field, owner: type, version: int, flexible: bool, generated: bool, nullable: bool = False
) -> tuple[Encoder, Decoder, int]:
    kind = spec.item_type
    if spec.is_struct:
        struct_codec = _nested_codec(owner._struct_classes[spec.name], version, flexible, generated)
        if nullable:
            return _nullable_struct_codec(struct_codec)
        return struct_codec.encode, struct_codec.decode, struct_codec.bytes_min
    if kind in _FIXED:
        packer = _FIXED[kind].pack
        return (lambda value, out: out.append(packer(value))), _FIXED_READERS[kind], _FIXED[kind].size
    return _variable_codec(kind, flexible, nullable)


def _nullable_struct_codec(struct_codec: "StructCodec") -> tuple[Encoder, Decoder, int]:
    """A nullable struct field (Kafka's MessageGenerator): an int8 marker, -1 for null, 1 before a value."""

    def encode(value: Any, out: list) -> None:
        if value is None:
            out.append(b"\xff")
            return
        out.append(b"\x01")
        struct_codec.encode(value, out)

    def decode(reader: Reader) -> Any:
        marker = reader.int8()
        if marker < 0:
            return None
        return struct_codec.decode(reader)

    return encode, decode, 1


def _variable_codec(kind: str, flexible: bool, nullable: bool) -> tuple[Encoder, Decoder, int]:
    length_bytes = 1 if flexible else (2 if kind == "string" else 4)
    if kind == "bool":
        return (lambda value, out: out.append(b"\x01" if value else b"\x00")), Reader.boolean, 1
    if kind == "uuid":
        return t.write_uuid, Reader.uuid, 16
    if kind == "string":
        return (
            lambda value, out: t.write_string(value, flexible, nullable, out),
            lambda reader: reader.string(flexible, nullable),
            length_bytes,
        )
    if kind == "bytes":
        return (
            lambda value, out: t.write_bytes(value, flexible, nullable, out),
            lambda reader: reader.bytes_(flexible, nullable),
            length_bytes,
        )
    assert kind == "records", kind
    return (
        lambda value, out: t.write_records(value, flexible, nullable, out),
        lambda reader: reader.records(flexible, nullable),
        length_bytes,
    )


def _array_codec(item: tuple[Encoder, Decoder, int], flexible: bool, nullable: bool) -> tuple[Encoder, Decoder, int]:
    encode_item, decode_item, item_bytes_min = item
    assert item_bytes_min >= 1, f"array items of {item_bytes_min} bytes would make counts unbounded"

    def encode(value: Any, out: list) -> None:
        if value is None:
            if not nullable:
                raise ProtocolEncodeError("null array in a non-nullable field")
            t.write_length(-1, flexible, True, out)
            return
        t.write_length(len(value), flexible, True, out)
        for element in value:
            encode_item(element, out)

    def decode(reader: Reader) -> Any:
        count = reader.array_length(flexible, nullable, item_bytes_min)
        if count is None:
            return None
        return [decode_item(reader) for _ in range(count)]

    return encode, decode, 1 if flexible else 4


def _nested_codec(cls: type, version: int, flexible: bool, generated: bool) -> StructCodec:
    cache = _CODECS if generated else _REFERENCE_CODECS
    codec = cache.get((cls, version))
    if codec is None:
        codec = _compile(cls, version, flexible, generated)
        cache[(cls, version)] = codec
    return codec


def encode_body(message: Message, version: int, out: list) -> None:
    """Append `message` in `version` to `out`. Raises ProtocolEncodeError for values the version cannot carry."""
    spec = message.SPEC
    if version not in spec.valid:
        raise ProtocolEncodeError(f"{spec.name} v{version} is outside the implemented versions {spec.valid}")
    try:
        compiled_codec(type(message), version).encode(message, out)
    except ProtocolEncodeError:
        raise
    except (struct.error, TypeError, AttributeError, ValueError, OverflowError) as error:
        raise ProtocolEncodeError(f"{spec.name} v{version}: {type(error).__name__}: {error}") from error
