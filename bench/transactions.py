"""Transactions on a real 3-node cluster (RF=3): transactional produce vs idempotent acks=all produce, commit
latency, and read_committed vs read_uncommitted consume, each with its baseline from the same run.

Figures:
  produce     records/s of a confluent-kafka transactional producer writing `--records` 100-byte records in
              transactions of 10 and of 1,000 records (3 partitions), vs the same producer idempotent with
              acks=all (no transactions) on a fresh topic. Target: >= 50% at 1,000 records per transaction.
  commit      p50/p99 of commit_transaction() (EndTxn until the PrepareCommit record is committed, after the
              transaction's records were flushed) over the 10-record transactions.
  concurrent  transactions/s of CONCURRENT_PRODUCERS transactional producers (threads of this process, one
              confluent-kafka producer each, 10-record transactions) for CONCURRENT_SECONDS, vs the single
              producer's 10-record transactions/s above, with their p50/p99 transaction time (begin to commit):
              how coordinators, markers and verifications scale with concurrent transactions.
  saturated   the produce ratio at 1,000 records per transaction again with SATURATED_PRODUCERS producers on
              each side, each in a process of its own writing its share of `--records` (transactional, vs
              idempotent acks=all on a fresh topic): records/s from the common start to the last producer's end.
              One producer's transactions wait for four replicated writes in turn (AddPartitionsToTxn's record,
              the records, EndTxn's Prepare record, then the markers and the Complete record before the next
              transaction's partitions are added); producers side by side overlap those waits, so this ratio
              is what the coordinator, markers and verifications cost a cluster kept busy. Each side needs the
              default `--records` or more: with 40,000 the idempotent side lasts 0.2 s and the ratio read 0.56,
              where 200,000 and 400,000 read 0.23-0.34.
  consume     records/s of a read_committed confluent-kafka consumer reading the transactional topic from the
              start (timed from its first records), vs a read_uncommitted one on the same data; five reads of
              each, taking turns, and the median of each. Target: >= 90%.

    python bench/transactions.py [--records 200000] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cli.local_cluster import LocalCluster  # noqa: E402
from tests.net.cluster_helpers import FAST_BROKER_SETTINGS, create_topic, wait_for_quorum  # noqa: E402

PARTITIONS = 3
CONSUME_ROUNDS = 5
VALUE = b"x" * 100


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def produce(bootstrap: str, topic: str, records: int, per_txn: int | None, transactional_id: str,
            start_at: float | None = None) -> dict:
    """records/s (and commit latencies) of one confluent-kafka producer: transactional with `per_txn` records
    per transaction, or idempotent acks=all when `per_txn` is None. With `start_at` (a time.time()), the clock
    starts then, after the warm-up, and the result also holds the wall time the producer finished at."""
    from confluent_kafka import Producer

    config = {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True, "acks": "all"}
    if per_txn is not None:
        config["transactional.id"] = transactional_id
    producer = Producer(config)
    commits: list[float] = []
    if per_txn is not None:
        producer.init_transactions(60)
        producer.begin_transaction()
    # Connections to every partition leader (and, transactional, to the coordinator) opened before the clock
    # starts, for both producers: a cold producer spends its first few hundred milliseconds on them, which
    # halved the idempotent baseline of a 200,000-record run and so flattered the ratios.
    for partition in range(PARTITIONS):
        producer.produce(topic, value=VALUE, partition=partition)
    producer.flush(60)
    if per_txn is not None:
        producer.commit_transaction(60)
    delay = 0.0 if start_at is None else start_at - time.time()
    if delay > 0:
        time.sleep(delay)  # every producer's clock starts together
    started = time.perf_counter()
    sent = 0
    while sent < records:
        batch = min(per_txn or records, records - sent)
        if per_txn is not None:
            producer.begin_transaction()
        for i in range(batch):
            while True:
                try:
                    producer.produce(topic, value=VALUE, partition=(sent + i) % PARTITIONS)
                    break
                except BufferError:
                    producer.poll(0.01)
        sent += batch
        if per_txn is not None:
            producer.flush(60)
            commit_started = time.perf_counter()
            producer.commit_transaction(60)
            commits.append((time.perf_counter() - commit_started) * 1000)
    producer.flush(60)
    elapsed = time.perf_counter() - started
    result = {"records": records, "seconds": round(elapsed, 2), "records_per_s": round(records / elapsed)}
    if start_at is not None:
        result["ended_at"] = time.time()
    if commits:
        result.update(commit_p50_ms=round(percentile(commits, 0.5), 1), commit_p99_ms=round(percentile(commits, 0.99), 1),
                      transactions_per_s=round(len(commits) / elapsed, 1))
    return result


SATURATED_PRODUCERS = 4
SATURATED_START_S = 5.0  # the processes start, import, connect and warm up before the common start


def _produce_worker(arguments: tuple) -> dict:
    return produce(*arguments)


def produce_saturated(bootstrap: str, topic: str, records: int, per_txn: int | None, producers: int) -> dict:
    """records/s of `producers` producer processes writing `records` together (`produce` in each, a share
    each), from their common start to the end of the last one."""
    import multiprocessing

    start_at = time.time() + SATURATED_START_S
    share = records // producers
    with multiprocessing.get_context("spawn").Pool(producers) as pool:
        results = pool.map(_produce_worker, [(bootstrap, topic, share, per_txn, f"{topic}-{index}", start_at)
                                             for index in range(producers)])
    elapsed = max(result["ended_at"] for result in results) - start_at
    return {"producers": producers, "records": share * producers, "seconds": round(elapsed, 2),
            "records_per_s": round(share * producers / elapsed)}


CONCURRENT_PRODUCERS = 16
CONCURRENT_SECONDS = 10.0
CONCURRENT_WARMUP_TRANSACTIONS = 3  # each producer's first ones (coordinator lookup, first connections) left out


def produce_concurrently(bootstrap: str, topic: str, producers: int, seconds: float) -> dict:
    """transactions/s of `producers` transactional producers committing 10-record transactions together."""
    import threading

    from confluent_kafka import Producer

    stop = threading.Event()
    times: list[list[float]] = []

    def loop(index: int) -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "acks": "all",
                             "transactional.id": f"bench-concurrent-{index}"})
        producer.init_transactions(60)
        mine: list[float] = []
        while not stop.is_set():
            started = time.perf_counter()
            producer.begin_transaction()
            for i in range(10):
                producer.produce(topic, value=VALUE, partition=i % PARTITIONS)
            producer.flush(60)
            producer.commit_transaction(60)
            mine.append((time.perf_counter() - started) * 1000)
        times.append(mine[CONCURRENT_WARMUP_TRANSACTIONS:])

    threads = [threading.Thread(target=loop, args=(index,)) for index in range(producers)]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    latencies = [t for mine in times for t in mine]
    return {"producers": producers, "transactions_per_s": round(len(latencies) / seconds, 1),
            "transaction_p50_ms": round(percentile(latencies, 0.5), 1),
            "transaction_p99_ms": round(percentile(latencies, 0.99), 1)}


def consume(bootstrap: str, topic: str, expected: int, isolation: str) -> dict:
    from confluent_kafka import Consumer, TopicPartition

    # queued.min.messages raised as in bench/produce_consume.py: with the default (100,000) librdkafka's queue
    # fills faster than Python drains it and it pauses every fetch for fetch.queue.backoff.ms (1 s; "Fetch
    # backoff for 1000ms: Local: Queue full" in its fetch debug log), which is what made this ratio swing
    # between 0.6 and 1.0 from run to run.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{isolation}-{time.time()}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "queued.min.messages": 10_000_000, "queued.max.messages.kbytes": 1_048_576})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    count, started, deadline = 0, None, time.monotonic() + 300
    while count < expected and time.monotonic() < deadline:
        got = sum(1 for m in consumer.consume(10_000, 0.5) if not m.error())
        if got and started is None:
            started = time.perf_counter()  # from the first records: connection set-up is not the rate
        count += got
    elapsed = time.perf_counter() - (started or time.perf_counter())
    consumer.close()
    return {"records": count, "seconds": round(elapsed, 2), "records_per_s": round(count / elapsed)}


def run(records: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="flotilla-bench-txn-") as directory:
        cluster = LocalCluster(os.path.join(directory, "cluster"), nodes=3, broker={
            **FAST_BROKER_SETTINGS, "offsets_topic_num_partitions": 5, "transaction_state_log_num_partitions": 5})
        cluster.start()
        try:
            wait_for_quorum(cluster)
            for name in ("bench-idempotent", "bench-txn-10", "bench-txn-1000", "bench-txn-concurrent",
                         "bench-idempotent-saturated", "bench-txn-1000-saturated"):
                create_topic(cluster, name, PARTITIONS, 3)
            bootstrap = cluster.bootstrap_servers
            small = max(records // 20, 2_000)  # 10-record transactions are slow: a smaller run of them
            baseline = produce(bootstrap, "bench-idempotent", records, None, "")
            txn_1000 = produce(bootstrap, "bench-txn-1000", records, 1_000, "bench-1000")
            txn_10 = produce(bootstrap, "bench-txn-10", small, 10, "bench-10")
            concurrent = produce_concurrently(bootstrap, "bench-txn-concurrent", CONCURRENT_PRODUCERS,
                                              CONCURRENT_SECONDS)
            saturated_baseline = produce_saturated(bootstrap, "bench-idempotent-saturated", records, None,
                                                   SATURATED_PRODUCERS)
            saturated = produce_saturated(bootstrap, "bench-txn-1000-saturated", records, 1_000, SATURATED_PRODUCERS)
            # Each read takes a fraction of a second: the two isolation levels take turns five times and each
            # keeps its median, so one slow read does not decide the ratio.
            reads: dict[str, list[dict]] = {"read_committed": [], "read_uncommitted": []}
            for _ in range(CONSUME_ROUNDS):
                for isolation, runs in reads.items():
                    runs.append(consume(bootstrap, "bench-txn-1000", records, isolation))
            committed, uncommitted = (sorted(runs, key=lambda r: r["records_per_s"])[len(runs) // 2]
                                      for runs in reads.values())
        finally:
            cluster.stop()
    return {
        "idempotent_acks_all": baseline,
        "transactional_1000_per_txn": {**txn_1000, "ratio_to_idempotent": round(
            txn_1000["records_per_s"] / baseline["records_per_s"], 2)},
        "transactional_10_per_txn": {**txn_10, "ratio_to_idempotent": round(
            txn_10["records_per_s"] / baseline["records_per_s"], 2)},
        "concurrent_10_per_txn": {**concurrent, "ratio_to_one_producer": round(
            concurrent["transactions_per_s"] / txn_10["transactions_per_s"], 2)},
        "saturated_idempotent_acks_all": saturated_baseline,
        "saturated_transactional_1000_per_txn": {**saturated, "ratio_to_idempotent": round(
            saturated["records_per_s"] / saturated_baseline["records_per_s"], 2)},
        "read_committed": {**committed, "ratio_to_read_uncommitted": round(
            committed["records_per_s"] / uncommitted["records_per_s"], 2)},
        "read_uncommitted": uncommitted,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    runs = [run(args.records) for _ in range(args.repeat)]
    for index, result in enumerate(runs, 1):
        print(f"run {index}: {json.dumps(result)}")
        base, big, small = (result["idempotent_acks_all"], result["transactional_1000_per_txn"],
                            result["transactional_10_per_txn"])
        print(f"RESULT produce: transactional 1,000/txn {big['records_per_s']:,} records/s, 10/txn "
              f"{small['records_per_s']:,} records/s ({small['transactions_per_s']} txn/s), idempotent acks=all "
              f"{base['records_per_s']:,} records/s; ratios {big['ratio_to_idempotent']} and "
              f"{small['ratio_to_idempotent']} (target >= 0.5 at 1,000/txn)")
        print(f"RESULT commit latency (10/txn): p50 {small['commit_p50_ms']} ms, p99 {small['commit_p99_ms']} ms")
        many = result["concurrent_10_per_txn"]
        print(f"RESULT concurrent: {many['producers']} producers {many['transactions_per_s']} txn/s (transaction p50 "
              f"{many['transaction_p50_ms']} ms, p99 {many['transaction_p99_ms']} ms) vs one producer "
              f"{small['transactions_per_s']} txn/s; ratio {many['ratio_to_one_producer']}")
        busy, busy_base = result["saturated_transactional_1000_per_txn"], result["saturated_idempotent_acks_all"]
        print(f"RESULT saturated: {busy['producers']} producer processes each side, transactional 1,000/txn "
              f"{busy['records_per_s']:,} records/s vs idempotent acks=all {busy_base['records_per_s']:,}; ratio "
              f"{busy['ratio_to_idempotent']} (target >= 0.5 at 1,000/txn)")
        print(f"RESULT consume: read_committed {result['read_committed']['records_per_s']:,} records/s vs "
              f"read_uncommitted {result['read_uncommitted']['records_per_s']:,}; ratio "
              f"{result['read_committed']['ratio_to_read_uncommitted']} (target >= 0.9)")
    if len(runs) > 1:
        def median(path):
            values = sorted(r[path[0]][path[1]] for r in runs)
            return values[len(values) // 2], values[0], values[-1]
        for path in (("transactional_1000_per_txn", "ratio_to_idempotent"),
                     ("transactional_10_per_txn", "ratio_to_idempotent"),
                     ("transactional_10_per_txn", "commit_p50_ms"), ("transactional_10_per_txn", "commit_p99_ms"),
                     ("concurrent_10_per_txn", "ratio_to_one_producer"),
                     ("saturated_transactional_1000_per_txn", "ratio_to_idempotent"),
                     ("read_committed", "ratio_to_read_uncommitted")):
            mid, low, high = median(path)
            print(f"{'.'.join(path)}: median {mid} (range {low}..{high})")


if __name__ == "__main__":
    main()
