"""Vectorized decoding of a records section with numpy: the per-record Python work is one varint per record.

Theory of operation: a records section is a chain of `length varint + body` records, so the only sequential
step is walking the lengths: compiled (partitions/_recordscan.c `record_positions`) when the extension is
built, else `_walk`, a tight Python loop reading one varint per record. Every other field
sits at a position computed from the body starts, and is decoded for all records at once (`_varints`: one
numpy pass per varint byte). Keys and values become the views of an Arrow binary_view array (length, 4-byte
prefix, buffer index, offset; bytes inline when 12 or fewer) over the section itself, so no bytes are copied
until Arrow casts the column to binary, in C. Headers are not decoded here (ColumnBuilder's Python path does
them when includeHeaders asks); their bytes are still bounded by each record's length.

Checks: every length, varint and field position is checked against its record's end; a bad section raises
CorruptRecordError like the Python decoder.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import numpy as np

from partitions.errors import CorruptRecordError

VARINT_BYTES_MAX = 5
VARLONG_BYTES_MAX = 10
RECORD_BODY_BYTES_MIN = 6
VIEW_BYTES = 16
VIEW_INLINE_BYTES_MAX = 12


@dataclass
class SectionColumns:
    """The kept records of one section: numpy columns and the views of keys and values into `section`."""

    offsets: np.ndarray  # int64
    timestamps: np.ndarray  # int64, ms
    key_views: np.ndarray  # (rows, 16) uint8
    value_views: np.ndarray
    key_valid: np.ndarray  # bool
    value_valid: np.ndarray

    @property
    def rows(self) -> int:
        return len(self.offsets)


try:  # the compiled walk (partitions/_recordscan.c, built by setup.py when a C compiler is there)
    from partitions._recordscan import record_positions as _compiled_positions
except ImportError:  # pragma: no cover - depends on the build
    _compiled_positions = None


def record_positions(buffer: bytes, count: int) -> np.ndarray:
    """`_walk` compiled when the extension is built (no Python work per record), else `_walk`."""
    if _compiled_positions is None:
        return np.frombuffer(_walk(buffer, count), np.int64)
    try:
        return np.frombuffer(_compiled_positions(buffer, count), np.int64)
    except ValueError as error:
        raise CorruptRecordError(str(error)) from None


def _walk(buffer: bytes, count: int) -> array:
    """The byte position of each of `count` records (of its length varint), and the section's end last.
    Lengths are checked by the caller, vectorized. Raises CorruptRecordError; IndexError on truncation."""
    positions = array("q")
    add = positions.append
    position = 0
    for _ in range(count):
        add(position)
        byte = buffer[position]
        if byte < 0x80:
            position += 1 + ((byte >> 1) ^ -(byte & 1))
        elif buffer[position + 1] < 0x80:
            zigzag = (byte & 0x7F) | (buffer[position + 1] << 7)
            position += 2 + ((zigzag >> 1) ^ -(zigzag & 1))
        else:
            zigzag, shift = 0, 0
            for index in range(position, position + VARINT_BYTES_MAX):
                byte = buffer[index]
                zigzag |= (byte & 0x7F) << shift
                shift += 7
                if byte < 0x80:
                    break
            else:
                raise CorruptRecordError(f"record length varint at byte {position} longer than 5 bytes")
            position = index + 1 + ((zigzag >> 1) ^ -(zigzag & 1))
        if position <= positions[-1]:
            raise CorruptRecordError(f"record length at byte {positions[-1]} is negative")
    add(position)
    if position != len(buffer):
        raise CorruptRecordError(f"records end at byte {position}, the section at {len(buffer)}")
    return positions


def _varints(data: np.ndarray, positions: np.ndarray, limits: np.ndarray, bytes_max: int
             ) -> tuple[np.ndarray, np.ndarray]:
    """(signed values, next positions) of the zig-zag varints at `positions`, each within its `limits`
    (exclusive). Raises CorruptRecordError for one that runs past its limit or bytes_max."""
    last = len(data) - 1
    zigzag = np.zeros(len(positions), np.uint64)
    current = positions.copy()
    active = np.ones(len(positions), bool)
    for index in range(bytes_max):
        byte = data[np.minimum(current, last)].astype(np.uint64)
        zigzag |= np.where(active, (byte & np.uint64(0x7F)) << np.uint64(7 * index), np.uint64(0))
        more = active & (byte >= 0x80)
        current = np.where(active, current + 1, current)
        active = more
        if not active.any():
            break
    else:
        raise CorruptRecordError(f"varint longer than {bytes_max} bytes")
    if (current > limits).any():
        row = int(np.argmax(current > limits))
        raise CorruptRecordError(f"varint at byte {int(positions[row])} runs past its record end {int(limits[row])}")
    values = (zigzag >> np.uint64(1)).astype(np.int64) ^ -(zigzag & np.uint64(1)).astype(np.int64)
    return values, current


def _views(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, buffer_index: int) -> np.ndarray:
    """Arrow binary_view structs for the values data[start: start + length] (length 0 for nulls)."""
    rows = len(starts)
    views = np.zeros((rows, VIEW_BYTES), np.uint8)
    words = views.view(np.int32)
    words[:, 0] = lengths
    last = len(data) - 1
    for index in range(VIEW_INLINE_BYTES_MAX):
        has_byte = lengths > index
        if not has_byte.any():
            break
        # inline values keep up to 12 bytes; longer ones keep their first 4 as the prefix
        keep = has_byte & ((lengths <= VIEW_INLINE_BYTES_MAX) | (index < 4))
        views[:, 4 + index] = np.where(keep, data[np.minimum(starts + index, last)], 0)
    long_values = lengths > VIEW_INLINE_BYTES_MAX  # inline values hold data in words 1-3: leave them be
    words[long_values, 2] = buffer_index
    words[long_values, 3] = starts[long_values]
    return views


def decode_section(section: bytes, header, start_offset: int, end_offset: int, buffer_index: int
                   ) -> SectionColumns:
    """The records of one (decompressed) section with offsets in [start_offset, end_offset). Raises
    CorruptRecordError, IndexError when the section is truncated (the caller wraps it)."""
    positions = record_positions(section, header.records_count)
    data = np.frombuffer(section, np.uint8)
    record_ends = positions[1:]
    lengths, body_starts = _varints(data, positions[:-1], record_ends, VARINT_BYTES_MAX)
    if (body_starts + lengths != record_ends).any() or (lengths < RECORD_BODY_BYTES_MIN).any():
        raise CorruptRecordError(f"a record of the batch at offset {header.base_offset} is shorter than "
                                 f"{RECORD_BODY_BYTES_MIN} bytes")
    timestamp_deltas, position = _varints(data, body_starts + 1, record_ends, VARLONG_BYTES_MAX)  # after attributes
    offset_deltas, position = _varints(data, position, record_ends, VARINT_BYTES_MAX)
    key_lengths, key_starts = _varints(data, position, record_ends, VARINT_BYTES_MAX)
    value_lengths, value_starts = _varints(data, key_starts + np.maximum(key_lengths, 0), record_ends,
                                           VARINT_BYTES_MAX)
    headers_at = value_starts + np.maximum(value_lengths, 0)
    if (key_lengths < -1).any() or (value_lengths < -1).any() or (headers_at >= record_ends).any():
        raise CorruptRecordError(f"a record of the batch at offset {header.base_offset} has a key or value length "
                                 "below -1 or past its record end")
    if (np.diff(offset_deltas) <= 0).any() or (len(offset_deltas) and (
            offset_deltas[0] < 0 or offset_deltas[-1] > header.last_offset_delta)):
        raise CorruptRecordError(f"offset deltas of the batch at offset {header.base_offset} out of order")
    offsets = header.base_offset + offset_deltas
    if header.is_log_append_time:
        timestamps = np.full(len(offsets), header.max_timestamp, np.int64)
    else:
        timestamps = header.base_timestamp + timestamp_deltas
    kept = (offsets >= start_offset) & (offsets < end_offset)
    if not kept.all():
        offsets, timestamps = offsets[kept], timestamps[kept]
        key_lengths, key_starts = key_lengths[kept], key_starts[kept]
        value_lengths, value_starts = value_lengths[kept], value_starts[kept]
    key_valid, value_valid = key_lengths >= 0, value_lengths >= 0
    return SectionColumns(
        offsets, timestamps,
        _views(data, key_starts, np.maximum(key_lengths, 0), buffer_index),
        _views(data, value_starts, np.maximum(value_lengths, 0), buffer_index),
        key_valid, value_valid)
