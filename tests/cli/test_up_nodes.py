"""`flotilla up --nodes N`: the embedded cluster at another size (1 for development)."""

import os
import signal
import subprocess
import sys
import time

import pytest

CLI = [sys.executable, "-m", "cli.main"]


@pytest.mark.parametrize("args, fragment", [
    (["--nodes", "0"], "--nodes must be between 1 and 9"),
    (["--nodes", "10"], "--nodes must be between 1 and 9"),
    (["--nodes", "2", "--config", "x.toml"], "with --config, the file lists the nodes"),
])
def test_bad_node_counts_are_refused_before_anything_starts(tmp_path, args, fragment):
    result = subprocess.run(CLI + ["up", *args], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and fragment in result.stderr
    assert not os.path.exists(tmp_path / "flotilla-data")


@pytest.mark.slow
def test_one_node_development_cluster_serves_a_topic(tmp_path):
    up = subprocess.Popen(CLI + ["up", "--nodes", "1"], cwd=tmp_path, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert "node 1: kafka 127.0.0.1:9092" in up.stdout.readline()
        deadline = time.monotonic() + 60
        while subprocess.run(CLI + ["topics", "create", "dev", "--partitions", "2"], cwd=tmp_path,
                             capture_output=True, timeout=60).returncode != 0:
            assert time.monotonic() < deadline, "the one-node cluster never accepted a topic"
            time.sleep(0.5)
        described = subprocess.run(CLI + ["topics", "describe", "dev"], capture_output=True, text=True, timeout=60)
        assert described.returncode == 0 and "dev" in described.stdout
        produced = subprocess.run(CLI + ["produce", "dev", "-q"], input="a\nb\n", capture_output=True, text=True,
                                  timeout=60)
        assert produced.returncode == 0, produced.stderr
        consumed = subprocess.run(CLI + ["consume", "dev", "--from-beginning", "--exit"], capture_output=True,
                                  text=True, timeout=60)
        assert sorted(consumed.stdout.split()) == ["a", "b"]
    finally:
        os.killpg(up.pid, signal.SIGTERM)
        up.wait(60)
