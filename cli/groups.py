"""`flotilla groups list|describe|reset-offsets|delete|delete-offsets`: consumer groups, like
kafka-consumer-groups.

describe prints, per partition the group has an offset for or is assigned, Kafka's columns GROUP, TOPIC,
PARTITION, CURRENT-OFFSET, LOG-END-OFFSET, LAG, CONSUMER-ID, HOST, CLIENT-ID, after a line with the group's
type, state and coordinator. reset-offsets computes a plan (`--dry-run`, the default, prints it) and commits
it with `--execute`, which the coordinator refuses while the group has members: this command refuses first,
naming them. New offsets are clamped to [log start offset, log end offset], as Kafka's tool does.
Exit codes as every client command: 0, 1 a failed operation, 2 bad usage, 3 the cluster cannot be reached.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from dataclasses import dataclass

from broker.config import ClusterConfig
from cli.support import (
    EXIT_FAILED,
    EXIT_OK,
    CommandError,
    UsageError,
    cluster_options,
    emit,
    partitions_of,
    print_table,
    run_with_client,
)
from net.client import groups as group_admin
from net.client.aio import KafkaClient
from net.client.results import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from partitions.errors import ErrorCode


def add_parser(subparsers) -> None:
    common = cluster_options(json_output=True)
    groups = subparsers.add_parser("groups", help="list, describe, reset and delete consumer groups")
    actions = groups.add_subparsers(dest="groups_command", metavar="ACTION", required=True)

    listing = actions.add_parser("list", parents=[common], help="every group, its type and state")
    listing.set_defaults(run=run_list)

    describe = actions.add_parser("describe", parents=[common], help="members, assignments, offsets and lag")
    describe.add_argument("group")
    describe.set_defaults(run=run_describe)

    reset = actions.add_parser("reset-offsets", parents=[common], help="move a group's committed offsets")
    reset.add_argument("group")
    reset.add_argument("--topic", required=True, help="TOPIC or TOPIC:P1,P2 (partitions)")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start offset")
    to.add_argument("--to-latest", action="store_true", help="the log end offset")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N (clamped to the log)")
    to.add_argument("--to-datetime", metavar="ISO8601", help="the first offset at or after this time")
    to.add_argument("--shift-by", type=int, metavar="N", help="the current offset plus N (negative: back)")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the plan only (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the plan (the group must have no members)")
    reset.set_defaults(run=run_reset_offsets)

    delete = actions.add_parser("delete", parents=[common], help="delete groups that have no members")
    delete.add_argument("group", nargs="+")
    delete.set_defaults(run=run_delete)

    delete_offsets = actions.add_parser("delete-offsets", parents=[common], help="delete a group's offsets of a topic")
    delete_offsets.add_argument("group")
    delete_offsets.add_argument("--topic", required=True, help="TOPIC or TOPIC:P1,P2 (partitions)")
    delete_offsets.set_defaults(run=run_delete_offsets)


def run(args: argparse.Namespace) -> int:
    return args.run(args)


# list


def run_list(args: argparse.Namespace) -> int:
    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        listings = await group_admin.list_groups(client)
        rows = [{"group": g.group_id, "type": g.group_type or ("classic" if g.protocol_type else ""),
                 "state": g.state, "protocol_type": g.protocol_type, "coordinator": g.coordinator}
                for g in listings]
        emit(args, rows, lambda: print_table(
            ["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE", "COORDINATOR"],
            [[r["group"], r["type"], r["state"], r["protocol_type"], r["coordinator"]] for r in rows]))
        return EXIT_OK

    return run_with_client(args, body)


# describe


def run_describe(args: argparse.Namespace) -> int:
    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        description = await group_admin.describe_group(client, args.group)
        committed = await group_admin.fetch_committed_offsets(client, args.group)
        owners = {(topic, partition): member for member in description.members
                  for topic, partitions in member.assignment.items() for partition in partitions}
        keys = sorted(set(committed) | set(owners))
        log_end = await _log_end_offsets(client, {topic for topic, _ in keys})
        rows = describe_rows(args.group, keys, committed, log_end, owners)
        document = {
            "group": args.group, "type": description.group_type, "state": description.state,
            "protocol_type": description.protocol_type, "protocol": description.protocol,
            "coordinator": description.coordinator,
            "group_epoch": description.group_epoch, "assignment_epoch": description.assignment_epoch,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "host": m.host, "member_epoch": m.member_epoch,
                         "assignment": {t: ps for t, ps in sorted(m.assignment.items())}}
                        for m in description.members],
            "offsets": rows,
        }

        def table() -> None:
            epochs = "" if description.group_epoch is None else (
                f", group epoch {description.group_epoch} (target assignment {description.assignment_epoch})")
            print(f"group {args.group}: type {description.group_type}, state {description.state}, "
                  f"{len(description.members)} members, coordinator {description.coordinator}{epochs}")
            print_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                         "HOST", "CLIENT-ID"],
                        [[r["group"], r["topic"], r["partition"], _dash(r["current_offset"]),
                          _dash(r["log_end_offset"]), _dash(r["lag"]), r["consumer_id"] or "-", r["host"] or "-",
                          r["client_id"] or "-"] for r in rows])

        emit(args, document, table)
        return EXIT_OK

    return run_with_client(args, body)


def describe_rows(group: str, keys, committed, log_end, owners) -> list[dict]:
    """One row per partition: committed offset, log end offset, lag (None where unknown) and its owner."""
    rows = []
    for topic, partition in keys:
        offset = committed[(topic, partition)].offset if (topic, partition) in committed else None
        end = log_end.get((topic, partition))
        owner = owners.get((topic, partition))
        rows.append({
            "group": group, "topic": topic, "partition": partition, "current_offset": offset,
            "log_end_offset": end, "lag": None if offset is None or end is None else max(0, end - offset),
            "consumer_id": owner.member_id if owner else None, "host": owner.host if owner else None,
            "client_id": owner.client_id if owner else None,
        })
    return rows


def _dash(value) -> object:
    return "-" if value is None else value


async def _log_end_offsets(client: KafkaClient, topics: set[str]) -> dict[tuple[str, int], int]:
    ends = {}
    for topic in sorted(topics):
        for partition, found in (await client.list_offsets(topic, None, LATEST_TIMESTAMP)).items():
            ends[(topic, partition)] = found.offset
    return ends


# reset-offsets


@dataclass(frozen=True)
class ResetSpec:
    """Where to move each partition: one of Kafka's reset scenarios."""

    kind: str  # earliest | latest | offset | datetime | shift
    value: int = 0  # the offset, the shift, or the timestamp in ms


