"""`flotilla dump-log PATH...`: print the batches of .log files and the entries of .index/.timeindex files,
like Kafka's kafka-dump-log (the work is done by the pure partitions.dump; this module reads files and prints).

Exit codes: 0 when every file was read (corrupt batches are reported, not failures), 2 when a file is
missing, unreadable or of an unknown kind (the other files are still dumped).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from groupcoord.records import describe_record
from txn.records import describe_record as describe_transaction_record
from partitions.dump import (
    IndexDump,
    batch_json,
    batch_line,
    dump_log,
    dump_offset_index,
    dump_time_index,
    record_line,
)

EXIT_OK = 0
EXIT_BAD_FILE = 2
# Suffixes of segments in the middle of a cleaning or deletion: still dumpable.
TRANSIENT_SUFFIXES = (".cleaned", ".swap", ".deleted")


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("dump-log", help="print the batches and index entries of segment files")
    parser.add_argument("paths", nargs="+", metavar="PATH", help=".log, .index or .timeindex files")
    parser.add_argument("--records", action="store_true", help="also print each record's key, value, headers")
    parser.add_argument("--json", action="store_true", help="print one JSON array instead of text")
    parser.add_argument("--offsets-decoder", action="store_true",
                        help="decode records as __consumer_offsets records (offset commits, group metadata); "
                             "implies --records")
    parser.add_argument("--transaction-log-decoder", action="store_true",
                        help="decode records as __transaction_state records (transaction metadata); implies --records")
    parser.set_defaults(run=run)
    return parser


def _kind_and_base(path: str) -> tuple[str, int]:
    name = os.path.basename(path)
    for suffix in TRANSIENT_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    stem, _, extension = name.rpartition(".")
    base_offset = int(stem) if stem.isdigit() else 0
    return extension, base_offset


def _read(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()


def _sibling_log(path: str) -> bytes | None:
    stem = path.rsplit(".", 1)[0]
    try:
        return _read(stem + ".log")
    except OSError:
        return None


def run(args: argparse.Namespace) -> int:
    status = EXIT_OK
    json_items: list[dict] = []
    for path in args.paths:
        kind, base_offset = _kind_and_base(path)
        if kind not in ("log", "index", "timeindex"):
            print(f"dump-log: {path}: not a .log, .index or .timeindex file", file=sys.stderr)
            status = EXIT_BAD_FILE
            continue
        try:
            data = _read(path)
        except OSError as error:
            print(f"dump-log: cannot read {path}: {error.strerror or error}", file=sys.stderr)
            status = EXIT_BAD_FILE
            continue
        if kind == "log":
            _dump_log_file(path, data, args, json_items)
        else:
            dumper = dump_offset_index if kind == "index" else dump_time_index
            _print_index(path, dumper(data, base_offset, _sibling_log(path)), args, json_items)
    if args.json:
        print(json.dumps(json_items, indent=None))
    return status


def _dump_log_file(path: str, data: bytes, args: argparse.Namespace, json_items: list[dict]) -> None:
    describe = None
    if getattr(args, "offsets_decoder", False):
        describe = describe_record
    elif getattr(args, "transaction_log_decoder", False):
        describe = describe_transaction_record
    decode = describe is not None
    result = dump_log(data, with_records=args.records or decode)
    if args.json:
        for batch in result.batches:
            item = {"file": path, **batch_json(batch)}
            if decode and not batch.is_control:
                for record, shown in zip(batch.records or (), item.get("records", ())):
                    shown["decoded"] = describe(record.key, record.value)
            json_items.append(item)
        if result.error:
            json_items.append({"file": path, "error": result.error, "position": result.error_position})
        return
    print(f"Dumping {path}")
    for batch in result.batches:
        print(batch_line(batch))
        for record in batch.records or ():
            if describe is describe_record and not batch.is_control:
                print(offsets_record_line(record))
            elif decode and not batch.is_control:
                print(transaction_record_line(record))
            else:
                print(record_line(record))
    if result.error:
        print(f"Corrupt at position {result.error_position}: {result.error}")


def offsets_record_line(record) -> str:
    """A __consumer_offsets record as Kafka's --offsets-decoder shows it: the decoded key and value."""
    decoded = describe_record(record.key, record.value)
    if "error" in decoded:
        return f"| offset: {record.offset} undecodable: {decoded['error']}"
    key = ",".join(f"{k}={v}" for k, v in decoded["key"].items() if k != "type")
    value = "<tombstone>" if decoded["value"] is None else json.dumps(
        {k: v for k, v in decoded["value"].items() if k != "type"}, sort_keys=False)
    return f"| offset: {record.offset} key: {decoded['key']['type']}::{key} payload: {value}"


def transaction_record_line(record) -> str:
    """A __transaction_state record as Kafka's --transaction-log-decoder shows it."""
    decoded = describe_transaction_record(record.key, record.value)
    if "error" in decoded:
        return f"| offset: {record.offset} undecodable: {decoded['error']}"
    value = "<DELETE>" if decoded["value"] is None else json.dumps(decoded["value"], sort_keys=False)
    return f"| offset: {record.offset} key: transaction_metadata::transactionalId={decoded['key']['transactional_id']} payload: {value}"


def _print_index(path: str, result: IndexDump, args: argparse.Namespace, json_items: list[dict]) -> None:
    first, second = ("offset", "position") if result.kind == "offset" else ("timestamp", "offset")
    if args.json:
        for a, b in result.entries:
            json_items.append({"file": path, first: a, second: b})
        json_items.append({"file": path, "index": result.kind, "entries": len(result.entries),
                           "sane": result.sane, "problems": result.problems})
        return
    print(f"Dumping {path}")
    for a, b in result.entries:
        print(f"{first}: {a} {second}: {b}")
    print(f"{result.kind} index is {'sane' if result.sane else 'NOT sane'} ({len(result.entries)} entries)")
    for problem in result.problems:
        print(f"  {problem}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="flotilla")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["dump-log", *(sys.argv[1:] if argv is None else argv)])
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
