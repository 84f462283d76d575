"""Log compaction: how long one pass takes, and how long it holds a broker when it runs in steps.

A compacted log of `records` 100-byte records over `keys` keys (8 MiB segments, on disk through FileStorage,
page cache, no fsync) is cleaned twice, from the same starting state:
1. at once (`PartitionLog.compact`), as a broker did before passes ran in steps: the whole pass holds the
   broker's event loop, every request waits for it;
2. in steps of `--step-bytes` (the broker's log_cleaner_step_bytes, 512 KiB), as the broker runs it: one step
   per 20 ms tick. The figure is the time of each step (median, 99th percentile, largest): how long a request
   may wait behind the cleaner.
The baseline, from the same run: reading the same segment bytes with os.pread in 1 MiB slices (what a pass
cannot do faster than); the pass is reported as a multiple of it. Both results must hold the same bytes.

Usage: python3 bench/log_compaction.py [--records 500000] [--keys 1000] [--step-bytes 524288] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from net.filestorage import FileStorage  # noqa: E402
from partitions.log import PartitionLog  # noqa: E402
from partitions.log_config import LogConfig  # noqa: E402
from partitions.records import build_batch  # noqa: E402

RECORDS_PER_BATCH = 100
VALUE_BYTES = 90
READ_SLICE_BYTES = 1 << 20


def build_log(root: str, records: int, keys: int) -> PartitionLog:
    config = LogConfig(cleanup_policy=("compact",), segment_bytes=8 << 20, min_cleanable_dirty_ratio=0.0)
    log = PartitionLog.open(FileStorage(root), "bench-0", config, 0)
    for first in range(0, records, RECORDS_PER_BATCH):
        pairs = [(b"key-%d" % ((first + i) % keys), b"v" * VALUE_BYTES) for i in range(RECORDS_PER_BATCH)]
        log.append_as_leader(bytearray(build_batch(pairs, base_timestamp=1_000)), 0, 1_000)
    log.roll(1_000)
    return log


def raw_read_seconds(root: str) -> float:
    started = time.perf_counter()
    for path in sorted(os.listdir(os.path.join(root, "bench-0"))):
        if path.endswith(".log"):
            fd = os.open(os.path.join(root, "bench-0", path), os.O_RDONLY)
            try:
                position = 0
                while chunk := os.pread(fd, READ_SLICE_BYTES, position):
                    position += len(chunk)
            finally:
                os.close(fd)
    return time.perf_counter() - started


def one_round(records: int, keys: int, step_bytes: int) -> dict:
    whole_root, stepped_root = tempfile.mkdtemp(), tempfile.mkdtemp()
    try:
        whole, stepped = build_log(whole_root, records, keys), build_log(stepped_root, records, keys)
        size = whole.size_bytes
        raw_s = raw_read_seconds(whole_root)
        started = time.perf_counter()
        whole.compact(now_ms=10_000)
        whole_s = time.perf_counter() - started
        cleaning = stepped.start_compaction(10_000)
        steps = []
        while not cleaning.done:
            started = time.perf_counter()
            cleaning.advance(step_bytes)
            steps.append(time.perf_counter() - started)
        assert stepped.size_bytes == whole.size_bytes, (stepped.size_bytes, whole.size_bytes)
        steps.sort()
        return {"mb": size / 1e6, "raw_s": raw_s, "whole_s": whole_s, "steps": len(steps), "stepped_s": sum(steps),
                "step_p50_ms": steps[len(steps) // 2] * 1e3, "step_p99_ms": steps[int(len(steps) * 0.99)] * 1e3,
                "step_max_ms": steps[-1] * 1e3}
    finally:
        shutil.rmtree(whole_root, ignore_errors=True)
        shutil.rmtree(stepped_root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--step-bytes", type=int, default=512 * 1024)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    rounds = [one_round(args.records, args.keys, args.step_bytes) for _ in range(args.repeat)]
    for number, r in enumerate(rounds, 1):
        print(f"round {number}: {r['mb']:.1f} MB, raw read {r['raw_s']:.3f} s; one pass at once {r['whole_s']:.2f} s "
              f"({r['whole_s'] / r['raw_s']:.0f}x the raw read); in {r['steps']} steps of {args.step_bytes} bytes "
              f"{r['stepped_s']:.2f} s, a step p50 {r['step_p50_ms']:.1f} ms, p99 {r['step_p99_ms']:.1f} ms, "
              f"max {r['step_max_ms']:.1f} ms")
    whole = statistics.median(r["whole_s"] for r in rounds)
    step_max = statistics.median(r["step_max_ms"] for r in rounds)
    print(f"median of {len(rounds)}: a pass held the broker {whole:.2f} s at once; in steps, at most "
          f"{step_max:.1f} ms at a time ({whole * 1e3 / step_max:.0f}x shorter)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
