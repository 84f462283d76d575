"""Partition log append and read throughput against plain file writes and reads of the same bytes.

For each batch size (1 MiB and 16 KiB of 100-byte records by default) the same pre-built batch is
1. written `count` times with os.write into a plain file (the raw write rate),
2. appended `count` times with PartitionLog.append_as_leader over FileStorage (validate header and CRC-32C,
   stamp offset and epoch, one write per batch, index entries),
3. read back from the plain file in fetch-size os.pread calls (the raw read rate),
4. read back with PartitionLog.read(offset, fetch size) + .records (index lookup, one pread per slice).
Reads use a consumer-like fetch size (1 MiB, Kafka's max.partition.fetch.bytes; at least one batch) on
both sides.
Both sides run in the same directory and the same run, without fsync (page cache), so the ratio measures
the log's own overhead. The total is split into interleaved rounds and the best round of each side is kept,
which filters out the noise of a shared machine. Targets: append >= 60% of raw write with 1 MiB batches, >= 35% with 16 KiB;
read >= 50% of raw read.

Usage: python -m bench.log_append [--total-mib 1024] [--dir PATH] [--sizes 1048576,16384]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import struct

# Run as `python bench/log_append.py`, bench/ comes first on sys.path and bench/partitions.py would shadow the
# partitions package: the repository root goes first.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from net.filestorage import FileStorage  # noqa: E402

from partitions.batch import peek_offset_and_length  # noqa: E402
from partitions.log import PartitionLog
from partitions.log_config import LogConfig
from partitions.records import build_batch

RECORD_VALUE_BYTES = 100
LAST_OFFSET_DELTA = struct.Struct(">i")  # at byte 23 of a batch header
TARGETS = {1 << 20: 0.60, 16 << 10: 0.35}
READ_TARGET = 0.50


def make_batch(batch_bytes: int) -> bytes:
    """One uncompressed batch of 100-byte records, as close to `batch_bytes` as whole records allow."""
    per_record = len(build_batch([(None, b"x" * RECORD_VALUE_BYTES)] * 2)) - len(
        build_batch([(None, b"x" * RECORD_VALUE_BYTES)])
    )
    count = max(1, (batch_bytes - 61) // per_record)
    while True:
        data = build_batch([(None, bytes([i % 251]) * RECORD_VALUE_BYTES) for i in range(count)], base_timestamp=1)
        if len(data) <= batch_bytes or count == 1:
            return data
        count -= (len(data) - batch_bytes) // per_record + 1


def raw_write(path: str, data: bytes, count: int) -> float:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(count):
            os.write(descriptor, data)
        return time.perf_counter() - start
    finally:
        os.close(descriptor)


def raw_read(path: str, chunk: int, count: int) -> float:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        start = time.perf_counter()
        position = 0
        for _ in range(count):
            position += len(os.pread(descriptor, chunk, position))
        return time.perf_counter() - start
    finally:
        os.close(descriptor)


def log_append(log: PartitionLog, data: bytes, count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        log.append_as_leader(data, 1, 1_000)
    return time.perf_counter() - start


def log_read(log: PartitionLog, offset: int, end_offset: int, fetch_bytes: int) -> float:
    start = time.perf_counter()
    while offset < end_offset:
        records = log.read(offset, fetch_bytes).records
        offset = next_fetch_offset(records)
    return time.perf_counter() - start


def next_fetch_offset(records: bytes) -> int:
    """The offset after the last batch of `records`, from the 12-byte prefixes (what a lean consumer does)."""
    position = last = 0
    while position < len(records):
        last = position
        position += peek_offset_and_length(records, position)[1]
    base_offset = peek_offset_and_length(records, last)[0]
    return base_offset + LAST_OFFSET_DELTA.unpack_from(records, last + 23)[0] + 1


def measure(directory: str, batch_bytes: int, total_bytes: int, fetch_bytes: int, rounds: int) -> dict:
    """Best of `rounds` interleaved rounds (raw write, log append, raw read, log read), each total/rounds."""
    data = make_batch(batch_bytes)
    count = max(1, total_bytes // len(data) // rounds)
    megabytes = len(data) * count / 1e6
    fetch_bytes = max(fetch_bytes, len(data))
    fetch_count = -(-len(data) * count // fetch_bytes)
    raw_path = os.path.join(directory, "raw.bin")
    raw_write(raw_path, data, max(1, (64 << 20) // len(data)))  # warm-up: page cache allocation
    best = {"write": [], "append": [], "read": [], "fetch": []}
    for _ in range(rounds):
        # Each round starts from empty files on both sides, so both carry the same dirty page cache.
        best["write"].append(raw_write(raw_path, data, count))
        log = PartitionLog.open(FileStorage(directory), "bench-0", LogConfig(), 0)
        best["append"].append(log_append(log, data, count))
        best["read"].append(raw_read(raw_path, fetch_bytes, fetch_count))
        best["fetch"].append(log_read(log, 0, log.log_end_offset, fetch_bytes))
        os.unlink(raw_path)
        log.delete_directory()
    write_s, append_s, read_s, fetch_s = (min(best[key]) for key in ("write", "append", "read", "fetch"))
    return {
        "batch_bytes": len(data),
        "count": count * rounds,
        "fetch_bytes": fetch_bytes,
        "raw_write_mb_s": megabytes / write_s,
        "append_mb_s": megabytes / append_s,
        "append_batches_s": count / append_s,
        "append_ratio": write_s / append_s,
        "raw_read_mb_s": megabytes / read_s,
        "read_mb_s": megabytes / fetch_s,
        "read_batches_s": count / fetch_s,
        "read_ratio": read_s / fetch_s,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-mib", type=int, default=1024, help="bytes appended per batch size (MiB)")
    parser.add_argument("--dir", default=None, help="directory for the files (default: a temp dir under .)")
    parser.add_argument("--fetch-bytes", type=int, default=1 << 20, help="bytes per read (a consumer's fetch size)")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds; the best of each is kept")
    parser.add_argument("--sizes", default=f"{1 << 20},{16 << 10}", help="batch sizes in bytes, comma-separated")
    args = parser.parse_args(argv)
    directory = args.dir or tempfile.mkdtemp(prefix="flotilla-bench-", dir=".")
    failures = 0
    try:
        for batch_bytes in (int(size) for size in args.sizes.split(",")):
            result = measure(directory, batch_bytes, args.total_mib << 20, args.fetch_bytes, args.rounds)
            target = TARGETS.get(batch_bytes, 0.35)
            print(
                f"batch {result['batch_bytes']:>8} B x {result['count']:>6}: "
                f"append {result['append_mb_s']:8.1f} MB/s {result['append_batches_s']:9.0f} batches/s "
                f"= {result['append_ratio']:.0%} of raw write {result['raw_write_mb_s']:.1f} MB/s "
                f"(target {target:.0%}); "
                f"read ({result['fetch_bytes']} B fetches) {result['read_mb_s']:8.1f} MB/s {result['read_batches_s']:9.0f} batches/s "
                f"= {result['read_ratio']:.0%} of raw read {result['raw_read_mb_s']:.1f} MB/s (target {READ_TARGET:.0%})"
            )
            failures += result["append_ratio"] < target or result["read_ratio"] < READ_TARGET
    finally:
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
