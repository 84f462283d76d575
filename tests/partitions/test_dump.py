"""dump-log (kafka-dump-log): batches, records, indexes, corruption, exit codes."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from cli.dump_log import run
from net.filestorage import FileStorage
from partitions.log import AppendOrigin
from partitions.dump import dump_log, dump_offset_index
from partitions.records import build_batch, build_control_batch, COMMIT
from tests.partitions.logtools import DIRECTORY, batch, open_log

LOG_NAME = "00000000000000000000.log"


def make_segment(tmp_path):
    log = open_log(FileStorage(str(tmp_path)), index_interval_bytes=0)
    log.append_as_leader(build_batch([(b"k1", b"v1", [("h", b"x")]), (b"k2", None)], base_timestamp=5), 3, 1_000)
    log.append_as_leader(build_batch([(None, b"zz")], compression=4, producer_id=9, producer_epoch=1,
                                     base_sequence=0, base_timestamp=6), 3, 1_000)
    log.append_as_leader(build_control_batch(COMMIT, 9, 1, 0, 7), 3, 1_000, origin=AppendOrigin.COORDINATOR)
    log.close()
    return tmp_path / DIRECTORY


def args(*paths, records=False, as_json=False):
    return argparse.Namespace(paths=[str(p) for p in paths], records=records, json=as_json)


def test_json_describes_every_batch(tmp_path, capsys):
    directory = make_segment(tmp_path)
    assert run(args(directory / LOG_NAME, as_json=True)) == 0
    items = json.loads(capsys.readouterr().out)
    assert [(i["base_offset"], i["last_offset"], i["record_count"]) for i in items] == [(0, 1, 2), (2, 2, 1), (3, 3, 1)]
    assert [i["compression"] for i in items] == ["none", "zstd", "none"]
    assert all(i["crc_ok"] and i["leader_epoch"] == 3 for i in items)
    assert (items[1]["producer_id"], items[2]["is_transactional"], items[2]["is_control"]) == (9, True, True)


def test_text_with_records_shows_keys_values_and_headers(tmp_path, capsys):
    directory = make_segment(tmp_path)
    assert run(args(directory / LOG_NAME, records=True)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("baseOffset: 0 lastOffset: 1 count: 2") and "crcValid: true" in out[1]
    assert out[2] == "| offset: 0 timestamp: 5 key: k1 payload: v1 headers: [h=x]"
    assert out[3] == "| offset: 1 timestamp: 5 key: k2 payload: None headers: []"
    assert "compresscodec: zstd" in out[4] and "payload: zz" in out[5]


def test_corrupt_batch_is_reported_and_the_dump_goes_on(tmp_path, capsys):
    directory = make_segment(tmp_path)
    path = directory / LOG_NAME
    data = bytearray(path.read_bytes())
    data[70] ^= 0xFF  # inside the first batch's records
    path.write_bytes(bytes(data) + b"\x00" * 20)
    assert run(args(path, as_json=True)) == 0
    items = json.loads(capsys.readouterr().out)
    assert [i.get("crc_ok") for i in items] == [False, True, True, None]
    assert "trailing" in items[-1]["error"]


def test_index_entries_and_sanity(tmp_path, capsys):
    directory = make_segment(tmp_path)
    assert run(args(directory / "00000000000000000000.index")) == 0
    out = capsys.readouterr().out
    assert "offset: 2 position: " in out and "offset index is sane" in out
    index_path = directory / "00000000000000000000.index"
    index_path.write_bytes(index_path.read_bytes()[:-4] + (1).to_bytes(4, "big"))  # wrong position
    run(args(index_path))
    assert "NOT sane" in capsys.readouterr().out
    assert run(args(directory / "00000000000000000000.timeindex", as_json=True)) == 0
    summary = json.loads(capsys.readouterr().out)[-1]
    assert summary["index"] == "time" and summary["sane"] is True


def test_missing_file_is_an_error_with_exit_code_two(tmp_path, capsys):
    assert run(args(tmp_path / LOG_NAME)) == 2
    assert "cannot read" in capsys.readouterr().err
    assert run(args(tmp_path / "notes.txt")) == 2


def test_module_entry_point(tmp_path):
    directory = make_segment(tmp_path)
    done = subprocess.run([sys.executable, "-m", "cli.dump_log", "--json", str(directory / LOG_NAME)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and len(json.loads(done.stdout)) == 3


def test_pure_dump_stops_at_an_impossible_length():
    data = batch(b"a") + (5).to_bytes(8, "big") + (3).to_bytes(4, "big") + bytes(60)
    result = dump_log(data)
    assert len(result.batches) == 1 and result.error_position == len(batch(b"a"))


def test_offset_index_check_against_the_log():  # kafka-dump-log's index mismatch check
    first = build_batch([(None, b"a")], base_offset=0)
    data = first + build_batch([(None, b"b"), (None, b"c")], base_offset=1)
    entry = lambda offset, position: offset.to_bytes(4, "big") + position.to_bytes(4, "big")  # noqa: E731
    assert dump_offset_index(entry(2, len(first)), 0, data).sane
    mismatch = dump_offset_index(entry(1, len(first)), 0, data)
    assert not mismatch.sane and "ending at offset 2" in mismatch.problems[0]
    assert not dump_offset_index(entry(2, len(first)) + b"\x00", 0, data).sane
