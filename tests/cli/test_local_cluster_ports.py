"""LocalCluster's ports: every port the cluster file names is distinct, even when the kernel hands out again a
port an earlier probe released (which once gave a controller and a broker-only node the same kafka_port)."""

from __future__ import annotations

import itertools

from cli import local_cluster
from cli.local_cluster import LocalCluster, free_ports


class _ReusingKernel:
    """bind(0) as a kernel that reuses released ports: the lowest port no open probe holds."""

    def __init__(self) -> None:
        self.held: set[int] = set()

    def socket(self) -> "_Probe":
        return _Probe(self)


class _Probe:
    def __init__(self, kernel: _ReusingKernel) -> None:
        self.kernel = kernel
        self.port = 0

    def bind(self, address: tuple[str, int]) -> None:
        assert address == ("127.0.0.1", 0)
        self.port = next(port for port in itertools.count(40000) if port not in self.kernel.held)
        self.kernel.held.add(self.port)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def close(self) -> None:
        self.kernel.held.discard(self.port)


def test_free_ports_avoids_the_ports_it_is_told(monkeypatch):
    monkeypatch.setattr(local_cluster.socket, "socket", _ReusingKernel().socket)
    first = free_ports(3)
    assert len(set(first)) == 3
    assert free_ports(3) == first  # what the kernel does: released ports come back
    again = free_ports(3, avoid=first)
    assert len(set(again)) == 3 and not set(again) & set(first)


def test_controllers_metrics_and_broker_only_nodes_get_distinct_ports(monkeypatch, tmp_path):
    monkeypatch.setattr(local_cluster.socket, "socket", _ReusingKernel().socket)
    cluster = LocalCluster(str(tmp_path / "cluster"), nodes=3, broker_only=2, metrics=True)
    ports = [*cluster.kafka_ports.values(), *cluster.controller_ports.values(), *cluster.metrics_ports.values()]
    assert len(ports) == 3 + 2 + 3 + 3
    assert len(set(ports)) == len(ports), ports
    added = cluster._add_broker_only_node()
    assert cluster.kafka_ports[added] not in ports
