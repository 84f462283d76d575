"""Produce and consume throughput and produce latency of real Flotilla nodes, driven by librdkafka
(confluent-kafka) so that the broker, not the client, is what is measured.

Scenarios (each on a fresh LocalCluster on 127.0.0.1):
  1 node,  RF=1, acks=1   : 100-byte and 1 KiB records, produce records/s and MB/s, consume records/s (the
                            median of --consume-runs reads of the whole topic, with their range)
  3 nodes, RF=3, acks=all : 100-byte records, produce records/s, consume records/s
  3 nodes, RF=3, acks=all : produce latency p50/p99 at a fixed 10,000 records/s
  1 node acks=1 and 3 nodes RF=3 acks=all, linger.ms=0 (a 100-byte record per request while none waits;
                            the Produce requests are counted, with the nodes' CPU per request and the cores
                            the nodes and the load generator use while the step runs, the machine's two cores
                            being shared by both): p50/p99 at record rates stepped up, and the
                            highest rate with p99 <= 10 ms there and at every step below; the 3-node row
                            once more with the partition leader's node on a CPU of its own; both once more
                            with the rate spread over producer processes of at most 5,000 records/s each,
                            so that every request carries one record (--small-only runs just these rows)
  1 node,  RF=1, acks=1   : 1 KiB records over SASL_SSL (TLS 1.2+, SASL/PLAIN, the authorizer on) and over
                            PLAINTEXT on the same node: produce and consume, and their ratio (--security-only
                            runs just these rows)
Baseline, same run: a raw loopback socket-to-file copy (one Python process receives on a TCP socket and
writes to a file in the same directory as the nodes' data), MB/s. Every figure is printed with its ratio to
the baseline. Loads are bounded by record count and by --max-seconds per phase.

    python bench/produce_consume.py [--records 1000000] [--max-seconds 60]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cli.local_cluster import LocalCluster  # noqa: E402
from tests.net.cluster_helpers import create_topic, eventually, metadata, topic_of, wait_for_quorum  # noqa: E402

MB = 1_000_000


def baseline_socket_to_file(directory: str, total_bytes: int, chunk_bytes: int = 1 << 20) -> float:
    """MB/s of a raw loopback TCP stream written to a file by the receiver."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    received = []

    def receive():
        connection, _ = server.accept()
        with connection, open(os.path.join(directory, "baseline.bin"), "wb") as sink:
            count = 0
            while True:
                data = connection.recv(chunk_bytes)
                if not data:
                    break
                sink.write(data)
                count += len(data)
            received.append(count)

    receiver = threading.Thread(target=receive)
    receiver.start()
    payload = os.urandom(chunk_bytes)
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as client:
        sent = 0
        while sent < total_bytes:
            client.sendall(payload)
            sent += len(payload)
    receiver.join()
    elapsed = time.perf_counter() - started
    server.close()
    os.unlink(os.path.join(directory, "baseline.bin"))
    return received[0] / elapsed / MB


