"""`flotilla produce TOPIC` and `flotilla consume TOPIC`: lines in, records out, like kcat -P / -C.

produce: reads stdin in chunks (a thread blocks on the pipe, trio does the rest), splits lines (a trailing
newline ends a line; the bytes after the last newline are a line at end of input), optionally splits each
line into key and value at the first `--key-separator`, and batches lines: a batch is sent when it holds
`--batch-bytes` or when `--linger-ms` has passed since its first line, or at end of input. Each batch goes
out with produce_records (murmur2 for keys, one sticky partition per batch for unkeyed lines, or
`--partition`), one batch in flight at a time, so lines keep their order per partition.

consume: one task per partition fetches from its leader, starting at the latest offset (default, as
kafka-console-consumer), the earliest (`--from-beginning`), or `--offset N` (N >= 0 absolute; N < 0 that
many before the end, as kcat's -o -N). It prints each record with `--format` (kcat's -f tokens: %k key,
%v value, %o offset, %p partition, %t topic, %T timestamp ms, %K key length, %S value length, %h headers,
%% a percent sign; \\n \\t \\r \\\\ escapes; like kcat, no newline unless the format has one; the default is
the value and a newline). It stops after `--count` records, or with `--exit` once every partition is at its
end, or with `--timeout-ms T` once every partition is at its end and nothing arrived for T ms; otherwise it
runs until interrupted. An offset that falls out of range (retention) restarts the partition at its
earliest offset with a warning on stderr.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from collections.abc import Callable

import trio

from net.client.aio import KafkaClient
from cli.support import EXIT_OK, CommandError, UsageError, cluster_options, partitions_of, run_with_client
from net.client.results import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from partitions.compression import CompressionType
from partitions.errors import OffsetOutOfRangeError
from partitions.records import Record

ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1}
STDIN_CHUNK_BYTES = 64 * 1024
LINE_QUEUE_CHUNKS_MAX = 16  # chunks of lines read ahead of the producer
PRODUCE_BATCH_BYTES_DEFAULT = 512 * 1024
PRODUCE_LINGER_MS_DEFAULT = 5
CONSUME_FETCH_BYTES_MAX = 1024 * 1024
CONSUME_POLL_MS_MAX = 500
ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\"}
DEFAULT_FORMAT = "%v\\n"


def add_parser(subparsers) -> None:
    common = cluster_options()
    produce = subparsers.add_parser("produce", parents=[common], help="produce lines from stdin (like kcat -P)",
                                    description="Produce each line of stdin as one record.")
    produce.add_argument("topic")
    produce.add_argument("--key-separator", metavar="SEP", help="split each line into KEY SEP VALUE at the first SEP")
    produce.add_argument("--acks", choices=sorted(ACKS), default="all", help="0, 1 or all (default all)")
    produce.add_argument("--partition", type=int, help="produce every line to this partition")
    produce.add_argument("-q", "--quiet", action="store_true", help="no report on stderr")
    produce.add_argument("--compression", choices=[c.name.lower() for c in CompressionType], default="none")
    produce.add_argument("--linger-ms", type=int, default=PRODUCE_LINGER_MS_DEFAULT,
                         help="wait this long for more lines before sending a batch "
                              f"(default {PRODUCE_LINGER_MS_DEFAULT})")
    produce.add_argument("--batch-bytes", type=int, default=PRODUCE_BATCH_BYTES_DEFAULT,
                         help="send a batch once it holds this many bytes of lines")
    produce.set_defaults(run=run_produce)

    consume = subparsers.add_parser("consume", parents=[common], help="print a topic's records (like kcat -C)",
                                    description="Print records of a topic, one per line by default.")
    consume.add_argument("topic")
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the earliest offset")
    start.add_argument("--offset", type=int, help="start at N (N < 0: N records before the end)")
    start.add_argument("--from-time", type=start_time, metavar="TIME",
                       help="start at each partition's first record timestamped at or after TIME: milliseconds "
                            "since the epoch or ISO 8601 (2026-12-01T08:00:00Z; no zone means UTC), as kcat -o s@TS; "
                            "a partition with none starts at its end")
    consume.add_argument("--partition", type=int, help="consume only this partition (default all)")
    consume.add_argument("--count", type=int, help="exit after N records")
    consume.add_argument("--exit", action="store_true", help="exit once every partition is at its end (kcat -e)")
    consume.add_argument("--timeout-ms", type=int, help="exit once at the end and idle for this long")
    consume.add_argument("--format", default=DEFAULT_FORMAT,
                         help="kcat -f style: %%k %%v %%o %%p %%t %%T %%K %%S %%h, \\n \\t (default '%%v\\n')")
    consume.add_argument("--isolation-level", choices=["read_uncommitted", "read_committed"],
                         default="read_uncommitted")
    consume.add_argument("--rack", default="", help="this client's rack (client.rack): read from the in-sync "
                         "replica in it where the cluster has replica_selector = \"rack\" (KIP-392)")
    consume.set_defaults(run=run_consume)


def run(args: argparse.Namespace) -> int:
    return {"produce": run_produce, "consume": run_consume}[args.command](args)


# produce


def run_produce(args: argparse.Namespace) -> int:
    if args.linger_ms < 0 or args.batch_bytes <= 0:
        print("flotilla: --linger-ms must be >= 0 and --batch-bytes > 0", file=sys.stderr)
        return 2
    stdin = sys.stdin.buffer

    async def body(client: KafkaClient, config) -> int:
        await client.metadata([])  # reach the cluster before waiting on stdin
        last_offsets: dict[int, int] = {}

        def on_batch(partition: int, base_offset: int, count: int) -> None:
            last_offsets[partition] = base_offset + count - 1 if base_offset >= 0 else -1

        produced = await produce_lines(client, args, stdin, on_batch)
        if not args.quiet:
            print(produce_report(args.topic, produced, last_offsets), file=sys.stderr)
        return EXIT_OK

    return run_with_client(args, body)


def produce_report(topic: str, produced: int, last_offsets: dict[int, int]) -> str:
    """What `flotilla produce` did, for stderr (rpk's habit): records written and each partition's last offset."""
    if not produced:
        return f"flotilla: produced no records to {topic} (empty input)"
    parts = ", ".join(f"partition {p}: last offset {o}" if o >= 0 else f"partition {p}: acks=0, offset unknown"
                      for p, o in sorted(last_offsets.items()))
    return f"flotilla: produced {produced} record{'s' if produced != 1 else ''} to {topic} ({parts})"


async def produce_lines(client: KafkaClient, args: argparse.Namespace, stdin,
                        on_batch: Callable[[int, int, int], None] | None = None) -> int:
    """Produce every line of `stdin` (a binary file with read1); the number of records produced. Raises
    what KafkaClient.produce_records raises, as itself (not in an exception group)."""
    send_lines, receive_lines = trio.open_memory_channel(LINE_QUEUE_CHUNKS_MAX)
    outcome: dict = {}

    async def send_all_batches(cancel_scope: trio.CancelScope) -> None:
        try:
            outcome["produced"] = await _send_batches(client, args, receive_lines, on_batch)
        except Exception as error:  # re-raised below, outside the nursery
            outcome["error"] = error
            cancel_scope.cancel()  # stop reading stdin

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_read_lines, stdin, send_lines)
        nursery.start_soon(send_all_batches, nursery.cancel_scope)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["produced"]


async def _read_lines(stdin, send_lines: trio.MemorySendChannel) -> None:
    partial = b""
    async with send_lines:
        while True:
            chunk = await trio.to_thread.run_sync(stdin.read1, STDIN_CHUNK_BYTES, abandon_on_cancel=True)
            if not chunk:
                break
            lines = (partial + chunk).split(b"\n")
            partial = lines.pop()
            if lines:
                await send_lines.send(lines)
        if partial:
            await send_lines.send([partial])


async def _send_batches(client: KafkaClient, args: argparse.Namespace, receive_lines: trio.MemoryReceiveChannel,
                        on_batch: Callable[[int, int, int], None] | None = None) -> int:
    separator = args.key_separator.encode() if args.key_separator else None
    options = {"acks": ACKS[args.acks], "compression": CompressionType[args.compression.upper()],
               "partition": args.partition, "on_batch": on_batch}
    produced = 0
    pending: list[tuple[bytes | None, bytes]] = []
    pending_bytes, deadline, end_of_input = 0, float("inf"), False
    while not end_of_input:
        lines: list[bytes] = []
        with trio.move_on_at(deadline):
            try:
                lines = await receive_lines.receive()
            except trio.EndOfChannel:
                end_of_input = True
        ready = []
        for line in lines:
            if not pending:
                deadline = trio.current_time() + args.linger_ms / 1000
            pending.append(split_key(line, separator))
            pending_bytes += len(line) + 1
            if pending_bytes >= args.batch_bytes:
                ready.append(pending)
                pending, pending_bytes, deadline = [], 0, float("inf")
        if pending and (end_of_input or trio.current_time() >= deadline):
            ready.append(pending)
            pending, pending_bytes, deadline = [], 0, float("inf")
        for batch in ready:  # outside the linger scope: a send is never cut short by the linger deadline
            await client.produce_records(args.topic, batch, **options)
            produced += len(batch)
    return produced


def split_key(line: bytes, separator: bytes | None) -> tuple[bytes | None, bytes]:
    """(key, value) of one input line: no separator (or none in the line) means a null key and the whole line."""
    if separator is None:
        return None, line
    key, found, value = line.partition(separator)
    return (key, value) if found else (None, line)


# consume


def start_time(text: str) -> int:
    """--from-time's value in milliseconds since the epoch: an integer, or an ISO 8601 time (UTC without a zone)."""
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither milliseconds since the epoch nor an ISO 8601 time "
                                         f"(such as 2026-12-01T08:00:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    milliseconds = round(moment.timestamp() * 1000)
    if milliseconds < 0:  # below 0 ListOffsets reads the value as a sentinel (-1 latest, -2 earliest...)
        raise argparse.ArgumentTypeError(f"{text!r} is before 1970")
    return milliseconds


def run_consume(args: argparse.Namespace) -> int:
    if args.count is not None and args.count <= 0:
        print("flotilla: --count must be positive", file=sys.stderr)
        return 2
    try:
        formatter = compile_format(args.format)
    except UsageError as error:
        print(f"flotilla: {error}", file=sys.stderr)
        return 2
    out = sys.stdout.buffer

    async def body(client: KafkaClient, config) -> int:
        try:
            await Consumer(client, args, formatter, out).run()
        except OutputClosed:
            _silence_stdout()
        return EXIT_OK

    return run_with_client(args, body)


def _silence_stdout() -> None:
    # The reader is gone: point stdout at /dev/null so the interpreter's final flush does not complain.
    try:
        descriptor = sys.stdout.fileno()
    except (OSError, ValueError):
        return  # not a real file (captured output in tests): nothing will be flushed to a closed pipe
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, descriptor)
    os.close(devnull)


