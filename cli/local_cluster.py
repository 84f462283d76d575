"""`LocalCluster`: real `flotilla node` processes on 127.0.0.1 with free ports, for tests and benchmarks.

It writes a config file into a directory, starts one child process per node, and can SIGKILL, SIGTERM and
restart any node. Nothing here is a stand-in: the children are the very `flotilla node` a user runs.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Iterable

NODE_START_SECONDS_MAX = 60


def free_ports(count: int, avoid: Iterable[int] = ()) -> list[int]:
    """`count` distinct TCP ports that were free on 127.0.0.1 a moment ago, none of them in `avoid`: ports an
    earlier call handed out are free again once its probes close, and the kernel may hand them out again."""
    avoid = set(avoid)
    sockets = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            probe = socket.socket()
            probe.bind(("127.0.0.1", 0))
            sockets.append(probe)  # held open until the end, so no port comes twice within this call
            port = probe.getsockname()[1]
            if port not in avoid:
                ports.append(port)
        return ports
    finally:
        for probe in sockets:
            probe.close()


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return json.dumps(value) if isinstance(value, str) else str(value)


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the process that started it dies (Linux's PR_SET_PDEATHSIG), so
    a test run that is killed or crashes leaves no node behind. Elsewhere a no-op. The kernel sends the signal
    when the *thread* that forked the child ends, so every node is started from one thread that lives as long
    as the process (_spawn)."""
    if sys.platform != "linux":
        return
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


_SPAWNER: ThreadPoolExecutor | None = None
_SPAWNER_LOCK = threading.Lock()


def _spawn(start):
    """`start()` (a subprocess.Popen) run on the process's node-starting thread, its result returned. A node
    started from a thread that later ends (a test's chaos thread, a pool's worker) would otherwise be
    SIGKILLed with that thread, silently, while the cluster goes on as if it ran. The thread is
    ThreadPoolExecutor's single worker: it waits for the next start until the interpreter exits."""
    global _SPAWNER
    with _SPAWNER_LOCK:
        if _SPAWNER is None:
            _SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="flotilla-node-starter")
    return _SPAWNER.submit(start).result()


def _prepare_child(descriptor_limit: int | None, file_size_limit: int | None) -> None:
    """In a node's process, before exec: die with the parent, and take the limits given."""
    import resource

    _die_with_parent()
    for limit, value in ((resource.RLIMIT_NOFILE, descriptor_limit), (resource.RLIMIT_FSIZE, file_size_limit)):
        if value is not None:
            resource.setrlimit(limit, (value, value))


