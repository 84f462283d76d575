"""`flotilla users add|list|delete` (SCRAM credentials), `flotilla acls add|list|delete` (like kafka-acls.sh)
and `flotilla certs dev` (a development CA and node certificates).

users add salts the password here (AlterUserScramCredentials carries salt and SaltedPassword, never the
password); acls takes kafka-acls.sh's options (--allow-principal / --deny-principal, --operation, one of
--topic / --group / --cluster / --transactional-id, --resource-pattern-type literal|prefixed, --host);
certs dev writes ca.pem, node-<id>.pem / node-<id>.key per node and client.pem / client.key (a client
certificate, CN=client) for 127.0.0.1 and localhost: for development and tests, never for production.
Exit codes as every client command: 0, 1 a failed operation, 2 bad usage, 3 the cluster cannot be reached.
"""

from __future__ import annotations

import argparse
import os
import sys

from broker.config import ClusterConfig
from cli.support import EXIT_OK, EXIT_USAGE, UsageError, cluster_options, emit, fail, print_table, run_with_client
from net.client import acls as acl_admin
from net.client.aio import KafkaClient
from security.acl import (
    CLUSTER_RESOURCE_NAME,
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from security.sasl import SCRAM_BY_NAME, SCRAM_ITERATIONS_DEFAULT, SCRAM_SHA_512

MECHANISM_CHOICES = sorted(SCRAM_BY_NAME)


def add_parser(subparsers) -> None:
    common = cluster_options(json_output=True)
    users = subparsers.add_parser("users", help="SCRAM users: add, list, delete")
    user_actions = users.add_subparsers(dest="users_command", metavar="ACTION", required=True)
    add = user_actions.add_parser("add", parents=[common], help="create or change a user's SCRAM credential")
    add.add_argument("name")
    add.add_argument("--password", help="the password (default: read one line from stdin)")
    add.add_argument("--mechanism", choices=MECHANISM_CHOICES, action="append",
                     help=f"SCRAM mechanism (repeatable; default {SCRAM_SHA_512})")
    add.add_argument("--iterations", type=int, default=SCRAM_ITERATIONS_DEFAULT)
    add.set_defaults(run=run_users_add)
    listing = user_actions.add_parser("list", parents=[common], help="every SCRAM user and its mechanisms")
    listing.set_defaults(run=run_users_list)
    delete = user_actions.add_parser("delete", parents=[common], help="delete a user's SCRAM credentials")
    delete.add_argument("name")
    delete.add_argument("--mechanism", choices=MECHANISM_CHOICES, action="append",
                        help="only this mechanism (default: every mechanism the user has)")
    delete.set_defaults(run=run_users_delete)

    acls = subparsers.add_parser("acls", help="ACLs: add, list, delete (like kafka-acls.sh)")
    acl_actions = acls.add_subparsers(dest="acls_command", metavar="ACTION", required=True)
    for name, handler, helptext in (("add", run_acls_add, "create ACLs"), ("list", run_acls_list, "list ACLs"),
                                    ("delete", run_acls_delete, "delete the ACLs matching the options")):
        action = acl_actions.add_parser(name, parents=[common], help=helptext)
        _acl_options(action, creating=name == "add")
        action.set_defaults(run=handler)

    certs = subparsers.add_parser("certs", help="certificates for a development cluster")
    cert_actions = certs.add_subparsers(dest="certs_command", metavar="ACTION", required=True)
    dev = cert_actions.add_parser("dev", help="a local CA, node certificates and a client certificate")
    dev.add_argument("--dir", default="certs", help="where to write them (default ./certs)")
    dev.add_argument("--nodes", default="1,2,3", help="node ids (default 1,2,3)")
    dev.add_argument("--hosts", default="127.0.0.1,localhost", help="names the certificates are valid for")
    dev.set_defaults(run=run_certs_dev)


def _acl_options(parser: argparse.ArgumentParser, creating: bool) -> None:
    parser.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL")
    parser.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL")
    if not creating:
        parser.add_argument("--principal", help="only this principal")
    parser.add_argument("--operation", action="append", default=[], metavar="OP",
                        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                             "AlterConfigs, IdempotentWrite, All (repeatable)")
    parser.add_argument("--host", default="*" if creating else None, help="client host (default *)")
    resource = parser.add_mutually_exclusive_group(required=creating)
    resource.add_argument("--topic")
    resource.add_argument("--group")
    resource.add_argument("--transactional-id")
    resource.add_argument("--cluster", action="store_true")
    parser.add_argument("--resource-pattern-type", choices=["literal", "prefixed", "any", "match"],
                        default="literal" if creating else "any")


def run(args: argparse.Namespace) -> int:
    return args.run(args)


# ---- users ------------------------------------------------------------------------------------------------


def _mechanisms(args: argparse.Namespace, default: list[str]) -> list:
    return [SCRAM_BY_NAME[name] for name in (args.mechanism or default)]


def run_users_add(args: argparse.Namespace) -> int:
    password = args.password if args.password is not None else sys.stdin.readline().rstrip("\n")
    if not password:
        return fail("the password must not be empty (--password or one line on stdin)", EXIT_USAGE)

    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        for mechanism in _mechanisms(args, [SCRAM_SHA_512]):
            await acl_admin.upsert_scram_user(client, args.name, password, mechanism, args.iterations)
        print(f"user {args.name}: {', '.join(args.mechanism or [SCRAM_SHA_512])} set", file=sys.stderr)
        return EXIT_OK

    return run_with_client(args, body)


def run_users_list(args: argparse.Namespace) -> int:
    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        users = await acl_admin.describe_scram_users(client)
        rows = [{"user": user, "mechanism": m, "iterations": i} for user, infos in sorted(users.items()) for m, i in infos]
        emit(args, rows, lambda: print_table(["USER", "MECHANISM", "ITERATIONS"],
                                             [[r["user"], r["mechanism"], r["iterations"]] for r in rows]))
        return EXIT_OK

    return run_with_client(args, body)


def run_users_delete(args: argparse.Namespace) -> int:
    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        if args.mechanism:
            names = args.mechanism
        else:
            names = [m for m, _ in (await acl_admin.describe_scram_users(client, [args.name]))[args.name]]
        for name in names:
            await acl_admin.delete_scram_user(client, args.name, SCRAM_BY_NAME[name])
        print(f"user {args.name}: {', '.join(names)} deleted", file=sys.stderr)
        return EXIT_OK

    return run_with_client(args, body)


# ---- ACLs -------------------------------------------------------------------------------------------------

_OPERATIONS = {op.name.replace("_", "").lower(): op for op in AclOperation}


def _operation(text: str) -> AclOperation:
    operation = _OPERATIONS.get(text.replace("_", "").replace("-", "").lower())
    if operation is None or operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise UsageError(f"--operation {text!r}: not an ACL operation (Read, Write, Describe, All, ...)")
    return operation


def _resource(args: argparse.Namespace) -> tuple[ResourceType, str | None]:
    if args.topic is not None:
        return ResourceType.TOPIC, args.topic
    if args.group is not None:
        return ResourceType.GROUP, args.group
    if args.transactional_id is not None:
        return ResourceType.TRANSACTIONAL_ID, args.transactional_id
    if args.cluster:
        return ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME
    return ResourceType.ANY, None


def _bindings(args: argparse.Namespace) -> list[AclBinding]:
    resource_type, name = _resource(args)
    if not args.operation:
        raise UsageError("give at least one --operation")
    if not (args.allow_principal or args.deny_principal):
        raise UsageError("give --allow-principal or --deny-principal")
    pattern = PatternType[args.resource_pattern_type.upper()]
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise UsageError("--resource-pattern-type must be literal or prefixed when adding")
    bindings = []
    for permission, principals in ((AclPermissionType.ALLOW, args.allow_principal),
                                   (AclPermissionType.DENY, args.deny_principal)):
        for principal in principals:
            for operation in args.operation:
                binding = AclBinding(resource_type, name, pattern, principal, args.host, _operation(operation),
                                     permission)
                try:
                    binding.validate()
                except ValueError as error:
                    raise UsageError(str(error)) from None
                bindings.append(binding)
    return bindings


def _filter(args: argparse.Namespace) -> AclFilter:
    resource_type, name = _resource(args)
    operations = [_operation(o) for o in args.operation]
    if len(operations) > 1:
        raise UsageError("give at most one --operation to list or delete")
    principals = args.allow_principal + args.deny_principal + ([args.principal] if args.principal else [])
    if len(principals) > 1:
        raise UsageError("give at most one principal to list or delete")
    permission = AclPermissionType.ALLOW if args.allow_principal else \
        AclPermissionType.DENY if args.deny_principal else AclPermissionType.ANY
    return AclFilter(resource_type, name, PatternType[args.resource_pattern_type.upper()],
                     principals[0] if principals else None, args.host,
                     operations[0] if operations else AclOperation.ANY, permission)


def _rows(bindings: list[AclBinding]) -> list[dict]:
    return [{"resource_type": ResourceType(b.resource_type).name, "name": b.resource_name,
             "pattern_type": PatternType(b.pattern_type).name, "principal": b.principal, "host": b.host,
             "operation": AclOperation(b.operation).name, "permission": AclPermissionType(b.permission_type).name}
            for b in bindings]


def _print_acls(args: argparse.Namespace, bindings: list[AclBinding]) -> None:
    rows = _rows(bindings)
    emit(args, rows, lambda: print_table(
        ["RESOURCE-TYPE", "NAME", "PATTERN-TYPE", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"],
        [[r["resource_type"], r["name"], r["pattern_type"], r["principal"], r["host"], r["operation"],
          r["permission"]] for r in rows]))


def run_acls_add(args: argparse.Namespace) -> int:
    try:
        bindings = _bindings(args)
    except UsageError as error:
        return fail(str(error), EXIT_USAGE)

    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        await acl_admin.create_acls(client, bindings)
        _print_acls(args, bindings)
        return EXIT_OK

    return run_with_client(args, body)


def run_acls_list(args: argparse.Namespace) -> int:
    try:
        acl_filter = _filter(args)
    except UsageError as error:
        return fail(str(error), EXIT_USAGE)

    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        _print_acls(args, await acl_admin.describe_acls(client, acl_filter))
        return EXIT_OK

    return run_with_client(args, body)


def run_acls_delete(args: argparse.Namespace) -> int:
    try:
        acl_filter = _filter(args)
    except UsageError as error:
        return fail(str(error), EXIT_USAGE)

    async def body(client: KafkaClient, config: ClusterConfig | None) -> int:
        deleted = await acl_admin.delete_acls(client, acl_filter)
        print(f"{len(deleted)} ACL(s) deleted", file=sys.stderr)
        _print_acls(args, deleted)
        return EXIT_OK

    return run_with_client(args, body)


# ---- certificates ---------------------------------------------------------------------------------------------


def run_certs_dev(args: argparse.Namespace) -> int:
    try:
        node_ids = [int(n) for n in args.nodes.split(",") if n.strip()]
    except ValueError:
        return fail(f"--nodes {args.nodes!r}: expected node ids like 1,2,3", EXIT_USAGE)
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
    written = write_dev_certificates(args.dir, node_ids, hosts)
    for path in written:
        print(path)
    return EXIT_OK


def write_dev_certificates(directory: str, node_ids: list[int], hosts: list[str]) -> list[str]:
    """A CA (ca.pem, ca.key), node-<id>.pem/.key per node and client.pem/.key, valid for `hosts`."""
    import trustme

    os.makedirs(directory, exist_ok=True)
    ca = trustme.CA(organization_name="Flotilla development CA")
    written = []

    def write(name: str, data: bytes, private: bool = False) -> None:
        path = os.path.join(directory, name)
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644), "wb") as out:
            out.write(data)
        written.append(path)

    write("ca.pem", ca.cert_pem.bytes())
    write("ca.key", ca.private_key_pem.bytes(), private=True)
    for node_id in node_ids:
        leaf = ca.issue_cert(*hosts, common_name=f"node-{node_id}")
        write(f"node-{node_id}.pem", b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
        write(f"node-{node_id}.key", leaf.private_key_pem.bytes(), private=True)
    client = ca.issue_cert("client", common_name="client")
    write("client.pem", b"".join(blob.bytes() for blob in client.cert_chain_pems))
    write("client.key", client.private_key_pem.bytes(), private=True)
    return written
