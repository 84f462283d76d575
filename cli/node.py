"""`flotilla node` (one node of a config file) and `flotilla up` (every node of a file, or the embedded
default, as child processes in the foreground; Ctrl-C or SIGTERM stops them all cleanly)."""

from __future__ import annotations

import argparse
import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

from broker.config import EMBEDDED_NODES_MAX, ClusterConfig, ConfigError, default_config, load_config

EXIT_CONFIG = 2
EXIT_METADATA = 4  # as net/node.py's: an entry of the metadata log this release cannot read, at every start
CHILD_STOP_SECONDS_MAX = 15
STARTUP_SECONDS = 10  # a node that exits this soon after `flotilla up` started it never ran
RESTART_DELAY_SECONDS = 1.0  # before `flotilla up` starts a failed node again
QUICK_FAILURES_MAX = 3  # failures in a row, each within STARTUP_SECONDS of its start, that stop `flotilla up`


def add_parser(subparsers) -> None:
    node = subparsers.add_parser("node", help="run one node of a cluster config file")
    node.add_argument("--config", required=True, help="cluster config file (TOML)")
    node.add_argument("--id", type=int, required=True, help="the node id to run")
    node.add_argument("--log-level", default="info")
    node.set_defaults(run=run_node)

    up = subparsers.add_parser("up", help="run every node of a config file (default: 3 local nodes)")
    up.add_argument("--config", help="cluster config file (TOML); without it an embedded 3-node default")
    up.add_argument("--log-level", default="info")
    up.add_argument("--nodes", type=int, default=3, metavar="N",
                    help=f"nodes of the embedded cluster (default 3; 1 for development; at most {EMBEDDED_NODES_MAX})")
    up.add_argument("--secure", action="store_true",
                    help="the embedded cluster with SASL_SSL (generated certificates, an admin user); prints the "
                         "client settings to copy")
    up.set_defaults(run=run_up)


def _load(path: str | None, nodes: int = 3) -> ClusterConfig:
    return load_config(path) if path else default_config(nodes=nodes)


