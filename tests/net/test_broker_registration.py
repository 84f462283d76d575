"""Brokers restarted on real nodes. A node killed and started again at once: its old registration stays in force
until its session expires, and the node says it is STARTING until then. A whole cluster stopped and started
again: the last node to stop cannot commit its controlled shutdown (no quorum is left to commit it), so its
registration is still active when the cluster comes back. Its clean shutdown file (KIP-966's broker epoch) lets
the controller replace that registration at once; without a readable file the new process is refused as a
duplicate until the old session expires, as before."""

from __future__ import annotations

import json
import os

import pytest

from cli.local_cluster import LocalCluster
from tests.net.cluster_helpers import (FAST_BROKER_SETTINGS, broker_incarnation, cli, cli_json, create_topic,
                                       eventually, logged_events, metadata, wait_for_quorum)
from tests.net.test_metrics_endpoint import scrape

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
            # registered, each process deleted the file of the one before (Kafka's broker does the same)
            assert not os.path.exists(clean_shutdown_file(cluster, node_id))

        # The same restart with node 3's file unreadable: node 3, the last to stop, is refused as a duplicate
        # until its old session expires, and runs after that.
        stop_all_in_order(cluster)
        with open(clean_shutdown_file(cluster, 3), "w", encoding="utf-8") as file:
            file.write("{not json")
        cluster.start()
        wait_for_quorum(cluster, seconds=SESSION_MS / 1000 + 30)
        assert [duplicate_refusals(cluster, n) for n in (1, 2)] == [0, 0]
        assert duplicate_refusals(cluster, 3) >= 1
        assert not os.path.exists(clean_shutdown_file(cluster, 3))  # the unreadable one too, once registered


def test_a_broker_restarted_inside_its_old_session_runs_only_once_its_new_registration_is_in_force(tmp_path):
    """A node killed and started again before the controller fenced the process before it: the image still shows
    the broker active in the old epoch, the new process's registration is refused as a duplicate until that
    session expires, and the node says so itself (STARTING, no epoch; `flotilla_broker_state` 1) until its own
    registration is in force and unfenced (RUNNING, 3), in a newer epoch. The readiness wait of the real-node
    tests (wait_for_quorum) waits for that, where the image alone would have called the broker ready."""
    with LocalCluster(str(tmp_path), nodes=3, metrics=True,
                      broker={**FAST_BROKER_SETTINGS, "broker_session_timeout_ms": SESSION_MS}) as cluster:
        wait_for_quorum(cluster)
        for node_id in cluster.kafka_ports:
            assert broker_incarnation(cluster, node_id)["state"] == "RUNNING"
            assert scrape(cluster, node_id)["flotilla_broker_state"] == {(): 3.0}

        def epochs() -> dict[int, tuple[int, str]]:
            return {b["id"]: (b["epoch"], b["status"]) for b in metadata(cluster, 1)["brokers"]}

        old_epoch, status = epochs()[3]
        assert status == "active" and broker_incarnation(cluster, 3)["epoch"] == old_epoch
        cluster.kill(3)
        cluster.start_node(3)
        eventually(lambda: broker_incarnation(cluster, 3) == {"state": "STARTING", "epoch": None}, 10,
                   what="the restarted node starting")
        assert epochs()[3] == (old_epoch, "active")  # the controller still counts the killed process in
        assert scrape(cluster, 3)["flotilla_broker_state"] == {(): 1.0}
        listed = {b["id"]: b for b in cli_json("brokers", "-b", cluster.bootstrap_of(1))}
        assert (listed[3]["epoch"], listed[3]["status"], listed[3]["state"]) == (old_epoch, "active", "STARTING")
        assert [listed[n]["state"] for n in (1, 2)] == ["RUNNING", "RUNNING"]
        wait_for_quorum(cluster, seconds=SESSION_MS / 1000 + 30)
        assert any(event.get("error") == "DUPLICATE_BROKER_REGISTRATION"
                   for event in logged_events(cluster, "broker_registration_refused", 3))
        new = broker_incarnation(cluster, 3)
        assert new["state"] == "RUNNING" and new["epoch"] > old_epoch
        assert epochs()[3] == (new["epoch"], "active")
        assert scrape(cluster, 3)["flotilla_broker_state"] == {(): 3.0}
        listed = {b["id"]: b for b in cli_json("brokers", "-b", cluster.bootstrap_of(1))}
        assert (listed[3]["epoch"], listed[3]["status"], listed[3]["state"]) == (new["epoch"], "active", "RUNNING")
        cluster.kill(2)  # a node that does not answer has no state to report
        row = next(line.split() for line in cli("brokers", "-b", cluster.bootstrap_of(1)).stdout.splitlines()
                   if line.split()[0] == "2")
        assert row[-1] == "-"
