"""A rolling upgrade: three real nodes start on the previous release's code and are restarted one by one on this
code while a confluent-kafka producer writes (idempotent, acks=all), as an operator upgrades a running cluster.

Nodes of the two releases share the metadata log (records written by either controller are replayed by the
other's brokers), the controller's requests (a registration reaches whichever node leads the quorum), the
Kafka protocol between brokers and each other's data directories. The test passes through the two mixed
states that matter: the previous release leading the quorum with this code's brokers registering with it, and
this code leading it with a node of the previous release replaying what it writes (a topic created then must
reach that node's metadata). In the end every acknowledged record is read back once and a group's offsets,
committed under the previous release, are still there.

PREVIOUS_RELEASE is the oldest code this one must roll from; its source comes from this repository's history
(`git archive`), so the test needs a clone with that commit.

The other way round, a node of a later release whose registration this code's controller cannot read (a field
it does not know) is refused, and its log says why instead of the node waiting in silence; a metadata entry this
code cannot read stops the node that reaches it, with exit code 4 and a line naming the entry, at every start.
"""

import os
import subprocess
import tarfile
import threading
import time

import pytest

from cli.local_cluster import LocalCluster
from tests.net.cluster_helpers import (FAST_BROKER_SETTINGS, create_topic, eventually, logged_events, metadata,
                                      quorum_status, topic_of, wait_for_quorum)

pytestmark = [pytest.mark.slow, pytest.mark.external]

PREVIOUS_RELEASE = "18adfc5743572cf900065758ced505119327aef4"
TOPIC = "rolling"
REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _previous_release(tmp_path) -> str:
    archive = tmp_path / "previous.tar"
    found = subprocess.run(["git", "-C", REPOSITORY, "archive", "--format=tar", "-o", str(archive), PREVIOUS_RELEASE],
                           capture_output=True, text=True)
    assert found.returncode == 0, f"the previous release {PREVIOUS_RELEASE} is not in this clone: {found.stderr}"
    source = tmp_path / "previous"
    with tarfile.open(archive) as tar:
        tar.extractall(source, filter="data")
    return str(source)


