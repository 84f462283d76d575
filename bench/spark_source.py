"""Benchmark: rows/s of the flotilla Spark source reading into a noop sink, against the in-memory ceiling.

Starts a LocalCluster, produces N records of V bytes with confluent-kafka (librdkafka, so the broker and not
the producer is measured), then in one local[2] SparkSession:
  1. reads the topic with the flotilla batch source into the `noop` sink (timed, best of `--runs`);
  2. caches the same rows in memory and writes them to the `noop` sink (timed, best of `--runs`): the ceiling,
     what Spark itself costs for these rows and columns on this machine.
Prints rows/s and MB/s of both and their ratio. Usage:

    python bench/spark_source.py [--records 1000000] [--value-bytes 100] [--min-partitions 4] [--nodes 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

# Run as `python bench/spark_source.py`, bench/ comes first on sys.path and bench/partitions.py would shadow
# the partitions package: the repository root goes first.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def produce(bootstrap: str, topic: str, records: int, value_bytes: int) -> float:
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                                         "batch.size": 1_000_000, "queue.buffering.max.messages": 2_000_000})
    value = b"x" * value_bytes
    began = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=b"key-%d" % (i % 1000), value=value)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(300) == 0, "records left unsent"
    return time.perf_counter() - began


def best_seconds(action, runs: int) -> float:
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        action()
        times.append(time.perf_counter() - began)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--min-partitions", type=int, default=4)
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable

    from net.client.results import NewTopic
    from net.client.sync import SyncKafkaClient
    from cli.local_cluster import LocalCluster

    with tempfile.TemporaryDirectory() as directory:
        replication = min(args.nodes, 3)
        cluster = LocalCluster(directory, nodes=args.nodes, topic_defaults={
            "partitions": args.partitions, "replication_factor": replication, "min_insync_replicas": 1})
        with cluster:
            with SyncKafkaClient(cluster.bootstrap_servers) as admin:
                deadline = time.monotonic() + 60
                while True:
                    try:
                        admin.create_topics([NewTopic("bench", args.partitions, replication)])
                        break
                    except Exception:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.5)
            produce_seconds = produce(cluster.bootstrap_servers, "bench", args.records, args.value_bytes)
            print(f"produced {args.records} x {args.value_bytes} B in {produce_seconds:.1f} s")
            run_spark(cluster.bootstrap_servers, args)


def run_spark(bootstrap: str, args) -> None:
    from pyspark.sql import SparkSession

    from spark import register

    session = (SparkSession.builder.master("local[2]").appName("flotilla-bench")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC").config("spark.driver.memory", "2g").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    frame = (session.read.format("flotilla").option("kafka.bootstrap.servers", bootstrap).option("subscribe", "bench")
             .option("minPartitions", str(args.min_partitions)).load())
    rows = frame.count()
    assert rows == args.records, f"read {rows} rows, produced {args.records}"
    source_seconds = best_seconds(lambda: frame.write.format("noop").mode("overwrite").save(), args.runs)
    cached = frame.cache()
    assert cached.count() == args.records
    ceiling_seconds = best_seconds(lambda: cached.write.format("noop").mode("overwrite").save(), args.runs)
    megabytes = args.records * args.value_bytes / 1e6
    source_rate, ceiling_rate = args.records / source_seconds, args.records / ceiling_seconds
    print(f"flotilla source -> noop: {source_seconds:.2f} s, {source_rate:,.0f} rows/s, "
          f"{megabytes / source_seconds:.1f} MB/s of values")
    print(f"in-memory (cached) -> noop: {ceiling_seconds:.2f} s, {ceiling_rate:,.0f} rows/s (the ceiling)")
    print(f"ratio: {source_rate / ceiling_rate:.1%} of the ceiling")
    session.stop()


if __name__ == "__main__":
    main()
