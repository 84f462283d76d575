"""`flotilla features describe|upgrade|downgrade|disable`: the cluster's feature levels, like kafka-features.sh.

describe prints each feature a broker knows (FEATURE, SUPPORTED-MIN, SUPPORTED-MAX, FINALIZED; a finalized
level 0 is not finalized) and the finalized epoch. upgrade and downgrade take `--feature NAME=LEVEL`
(repeatable; one UpdateFeatures, all or nothing) and refuse a level on the wrong side of the current one;
downgrade is a safe downgrade unless `--unsafe`; disable sets the named features to 0. `--dry-run` asks the
controller to validate and changes nothing. The one feature today is transaction.version (KIP-890: 2 bumps the
producer epoch per transaction); a new cluster starts at its nodes' `broker.transaction_version`.
Exit codes as every client command: 0, 1 a failed operation, 2 bad usage, 3 the cluster cannot be reached.
"""

from __future__ import annotations

import argparse
import sys

from broker.config import ClusterConfig
from cli.support import EXIT_OK, EXIT_USAGE, UsageError, cluster_options, emit, fail, print_table, run_with_client
from net.client import features as admin
from net.client.aio import KafkaClient


def add_parser(subparsers) -> None:
    common = cluster_options(json_output=True)
    features = subparsers.add_parser("features", help="cluster feature levels: describe, upgrade, downgrade "
                                                      "(like kafka-features.sh)")
    actions = features.add_subparsers(dest="features_command", metavar="ACTION", required=True)
    describe = actions.add_parser("describe", parents=[common], help="supported and finalized levels")
    describe.set_defaults(run=run_describe)
    for name, help_text in (("upgrade", "raise features to new levels"),
                            ("downgrade", "lower features to new levels")):
        action = actions.add_parser(name, parents=[common], help=help_text)
        action.add_argument("--feature", action="append", default=[], metavar="NAME=LEVEL", required=True,
                            help="e.g. transaction.version=2 (repeatable)")
        action.add_argument("--dry-run", action="store_true", help="validate with the controller, change nothing")
        if name == "downgrade":
            action.add_argument("--unsafe", action="store_true", help="an unsafe (lossy) downgrade")
        action.set_defaults(run=run_update, direction=name)
    disable = actions.add_parser("disable", parents=[common], help="turn features off (level 0)")
    disable.add_argument("--feature", action="append", default=[], metavar="NAME", required=True,
                         help="a feature name (repeatable)")
    disable.add_argument("--dry-run", action="store_true", help="validate with the controller, change nothing")
    disable.add_argument("--unsafe", action="store_true", help="an unsafe (lossy) downgrade")
    disable.set_defaults(run=run_update, direction="disable")


def run(args: argparse.Namespace) -> int:
    return args.run(args)


def run_describe(args: argparse.Namespace) -> int:
    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        rows, epoch = await admin.describe_features(client)
        document = {"finalized_epoch": epoch, "features": [
            {"feature": r.name, "supported_min": r.supported_min, "supported_max": r.supported_max,
             "finalized": r.finalized} for r in rows]}
        def table() -> None:
            print_table(["FEATURE", "SUPPORTED-MIN", "SUPPORTED-MAX", "FINALIZED"],
                        [[r.name, r.supported_min, r.supported_max, r.finalized] for r in rows])
            print(f"finalized epoch {epoch}", file=sys.stderr)

        emit(args, document, table)
        return EXIT_OK

    return run_with_client(args, body)


def _levels(args: argparse.Namespace) -> dict[str, int]:
    levels: dict[str, int] = {}
    for entry in args.feature:
        if args.direction == "disable":
            name, level_text = entry, "0"
        else:
            name, sep, level_text = entry.partition("=")
            if not sep or not name:
                raise UsageError(f"--feature {entry!r}: expected NAME=LEVEL")
        try:
            level = int(level_text)
        except ValueError:
            raise UsageError(f"--feature {entry!r}: {level_text!r} is not a level") from None
        if level < 0 or (level == 0 and args.direction == "upgrade"):
            raise UsageError(f"--feature {entry!r}: an upgrade takes a level of 1 or more")
        if name in levels:
            raise UsageError(f"--feature {name}: named twice")
        levels[name] = level
    return levels


def run_update(args: argparse.Namespace) -> int:
    try:
        levels = _levels(args)
    except UsageError as error:
        return fail(str(error), EXIT_USAGE)
    if args.direction == "upgrade":
        upgrade_type = admin.UPGRADE
    else:
        upgrade_type = admin.UNSAFE_DOWNGRADE if args.unsafe else admin.SAFE_DOWNGRADE

    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        await admin.update_features(client, levels, upgrade_type, args.dry_run)
        for name, level in levels.items():
            verb = "valid" if args.dry_run else "finalized" if level else "turned off"
            print(f"{name} {level}: {verb}", file=sys.stderr)
        return EXIT_OK

    return run_with_client(args, body)
