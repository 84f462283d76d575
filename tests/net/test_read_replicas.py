"""net/client/read_replica.py: which replica a client with a rack fetches a partition from (KIP-392)."""

from __future__ import annotations

from net.client.read_replica import READ_REPLICA_BACKOFF_S, ReadReplicas


def test_a_named_replica_is_followed_until_it_fails_then_the_leader_is_asked_without_the_rack_a_while():
    now = [100.0]
    routes = ReadReplicas("rack-b", clock=lambda: now[0])
    key = ("t", 0)
    assert routes.replica(key) is None and routes.rack_for_leader(key) == "rack-b"
    assert routes.named(key, 2, leader=1) and routes.replica(key) == 2
    assert routes.replica(("t", 1)) is None  # per partition
    routes.failed(key)
    assert routes.replica(key) is None and routes.rack_for_leader(key) == ""
    now[0] += READ_REPLICA_BACKOFF_S
    assert routes.rack_for_leader(key) == "rack-b"


def test_no_replica_is_taken_without_a_rack_or_when_the_leader_names_none_or_itself():
    assert not ReadReplicas("").named(("t", 0), 2, leader=1)
    routes = ReadReplicas("rack-a")
    assert not routes.named(("t", 0), -1, leader=1) and not routes.named(("t", 0), 1, leader=1)
    assert routes.replica(("t", 0)) is None
