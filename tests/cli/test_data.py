"""`flotilla produce` / `flotilla consume` against the test peer, in-process (cli.main.main) and as processes."""

from __future__ import annotations

import io
import subprocess
import sys
import time

import pytest

from cli import main as cli
from cli.data import compile_format, split_key
from cli.support import UsageError
from cli.local_cluster import free_ports
from partitions.batch import parse_header
from partitions.records import Record
from tests.net.test_client_peer import peer_in_thread


def flotilla(*argv: str, stdin: bytes = b"", timeout_s: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *argv], input=stdin, capture_output=True,
                          timeout=timeout_s)


def run_in_process(monkeypatch, capsysbinary, argv: list[str], stdin: bytes = b"") -> tuple[int, bytes, bytes]:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    exit_code = cli.main(argv)
    out, err = capsysbinary.readouterr()
    return exit_code, out, err


@pytest.fixture
def peer():
    with peer_in_thread() as running:
        yield running


def stored_values(peer, topic: str) -> dict[int, list[bytes]]:
    from partitions.records import iter_records

    return {index: [record.value for _, batch in partition.batches for _, record in iter_records(batch)]
            for index, partition in enumerate(peer.topics[topic].partitions)}


def test_produce_splits_keys_and_consume_prints_the_format(peer, monkeypatch, capsysbinary):
    peer.create_topic("t", 3)
    produced = flotilla("produce", "t", "-b", peer.bootstrap, "--key-separator", ":",
                        stdin=b"a:1\nb:2\na:3\nno key here\n")
    assert produced.returncode == 0, produced.stderr
    code, out, err = run_in_process(monkeypatch, capsysbinary, [
        "consume", "t", "--from-beginning", "--exit", "-b", peer.bootstrap, "--format", "%k|%v|%p|%o|%t\\n"])
    assert code == 0, err
    lines = out.decode().splitlines()
    assert sorted(line.split("|")[:2] for line in lines) == [["", "no key here"], ["a", "1"], ["a", "3"], ["b", "2"]]
    by_key = {line.split("|")[1]: line.split("|") for line in lines}
    assert by_key["1"][2] == by_key["3"][2]  # one key, one partition (murmur2)
    assert [by_key["1"][3], by_key["3"][3]] == ["0", "1"] and by_key["1"][4] == "t"


def test_produce_batches_lines_and_keeps_their_order(peer, monkeypatch, capsysbinary):
    peer.create_topic("t", 1)
    lines = b"".join(b"line-%04d\n" % i for i in range(2000))
    code, _, err = run_in_process(monkeypatch, capsysbinary, [
        "produce", "t", "-b", peer.bootstrap, "--batch-bytes", "4096", "--compression", "gzip"], stdin=lines)
    assert code == 0, err
    assert stored_values(peer, "t")[0] == [b"line-%04d" % i for i in range(2000)]
    batches = peer.topics["t"].partitions[0].batches
    assert 2000 * 10 // 4096 <= len(batches) < 2000
    assert all(parse_header(batch).compression == 1 for _, batch in batches)


def test_produce_last_line_without_newline_and_empty_lines(peer, monkeypatch, capsysbinary):
    peer.create_topic("t", 1)
    code, _, err = run_in_process(monkeypatch, capsysbinary, ["produce", "t", "-b", peer.bootstrap,
                                                              "--partition", "0"], stdin=b"x\n\ny")
    assert code == 0, err
    assert stored_values(peer, "t")[0] == [b"x", b"", b"y"]


