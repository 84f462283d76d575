"""`flotilla reassign generate|execute|verify|cancel|list` and `flotilla leaders elect`: move partition
replicas between brokers and put leadership where it belongs, as kafka-reassign-partitions.sh and
kafka-leader-election.sh do (plans in their JSON format: {"version": 1, "partitions": [{"topic", "partition",
"replicas"}]}).

generate prints a balanced plan for the given topics over the given brokers (stdout) and the current
assignment to roll back to (stderr); execute starts the moves; verify says which are complete (exit 0 when
all are, 1 while some are still moving); cancel reverts the ongoing moves of a plan. Errors (unknown broker,
duplicate replica, empty list, unknown partition) are printed per partition and exit non-zero.
"""

from __future__ import annotations

import argparse
import json
import sys

from cli.support import EXIT_OK, CommandError, UsageError, cluster_options, emit, print_table, run_with_client
from net.client.aio import KafkaClient
from net.client.reassign import alter_reassignments, balanced_plan, elect_leaders, list_reassignments
from broker.throttle import (
    FOLLOWER_RATE_CONFIG,
    FOLLOWER_REPLICAS_CONFIG,
    LEADER_RATE_CONFIG,
    LEADER_REPLICAS_CONFIG,
)
from metadata.records import ConfigResourceType
from metadata.requests import error_name
from partitions.errors import ErrorCode

EXIT_INCOMPLETE = 1
PLAN_VERSION = 1


def add_parser(subparsers) -> None:
    common = cluster_options(json_output=True)
    reassign = subparsers.add_parser("reassign", help="move partition replicas between brokers")
    actions = reassign.add_subparsers(dest="reassign_command", metavar="ACTION", required=True)
    generate = actions.add_parser("generate", parents=[common], help="propose a balanced plan (JSON on stdout)")
    generate.add_argument("--topics", required=True, help="comma-separated topic names")
    generate.add_argument("--brokers", required=True, help="comma-separated broker ids to spread the replicas over")
    generate.set_defaults(run=run_generate)
    for name, run, text in (("execute", run_execute, "start the moves of a plan"),
                            ("verify", run_verify, "which moves of a plan are complete (removes the throttle then)"),
                            ("cancel", run_cancel, "revert the ongoing moves of a plan")):
        action = actions.add_parser(name, parents=[common], help=text)
        action.add_argument("--plan", required=True, metavar="FILE", help="a plan as `generate` prints it")
        if name == "execute":
            action.add_argument("--throttle", type=int, metavar="BYTES_PER_S",
                                help="replication throttle for the moving replicas while they catch up")
        action.set_defaults(run=run)
    listing = actions.add_parser("list", parents=[common], help="ongoing reassignments")
    listing.set_defaults(run=run_list)

    leaders = subparsers.add_parser("leaders", help="leader elections")
    leader_actions = leaders.add_subparsers(dest="leaders_command", metavar="ACTION", required=True)
    elect = leader_actions.add_parser("elect", parents=[common], help="elect preferred (or unclean) leaders")
    elect.add_argument("--type", choices=("preferred", "unclean"), default="preferred")
    elect.add_argument("--topic", help="only this topic (default: every partition)")
    elect.add_argument("--partition", type=int, action="append", help="only these partitions (with --topic)")
    elect.set_defaults(run=run_elect)


def run(args: argparse.Namespace) -> int:
    return args.run(args)


def _ids(text: str, option: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"{option} {text!r}: expected comma-separated broker ids") from None
    if not ids:
        raise UsageError(f"{option} is empty")
    return ids


