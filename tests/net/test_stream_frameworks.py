"""Stream-processing frameworks on Flotilla, unchanged, each in an environment of its own (they pin their own
client versions; tests/net/pyenv.py): Quix Streams (confluent-kafka underneath) and Faust (faust-streaming,
aiokafka underneath) run an exactly-once count per key, their state kept in a changelog topic, on three real
nodes. The Quix application is SIGKILLed halfway and started again without its local state, so it rebuilds
its counts from the changelog, while a node is SIGKILLed and started again: every input is counted exactly
once, and each key's counts run 1, 2, 3, ... with no gap and no repeat, read back with read_committed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.net.cluster_helpers import clients_cluster, eventually, quorum_status
from tests.net.pyenv import python_with

pytestmark = [pytest.mark.slow, pytest.mark.external]
APPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stream_apps")
QUIX = ["quixstreams==3.28.1"]
FAUST = ["faust-streaming==0.15.3"]
RECORDS = 12_000
WORDS = 97
READ_SECONDS_MAX = 240


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with clients_cluster(str(tmp_path_factory.mktemp("streams"))) as cluster:
        yield cluster


def create_topics(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, 3, 3) for name in names], operation_timeout=30).values():
        future.result(timeout=60)

    def led() -> bool:
        topics = admin.list_topics(timeout=10).topics
        return all(name in topics and len(topics[name].partitions) == 3
                   and all(p.leader >= 0 for p in topics[name].partitions.values()) for name in names)
    eventually(led, 30, what=f"{names} led")


def produce_words(bootstrap: str, topic: str, value) -> dict[str, int]:
    """RECORDS records keyed by WORDS words; how many each word got."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    per_word: dict[str, int] = {}
    for i in range(RECORDS):
        word = f"w{i % WORDS}"
        per_word[word] = per_word.get(word, 0) + 1
        producer.produce(topic, key=word, value=value(word, i))
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    return per_word


class CommittedReader:
    """Everything committed to a topic, read with read_committed from its three partitions (no group)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                                  "isolation.level": "read_committed"})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
        self.records: list[tuple[str, bytes]] = []

    def read(self, until, app: subprocess.Popen | None = None, seconds: float = READ_SECONDS_MAX) -> None:
        """Until `until(records)`; fails after `seconds`, or at once if `app` has exited, with its log's end."""
        deadline = time.monotonic() + seconds
        while not until(self.records):
            assert app is None or app.poll() is None, f"the application exited ({app.returncode}): {log_end(app)}"
            assert time.monotonic() < deadline, f"{len(self.records)} records read in {seconds} s: {log_end(app)}"
            for message in self.consumer.consume(1000, 0.5):
                if message.error() is None:
                    self.records.append((message.key().decode(), message.value()))

    def drain(self, seconds: float) -> None:
        """Read on for `seconds`: whatever was counted twice is committed by then."""
        deadline = time.monotonic() + seconds
        self.read(lambda records: time.monotonic() >= deadline)

    def close(self) -> None:
        self.consumer.close()


def log_end(app: subprocess.Popen | None) -> str:
    if app is None:
        return ""
    with open(app.log_path) as log:
        return log.read()[-3000:]


def start(command: list[str], log_path, **kwargs) -> subprocess.Popen:
    with open(log_path, "a") as log:
        app = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, **kwargs)
    app.log_path = log_path
    return app


def check_counted_once(counted: list[tuple[str, int, int]], per_word: dict[str, int]) -> None:
    """(word, input index, count) for each output: every input once, each word's counts 1..n."""
    indices = [i for _, i, _ in counted]
    assert len(indices) == len(set(indices)) == RECORDS, (len(indices), len(set(indices)))
    by_word: dict[str, list[int]] = {}
    for word, _, count in counted:
        by_word.setdefault(word, []).append(count)
    assert {word: sorted(counts) for word, counts in by_word.items()} == \
        {word: list(range(1, n + 1)) for word, n in per_word.items()}


def test_quix_streams_counts_exactly_once_through_an_application_kill_and_a_node_kill(cluster, tmp_path):
    python = python_with("quix", QUIX)
    bootstrap = cluster.bootstrap_servers
    create_topics(bootstrap, "quix-words", "quix-counts")
    per_word = produce_words(bootstrap, "quix-words", lambda word, i: json.dumps({"word": word, "i": i}).encode())
    state = str(tmp_path / "state")
    command = [python, os.path.join(APPS, "quix_counter.py"), bootstrap, "quix-words", "quix-counts", "quix-counter",
               state]
    reader = CommittedReader(bootstrap, "quix-counts")
    app = start(command, tmp_path / "quix.log")
    try:
        reader.read(lambda records: len(records) >= RECORDS // 4, app)
        app.kill()
        app.wait(30)
        shutil.rmtree(state)  # its counts must come back from the changelog topic
        # The quorum leader: the restarted application's first admin calls are made as it dies, and a broker that
        # named it the controller would send librdkafka to wait for it ("Timed out waiting for controller").
        victim = quorum_status(cluster)["leader_id"]
        cluster.kill(victim)
        app = start(command, tmp_path / "quix.log")
        time.sleep(2)
        cluster.start_node(victim)
        reader.read(lambda records: len({json.loads(value)["i"] for _, value in records}) >= RECORDS, app)
        reader.drain(3)
    finally:
        app.kill()
        app.wait(30)
        reader.close()
    outputs = [json.loads(value) for _, value in reader.records]
    assert all(key == output["word"] for (key, _), output in zip(reader.records, outputs))
    check_counted_once([(o["word"], o["i"], o["count"]) for o in outputs], per_word)


def test_faust_counts_exactly_once_in_a_table(cluster, tmp_path):
    python = python_with("faust", FAUST)
    bootstrap = cluster.bootstrap_servers
    create_topics(bootstrap, "faust-words", "faust-counts")
    per_word = produce_words(bootstrap, "faust-words", lambda word, i: json.dumps(str(i)).encode())
    environment = {**os.environ, "BOOTSTRAP": bootstrap, "SOURCE": "faust-words", "SINK": "faust-counts",
                   "GROUP": "faust-counter"}
    reader = CommittedReader(bootstrap, "faust-counts")
    app = start([python, os.path.join(APPS, "faust_counter.py"), "worker", "-l", "warn"], tmp_path / "faust.log",
                cwd=tmp_path, env=environment)
    try:
        reader.read(lambda records: len(records) >= RECORDS, app)
        reader.drain(3)
    finally:
        app.send_signal(signal.SIGTERM)
        try:
            app.wait(30)
        except subprocess.TimeoutExpired:
            app.kill()
            app.wait(30)
        reader.close()
    counted = []
    for word, value in reader.records:
        index, count = json.loads(value).rsplit(":", 1)
        counted.append((word, int(index), int(count)))
    check_counted_once(counted, per_word)
