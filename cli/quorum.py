"""`flotilla quorum status` and `flotilla metadata dump [--log]`: the Raft quorum and the metadata image.

Both take `--config FILE` (any node of the file) or `-b HOST:PORT[,HOST:PORT]` (Kafka ports), also after the
subcommand, and print a table, or JSON with `--json`. They ask over the private admin API on the Kafka port
(broker/admin_api.py); the voters' progress is known by the Raft leader only, so `quorum status` asks whichever
node answers first, then the leader it names.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
from typing import Any

from metadata.image import Provenance, records_to_image
from metadata.records import decode_record
from partitions.errors import ErrorCode
from broker.admin_api import decode_admin_response, encode_admin_request
from cli.support import (
    EXIT_FAILED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    UsageError,
    bootstrap_servers,
    client_security,
    cluster_options,
    fail,
    load_cluster_config,
    print_table,
)
ADMIN_TIMEOUT_SECONDS = 5.0
RESPONSE_BYTES_MAX = 256 * 1024 * 1024


class Unreachable(Exception):
    pass


class Refused(Exception):
    """The node answered, and refused (authorization): exit code 1."""


def add_parser(subparsers) -> None:
    quorum = subparsers.add_parser("quorum", help="the metadata quorum")
    quorum_commands = quorum.add_subparsers(dest="quorum_command", metavar="COMMAND", required=True)
    status = quorum_commands.add_parser("status", parents=[cluster_options(json_output=True)],
                                        help="leader, epoch, commit index and each voter's lag")
    status.set_defaults(run=run_quorum_status)

    metadata = subparsers.add_parser("metadata", help="the committed metadata")
    metadata_commands = metadata.add_subparsers(dest="metadata_command", metavar="COMMAND", required=True)
    dump = metadata_commands.add_parser("dump", parents=[cluster_options(json_output=True)],
                                        help="the current metadata image (--log: the committed records)")
    dump.add_argument("--log", action="store_true", help="print the committed metadata records in order")
    dump.set_defaults(run=run_metadata_dump)


def resolve_bootstrap(args: argparse.Namespace) -> list[tuple[str, int]]:
    """(host, Kafka port) pairs from --config or -b (default 127.0.0.1:9092). Raises UsageError."""
    return [(host, int(port)) for host, _, port in
            (item.strip().rpartition(":") for item in bootstrap_servers(args, load_cluster_config(args)).split(","))]


def admin_call(host: str, port: int, request: dict[str, Any], security: Any = None) -> dict[str, Any]:
    """One request over the private admin API (over TLS and SASL when `security` says so). Raises Unreachable."""
    if security is not None and (security.uses_tls or security.uses_sasl):
        return _secured_admin_call(host, port, request, security)
    try:
        with socket.create_connection((host, port), timeout=ADMIN_TIMEOUT_SECONDS) as connection:
            connection.sendall(encode_admin_request(1, "flotilla-cli", request))
            (size,) = struct.unpack(">i", _receive_exactly(connection, 4))
            if not 0 <= size <= RESPONSE_BYTES_MAX:
                raise Unreachable(f"{host}:{port} answered a frame of {size} bytes")
            _, response = decode_admin_response(_receive_exactly(connection, size))
            return response
    except (OSError, ValueError) as error:
        raise Unreachable(f"{host}:{port}: {error}") from None


def _secured_admin_call(host: str, port: int, request: dict[str, Any], security: Any) -> dict[str, Any]:
    import trio

    from net.node import KafkaConnection
    from partitions.errors import KafkaError

    async def call() -> dict[str, Any]:
        with trio.fail_after(ADMIN_TIMEOUT_SECONDS):
            connection = await KafkaConnection.open(host, port, "flotilla-cli", security)
            try:
                await connection.stream.send_all(encode_admin_request(1, "flotilla-cli", request))
                buffer = bytearray()
                while len(buffer) < 4 or len(buffer) < 4 + struct.unpack_from(">i", buffer)[0]:
                    data = await connection.stream.receive_some(1 << 20)
                    if not data:
                        raise OSError("connection closed")
                    buffer += data
                    if len(buffer) >= 4 and not 0 <= struct.unpack_from(">i", buffer)[0] <= RESPONSE_BYTES_MAX:
                        raise OSError("oversized answer")
                return decode_admin_response(bytes(buffer[4:]))[1]
            finally:
                await connection.aclose()

    try:
        return trio.run(call)
    except KafkaError as error:
        raise Unreachable(f"{host}:{port}: {error.message}") from None
    except (OSError, ValueError, trio.TooSlowError, trio.BrokenResourceError) as error:
        raise Unreachable(f"{host}:{port}: {error or type(error).__name__}") from None


def _receive_exactly(connection: socket.socket, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining:
        chunk = connection.recv(min(remaining, 1 << 20))
        if not chunk:
            raise Unreachable("connection closed")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def own_broker(host: str, port: int, security: Any = None) -> dict[str, Any] | None:
    """What the node at host:port says of its own broker: {"state": Kafka's BrokerState name, "epoch": the broker
    epoch of this process's registration, None before the controller accepted it}; None from a controller-only
    node, or one of an earlier release that does not say. Raises Unreachable."""
    broker = admin_call(host, port, {"kind": "quorum_status"}, security).get("broker")
    return broker if isinstance(broker, dict) else None


def ask_any(servers: list[tuple[str, int]], request: dict[str, Any], security: Any = None) -> dict[str, Any]:
    errors = []
    for host, port in servers:
        try:
            answer = admin_call(host, port, request, security)
            if "error" in answer and answer.get("error") == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:  # same everywhere
                raise Refused(f"{host}:{port}: {answer.get('message')} (DESCRIBE on the cluster is needed)")
            return answer
        except Unreachable as error:
            errors.append(str(error))
    raise Unreachable("no node reachable (" + "; ".join(errors) + ")")


def run_quorum_status(args: argparse.Namespace) -> int:
    try:
        servers = resolve_bootstrap(args)
        security = client_security(args)
        answer = ask_any(servers, {"kind": "quorum_status"}, security)
        leader = answer.get("leader_kafka")
        if leader and answer["status"]["leader_id"] != answer.get("node_id"):
            try:
                answer = admin_call(leader[0], leader[1], {"kind": "quorum_status"}, security)
            except Unreachable:
                pass  # keep the follower's view: leader and commit index, no per-voter progress
    except UsageError as error:
        return fail(str(error), EXIT_USAGE)
    except Refused as error:
        return fail(str(error), EXIT_FAILED)
    except Unreachable as error:
        return fail(str(error), EXIT_UNREACHABLE)
    status = answer["status"]
    if args.json:
        print(json.dumps(status))
        return 0
    print(f"leader {status['leader_id']}  epoch {status['epoch']}  commit index {status['commit_index']}")
    print(f"{'voter':>6} {'last index':>11} {'lag':>6} {'last contact ms':>16}")
    for voter in status["voters"]:
        print(f"{voter['id']:>6} {_text(voter['last_index']):>11} {_text(voter['lag']):>6} "
              f"{_text(voter['last_contact_ms']):>16}")
    if status.get("observers"):
        print(f"{'observer':>8} {'last index':>11} {'lag':>6} {'last contact ms':>16}")
        for observer in status["observers"]:
            print(f"{observer['id']:>8} {_text(observer['last_index']):>11} {_text(observer['lag']):>6} "
                  f"{_text(observer['last_contact_ms']):>16}")
    return 0


def _text(value: Any) -> str:
    return "-" if value is None or value == -1 else str(value)


def run_metadata_dump(args: argparse.Namespace) -> int:
    try:
        answer = ask_any(resolve_bootstrap(args), {"kind": "metadata", "log": bool(args.log)}, client_security(args))
    except UsageError as error:
        return fail(str(error), EXIT_USAGE)
    except Refused as error:
        return fail(str(error), EXIT_FAILED)
    except Unreachable as error:
        return fail(str(error), EXIT_UNREACHABLE)
    if args.log:
        entries = [
            {"raft_index": index, "records": [record_to_json(decode_record(r)) for r in records]}
            for index, records in answer["log"] or []
        ]
        if args.json:
            print(json.dumps(entries))
        else:
            for entry in entries:
                for record in entry["records"]:
                    print(log_line(entry["raft_index"], record))
        return 0
    records = [decode_record(encoded) for encoded in answer["records"]]
    image = records_to_image(records, Provenance(answer["raft_index"], answer["raft_term"]))
    document = image_to_json(image)
    if args.json:
        print(json.dumps(document))
    else:
        print_image(document)
    return 0


def log_line(raft_index: int, record: dict) -> str:
    """One committed metadata record as a line: Raft index, record type, then its fields."""
    fields = " ".join(f"{name}={value}" for name, value in record.items() if name != "type")
    return f"{raft_index:>8}  {record['type']:<24} {fields}"


def print_image(document: dict) -> None:
    """The metadata image as an operator reads it: brokers, then each topic's partitions and configs."""
    features = ", ".join(f"{name} {level}" for name, level in document.get("features", {}).items())
    print(f"metadata image at raft index {document['raft_index']} (term {document['raft_term']}), "
          f"next producer id {document['next_producer_id']}" + (f", features: {features}" if features else ""))
    print()
    print_table(["BROKER", "HOST", "PORT", "RACK", "ROLES", "EPOCH", "STATUS"],
                [[b["id"], b["host"], b["port"], b.get("rack") or "-", ",".join(b["roles"]), b["epoch"],
                  b["status"] + (" (shutting down)" if b["in_controlled_shutdown"] else "")]
                 for b in document["brokers"]])
    rows = [[t["name"], p["partition"], p["leader"], p["leader_epoch"], p["partition_epoch"],
             ",".join(map(str, p["replicas"])), ",".join(map(str, p["isr"]))]
            for t in document["topics"] for p in t["partitions"]]
    if rows:
        print()
        print_table(["TOPIC", "PARTITION", "LEADER", "LEADER-EPOCH", "PARTITION-EPOCH", "REPLICAS", "ISR"], rows)
    configs = [[t["name"], name, value] for t in document["topics"] for name, value in sorted(t["configs"].items())]
    if configs:
        print()
        print_table(["TOPIC", "CONFIG", "VALUE"], configs)


def record_to_json(record: Any) -> dict[str, Any]:
    fields = {name: _jsonable(getattr(record, name)) for name in record.__dataclass_fields__}
    return {"type": type(record).__name__, **fields}


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, tuple):
        return [_jsonable(item) for item in value]
    if hasattr(value, "__dataclass_fields__"):  # a record's part (a quota entity's, a broker's supported feature)
        return {name: _jsonable(getattr(value, name)) for name in value.__dataclass_fields__}
    return value


def image_to_json(image: Any) -> dict[str, Any]:
    brokers = [
        {"id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack, "roles": list(b.roles),
         "epoch": b.broker_epoch, "status": "fenced" if b.fenced else "active",
         "in_controlled_shutdown": b.in_controlled_shutdown}
        for b in sorted(image.cluster.brokers.values(), key=lambda b: b.broker_id)
    ]
    topics = []
    for name in sorted(image.topics.by_name):
        topic = image.topics.by_name[name]
        topics.append({
            "name": name,
            "topic_id": topic.topic_id.hex(),
            "partitions": [
                {"partition": index, "leader": p.leader, "leader_epoch": p.leader_epoch,
                 "partition_epoch": p.partition_epoch, "replicas": list(p.replicas), "isr": list(p.isr)}
                for index, p in sorted(topic.partitions.items())
            ],
            "configs": dict(image.configs.topic(name)),
        })
    return {
        "raft_index": image.provenance.raft_index,
        "raft_term": image.provenance.raft_term,
        "brokers": brokers,
        "topics": topics,
        "next_producer_id": image.producer_ids.next_producer_id,
        "features": dict(image.features.levels),
    }