def read_plan(path: str) -> dict[tuple[str, int], list[int]]:
    """The partitions of a plan file. Raises UsageError naming the file and the bad entry."""
    try:
        with open(path) as handle:
            document = json.load(handle)
    except OSError as error:
        raise UsageError(f"{path}: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise UsageError(f"{path}: not JSON ({error})") from None
    entries = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise UsageError(f"{path}: key 'partitions' must be a list")
    plan = {}
    for index, entry in enumerate(entries):
        where = f"{path}: partitions[{index}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str):
            raise UsageError(f"{where}: key 'topic' must be a string")
        partition, replicas = entry.get("partition"), entry.get("replicas")
        if not isinstance(partition, int) or isinstance(partition, bool):
            raise UsageError(f"{where}: key 'partition' must be an integer")
        if not isinstance(replicas, list) or any(not isinstance(r, int) or isinstance(r, bool) for r in replicas):
            raise UsageError(f"{where}: key 'replicas' must be a list of broker ids")
        plan[(entry["topic"], partition)] = replicas
    return plan


def plan_document(plan: dict[tuple[str, int], list[int] | tuple[int, ...]]) -> dict:
    return {"version": PLAN_VERSION, "partitions": [
        {"topic": topic, "partition": partition, "replicas": list(replicas)}
        for (topic, partition), replicas in sorted(plan.items())]}


async def _current(client: KafkaClient, topics: list[str]) -> dict[tuple[str, int], tuple[int, ...]]:
    metadata = await client.metadata(topics)
    current = {}
    for name in topics:
        topic = metadata.topics.get(name)
        if topic is None or topic.error_code != ErrorCode.NONE:
            raise CommandError(f"topic {name!r} does not exist")
        current.update({(name, p): state.replicas for p, state in topic.partitions.items()})
    return current


def run_generate(args: argparse.Namespace) -> int:
    topics = [t.strip() for t in args.topics.split(",") if t.strip()]

    async def body(client: KafkaClient, config) -> int:
        brokers = _ids(args.brokers, "--brokers")
        current = await _current(client, topics)
        try:
            plan = balanced_plan(current, brokers)
        except ValueError as error:
            raise CommandError(str(error)) from None
        print("Current partition replica assignment (to roll back):", file=sys.stderr)
        print(json.dumps(plan_document(current)), file=sys.stderr)
        print(json.dumps(plan_document(plan), indent=None if not args.json else 2))
        return EXIT_OK

    return run_with_client(args, body)


def _report(args: argparse.Namespace, outcomes, verb: str) -> int:
    rows = [{"topic": o.topic, "partition": o.partition, "error": None if o.ok else error_name(o.error_code),
             "message": o.message} for o in outcomes]
    emit(args, rows, lambda: print_table(["TOPIC", "PARTITION", "RESULT"], [
        [r["topic"], r["partition"], verb if r["error"] is None else f"{r['error']}: {r['message']}"] for r in rows]))
    failed = [r for r in rows if r["error"] is not None]
    if failed:
        raise CommandError(f"{len(failed)} of {len(rows)} partitions failed")
    return EXIT_OK


def run_execute(args: argparse.Namespace) -> int:
    async def body(client: KafkaClient, config) -> int:
        if args.throttle is not None and args.throttle < 1:
            raise UsageError(f"--throttle {args.throttle}: expected a positive rate in bytes per second")
        plan = read_plan(args.plan)
        if args.throttle is not None:
            await _set_throttle(client, plan, await _current(client, sorted({t for t, _ in plan})), args.throttle)
        return _report(args, await alter_reassignments(client, plan), "started")

    return run_with_client(args, body)


async def _set_throttle(client: KafkaClient, plan: dict[tuple[str, int], list[int]],
                        current: dict[tuple[str, int], tuple[int, ...]], rate: int) -> None:
    """As kafka-reassign-partitions --throttle: the rate as the cluster-wide dynamic broker default, and per
    topic the replicas to throttle: followers being added, leaders (the current replicas) serving them."""
    await client.alter_configs("", set={FOLLOWER_RATE_CONFIG: str(rate), LEADER_RATE_CONFIG: str(rate)},
                               resource_type=ConfigResourceType.BROKER)
    for topic in sorted({t for t, _ in plan}):
        followers = [f"{p}:{b}" for (t, p), target in sorted(plan.items()) if t == topic
                     for b in target if b not in current.get((t, p), ())]
        leaders = [f"{p}:{b}" for (t, p), target in sorted(plan.items()) if t == topic
                   for b in current.get((t, p), ())]
        await client.alter_configs(topic, set={FOLLOWER_REPLICAS_CONFIG: ",".join(followers) or "",
                                               LEADER_REPLICAS_CONFIG: ",".join(leaders) or ""})


async def _remove_throttle(client: KafkaClient, topics: list[str]) -> None:
    await client.alter_configs("", delete=[FOLLOWER_RATE_CONFIG, LEADER_RATE_CONFIG],
                               resource_type=ConfigResourceType.BROKER)
    for topic in topics:
        await client.alter_configs(topic, delete=[FOLLOWER_REPLICAS_CONFIG, LEADER_REPLICAS_CONFIG])


def run_cancel(args: argparse.Namespace) -> int:
    async def body(client: KafkaClient, config) -> int:
        plan = read_plan(args.plan)
        return _report(args, await alter_reassignments(client, {key: None for key in plan}), "cancelled")

    return run_with_client(args, body)


def run_verify(args: argparse.Namespace) -> int:
    async def body(client: KafkaClient, config) -> int:
        plan = read_plan(args.plan)
        current = await _current(client, sorted({topic for topic, _ in plan}))
        ongoing = {(o.topic, o.partition) for o in await list_reassignments(client)}
        rows = []
        for key, target in sorted(plan.items()):
            replicas = current.get(key)
            if key in ongoing:
                state = "in progress"
            elif replicas is not None and list(replicas) == list(target):
                state = "complete"
            else:
                state = "not started" if replicas is not None else "unknown partition"
            rows.append({"topic": key[0], "partition": key[1], "target": list(target),
                         "replicas": None if replicas is None else list(replicas), "state": state})
        emit(args, rows, lambda: print_table(["TOPIC", "PARTITION", "TARGET", "REPLICAS", "STATE"], [
            [r["topic"], r["partition"], ",".join(map(str, r["target"])),
             ",".join(map(str, r["replicas"] or [])), r["state"]] for r in rows]))
        if not all(r["state"] == "complete" for r in rows):
            return EXIT_INCOMPLETE
        if not ongoing:  # every move of the cluster is done: the throttle goes, as Kafka's --verify does
            await _remove_throttle(client, sorted({topic for topic, _ in plan}))
        return EXIT_OK

    return run_with_client(args, body)


def run_list(args: argparse.Namespace) -> int:
    async def body(client: KafkaClient, config) -> int:
        ongoing = await list_reassignments(client)
        rows = [{"topic": o.topic, "partition": o.partition, "replicas": list(o.replicas), "adding": list(o.adding),
                 "removing": list(o.removing)} for o in ongoing]
        emit(args, rows, lambda: print_table(["TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"], [
            [r["topic"], r["partition"], ",".join(map(str, r["replicas"])), ",".join(map(str, r["adding"])),
             ",".join(map(str, r["removing"]))] for r in rows]))
        return EXIT_OK

    return run_with_client(args, body)


def run_elect(args: argparse.Namespace) -> int:
    election_type = 0 if args.type == "preferred" else 1

    async def body(client: KafkaClient, config) -> int:
        if args.partition and not args.topic:
            raise UsageError("--partition needs --topic")
        partitions = None
        if args.topic:
            indexes = args.partition or [p for _, p in sorted(await _current(client, [args.topic]))]
            partitions = {args.topic: indexes}
        outcomes = await elect_leaders(client, election_type, partitions)
        # ELECTION_NOT_NEEDED is not a failure: the leader already is the one asked for.
        rows = [{"topic": o.topic, "partition": o.partition,
                 "result": "elected" if o.ok else error_name(o.error_code), "message": o.message}
                for o in outcomes]
        emit(args, rows, lambda: print_table(["TOPIC", "PARTITION", "RESULT"], [
            [r["topic"], r["partition"], r["result"]] for r in rows]) if rows else print("No election was needed."))
        failed = [o for o in outcomes if not o.ok and o.error_code != ErrorCode.ELECTION_NOT_NEEDED]
        if failed:
            raise CommandError(f"{len(failed)} elections failed")
        return EXIT_OK

    return run_with_client(args, body)

