"""`flotilla brokers [list|log-dirs|configs|alter-config|decommission]` and `flotilla topics
list|describe|configs|create|delete|alter-config`: inspect brokers and their configs, inspect and change topics.

Each command talks Kafka's own admin apis (Metadata, DescribeLogDirs, DescribeConfigs, CreateTopics,
DeleteTopics, IncrementalAlterConfigs) through KafkaClient, prints a table by default or JSON with `--json`, and
takes the cluster options of cli.support (`-b` or `--config`, after the subcommand). Errors (no node
reachable, unknown topic, invalid config value) print one line on stderr and exit non-zero.

Brokers: Kafka's Metadata response lists the live (unfenced) brokers only and says nothing of roles, so
`brokers list` reads the registrations from the committed metadata (the private admin API, cli/quorum.py): every
registered broker with its roles, epoch and status there (active or fenced), and beside it the state each node
reports of its own broker (Kafka's BrokerState: STARTING, RECOVERY, RUNNING, PENDING_CONTROLLED_SHUTDOWN,
SHUTTING_DOWN), asked of every node at once. The two differ right after a restart: the metadata still shows the
process before it active until that one's session expires, while the node says STARTING. A peer that answers
Kafka's Metadata but not the admin API gets rows derived from Metadata alone (every listed broker "active"; with
`--config`, roles from the file and a broker node of the file that Metadata leaves out "fenced"), no epoch and no
state.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

import trio

from net.client.aio import KafkaClient
from cli.support import (
    EXIT_OK,
    CommandError,
    UsageError,
    client_security,
    cluster_options,
    emit,
    parse_assignments,
    print_table,
    run_with_client,
)
from net.client.results import ClusterMetadata, ConfigResourceType, NewTopic
from broker.config import ClusterConfig
from partitions.errors import ErrorCode, UnknownTopicOrPartitionError


def add_parser(subparsers) -> None:
    common = cluster_options(json_output=True)

    brokers = subparsers.add_parser("brokers", parents=[common],
                                    help="list the brokers of the cluster; decommission one")
    brokers.set_defaults(run=run_brokers)
    broker_actions = brokers.add_subparsers(dest="brokers_command", metavar="ACTION")
    broker_list = broker_actions.add_parser("list", parents=[common], help="list the brokers (the default)")
    broker_list.set_defaults(run=run_brokers)
    log_dirs = broker_actions.add_parser(
        "log-dirs", parents=[common],
        help="each broker's log directory: its volume's size and free space, the replicas it holds and their sizes")
    log_dirs.add_argument("--topic", action="append", metavar="NAME", help="only this topic's replicas (repeatable)")
    log_dirs.set_defaults(run=run_brokers_log_dirs)
    configs = broker_actions.add_parser(
        "configs", parents=[common],
        help="a broker's configs (or the cluster-wide defaults: --default) with their sources, as kafka-configs "
             "--describe shows them")
    _broker_target(configs)
    _all_option(configs)
    configs.set_defaults(run=run_brokers_configs)
    alter_broker = broker_actions.add_parser(
        "alter-config", parents=[common],
        help="set or reset dynamic configs of a broker, or the cluster-wide defaults (--default), such as "
             "log.retention.ms or follower.replication.throttled.rate")
    _broker_target(alter_broker)
    _alteration_options(alter_broker)
    alter_broker.set_defaults(run=run_brokers_alter_config)
    decommission = broker_actions.add_parser(
        "decommission", parents=[common],
        help="remove a stopped broker that holds no replicas (move them with `flotilla reassign` first)")
    decommission.add_argument("broker_id", type=int)
    decommission.set_defaults(run=run_brokers_decommission)

    topics = subparsers.add_parser("topics", help="list, describe, create, delete and configure topics")
    actions = topics.add_subparsers(dest="topics_command", metavar="ACTION", required=True)
    listing = actions.add_parser("list", parents=[common], help="list topics")
    listing.set_defaults(run=run_topics_list)
    describe = actions.add_parser("describe", parents=[common], help="partitions, leaders, ISR and configs")
    describe.add_argument("name")
    describe.set_defaults(run=run_topics_describe)
    topic_configs = actions.add_parser(
        "configs", parents=[common],
        help="a topic's configs with their sources (the topic, a broker's or the cluster's dynamic defaults, the "
             "config file, Kafka's default)")
    topic_configs.add_argument("name")
    _all_option(topic_configs)
    topic_configs.set_defaults(run=run_topics_configs)
    create = actions.add_parser("create", parents=[common], help="create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=-1, help="default: the cluster's topic_defaults")
    create.add_argument("--replication-factor", type=int, default=-1, help="default: the cluster's topic_defaults")
    create.add_argument("--set", action="append", metavar="KEY=VALUE", help="a topic config (repeatable)")
    create.set_defaults(run=run_topics_create)
    delete = actions.add_parser("delete", parents=[common], help="delete a topic")
    delete.add_argument("name")
    delete.set_defaults(run=run_topics_delete)
    alter = actions.add_parser("alter-config", parents=[common], help="set or reset topic configs")
    alter.add_argument("name")
    _alteration_options(alter)
    alter.set_defaults(run=run_topics_alter_config)


def run(args: argparse.Namespace) -> int:
    return args.run(args)


# brokers


def run_brokers(args: argparse.Namespace) -> int:
    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        metadata = await client.metadata([])
        # The admin API's calls block (and over TLS or SASL run a trio loop of their own): in a worker thread.
        rows = await trio.to_thread.run_sync(functools.partial(
            brokers_from_registrations, metadata, brokers_from_metadata(metadata, config),
            client_security(args)))
        emit(args, rows, lambda: print_table(
            ["ID", "HOST", "PORT", "RACK", "ROLES", "EPOCH", "STATUS", "STATE"],
            [[b["id"], b["host"], b["port"], b["rack"] or "-", ",".join(b["roles"]), _dash(b["epoch"]), b["status"],
              _dash(b["state"])] for b in rows]))
        return EXIT_OK

    return run_with_client(args, body)


def run_brokers_log_dirs(args: argparse.Namespace) -> int:
    """DescribeLogDirs asked of every live broker (Kafka's kafka-log-dirs.sh --describe): per broker its log
    directory and volume, and the replicas there (of the `--topic`s, or all) with their sizes in bytes."""
    from net.protocol import messages
    from net.protocol.codec import ApiKey

    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        metadata = await client.metadata(args.topic or [])  # the brokers, and the topics asked for
        request_class = messages.DescribeLogDirsRequest
        topics = None
        if args.topic:
            described = metadata.topics
            missing = [name for name in args.topic if name not in described or described[name].error_code]
            if missing:
                raise CommandError(f"topic {missing[0]!r} does not exist")
            topics = [request_class.DescribableLogDirTopic(topic=name, partitions=sorted(described[name].partitions))
                      for name in args.topic]
        document = []
        for broker_id in sorted(metadata.brokers):
            response = await client.send(broker_id, ApiKey.DESCRIBE_LOG_DIRS, request_class(topics=topics))
            if response.error_code != ErrorCode.NONE:
                raise CommandError(f"broker {broker_id}: {ErrorCode(response.error_code).name}")
            for result in response.results:
                document.append({
                    "broker": broker_id, "log_dir": result.log_dir,
                    "error": None if result.error_code == ErrorCode.NONE else ErrorCode(result.error_code).name,
                    "total_bytes": result.total_bytes, "usable_bytes": result.usable_bytes,
                    "replicas": [{"topic": topic.name, "partition": row.partition_index,
                                  "size_bytes": row.partition_size, "offset_lag": row.offset_lag}
                                 for topic in result.topics for row in topic.partitions],
                })

        def tables() -> None:
            print_table(["BROKER", "LOG_DIR", "TOTAL_BYTES", "USABLE_BYTES", "REPLICAS", "SIZE_BYTES", "ERROR"],
                        [[d["broker"], d["log_dir"], d["total_bytes"], d["usable_bytes"], len(d["replicas"]),
                          sum(r["size_bytes"] for r in d["replicas"]), d["error"] or "-"] for d in document])
            print()
            print_table(["BROKER", "TOPIC", "PARTITION", "SIZE_BYTES", "OFFSET_LAG"],
                        [[d["broker"], r["topic"], r["partition"], r["size_bytes"], r["offset_lag"]]
                         for d in document for r in d["replicas"]])

        emit(args, document, tables)
        return EXIT_OK

    return run_with_client(args, body)


def run_brokers_decommission(args: argparse.Namespace) -> int:
    from net.client.reassign import unregister_broker

    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        await unregister_broker(client, args.broker_id)
        emit(args, {"broker": args.broker_id, "decommissioned": True},
             lambda: print(f"Broker {args.broker_id} is decommissioned (its registration is removed)."))
        return EXIT_OK

    return run_with_client(args, body)


def _all_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--all", action="store_true", help="every config, defaults included")


def _alteration_options(parser: argparse.ArgumentParser) -> None:
    """alter-config's --set and --delete (read back by `_alterations`)."""
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help="set a config (repeatable)")
    parser.add_argument("--delete", action="append", metavar="KEY", help="reset a config to its default (repeatable)")


