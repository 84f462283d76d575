"""Moving partition data to a new broker: time to copy `--mib` MiB (1 GiB by default) onto a broker that joined
the running cluster, without and with a replication throttle, and a probe producer's latency before and
during each move.

Figures (3 controllers on 127.0.0.1, a topic `bulk` of one partition filled with 1 MiB batches of 1 KiB
records on broker 1):
  move       seconds from `reassign execute` until `verify` reports the move complete, and MB/s; baseline:
             the same bytes read from broker 1 by a confluent-kafka consumer in the same run (the copy can go
             no faster than a fetch of the log), so the ratio is the move's share of that speed.
  throttled  the same onto a second new broker with `--throttle` (default 50 MB/s): the time should follow
             the rate.
  probe      p50/p99 of an acks=all producer (100-byte records, 200/s, topic `probe` RF=3) for 5 s before the
             moves (baseline) and during each move.

    python bench/reassign.py [--mib 1024] [--throttle-mb 50]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cli.local_cluster import LocalCluster  # noqa: E402
from tests.net.cluster_helpers import FAST_BROKER_SETTINGS, cli, cli_json, create_topic, eventually, wait_for_quorum  # noqa: E402

RECORD = b"x" * 1024
PROBE_RATE = 200


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] if ordered else float("nan")


def fill(bootstrap: str, mib: int) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "acks": "1", "queue.buffering.max.kbytes": 512 * 1024})
    started = time.perf_counter()
    for _ in range(mib * 1024):
        while True:
            try:
                producer.produce("bulk", value=RECORD, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(300) == 0
    return time.perf_counter() - started


def read_all(bootstrap: str, mib: int) -> float:
    """Seconds for a consumer to read the whole partition from broker 1 (the copy's baseline)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-read", "enable.auto.commit": False,
                         "fetch.max.bytes": 50 * 1024 * 1024, "max.partition.fetch.bytes": 10 * 1024 * 1024})
    consumer.assign([TopicPartition("bulk", 0, 0)])
    wanted, read, started = mib * 1024, 0, None
    deadline = time.monotonic() + 600
    while read < wanted and time.monotonic() < deadline:
        messages = consumer.consume(10_000, 1.0)
        if messages and started is None:
            started = time.perf_counter()
        read += sum(1 for m in messages if m.error() is None)
    consumer.close()
    return time.perf_counter() - (started or time.perf_counter())


class Probe:
    """acks=all latencies (ms) of small records, by phase."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
        self.phase = "idle"
        self.latencies: dict[str, list[float]] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        interval = 1.0 / PROBE_RATE
        while not self.stop.is_set():
            sent, phase = time.perf_counter(), self.phase

            def delivered(error, message, sent=sent, phase=phase):
                if error is None:
                    self.latencies.setdefault(phase, []).append((time.perf_counter() - sent) * 1000)

            self.producer.produce("probe", value=b"p" * 100, on_delivery=delivered)
            self.producer.poll(0)
            time.sleep(interval)
        self.producer.flush(30)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)

    def summary(self, phase: str) -> dict:
        values = self.latencies.get(phase, [])
        return {"n": len(values), "p50_ms": round(percentile(values, 0.5), 2), "p99_ms": round(percentile(values, 0.99), 2)}


def move(cluster: LocalCluster, directory: str, target: list[int], throttle: int | None) -> float:
    plan = os.path.join(directory, f"plan-{'-'.join(map(str, target))}.json")
    with open(plan, "w") as out:
        json.dump({"version": 1, "partitions": [{"topic": "bulk", "partition": 0, "replicas": target}]}, out)
    command = ["reassign", "execute", "--plan", plan, "-b", cluster.bootstrap_servers]
    if throttle is not None:
        command += ["--throttle", str(throttle)]
    started = time.perf_counter()
    result = cli(*command)
    assert result.returncode == 0, result.stderr
    while True:
        if cli("reassign", "verify", "--plan", plan, "-b", cluster.bootstrap_servers).returncode == 0:
            return time.perf_counter() - started
        time.sleep(0.25)


def run(mib: int, throttle_mb: int) -> dict:
    directory = tempfile.mkdtemp(prefix="flotilla-bench-reassign-")
    cluster = LocalCluster(os.path.join(directory, "cluster"), nodes=3, broker=FAST_BROKER_SETTINGS,
                           log_level="warning")
    cluster.start()
    try:
        wait_for_quorum(cluster)
        assert cli("topics", "create", "bulk", "--partitions", "1", "--replication-factor", "1",
                   "-b", cluster.bootstrap_servers, "--set", "segment.bytes=268435456").returncode == 0
        create_topic(cluster, "probe", 1, 3)
        leader = cli_json("topics", "describe", "bulk", "-b", cluster.bootstrap_servers)["partitions"][0]["leader"]
        fill_s = fill(cluster.bootstrap_servers, mib)
        read_s = read_all(cluster.bootstrap_servers, mib)
        probe = Probe(cluster.bootstrap_servers)
        try:
            time.sleep(1)
            probe.phase = "before"
            time.sleep(5)
            first = cluster.add_broker()
            eventually(lambda: any(b["id"] == first for b in cli_json("brokers", "-b", cluster.bootstrap_servers)), 30)
            probe.phase = "move"
            move_s = move(cluster, directory, [leader, first], None)
            probe.phase = "between"
            second = cluster.add_broker()
            eventually(lambda: any(b["id"] == second for b in cli_json("brokers", "-b", cluster.bootstrap_servers)), 30)
            probe.phase = "throttled"
            throttled_s = move(cluster, directory, [leader, first, second], throttle_mb * 1_000_000)
            probe.phase = "after"
        finally:
            probe.close()
        size_mb = mib * 1024 * 1024 / 1e6
        return {
            "mib": mib, "fill_s": round(fill_s, 2), "read_s": round(read_s, 2),
            "move_s": round(move_s, 2), "move_mb_s": round(size_mb / move_s, 1),
            "read_mb_s": round(size_mb / read_s, 1), "move_vs_read": round(read_s / move_s, 3),
            "throttle_mb_s": throttle_mb, "throttled_s": round(throttled_s, 2),
            "throttled_mb_s": round(size_mb / throttled_s, 1),
            "probe": {phase: probe.summary(phase) for phase in ("before", "move", "throttled")},
        }
    finally:
        cluster.stop()
        subprocess.run(["rm", "-rf", directory])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--throttle-mb", type=int, default=50, help="throttle of the second move, MB/s")
    args = parser.parse_args()
    result = run(args.mib, args.throttle_mb)
    print(json.dumps(result))
    probe = result["probe"]
    print(f"RESULT move {args.mib} MiB onto a new broker: {result['move_s']} s ({result['move_mb_s']} MB/s); "
          f"baseline consumer read of the same log {result['read_s']} s ({result['read_mb_s']} MB/s); "
          f"ratio {result['move_vs_read']}")
    print(f"RESULT throttled at {args.throttle_mb} MB/s: {result['throttled_s']} s ({result['throttled_mb_s']} MB/s)")
    print(f"RESULT probe acks=all p50/p99 ms: before {probe['before']['p50_ms']}/{probe['before']['p99_ms']}, "
          f"during the move {probe['move']['p50_ms']}/{probe['move']['p99_ms']}, "
          f"during the throttled move {probe['throttled']['p50_ms']}/{probe['throttled']['p99_ms']}")


if __name__ == "__main__":
    main()