@dataclass
class LocalCluster:
    """A cluster of `nodes` broker+controller nodes under `directory`."""

    directory: str
    nodes: int = 3
    topic_defaults: dict = field(default_factory=lambda: {"partitions": 3, "replication_factor": 3,
                                                          "min_insync_replicas": 2})
    broker: dict = field(default_factory=dict)
    secret: str | None = None
    log_level: str = "info"
    # A secured cluster: clients on a SASL_SSL listener (the `kafka_ports`), brokers replicating over their own
    # SASL_SSL listener "INTERNAL" as the super user `admin` (SASL/PLAIN from the file), development
    # certificates under <directory>/certs, ACLs on (`security` adds or overrides [security] keys).
    secure: bool = False
    security: dict = field(default_factory=dict)
    inter_broker: dict = field(default_factory=dict)  # secure clusters: replaces [security.inter_broker] (TOML values)
    client_listeners: tuple[str, ...] = ("SASL_SSL",)  # secure clusters: the first is `kafka_ports`
    metrics: bool = False  # serve Prometheus metrics on `metrics_ports`
    broker_only: int = 0  # broker-only nodes (KRaft observers), ids after the `nodes` controllers
    racks: dict = field(default_factory=dict)  # node id -> its `rack` (Kafka's broker.rack)
    descriptor_limit: int | None = None  # the nodes' RLIMIT_NOFILE (soft and hard), as `ulimit -n` would set it
    file_size_limit: int | None = None  # the nodes' RLIMIT_FSIZE in bytes: a write past it fails as on a full disk
    # node id -> a directory first on that node's import path and its working directory: another release's
    # source tree, which it runs instead of this installation's code (a rolling upgrade rehearsed), or a
    # sitecustomize.py that changes this code before the node starts
    node_sources: dict = field(default_factory=dict)

    ADMIN_USER = "admin"
    ADMIN_PASSWORD = "admin-secret"

    def __post_init__(self) -> None:
        os.makedirs(self.directory, exist_ok=True)
        extra = len(self.client_listeners) if self.secure else 0
        ports = free_ports((2 + extra) * self.nodes)
        self.kafka_ports = {node_id: ports[node_id - 1] for node_id in range(1, self.nodes + 1)}
        self.controller_ports = {node_id: ports[self.nodes + node_id - 1] for node_id in range(1, self.nodes + 1)}
        # listener name -> node id -> port: the client listeners (the first shares `kafka_ports`) and INTERNAL
        self.listener_ports: dict[str, dict[int, int]] = {}
        if self.secure:
            names = list(self.client_listeners[1:]) + ["INTERNAL"]
            for index, name in enumerate(names):
                base = (2 + index) * self.nodes
                self.listener_ports[name] = {n: ports[base + n - 1] for n in range(1, self.nodes + 1)}
            self.listener_ports[self.client_listeners[0]] = dict(self.kafka_ports)
        self.internal_ports = self.listener_ports.get("INTERNAL", {})
        self.metrics_ports = dict(zip(self.kafka_ports, free_ports(self.nodes, avoid=ports))) if self.metrics else {}
        self.broker_only_ids: list[int] = []
        for _ in range(self.broker_only):
            self._add_broker_only_node()
        self.certs_dir = os.path.join(self.directory, "certs")
        if self.secure:
            from cli.security import write_dev_certificates

            write_dev_certificates(self.certs_dir, list(self.kafka_ports), ["127.0.0.1", "localhost"])
        self.config_path = os.path.join(self.directory, "cluster.toml")
        self.processes: dict[int, subprocess.Popen] = {}
        self._write_config()

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.kafka_ports.values())

    def bootstrap_of(self, node_id: int) -> str:
        return f"127.0.0.1:{self.kafka_ports[node_id]}"

    def ports_in_use(self) -> set[int]:
        """Every port the cluster file gives a node."""
        return {*self.kafka_ports.values(), *self.controller_ports.values(), *self.metrics_ports.values(),
                *(port for ports in self.listener_ports.values() for port in ports.values())}

    def _add_broker_only_node(self) -> int:
        node_id = max(self.kafka_ports) + 1
        names = [*self.client_listeners[1:], "INTERNAL"] if self.secure else []
        ports = free_ports(1 + len(names), avoid=self.ports_in_use())
        self.kafka_ports[node_id] = ports[0]
        if self.secure:  # its own listeners, as a controller node's; the first client listener is `kafka_ports`
            self.listener_ports[self.client_listeners[0]][node_id] = ports[0]
            for name, port in zip(names, ports[1:]):
                self.listener_ports[name][node_id] = port
        self.broker_only_ids.append(node_id)
        return node_id

    def add_broker(self, wait: bool = True) -> int:
        """A new broker-only node: the cluster file gains its [[nodes]] entry (the running nodes keep the one
        they started with) and the node starts, registers and serves. Returns its id."""
        assert not self.secure, "a secure cluster's certificates are written once, for the nodes it starts with"
        node_id = self._add_broker_only_node()
        self._write_config()
        self.start_node(node_id, wait=wait)
        return node_id

    def _write_config(self) -> None:
        lines = ['cluster_id = "test-cluster"']
        if self.secret:
            lines.append(f'secret = "{self.secret}"')
        for node_id in self.broker_only_ids:
            lines += ["[[nodes]]", f"id = {node_id}", 'host = "127.0.0.1"', self._endpoint_line(node_id),
                      'roles = ["broker"]', f'data_dir = "node-{node_id}"', *self._rack_line(node_id)]
        for node_id in self.controller_ports:
            lines += [
                "[[nodes]]",
                f"id = {node_id}",
                'host = "127.0.0.1"',
                self._endpoint_line(node_id),
                f"controller_port = {self.controller_ports[node_id]}",
                *([f"metrics_port = {self.metrics_ports[node_id]}"] if self.metrics else []),
                'roles = ["broker", "controller"]',
                f'data_dir = "node-{node_id}"',
                *self._rack_line(node_id),
            ]
        lines.append("[topic_defaults]")
        lines += [f"{key} = {value}" for key, value in self.topic_defaults.items() if key != "configs"]
        if self.topic_defaults.get("configs"):  # topic config name -> value: [topic_defaults.configs]
            lines.append("[topic_defaults.configs]")
            lines += [f"{json.dumps(name)} = {_toml_value(value)}"
                      for name, value in self.topic_defaults["configs"].items()]
        if self.broker:
            lines.append("[broker]")
            lines += [f"{key} = {_toml_value(value)}" for key, value in self.broker.items()]
        if self.secure:
            lines += self._security_lines()
        with open(self.config_path, "w") as config_file:
            config_file.write("\n".join(lines) + "\n")

    def _endpoint_line(self, node_id: int) -> str:
        if not self.secure:
            return f"kafka_port = {self.kafka_ports[node_id]}"
        names = [*self.client_listeners, "INTERNAL"]
        return "listeners = [" + ", ".join(
            f'"{name}://127.0.0.1:{self.listener_ports[name][node_id]}"' for name in names) + "]"

    def _rack_line(self, node_id: int) -> list[str]:
        return [f"rack = {_toml_value(self.racks[node_id])}"] if node_id in self.racks else []

    def _security_lines(self) -> list[str]:
        settings = {
            "listener_security_protocol_map": '{ INTERNAL = "SASL_SSL" }',
            "ssl_client_auth": '"requested"',
            "inter_broker_listener_name": '"INTERNAL"',
            "ssl_certfile": '"certs/node-{id}.pem"',
            "ssl_keyfile": '"certs/node-{id}.key"',
            "ssl_cafile": '"certs/ca.pem"',
            "authorizer": "true",
            "super_users": f'["User:{self.ADMIN_USER}"]',
            "controller_tls": "true",
        }
        settings.update(self.security)
        lines = ["[security]"] + [f"{key} = {value}" for key, value in settings.items()]
        inter_broker = self.inter_broker or {"sasl_mechanism": '"PLAIN"', "username": f'"{self.ADMIN_USER}"',
                                             "password": f'"{self.ADMIN_PASSWORD}"'}
        lines += ["[security.plain_users]", f'{self.ADMIN_USER} = "{self.ADMIN_PASSWORD}"', "[security.inter_broker]"]
        lines += [f"{key} = {value}" for key, value in inter_broker.items()]
        return lines

    def client_properties(self, username: str | None = None, password: str | None = None,
                          mechanism: str = "PLAIN") -> dict[str, str]:
        """Kafka client properties (librdkafka names) for the secured listener (the admin by default)."""
        assert self.secure, "client properties are for a secure cluster"
        return {"bootstrap.servers": self.bootstrap_servers, "security.protocol": "SASL_SSL",
                "sasl.mechanism": mechanism, "sasl.username": username or self.ADMIN_USER,
                "sasl.password": password or self.ADMIN_PASSWORD,
                "ssl.ca.location": os.path.join(self.certs_dir, "ca.pem")}

    def write_client_properties(self, name: str, **kwargs) -> str:
        """The client properties as a file for `--command-config`; its path."""
        path = os.path.join(self.directory, name)
        with open(path, "w") as out:
            out.writelines(f"{key}={value}\n" for key, value in self.client_properties(**kwargs).items()
                           if key != "bootstrap.servers")
        return path

    def start(self, wait: bool = True) -> "LocalCluster":
        for node_id in self.kafka_ports:
            self.start_node(node_id, wait=False)
        if wait:
            for node_id in self.kafka_ports:
                self.wait_listening(node_id)
        return self

    def start_node(self, node_id: int, wait: bool = True) -> None:
        assert node_id not in self.processes or self.processes[node_id].poll() is not None, f"node {node_id} runs"
        log_path = os.path.join(self.directory, f"node-{node_id}.log")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        source = self.node_sources.get(node_id)
        if source is not None:  # `-m` puts the working directory first on the path, then PYTHONPATH
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")]))
        with open(log_path, "ab") as log_file:
            self.processes[node_id] = _spawn(functools.partial(
                subprocess.Popen,
                [sys.executable, "-m", "cli.main", "node", "--config", os.path.abspath(self.config_path),
                 "--id", str(node_id), "--log-level", self.log_level],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=source,
                preexec_fn=functools.partial(_prepare_child, self.descriptor_limit, self.file_size_limit),
            ))
        if wait:
            self.wait_listening(node_id)

    def wait_listening(self, node_id: int, seconds_max: float = NODE_START_SECONDS_MAX) -> None:
        deadline = time.monotonic() + seconds_max
        while time.monotonic() < deadline:
            process = self.processes[node_id]
            if process.poll() is not None:
                raise RuntimeError(f"node {node_id} exited with {process.returncode}; see {self.log_path(node_id)}")
            try:
                socket.create_connection(("127.0.0.1", self.kafka_ports[node_id]), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        raise TimeoutError(f"node {node_id} did not listen within {seconds_max} s; see {self.log_path(node_id)}")

    def log_path(self, node_id: int) -> str:
        return os.path.join(self.directory, f"node-{node_id}.log")

    def kill(self, node_id: int, signum: int = signal.SIGKILL) -> None:
        process = self.processes[node_id]
        if process.poll() is None:
            process.send_signal(signum)
            process.wait(timeout=30)

    def pause(self, node_id: int) -> None:
        """SIGSTOP the node: alive, its sockets open, answering nothing (a hung process, a long GC or VM stall)."""
        self.processes[node_id].send_signal(signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        self.processes[node_id].send_signal(signal.SIGCONT)

    def is_running(self, node_id: int) -> bool:
        return node_id in self.processes and self.processes[node_id].poll() is None

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.send_signal(signal.SIGCONT)  # a paused node acts on the SIGTERM once continued
        deadline = time.monotonic() + 20
        for process in self.processes.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()