def _broker_target(parser: argparse.ArgumentParser) -> None:
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("broker_id", nargs="?", type=int, help="the broker's id")
    target.add_argument("--default", action="store_true",
                        help="the cluster-wide dynamic defaults (kafka-configs --entity-default)")


def _broker_resource(args: argparse.Namespace) -> tuple[str, str]:
    """(the BROKER resource name, how to name it to the user)."""
    if args.default:
        return "", "the cluster-wide broker defaults"
    return str(args.broker_id), f"broker {args.broker_id}"


def run_brokers_configs(args: argparse.Namespace) -> int:
    name, what = _broker_resource(args)
    return _run_configs(args, name, ConfigResourceType.BROKER, what)


def _run_configs(args: argparse.Namespace, name: str, resource_type: int, what: str) -> int:
    """The configs of one resource, each with its source (defaults only with --all)."""
    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        try:
            entries = await client.describe_configs(name, resource_type=resource_type)
        except UnknownTopicOrPartitionError:
            raise CommandError(f"topic {name!r} does not exist") from None
        rows = [{"name": key, "value": entry.value, "source": entry.source.name, "read_only": entry.read_only}
                for key, entry in sorted(entries.items()) if args.all or not entry.is_default]
        emit(args, {"resource": what, "configs": rows}, lambda: print_table(
            ["NAME", "VALUE", "SOURCE"], [[r["name"], "-" if r["value"] is None else r["value"], r["source"]]
                                          for r in rows]))
        return EXIT_OK

    return run_with_client(args, body)


