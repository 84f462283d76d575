"""What metrics cost: produce throughput of a node with metrics on (metrics_port set, scraped every second as
Prometheus would) vs one with metrics off, in the same run (target >= 95%).

Two single-node clusters run side by side; rounds alternate between them so that drift on a shared machine
hits both alike (a warm-up round is not counted). Loads: kcat (librdkafka) sending 100-byte records with
acks=1 and its default batching, and with linger.ms=0 (one small request per record), where per-request
cost shows most. Medians and spreads are printed.

    python bench/metrics_cost.py [--records 500000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.produce_consume import produce  # noqa: E402
from cli.local_cluster import LocalCluster  # noqa: E402
from tests.net.cluster_helpers import create_topic, wait_for_quorum  # noqa: E402


def scraper(port: int, stop: threading.Event, scrapes: list[int]) -> None:
    while not stop.wait(1.0):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        scrapes.append(1)


def run(cluster: LocalCluster, topic: str, records: int, root: str, linger_args: tuple[str, ...]) -> float:
    stop, scrapes = threading.Event(), []
    thread = None
    if cluster.metrics:
        thread = threading.Thread(target=scraper, args=(cluster.metrics_ports[1], stop, scrapes))
        thread.start()
    try:
        result = produce(cluster.bootstrap_servers, topic, 1, records, 100, "1", 120, root, linger_args)
    finally:
        stop.set()
        if thread is not None:
            thread.join()
    assert result["errors"] == 0, result
    return result["rec_per_s"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="flotilla-bench-metrics-", dir=os.environ.get("BENCH_DIR"))
    shape = {"topic_defaults": {"partitions": 1, "replication_factor": 1, "min_insync_replicas": 1},
             "log_level": "warning"}
    clusters = {"on": LocalCluster(os.path.join(root, "on"), nodes=1, metrics=True, **shape),
                "off": LocalCluster(os.path.join(root, "off"), nodes=1, **shape)}
    try:
        for cluster in clusters.values():
            cluster.start()
            wait_for_quorum(cluster)
        for load, linger_args, records in (("batched", (), args.records),
                                           ("linger0", ("-X", "linger.ms=0"), args.records // 10)):
            figures: dict[str, list[float]] = {"on": [], "off": []}
            for round_number in range(-1, args.rounds):
                for name, cluster in clusters.items():
                    topic = f"{load}-{round_number + 1}"
                    create_topic(cluster, topic, 1, 1)
                    value = run(cluster, topic, records, root, linger_args)
                    if round_number >= 0:
                        figures[name].append(value)
            for name, values in figures.items():
                print(f"RESULT metrics_{name}.{load}.produce.100B {statistics.median(values):,.0f} rec/s "
                      f"runs={','.join(f'{v:,.0f}' for v in values)}", flush=True)
            ratio = statistics.median(figures["on"]) / statistics.median(figures["off"])
            print(f"RESULT metrics_on_vs_off.{load}.produce.100B ratio={ratio:.3f} (target >= 0.95)", flush=True)
    finally:
        for cluster in clusters.values():
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
