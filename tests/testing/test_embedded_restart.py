"""EmbeddedCluster.restart returns once the node serves again: not while the metadata still lists the killed
process's registration (active until its session expires) and the new process waits to register."""

import pytest

from flotilla_testing import FAST_BROKER_SETTINGS, EmbeddedCluster
from tests.net.cluster_helpers import broker_incarnation

pytestmark = [pytest.mark.slow, pytest.mark.external]


def test_a_node_killed_and_restarted_at_once_runs_when_restart_returns():
    session_ms = 15_000  # the restarted node is up well inside the killed process's session
    with EmbeddedCluster(nodes=3, broker={**FAST_BROKER_SETTINGS, "broker_session_timeout_ms": session_ms}) as cluster:
        cluster.create_topic("kept", partitions=2, replication_factor=3)
        before = broker_incarnation(cluster.local, 2)
        assert before["state"] == "RUNNING"
        cluster.kill(2)
        cluster.restart(2)
        after = broker_incarnation(cluster.local, 2)
        assert after["state"] == "RUNNING" and after["epoch"] > before["epoch"]
