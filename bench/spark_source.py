"""Benchmark: rows/s of the flotilla Spark source reading into a noop sink, against the in-memory ceiling.

Starts a LocalCluster, produces N records of V bytes with confluent-kafka (librdkafka, so the broker and not
the producer is measured), then in one local[2] SparkSession:
  1. reads the topic with the flotilla batch source into the `noop` sink (timed, best of `--runs`);
  2. caches the same rows in memory and writes them to the `noop` sink (timed, best of `--runs`): the ceiling,
     what Spark itself costs for these rows and columns on this machine;
  3. reads the same number of rows, in Arrow batches of the same schema, size and row count, from a Python data
     source that makes its batches before the clock starts and only yields them (timed, best of `--runs`): the
     ceiling of any source written with PySpark's Python data source API, whose rows go from the Python worker
     to the JVM as Arrow batches and are turned into rows there (PythonPartitionReaderFactory reads no columnar
     batches in Spark 4.x), so that what the flotilla source itself costs is told apart from what the API costs.
Prints rows/s and MB/s of each and the ratios. Usage:

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


def memory_source(rows: int, value_bytes: int, partitions: int, rows_per_batch: int):
    """A Python data source of `rows` rows in `partitions` splits, Spark's Kafka source schema, whose reader
    yields Arrow batches of `rows_per_batch` rows built when the reader is created (like the flotilla source's
    batches: 1,000 distinct keys, values of `value_bytes`)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class MemoryReader(DataSourceReader):
        def __init__(self, schema) -> None:
            self.schema = schema

        def partitions(self):
            return [InputPartition(index) for index in range(partitions)]

        def read(self, partition):
            # Built once per Python worker process (Spark reuses them) and kept beside the interpreter's
            # modules: the reader itself is pickled to every task, and a batch carried in it would be
            # unpickled inside the timed run.
            cache = sys.modules[__name__].__dict__.setdefault("_flotilla_bench_batches", {})
            key = (rows_per_batch, value_bytes)
            if key not in cache:
                cache[key] = build_batch(self.schema)
            batch = cache[key]
            left = rows // partitions + (partition.value < rows % partitions)
            while left > 0:
                yield batch.slice(0, min(left, batch.num_rows))
                left -= batch.num_rows

    def build_batch(schema):
        import pyarrow as pa

        from spark.source import arrow_schema

        arrow = arrow_schema(schema)
        count = min(rows_per_batch, rows)
        columns = [pa.array([b"key-%d" % (i % 1000) for i in range(count)], pa.binary()),
                   pa.array([b"x" * value_bytes] * count, pa.binary()),
                   pa.repeat(pa.scalar("bench", pa.string()), count), pa.repeat(pa.scalar(0, pa.int32()), count),
                   pa.array(range(count), pa.int64()),
                   pa.array([1_700_000_000_000_000] * count, arrow.field("timestamp").type),
                   pa.array([0] * count, pa.int32())]
        return pa.RecordBatch.from_arrays(columns, schema=arrow)

    class MemorySource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_memory"

        def schema(self):
            from spark.source import source_schema

            return source_schema(False)

        def reader(self, schema):
            return MemoryReader(schema)

    return MemorySource


def run_spark(bootstrap: str, args) -> None:
    from pyspark.sql import SparkSession

    from spark import register
    from spark.options import ARROW_BATCH_ROWS_MAX_DEFAULT

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
    cached.unpersist()
    session.dataSource.register(memory_source(args.records, args.value_bytes, args.min_partitions,
                                              ARROW_BATCH_ROWS_MAX_DEFAULT))
    memory = session.read.format("bench_memory").load()
    assert memory.count() == args.records
    api_seconds = best_seconds(lambda: memory.write.format("noop").mode("overwrite").save(), args.runs)
    megabytes = args.records * args.value_bytes / 1e6
    source_rate, ceiling_rate = args.records / source_seconds, args.records / ceiling_seconds
    api_rate = args.records / api_seconds
    print(f"flotilla source -> noop: {source_seconds:.2f} s, {source_rate:,.0f} rows/s, "
          f"{megabytes / source_seconds:.1f} MB/s of values")
    print(f"in-memory (cached) -> noop: {ceiling_seconds:.2f} s, {ceiling_rate:,.0f} rows/s (the ceiling)")
    print(f"prebuilt Arrow batches from a Python data source -> noop: {api_seconds:.2f} s, {api_rate:,.0f} rows/s "
          f"(the Python data source API's ceiling, {api_rate / ceiling_rate:.1%} of the ceiling)")
    print(f"ratio: {source_rate / ceiling_rate:.1%} of the ceiling, "
          f"{source_rate / api_rate:.1%} of the Python data source API's ceiling")
    session.stop()


if __name__ == "__main__":
    main()
