"""The pytest plugin (entry point `pytest11`, installed with the package): an embedded Flotilla cluster per
test, in place of a Kafka container.

    def test_orders(flotilla_cluster):                 # one node
        flotilla_cluster.create_topic("orders")
        Producer({"bootstrap.servers": flotilla_cluster.bootstrap_servers}) ...

    @pytest.mark.flotilla(nodes=3)
    def test_failover(flotilla_cluster):                # three nodes; kill(n) / restart(n)
        ...

    def test_two(flotilla_cluster_factory):             # several, or other settings
        a = flotilla_cluster_factory(nodes=1)

Data lives in the test's tmp_path; the nodes stop when the test ends, also when it fails or is interrupted.
"""

from __future__ import annotations

import pytest

from flotilla_testing import EmbeddedCluster


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "flotilla(nodes=1, broker=None): the embedded Flotilla cluster's shape")


@pytest.fixture
def flotilla_cluster_factory(tmp_path):
    started: list[EmbeddedCluster] = []

    def make(nodes: int = 1, broker: dict | None = None) -> EmbeddedCluster:
        directory = tmp_path / f"flotilla-{len(started) + 1}"
        cluster = EmbeddedCluster(nodes=nodes, directory=str(directory), broker=broker)
        started.append(cluster)
        return cluster.start()

    try:
        yield make
    finally:
        for cluster in started:
            cluster.stop()


@pytest.fixture
def flotilla_cluster(request, flotilla_cluster_factory) -> EmbeddedCluster:
    marker = request.node.get_closest_marker("flotilla")
    options = dict(marker.kwargs) if marker is not None else {}
    return flotilla_cluster_factory(nodes=options.get("nodes", 1), broker=options.get("broker"))