def reset_spec(args: argparse.Namespace) -> ResetSpec:
    """The scenario named by the options. Raises UsageError for an unreadable datetime."""
    if args.to_earliest:
        return ResetSpec("earliest")
    if args.to_latest:
        return ResetSpec("latest")
    if args.to_offset is not None:
        return ResetSpec("offset", args.to_offset)
    if args.shift_by is not None:
        return ResetSpec("shift", args.shift_by)
    try:
        moment = datetime.datetime.fromisoformat(args.to_datetime)
    except ValueError:
        raise UsageError(f"--to-datetime {args.to_datetime!r}: expected ISO 8601, e.g. 2026-11-24T10:00:00Z") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return ResetSpec("datetime", int(moment.timestamp() * 1000))


def reset_plan(spec: ResetSpec, partitions: list[int], current: dict[int, int], earliest: dict[int, int],
               latest: dict[int, int], by_time: dict[int, int] | None = None) -> dict[int, int]:
    """partition -> new offset, clamped to [earliest, latest]. `current` lacks partitions with no commit
    (a shift then starts from the log start, as Kafka's tool does); `by_time` maps a partition to the first
    offset at or after the datetime, -1 when none (the log end then)."""
    plan = {}
    for partition in partitions:
        low, high = earliest[partition], latest[partition]
        if spec.kind == "earliest":
            target = low
        elif spec.kind == "latest":
            target = high
        elif spec.kind == "offset":
            target = spec.value
        elif spec.kind == "shift":
            target = current.get(partition, low) + spec.value
        else:
            found = (by_time or {}).get(partition, -1)
            target = high if found < 0 else found
        plan[partition] = min(max(target, low), high)
    return plan


