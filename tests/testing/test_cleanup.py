"""The embedded cluster leaves nothing behind: not after a failing test, not after an interrupted run (the
pytest process SIGKILLed mid-test), not outside pytest."""

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from cli.local_cluster import LocalCluster
from flotilla_testing import EmbeddedCluster

pytestmark = [pytest.mark.slow]


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is gone for our purpose
        return stat.read().split()[2] != "Z"


def test_the_context_manager_stops_nodes_and_removes_its_directory():
    with EmbeddedCluster() as cluster:
        port, directory = cluster.local.kafka_ports[1], cluster.directory
        pids = [p.pid for p in cluster.local.processes.values()]
        assert listening(port) and os.path.isdir(directory)
    assert not listening(port) and not os.path.exists(directory)
    assert not any(alive(pid) for pid in pids)


def run_suite(tmp_path, body: str) -> subprocess.Popen:
    (tmp_path / "test_user.py").write_text(textwrap.dedent(body))
    return subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-s", str(tmp_path)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_failing_test_and_a_killed_pytest_leave_no_node_and_no_port(tmp_path):
    failing = run_suite(tmp_path, """
        def test_fails(flotilla_cluster):
            print("PORT", flotilla_cluster.local.kafka_ports[1],
                  "PIDS", *[p.pid for p in flotilla_cluster.local.processes.values()], flush=True)
            assert False, "a failing user test"
    """)
    output = failing.communicate(timeout=120)[0]
    assert failing.returncode == 1 and "a failing user test" in output
    line = next(line for line in output.splitlines() if "PORT" in line).split()
    port, pids = int(line[line.index("PORT") + 1]), [int(p) for p in line[line.index("PIDS") + 1:]]
    assert not listening(port) and not any(alive(pid) for pid in pids)

    killed = run_suite(tmp_path, """
        import time
        def test_hangs(flotilla_cluster):
            print("PORT", flotilla_cluster.local.kafka_ports[1],
                  "PIDS", *[p.pid for p in flotilla_cluster.local.processes.values()], flush=True)
            time.sleep(120)
    """)
    line = ""
    deadline = time.monotonic() + 60
    while "PIDS" not in line and time.monotonic() < deadline:
        line = killed.stdout.readline()
    words = line.split()
    port, pids = int(words[words.index("PORT") + 1]), [int(p) for p in words[words.index("PIDS") + 1:]]
    assert listening(port)
    killed.send_signal(signal.SIGKILL)  # no finalizer runs: the nodes die with their parent
    killed.wait(30)
    deadline = time.monotonic() + 20
    while (listening(port) or any(alive(pid) for pid in pids)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not listening(port) and not any(alive(pid) for pid in pids)


def test_a_node_restarted_from_a_thread_outlives_the_thread(tmp_path):
    """The nodes die with the process that started them (PR_SET_PDEATHSIG), which Linux ties to the thread that
    forked them: a node restarted from a thread that then ended (a test's chaos thread) was SIGKILLed with it
    while the cluster went on as if it ran. Every node now starts from one thread that lives with the process."""
    cluster = LocalCluster(str(tmp_path / "cluster"), nodes=1, log_level="warning")
    cluster.start()
    try:
        def restart() -> None:
            cluster.kill(1)
            cluster.start_node(1)

        chaos = threading.Thread(target=restart)
        chaos.start()
        chaos.join(90)
        assert not chaos.is_alive()
        pid = cluster.processes[1].pid
        time.sleep(1.0)  # SIGKILL on the thread's end would have landed by now
        assert cluster.is_running(1) and alive(pid) and listening(cluster.kafka_ports[1])
    finally:
        cluster.stop()
