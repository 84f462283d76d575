"""The flotilla data source in a real local SparkSession against a real 3-node LocalCluster (issue #6).

Producers and checkers outside Spark are independent clients where it matters: kcat reads what the sink
wrote, confluent-kafka produces the timestamps and headers the batch source must return.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest

from net.client.results import NewTopic
from net.client.sync import SyncKafkaClient

pytestmark = [pytest.mark.spark, pytest.mark.slow]

QUERY_SECONDS_MAX = 240


@pytest.fixture(scope="module")
def admin(flotilla_cluster):
    client = SyncKafkaClient(flotilla_cluster.bootstrap_servers, request_timeout_ms=30_000)
    yield client
    client.close()


def create_topic(admin, name: str, partitions: int) -> None:
    deadline = time.monotonic() + 60
    while True:  # the cluster may still be electing its first controller
        try:
            admin.create_topics([NewTopic(name, partitions, 3)])
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    wait_leaders(admin, name, partitions, deadline)


def wait_leaders(admin, name: str, partitions: int, deadline: float) -> None:
    while not _leaders_ready(admin, name, partitions):
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {name} has no leaders for {partitions} partitions")
        time.sleep(0.2)


def _leaders_ready(admin, name: str, partitions: int) -> bool:
    try:
        admin.metadata([name])
        ids = admin.partitions_for(name)
        return len(ids) == partitions and all(admin.leader_for(name, p).leader >= 0 for p in ids)
    except Exception:  # not yet in the metadata this broker serves
        return False


def high_watermarks(admin, topic: str) -> dict[int, int]:
    return {p: answer.offset for p, answer in admin.list_offsets(topic, None, -1).items()}


def reader(session, cluster, **options):
    stream = session.read.format("flotilla").option("kafka.bootstrap.servers", cluster.bootstrap_servers)
    for key, value in options.items():
        stream = stream.option(key, value)
    return stream


def stream_reader(session, cluster, **options):
    stream = session.readStream.format("flotilla").option("kafka.bootstrap.servers", cluster.bootstrap_servers)
    for key, value in options.items():
        stream = stream.option(key, value)
    return stream.load()


def produce_values(admin, topic: str, first: int, count: int, chunk: int = 5000) -> None:
    for begin in range(first, first + count, chunk):
        records = [(b"k%d" % (i % 101), b"v%d" % i) for i in range(begin, min(begin + chunk, first + count))]
        admin.produce_records(topic, records)


def test_stream_reads_every_record_exactly_once_across_a_restart(spark_session, flotilla_cluster, admin,
                                                                  tmp_path):
    topic, cap = "exactly-once", 15_000
    create_topic(admin, topic, 3)
    producer = threading.Thread(target=produce_values, args=(admin, topic, 0, 60_000))
    producer.start()
    sink, checkpoint = str(tmp_path / "sink"), str(tmp_path / "checkpoint")

    def start(available_now: bool):
        frame = stream_reader(spark_session, flotilla_cluster, subscribe=topic, startingOffsets="earliest",
                              maxOffsetsPerTrigger=str(cap)).selectExpr("partition", "offset", "value")
        writer = frame.writeStream.format("parquet").option("path", sink).option("checkpointLocation", checkpoint)
        return (writer.trigger(availableNow=True) if available_now else writer).start()

    query = start(available_now=False)
    deadline = time.monotonic() + QUERY_SECONDS_MAX
    while sum(p["numInputRows"] for p in query.recentProgress) < 2 * cap and time.monotonic() < deadline:
        time.sleep(0.5)
    query.stop()  # midway: the producer may still be writing
    progress = list(query.recentProgress)
    producer.join()
    produce_values(admin, topic, 60_000, 40_000)  # written while the query is down

    query = start(available_now=True)
    assert query.awaitTermination(QUERY_SECONDS_MAX), "the restarted query did not finish"
    assert query.exception() is None
    progress += query.recentProgress
    assert progress and max(p["numInputRows"] for p in progress) <= cap  # maxOffsetsPerTrigger

    rows = spark_session.read.parquet(sink).collect()
    assert len(rows) == 100_000
    assert len({(row.partition, row.offset) for row in rows}) == 100_000
    assert sorted(row.value for row in rows) == sorted(b"v%d" % i for i in range(100_000))
    by_partition: dict[int, list[int]] = {}
    for row in rows:
        by_partition.setdefault(row.partition, []).append(row.offset)
    assert {p: sorted(offsets) for p, offsets in by_partition.items()} == \
        {p: list(range(hw)) for p, hw in high_watermarks(admin, topic).items()}


def test_batch_read_returns_exactly_the_offset_range_with_timestamps_and_headers(spark_session, flotilla_cluster,
                                                                                 admin):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = "ranges"
    create_topic(admin, topic, 2)
    producer = confluent_kafka.Producer({"bootstrap.servers": flotilla_cluster.bootstrap_servers, "acks": "all",
                                         "linger.ms": 5})
    base_ms = 1_700_000_000_000
    for partition in (0, 1):
        for i in range(30):
            producer.produce(topic, key=b"key-%d" % i, value=b"value-%d-%d" % (partition, i), partition=partition,
                             timestamp=base_ms + 1000 * i + partition, headers=[("seq", b"%d" % i), ("empty", None)])
    assert producer.flush(30) == 0

    frame = reader(spark_session, flotilla_cluster, subscribe=topic, includeHeaders="true",
                   startingOffsets=json.dumps({topic: {"0": 5, "1": -2}}),
                   endingOffsets=json.dumps({topic: {"0": 20, "1": -1}})).load()
    rows = frame.selectExpr("partition", "offset", "key", "value", "timestampType", "headers",
                            "CAST(unix_millis(timestamp) AS LONG) AS ms").collect()
    got = sorted((r.partition, r.offset) for r in rows)
    assert got == [(0, i) for i in range(5, 20)] + [(1, i) for i in range(30)]
    for row in rows:
        i = row.offset
        assert row.key == b"key-%d" % i and row.value == b"value-%d-%d" % (row.partition, i)
        assert row.ms == base_ms + 1000 * i + row.partition and row.timestampType == 0
        assert [(h.key, h.value) for h in row.headers] == [("seq", b"%d" % i), ("empty", None)]


def test_kafka_client_rack_reads_from_the_replica_in_that_rack(spark_session, flotilla_cluster, admin):  # KIP-392
    from tests.net.test_metrics_endpoint import scrape

    topic, count = "near-spark", 20_000
    create_topic(admin, topic, 1)
    produce_values(admin, topic, 0, count)  # acks=all: every replica in the ISR has them
    leader = admin.leader_for(topic, 0).leader
    follower = min(n for n in flotilla_cluster.kafka_ports if n != leader)

    def bytes_out() -> dict[int, float]:
        return {n: scrape(flotilla_cluster, n).get("flotilla_bytes_out_total", {}).get((("topic", topic),), 0.0)
                for n in flotilla_cluster.kafka_ports}

    expected = sorted(b"v%d" % i for i in range(count))
    before = bytes_out()
    near = reader(spark_session, flotilla_cluster, subscribe=topic,
                  **{"kafka.client.rack": flotilla_cluster.racks[follower]}).load()
    assert sorted(r.value for r in near.select("value").collect()) == expected
    middle = bytes_out()
    assert middle[leader] == before[leader]  # the leader named the follower instead of answering records
    assert middle[follower] - before[follower] >= sum(len(v) for v in expected)
    anywhere = reader(spark_session, flotilla_cluster, subscribe=topic).load()  # no rack: the leader reads
    assert sorted(r.value for r in anywhere.select("value").collect()) == expected
    after = bytes_out()
    assert after[follower] == middle[follower] and after[leader] - middle[leader] >= sum(len(v) for v in expected)


def test_starting_timestamp_and_min_partitions_split_the_read(spark_session, flotilla_cluster, admin):
    topic = "by-time"
    create_topic(admin, topic, 1)
    admin.produce_records(topic, [(None, b"%d" % i, (), 1_000 + i) for i in range(100)], partition=0)
    frame = reader(spark_session, flotilla_cluster, subscribe=topic, startingTimestamp="1040",
                   minPartitions="4").load()
    assert frame.rdd.getNumPartitions() == 4
    assert sorted(r.offset for r in frame.select("offset").collect()) == list(range(40, 100))


def test_sink_output_is_read_back_by_kcat(spark_session, flotilla_cluster, admin, tmp_path):
    topic = "sink-out"
    create_topic(admin, topic, 3)
    rows = [(f"key-{i}", f"value-{i}", [(f"h{i}", bytearray(b"x%d" % i))]) for i in range(50)]
    frame = spark_session.createDataFrame(rows, "key string, value string, headers array<struct<key:string,value:binary>>")
    frame.write.format("flotilla").option("kafka.bootstrap.servers", flotilla_cluster.bootstrap_servers) \
        .option("topic", topic).mode("append").save()
    # and a streaming sink: the same rows again, copied from the topic with their partitions kept
    copy = "sink-copy"
    create_topic(admin, copy, 3)
    query = stream_reader(spark_session, flotilla_cluster, subscribe=topic, startingOffsets="earliest",
                          includeHeaders="true").selectExpr("key", "value", "headers", "partition", f"'{copy}' AS topic") \
        .writeStream.format("flotilla").option("kafka.bootstrap.servers", flotilla_cluster.bootstrap_servers) \
        .option("checkpointLocation", str(tmp_path / "copy-checkpoint")).trigger(availableNow=True).start()
    assert query.awaitTermination(QUERY_SECONDS_MAX) and query.exception() is None

    for name in (topic, copy):
        output = subprocess.run(["kcat", "-C", "-b", flotilla_cluster.bootstrap_servers, "-t", name, "-e", "-J",
                                 "-q"], capture_output=True, text=True, timeout=60, check=True).stdout
        messages = [json.loads(line) for line in output.splitlines() if line.strip()]
        got = sorted((m["key"], m["payload"], tuple(m.get("headers") or ())) for m in messages)
        assert got == sorted((f"key-{i}", f"value-{i}", (f"h{i}", f"x{i}")) for i in range(50)), name


def test_fail_on_data_loss_fails_clearly_or_skips_deleted_records(spark_session, flotilla_cluster, admin):
    topic = "lossy"
    create_topic(admin, topic, 1)
    admin.produce_records(topic, [(None, b"%d" % i) for i in range(100)], partition=0)
    assert admin.delete_records(topic, {0: 50}) == {0: 50}
    starting = json.dumps({topic: {"0": 10}})
    with pytest.raises(Exception, match=r"offsets \[10, 50\) were deleted"):
        reader(spark_session, flotilla_cluster, subscribe=topic, startingOffsets=starting).load().collect()
    rows = reader(spark_session, flotilla_cluster, subscribe=topic, startingOffsets=starting,
                  failOnDataLoss="false").load().select("offset").collect()
    assert sorted(r.offset for r in rows) == list(range(50, 100))


def test_stream_picks_up_new_partitions_and_new_topics(spark_session, flotilla_cluster, admin, tmp_path):
    create_topic(admin, "grow-a", 1)
    admin.produce_records("grow-a", [(None, b"a0-%d" % i) for i in range(10)], partition=0)
    sink, checkpoint = str(tmp_path / "sink"), str(tmp_path / "checkpoint")

    def run_once():
        query = stream_reader(spark_session, flotilla_cluster, subscribePattern="grow-.*",
                              startingOffsets="earliest").selectExpr("topic", "partition", "offset", "value") \
            .writeStream.format("parquet").option("path", sink).option("checkpointLocation", checkpoint) \
            .trigger(availableNow=True).start()
        assert query.awaitTermination(QUERY_SECONDS_MAX) and query.exception() is None

    run_once()
    admin.create_partitions({"grow-a": 2})
    create_topic(admin, "grow-b", 1)
    wait_leaders(admin, "grow-a", 2, time.monotonic() + 60)
    admin.produce_records("grow-a", [(None, b"a1-%d" % i) for i in range(10)], partition=1)
    admin.produce_records("grow-b", [(None, b"b0-%d" % i) for i in range(10)], partition=0)
    run_once()
    rows = spark_session.read.parquet(sink).collect()
    assert sorted((r.topic, r.partition, r.offset) for r in rows) == sorted(
        (t, p, i) for t, p in (("grow-a", 0), ("grow-a", 1), ("grow-b", 0)) for i in range(10))


@pytest.mark.parametrize("options, message, also_stream", [
    ({"subscribe": "no-such-topic"}, "option 'subscribe': unknown topic", True),
    ({"assign": json.dumps({"no-such-topic": [0]})}, "option 'assign': unknown topic", False),
    ({"subscribe": "ranges", "assign": json.dumps({"ranges": [0]})}, "exactly one of the options", False),
    ({}, "exactly one of the options", False),
    ({"subscribe": "ranges", "startingOffsets": '{"ranges": {"0": 1'}, "option 'startingOffsets' is not valid JSON",
     True),
    ({"subscribe": "ranges", "kafka.isolation.level": "dirty"}, "must be read_uncommitted or read_committed", False),
])
def test_invalid_options_fail_at_start_naming_the_option(spark_session, flotilla_cluster, admin, options, message,
                                                         also_stream):
    create_topic_if_missing(admin, "ranges", 2)
    with pytest.raises(Exception, match=message):
        reader(spark_session, flotilla_cluster, **options).load().collect()
    if not also_stream:  # the stream path parses the same options; two cases prove it is wired up
        return
    with pytest.raises(Exception, match=message):
        query = stream_reader(spark_session, flotilla_cluster, **options).writeStream.format("noop").start()
        try:
            query.awaitTermination(60)
        finally:
            query.stop()


def test_a_user_specified_schema_is_refused(spark_session, flotilla_cluster, admin):
    create_topic_if_missing(admin, "ranges", 2)
    with pytest.raises(Exception, match="fixed schema"):
        reader(spark_session, flotilla_cluster, subscribe="ranges").schema("value string").load().collect()


def create_topic_if_missing(admin, name: str, partitions: int) -> None:
    if name not in admin.metadata([name]).topics:
        create_topic(admin, name, partitions)


def test_readme_aggregation_counts_per_key_per_minute(spark_session, flotilla_cluster, admin):
    from pyspark.sql import functions as F

    topic = "clicks"
    create_topic(admin, topic, 3)
    minute_ms = 60_000
    base = 1_700_000_000_000 - 1_700_000_000_000 % minute_ms
    records = [(b"user-%d" % (i % 3), b"clicked", (), base + (i % 2) * minute_ms + i) for i in range(60)]
    admin.produce_records(topic, records)

    events = stream_reader(spark_session, flotilla_cluster, subscribe=topic, startingOffsets="earliest",
                           maxOffsetsPerTrigger="50000")
    counts = (events.withWatermark("timestamp", "2 minutes")
              .groupBy(F.window("timestamp", "1 minute"), F.col("key").cast("string").alias("key"))
              .count())
    query = counts.writeStream.outputMode("complete").format("memory").queryName("clicks_per_minute") \
        .trigger(availableNow=True).start()
    assert query.awaitTermination(QUERY_SECONDS_MAX) and query.exception() is None
    got = {(int(row.window.start.timestamp() * 1000), row.key): row["count"]
           for row in spark_session.sql("SELECT * FROM clicks_per_minute").collect()}
    expected: dict[tuple[int, str], int] = {}
    for key, _, _, timestamp in records:
        slot = (timestamp - timestamp % minute_ms, key.decode())
        expected[slot] = expected.get(slot, 0) + 1
    assert got == expected


def test_read_committed_returns_only_committed_records_batch_and_stream(spark_session, flotilla_cluster, admin, tmp_path):
    """kafka.isolation.level=read_committed (Spark's option): never an aborted record, never one above the last
    stable offset, in a batch query and in a stream; read_uncommitted sees every record."""
    from confluent_kafka import Producer

    topic = "spark-txn"
    create_topic_if_missing(admin, topic, 2)
    producer = Producer({"bootstrap.servers": flotilla_cluster.bootstrap_servers, "transactional.id": "spark-txn"})
    producer.init_transactions(30)
    committed = set()
    for t in range(6):
        producer.begin_transaction()
        values = [f"t{t}-{i}" for i in range(20)]
        for i, value in enumerate(values):
            producer.produce(topic, value=value.encode(), partition=i % 2)
        producer.flush(30)
        if t % 3 == 2:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            committed.update(values)
    # An open transaction: its records are below the high watermark but above the last stable offset.
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=f"open-{i}".encode(), partition=i % 2)
    producer.flush(30)

    def values_of(rows) -> list[str]:
        return [bytes(r.value).decode() for r in rows]

    batch = reader(spark_session, flotilla_cluster, subscribe=topic, **{"kafka.isolation.level": "read_committed"})
    assert sorted(values_of(batch.load().collect())) == sorted(committed)
    everything = reader(spark_session, flotilla_cluster, subscribe=topic).load().collect()
    assert len(everything) == 6 * 20 + 10

    sink = str(tmp_path / "committed")
    query = (stream_reader(spark_session, flotilla_cluster, subscribe=topic, startingOffsets="earliest",
                           **{"kafka.isolation.level": "read_committed"})
             .writeStream.format("parquet").option("path", sink)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert sorted(values_of(spark_session.read.parquet(sink).collect())) == sorted(committed)
    producer.abort_transaction(30)