def parse_topic_partitions(text: str) -> tuple[str, list[int] | None]:
    """"TOPIC" or "TOPIC:P1,P2" -> (topic, partitions or None). Raises UsageError."""
    topic, separator, listed = text.partition(":")
    if not topic:
        raise UsageError(f"--topic {text!r}: expected TOPIC or TOPIC:P1,P2")
    if not separator:
        return topic, None
    try:
        return topic, sorted({int(p) for p in listed.split(",") if p.strip()})
    except ValueError:
        raise UsageError(f"--topic {text!r}: partitions must be numbers, e.g. {topic}:0,1") from None


def run_reset_offsets(args: argparse.Namespace) -> int:
    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        spec = reset_spec(args)
        topic, partitions = parse_topic_partitions(args.topic)
        existing = await partitions_of(client, topic)
        partitions = existing if partitions is None else partitions
        unknown = sorted(set(partitions) - set(existing))
        if unknown:
            raise UsageError(f"topic {topic!r} has no partition {unknown[0]} (it has {len(existing)})")
        if args.execute:
            description = await group_admin.describe_group(client, args.group)
            if description.members:
                raise CommandError(
                    f"group {args.group!r} has {len(description.members)} active members "
                    f"({', '.join(m.client_id or m.member_id for m in description.members[:3])}): "
                    "stop its consumers, then run reset-offsets --execute again")
        committed = await group_admin.fetch_committed_offsets(client, args.group)
        current = {p: committed[(topic, p)].offset for p in partitions if (topic, p) in committed}
        earliest = {p: o.offset for p, o in (await client.list_offsets(topic, partitions, EARLIEST_TIMESTAMP)).items()}
        latest = {p: o.offset for p, o in (await client.list_offsets(topic, partitions, LATEST_TIMESTAMP)).items()}
        by_time = None
        if spec.kind == "datetime":
            by_time = {p: o.offset for p, o in (await client.list_offsets(topic, partitions, spec.value)).items()}
        plan = reset_plan(spec, partitions, current, earliest, latest, by_time)
        if args.execute:
            await group_admin.commit_offsets(client, args.group, {(topic, p): o for p, o in plan.items()})
        rows = [{"group": args.group, "topic": topic, "partition": p, "current_offset": current.get(p),
                 "new_offset": o} for p, o in sorted(plan.items())]
        emit(args, {"executed": bool(args.execute), "plan": rows}, lambda: (
            print_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
                        [[r["group"], r["topic"], r["partition"], _dash(r["current_offset"]), r["new_offset"]]
                         for r in rows]),
            None if args.execute else print("(dry run: nothing changed; add --execute to commit this plan)",
                                            file=sys.stderr)))
        return EXIT_OK

    return run_with_client(args, body)


# delete, delete-offsets


def run_delete(args: argparse.Namespace) -> int:
    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        results = await group_admin.delete_groups(client, args.group)
        rows = [{"group": group, "error": code.name if code else None} for group, code in results.items()]
        emit(args, rows, lambda: print_table(["GROUP", "RESULT"],
                                              [[r["group"], r["error"] or "deleted"] for r in rows]))
        failed = [group for group, code in results.items() if code != ErrorCode.NONE]
        for group in failed:
            hint = " (stop its consumers first)" if results[group] == ErrorCode.NON_EMPTY_GROUP else ""
            print(f"flotilla: group {group!r} not deleted: {results[group].name}{hint}", file=sys.stderr)
        return EXIT_FAILED if failed else EXIT_OK

    return run_with_client(args, body)


def run_delete_offsets(args: argparse.Namespace) -> int:
    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        topic, partitions = parse_topic_partitions(args.topic)
        partitions = await partitions_of(client, topic) if partitions is None else partitions
        results = await group_admin.delete_offsets(client, args.group, topic, partitions)
        rows = [{"group": args.group, "topic": topic, "partition": p, "error": c.name if c else None}
                for p, c in sorted(results.items())]
        emit(args, rows, lambda: print_table(
            ["GROUP", "TOPIC", "PARTITION", "RESULT"],
            [[r["group"], r["topic"], r["partition"], r["error"] or "deleted"] for r in rows]))
        return EXIT_FAILED if any(r["error"] for r in rows) else EXIT_OK

    return run_with_client(args, body)
