"""Helpers for tests that run real `flotilla node` processes (cli.local_cluster.LocalCluster)."""

from __future__ import annotations

import collections
import contextlib
import json
import subprocess
import sys
import time
from typing import Any, Callable, Iterator

import flotilla_testing

# A broker fenced 3 s after its last heartbeat, and a classic group's first rebalance not held back 3 s for more
# members (Kafka's own config/server.properties sets group.initial.rebalance.delay.ms=0 for development and
# testing): the settings of the embedded cluster, one definition.
FAST_BROKER_SETTINGS = flotilla_testing.FAST_BROKER_SETTINGS


@contextlib.contextmanager
def clients_cluster(directory: str) -> Iterator[Any]:
    """The three real nodes of the client compatibility tests, at quorum (FAST_BROKER_SETTINGS, and 5 partitions
    each for __consumer_offsets and __transaction_state, so that groups and transactions start quickly);
    stopped on leaving."""
    from cli.local_cluster import LocalCluster

    with LocalCluster(directory, nodes=3, broker={
            **FAST_BROKER_SETTINGS, "offsets_topic_num_partitions": 5, "transaction_state_log_num_partitions": 5}) \
            as cluster:
        wait_for_quorum(cluster)
        yield cluster


def in_process_node(tmp_path, cluster_id: str = "single", broker: dict | None = None) -> Any:
    """A one-node cluster's node (broker and controller) on free 127.0.0.1 ports, in this process (net.node.Node,
    to run in a trio nursery: `await nursery.start(node.run)`), not started; `broker`: [broker] settings."""
    from broker.config import parse_config
    from cli.local_cluster import free_ports
    from net.node import Node

    kafka_port, controller_port = free_ports(2)
    config = parse_config({
        "cluster_id": cluster_id,
        "nodes": [{"id": 1, "host": "127.0.0.1", "kafka_port": kafka_port, "controller_port": controller_port,
                   "roles": ["broker", "controller"], "data_dir": "node-1"}],
        "topic_defaults": {"partitions": 1, "replication_factor": 1, "min_insync_replicas": 1},
        "broker": broker or {},
    }, "<test>", str(tmp_path))
    return Node(config, 1)


async def create_led_topic(node: Any, name: str) -> None:
    """On a started `in_process_node`: wait until its broker is active (a fenced broker is given no replica),
    create `name` (one partition, one replica) through its controller, and wait until the node leads it."""
    import trio

    from metadata.requests import CreatableTopic, CreateTopicsRequest
    from partitions.errors import ErrorCode

    while not node.broker.image.cluster.is_active(1):
        await trio.sleep(0.05)
    created = await node.submit_to_controller(CreateTopicsRequest(topics=(CreatableTopic(
        name=name, num_partitions=1, replication_factor=1),)))
    assert created.topics[0].error_code == ErrorCode.NONE, created
    while node.broker.hosted(name, 0) is None or not node.broker.hosted(name, 0).replica.is_leader:
        await trio.sleep(0.05)


def cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, timeout=timeout)


def cli_json(*args: str) -> Any:
    result = cli(*args, "--json")
    assert result.returncode == 0, f"flotilla {' '.join(args)}: rc={result.returncode} {result.stderr}"
    return json.loads(result.stdout)


def eventually(check: Callable[[], Any], seconds: float = 30, interval: float = 0.2, what: str = "") -> Any:
    """Call `check` until it returns a truthy value (returned) or raises no AssertionError; fail after `seconds`."""
    deadline = time.monotonic() + seconds
    last_error: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except (AssertionError, KeyError, IndexError, ValueError, subprocess.TimeoutExpired) as error:
            last_error = error
        time.sleep(interval)
    raise AssertionError(f"not true within {seconds} s: {what or check}; last error: {last_error!r}")