def run_node(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
        node_config = config.node(args.id)
    except ConfigError as error:
        print(f"flotilla: {error}", file=sys.stderr)
        return EXIT_CONFIG
    from net.logs import configure_logging
    from net.node import run_node_forever

    configure_logging(args.log_level)
    return run_node_forever(config, node_config.id)


def port_problems(config: ClusterConfig) -> list[str]:
    """One line per port of the file's nodes that another program holds on this machine (ports of other
    machines' nodes are not checked)."""
    problems = []
    for node in config.nodes:
        ports = [(f"listener {listener.name}" if len(node.listeners) > 1 else "kafka_port", listener.port)
                 for listener in node.listeners] + [("controller_port", node.controller_port)]
        for name, port in ports:
            probe = socket.socket()
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the node binds: TIME_WAIT is no holder
            try:
                probe.bind((node.host, port))
            except OSError as error:
                if error.errno in (errno.EADDRINUSE, errno.EACCES):
                    problems.append(f"node {node.id}: {name} {port} on {node.host} is in use by another program "
                                    f"(a cluster already running here?)")
            finally:
                probe.close()
    return problems


def run_up(args: argparse.Namespace) -> int:
    if args.secure and args.config:
        print("flotilla: --secure is the embedded cluster; with --config, secure the file's [security] instead",
              file=sys.stderr)
        return EXIT_CONFIG
    if args.nodes != 3 and args.config:
        print("flotilla: --nodes shapes the embedded cluster; with --config, the file lists the nodes", file=sys.stderr)
        return EXIT_CONFIG
    if not 1 <= args.nodes <= EMBEDDED_NODES_MAX:
        print(f"flotilla: --nodes must be between 1 and {EMBEDDED_NODES_MAX}, got {args.nodes}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        config = _load(args.config, args.nodes)
    except ConfigError as error:
        print(f"flotilla: {error}", file=sys.stderr)
        return EXIT_CONFIG
    problems = port_problems(config)
    if problems:
        for problem in problems:
            print(f"flotilla: {problem}", file=sys.stderr)
        hint = "stop it, or give other ports in a config file: flotilla up --config FILE" if not args.config \
            else f"stop it, or change the ports in {args.config}"
        print(f"flotilla: nothing started; {hint}", file=sys.stderr)
        return EXIT_CONFIG
    created_data = None if args.config or os.path.exists("flotilla-data") else os.path.abspath("flotilla-data")
    if args.secure:
        config_path, config = _write_secure_config(config)
    else:
        config_path = args.config or _write_embedded_config(config)
    supervisor = _Supervisor(config, config_path, args.log_level)
    stopping = False
    exit_code = 0
    remove_created = False

    def stop(signum, frame):  # noqa: ARG001 - signal handler signature
        nonlocal stopping
        stopping = True

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        for node in config.nodes:
            supervisor.start(node.id, time.monotonic())
            kafka = f"{node.host}:{node.kafka_port}" if len(node.listeners) == 1 else \
                " ".join(str(listener) for listener in node.listeners) or "-"  # a controller-only node: none
            controller = f"{node.host}:{node.controller_port}" if node.controller_port else "-"  # broker-only: none
            print(
                f"node {node.id}: kafka {kafka}  controller {controller}"
                f"  roles {','.join(node.roles)}  data {node.data_dir}",
                flush=True,
            )
        bootstrap = ",".join(f"{n.host}:{n.listeners[0].port}" for n in config.brokers)
        print(f"bootstrap servers: {bootstrap}   (Ctrl-C stops the cluster)", flush=True)
        if args.secure:
            _print_client_settings(config_path, bootstrap)
        while not stopping:
            failure = supervisor.check(time.monotonic())
            if failure is not None:
                print(f"flotilla: {failure}; stopping the cluster", file=sys.stderr, flush=True)
                exit_code = supervisor.exit_code
                if created_data is not None and supervisor.never_ran:
                    remove_created = True  # a start that never ran leaves nothing behind
                break
            if supervisor.all_stopped():
                print("flotilla: every node has stopped", file=sys.stderr, flush=True)
                break
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        _stop_children(supervisor.running())
        if remove_created:
            shutil.rmtree(created_data, ignore_errors=True)
    return exit_code


class _Supervisor:
    """`flotilla up`'s children, one process per node. A node that fails (killed by a signal such as SIGKILL, or
    a crash) is started again after RESTART_DELAY_SECONDS, so that a local cluster shows a failover and the
    node's return, as a service manager's restart-on-failure would. A node that cannot start (its config refused,
    a port taken, a data directory in use: exit code 2, or any failure of a first start within STARTUP_SECONDS)
    or cannot read its metadata log (exit code 4, the same at every start) stops the cluster, as does one that
    fails QUICK_FAILURES_MAX times in a row within STARTUP_SECONDS of its start. A node stopped cleanly (SIGTERM
    to its process, exit code 0) stays stopped, and the others run on."""

    def __init__(self, config: ClusterConfig, config_path: str, log_level: str) -> None:
        self.config_path = config_path
        self.log_level = log_level
        self.children: dict[int, subprocess.Popen] = {}
        self.started_at: dict[int, float] = {}
        self.restarts: dict[int, int] = {}
        self.quick_failures: dict[int, int] = {}
        self.restart_due: dict[int, float] = {}
        self.stopped: set[int] = set()
        self.node_ids = [node.id for node in config.nodes]
        self.exit_code = 0
        self.never_ran = False

    def start(self, node_id: int, now: float) -> None:
        command = [sys.executable, "-m", "cli.main", "node", "--config", self.config_path, "--id", str(node_id),
                   "--log-level", self.log_level]
        self.children[node_id] = subprocess.Popen(command)
        self.started_at[node_id] = now

    def check(self, now: float) -> str | None:
        """Restart what is due; None while the cluster runs on, else why it must stop."""
        for node_id, due in list(self.restart_due.items()):
            if now >= due:
                del self.restart_due[node_id]
                self.start(node_id, now)
                print(f"flotilla: node {node_id} started again (restart {self.restarts[node_id]})",
                      file=sys.stderr, flush=True)
        for node_id, child in list(self.children.items()):
            code = child.poll()
            if code is None:
                continue
            del self.children[node_id]
            ran = now - self.started_at[node_id]
            how = _exit_description(code)
            if code == 0:
                self.stopped.add(node_id)
                print(f"flotilla: node {node_id} stopped ({how}); the others run on. To start it again: "
                      f"flotilla node --config {self.config_path} --id {node_id}", file=sys.stderr, flush=True)
                continue
            first_start = node_id not in self.restarts
            quick = ran < STARTUP_SECONDS
            self.quick_failures[node_id] = self.quick_failures.get(node_id, 0) + 1 if quick else 0
            if code in (EXIT_CONFIG, EXIT_METADATA) or (first_start and quick and code > 0) \
                    or self.quick_failures[node_id] >= QUICK_FAILURES_MAX:
                self.exit_code = code if code > 0 else 1
                self.never_ran = first_start and quick and not self.restarts
                return f"node {node_id} {how} {ran:.1f} s after it started"
            self.restarts[node_id] = self.restarts.get(node_id, 0) + 1
            self.restart_due[node_id] = now + RESTART_DELAY_SECONDS
            print(f"flotilla: node {node_id} {how} after {ran:.0f} s; the others run on, and it starts again in "
                  f"{RESTART_DELAY_SECONDS:g} s", file=sys.stderr, flush=True)
        return None

    def all_stopped(self) -> bool:
        """Every node stopped cleanly (none of them is ever started again)."""
        return self.stopped == set(self.node_ids)

    def running(self) -> list[subprocess.Popen]:
        return list(self.children.values())


def _exit_description(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _stop_children(children: list[subprocess.Popen]) -> None:
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + CHILD_STOP_SECONDS_MAX
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


SECURE_INTERNAL_PORT_OFFSET = 200  # INTERNAL listeners on 9292-9294 beside the clients' 9092-9094


def _write_secure_config(config: ClusterConfig) -> tuple[str, ClusterConfig]:
    """The embedded cluster with SASL_SSL: development certificates and an admin password made once under
    ./flotilla-data and kept; clients on the usual ports, brokers replicating over INTERNAL (SASL_SSL)."""
    import secrets

    from cli.security import write_dev_certificates

    directory = os.path.abspath("flotilla-data")
    certs = os.path.join(directory, "certs")
    if not os.path.exists(os.path.join(certs, "ca.pem")):
        write_dev_certificates(certs, [n.id for n in config.nodes], ["127.0.0.1", "localhost"])
    password_path = os.path.join(directory, "admin.password")
    if not os.path.exists(password_path):
        with open(os.open(password_path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as out:
            out.write(secrets.token_urlsafe(18))
    with open(password_path) as handle:
        password = handle.read().strip()
    lines = [f'cluster_id = "{config.cluster_id}"', ""]
    for node in config.nodes:
        lines += _node_lines(node, directory, f'listeners = ["SASL_SSL://{node.host}:{node.kafka_port}", '
                             f'"INTERNAL://{node.host}:{node.kafka_port + SECURE_INTERNAL_PORT_OFFSET}"]')
    lines += [*_topic_default_lines(config), *_broker_lines(config), "", "[security]", 'listener_security_protocol_map = { INTERNAL = "SASL_SSL" }',
        'inter_broker_listener_name = "INTERNAL"', 'ssl_certfile = "certs/node-{id}.pem"',
        'ssl_keyfile = "certs/node-{id}.key"', 'ssl_cafile = "certs/ca.pem"', "authorizer = true",
        "controller_tls = true",
        'super_users = ["User:admin"]', "", "[security.plain_users]", f'admin = "{password}"', "",
        "[security.inter_broker]", 'sasl_mechanism = "PLAIN"', 'username = "admin"', f'password = "{password}"',
    ]
    path = os.path.join(directory, "cluster.toml")
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as config_file:
        config_file.write("\n".join(lines) + "\n")
    properties = os.path.join(directory, "admin.properties")
    with open(os.open(properties, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
        out.write(f"security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=admin\n"
                  f"sasl.password={password}\nssl.ca.location={os.path.join(certs, 'ca.pem')}\n")
    return path, load_config(path)


def _print_client_settings(config_path: str, bootstrap: str) -> None:
    properties = os.path.join(os.path.dirname(config_path), "admin.properties")
    with open(properties) as handle:
        settings = handle.read()
    print("client settings (the admin user; librdkafka, confluent-kafka and `kcat -F` read this format):", flush=True)
    print(f"bootstrap.servers={bootstrap}\n{settings}", end="", flush=True)
    print(f"the same in {properties}: flotilla topics list -b {bootstrap.split(',')[0]} "
          f"--command-config {properties}", flush=True)


def _node_lines(node, directory: str, endpoint: str) -> list[str]:
    """One [[nodes]] table of an embedded cluster file (`endpoint`: its kafka_port or listeners line)."""
    return ["[[nodes]]", f"id = {node.id}", f'host = "{node.host}"', endpoint,
            f"controller_port = {node.controller_port}", "roles = [" + ", ".join(f'"{r}"' for r in node.roles) + "]",
            f'data_dir = "{os.path.relpath(node.data_dir, directory)}"', ""]


def _topic_default_lines(config: ClusterConfig) -> list[str]:
    defaults = config.topic_defaults
    return ["[topic_defaults]", f"partitions = {defaults.partitions}",
            f"replication_factor = {defaults.replication_factor}", f"min_insync_replicas = {defaults.min_insync_replicas}"]


def _broker_lines(config: ClusterConfig) -> list[str]:
    """The embedded cluster's internal-topic settings, which follow its size (one node: replication 1)."""
    broker = config.broker
    return ["", "[broker]", f"offsets_topic_replication_factor = {broker.offsets_topic_replication_factor}",
            f"transaction_state_log_replication_factor = {broker.transaction_state_log_replication_factor}",
            f"transaction_state_log_min_isr = {broker.transaction_state_log_min_isr}"]


def _write_embedded_config(config: ClusterConfig) -> str:
    """Write the embedded default next to its data so the child processes read the very same config."""
    directory = os.path.abspath("flotilla-data")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "cluster.toml")
    lines = [f'cluster_id = "{config.cluster_id}"', ""]
    for node in config.nodes:
        lines += _node_lines(node, directory, f"kafka_port = {node.kafka_port}")
    lines += _topic_default_lines(config) + _broker_lines(config)
    with open(path, "w") as config_file:
        config_file.write("\n".join(lines) + "\n")
    return path