def test_produce_with_acks_zero_delivers_without_waiting(peer):
    peer.create_topic("t", 1)
    produced = flotilla("produce", "t", "-b", peer.bootstrap, "--acks", "0", "--partition", "0", stdin=b"a\nb\n")
    assert produced.returncode == 0, produced.stderr
    deadline = time.monotonic() + 5
    while stored_values(peer, "t")[0] != [b"a", b"b"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stored_values(peer, "t")[0] == [b"a", b"b"]


def test_consume_count_partition_and_relative_offset(peer, monkeypatch, capsysbinary):
    peer.create_topic("t", 2)
    produced = flotilla("produce", "t", "-b", peer.bootstrap, "--partition", "1", stdin=b"a\nb\nc\nd\n")
    assert produced.returncode == 0, produced.stderr
    code, out, _ = run_in_process(monkeypatch, capsysbinary, [
        "consume", "t", "-b", peer.bootstrap, "--partition", "1", "--from-beginning", "--count", "2"])
    assert (code, out) == (0, b"a\nb\n")
    code, out, _ = run_in_process(monkeypatch, capsysbinary, [
        "consume", "t", "-b", peer.bootstrap, "--offset", "-1", "--exit"])
    assert (code, out) == (0, b"d\n")
    code, out, _ = run_in_process(monkeypatch, capsysbinary, [
        "consume", "t", "-b", peer.bootstrap, "--partition", "1", "--offset", "2", "--exit", "--format", "%o\\n"])
    assert (code, out) == (0, b"2\n3\n")


def test_consume_timeout_exits_when_idle_at_the_end(peer, monkeypatch, capsysbinary):
    peer.create_topic("t", 1)
    started = time.monotonic()
    code, out, _ = run_in_process(monkeypatch, capsysbinary, [
        "consume", "t", "-b", peer.bootstrap, "--timeout-ms", "300"])
    elapsed = time.monotonic() - started
    assert (code, out) == (0, b"") and 0.3 <= elapsed < 5


def test_consume_unknown_topic_or_partition_is_one_line_exit_1(peer, monkeypatch, capsysbinary):
    peer.create_topic("t", 1)
    code, _, err = run_in_process(monkeypatch, capsysbinary, ["consume", "missing", "-b", peer.bootstrap])
    assert code == 1 and err == b"flotilla: topic 'missing' does not exist\n"
    code, _, err = run_in_process(monkeypatch, capsysbinary, ["consume", "t", "--partition", "5",
                                                              "-b", peer.bootstrap])
    assert code == 1 and b"no partition 5" in err and err.count(b"\n") == 1


def test_unreachable_cluster_is_one_line_and_exit_code_3():
    port = free_ports(1)[0]
    for argv in (["consume", "t"], ["produce", "t"]):
        result = flotilla(*argv, "-b", f"127.0.0.1:{port}", stdin=b"x\n")
        assert result.returncode == 3, result.stderr
        assert result.stderr.decode() == f"flotilla: cannot reach the cluster at 127.0.0.1:{port} (is it running?)\n"


def test_config_file_gives_the_bootstrap_servers(peer, tmp_path, monkeypatch, capsysbinary):
    peer.create_topic("t", 1)
    config = tmp_path / "cluster.toml"
    config.write_text(f'cluster_id = "c"\n[[nodes]]\nid = 1\nhost = "127.0.0.1"\nkafka_port = {peer.port}\n'
                      f'controller_port = {free_ports(1)[0]}\nroles = ["broker", "controller"]\ndata_dir = "d"\n')
    code, _, err = run_in_process(monkeypatch, capsysbinary, ["produce", "t", "--config", str(config)], stdin=b"v\n")
    assert code == 0, err
    code, out, _ = run_in_process(monkeypatch, capsysbinary, ["consume", "--config", str(config), "t",
                                                              "--from-beginning", "--exit"])
    assert (code, out) == (0, b"v\n")
    code, _, err = run_in_process(monkeypatch, capsysbinary, ["consume", "t", "--config", str(tmp_path / "nope")])
    assert code == 2 and b"config file not found" in err


def test_bad_format_token_is_a_usage_error(monkeypatch, capsysbinary):
    code, _, err = run_in_process(monkeypatch, capsysbinary, ["consume", "t", "--format", "%q"])
    assert code == 2 and b"%q" in err


def test_format_tokens_like_kcat():
    record = Record(offset=7, timestamp=1234, key=b"k", value=b"v", headers=(("h1", b"x"), ("h2", None)))
    formatter = compile_format("%t/%p/%o/%T %k=%v %K %S [%h] 100%%\\t\\n")
    assert formatter("topic", 2, record) == b"topic/2/7/1234 k=v 1 1 [h1=x,h2=] 100%\t\n"
    null = Record(offset=0, timestamp=0, key=None, value=None)
    assert compile_format("%k|%v|%K|%S")("t", 0, null) == b"||-1|-1"
    with pytest.raises(UsageError):
        compile_format("%")


def test_key_separator_splits_at_the_first_occurrence_only():
    assert split_key(b"a:b:c", b":") == (b"a", b"b:c")
    assert split_key(b"abc", b":") == (None, b"abc")
    assert split_key(b"a:b", None) == (None, b"a:b")
    assert split_key(b":v", b":") == (b"", b"v")


def test_broker_errors_are_one_line_exit_1(peer, monkeypatch, capsysbinary):
    from partitions.errors import ErrorCode

    peer.create_topic("t", 1)
    peer.produce_error_code = ErrorCode.INVALID_RECORD
    code, _, err = run_in_process(monkeypatch, capsysbinary, ["produce", "t", "-b", peer.bootstrap], stdin=b"a\n")
    assert code == 1 and err.startswith(b"flotilla: produce to t-0: INVALID_RECORD") and err.count(b"\n") == 1
    peer.produce_error_code = ErrorCode.NONE
    assert run_in_process(monkeypatch, capsysbinary, ["produce", "t", "-b", peer.bootstrap], stdin=b"a\n")[0] == 0
    peer.corrupt_fetched_batches = True
    code, out, err = run_in_process(monkeypatch, capsysbinary, ["consume", "t", "-b", peer.bootstrap,
                                                                "--from-beginning", "--exit"])
    assert code == 1 and out == b"" and err.count(b"\n") == 1 and b"CRC" in err.upper(), err


def test_consume_into_a_closed_pipe_exits_quietly(peer):
    peer.create_topic("t", 1)
    produced = flotilla("produce", "t", "-b", peer.bootstrap, stdin=b"".join(b"%d\n" % i for i in range(20_000)))  # more than a pipe buffer
    assert produced.returncode == 0, produced.stderr
    pipeline = subprocess.run(
        f"{sys.executable} -m cli.main consume t -b {peer.bootstrap} --from-beginning --exit | head -n 2",
        shell=True, capture_output=True, timeout=60)
    assert pipeline.stdout == b"0\n1\n"
    assert pipeline.stderr == b""


def test_produce_reports_what_it_wrote_on_stderr_and_is_silent_with_quiet(peer):  # as rpk does
    peer.create_topic("t", 2)
    produced = flotilla("produce", "t", "-b", peer.bootstrap, "--partition", "1", stdin=b"a\nb\nc\n")
    assert produced.returncode == 0 and produced.stdout == b""
    assert produced.stderr.decode().strip() == "flotilla: produced 3 records to t (partition 1: last offset 2)"
    quiet = flotilla("produce", "t", "-b", peer.bootstrap, "--partition", "0", "-q", stdin=b"x\n")
    assert quiet.returncode == 0 and quiet.stderr == b""
    empty = flotilla("produce", "t", "-b", peer.bootstrap, stdin=b"")
    assert "produced no records to t" in empty.stderr.decode()


def test_consume_count_beyond_the_topic_says_it_is_waiting(peer):
    peer.create_topic("t", 1)
    flotilla("produce", "t", "-b", peer.bootstrap, "-q", stdin=b"only\n")
    process = subprocess.Popen([sys.executable, "-m", "cli.main", "consume", "t", "-b", peer.bootstrap,
                                "--from-beginning", "--count", "5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = process.stderr.readline().decode()
        assert line.startswith("flotilla: read 1 of 5 records, at the end of t; waiting for more"), line
        assert process.poll() is None  # still waiting, as asked
    finally:
        process.terminate()
        process.wait(10)
    assert process.stdout.read() == b"only\n"
