"""Per-version codecs as generated Python functions: the hot path of every request and response.

Theory of operation: `schema.StructCodec` describes one struct in one version as a list of field codecs
(closures), which is easy to check but pays, per field, a loop step, a closure call, a reader method call and
a `setattr`. `specialize(codec)` writes the same walk out as the source of two functions, `decode(reader)` and
`encode(value, out)`, and compiles it once per (struct, version), as dataclasses generate `__init__`:

- consecutive fixed-width fields (int8-64, uint16/32, float64, bool) are read with one `unpack_from` straight
  into the slots and written with one `pack`, after one bounds check for the whole run;
- strings and array counts are read and written inline when they are short and well formed (a compact length
  of one byte, an in-range int16/int32 length); anything else (null, too long, truncated) goes through the
  `Reader`'s checked methods or the plain writers, as do bytes, records and uuids;
- arrays of structs call the nested struct's generated decoder in a comprehension;
- the tagged-field section costs one byte comparison on decode and one comparison per tagged field on encode
  when every tagged field is at its default (the common case), and otherwise falls back to the codec's own
  tagged walk, so unknown tags are skipped and present ones written exactly as before.

The generated functions accept and produce exactly what the closure codec does (same bytes, same values,
ProtocolDecodeError on the same inputs; only the wording of a short-buffer error differs, as it names the
run of fields rather than the field). tests/net/test_protocol_codegen.py checks both against each other on
every message and version with generated values and on truncated frames.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from net.protocol import types as t
from net.protocol.types import ProtocolDecodeError

if TYPE_CHECKING:
    from net.protocol.schema import Field, StructCodec

FIXED_FORMATS = {"int8": "b", "int16": "h", "int32": "i", "int64": "q", "uint16": "H", "uint32": "I",
                 "float64": "d", "bool": "?"}


def _short(position: int, end: int, size: int) -> None:
    raise ProtocolDecodeError(f"need {size} bytes at position {position}, {end - position} remain")


def default_expression(name: str, make_default: Any, namespace: dict[str, Any]) -> str:
    """Source for a field's default made by `make_default` (schema.default_factory: `list`, a struct class, or
    a function returning an immutable value), binding in `namespace` what the source names."""
    if make_default is list:
        return "[]"
    if isinstance(make_default, type):  # a struct: a new one each time
        namespace[f"make_{name}"] = make_default
        return f"make_{name}()"
    namespace[f"default_{name}"] = make_default()  # immutable: one shared value
    return f"default_{name}"


def specialize(codec: "StructCodec", specs: list["Field"], nested: dict[str, "StructCodec"]) -> None:
    """Replace `codec.decode` and `codec.encode` with generated functions (see the module docstring).
    `specs` are the fields of `codec.plain`, in order; `nested` the codecs of struct fields by field name."""
    namespace: dict[str, Any] = {"new": object.__new__, "cls": codec.cls, "short": _short, "t": t,
                                 "ProtocolDecodeError": ProtocolDecodeError, "unpack_h": t.INT16.unpack_from,
                                 "unpack_i": t.INT32.unpack_from,
                                 "pack_h": t.INT16.pack, "pack_i": t.INT32.pack, "small": t.SMALL_UNSIGNED_VARINTS}
    decode_lines = ["def decode(reader):", "    buf = reader.buf", "    pos = reader.pos", "    end = reader.end",
                    "    v = new(cls)"]
    encode_lines = ["def encode(v, out):", "    append = out.append"]
    runs = _runs(codec, specs)
    for index, run in enumerate(runs):
        if isinstance(run, list):  # consecutive fixed-width fields
            fmt = struct.Struct(">" + "".join(FIXED_FORMATS[spec.type] for _, spec in run))
            namespace[f"unpack_{index}"], namespace[f"pack_{index}"] = fmt.unpack_from, fmt.pack
            targets = ", ".join(f"v.{name}" for name, _ in run)
            decode_lines += [f"    if end - pos < {fmt.size}: short(pos, end, {fmt.size})",
                             f"    ({targets},) = unpack_{index}(buf, pos)",
                             f"    pos += {fmt.size}"]
            encode_lines.append(f"    append(pack_{index}({targets}))")
            continue
        name, spec, field_decode, field_encode = run
        namespace[f"dec_{name}"], namespace[f"enc_{name}"] = field_decode, field_encode
        item_codec = nested.get(name)
        if spec.is_array and item_codec is not None:
            namespace[f"item_dec_{name}"], namespace[f"item_enc_{name}"] = item_codec.decode, item_codec.encode
            # Fast path: a count that is neither null nor too large for what remains; else the checked read.
            if codec.flexible:
                decode_lines += [
                    "    n = (buf[pos] - 1) if pos < end and buf[pos] < 0x80 else -1",
                    f"    if n >= 0 and n * {item_codec.bytes_min} <= end - pos - 1:",
                    "        reader.pos = pos + 1"]
            else:
                decode_lines += [
                    "    n = unpack_i(buf, pos)[0] if end - pos >= 4 else -1",
                    f"    if n >= 0 and n * {item_codec.bytes_min} <= end - pos - 4:",
                    "        reader.pos = pos + 4"]
            decode_lines += [f"        v.{name} = [item_dec_{name}(reader) for _ in range(n)]",
                             "    else:",
                             "        reader.pos = pos",
                             f"        v.{name} = dec_{name}(reader)",
                             "    pos = reader.pos"]
            encode_lines += [f"    items = v.{name}",
                             "    if items is None:",
                             f"        enc_{name}(items, out)",
                             "    else:",
                             *(["        if len(items) < 127:",
                                 "            append(small[len(items) + 1])",
                                 "        else:",
                                 "            t.write_length(len(items), True, True, out)"]
                               if codec.flexible else ["        append(pack_i(len(items)))"]),
                             "        for item in items:",
                             f"            item_enc_{name}(item, out)"]
            continue
        if spec.is_array or spec.type != "string":
            encode_lines.append(f"    enc_{name}(v.{name}, out)")
            decode_lines += ["    reader.pos = pos", f"    v.{name} = dec_{name}(reader)", "    pos = reader.pos"]
            continue
        # A string. Fast paths: a non-null one of under 127 bytes (compact) or 32 KiB, whose length fits in what
        # remains; else the checked write or read (nulls, errors).
        encode_lines += [f"    s = v.{name}",
                         "    if s is not None:",
                         "        b = s.encode('utf-8')",
                         f"        if len(b) < {127 if codec.flexible else 0x8000}:",
                         f"            append({'small[len(b) + 1]' if codec.flexible else 'pack_h(len(b))'})",
                         "            append(b)",
                         "        else:",
                         f"            enc_{name}(s, out)",
                         "    else:",
                         f"        enc_{name}(s, out)"]
        if codec.flexible:
            decode_lines += ["    n = (buf[pos] - 1) if pos < end and buf[pos] < 0x80 else -1",
                             "    if 0 <= n <= end - pos - 1:",
                             f"        v.{name} = str(buf[pos + 1:pos + 1 + n], 'utf-8')",
                             "        pos += 1 + n"]
        else:
            decode_lines += ["    n = unpack_h(buf, pos)[0] if end - pos >= 2 else -1",
                             "    if 0 <= n <= end - pos - 2:",
                             f"        v.{name} = str(buf[pos + 2:pos + 2 + n], 'utf-8')",
                             "        pos += 2 + n"]
        decode_lines += ["    else:",
                         "        reader.pos = pos",
                         f"        v.{name} = dec_{name}(reader)",
                         "        pos = reader.pos"]
    for name, make_default in codec.absent:
        decode_lines.append(f"    v.{name} = {default_expression(name, make_default, namespace)}")
    if codec.flexible:
        namespace["decode_tagged"], namespace["encode_tagged"] = codec._decode_tagged, codec._encode_tagged
        decode_lines += ["    if pos < end and buf[pos] == 0:",
                         "        reader.pos = pos + 1",
                         "    else:",
                         "        reader.pos = pos",
                         "        decode_tagged(v, reader)"]
        if codec.tagged:
            # Tagged fields are written only when they differ from their defaults; all at default: an empty section.
            checks = []
            for tag, name, _, _, make_default in codec.tagged:
                namespace[f"tag_default_{name}"] = make_default()  # compared with, never handed out
                checks.append(f"v.{name} == tag_default_{name}")
            encode_lines += [f"    if {' and '.join(checks)}:",
                             "        append(b'\\x00')",
                             "    else:",
                             "        encode_tagged(v, out)"]
        else:
            encode_lines.append("    append(b'\\x00')")
    else:
        decode_lines.append("    reader.pos = pos")
    decode_lines.append("    return v")
    # A string that is not UTF-8 is a ProtocolDecodeError, as Reader.string raises it.
    decode_lines[5:] = ["    try:"] + ["    " + line for line in decode_lines[5:]] + [
        "    except UnicodeDecodeError as error:",
        "        raise ProtocolDecodeError(f'string is not UTF-8: {error}') from None"]
    source = "\n".join(decode_lines) + "\n\n" + "\n".join(encode_lines) + "\n"
    exec(compile(source, f"<codec {codec.cls.__qualname__} v{codec.version}>", "exec"), namespace)
    codec.decode, codec.encode = namespace["decode"], namespace["encode"]
    codec.source = source


def _runs(codec: "StructCodec", specs: list["Field"]) -> list:
    """The plain fields grouped: a list of (name, spec) per run of fixed-width fields, else one tuple
    (name, spec, decode, encode) per field."""
    runs: list = []
    for (name, encode, decode), spec in zip(codec.plain, specs):
        if not spec.is_array and spec.type in FIXED_FORMATS:
            if runs and isinstance(runs[-1], list):
                runs[-1].append((name, spec))
            else:
                runs.append([(name, spec)])
        else:
            runs.append((name, spec, decode, encode))
    return runs