class Consumer:
    """The consume loop: one fetch task per partition, a shared record budget and end-of-partition state."""

    def __init__(self, client: KafkaClient, args: argparse.Namespace, formatter, out) -> None:
        self.client = client
        self.args = args
        self.formatter = formatter
        self.out = out
        self.remaining = args.count
        self.said_waiting = False
        self.at_end: dict[int, bool] = {}
        self.last_record_at = time.monotonic()
        self.isolation_level = 1 if args.isolation_level == "read_committed" else 0
        self.failure: Exception | None = None

    async def run(self) -> None:
        topic = self.args.topic
        partitions = await partitions_of(self.client, topic)
        if self.args.partition is not None:
            if self.args.partition not in partitions:
                raise CommandError(f"topic {topic!r} has no partition {self.args.partition} (it has {len(partitions)})")
            partitions = [self.args.partition]
        offsets = await self._start_offsets(partitions)
        self.at_end = {partition: False for partition in partitions}
        async with trio.open_nursery() as nursery:
            for partition in partitions:
                nursery.start_soon(self._guarded, nursery.cancel_scope, partition, offsets[partition])
        if self.failure is not None:
            raise self.failure  # as itself, so the CLI can print it in one line

    async def _guarded(self, scope: trio.CancelScope, partition: int, offset: int) -> None:
        try:
            await self._consume_partition(scope, partition, offset)
        except Exception as error:  # the first failure stops every partition
            if self.failure is None:
                self.failure = error
            scope.cancel()

    async def _start_offsets(self, partitions: list[int]) -> dict[int, int]:
        topic, offset = self.args.topic, self.args.offset
        if self.args.from_beginning:
            earliest = await self.client.list_offsets(topic, partitions, EARLIEST_TIMESTAMP)
            return {p: o.offset for p, o in earliest.items()}
        latest = await self.client.list_offsets(topic, partitions, LATEST_TIMESTAMP, self.isolation_level)
        if self.args.from_time is not None:  # ListOffsets by timestamp: -1 where no record is that recent
            found = await self.client.list_offsets(topic, partitions, self.args.from_time, self.isolation_level)
            return {p: found[p].offset if found[p].offset >= 0 else latest[p].offset for p in partitions}
        if offset is None:
            return {p: o.offset for p, o in latest.items()}
        if offset >= 0:
            return {p: offset for p in partitions}
        earliest = await self.client.list_offsets(topic, partitions, EARLIEST_TIMESTAMP)
        return {p: max(earliest[p].offset, latest[p].offset + offset) for p in partitions}

    def _poll_ms(self) -> int:
        if self.args.timeout_ms is not None:
            return max(1, min(CONSUME_POLL_MS_MAX, self.args.timeout_ms))
        return 100 if self.args.exit else CONSUME_POLL_MS_MAX

    async def _consume_partition(self, scope: trio.CancelScope, partition: int, offset: int) -> None:
        topic = self.args.topic
        while True:
            result = await self.client.fetch(topic, partition, offset, CONSUME_FETCH_BYTES_MAX, self._poll_ms(),
                                             self.isolation_level)
            if isinstance(result.error, OffsetOutOfRangeError):
                restart = (await self.client.list_offsets(topic, [partition], EARLIEST_TIMESTAMP))[partition].offset
                print(f"flotilla: {topic}-{partition} offset {offset} is out of range; restarting at {restart}",
                      file=sys.stderr)
                offset = restart
                continue
            if result.error is not None:
                raise result.error
            self._write(partition, result.records)
            offset = result.next_offset
            self.at_end[partition] = offset >= (result.last_stable_offset if self.isolation_level
                                                else result.high_watermark)
            if self._finished():
                scope.cancel()
                return

    def _write(self, partition: int, records: list[Record]) -> None:
        if not records:
            return
        if self.remaining is not None:
            records = records[: self.remaining]
            self.remaining -= len(records)
        try:
            self.out.write(b"".join(self.formatter(self.args.topic, partition, record) for record in records))
            self.out.flush()
        except BrokenPipeError:
            raise OutputClosed() from None
        self.last_record_at = time.monotonic()

    def _finished(self) -> bool:
        if self.remaining is not None and self.remaining <= 0:
            return True
        if not all(self.at_end.values()):
            return False
        if self.args.exit:
            return True
        if self.remaining is not None and not self.said_waiting:
            self.said_waiting = True  # once: a --count larger than the topic is a wait, not a hang
            read = self.args.count - self.remaining
            print(f"flotilla: read {read} of {self.args.count} records, at the end of {self.args.topic}; waiting "
                  "for more (Ctrl-C stops, --exit stops at the end)", file=sys.stderr, flush=True)
        idle_ms = (time.monotonic() - self.last_record_at) * 1000
        return self.args.timeout_ms is not None and idle_ms >= self.args.timeout_ms


