"""Where the source's fetches go with `kafka.client.rack` (KIP-392): to the replica the leader names, back to the
leader when that replica fails, and then to the leader without the rack (so it answers records itself instead of
naming the failed replica again) for READ_REPLICA_BACKOFF_S. Over a scripted fetch_raw; the real thing, on a
racked cluster with SparkSession, is in test_spark_source.py."""

from __future__ import annotations

import pytest

from net.client import read_replica
from partitions.errors import ErrorCode, KafkaError
from spark import cluster, source
from spark.cluster import RawFetch

LEADER, FOLLOWER = 1, 2


def _split(rack: str = "rack-b") -> source.FlotillaInputPartition:
    return source.FlotillaInputPartition("t", 0, 0, 100, "127.0.0.1:9092", True, False, 1 << 20, 1000, 30_000,
                                         client_rack=rack)


class ScriptedCluster:
    """fetch_raw's stand-in: the leader names FOLLOWER to a reader with a rack (no records) and answers records
    to one without; FOLLOWER answers records, or fails while `follower_down`."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []  # (who answered, rack sent)
        self.follower_down = False

    def fetch_raw(self, client, topic, partition, offset, bytes_max, isolation_level=0, rack_id="", replica=None):
        if replica is not None:
            self.calls.append(("follower", rack_id))
            if self.follower_down:
                return RawFetch(b"", -1, -1, KafkaError("follower gone", ErrorCode.NETWORK_EXCEPTION))
            return RawFetch(b"records", 100, 0, None)
        self.calls.append(("leader", rack_id))
        if rack_id:
            return RawFetch(b"", 100, 0, None, (), FOLLOWER)
        return RawFetch(b"records", 100, 0, None)


@pytest.fixture
def scripted(monkeypatch):
    scripted = ScriptedCluster()
    monkeypatch.setattr(cluster, "fetch_raw", scripted.fetch_raw)
    return scripted


def test_the_fetches_follow_the_leaders_pointer_to_the_replica(scripted):
    with source._Fetcher(None, _split()) as fetcher:
        assert fetcher.fetch(0).records == b"records"
        assert fetcher.read_replica == FOLLOWER
        fetcher.fetch(10)
    assert scripted.calls == [("leader", "rack-b"), ("follower", "rack-b"), ("follower", "rack-b")]


def test_a_failed_replica_sends_the_reads_to_the_leader_without_the_rack_for_a_while(scripted, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(read_replica.time, "monotonic", lambda: now[0])
    with source._Fetcher(None, _split()) as fetcher:
        fetcher.fetch(0)
        scripted.follower_down = True
        scripted.calls.clear()
        assert fetcher.fetch(10).records == b"records"  # answered by the leader, not an empty read
        assert scripted.calls == [("follower", "rack-b"), ("leader", "")] and fetcher.read_replica is None
        scripted.follower_down = False
        now[0] += read_replica.READ_REPLICA_BACKOFF_S - 1
        fetcher.fetch(20)
        assert scripted.calls[-1] == ("leader", "")  # still backing off
        now[0] += 2
        scripted.calls.clear()
        fetcher.fetch(30)
        assert scripted.calls == [("leader", "rack-b"), ("follower", "rack-b")]  # the rack again


def test_a_reader_without_a_rack_reads_from_the_leader(scripted):
    with source._Fetcher(None, _split(rack="")) as fetcher:
        fetcher.fetch(0)
        fetcher.fetch(10)
    assert scripted.calls == [("leader", ""), ("leader", "")]


def test_the_option_is_parsed_into_the_source_options():
    from spark.options import parse_source_options

    options = parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                                    "kafka.client.rack": " rack-b "}, streaming=False)
    assert options.client_rack == "rack-b"
    assert parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t"}, streaming=False).client_rack == ""