def run_topics_configs(args: argparse.Namespace) -> int:
    return _run_configs(args, args.name, ConfigResourceType.TOPIC, f"topic {args.name}")


def _alterations(args: argparse.Namespace) -> tuple[dict[str, str], list[str]]:
    """alter-config's --set KEY=VALUE pairs and --delete keys; a UsageError when there are none."""
    updates = parse_assignments(args.set, "--set")
    resets = list(args.delete or [])
    if not updates and not resets:
        raise UsageError("alter-config needs --set KEY=VALUE or --delete KEY")
    return updates, resets


def run_brokers_alter_config(args: argparse.Namespace) -> int:
    name, what = _broker_resource(args)

    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        updates, resets = _alterations(args)
        await client.alter_configs(name, set=updates, delete=resets, resource_type=ConfigResourceType.BROKER)
        emit(args, {"resource": what, "set": updates, "deleted": resets},
             lambda: print(f"Updated configs of {what}."))
        return EXIT_OK

    return run_with_client(args, body)


def brokers_from_metadata(metadata: ClusterMetadata, config: ClusterConfig | None) -> list[dict]:
    """Broker rows from Kafka's Metadata (live brokers only), completed from the config file when given."""
    rows = {}
    for broker in metadata.brokers.values():
        roles = ["broker"]
        if config is not None and any(node.id == broker.node_id for node in config.nodes):
            roles = list(config.node(broker.node_id).roles)
        rows[broker.node_id] = {"id": broker.node_id, "host": broker.host, "port": broker.port,
                                "rack": broker.rack, "roles": roles, "epoch": None, "status": "active", "state": None}
    for node in config.brokers if config is not None else ():
        if node.id not in rows:  # a registered broker that Metadata leaves out is fenced (or not running)
            rows[node.id] = {"id": node.id, "host": node.host, "port": node.kafka_port, "rack": node.rack,
                             "roles": list(node.roles), "epoch": None, "status": "fenced", "state": None}
    return [rows[node_id] for node_id in sorted(rows)]


def brokers_from_registrations(metadata: ClusterMetadata, rows: list[dict], security: Any = None) -> list[dict]:
    """Every registered broker with its roles, epoch and active/fenced status, from the controller's
    registrations (the private admin API, cli/quorum.py), and the state its node reports of itself; the rows
    derived from Metadata when no node answers that API."""
    from cli.quorum import Unreachable, ask_any

    try:
        answer = ask_any([(b.host, b.port) for b in metadata.brokers.values()], {"kind": "metadata"}, security)
    except Unreachable:
        return rows
    from metadata.image import Provenance, records_to_image
    from metadata.records import decode_record

    image = records_to_image([decode_record(r) for r in answer["records"]],
                             Provenance(answer["raft_index"], answer["raft_term"]))
    registrations = sorted(image.cluster.brokers.values(), key=lambda b: b.broker_id)
    states = own_broker_states([(b.host, b.port) for b in registrations], security)
    return [
        {"id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack, "roles": list(b.roles),
         "epoch": b.broker_epoch, "status": "fenced" if b.fenced else "active", "state": state}
        for b, state in zip(registrations, states)
    ]


