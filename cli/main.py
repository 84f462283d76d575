"""The `flotilla` command line: starts nodes and inspects the cluster.

Each subcommand lives in its own module exposing `add_parser(subparsers)` and `run(args) -> int`; this module
only assembles them. Exit codes: 0 success, 1 a failed operation (e.g. a simulation found a bug), 2 bad usage
or configuration (argparse's convention), 3 the cluster could not be reached.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Subcommand modules, in the order `flotilla --help` lists them. An import error surfaces: a command that
# cannot load is a broken install, not an absent feature.
_SUBCOMMAND_MODULES = (
    "cli.node",
    "cli.topics",
    "cli.reassign",
    "cli.quorum",
    "cli.features",
    "cli.data",
    "cli.groups",
    "cli.transactions",
    "cli.security",
    "cli.quotas",
    "cli.client_metrics",
    "cli.top",
    "cli.dump_log",
    "cli.simulate",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flotilla",
        description="Flotilla: a Kafka-compatible event-streaming broker with a Raft metadata quorum.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in _SUBCOMMAND_MODULES:
        module = importlib.import_module(module_name)
        added = module.add_parser(subparsers)
        if isinstance(added, argparse.ArgumentParser) and added.get_default("run") is None:
            added.set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
