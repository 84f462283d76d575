"""`flotilla up` as a supervisor of its nodes (cli/node.py `_Supervisor`), with stand-in processes and a clock of
the test's own: which exits restart a node, which leave it stopped, and which stop the cluster. The real nodes
under `flotilla up` are in tests/net/test_cluster_quorum.py."""

import signal

import pytest

from broker.config import default_config
from cli import node as node_cli


class FakeChild:
    def __init__(self, args):
        self.args = args
        self.returncode = None

    def poll(self):
        return self.returncode


@pytest.fixture
def supervisor(monkeypatch):
    started = []

    def popen(args):
        started.append(FakeChild(args))
        return started[-1]

    monkeypatch.setattr(node_cli.subprocess, "Popen", popen)
    supervisor = node_cli._Supervisor(default_config(nodes=3), "cluster.toml", "info")
    for node_id in (1, 2, 3):
        supervisor.start(node_id, 0.0)
    supervisor.started = started
    return supervisor


def current(supervisor, node_id):
    return supervisor.children[node_id]


def test_a_killed_node_starts_again_after_the_delay_and_the_others_are_left_alone(supervisor, capsys):
    current(supervisor, 2).returncode = -signal.SIGKILL
    assert supervisor.check(60.0) is None
    assert 2 not in supervisor.children and sorted(supervisor.children) == [1, 3]
    assert "node 2 was killed by SIGKILL after 60 s; the others run on" in capsys.readouterr().err
    assert supervisor.check(60.5) is None and 2 not in supervisor.children  # the delay is not over
    assert supervisor.check(61.0) is None
    assert 2 in supervisor.children and len(supervisor.started) == 4
    assert "node 2 started again (restart 1)" in capsys.readouterr().err


def test_a_node_killed_early_still_starts_again_but_one_that_crashes_at_its_first_start_stops_the_cluster(supervisor):
    current(supervisor, 1).returncode = -signal.SIGKILL  # killed by its user while starting
    assert supervisor.check(3.0) is None
    current(supervisor, 3).returncode = 1  # a crash before it ran
    assert supervisor.check(3.5) == "node 3 exited with code 1 3.5 s after it started"
    assert supervisor.exit_code == 1
    assert not supervisor.never_ran  # node 1 had been restarted: the cluster had run


def test_a_first_start_that_fails_at_once_is_a_start_that_never_ran(supervisor):
    current(supervisor, 2).returncode = 1
    assert supervisor.check(2.0) == "node 2 exited with code 1 2.0 s after it started"
    assert supervisor.never_ran and supervisor.exit_code == 1


def test_a_refused_config_stops_the_cluster_even_on_a_restart(supervisor):
    current(supervisor, 2).returncode = -signal.SIGKILL
    supervisor.check(100.0)
    supervisor.check(101.0)
    current(supervisor, 2).returncode = node_cli.EXIT_CONFIG  # say the file was edited into a bad one
    assert supervisor.check(102.0) == "node 2 exited with code 2 1.0 s after it started"
    assert supervisor.exit_code == 2 and not supervisor.never_ran


def test_a_node_that_keeps_failing_soon_after_each_start_stops_the_cluster(supervisor):
    now = 100.0
    current(supervisor, 2).returncode = 1  # a crash after it ran: restarted
    assert supervisor.check(now) is None
    for failure in range(1, node_cli.QUICK_FAILURES_MAX + 1):
        now += node_cli.RESTART_DELAY_SECONDS
        assert supervisor.check(now) is None and 2 in supervisor.children
        now += 2.0
        current(supervisor, 2).returncode = 1
        outcome = supervisor.check(now)
        if failure < node_cli.QUICK_FAILURES_MAX:
            assert outcome is None
        else:
            assert outcome == "node 2 exited with code 1 2.0 s after it started"


def test_a_node_that_runs_long_between_failures_is_restarted_every_time(supervisor):
    now = 0.0
    for restart in range(1, 6):
        now += node_cli.STARTUP_SECONDS + 1
        current(supervisor, 1).returncode = -signal.SIGKILL
        assert supervisor.check(now) is None
        now += node_cli.RESTART_DELAY_SECONDS
        assert supervisor.check(now) is None and supervisor.restarts[1] == restart


def test_a_cleanly_stopped_node_stays_stopped_and_when_all_are_the_supervisor_is_done(supervisor, capsys):
    for node_id in (1, 2, 3):
        assert not supervisor.all_stopped()
        current(supervisor, node_id).returncode = 0
        assert supervisor.check(50.0 + node_id) is None
        assert node_id not in supervisor.children and not supervisor.restart_due
    err = capsys.readouterr().err
    assert "node 3 stopped (exited with code 0); the others run on. To start it again: flotilla node --config " \
           "cluster.toml --id 3" in err
    assert supervisor.all_stopped() and supervisor.running() == []


def test_a_node_that_cannot_read_its_metadata_log_stops_the_cluster_at_once(supervisor):
    current(supervisor, 3).returncode = node_cli.EXIT_METADATA  # the same at every start: no restart helps
    assert supervisor.check(300.0) == "node 3 exited with code 4 300.0 s after it started"
    assert supervisor.exit_code == 4 and not supervisor.restart_due


def test_the_exit_codes_it_reads_are_the_nodes_own():
    from net import node as node_runtime

    assert (node_cli.EXIT_CONFIG, node_cli.EXIT_METADATA) == (node_runtime.EXIT_CONFIG, node_runtime.EXIT_METADATA)
