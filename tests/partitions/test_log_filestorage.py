"""The partition log over real files (net.filestorage.FileStorage): the same behaviour on disk."""

from __future__ import annotations

import os
import shutil

import pytest

from net.filestorage import FileStorage
from partitions.storage import StorageError
from tests.partitions.logtools import DIRECTORY, batch, open_log, values


def test_log_on_real_files_appends_rolls_recovers_and_reads_with_a_file_descriptor(tmp_path):
    storage = FileStorage(str(tmp_path))
    size = len(batch(b"v0"))
    log = open_log(storage, segment_bytes=size * 3, flush_messages=1)
    for i in range(7):
        log.append_as_leader(batch(b"v%d" % i), 2, 1_000 + i)
    fetched = log.read(0, 1 << 20)
    assert all(piece.handle.fileno() is not None for piece in fetched.slices)
    piece = fetched.slices[0]
    assert os.pread(piece.handle.fileno(), piece.size, piece.position) == fetched.records[: piece.size]
    names = sorted(os.listdir(tmp_path / DIRECTORY))
    assert "00000000000000000003.log" in names and "leader-epoch-checkpoint" in names
    # crash: tear the active segment on disk, then reopen
    active = tmp_path / DIRECTORY / "00000000000000000006.log"
    os.truncate(active, active.stat().st_size - 3)
    reopened = open_log(FileStorage(str(tmp_path)), segment_bytes=size * 3)
    assert reopened.log_end_offset == 6
    assert [offset for offset, _ in values(reopened)] == list(range(6))
    reopened.append_as_leader(batch(b"again"), 3, 2_000)
    reopened.close()
    final = open_log(FileStorage(str(tmp_path)), segment_bytes=size * 3)
    assert values(final)[-1] == (6, b"again")
    assert final.epoch_cache.entries() == [(2, 0), (3, 6)]


def test_deleted_segment_stays_readable_through_an_open_slice(tmp_path):
    storage = FileStorage(str(tmp_path))
    size = len(batch(b"v0"))
    log = open_log(storage, segment_bytes=size, file_delete_delay_ms=60_000, now_ms=0)
    for i in range(3):
        log.append_as_leader(batch(b"v%d" % i), 0, 0)
    fetched = log.read(0, size)
    log.delete_records_before(2)
    assert fetched.records == batch_at_offset(0, fetched.records)
    assert any(name.endswith(".deleted") for name in os.listdir(tmp_path / DIRECTORY))
    log.maybe_flush(60_001)
    assert not any(name.endswith(".deleted") for name in os.listdir(tmp_path / DIRECTORY))


def batch_at_offset(offset: int, data: bytes) -> bytes:
    assert int.from_bytes(data[:8], "big") == offset
    return data


def test_a_new_log_on_real_files_has_no_file_until_its_first_record_then_no_index_until_an_entry(tmp_path):
    storage = FileStorage(str(tmp_path))
    log = open_log(storage)
    log.assign_epoch_start(0, 0)
    assert os.listdir(tmp_path / DIRECTORY) == []
    log.close()
    log = open_log(storage)  # a directory without segments: the same empty log
    assert (log.log_start_offset, log.log_end_offset, os.listdir(tmp_path / DIRECTORY)) == (0, 0, [])
    log.assign_epoch_start(0, 0)
    log.append_as_leader(batch(b"a"), 0, 1_000)
    assert sorted(os.listdir(tmp_path / DIRECTORY)) == ["00000000000000000000.log", "leader-epoch-checkpoint"]
    log.close()
    assert values(open_log(storage)) == [(0, b"a")]


def test_the_volume_of_a_directory_is_its_absolute_path_and_the_filesystem_s_sizes(tmp_path):
    storage = FileStorage(str(tmp_path / "root"))
    storage.makedirs("logs")
    volume = storage.volume("logs")
    stats = os.statvfs(tmp_path)
    assert volume.path == str(tmp_path / "root" / "logs") and volume.total_bytes == stats.f_blocks * stats.f_frsize
    assert 0 < volume.usable_bytes <= volume.total_bytes
    shutil.rmtree(tmp_path / "root")
    with pytest.raises(StorageError):
        storage.volume("logs")
