"""SimDisk: page-cache semantics, power loss, directory durability, torn tails, read corruption."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partitions.storage import Storage, StorageError, read_file, write_file_atomically
from simulations.disk import SimDisk


def _disk(seed=1, **kwargs):
    return SimDisk(random.Random(seed), **kwargs)


def test_sim_disk_is_a_storage():
    assert isinstance(_disk(), Storage)


def test_process_crash_keeps_everything_written():
    disk = _disk()
    handle = disk.open("log/a.log")
    handle.append(b"hello")
    handle.write_at(0, b"J")
    disk.crash()
    assert read_file(disk, "log/a.log") == b"Jello"
    assert disk.list("log") == ["a.log"]


def test_handle_of_a_crashed_process_refuses_use():
    disk = _disk()
    handle = disk.open("a")
    disk.crash()
    with pytest.raises(StorageError):
        handle.append(b"x")


def test_power_loss_keeps_only_fsynced_bytes_when_no_tail_survives():
    for seed in range(50):
        disk = _disk(seed)
        disk.makedirs("d")
        disk.fsync_dir("")
        handle = disk.open("d/f")
        handle.append(b"durable-")
        handle.fsync()
        disk.fsync_dir("d")
        handle.append(b"volatile")
        disk.power_loss()
        content = read_file(disk, "d/f")
        # The fsynced prefix always survives; past it, only a prefix of what was written or zeros.
        assert content.startswith(b"durable-"), (seed, content)
        tail = content[len(b"durable-") :]
        assert b"volatile".startswith(tail) or tail.strip(b"\0") == b"" or (
            b"volatile".startswith(tail.rstrip(b"\0"))
        ), (seed, content)


def test_power_loss_tears_the_tail_at_different_points_across_seeds():
    outcomes = set()
    for seed in range(60):
        disk = _disk(seed)
        handle = disk.open("f")
        handle.append(b"A" * 10)
        handle.fsync()
        disk.fsync_dir("")
        handle.append(b"B" * 100)
        disk.power_loss()
        outcomes.add(len(read_file(disk, "f")))
    assert 10 in outcomes or min(outcomes) >= 10
    assert len(outcomes) > 10, outcomes  # torn at many points, not all-or-nothing


def test_created_file_is_lost_on_power_loss_without_fsync_dir():
    disk = _disk()
    handle = disk.open("new")
    handle.append(b"data")
    handle.fsync()
    disk.power_loss()
    assert not disk.exists("new")


def test_rename_is_durable_only_after_fsync_dir():
    disk = _disk()
    write_file_atomically(disk, "meta", b"old")
    handle = disk.open("meta.tmp")
    handle.append(b"new")
    handle.fsync()
    disk.rename("meta.tmp", "meta")
    assert read_file(disk, "meta") == b"new"
    disk.power_loss()
    assert read_file(disk, "meta") == b"old"
    assert not disk.exists("meta.tmp")  # its creation was never made durable either
    write_file_atomically(disk, "meta", b"newer")
    disk.power_loss()
    assert read_file(disk, "meta") == b"newer"


def test_delete_is_undone_by_power_loss_without_fsync_dir():
    disk = _disk()
    write_file_atomically(disk, "x", b"1")
    disk.delete("x")
    assert not disk.exists("x")
    disk.power_loss()
    assert read_file(disk, "x") == b"1"


def test_directory_survives_power_loss_only_when_parent_was_fsynced():
    disk = _disk()
    handle = disk.open("a/b/f")
    handle.append(b"x")
    handle.fsync()
    disk.fsync_dir("a/b")
    disk.fsync_dir("a")  # "b" durable in "a", but "a" itself is not durable in the root
    disk.power_loss()
    assert not disk.exists("a")
    handle = disk.open("a/b/f")
    handle.append(b"y")
    handle.fsync()
    for directory in ("a/b", "a", ""):
        disk.fsync_dir(directory)
    disk.power_loss()
    assert read_file(disk, "a/b/f") == b"y"


def test_unsynced_truncate_is_undone_by_power_loss_when_nothing_new_was_written():
    disk = _disk()
    write_file_atomically(disk, "f", b"0123456789")
    handle = disk.open("f")
    handle.truncate(4)
    disk.power_loss()
    assert read_file(disk, "f") == b"0123456789"


def test_read_corruption_flips_one_byte_of_the_copy_only():
    disk = _disk(read_corruption_probability=1.0)
    handle = disk.open("f")
    handle.append(bytes(64))
    corrupted = handle.read_at(0, 64)
    assert sum(1 for b in corrupted if b) == 1
    disk.read_corruption_probability = 0.0
    assert handle.read_at(0, 64) == bytes(64)


def test_corrupt_byte_persists_across_power_loss():
    disk = _disk()
    write_file_atomically(disk, "f", b"\x00\x00")
    disk.corrupt_byte("f", 1)
    disk.power_loss()
    assert read_file(disk, "f") == b"\x00\x01"


def test_power_loss_outcome_is_a_function_of_the_seed():
    def run(seed):
        disk = _disk(seed)
        handle = disk.open("f")
        handle.append(b"abc" * 100)
        disk.fsync_dir("")
        handle.fsync()
        handle.append(b"def" * 100)
        disk.power_loss()
        return read_file(disk, "f")

    assert run(7) == run(7)


_operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.binary(min_size=1, max_size=40)),
        st.tuples(st.just("write_at"), st.integers(0, 80), st.binary(min_size=1, max_size=20)),
        st.tuples(st.just("truncate"), st.integers(0, 80)),
        st.tuples(st.just("fsync")),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(_operations, st.integers(0, 2**32))
def test_power_loss_right_after_fsync_restores_exactly_the_fsynced_content(operations, seed):
    disk = _disk(seed)
    handle = disk.open("f")
    disk.fsync_dir("")
    for operation in operations:
        getattr(handle, operation[0])(*operation[1:])
    handle.fsync()
    expected = read_file(disk, "f")
    disk.power_loss()
    assert read_file(disk, "f") == expected


@settings(max_examples=200, deadline=None)
@given(_operations, st.integers(0, 2**32))
def test_power_loss_keeps_a_fsynced_append_only_prefix(operations, seed):
    disk = _disk(seed)
    handle = disk.open("f")
    disk.fsync_dir("")
    appended = b""
    synced_length = 0
    for operation in operations:
        if operation[0] == "append":
            handle.append(operation[1])
            appended += operation[1]
        elif operation[0] == "fsync":
            handle.fsync()
            synced_length = len(appended)
    disk.power_loss()
    content = read_file(disk, "f")
    common = 0
    while common < min(len(content), len(appended)) and content[common] == appended[common]:
        common += 1
    # What survives is: the fsynced prefix, a prefix of the unsynced appends, then possibly zeros.
    assert common >= synced_length, (common, synced_length)
    assert content[common:] == bytes(len(content) - common), content[common:]


def test_armed_crash_fires_before_the_nth_write_and_keeps_earlier_writes():
    from simulations.disk import SimulatedCrash

    disk = _disk()
    handle = disk.open("f")
    disk.arm_crash(3)
    handle.append(b"one")
    handle.append(b"two")
    with pytest.raises(SimulatedCrash):
        handle.append(b"three")
    assert read_file(disk, "f") == b"onetwo"  # a process crash: the page cache survives
    with pytest.raises(StorageError):
        handle.append(b"x")  # and the dead process's handle is gone


def test_armed_power_loss_between_snapshot_rename_and_journal_rewrite_keeps_only_durable_state():
    from simulations.disk import SimulatedCrash

    disk = _disk()
    write_file_atomically(disk, "journal", b"entries 1..61")
    disk.arm_crash(5, power_loss=True)  # delete, append, fsync, rename, then fsync_dir would be the 5th
    with pytest.raises(SimulatedCrash):
        write_file_atomically(disk, "snapshot", b"state at 59")
    assert not disk.exists("snapshot")  # its rename never reached a directory fsync
    assert read_file(disk, "journal") == b"entries 1..61"
