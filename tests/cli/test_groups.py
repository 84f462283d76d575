"""`flotilla groups`: the pure parts (reset plans, describe rows, the consumer protocol's assignment bytes)
and the command's usage errors. The commands against a real cluster are in tests/groupcoord/."""

import argparse
import struct

import pytest

from cli.groups import ResetSpec, describe_rows, parse_topic_partitions, reset_plan, reset_spec
from cli.support import UsageError
from net.client.groups import CommittedOffset, GroupMember, decode_assignment

EARLIEST = {0: 10, 1: 0, 2: 5}
LATEST = {0: 100, 1: 50, 2: 5}


def _spec(**options) -> ResetSpec:
    defaults = dict(to_earliest=False, to_latest=False, to_offset=None, shift_by=None, to_datetime=None)
    return reset_spec(argparse.Namespace(**{**defaults, **options}))


def test_reset_to_earliest_and_latest_use_the_log_bounds():
    assert reset_plan(_spec(to_earliest=True), [0, 1, 2], {}, EARLIEST, LATEST) == {0: 10, 1: 0, 2: 5}
    assert reset_plan(_spec(to_latest=True), [0, 1, 2], {}, EARLIEST, LATEST) == {0: 100, 1: 50, 2: 5}


def test_reset_to_offset_is_clamped_to_the_log_like_kafkas_tool():
    assert reset_plan(_spec(to_offset=30), [0, 1, 2], {}, EARLIEST, LATEST) == {0: 30, 1: 30, 2: 5}
    assert reset_plan(_spec(to_offset=3), [0], {}, EARLIEST, LATEST) == {0: 10}


def test_shift_by_moves_from_the_committed_offset_or_the_log_start_without_one():
    current = {0: 40, 1: 48}
    assert reset_plan(_spec(shift_by=-15), [0, 1, 2], current, EARLIEST, LATEST) == {0: 25, 1: 33, 2: 5}
    assert reset_plan(_spec(shift_by=5), [0, 1], current, EARLIEST, LATEST) == {0: 45, 1: 50}
    assert reset_plan(_spec(shift_by=7), [1], {}, EARLIEST, LATEST) == {1: 7}


def test_to_datetime_takes_the_first_offset_at_or_after_it_and_the_log_end_when_none():
    spec = _spec(to_datetime="2026-11-24T10:00:00+00:00")
    assert spec == ResetSpec("datetime", 1795514400000)
    assert reset_plan(spec, [0, 1], {}, EARLIEST, LATEST, {0: 42, 1: -1}) == {0: 42, 1: 50}
    assert _spec(to_datetime="2026-11-24T10:00:00").value == spec.value  # naive means UTC


def test_unreadable_datetime_and_topic_partitions_are_usage_errors():
    with pytest.raises(UsageError, match="ISO 8601"):
        _spec(to_datetime="yesterday")
    assert parse_topic_partitions("orders") == ("orders", None)
    assert parse_topic_partitions("orders:2,0,2") == ("orders", [0, 2])
    with pytest.raises(UsageError, match="partitions must be numbers"):
        parse_topic_partitions("orders:a")


def test_describe_rows_compute_lag_and_owner_per_partition():
    member = GroupMember("m-1", None, "client-a", "/127.0.0.1", {"t": [0]})
    committed = {("t", 0): CommittedOffset("t", 0, 7, -1, ""), ("t", 1): CommittedOffset("t", 1, 12, -1, None)}
    rows = describe_rows("g", [("t", 0), ("t", 1), ("t", 2)], committed, {("t", 0): 10, ("t", 1): 12, ("t", 2): 3},
                         {("t", 0): member})
    assert [(r["partition"], r["current_offset"], r["log_end_offset"], r["lag"], r["consumer_id"]) for r in rows] == [
        (0, 7, 10, 3, "m-1"), (1, 12, 12, 0, None), (2, None, 3, None, None)]


def _assignment(version: int, topics: dict[str, list[int]], user_data: bytes | None = None) -> bytes:
    out = struct.pack(">hi", version, len(topics))
    for topic, partitions in topics.items():
        name = topic.encode()
        out += struct.pack(">h", len(name)) + name + struct.pack(">i", len(partitions))
        out += b"".join(struct.pack(">i", p) for p in partitions)
    return out + (struct.pack(">i", -1) if user_data is None else struct.pack(">i", len(user_data)) + user_data)


def test_consumer_protocol_assignment_decodes_every_version():  # clients/.../ConsumerProtocolAssignment.json
    for version in (0, 1, 3):
        blob = _assignment(version, {"orders": [2, 0], "audit": [1]}, b"sticky")
        assert decode_assignment(blob) == {"orders": [0, 2], "audit": [1]}


def test_a_foreign_or_truncated_assignment_decodes_to_nothing():
    assert decode_assignment(b"") == {}
    assert decode_assignment(_assignment(0, {"orders": [0, 1]})[:9]) == {}
    assert decode_assignment(b"\x00\x00\x7f\xff\xff\xff") == {}
