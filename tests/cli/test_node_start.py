"""`flotilla up` and `flotilla node` fail clearly: a port another program holds, a data directory another node
uses: one line naming the node and the port or path, exit code 2, no traceback, nothing left behind."""

import os
import socket
import subprocess
import sys
import time

import pytest

from cli.local_cluster import free_ports

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def flotilla(*args, cwd, timeout=60):
    return subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": ROOT})


def occupy(port: int) -> socket.socket:
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", port))
    holder.listen()
    return holder


def one_node_config(directory) -> tuple[str, int, int]:
    kafka_port, controller_port = free_ports(2)
    path = os.path.join(directory, "one.toml")
    with open(path, "w") as config:
        config.write(f'cluster_id = "c"\n[[nodes]]\nid = 1\nhost = "127.0.0.1"\nkafka_port = {kafka_port}\n'
                     f'controller_port = {controller_port}\nroles = ["broker", "controller"]\ndata_dir = "data-1"\n')
    return path, kafka_port, controller_port


def test_up_with_a_port_in_use_says_which_and_leaves_nothing_behind(tmp_path):
    path, kafka_port, _ = one_node_config(tmp_path)
    holder = occupy(kafka_port)
    try:
        result = flotilla("up", "--config", path, cwd=tmp_path)
    finally:
        holder.close()
    assert result.returncode == 2, result
    assert f"node 1: kafka_port {kafka_port} on 127.0.0.1 is in use by another program" in result.stderr
    assert "Traceback" not in result.stderr and "ExceptionGroup" not in result.stderr
    assert not (tmp_path / "data-1").exists()


def test_up_without_a_config_creates_no_data_directory_when_a_default_port_is_taken(tmp_path):
    try:
        holder = occupy(9092)
    except OSError:
        holder = None  # another program holds it already: the same situation for `flotilla up`
    try:
        result = flotilla("up", cwd=tmp_path)
    finally:
        if holder is not None:
            holder.close()
    assert result.returncode == 2 and "kafka_port 9092" in result.stderr, result
    assert not (tmp_path / "flotilla-data").exists()


@pytest.mark.slow
def test_a_second_node_on_the_same_data_directory_is_refused(tmp_path):
    path, kafka_port, _ = one_node_config(tmp_path)
    first = subprocess.Popen([sys.executable, "-m", "cli.main", "node", "--config", path, "--id", "1"], cwd=tmp_path,
                             env={**os.environ, "PYTHONPATH": ROOT}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", kafka_port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        second = flotilla("node", "--config", path, "--id", "1", cwd=tmp_path)
        assert second.returncode == 2, second
        assert f"data directory {tmp_path / 'data-1'} is in use by another flotilla node" in second.stderr
        assert "Traceback" not in second.stderr
        assert first.poll() is None  # the first node keeps running
    finally:
        first.terminate()
        first.wait(30)


def test_a_node_whose_port_is_taken_says_so_in_one_line(tmp_path):
    path, kafka_port, controller_port = one_node_config(tmp_path)
    holder = occupy(controller_port)
    try:
        result = flotilla("node", "--config", path, "--id", "1", cwd=tmp_path)
    finally:
        holder.close()
    assert result.returncode == 2, result
    assert result.stderr.strip().splitlines()[-1].startswith("flotilla: node 1: cannot listen on 127.0.0.1")
    assert "Traceback" not in result.stderr
