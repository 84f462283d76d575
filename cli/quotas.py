"""`flotilla quotas alter|describe`: client quotas (what kafka-configs.sh --entity-type users/clients --alter
--add-config producer_byte_rate=... and --describe do).

An entity is a user (`--user NAME`, or `--user-default` for every user without its own), a client id
(`--client-id ID` / `--client-default`) or both. Keys: producer_byte_rate and consumer_byte_rate (bytes per
second), request_percentage (percent of one thread's time) and controller_mutation_rate (partitions created,
added or deleted per second), each enforced by each broker on its own traffic. An IP address (`--ip ADDRESS`
/ `--ip-default`, alone: kafka-configs.sh --entity-type ips) takes connection_creation_rate, the new
connections per second each broker accepts from it (KIP-612). `describe` without an entity
lists every entity with quotas; with one, exactly that entity.
Exit codes as every client command: 0, 1 a failed operation, 2 bad usage, 3 the cluster cannot be reached.
"""

from __future__ import annotations

import argparse
import sys

from broker.config import ClusterConfig
from metadata.quota_control import describe_entity
from cli.support import EXIT_OK, EXIT_USAGE, UsageError, cluster_options, emit, fail, print_table, run_with_client
from net.client import acls as admin
from net.client.aio import KafkaClient

MATCH_EXACT, MATCH_DEFAULT = 0, 1


def add_parser(subparsers) -> None:
    common = cluster_options(json_output=True)
    quotas = subparsers.add_parser("quotas", help="client quotas: alter, describe (like kafka-configs.sh)")
    actions = quotas.add_subparsers(dest="quotas_command", metavar="ACTION", required=True)
    alter = actions.add_parser("alter", parents=[common], help="set or remove quotas of a user and/or client id")
    _entity_options(alter)
    alter.add_argument("--add", action="append", default=[], metavar="KEY=VALUE",
                       help="set a quota, e.g. producer_byte_rate=1048576 (repeatable)")
    alter.add_argument("--delete", action="append", default=[], metavar="KEY", help="remove a quota (repeatable)")
    alter.add_argument("--validate-only", action="store_true", help="check with the controller, change nothing")
    alter.set_defaults(run=run_alter)
    describe = actions.add_parser("describe", parents=[common], help="the quotas of an entity, or of every one")
    _entity_options(describe)
    describe.set_defaults(run=run_describe)


def _entity_options(parser: argparse.ArgumentParser) -> None:
    user = parser.add_mutually_exclusive_group()
    user.add_argument("--user", help="a user (the principal's name, e.g. alice for User:alice)")
    user.add_argument("--user-default", action="store_true", help="the default user entity")
    client = parser.add_mutually_exclusive_group()
    client.add_argument("--client-id", help="a client id")
    client.add_argument("--client-default", action="store_true", help="the default client-id entity")
    ip = parser.add_mutually_exclusive_group()
    ip.add_argument("--ip", help="an IP address (its connection_creation_rate)")
    ip.add_argument("--ip-default", action="store_true", help="the default ip entity")


def run(args: argparse.Namespace) -> int:
    return args.run(args)


def _entity(args: argparse.Namespace) -> tuple[tuple[str, str | None], ...]:
    parts = []
    if args.user is not None or args.user_default:
        parts.append(("user", None if args.user_default else args.user))
    if args.client_id is not None or args.client_default:
        parts.append(("client-id", None if args.client_default else args.client_id))
    if args.ip is not None or args.ip_default:
        parts.append(("ip", None if args.ip_default else args.ip))
    return tuple(parts)


def _values(pairs: list[str]) -> dict[str, float]:
    values = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--add {pair!r}: expected KEY=VALUE")
        try:
            values[key] = float(text)
        except ValueError:
            raise UsageError(f"--add {pair!r}: {text!r} is not a number") from None
    return values


def run_alter(args: argparse.Namespace) -> int:
    entity = _entity(args)
    if not entity:
        return fail("name an entity: --user NAME / --user-default and/or --client-id ID / --client-default, "
                    "or --ip ADDRESS / --ip-default", EXIT_USAGE)
    try:
        values = _values(args.add)
    except UsageError as error:
        return fail(str(error), EXIT_USAGE)
    if not values and not args.delete:
        return fail("nothing to change: give --add KEY=VALUE and/or --delete KEY", EXIT_USAGE)

    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        await admin.alter_client_quotas(client, entity, values, args.delete, args.validate_only)
        verb = "valid" if args.validate_only else "altered"
        print(f"quotas of {describe_entity(entity)}: {verb}", file=sys.stderr)
        return EXIT_OK

    return run_with_client(args, body)


def run_describe(args: argparse.Namespace) -> int:
    entity = _entity(args)
    components = [(t, MATCH_DEFAULT if n is None else MATCH_EXACT, n) for t, n in entity]

    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        found = await admin.describe_client_quotas(client, components, strict=bool(entity))
        rows = [{"entity": {t: n for t, n in e}, "quotas": values} for e, values in found]
        emit(args, rows, lambda: print_table(["ENTITY", "QUOTA", "VALUE"], [
            [describe_entity(e), key, _number(value)] for e, values in found
            for key, value in sorted(values.items())]))
        return EXIT_OK

    return run_with_client(args, body)


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)