def produce(bootstrap: str, topic: str, partitions: int, records: int, size: int, acks: str, max_seconds: float,
            directory: str, client_args: tuple[str, ...] = ()) -> dict:
    """One kcat (librdkafka in C) per partition sends `records` lines of `size` bytes from a file:
    a load generator fast enough that the broker is what limits the figure (a Python loop calling
    confluent-kafka tops out near 300,000 calls/s on this machine, below what the broker takes)."""
    path = os.path.join(directory, f"records-{records}x{size}.txt")
    if not os.path.exists(path):
        line = (os.urandom(size).hex()[: size - 1] + "\n").encode()
        with open(path, "wb") as out:
            for _ in range(records // 10_000):
                out.write(line * 10_000)
            out.write(line * (records % 10_000))
    started = time.perf_counter()
    children = []
    for partition in range(partitions):
        children.append(subprocess.Popen(
            ["kcat", "-b", bootstrap, "-P", "-t", topic, "-p", str(partition), "-l", path,
             "-X", f"acks={acks}", "-X", "linger.ms=5", "-X", "batch.size=1000000",
             "-X", "batch.num.messages=100000", "-X", "queue.buffering.max.messages=2000000",
             "-X", "queue.buffering.max.kbytes=2097151", "-X", f"message.timeout.ms={int(max_seconds * 1000) + 30_000}",
             *client_args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        ))
    errors = 0
    for child in children:
        _, stderr = child.communicate(timeout=max_seconds + 120)
        errors += child.returncode != 0 or b"ERROR" in stderr
    elapsed = time.perf_counter() - started
    delivered = records * partitions  # each producer sends the whole file to its own partition
    return {"records": delivered, "seconds": elapsed, "errors": errors,
            "rec_per_s": delivered / elapsed, "mb_per_s": delivered * size / elapsed / MB}


def consume(bootstrap: str, topic: str, partitions: int, expected: int, size: int, max_seconds: float,
            client_args: tuple[str, ...] = ()) -> dict:
    """kcat (librdkafka in C) reads every partition from the beginning to the end: a consumer fast enough
    that the broker's fetch path is what is measured. queued.min.messages is raised so that librdkafka does
    not pause fetching whenever two 10 MB responses of 100-byte records (~180,000 messages) wait in its queue
    (the default 100,000): those pauses made the figure swing by 2x with a fast broker.

    kcat stops at the `expected`-th record (-c), as kafka-consumer-perf-test stops at --messages: with -e alone
    it stops at the end-of-partition event instead, which librdkafka raises only from the answer to one more
    fetch at the high watermark, a fetch the broker parks for fetch.wait.max.ms (500 ms) as Kafka's does. That
    fixed half second of client wait was a third to a half of the figure at a million records. -e stays, so a
    partition holding fewer records than expected still ends the run, and the count is checked by the caller."""
    started = time.perf_counter()
    result = subprocess.run(
        ["kcat", "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-c", str(expected), "-q",
         "-f", "%o\\n",
         "-X", "fetch.max.bytes=52428800", "-X", "max.partition.fetch.bytes=10485760",
         "-X", "queued.max.messages.kbytes=1048576", "-X", "queued.min.messages=10000000", *client_args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=max_seconds + 60,
    )
    elapsed = time.perf_counter() - started
    count = result.stdout.count(b"\n")
    return {"records": count, "seconds": elapsed, "rec_per_s": count / elapsed, "mb_per_s": count * size / elapsed / MB}


def latency(bootstrap: str, topic: str, rate: float, seconds: float, acks: str = "all",
            linger_ms: int | None = None, keep_latencies: bool = False, on_start=None) -> dict:
    from confluent_kafka import Producer

    # librdkafka's default linger (5 ms) batches what arrives within it, as a producer does out of the box;
    # linger_ms=0 sends a record as its own request whenever no request waits for the connection (the
    # small-request rows; each row counts the requests).
    # librdkafka's statistics count the Produce requests it sent, so a row says how many records a request
    # carried: linger.ms=0 sends a record alone only while nothing waits for the connection; records that
    # arrive while requests are in flight leave together.
    reports: list[tuple[float, dict]] = []
    config = {"bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": False,
              "statistics.interval.ms": STATISTICS_INTERVAL_MS,
              "stats_cb": lambda text: reports.append((time.perf_counter(), json.loads(text)))}
    if linger_ms is not None:
        config["linger.ms"] = linger_ms
    producer = Producer(config)
    latencies_ms = []
    value = os.urandom(100)
    total = int(rate * seconds)
    # The load generator must not take the CPU the brokers need (this machine has two cores): it sleeps until
    # each record's scheduled time, as Kafka's ThroughputThrottler does, instead of spinning on poll(0), and a
    # second thread serves delivery reports as they arrive (poll blocks in librdkafka, without the GIL).
    # Latency counts from the scheduled time, so a late send is counted, not hidden.
    serving = threading.Event()
    serving.set()

    def serve_reports() -> None:
        while serving.is_set():
            producer.poll(0.05)

    reporter = threading.Thread(target=serve_reports, daemon=True)
    reporter.start()
    # A new producer spends its first ~100 ms connecting and fetching metadata: one record, flushed, before the
    # clock starts, so the figures are the steady state rather than the producer's start.
    producer.produce(topic, value=value, partition=0)
    producer.flush(30)
    requests_before = _produce_requests(reports, time.perf_counter())
    started = time.perf_counter()
    if on_start is not None:
        on_start()
    cpu_before = cpu_seconds(os.getpid())  # the load generator's own CPU: Python and librdkafka's threads
    try:
        for index in range(total):
            scheduled = started + index / rate
            delay = scheduled - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            producer.produce(topic, value=value, partition=0,
                             on_delivery=lambda error, message, s=scheduled: latencies_ms.append(
                                 (time.perf_counter() - s) * 1000) if error is None else None)
        producer.flush(30)
        client_cores = (cpu_seconds(os.getpid()) - cpu_before) / (time.perf_counter() - started)
        requests = _produce_requests(reports, time.perf_counter()) - requests_before
    finally:
        serving.clear()
        reporter.join()
    result = latency_summary(latencies_ms, requests)
    result["client_cores"] = client_cores
    if keep_latencies:
        result["latencies_ms"] = latencies_ms
    return result


def latency_summary(latencies_ms: list[float], produce_requests: int) -> dict:
    """Records, p50, p99 and max of `latencies_ms` (sorted here), with the Produce requests that carried them."""
    latencies_ms.sort()
    return {"records": len(latencies_ms), "p50_ms": statistics.median(latencies_ms),
            "p99_ms": latencies_ms[int(len(latencies_ms) * 0.99) - 1], "max_ms": latencies_ms[-1],
            "produce_requests": produce_requests}


STATISTICS_INTERVAL_MS = 200


def _produce_requests(reports: list[tuple[float, dict]], since: float, seconds_max: float = 5.0) -> int:
    """Produce requests the producer had sent by the first statistics report emitted after `since` (the
    reporter thread's poll serves them)."""
    deadline = time.perf_counter() + seconds_max
    while not (reports and reports[-1][0] > since):
        assert time.perf_counter() < deadline, "no librdkafka statistics"
        time.sleep(STATISTICS_INTERVAL_MS / 4000)
    return sum(broker.get("req", {}).get("Produce", 0) for broker in reports[-1][1]["brokers"].values())


SMALL_REQUEST_RATES = (1_000, 2_000, 3_000, 5_000, 7_500, 10_000, 15_000, 20_000)
SMALL_REQUEST_P99_MS_MAX = 10.0
# (nodes, acks, the partition leader's node on a CPU of its own): the last row runs the 3-node one again with
# the leader's process alone on the last CPU and the other nodes and the load generator on the others.
SMALL_REQUEST_CLUSTERS = ((1, "1", False, False), (3, "all", False, False), (3, "all", True, False),
                          (1, "1", False, True), (3, "all", False, True))
# A producer at up to this rate sends each record as its own request (about 0.99 requests per record measured on
# one node at 5,000 records/s; 0.73 at 10,000).
PER_PRODUCER_RATE_MAX = 5_000


def _latency_worker(arguments: tuple) -> dict:
    """`latency` in a process of its own, with its sorted latencies (a producer process of the
    one-record-per-request rows)."""
    bootstrap, topic, rate, seconds, acks, start_at = arguments
    delay = start_at - time.time()
    if delay > 0:
        time.sleep(delay)  # every producer's clock starts together
    return latency(bootstrap, topic, rate, seconds, acks, 0, keep_latencies=True)


def parallel_latency(bootstrap: str, topic: str, rate: int, seconds: float, acks: str, producers: int,
                     window: CpuWindow | None = None) -> dict:
    """`rate` records/s from `producers` confluent-kafka producers, each in a process of its own at
    rate/producers: at up to PER_PRODUCER_RATE_MAX each sends every record as its own Produce request, where one
    producer at a higher rate pairs records behind its request in flight (and its Python loop, waking late,
    does too). p50/p99 over every record of every producer."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    start_at = time.time() + 3.0  # the processes start, import and connect first (their warm-up record)
    timer = None
    if window is not None:  # the nodes' CPU from the producers' common start, not during their start-up
        timer = threading.Timer(max(0.0, start_at - time.time()), window.begin)
        timer.start()
    with context.Pool(producers) as pool:
        results = pool.map(_latency_worker, [(bootstrap, topic, rate / producers, seconds, acks, start_at)
                                             for _ in range(producers)])
    if timer is not None:
        timer.join()
    summary = latency_summary([value for result in results for value in result["latencies_ms"]],
                              sum(result["produce_requests"] for result in results))
    summary["client_cores"] = sum(result["client_cores"] for result in results)
    return summary


def small_request_rows(root: str, seconds: float) -> None:
    """linger.ms=0 (a 100-byte record per Produce request, unless records queue behind one in flight; each row
    prints the Produce requests librdkafka sent): the record rate stepped up on a fresh cluster, p50/p99 at each
    step, and the highest rate whose p99 stays under 10 ms there and at every step below it, with the Produce
    requests/s sent at that step (1 node acks=1; 3 nodes RF=3 acks=all, as the kernel schedules them and with
    the partition leader on a CPU of its own). One producer sends a record alone only while none waits: above
    about 7,500 records/s it pairs them, so the `one_record_per_request` rows spread the same rates over
    producer processes of at most PER_PRODUCER_RATE_MAX records/s each, whose requests carry one record each:
    their request rate is the record rate. Steps stop after the first one whose p99 exceeds 10 ms twice over
    (the broker fell behind)."""
    for nodes, acks, pinned, spread in SMALL_REQUEST_CLUSTERS:
        cpus = sorted(os.sched_getaffinity(0))
        if pinned and len(cpus) < 2:
            print("RESULT 3node.acksall.linger0.leader_on_own_cpu skipped: one CPU", flush=True)
            continue
        name = f"{nodes}node.acks{acks}.linger0" + (".leader_on_own_cpu" if pinned else "") + \
            (".one_record_per_request" if spread else "")
        cluster = start_cluster(os.path.join(root, f"small-{nodes}{'-pinned' if pinned else ''}"
                                                   f"{'-spread' if spread else ''}"), nodes)
        best, best_requests, failed = 0, 0.0, False
        try:
            create_topic(cluster, "small", 1, 1 if nodes == 1 else 3, min_insync_replicas="1" if nodes == 1 else "2")
            eventually(lambda: topic_of(metadata(cluster), "small"))
            if pinned:
                leader = topic_of(metadata(cluster), "small")["partitions"][0]["leader"]
                pin_leader(cluster, leader, cpus)
            latency(cluster.bootstrap_servers, "small", 500, 1.0, acks, 0)  # connections and metadata warm
            for rate in SMALL_REQUEST_RATES:
                producers = -(-rate // PER_PRODUCER_RATE_MAX) if spread else 1
                window = CpuWindow(cluster)
                if spread:
                    measured = parallel_latency(cluster.bootstrap_servers, "small", rate, seconds, acks, producers,
                                                window)
                else:
                    measured = latency(cluster.bootstrap_servers, "small", rate, seconds, acks, 0,
                                       on_start=window.begin)
                window.end()
                requests_per_s = measured["produce_requests"] / seconds
                node_cpu, node_cores = window.seconds(), window.cores()
                print(f"RESULT {name}.rate_{rate} p50={measured['p50_ms']:.2f} ms "
                      f"p99={measured['p99_ms']:.2f} ms records={measured['records']} "
                      f"produce_requests={measured['produce_requests']} "
                      f"({measured['produce_requests'] / (rate * seconds):.2f} per record, "
                      f"{requests_per_s:,.0f} requests/s, {producers} producer{'s' if producers > 1 else ''}; "
                      f"node CPU {sum(node_cpu.values()) * 1e6 / max(1, measured['produce_requests']):,.0f} us "
                      f"per request, " + ", ".join(f"node {node_id} {cores:.2f} cores"
                                                    for node_id, cores in sorted(node_cores.items()))
                      + f", load generator {measured['client_cores']:.2f} cores)",
                      flush=True)
                if measured["p99_ms"] <= SMALL_REQUEST_P99_MS_MAX:
                    if not failed:  # the highest step with every step up to it under the line
                        best, best_requests = rate, requests_per_s
                else:
                    failed = True
                    if measured["p99_ms"] > 2 * SMALL_REQUEST_P99_MS_MAX:
                        break
        finally:
            cluster.stop()
            os.sched_setaffinity(0, cpus)
        print(f"RESULT {name}.highest_rate_p99_under_10ms {best:,} records/s, {best_requests:,.0f} Produce "
              f"requests/s (steps {', '.join(map(str, SMALL_REQUEST_RATES))})", flush=True)


def cpu_seconds(pid: int) -> float:
    """CPU time of process `pid` so far: the scheduler's own count of every thread's run time
    (/proc/PID/task/TID/schedstat, nanoseconds), which /proc/PID/stat's tick-sampled utime and stime only
    approximate when a process wakes for short moments thousands of times a second. A thread that ends
    between two readings takes its time with it; a node runs one thread, a producer's librdkafka threads live
    as long as the producer."""
    total = 0
    for thread in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{thread}/schedstat") as schedstat:
                total += int(schedstat.read().split()[0])
        except FileNotFoundError:  # the thread ended between the listing and the read
            pass
    return total / 1e9


class CpuWindow:
    """The nodes' CPU over a window of the load: `begin()` when its clock starts (from any thread), `end()` when
    it is over (its last record acknowledged). `seconds()` is each node's CPU time in between, `cores()` that
    time over the window's length."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.pids = {node_id: process.pid for node_id, process in cluster.processes.items()}
        self.began: dict[int, float] = {}
        self.ended: dict[int, float] = {}
        self.began_at = self.ended_at = 0.0

    def begin(self) -> None:
        self.began, self.began_at = self._read()

    def end(self) -> None:
        self.ended, self.ended_at = self._read()

    def _read(self) -> tuple[dict[int, float], float]:
        return {node_id: cpu_seconds(pid) for node_id, pid in self.pids.items()}, time.monotonic()

    def seconds(self) -> dict[int, float]:
        return {node_id: self.ended[node_id] - self.began[node_id] for node_id in self.began}

    def cores(self) -> dict[int, float]:
        return {node_id: used / (self.ended_at - self.began_at) for node_id, used in self.seconds().items()}


def pin_leader(cluster: LocalCluster, leader: int, cpus: list[int]) -> None:
    """The leader node's threads on the last CPU alone; the other nodes' threads, and this process's threads
    from now on (the load generator's librdkafka threads start with its producer), on the other CPUs."""
    own, rest = {cpus[-1]}, set(cpus[:-1])
    for node_id, process in cluster.processes.items():
        for thread in os.listdir(f"/proc/{process.pid}/task"):
            os.sched_setaffinity(int(thread), own if node_id == leader else rest)
    os.sched_setaffinity(0, rest)


def start_cluster(directory: str, nodes: int) -> LocalCluster:
    replication = 1 if nodes == 1 else 3
    cluster = LocalCluster(directory, nodes=nodes, log_level="warning",
                           topic_defaults={"partitions": 1, "replication_factor": replication,
                                           "min_insync_replicas": 1 if nodes == 1 else 2})
    cluster.start()
    wait_for_quorum(cluster)
    return cluster


def report(name: str, value: float, unit: str, baseline_mb_per_s: float, mb_per_s: float | None = None, extra=""):
    ratio = f" ratio_to_baseline={mb_per_s / baseline_mb_per_s:.3f}" if mb_per_s is not None else ""
    print(f"RESULT {name} {value:,.1f} {unit}{ratio} {extra}".rstrip(), flush=True)


def security_rows(root: str, records: int, max_seconds: float, baseline: float, rounds: int = 3) -> None:
    """1 KiB records over SASL_SSL and over PLAINTEXT on one node (both through the authorizer): the cost of
    TLS and SASL as a ratio to plaintext measured in the same run."""
    cluster = LocalCluster(os.path.join(root, "secure"), nodes=1, log_level="warning", secure=True,
                           client_listeners=("SASL_SSL", "PLAINTEXT"),
                           topic_defaults={"partitions": 1, "replication_factor": 1, "min_insync_replicas": 1},
                           security={"allow_everyone_if_no_acl_found": "true"})
    cluster.start()
    try:
        secure = cluster.client_properties()
        tls_args = tuple(arg for key, value in secure.items() if key != "bootstrap.servers"
                         for arg in ("-X", f"{key}={value}"))
        plaintext = f"127.0.0.1:{cluster.listener_ports['PLAINTEXT'][1]}"
        figures: dict[str, list] = {"plaintext": [], "sasl_ssl": []}
        for round_number in range(-1, rounds):  # alternating, so drift hits both alike; round -1 only warms up
            for name, bootstrap, client_args in (("plaintext", plaintext, ()),
                                                 ("sasl_ssl", cluster.bootstrap_servers, tls_args)):
                topic = f"sec-{name}-{round_number + 1}"
                eventually(lambda: subprocess.run(["kcat", "-b", bootstrap, *client_args, "-L", "-t", topic],
                                                  capture_output=True, timeout=30).returncode == 0, 60)
                produced = produce(bootstrap, topic, 1, records, 1024, "1", max_seconds, root, client_args)
                consumed = consume(bootstrap, topic, 1, produced["records"], 1024, max_seconds, client_args)
                assert produced["errors"] == 0 and consumed["records"] == produced["records"], (produced, consumed)
                if round_number >= 0:
                    figures[name].append((produced["mb_per_s"], consumed["mb_per_s"]))
        for name, runs in figures.items():
            for phase, index in (("produce", 0), ("consume", 1)):
                values = [run[index] for run in runs]
                median = statistics.median(values)
                report(f"1node.{name}.{phase}.1024B.mb_per_s", median, "MB/s", baseline, median,
                       f"runs={','.join(f'{v:.1f}' for v in values)} records_per_run={records}")
        for phase, index in (("produce", 0), ("consume", 1)):
            ratio = (statistics.median(run[index] for run in figures["sasl_ssl"])
                     / statistics.median(run[index] for run in figures["plaintext"]))
            print(f"RESULT 1node.sasl_ssl_vs_plaintext.{phase}.1024B ratio={ratio:.3f} (target >= 0.60)", flush=True)
    finally:
        cluster.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000, help="100-byte records per produce phase")
    parser.add_argument("--max-seconds", type=float, default=60.0, help="bound per phase")
    parser.add_argument("--consume-runs", type=int, default=5, help="1-node consumes of each topic (median reported)")
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--security-only", action="store_true", help="only the SASL_SSL vs PLAINTEXT rows")
    parser.add_argument("--small-only", action="store_true", help="only the linger.ms=0 small-request rows")
    parser.add_argument("--small-seconds", type=float, default=5.0, help="seconds per small-request rate step")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="flotilla-bench-", dir=os.environ.get("BENCH_DIR"))
    baseline = baseline_socket_to_file(root, 1 << 30)
    print(f"RESULT baseline.loopback_socket_to_file {baseline:,.1f} MB/s", flush=True)
    if args.security_only:
        security_rows(root, args.records // 4, args.max_seconds, baseline)
        return 0
    if args.small_only:
        small_request_rows(root, args.small_seconds)
        return 0

    cluster = start_cluster(os.path.join(root, "one"), 1)
    try:
        for size, count, name in ((100, args.records, "t100"), (1024, args.records // 4, "t1024")):
            create_topic(cluster, name, 1, 1)
            eventually(lambda: topic_of(metadata(cluster), name))
            produced = produce(cluster.bootstrap_servers, name, 1, count, size, "1", args.max_seconds, root)
            report(f"1node.acks1.produce.{size}B.rec_per_s", produced["rec_per_s"], "rec/s", baseline,
                   produced["mb_per_s"], f"mb_per_s={produced['mb_per_s']:.1f} records={produced['records']}")
            runs = [consume(cluster.bootstrap_servers, name, 1, produced["records"], size, args.max_seconds)
                    for _ in range(args.consume_runs)]
            assert all(run["records"] == produced["records"] for run in runs), (produced, runs)
            rates = sorted(run["rec_per_s"] for run in runs)
            median = statistics.median(rates)
            report(f"1node.consume.{size}B.rec_per_s", median, "rec/s", baseline, median * size / MB,
                   f"mb_per_s={median * size / MB:.1f} records={produced['records']} median of {len(runs)} "
                   f"(rec/s {rates[0]:,.0f}-{rates[-1]:,.0f})")
    finally:
        cluster.stop()

    cluster = start_cluster(os.path.join(root, "three"), 3)
    try:
        create_topic(cluster, "r3", 3, 3, min_insync_replicas="2")
        eventually(lambda: topic_of(metadata(cluster), "r3"))
        produced = produce(cluster.bootstrap_servers, "r3", 3, args.records // 3, 100, "all", args.max_seconds, root)
        report("3node.rf3.acksall.produce.100B.rec_per_s", produced["rec_per_s"], "rec/s", baseline,
               produced["mb_per_s"], f"mb_per_s={produced['mb_per_s']:.1f} records={produced['records']}")
        consumed = consume(cluster.bootstrap_servers, "r3", 3, produced["records"], 100, args.max_seconds)
        report("3node.rf3.consume.100B.rec_per_s", consumed["rec_per_s"], "rec/s", baseline, consumed["mb_per_s"])
        create_topic(cluster, "lat", 1, 3, min_insync_replicas="2")
        eventually(lambda: topic_of(metadata(cluster), "lat"))
        measured = latency(cluster.bootstrap_servers, "lat", 10_000, args.latency_seconds)
        print(f"RESULT 3node.rf3.acksall.latency_at_10k_per_s p50={measured['p50_ms']:.2f} ms "
              f"p99={measured['p99_ms']:.2f} ms max={measured['max_ms']:.2f} ms records={measured['records']}",
              flush=True)
    finally:
        cluster.stop()
    security_rows(root, args.records // 4, args.max_seconds, baseline)
    small_request_rows(root, args.small_seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
