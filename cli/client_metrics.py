"""`flotilla client-metrics list|describe|alter|delete`: client telemetry subscriptions (KIP-714; what
kafka-client-metrics.sh does).

A subscription names the metrics clients push (name prefixes, `*` for all), how often (`--interval-ms`,
100 ms to 1 h, default 5 min) and which clients (`--match selector=regex`, over client_id, client_instance_id,
client_software_name, client_software_version and client_source_address; every pattern must match the whole
value; none matches every client). Clients push to nodes that have a metrics endpoint (`metrics_port`), which
shows what they push. Stored as CLIENT_METRICS config resources in the metadata log.
Exit codes as every client command: 0, 1 a failed operation, 2 bad usage, 3 the cluster cannot be reached.
"""

from __future__ import annotations

import argparse
import sys

from broker.config import ClusterConfig
from cli.support import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CommandError,
    cluster_options,
    emit,
    fail,
    print_table,
    run_with_client,
)
from metadata.configs import CLIENT_METRICS_INTERVAL_MS, CLIENT_METRICS_MATCH, CLIENT_METRICS_METRICS
from metadata.records import ConfigResourceType
from net.client.aio import KafkaClient
from net.protocol import messages
from net.protocol.codec import ApiKey

KEYS = (CLIENT_METRICS_METRICS, CLIENT_METRICS_INTERVAL_MS, CLIENT_METRICS_MATCH)


def add_parser(subparsers) -> None:
    common = cluster_options(json_output=True)
    parser = subparsers.add_parser("client-metrics", help="client telemetry subscriptions (like kafka-client-metrics.sh)")
    actions = parser.add_subparsers(dest="client_metrics_command", metavar="ACTION", required=True)
    listing = actions.add_parser("list", parents=[common], help="every subscription with its configs")
    listing.set_defaults(run=run_list)
    describe = actions.add_parser("describe", parents=[common], help="one subscription's configs")
    describe.add_argument("name")
    describe.set_defaults(run=run_describe)
    alter = actions.add_parser("alter", parents=[common], help="create or change a subscription")
    alter.add_argument("name")
    alter.add_argument("--metrics", help="comma-separated metric name prefixes, or * for every metric")
    alter.add_argument("--interval-ms", type=int, help="push interval, 100 to 3600000 ms")
    alter.add_argument("--match", help="comma-separated selector=regex patterns (every one must match)")
    alter.add_argument("--reset", action="append", default=[], choices=KEYS, help="remove a key (repeatable)")
    alter.set_defaults(run=run_alter)
    delete = actions.add_parser("delete", parents=[common], help="remove a subscription")
    delete.add_argument("name")
    delete.set_defaults(run=run_delete)


def run(args: argparse.Namespace) -> int:
    return args.run(args)


async def _configs(client: KafkaClient, name: str) -> dict[str, str]:
    entries = await client.describe_configs(name, ConfigResourceType.CLIENT_METRICS)
    return {key: entry.value for key, entry in entries.items() if entry.value is not None}


async def _existing(client: KafkaClient, name: str) -> dict[str, str]:
    """The subscription's configs. Raises CommandError when it has none (it does not exist)."""
    configs = await _configs(client, name)
    if not configs:
        raise CommandError(f"no subscription named {name!r}")
    return configs


def _table(subscriptions: dict[str, dict[str, str]]) -> None:
    print_table(["NAME", "METRICS", "INTERVAL_MS", "MATCH"], [
        [name, configs.get(CLIENT_METRICS_METRICS, ""), configs.get(CLIENT_METRICS_INTERVAL_MS, "300000 (default)"),
         configs.get(CLIENT_METRICS_MATCH, "(every client)")] for name, configs in subscriptions.items()])


def run_list(args: argparse.Namespace) -> int:
    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        response = await client.send(None, ApiKey.LIST_CONFIG_RESOURCES, messages.ListConfigResourcesRequest())
        if response.error_code:
            return fail(f"listing subscriptions failed: error {response.error_code}", EXIT_FAILED)
        names = sorted(resource.resource_name for resource in response.config_resources)
        subscriptions = {name: await _configs(client, name) for name in names}
        emit(args, subscriptions, lambda: _table(subscriptions))
        return EXIT_OK

    return run_with_client(args, body)


def run_describe(args: argparse.Namespace) -> int:
    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        configs = await _existing(client, args.name)
        emit(args, configs, lambda: _table({args.name: configs}))
        return EXIT_OK

    return run_with_client(args, body)


def run_alter(args: argparse.Namespace) -> int:
    wanted = {key: value for key, value in ((CLIENT_METRICS_METRICS, args.metrics),
                                            (CLIENT_METRICS_INTERVAL_MS, args.interval_ms),
                                            (CLIENT_METRICS_MATCH, args.match)) if value is not None}
    if not wanted and not args.reset:
        return fail("nothing to change: give --metrics, --interval-ms, --match and/or --reset KEY", EXIT_USAGE)

    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        await client.alter_configs(args.name, {key: str(value) for key, value in wanted.items()}, args.reset,
                                   resource_type=ConfigResourceType.CLIENT_METRICS)
        print(f"subscription {args.name!r}: altered", file=sys.stderr)
        return EXIT_OK

    return run_with_client(args, body)


def run_delete(args: argparse.Namespace) -> int:
    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        configs = await _existing(client, args.name)
        await client.alter_configs(args.name, {}, list(configs), resource_type=ConfigResourceType.CLIENT_METRICS)
        print(f"subscription {args.name!r}: deleted", file=sys.stderr)
        return EXIT_OK

    return run_with_client(args, body)
