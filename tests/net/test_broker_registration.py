"""A whole cluster stopped and started again on real nodes: the last node to stop cannot commit its controlled
shutdown (no quorum is left to commit it), so its registration is still active when the cluster comes back. Its
clean shutdown file (KIP-966's broker epoch) lets the controller replace that registration at once; without a
readable file the new process is refused as a duplicate until the old session expires, as before."""

from __future__ import annotations

import json
import os

import pytest

from cli.local_cluster import LocalCluster
from tests.net.cluster_helpers import (FAST_BROKER_SETTINGS, broker_incarnation, create_topic, logged_events,
                                       metadata, wait_for_quorum)

pytestmark = [pytest.mark.slow, pytest.mark.external]

SESSION_MS = 15_000  # far longer than a node's start, so a registration left in force is still in force then


def duplicate_refusals(cluster, node_id: int) -> int:
    return sum(1 for event in logged_events(cluster, "broker_registration_refused", node_id)
               if event.get("error") == "DUPLICATE_BROKER_REGISTRATION")


def stop_all_in_order(cluster) -> dict[int, int]:
    """SIGTERM nodes 1, 2, 3, one after the other; the broker epochs they were registered in."""
    epochs = {b["id"]: b["epoch"] for b in metadata(cluster)["brokers"]}
    for node_id in sorted(cluster.kafka_ports):
        cluster.kill(node_id, signum=15)
    return epochs


def clean_shutdown_file(cluster, node_id: int) -> str:
    return os.path.join(cluster.directory, f"node-{node_id}", "broker-clean-shutdown.json")


def test_a_whole_cluster_restart_replaces_the_last_nodes_registration_at_once(tmp_path):
    with LocalCluster(str(tmp_path), nodes=3,
                      broker={**FAST_BROKER_SETTINGS, "broker_session_timeout_ms": SESSION_MS}) as cluster:
        wait_for_quorum(cluster)
        create_topic(cluster, "kept", 3, 3)
        epochs = stop_all_in_order(cluster)
        for node_id, epoch in epochs.items():
            with open(clean_shutdown_file(cluster, node_id), encoding="utf-8") as file:
                assert json.load(file) == {"version": 0, "brokerEpoch": epoch}
        cluster.start()
        wait_for_quorum(cluster, seconds=SESSION_MS / 1000 + 30)
        assert [duplicate_refusals(cluster, n) for n in (1, 2, 3)] == [0, 0, 0]
        for node_id, epoch in epochs.items():
            assert broker_incarnation(cluster, node_id)["epoch"] > epoch

        # The same restart with node 3's file unreadable: node 3, the last to stop, is refused as a duplicate
        # until its old session expires, and runs after that.
        stop_all_in_order(cluster)
        with open(clean_shutdown_file(cluster, 3), "w", encoding="utf-8") as file:
            file.write("{not json")
        cluster.start()
        wait_for_quorum(cluster, seconds=SESSION_MS / 1000 + 30)
        assert [duplicate_refusals(cluster, n) for n in (1, 2)] == [0, 0]
        assert duplicate_refusals(cluster, 3) >= 1
