"""An embedded Flotilla cluster for tests: real `flotilla node` processes on 127.0.0.1, free ports, data in a
temporary directory, gone when the test is (the pytest plugin's `flotilla_cluster` fixture, or
`EmbeddedCluster` as a context manager outside pytest).

    with EmbeddedCluster(nodes=3) as cluster:
        cluster.create_topic("orders", partitions=3)
        producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers})
        ...
        cluster.kill(2)      # SIGKILL, as a crash
        cluster.restart(2)   # back, and serving again before it returns

The nodes are the very processes `flotilla node` runs, started through `cli.local_cluster.LocalCluster`;
each dies with the process that started it (Linux's parent-death signal), so an interrupted or crashed test
run leaves no node and no port behind. Readiness is "the quorum has a leader, and every node is a broker that
runs: Metadata lists it, and the node itself says its current process is registered and unfenced", checked
with Flotilla's own Kafka client and admin API, so no other client library is needed. The node's own word
matters after a restart: until the old process's session expires, the metadata still lists that process's
registration as active while the new process waits to register.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
import time

import trio

from cli.local_cluster import LocalCluster
from cli.quorum import Unreachable, own_broker
from net.client.aio import KafkaClient
from net.client.results import NewTopic
from partitions.errors import KafkaError, TopicAlreadyExistsError

READY_SECONDS_MAX = 60.0
FAST_BROKER_SETTINGS = {"broker_session_timeout_ms": 3000, "broker_heartbeat_interval_ms": 500,
                        "group_initial_rebalance_delay_ms": 0}


class EmbeddedCluster:
    """`nodes` broker+controller nodes (see the module docstring)."""

    def __init__(self, nodes: int = 1, directory: str | None = None, broker: dict | None = None,
                 log_level: str = "warning") -> None:
        assert nodes >= 1, nodes
        self._owned_directory = directory is None
        self.directory = directory or tempfile.mkdtemp(prefix="flotilla-")
        replication = min(nodes, 3)
        self.local = LocalCluster(
            self.directory, nodes=nodes, log_level=log_level,
            topic_defaults={"partitions": 1, "replication_factor": replication,
                            "min_insync_replicas": 1 if replication == 1 else 2},
            broker={**FAST_BROKER_SETTINGS, "offsets_topic_num_partitions": 5,
                    "offsets_topic_replication_factor": replication,
                    "transaction_state_log_num_partitions": 5,
                    "transaction_state_log_replication_factor": replication,
                    "transaction_state_log_min_isr": 1 if replication == 1 else 2, **(broker or {})})
        self.nodes = nodes

    @property
    def bootstrap_servers(self) -> str:
        return self.local.bootstrap_servers

    @property
    def node_ids(self) -> list[int]:
        return list(self.local.kafka_ports)

    def start(self) -> "EmbeddedCluster":
        """Start every node and wait until all serve. Raises TimeoutError naming the node logs."""
        self.local.start(wait=False)
        self.wait_ready()
        return self

    def wait_ready(self, nodes: list[int] | None = None, seconds: float = READY_SECONDS_MAX) -> None:
        """Wait until the quorum has a leader and `nodes` (default: every running node) are brokers that run."""
        wanted = set(nodes or [n for n in self.node_ids if self.local.is_running(n)])
        for node_id in wanted:
            self.local.wait_listening(node_id, seconds)
        servers = ",".join(self.local.bootstrap_of(n) for n in sorted(wanted))

        async def active() -> bool:
            async with KafkaClient(servers, "flotilla-testing", 2_000, connect_timeout_ms=1_000,
                                   first_contact_retries_max=0, retries_max=0) as client:
                cluster = await client.metadata([])
                return wanted <= set(cluster.brokers) and cluster.controller_id >= 0

        def running(node_id: int) -> bool:
            try:
                broker = own_broker("127.0.0.1", self.local.kafka_ports[node_id])
            except Unreachable:
                return False
            return broker is not None and broker["state"] == "RUNNING"

        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                if all(running(n) for n in sorted(wanted)) and trio.run(active):
                    return
            except (KafkaError, OSError):
                pass
            time.sleep(0.05)
        logs = ", ".join(self.local.log_path(n) for n in sorted(wanted))
        raise TimeoutError(f"the Flotilla cluster was not ready within {seconds} s; see {logs}")

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int | None = None,
                     **configs: str) -> None:
        """Create a topic (replication factor: min(nodes, 3)) and wait until every partition has a leader.
        Config names take dots or underscores (`retention_ms="1000"`). An existing topic is left as it is."""
        replication = replication_factor or min(self.nodes, 3)
        topic = NewTopic(name, partitions, replication, {k.replace("_", "."): str(v) for k, v in configs.items()})

        async def create() -> None:
            async with KafkaClient(self.bootstrap_servers, "flotilla-testing") as client:
                try:
                    await client.create_topics([topic])
                except TopicAlreadyExistsError:
                    pass
                deadline = trio.current_time() + READY_SECONDS_MAX
                while trio.current_time() < deadline:
                    metadata = await client.metadata([name])
                    found = metadata.topics.get(name)
                    if found is not None and len(found.partitions) == partitions and all(
                            p.leader >= 0 for p in found.partitions.values()):
                        return
                    await trio.sleep(0.05)
                raise TimeoutError(f"topic {name!r} has no leader for every partition")

        trio.run(create)

    def kill(self, node_id: int) -> None:
        """SIGKILL the node (a crash: no controlled shutdown, no flush)."""
        self.local.kill(node_id, signal.SIGKILL)

    def stop_node(self, node_id: int) -> None:
        """SIGTERM the node (a clean shutdown) and wait for it to exit."""
        self.local.kill(node_id, signal.SIGTERM)

    def restart(self, node_id: int) -> None:
        """Start a stopped or killed node again and wait until it serves."""
        if self.local.is_running(node_id):
            self.stop_node(node_id)
        self.local.start_node(node_id, wait=False)
        self.wait_ready([node_id])

    def stop(self) -> None:
        """Stop every node; remove the data directory when this object made it."""
        self.local.stop()
        if self._owned_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> "EmbeddedCluster":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc_info) -> None:
        self.stop()


__all__ = ["EmbeddedCluster"]
