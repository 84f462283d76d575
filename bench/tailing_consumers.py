"""Benchmark: what tailing consumers cost the partition leader under a steady acks=all produce.

3 nodes, RF=3, one partition. A confluent-kafka producer sends 100-byte records with linger.ms=0 and acks=all at
a fixed rate while N confluent-kafka consumers (no group, each assigned the partition at its end) tail it with
librdkafka's long-polled fetches. Each consumer's fetch waits at the leader; every record wakes it. Prints the
partition leader's CPU (the scheduler's run time of its threads, from /proc) per record and the produce p50/p99,
for N = 0 (the baseline, same run and cluster) and each N asked, with the ratio to the baseline. Usage:

    python bench/tailing_consumers.py [--rate 2000] [--seconds 8] [--consumers 0,4,8] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.produce_consume import cpu_seconds, latency, start_cluster  # noqa: E402
from tests.net.cluster_helpers import create_topic, eventually, metadata, topic_of  # noqa: E402


def tail(bootstrap: str, topic: str, stop: threading.Event, counts: list[int], index: int) -> None:
    from confluent_kafka import OFFSET_END, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"tail-{index}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_END)])
    try:
        while not stop.is_set():
            for message in consumer.consume(1000, 0.2):
                if message.error() is None:
                    counts[index] += 1
    finally:
        consumer.close()


def measure(cluster, leader: int, consumers: int, rate: int, seconds: float) -> dict:
    stop = threading.Event()
    counts = [0] * consumers
    threads = [threading.Thread(target=tail, args=(cluster.bootstrap_servers, "tail", stop, counts, i), daemon=True)
               for i in range(consumers)]
    for thread in threads:
        thread.start()
    time.sleep(2.0)  # the consumers connect, find their offsets and park a fetch
    pid = cluster.processes[leader].pid
    began = cpu_seconds(pid)
    measured = latency(cluster.bootstrap_servers, "tail", rate, seconds, "all", 0)
    used = cpu_seconds(pid) - began
    time.sleep(1.0)
    stop.set()
    for thread in threads:
        thread.join(30)
    return {"cpu_us_per_record": used / measured["records"] * 1e6, "p50_ms": measured["p50_ms"],
            "p99_ms": measured["p99_ms"], "consumed_min": min(counts) if counts else 0,
            "records": measured["records"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=2_000)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--consumers", default="0,4,8")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    steps = sorted({0, *(int(n) for n in args.consumers.split(","))})
    with tempfile.TemporaryDirectory() as root:
        cluster = start_cluster(os.path.join(root, "tail"), 3)
        try:
            create_topic(cluster, "tail", 1, 3, min_insync_replicas="2")
            leader = eventually(lambda: topic_of(metadata(cluster), "tail")["partitions"][0]["leader"])
            latency(cluster.bootstrap_servers, "tail", 500, 1.0, "all", 0)  # connections and metadata warm
            figures: dict[int, list[dict]] = {n: [] for n in steps}
            for _ in range(args.rounds):  # the steps alternate, so a noisy moment spreads over all of them
                for consumers in steps:
                    figures[consumers].append(measure(cluster, leader, consumers, args.rate, args.seconds))
        finally:
            cluster.stop()
    baseline = statistics.median(run["cpu_us_per_record"] for run in figures[0])
    for consumers in steps:
        runs = figures[consumers]
        cpu = statistics.median(run["cpu_us_per_record"] for run in runs)
        spread = ", ".join(f"{run['cpu_us_per_record']:.0f}" for run in runs)
        p99 = ", ".join(f"{run['p99_ms']:.2f}" for run in runs)
        consumed = min(run["consumed_min"] for run in runs)
        print(f"RESULT tailing_consumers={consumers} rate={args.rate}/s leader_cpu_us_per_record={cpu:.0f} "
              f"(runs {spread}) ratio_to_no_consumer={cpu / baseline:.2f} produce_p99_ms=[{p99}] "
              f"least_records_one_consumer_read={consumed}", flush=True)


if __name__ == "__main__":
    main()
