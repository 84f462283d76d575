"""What the data and metadata CLI commands share: cluster options, the client run, exit codes and errors.

Every client command takes `-b HOST:PORT[,HOST:PORT]` or `--config FILE` (the cluster TOML; its broker nodes'
Kafka ports are the bootstrap servers) after the subcommand; with neither it uses 127.0.0.1:9092, the
embedded default of `flotilla up`. Exit codes follow cli/main.py: 0 success, 1 a failed operation (one line
on stderr naming what failed), 2 bad usage or configuration, 3 the cluster could not be reached.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable

import trio

from net.client.aio import KafkaClient, parse_bootstrap_servers
from net.client.errors import NoBrokersAvailableError
from net.client.security import ClientSecurity, read_properties
from broker.config import ClusterConfig, ConfigError, load_config
from partitions.errors import KafkaError, UnknownTopicOrPartitionError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
BOOTSTRAP_DEFAULT = "127.0.0.1:9092"
CLI_CONNECT_TIMEOUT_MS = 5_000
CLI_FIRST_CONTACT_RETRIES_MAX = 3  # a stopped cluster is reported within about a second


class UsageError(Exception):
    """Bad command-line input; printed as one line, exit code 2."""


class CommandError(Exception):
    """An operation that failed for a reason worth saying in the command's own words; exit code 1."""


def cluster_options(json_output: bool = False) -> argparse.ArgumentParser:
    """A parent parser with the options every client command takes (and `--json` for those that print tables)."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("cluster")
    group.add_argument("-b", "--bootstrap-servers", metavar="HOST:PORT[,HOST:PORT]",
                       help=f"brokers to bootstrap from (default {BOOTSTRAP_DEFAULT} without --config)")
    group.add_argument("--config", metavar="FILE", help="cluster config file (TOML): bootstrap from its brokers")
    group.add_argument("--request-timeout-ms", type=int, default=30_000, help="per-request timeout (ms)")
    group.add_argument("--command-config", metavar="FILE",
                       help="client properties for a secured cluster (security.protocol, sasl.mechanism, "
                            "sasl.username, sasl.password, ssl.ca.location, ...), as Kafka's tools take them")
    if json_output:
        parent.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parent


def load_cluster_config(args: argparse.Namespace) -> ClusterConfig | None:
    """The cluster config named by --config, or None. Raises UsageError for a bad file or both options."""
    if getattr(args, "config", None) is None:
        return None
    if getattr(args, "bootstrap_servers", None):
        raise UsageError("give -b or --config, not both")
    try:
        return load_config(args.config)
    except ConfigError as error:
        raise UsageError(str(error)) from None


def bootstrap_servers(args: argparse.Namespace, config: ClusterConfig | None) -> str:
    """The bootstrap list for `args`. Raises UsageError for a malformed list or a config without brokers."""
    if config is not None:
        servers = ",".join(f"{node.host}:{node.kafka_port}" for node in config.brokers)
        if not servers:
            raise UsageError(f"{config.source}: no node has the broker role")
    else:
        servers = args.bootstrap_servers or BOOTSTRAP_DEFAULT
    try:
        parse_bootstrap_servers(servers)
    except ValueError as error:
        raise UsageError(str(error)) from None
    return servers


def run_with_client(args: argparse.Namespace,
                    body: Callable[[KafkaClient, ClusterConfig | None], Awaitable[int]]) -> int:
    """Run `body(client, config)` in a fresh trio loop and turn failures into one stderr line and an exit code."""
    try:
        config = load_cluster_config(args)
        servers = bootstrap_servers(args, config)
        security = client_security(args)
    except UsageError as error:
        return fail(str(error), EXIT_USAGE)

    async def main() -> int:
        client = KafkaClient(servers, "flotilla-cli", args.request_timeout_ms,
                             connect_timeout_ms=CLI_CONNECT_TIMEOUT_MS,
                             first_contact_retries_max=CLI_FIRST_CONTACT_RETRIES_MAX, security=security,
                             client_rack=getattr(args, "rack", ""))
        async with client:
            return await body(client, config)

    try:
        return trio.run(main)
    except NoBrokersAvailableError:
        return fail(f"cannot reach the cluster at {servers} (is it running?)", EXIT_UNREACHABLE)
    except UsageError as error:
        return fail(str(error), EXIT_USAGE)
    except CommandError as error:
        return fail(str(error), EXIT_FAILED)
    except KafkaError as error:
        return fail(error.message.replace("\n", " "), EXIT_FAILED)


def client_security(args: argparse.Namespace) -> ClientSecurity | None:
    """The TLS/SASL settings of `--command-config FILE`, or None. Raises UsageError naming the file."""
    path = getattr(args, "command_config", None)
    if path is None:
        return None
    try:
        return ClientSecurity.from_properties(read_properties(path), source=path)
    except ValueError as error:
        raise UsageError(str(error)) from None


async def partitions_of(client: KafkaClient, topic: str) -> list[int]:
    """The partitions of an existing topic. Raises CommandError when it does not exist."""
    try:
        return await client.partitions_for(topic)
    except UnknownTopicOrPartitionError:
        raise CommandError(f"topic {topic!r} does not exist") from None


def fail(message: str, exit_code: int) -> int:
    print(f"flotilla: {message}", file=sys.stderr)
    return exit_code


def parse_assignments(pairs: list[str] | None, option: str) -> dict[str, str]:
    """["k=v", ...] -> {k: v}. Raises UsageError naming the option for an entry without '='."""
    parsed = {}
    for pair in pairs or []:
        key, separator, value = pair.partition("=")
        if not separator or not key.strip():
            raise UsageError(f"{option} {pair!r}: expected KEY=VALUE")
        parsed[key.strip()] = value
    return parsed


def emit(args: argparse.Namespace, document: object, table) -> None:
    """JSON of `document` with `--json`, else `table()` (the house rule: tables by default)."""
    if getattr(args, "json", False):
        json.dump(document, sys.stdout, indent=2, sort_keys=False)
        sys.stdout.write("\n")
    else:
        table()


def print_table(headers: list[str], rows: list[list[object]], out=None) -> None:
    """Left-aligned columns, two spaces apart, as `kafka-topics` and `kubectl` print them."""
    out = out or sys.stdout
    cells = [[str(cell) for cell in row] for row in [headers, *rows]]
    widths = [max(len(row[column]) for row in cells) for column in range(len(headers))]
    for row in cells:
        out.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() + "\n")
