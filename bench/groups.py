"""Consumer groups on a real 3-node cluster (RF=3): offset commits through the group coordinator, time to a
full assignment (classic vs the KIP-848 consumer protocol), and a group's consume rate.

Figures, each with its baseline from the same run:
  commits     OffsetCommit requests/s (one partition each, `--window` in flight) through the coordinator,
              vs Produce requests/s of one 100-byte record with acks=all through the same client to the
              leader of one partition (a commit is an acks=all append of one record to __consumer_offsets);
              then p50/p99 commit latency paced at `--paced-rate` commits/s.
  assignment  seconds from starting 10 consumer processes until they own every partition of a 10-partition
              topic, and after SIGKILLing one until the other 9 own them all again (session timeout 6 s);
              eager and cooperative-sticky of the classic protocol and KIP-848's consumer protocol
              (`group.protocol=consumer`, the broker's session timeout 6 s and heartbeat interval 500 ms);
              the ratios are cooperative / eager and consumer / eager.
  consume     records/s of 3 group members reading a 6-partition topic from the beginning vs the same three
              consumers with assign() of two partitions each.

    python bench/groups.py [--commits 20000] [--window 32] [--paced-rate 1000] [--records 300000]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cli.local_cluster import LocalCluster  # noqa: E402
from tests.net.cluster_helpers import (  # noqa: E402
    FAST_BROKER_SETTINGS,
    create_topic,
    eventually,
    metadata,
    topic_of,
    wait_for_quorum,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


# --- commits -------------------------------------------------------------------------------------------


def measure_requests(bootstrap: str, build, broker_of, count: int, window: int, max_seconds: float,
                     paced_rate: float | None = None) -> dict:
    """Send `count` requests built by `build(i)` (api key, request) to `broker_of()` with `window` in flight
    (or paced at `paced_rate`/s); requests/s and latency percentiles in ms."""
    import trio

    from net.client.aio import KafkaClient

    latencies: list[float] = []

    async def main() -> float:
        async with KafkaClient(bootstrap, "bench-groups") as client:
            broker = await broker_of(client)
            sent = iter(range(count))
            started = trio.current_time()
            deadline = started + max_seconds

            async def worker(slot: int) -> None:
                for i in sent:
                    if trio.current_time() > deadline:
                        return
                    if paced_rate:
                        await trio.sleep_until(started + i / paced_rate)
                    api_key, request = build(i)
                    begin = time.perf_counter()
                    response = await client.send(broker, api_key, request)
                    latencies.append((time.perf_counter() - begin) * 1000)
                    assert response is not None

            async with trio.open_nursery() as nursery:
                for slot in range(window):
                    nursery.start_soon(worker, slot)
            return trio.current_time() - started

    elapsed = trio.run(main)
    return {"requests": len(latencies), "per_s": len(latencies) / elapsed, "p50_ms": percentile(latencies, 0.5),
            "p99_ms": percentile(latencies, 0.99)}


def bench_commits(cluster: LocalCluster, args) -> None:
    from net.client.groups import find_coordinator
    from net.protocol import messages
    from net.protocol.codec import ApiKey
    from partitions.records import build_batch

    create_topic(cluster, "commit-target", 6, 3, min_insync_replicas="2")
    eventually(lambda: topic_of(metadata(cluster), "commit-target"))
    group = "bench-commits"

    def commit(i: int):
        return ApiKey.OFFSET_COMMIT, messages.OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=-1, member_id="",
            topics=[messages.OffsetCommitRequest.OffsetCommitRequestTopic(name="commit-target", partitions=[
                messages.OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=i % 6, committed_offset=i,
                                                      committed_metadata="")])])

    value = b"x" * 100

    def produce(i: int):
        batch = build_batch([(None, value)], base_timestamp=int(time.time() * 1000))
        return ApiKey.PRODUCE, messages.ProduceRequest(acks=-1, timeout_ms=30_000, topic_data=[
            messages.ProduceRequest.TopicProduceData(name="commit-target", partition_data=[
                messages.ProduceRequest.PartitionProduceData(index=0, records=batch)])])

    async def coordinator(client):
        return await find_coordinator(client, group)

    async def leader(client):
        return (await client.leader_for("commit-target", 0)).leader

    produced = measure_requests(cluster.bootstrap_servers, produce, leader, args.commits, args.window, args.max_seconds)
    committed = measure_requests(cluster.bootstrap_servers, commit, coordinator, args.commits, args.window,
                                 args.max_seconds)
    paced = measure_requests(cluster.bootstrap_servers, commit, coordinator,
                             int(args.paced_rate * args.paced_seconds), args.window, args.paced_seconds * 2,
                             paced_rate=args.paced_rate)
    print(f"RESULT commits: {committed['per_s']:,.0f} OffsetCommit/s (window {args.window}), "
          f"p50 {committed['p50_ms']:.1f} ms p99 {committed['p99_ms']:.1f} ms; baseline acks=all produce of one "
          f"record: {produced['per_s']:,.0f} requests/s -> ratio {committed['per_s'] / produced['per_s']:.2f}")
    print(f"RESULT commits paced at {args.paced_rate:,.0f}/s: {paced['per_s']:,.0f}/s achieved, "
          f"p50 {paced['p50_ms']:.1f} ms p99 {paced['p99_ms']:.1f} ms")


# --- assignment ----------------------------------------------------------------------------------------


def start_members(cluster: LocalCluster, directory: str, group: str, topic: str, config: dict, count: int):
    members = []
    for i in range(count):
        out = os.path.join(directory, f"{group}-{i}.events")
        members.append((subprocess.Popen(
            [sys.executable, "-m", "tests.groupcoord.consumer_process", "confluent", cluster.bootstrap_servers, group,
             topic, out, json.dumps(config)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), out))
    return members


def assignment_of(out: str) -> set[int]:
    if not os.path.exists(out):
        return set()
    with open(out) as events:
        lines = [line[2:].strip() for line in events if line.startswith("A ")]
    return {int(p) for p in lines[-1].split(",") if p} if lines else set()


def wait_covered(members, partitions: int, seconds: float) -> float:
    started = time.monotonic()

    def covered() -> bool:
        owned = [assignment_of(out) for _, out in members]
        return sum(map(len, owned)) == partitions and set().union(*owned) == set(range(partitions)) \
            and all(owned)

    eventually(covered, seconds, interval=0.05, what="full assignment")
    return time.monotonic() - started


def bench_assignment(cluster: LocalCluster, directory: str) -> None:
    create_topic(cluster, "assign-target", 10, 3, min_insync_replicas="2")
    eventually(lambda: topic_of(metadata(cluster), "assign-target"))
    figures = {}
    classic = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    for name, config in (("eager", classic),
                         ("cooperative", {**classic, "partition.assignment.strategy": "cooperative-sticky"}),
                         ("consumer", {"group.protocol": "consumer"})):
        members = start_members(cluster, directory, f"assign-{name}", "assign-target", config, 10)
        try:
            cold = wait_covered(members, 10, 120)
            victim, _ = members[0]
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            after_kill = wait_covered(members[1:], 10, 120)
        finally:
            for process, _ in members:
                if process.poll() is None:
                    process.terminate()
                    process.wait(30)
        figures[name] = (cold, after_kill)
        print(f"RESULT assignment {name}: 10 members fully assigned {cold:.2f} s after start, "
              f"{after_kill:.2f} s after one was SIGKILLed")
    for name in ("cooperative", "consumer"):
        print(f"RESULT assignment ratio {name}/eager: cold {figures[name][0] / figures['eager'][0]:.2f}, "
              f"after kill {figures[name][1] / figures['eager'][1]:.2f}")


# --- consume -------------------------------------------------------------------------------------------


IDLE_SECONDS_TO_STOP = 3.0


def consume_worker(argv: list[str]) -> int:
    """--worker BOOTSTRAP TOPIC GROUP|- PARTITIONS|-: consume (in GROUP with auto commit, or assign() of
    PARTITIONS from offset 0) until nothing arrives for IDLE_SECONDS_TO_STOP; print the record count and the
    wall times of the first and last record."""
    from confluent_kafka import Consumer, TopicPartition

    bootstrap, topic, group, partitions = argv[:4]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group if group != "-" else "bench-assign",
                         "auto.offset.reset": "earliest", "enable.auto.commit": group != "-"})
    if partitions == "-":
        consumer.subscribe([topic])
    else:
        consumer.assign([TopicPartition(topic, int(p), 0) for p in partitions.split(",")])
    count, first, last = 0, None, None
    deadline = time.time() + 600
    while time.time() < deadline:
        messages = [m for m in consumer.consume(1000, 0.5) if m.error() is None]
        now = time.time()
        if messages:
            count += len(messages)
            first = first or now
            last = now
        elif last is not None and now - last > IDLE_SECONDS_TO_STOP:
            break
    print(json.dumps({"records": count, "first": first, "last": last}))
    consumer.close()
    return 0


def bench_consume(cluster: LocalCluster, records: int) -> None:
    topic = "consume-target"
    create_topic(cluster, topic, 6, 3, min_insync_replicas="2")
    eventually(lambda: topic_of(metadata(cluster), topic))
    subprocess.run(["kcat", "-b", cluster.bootstrap_servers, "-P", "-t", topic, "-X", "acks=all"],
                   input=b"".join(b"%099d\n" % i for i in range(records)), check=True, timeout=600)
    rates = {}
    for mode, plans in (("assign", [("-", "0,1"), ("-", "2,3"), ("-", "4,5")]),
                        ("group", [("bench-consume", "-")] * 3)):
        workers = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", cluster.bootstrap_servers,
                                     topic, group, partitions], cwd=ROOT, stdout=subprocess.PIPE)
                   for group, partitions in plans]
        outputs = [json.loads(w.communicate(timeout=660)[0]) for w in workers]
        total = sum(o["records"] for o in outputs)
        assert total >= records, f"{mode}: {total} of {records} records consumed"
        span = max(o["last"] for o in outputs if o["last"]) - min(o["first"] for o in outputs if o["first"])
        rates[mode] = total / span
    print(f"RESULT consume: 3-member group {rates['group']:,.0f} records/s; the same consumers with assign() "
          f"{rates['assign']:,.0f} records/s -> ratio {rates['group'] / rates['assign']:.2f}")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return consume_worker(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=20_000)
    parser.add_argument("--window", type=int, default=32)
    parser.add_argument("--paced-rate", type=float, default=1_000)
    parser.add_argument("--paced-seconds", type=float, default=10)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--max-seconds", type=float, default=60)
    parser.add_argument("--only", choices=["commits", "assignment", "consume"], action="append")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-groups-") as directory:
        cluster = LocalCluster(os.path.join(directory, "cluster"), nodes=3, broker={
            **FAST_BROKER_SETTINGS, "offsets_topic_num_partitions": 10, "group_consumer_session_timeout_ms": 6000,
            "group_consumer_heartbeat_interval_ms": 500,
            # Kafka's default, as a production broker runs (the test settings make it 0): the classic protocol's
            # time to a full assignment includes it, as it always has in this bench's figures.
            "group_initial_rebalance_delay_ms": 3000})
        cluster.start()
        try:
            wait_for_quorum(cluster)
            if not args.only or "commits" in args.only:
                bench_commits(cluster, args)
            if not args.only or "assignment" in args.only:
                bench_assignment(cluster, directory)
            if not args.only or "consume" in args.only:
                bench_consume(cluster, args.records)
        finally:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
