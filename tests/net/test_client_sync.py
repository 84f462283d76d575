"""SyncKafkaClient: blocking calls from plain threads through one background trio loop."""

from __future__ import annotations

import pickle
import threading

import pytest

from net.client.sync import ClientClosedError, SyncKafkaClient
from partitions.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError
from partitions.records import build_batch
from tests.net.test_client_peer import peer_in_thread


def test_blocking_produce_fetch_and_typed_errors():
    with peer_in_thread() as peer, SyncKafkaClient(peer.bootstrap, retry_backoff_ms=5, retries_max=1) as client:
        client.create_topics(["t"])
        with pytest.raises(TopicAlreadyExistsError):
            client.create_topics(["t"])
        assert client.produce("t", 0, build_batch([(b"k", b"v")])) == 0
        result = client.fetch("t", 0, 0)
        assert [(r.key, r.value) for r in result.records] == [(b"k", b"v")]
        with pytest.raises(UnknownTopicOrPartitionError):
            client.fetch("missing", 0, 0)


def test_pickled_client_carries_configuration_only_and_connects_lazily():
    with peer_in_thread() as peer:
        peer.create_topic("t", 1)
        original = SyncKafkaClient(peer.bootstrap, client_id="spark-executor", request_timeout_ms=1234)
        copy = pickle.loads(pickle.dumps(original))
        assert copy._thread is None and copy._config["request_timeout_ms"] == 1234
        with copy:
            assert copy.partitions_for("t") == [0]
        original.close()


def test_many_threads_share_one_client():
    with peer_in_thread() as peer, SyncKafkaClient(peer.bootstrap) as client:
        peer.create_topic("t", 1)
        failures = []

        def produce_some(thread_index: int) -> None:
            try:
                for i in range(10):
                    client.produce_records("t", [(None, b"%d-%d" % (thread_index, i))], partition=0)
            except Exception as error:  # reported below
                failures.append(error)

        threads = [threading.Thread(target=produce_some, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert failures == []
        values = [r.value for r in client.fetch("t", 0, 0).records]
        assert sorted(values) == sorted(b"%d-%d" % (n, i) for n in range(4) for i in range(10))
        for n in range(4):  # each thread's records stay in its order
            mine = [v for v in values if v.startswith(b"%d-" % n)]
            assert mine == [b"%d-%d" % (n, i) for i in range(10)]


def test_closed_client_refuses_calls_and_stops_its_thread():
    with peer_in_thread() as peer:
        client = SyncKafkaClient(peer.bootstrap)
        client.metadata()
        thread = client._thread
        client.close()
        client.close()
        assert not thread.is_alive()
        with pytest.raises(ClientClosedError):
            client.metadata()


def test_bad_bootstrap_is_refused_at_construction():
    with pytest.raises(ValueError, match="HOST:PORT"):
        SyncKafkaClient("no-port")
