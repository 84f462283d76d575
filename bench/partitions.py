"""What partitions cost when nothing moves: idle CPU and RSS of a 3-node cluster (RF=3) as it carries 0, 1,000 and
3,000 partitions, the time to create and lead a 1,000-partition topic, and the time a restarted node needs to
rejoin every ISR.

Figures (LocalCluster: 3 controller+broker node processes on 127.0.0.1, default broker settings):
  idle       cores used by the three node processes together (the scheduler's run time of their threads,
             /proc/PID/task/TID/schedstat, over `--window` s, after every partition is led with a full ISR and
             a settling pause), and each node's RSS; baseline: the same cluster with no topics, measured first
             in the same run; the ratio is idle(N) / idle(0).
  create     seconds from CreateTopics (1,000 partitions, RF=3) until Metadata shows a leader for every
             partition, and until every ISR is full.
  rejoin     node 3 is killed (SIGKILL) with 3,000 partitions; once it is out of every ISR it is restarted: seconds
             until it listens, and until it is back in every ISR.

    python bench/partitions.py [--window 10] [--counts 1000,3000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cli.local_cluster import LocalCluster  # noqa: E402
from bench.produce_consume import CpuWindow  # noqa: E402
from tests.net.cluster_helpers import eventually, wait_for_quorum  # noqa: E402

PARTITIONS_PER_TOPIC = 1000


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def idle_cores(cluster: LocalCluster, window: float) -> tuple[float, dict[int, float], dict[int, float]]:
    cpu = CpuWindow(cluster)
    cpu.begin()
    time.sleep(window)
    cpu.end()
    per_node = cpu.cores()
    return sum(per_node.values()), per_node, {node_id: rss_mib(pid) for node_id, pid in cpu.pids.items()}


def partition_states(admin) -> list:
    topics = admin.list_topics(timeout=30).topics
    return [p for t in topics.values() if not t.topic.startswith("__") for p in t.partitions.values()]


def create(cluster: LocalCluster, admin, name: str, total: int) -> tuple[float, float]:
    from confluent_kafka.admin import NewTopic

    started = time.monotonic()
    (future,) = admin.create_topics([NewTopic(name, num_partitions=PARTITIONS_PER_TOPIC, replication_factor=3)],
                                    operation_timeout=60).values()
    future.result(90)
    eventually(lambda: len(partition_states(admin)) == total and all(p.leader >= 0 for p in partition_states(admin)),
               seconds=120, interval=0.05, what=f"{name} led")
    led = time.monotonic() - started
    eventually(lambda: all(len(p.isrs) == 3 for p in partition_states(admin)), seconds=300, interval=0.2,
               what=f"{name} ISR full")
    return led, time.monotonic() - started


def report_idle(label: str, cores: float, per_node: dict, rss: dict, baseline: float | None) -> None:
    ratio = "" if baseline is None else f" = {cores / baseline:.1f}x the idle cost with none (baseline {baseline:.3f})"
    nodes = ", ".join(f"node {n}: {c:.3f} cores {rss[n]:.0f} MiB" for n, c in sorted(per_node.items()))
    print(f"idle {label:>16}: {cores:.3f} cores in total{ratio} ({nodes})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window", type=float, default=10.0, help="seconds of each idle measurement")
    parser.add_argument("--counts", default="1000,3000", help="partition totals to measure, multiples of 1,000")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds to wait before each idle measurement")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    assert all(c % PARTITIONS_PER_TOPIC == 0 for c in counts), counts
    from confluent_kafka.admin import AdminClient

    with tempfile.TemporaryDirectory(prefix="flotilla-bench-partitions-") as directory:
        with LocalCluster(directory, nodes=3) as cluster:
            wait_for_quorum(cluster)
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
            time.sleep(args.settle)  # the brokers unfenced and idle (a CreateTopics at once can time out)
            baseline, per_node, rss = idle_cores(cluster, args.window)
            report_idle("0 partitions", baseline, per_node, rss, None)
            total = 0
            for count in counts:
                while total < count:
                    total += PARTITIONS_PER_TOPIC
                    led, full = create(cluster, admin, f"idle-{total}", total)
                    print(f"create 1,000 partitions RF=3 (total {total}): led in {led:.2f} s, every ISR full in "
                          f"{full:.2f} s", flush=True)
                time.sleep(args.settle)
                report_idle(f"{count} partitions", *idle_cores(cluster, args.window), baseline)
            cluster.kill(3)
            killed = time.monotonic()
            eventually(lambda: not any(3 in p.isrs for p in partition_states(admin)), seconds=120, interval=0.5,
                       what="node 3 out of every ISR")
            out = time.monotonic() - killed
            started = time.monotonic()
            cluster.start_node(3)
            listening = time.monotonic() - started
            eventually(lambda: all(len(p.isrs) == 3 for p in partition_states(admin)), seconds=600, interval=0.5,
                       what="node 3 back in every ISR")
            print(f"rejoin node 3 with {total} partitions (out of every ISR {out:.1f} s after the kill): listening "
                  f"after {listening:.2f} s, back in every ISR after {time.monotonic() - started:.2f} s", flush=True)


if __name__ == "__main__":
    main()