def own_broker_states(addresses: list[tuple[str, int]], security: Any = None) -> list[str | None]:
    """The BrokerState name each node at `addresses` reports of its own broker, asked of all at once (one
    stopped or paused node costs the admin API's timeout once, not once per node); None for a node that does
    not answer, or of an earlier release that does not say."""
    from concurrent.futures import ThreadPoolExecutor

    from cli.quorum import Unreachable, own_broker

    def ask(address: tuple[str, int]) -> str | None:
        try:
            broker = own_broker(address[0], address[1], security)
        except Unreachable:
            return None
        return None if broker is None else broker["state"]

    if not addresses:
        return []
    with ThreadPoolExecutor(max_workers=min(len(addresses), 16)) as pool:
        return list(pool.map(ask, addresses))


def _dash(value: Any) -> Any:
    return "-" if value is None else value


# topics


def run_topics_list(args: argparse.Namespace) -> int:
    async def body(client: KafkaClient, config) -> int:
        metadata = await client.metadata(None)
        rows = [{"name": topic.name, "partitions": len(topic.partitions),
                 "replication_factor": _replication_factor(topic), "internal": topic.is_internal}
                for topic in sorted(metadata.topics.values(), key=lambda t: t.name)]
        emit(args, rows, lambda: print_table(
            ["NAME", "PARTITIONS", "REPLICATION"], [[r["name"], r["partitions"], r["replication_factor"]]
                                                    for r in rows]))
        return EXIT_OK

    return run_with_client(args, body)


def _replication_factor(topic) -> int:
    return max((len(p.replicas) for p in topic.partitions.values()), default=0)


def run_topics_describe(args: argparse.Namespace) -> int:
    async def body(client: KafkaClient, config) -> int:
        document = await describe_topic(client, args.name)
        emit(args, document, lambda: _print_topic(document))
        return EXIT_OK

    return run_with_client(args, body)


async def describe_topic(client: KafkaClient, name: str) -> dict:
    """{"name", "partitions": [{"partition", "leader", "leader_epoch", "replicas", "isr"}], "configs"} with
    the configs that differ from their defaults. Raises CommandError for an unknown topic."""
    metadata = await client.metadata([name])
    topic = metadata.topics.get(name)
    if topic is None or topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        raise CommandError(f"topic {name!r} does not exist")
    if topic.error_code != ErrorCode.NONE:
        raise CommandError(f"topic {name!r}: {ErrorCode(topic.error_code).name}")
    try:
        configs = await client.describe_configs(name)
    except UnknownTopicOrPartitionError:
        raise CommandError(f"topic {name!r} does not exist") from None
    partitions = [{"partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
                   "replicas": list(p.replicas), "isr": list(p.isr)}
                  for p in sorted(topic.partitions.values(), key=lambda p: p.partition)]
    return {"name": name, "partitions": partitions,
            "configs": {key: entry.value for key, entry in sorted(configs.items()) if not entry.is_default}}


def _print_topic(document: dict) -> None:
    configs = ",".join(f"{key}={value}" for key, value in document["configs"].items()) or "-"
    replication = max((len(p["replicas"]) for p in document["partitions"]), default=0)
    print(f"Topic: {document['name']}  Partitions: {len(document['partitions'])}  "
          f"ReplicationFactor: {replication}  Configs: {configs}")
    print_table(["PARTITION", "LEADER", "LEADER_EPOCH", "REPLICAS", "ISR"], [
        [p["partition"], p["leader"], p["leader_epoch"], ",".join(map(str, p["replicas"])),
         ",".join(map(str, p["isr"]))] for p in document["partitions"]])


def run_topics_create(args: argparse.Namespace) -> int:
    async def body(client: KafkaClient, config) -> int:
        configs = parse_assignments(args.set, "--set")
        await client.create_topics([NewTopic(args.name, args.partitions, args.replication_factor, configs)])
        emit(args, {"name": args.name, "created": True}, lambda: print(f"Created topic {args.name}."))
        return EXIT_OK

    return run_with_client(args, body)


def run_topics_delete(args: argparse.Namespace) -> int:
    async def body(client: KafkaClient, config) -> int:
        try:
            await client.delete_topics([args.name])
        except UnknownTopicOrPartitionError:
            raise CommandError(f"topic {args.name!r} does not exist") from None
        emit(args, {"name": args.name, "deleted": True}, lambda: print(f"Deleted topic {args.name}."))
        return EXIT_OK

    return run_with_client(args, body)


def run_topics_alter_config(args: argparse.Namespace) -> int:
    async def body(client: KafkaClient, config) -> int:
        updates, resets = _alterations(args)
        try:
            await client.alter_configs(args.name, set=updates, delete=resets)
        except UnknownTopicOrPartitionError:
            raise CommandError(f"topic {args.name!r} does not exist") from None
        emit(args, {"name": args.name, "set": updates, "deleted": resets},
             lambda: print(f"Updated configs of topic {args.name}."))
        return EXIT_OK

    return run_with_client(args, body)