def poll_records(consumer: Any, expected: int, seconds: float = 30) -> list:
    """The records a kafka-python consumer polls until it has `expected` (or `seconds` pass), and then in one
    more second: any record past those it should have is read too, where iterating until a consumer_timeout_ms
    passed after the last record would wait that long every time."""
    records: list = []
    deadline = time.monotonic() + seconds
    while len(records) < expected and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500).values():
            records.extend(batch)
    for _ in range(2):
        for batch in consumer.poll(timeout_ms=500).values():
            records.extend(batch)
    return records


def quorum_status(cluster, *targets: int) -> dict:
    if targets:
        bootstrap = ",".join(cluster.bootstrap_of(node_id) for node_id in targets)
        return cli_json("quorum", "status", "-b", bootstrap)
    return cli_json("quorum", "status", "--config", cluster.config_path)


def metadata(cluster, *targets: int) -> dict:
    bootstrap = ",".join(cluster.bootstrap_of(node_id) for node_id in (targets or cluster.kafka_ports))
    return cli_json("metadata", "dump", "-b", bootstrap)


def topic_of(document: dict, name: str) -> dict | None:
    return next((t for t in document["topics"] if t["name"] == name), None)


def logged_events(cluster, event: str, *targets: int) -> list[dict]:
    """The JSON log lines of `event` the nodes (all, or `targets`) wrote so far, in each node's order."""
    found = []
    for node_id in targets or cluster.kafka_ports:
        with open(cluster.log_path(node_id), encoding="utf-8") as log:
            found += [entry for entry in map(json.loads, (line for line in log if line.startswith("{")))
                      if entry.get("event") == event]
    return found


def create_topic(cluster, name: str, partitions: int, replication_factor: int, **configs: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=replication_factor,
                  config={k.replace("_", "."): v for k, v in configs.items()})],
        operation_timeout=20,
    )
    futures[name].result(timeout=30)


def broker_incarnation(cluster, node_id: int) -> dict | None:
    """What node `node_id` says of its own broker (cli.quorum.own_broker; None from a node of an earlier release,
    cluster.node_sources); not reachable yet is an AssertionError, for `eventually` to retry."""
    from cli.quorum import Unreachable, own_broker

    try:
        return own_broker("127.0.0.1", cluster.kafka_ports[node_id])
    except Unreachable as error:
        raise AssertionError(f"node {node_id}: {error}") from None


def wait_for_quorum(cluster, nodes: tuple[int, ...] | None = None, seconds: float = 40) -> dict:
    """The quorum has a leader every node has caught up with, and every broker runs as the process now started:
    the image shows it active in the epoch that process registered. Right after a restart the image still holds
    the registration of the process before it, active until its session expires (the new one is refused as a
    duplicate until then), and a client that reads the brokers in that gap finds the broker missing."""
    nodes = nodes or tuple(cluster.kafka_ports)

    def ready():
        status = quorum_status(cluster, *nodes)
        voters = {v["id"]: v for v in status["voters"]}
        assert status["leader_id"] is not None
        assert all(voters[n]["lag"] == 0 for n in nodes), status
        running = {n: broker for n in nodes if (broker := broker_incarnation(cluster, n)) is not None}
        assert all(broker["state"] == "RUNNING" for broker in running.values()), running
        active = {b["id"]: b["epoch"] for b in metadata(cluster, *nodes)["brokers"] if b["status"] == "active"}
        assert all(active.get(n) == broker["epoch"] for n, broker in running.items()), (active, running)
        return status

    return eventually(ready, seconds, what="quorum and brokers ready")


class NumberedDeliveries:
    """A producer's delivery callback for messages whose values are their numbers: `acknowledged` (partition ->
    message numbers in acknowledgement order) and `failures` (the errors of the others)."""

    def __init__(self) -> None:
        self.acknowledged: dict[int, list[int]] = collections.defaultdict(list)
        self.failures: list[Any] = []

    def __call__(self, error: Any, message: Any) -> None:
        if error is None:
            self.acknowledged[message.partition()].append(int(message.value()))
        else:
            self.failures.append(error)
