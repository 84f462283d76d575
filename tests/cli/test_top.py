"""`flotilla top` against a loaded cluster: `--once --json` checked field by field, and the live view in a
real terminal (tmux: start it, read the screen with capture-pane, press q)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

from cli.local_cluster import LocalCluster
from tests.net.cluster_helpers import FAST_BROKER_SETTINGS, create_topic, eventually, wait_for_quorum

pytestmark = [pytest.mark.slow, pytest.mark.external]
CLI = [sys.executable, "-m", "cli.main"]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    from confluent_kafka import Consumer, Producer

    cluster = LocalCluster(str(tmp_path_factory.mktemp("top")), nodes=3, metrics=True,
                           broker={**FAST_BROKER_SETTINGS, "offsets_topic_num_partitions": 3})
    cluster.start()
    wait_for_quorum(cluster)
    create_topic(cluster, "busy", 3, 3)
    stop = threading.Event()

    def load() -> None:
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5})
        while not stop.is_set():
            for _ in range(200):
                producer.produce("busy", b"x" * 100)
            producer.poll(0)
            time.sleep(0.01)
        producer.flush(10)

    thread = threading.Thread(target=load)
    thread.start()
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "slow-readers",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["busy"])
    eventually(lambda: consumer.poll(0.5) is not None, 30, what="the consumer reads")
    consumer.commit(asynchronous=False)
    consumer.close()
    try:
        yield cluster
    finally:
        stop.set()
        thread.join()
        cluster.stop()


def test_once_json_shows_the_loaded_topic_brokers_quorum_and_group_lag(loaded):
    result = subprocess.run(CLI + ["top", "--config", loaded.config_path, "--once", "--json"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    sample = json.loads(result.stdout)
    assert sample["topics"]["busy"]["produce_records_per_s"] > 0
    assert sample["topics"]["busy"]["produce_bytes_per_s"] > 100 * sample["topics"]["busy"]["produce_records_per_s"]
    assert [b["node"] for b in sample["brokers"]] == ["1", "2", "3"] and all(b["up"] for b in sample["brokers"])
    assert sum(b["requests_per_s"] for b in sample["brokers"]) > 0
    assert sample["quorum"]["leader"] in (1, 2, 3) and set(sample["quorum"]["voter_lag"]) == {"1", "2", "3"}
    assert sample["groups"]["slow-readers"] > 0  # the producer runs on; the group committed once
    assert sample["under_replicated_partitions"] == 0


def test_bad_sources_are_one_line_errors(tmp_path):
    no_source = subprocess.run(CLI + ["top", "--once"], capture_output=True, text=True, timeout=30)
    assert no_source.returncode == 2 and "--config FILE" in no_source.stderr
    nobody = subprocess.run(CLI + ["top", "--metrics", "127.0.0.1:1", "--once"], capture_output=True, text=True,
                            timeout=30)
    assert nobody.returncode == 3 and "no metrics endpoint answered" in nobody.stderr


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_live_view_in_a_real_terminal_refreshes_and_q_quits(loaded, tmp_path):
    session = f"flotilla-top-{os.getpid()}"
    status = tmp_path / "status"
    command = f"{sys.executable} -m cli.main top --config {loaded.config_path}; echo EXIT=$? > {status}"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40", "-c", os.getcwd(), command],
                   check=True, timeout=30)
    try:
        def screen() -> str:
            return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True,
                                  timeout=10).stdout

        def shows_rates() -> bool:
            text = screen()
            rows = [line for line in text.splitlines() if "busy" in line]
            return bool(rows) and any(ch.isdigit() and ch != "0" for ch in rows[0].split("busy", 1)[1]) \
                and "quorum leader" in text
        eventually(shows_rates, 30, what="the topic's rates on screen")
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True, timeout=10)
        eventually(lambda: status.exists() and status.read_text().strip() == "EXIT=0", 20, what="exit 0 after q")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True, timeout=10)