class _Writer(threading.Thread):
    """Writes numbered records until stopped; `acknowledged` holds the numbers the cluster acknowledged."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": 120_000})
        self.acknowledged: set[int] = set()
        self.failures: list = []
        self.stopping = threading.Event()

    def _delivered(self, error, message) -> None:
        if error is None:
            self.acknowledged.add(int(message.value()))
        else:
            self.failures.append(error)

    def run(self) -> None:
        number = 0
        while not self.stopping.is_set() and number < 200_000:
            self.producer.produce(TOPIC, value=str(number).encode(), on_delivery=self._delivered)
            number += 1
            self.producer.poll(0)
            time.sleep(0.002)
        self.producer.flush(120)


def _restart(cluster: LocalCluster, node_id: int, source: str | None) -> None:
    """Stop the node cleanly and start it on `source` (None: this code); wait until the cluster is whole."""
    cluster.kill(node_id, 15)
    if source is None:
        cluster.node_sources.pop(node_id, None)
    else:
        cluster.node_sources[node_id] = source
    cluster.start_node(node_id)
    wait_for_quorum(cluster, seconds=60)


def _read_all(bootstrap: str, group: str, expected: int) -> list[int]:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    numbers: list[int] = []
    deadline = time.monotonic() + 60
    while len(numbers) < expected and time.monotonic() < deadline:
        for message in consumer.consume(10_000, timeout=0.5):
            if message.error() is None:
                numbers.append(int(message.value()))
    if numbers:
        consumer.commit(asynchronous=False)
    consumer.close()
    return numbers


def test_a_cluster_rolls_from_the_previous_release_under_load(tmp_path):
    from confluent_kafka import Consumer, TopicPartition

    previous = _previous_release(tmp_path)
    cluster = LocalCluster(str(tmp_path / "cluster"), nodes=3, broker=FAST_BROKER_SETTINGS, log_level="warning",
                           node_sources={node_id: previous for node_id in (1, 2, 3)})
    cluster.start()
    writer = None
    try:
        wait_for_quorum(cluster, seconds=60)
        create_topic(cluster, TOPIC, 3, 3, min_insync_replicas="2")
        writer = _Writer(cluster.bootstrap_servers)
        writer.start()
        eventually(lambda: len(writer.acknowledged) >= 500, 60, what="records acknowledged by the previous release")
        committed_before = len(_read_all(cluster.bootstrap_servers, "before", 500))
        assert committed_before >= 500

        # The two nodes that do not lead the quorum first: the previous release's controller registers them.
        leader = quorum_status(cluster)["leader_id"]
        for node_id in [n for n in (1, 2, 3) if n != leader]:
            _restart(cluster, node_id, None)
        # Once more: this code wrote its clean shutdown file at the stop, and its registration's tagged previous
        # epoch is refused by the previous release's controller, which reads no tagged field; the broker then
        # registers without it. (A restart may move the quorum's leadership to a node of this code, which reads
        # the field: then nothing is refused.)
        again = min(n for n in (1, 2, 3) if n != leader)
        previous_leads = quorum_status(cluster)["leader_id"] == leader
        _restart(cluster, again, None)
        refusals = [(r["error"], r["reason"]) for r in logged_events(cluster, "broker_registration_refused", again)]
        if previous_leads and quorum_status(cluster)["leader_id"] == leader:
            assert refusals == [("INVALID_REQUEST", "BrokerRegistrationRequest: unknown field(s) ['t']")]
        else:
            assert all(error != "DUPLICATE_BROKER_REGISTRATION" for error, _ in refusals), refusals
        # Move the quorum's leadership to this code while the last node still runs the previous release. The
        # restarted node may win the election that its stop started (any voter whose timer runs out first can):
        # then once more.
        for _ in range(4):
            _restart(cluster, leader, previous)
            now_leading = quorum_status(cluster)["leader_id"]
            if now_leading != leader:
                break
        assert now_leading != leader, "a node of this code should lead once the old leader restarted"
        create_topic(cluster, "after", 2, 3)
        seen = eventually(lambda: topic_of(metadata(cluster, leader), "after"), 30,
                          what="the previous release's node replaying a topic this code's controller created")
        assert all(p["leader"] >= 0 for p in seen["partitions"]), seen
        _restart(cluster, leader, None)

        writer.stopping.set()
        writer.join(150)
        assert not writer.is_alive()
        assert writer.failures == []
        acknowledged = writer.acknowledged
        assert len(acknowledged) >= 1_000

        numbers = _read_all(cluster.bootstrap_servers, "after", len(acknowledged))
        assert acknowledged <= set(numbers), sorted(acknowledged - set(numbers))[:10]
        assert len(numbers) == len(set(numbers)), "an idempotent producer's record was written twice"

        # The offsets the group committed under the previous release, read through this code's coordinator.
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "before"})
        offsets = consumer.committed([TopicPartition(TOPIC, p) for p in range(3)], timeout=30)
        consumer.close()
        assert sum(tp.offset for tp in offsets) == committed_before
    finally:
        if writer is not None:
            writer.stopping.set()
        cluster.stop()


def _later_release(directory, codec: str, field: str, only: str | None = None) -> str:
    """A directory whose sitecustomize.py, loaded by a node started with it on its path, adds `field` to what
    the codec `codec` (its module's path, then its name there) writes: every value, or `only` that type's, as a
    later release's additions would. Returns the directory."""
    module = codec.rsplit(".", 1)[0]
    directory.mkdir()
    (directory / "sitecustomize.py").write_text(f"""
import cbor2
import {module}

_encode = {codec}.encode


def _encode_as_a_later_release(value):
    data = _encode(value)
    if {only!r} in (None, type(value).__name__):
        body = cbor2.loads(data)
        body[{field!r}] = "a later release"
        data = cbor2.dumps(body)
    return data


{codec}.encode = _encode_as_a_later_release
""")
    return str(directory)


def test_a_later_release_whose_registration_cannot_be_read_is_refused_and_says_why(tmp_path):
    later = _later_release(tmp_path / "later", "metadata.requests._REQUESTS", "availability_zone",
                           only="BrokerRegistrationRequest")
    cluster = LocalCluster(str(tmp_path / "cluster"), nodes=3, broker=FAST_BROKER_SETTINGS, log_level="warning",
                           broker_only=1)
    [newcomer] = cluster.broker_only_ids
    cluster.node_sources[newcomer] = later
    cluster.start()
    try:
        wait_for_quorum(cluster, (1, 2, 3), seconds=60)

        def refused():
            with open(cluster.log_path(newcomer)) as log:
                return [line for line in log if "broker_registration_refused" in line]

        [line] = eventually(refused, 30, what="the later release's node logging its refused registration")
        assert "INVALID_REQUEST" in line and "unknown field(s) ['availability_zone']" in line, line
        brokers = {b["id"] for b in metadata(cluster, 1, 2, 3)["brokers"]}
        assert brokers == {1, 2, 3}  # refused, so never registered; the others serve on
        assert cluster.is_running(newcomer)
        time.sleep(2)  # its retries go on, refused each time: still one line, not one per retry
        assert len(refused()) == 1
    finally:
        cluster.stop()


def _exit_code(cluster: LocalCluster, node_id: int) -> int:
    cluster.start_node(node_id, wait=False)
    return cluster.processes[node_id].wait(timeout=60)


def test_a_metadata_entry_this_code_cannot_read_stops_the_node_at_every_start(tmp_path):
    later = _later_release(tmp_path / "later", "metadata.records._CODEC", "written_by")
    cluster = LocalCluster(str(tmp_path / "cluster"), nodes=1, broker=FAST_BROKER_SETTINGS, log_level="warning",
                           node_sources={1: later})
    try:
        assert _exit_code(cluster, 1) == 4  # it wrote its first entry, then could not read it back
        del cluster.node_sources[1]
        assert _exit_code(cluster, 1) == 4  # on this code too: the entry is in its log
        with open(cluster.log_path(1)) as log:
            text = log.read()
        assert text.count('"event": "metadata_unreadable"') == 2, text[-2000:]
        stopped = [line for line in text.splitlines() if line.startswith("flotilla: node 1: stopped")]
        assert len(stopped) == 2 and all("cannot read the metadata log entry" in line and
                                         "unknown field(s) ['written_by']" in line for line in stopped), stopped
        assert "Traceback" not in text
    finally:
        cluster.stop()
