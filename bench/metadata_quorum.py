"""Committed metadata records per second through a 3-node Raft quorum, and commit latency p50/p99.

Two runs, same machine, same moment:
  flotilla : three RaftShell + RaftDriver members (our pysyncobj adapter) on 127.0.0.1, journals on real files
             with fsync before any message or acknowledgement leaves a step (group commit);
  stock    : three stock pysyncobj 0.3.17 SyncObj members on 127.0.0.1 with their own TCP transport and an
             mmap FileJournal that never fsyncs (what the library does as shipped), in a separate process so
             none of our patches apply.
Each proposes one ~100-byte metadata record per entry, with `--window` proposals in flight, for `--records`
entries or `--max-seconds`, whichever comes first; latency is proposal to commit acknowledgement.

    python bench/metadata_quorum.py [--records 20000] [--window 64] [--max-seconds 60]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def percentile(sorted_values: list[float], fraction: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * fraction))]


def run_flotilla(directory: str, records: int, window: int, max_seconds: float) -> dict:
    import trio

    from metadata.records import ConfigRecord, ConfigResourceType, encode_record_batch
    from net.filestorage import FileStorage
    from cli.local_cluster import free_ports
    from raftlog.port import NotLeaderError
    from raftlog.shell import RaftShell

    ports = free_ports(3)
    peers_of = {i: {j: ("127.0.0.1", ports[j - 1]) for j in (1, 2, 3) if j != i} for i in (1, 2, 3)}
    entry = encode_record_batch([ConfigRecord(resource_type=ConfigResourceType.TOPIC, resource_name="bench",
                                              name="retention.ms", value="6" * 60)])
    latencies_ms: list[float] = []

    async def main():
        shells = {}
        async with trio.open_nursery() as nursery:
            for node_id in (1, 2, 3):
                shell = RaftShell.create(
                    node_id, peers_of[node_id], "127.0.0.1", ports[node_id - 1],
                    FileStorage(os.path.join(directory, f"node-{node_id}")), "metadata",
                    lambda: b"", lambda blob: None, "bench", None,
                )
                shells[node_id] = shell
                nursery.start_soon(_drain, shell)
                await nursery.start(shell.run)
            leader = await _wait_for_leader(shells)
            started = time.perf_counter()
            deadline = started + max_seconds
            remaining = [records]

            async def proposer():
                while remaining[0] > 0 and time.perf_counter() < deadline:
                    remaining[0] -= 1
                    sent = time.perf_counter()
                    try:
                        await leader.propose(entry, 10_000)
                    except NotLeaderError:
                        return
                    latencies_ms.append((time.perf_counter() - sent) * 1000)

            async with trio.open_nursery() as proposers:
                for _ in range(window):
                    proposers.start_soon(proposer)
            elapsed = time.perf_counter() - started
            nursery.cancel_scope.cancel()
        return elapsed

    async def _drain(shell):
        async for _ in shell.committed_feed():
            pass

    async def _wait_for_leader(shells):
        while True:
            for shell in shells.values():
                if shell.status().is_leader:
                    return shell
            await trio.sleep(0.05)

    elapsed = trio.run(main)
    latencies_ms.sort()
    return {"records": len(latencies_ms), "seconds": elapsed, "rec_per_s": len(latencies_ms) / elapsed,
            "p50_ms": statistics.median(latencies_ms), "p99_ms": percentile(latencies_ms, 0.99)}


STOCK_SCRIPT = r'''
import json, sys, threading, time
from pysyncobj import SyncObj, SyncObjConf, replicated

class Store(SyncObj):
    def __init__(self, self_address, others, journal):
        super().__init__(self_address, others, SyncObjConf(journalFile=journal, dynamicMembershipChange=False))
        self.count = 0

    @replicated
    def put(self, value):
        self.count += 1
        return self.count

ports, directory, records, window, max_seconds = json.loads(sys.argv[1])
addresses = [f"127.0.0.1:{p}" for p in ports]
nodes = [Store(a, [b for b in addresses if b != a], f"{directory}/stock-{i}.journal") for i, a in enumerate(addresses)]
deadline = time.time() + 60
while time.time() < deadline and not any(n._isLeader() for n in nodes):
    time.sleep(0.05)
leader = next(n for n in nodes if n._isLeader())
latencies, lock, in_flight = [], threading.Lock(), threading.Semaphore(window)
value = "6" * 100
started = time.perf_counter()
stop_at = started + max_seconds
sent = 0
done = threading.Event()
def make_callback(t0):
    def callback(result, error):
        with lock:
            latencies.append((time.perf_counter() - t0) * 1000)
            if len(latencies) >= sent_total[0]:
                done.set()
        in_flight.release()
    return callback
sent_total = [records]
while sent < records and time.perf_counter() < stop_at:
    in_flight.acquire()
    leader.put(value, callback=make_callback(time.perf_counter()))
    sent += 1
sent_total[0] = sent
done.wait(max_seconds + 30)
elapsed = time.perf_counter() - started
for n in nodes:
    n.destroy()
latencies.sort()
print(json.dumps({"records": len(latencies), "seconds": elapsed, "rec_per_s": len(latencies) / elapsed,
                  "p50_ms": latencies[len(latencies) // 2], "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]}))
'''


def run_stock(directory: str, records: int, window: int, max_seconds: float) -> dict:
    from cli.local_cluster import free_ports

    arguments = json.dumps([free_ports(3), directory, records, window, max_seconds])
    result = subprocess.run([sys.executable, "-c", STOCK_SCRIPT, arguments], capture_output=True, text=True,
                            timeout=max_seconds + 120)
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-2000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--window", type=int, default=64, help="proposals in flight")
    parser.add_argument("--max-seconds", type=float, default=60.0)
    args = parser.parse_args()
    random.seed(0)
    with tempfile.TemporaryDirectory(prefix="flotilla-quorum-bench-") as directory:
        ours = run_flotilla(os.path.join(directory, "ours"), args.records, args.window, args.max_seconds)
        stock = run_stock(directory, args.records, args.window, args.max_seconds)
    for name, figures in (("flotilla.fsync", ours), ("stock_pysyncobj.no_fsync", stock)):
        print(f"RESULT metadata_quorum.{name} {figures['rec_per_s']:,.0f} records/s p50={figures['p50_ms']:.2f} ms "
              f"p99={figures['p99_ms']:.2f} ms records={figures['records']} window={args.window}", flush=True)
    print(f"RESULT metadata_quorum.ratio_flotilla_to_stock {ours['rec_per_s'] / stock['rec_per_s']:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
