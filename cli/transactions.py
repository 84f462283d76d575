"""`flotilla transactions list|describe|find-hanging|abort` and `flotilla producers describe`, like
kafka-transactions.sh.

list prints every transactional id the coordinators hold (TRANSACTIONAL-ID, COORDINATOR, PRODUCER-ID,
STATE); describe one id adds its epoch, timeout, partitions and the age of its open transaction;
find-hanging lists open transactions on the partitions a broker leads that are older than the maximum
transaction timeout and that no coordinator holds (their producer and coordinator are gone, and the
partition's last stable offset is stuck behind them); abort writes the ABORT marker for one, found by its
partition and start offset. producers describe prints a partition's producer states (DescribeProducers).
Exit codes as every client command: 0, 1 a failed operation, 2 bad usage, 3 the cluster cannot be reached.
"""

from __future__ import annotations

import argparse
import time

from broker.config import ClusterConfig
from cli.support import EXIT_OK, CommandError, cluster_options, emit, print_table, run_with_client
from net.client import transactions as txn_admin
from net.client.aio import KafkaClient


def add_parser(subparsers) -> None:
    common = cluster_options(json_output=True)
    transactions = subparsers.add_parser("transactions", help="list, describe, find and abort transactions")
    actions = transactions.add_subparsers(dest="transactions_command", metavar="ACTION", required=True)

    listing = actions.add_parser("list", parents=[common], help="every transactional id and its state")
    listing.add_argument("--state", action="append", help="only this state (Ongoing, CompleteCommit, ...)")
    listing.set_defaults(run=run_list)

    describe = actions.add_parser("describe", parents=[common], help="one transactional id")
    describe.add_argument("transactional_id")
    describe.set_defaults(run=run_describe)

    hanging = actions.add_parser("find-hanging", parents=[common],
                                 help="open transactions no coordinator holds, on one broker's partitions")
    hanging.add_argument("--broker", type=int, required=True, help="the broker whose partitions to check")
    hanging.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                         help="transactions open longer than this are suspects (default 15, Kafka's maximum)")
    hanging.set_defaults(run=run_find_hanging)

    abort = actions.add_parser("abort", parents=[common], help="abort an open transaction on a partition")
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", type=int, required=True)
    abort.add_argument("--start-offset", type=int, required=True, help="the transaction's first offset")
    abort.set_defaults(run=run_abort)

    producers = subparsers.add_parser("producers", help="the producer states of a partition")
    producer_actions = producers.add_subparsers(dest="producers_command", metavar="ACTION", required=True)
    describe_producers = producer_actions.add_parser("describe", parents=[common],
                                                     help="producers of TOPIC PARTITION (DescribeProducers)")
    describe_producers.add_argument("topic")
    describe_producers.add_argument("partition", type=int)
    describe_producers.add_argument("--broker", type=int, help="ask this replica instead of the leader")
    describe_producers.set_defaults(run=run_describe_producers)


def run(args: argparse.Namespace) -> int:
    return args.run(args)


def _now_ms() -> int:
    return int(time.time() * 1000)


def run_list(args: argparse.Namespace) -> int:
    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        listings = await txn_admin.list_transactions(client, states=args.state)
        rows = [{"transactional_id": t.transactional_id, "coordinator": t.coordinator,
                 "producer_id": t.producer_id, "state": t.state} for t in listings]
        emit(args, rows, lambda: print_table(
            ["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE"],
            [[r["transactional_id"], r["coordinator"], r["producer_id"], r["state"]] for r in rows]))
        return EXIT_OK

    return run_with_client(args, body)


def run_describe(args: argparse.Namespace) -> int:
    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        d = await txn_admin.describe_transaction(client, args.transactional_id)
        age = None if d.start_ms < 0 else max(0, _now_ms() - d.start_ms)
        document = {"transactional_id": d.transactional_id, "coordinator": d.coordinator, "state": d.state,
                    "producer_id": d.producer_id, "producer_epoch": d.producer_epoch, "timeout_ms": d.timeout_ms,
                    "start_ms": d.start_ms, "age_ms": age, "partitions": [f"{t}-{p}" for t, p in d.partitions]}
        emit(args, document, lambda: print_table(
            ["COORDINATOR", "TRANSACTIONAL-ID", "PRODUCER-ID", "PRODUCER-EPOCH", "STATE", "TIMEOUT-MS",
             "AGE-MS", "PARTITIONS"],
            [[d.coordinator, d.transactional_id, d.producer_id, d.producer_epoch, d.state, d.timeout_ms,
              "-" if age is None else age, ",".join(document["partitions"]) or "-"]]))
        return EXIT_OK

    return run_with_client(args, body)


def run_find_hanging(args: argparse.Namespace) -> int:
    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        found = await txn_admin.find_hanging(client, args.broker, _now_ms(), args.max_transaction_timeout * 60_000)
        rows = [{"topic": h.topic, "partition": h.partition, "producer_id": h.producer.producer_id,
                 "producer_epoch": h.producer.producer_epoch, "coordinator_epoch": h.producer.coordinator_epoch,
                 "start_offset": h.producer.current_txn_start_offset,
                 "last_timestamp": h.producer.last_timestamp, "transactional_id": h.transactional_id}
                for h in found]
        emit(args, rows, lambda: print_table(
            ["TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "COORDINATOR-EPOCH", "START-OFFSET",
             "LAST-TIMESTAMP", "TRANSACTIONAL-ID"],
            [[r["topic"], r["partition"], r["producer_id"], r["producer_epoch"], r["coordinator_epoch"],
              r["start_offset"], r["last_timestamp"], r["transactional_id"] or "-"] for r in rows]))
        return EXIT_OK

    return run_with_client(args, body)


def run_abort(args: argparse.Namespace) -> int:
    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        producers = await txn_admin.describe_producers(client, args.topic, args.partition)
        matching = [p for p in producers if p.current_txn_start_offset == args.start_offset]
        if not matching:
            raise CommandError(f"no open transaction starts at offset {args.start_offset} of "
                               f"{args.topic}-{args.partition} (open ones start at "
                               f"{sorted(p.current_txn_start_offset for p in producers if p.current_txn_start_offset >= 0)})")
        producer = matching[0]
        await txn_admin.abort_transaction(client, args.topic, args.partition, producer.producer_id,
                                          producer.producer_epoch, max(producer.coordinator_epoch, 0))
        print(f"aborted the transaction of producer {producer.producer_id} (epoch {producer.producer_epoch}) "
              f"starting at offset {args.start_offset} of {args.topic}-{args.partition}")
        return EXIT_OK

    return run_with_client(args, body)


def run_describe_producers(args: argparse.Namespace) -> int:
    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        producers = await txn_admin.describe_producers(client, args.topic, args.partition, args.broker)
        rows = [{"producer_id": p.producer_id, "producer_epoch": p.producer_epoch,
                 "last_sequence": p.last_sequence, "last_timestamp": p.last_timestamp,
                 "coordinator_epoch": p.coordinator_epoch, "current_txn_start_offset": p.current_txn_start_offset}
                for p in producers]
        emit(args, rows, lambda: print_table(
            ["PRODUCER-ID", "PRODUCER-EPOCH", "LATEST-SEQUENCE", "LAST-TIMESTAMP", "COORDINATOR-EPOCH",
             "CURRENT-TRANSACTION-START-OFFSET"],
            [[r["producer_id"], r["producer_epoch"], r["last_sequence"], r["last_timestamp"],
              r["coordinator_epoch"], "-" if r["current_txn_start_offset"] < 0 else r["current_txn_start_offset"]]
             for r in rows]))
        return EXIT_OK

    return run_with_client(args, body)