class OutputClosed(Exception):
    """stdout was closed by the reader (e.g. `| head`): consuming stops quietly."""


def compile_format(fmt: str):
    """A function (topic, partition, record) -> bytes for a kcat -f style format. Raises UsageError for an
    unknown %-token."""
    pieces: list = []
    literal = bytearray()
    position = 0
    while position < len(fmt):
        char = fmt[position]
        following = fmt[position + 1] if position + 1 < len(fmt) else ""
        if char == "\\" and following in ESCAPES:
            literal += ESCAPES[following]
            position += 2
        elif char == "%":
            if following == "%":
                literal += b"%"
            elif following in _TOKENS:
                if literal:
                    pieces.append(bytes(literal))
                    literal = bytearray()
                pieces.append(_TOKENS[following])
            else:
                raise UsageError(f"--format: unknown token %{following} (known: %k %v %o %p %t %T %K %S %h %%)")
            position += 2
        else:
            literal += char.encode()
            position += 1
    if literal:
        pieces.append(bytes(literal))

    def format_record(topic: str, partition: int, record: Record) -> bytes:
        return b"".join(piece if isinstance(piece, bytes) else piece(topic, partition, record) for piece in pieces)

    return format_record


def _headers(record: Record) -> bytes:
    return b",".join(key.encode("utf-8", "surrogateescape") + b"=" + (value or b"") for key, value in record.headers)


_TOKENS = {
    "k": lambda topic, partition, record: record.key or b"",
    "v": lambda topic, partition, record: record.value or b"",
    "o": lambda topic, partition, record: b"%d" % record.offset,
    "p": lambda topic, partition, record: b"%d" % partition,
    "t": lambda topic, partition, record: topic.encode(),
    "T": lambda topic, partition, record: b"%d" % record.timestamp,
    "K": lambda topic, partition, record: b"%d" % (-1 if record.key is None else len(record.key)),
    "S": lambda topic, partition, record: b"%d" % (-1 if record.value is None else len(record.value)),
    "h": lambda topic, partition, record: _headers(record),
}
