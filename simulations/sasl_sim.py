"""The sasl workload: the whole-cluster simulation with every client on a SASL listener whose sessions expire
(KIP-368).

Theory of operation. Everything of the cluster workload (simulations/cluster_sim.py: real nodes, producers with
acks=all and acks=1, a reader, every node and network fault) runs as it does there. On top, the nodes serve
clients as a SASL_PLAINTEXT listener with PLAIN users and `connections_max_reauth_ms` = `LIFETIME_MS`: every
client frame goes through the gate real nodes use (broker/sasl_gate.py), and the clients authenticate every
connection before anything else (simulations/kafka_clients.py). Brokers talk to each other unauthenticated, as
over a plaintext inter-broker listener. The producer "all", the reader and the topic creator re-authenticate
in time; the producer "one" is an old client that never does, so the nodes close its connection at its first
request after each session's end, and it connects and authenticates again. An impostor ("mallory") asks for
metadata every `IMPOSTOR_TICK_MS` and, when its session is due, re-authenticates as "admin", whose password it
knows: the nodes must refuse that and close the connection. A poller ("bearer") asks for metadata as often
over SASL/OAUTHBEARER, each token an unsecured JWT that expires `TOKEN_LIFE_MS` after it is made, sooner than
the sessions' `LIFETIME_MS`: its sessions must end with its tokens, and it re-authenticates with new ones.

Checkers: the cluster's, plus two computed from the frames each node incarnation handled on each connection
and its SASL answers, not from the session's own fields:
- `sessions_expire`: once a SaslAuthenticate answer gave the session a lifetime L at time T, no request but the
  SASL ones is handled at T + L or later, until a later successful SaslAuthenticate answer renews it;
- `principal_kept`: every request a connection has handled is handled as the principal its first
  authentication named (the user of its first PLAIN token, or the subject of its first OAUTHBEARER token, that
  was answered without error);
- `token_expiry_kept`: no request but the SASL ones is handled on a connection at or after the `exp` of the
  OAUTHBEARER token its latest successful authentication carried (read from the client's message, not from
  the answer), until a later one renews it.

Planted bugs: `--bugs expired_session_served` (the gate never checks the expiry: the old producer goes on
being served) and `--bugs reauth_principal_change` (a re-authentication may name another principal: the
impostor becomes admin) and `--bugs token_expiry_ignored` (an OAUTHBEARER session lasts LIFETIME_MS whatever its
token's expiry: the bearer is served on expired tokens).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from broker.admin_api import peek_api_key
from broker.sasl_gate import SaslGate, SaslOutcome
from broker.security_config import SecuritySettings
from net.protocol.codec import ApiKey, decode_request, decode_response
from simulations import cluster_sim
from simulations.cluster_checkers import ClusterCheckers
from simulations.cluster_sim import CLIENT_ID_BASE, PARTITIONS, TOPIC, ClusterSimulation
from simulations.kafka_clients import KafkaClientBase
from simulations.loop import US_PER_MS
from simulations.run import RunConfig, RunResult
from security.oauthbearer import OAUTHBEARER, parse_client_first
from security.session import Session, anonymous_session

DESCRIPTION = "the whole cluster with every client on a SASL listener whose sessions expire (KIP-368)"
LIFETIME_MS = 2_000
TOKEN_LIFE_MS = 1_200  # the bearer's tokens: shorter than the sessions' lifetime
PASSWORD = "secret"
IMPOSTOR_TICK_MS = 200
SASL_CHECKER_NAMES = ("sessions_expire", "principal_kept", "token_expiry_kept")
SASL_BUGS = {"expired_session_served": "bug_expired_sessions_served",
             "reauth_principal_change": "bug_principal_may_change",
             "token_expiry_ignored": "bug_token_expiry_ignored"}
_SASL_APIS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


@dataclass
class _Connection:
    """What the checkers know of one connection of one node incarnation."""

    principal: str | None = None  # named by its first successful authentication
    expires_at_ms: int | None = None
    token_expires_at_ms: int | None = None  # the `exp` of the OAUTHBEARER token of its latest authentication


class SaslCheckers(ClusterCheckers):
    """The cluster's checkers plus `sessions_expire` and `principal_kept` (see the module docstring)."""

    extra_checker_names = SASL_CHECKER_NAMES

    def __init__(self) -> None:
        super().__init__()
        self._connections: dict[tuple[int, int, int], _Connection] = {}
        self.served_after_renewal = 0  # requests served on a session that had been renewed at least once


    def observe_sasl(self, process: Any, connection: int, frame: Any, outcome: SaslOutcome | None,
                     session: Session) -> None:
        """A client frame the node's SASL gate screened, with the gate's outcome (None: served as a request)."""
        now_ms = process.sim.loop.now_ms
        key = (process.node_id, process.incarnation, connection)
        known = self._connections.setdefault(key, _Connection())
        api_key = peek_api_key(frame)
        if outcome is None:
            if known.expires_at_ms is not None and now_ms >= known.expires_at_ms and api_key not in _SASL_APIS:
                self.violate("sessions_expire", f"node {process.node_id} served api_key {api_key} on connection "
                                                f"{connection} {now_ms - known.expires_at_ms} ms after its session "
                                                f"ended")
            token_end = known.token_expires_at_ms
            if token_end is not None and now_ms >= token_end and api_key not in _SASL_APIS:
                self.violate("token_expiry_kept", f"node {process.node_id} served api_key {api_key} on connection "
                                                  f"{connection} {now_ms - token_end} ms after the token it "
                                                  f"authenticated with expired")
            if known.principal is not None and session.principal != known.principal:
                self.violate("principal_kept", f"node {process.node_id} served api_key {api_key} on connection "
                                               f"{connection} as {session.principal}, which authenticated as "
                                               f"{known.principal}")
            return
        if api_key != ApiKey.SASL_AUTHENTICATE or not outcome.reply or session.raw_tokens:
            return
        header, request = decode_request(frame)
        _, answer = decode_response(ApiKey.SASL_AUTHENTICATE, header.api_version, memoryview(outcome.reply)[4:])
        if answer.error_code or answer.auth_bytes or answer.session_lifetime_ms <= 0:
            return  # (auth bytes: OAUTHBEARER's error for a refused token, which authenticates no one)
        client_bytes = bytes(request.auth_bytes)
        if client_bytes.startswith(b"n,"):  # OAUTHBEARER (PLAIN's message starts with its empty authzid)
            claims = _token_claims(parse_client_first(client_bytes).token)
            user, known.token_expires_at_ms = claims["sub"], int(claims["exp"] * 1000)
        else:
            user = client_bytes.split(b"\x00")[1].decode()
        if known.principal is None:
            known.principal = f"User:{user}"
        known.expires_at_ms = now_ms + answer.session_lifetime_ms


def _token_claims(token: str) -> dict[str, Any]:
    """The claims of a JWT, read without checking it (the checker's own reading, not the node's)."""
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))



class SimPoller(KafkaClientBase):
    """Asks for metadata every IMPOSTOR_TICK_MS (the impostor mallory, and the bearer)."""

    def __init__(self, host: Any, client_id: int, name: str) -> None:
        super().__init__(host, client_id, name, TOPIC, PARTITIONS)

    def start(self) -> None:
        self.loop.call_later(IMPOSTOR_TICK_MS * US_PER_MS, self._tick)

    def _tick(self) -> None:
        if not self.running:
            return
        self.refresh_metadata()
        self.loop.call_later(IMPOSTOR_TICK_MS * US_PER_MS, self._tick)


class SaslSimulation(ClusterSimulation):
    """The cluster simulation over a SASL listener with expiring sessions (see the module docstring)."""

    checkers_class = SaslCheckers
    extra_bugs = SASL_BUGS
    idle_phase_ms = 0  # the cluster workload's idle phase (its traces stay as they were)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.sasl_security: SecuritySettings | None = None  # set before the nodes start (their gates read it)
        super().__init__(*args, **kwargs)

    def _build_clients(self) -> None:
        super()._build_clients()
        self.impostor = SimPoller(self, CLIENT_ID_BASE + 22, "mallory")
        self.bearer = SimPoller(self, CLIENT_ID_BASE + 23, "bearer")
        self.clients = [*self.clients, self.impostor, self.bearer]
        for client in self.clients:
            client.sasl_user = client.name if client is not self.admin else "admin"
            client.sasl_password = PASSWORD
        for producer in self.producers:
            producer.reauthenticates = producer.name != "one"  # "one" is an old client
        self.impostor.reauth_user = "admin"
        self.bearer.sasl_mechanism, self.bearer.token_life_ms = OAUTHBEARER, TOKEN_LIFE_MS
        users = {client.sasl_user: PASSWORD for client in self.clients if client is not self.bearer}
        # (no clock skew: the clients' tokens are made on the nodes' clock)
        self.sasl_security = SecuritySettings(sasl_enabled_mechanisms=("PLAIN", OAUTHBEARER), plain_users=users,
                                              connections_max_reauth_ms=LIFETIME_MS, sasl_oauthbearer_unsecured=True,
                                              sasl_oauthbearer_clock_skew_seconds=0)

    def open_kafka_session(self, peer_id: int) -> Session:
        """Clients come in on the SASL listener, brokers on the plaintext inter-broker one."""
        if peer_id in self.node_ids:
            return anonymous_session()
        return Session.open("SASL_PLAINTEXT", "SASL_PLAINTEXT", f"client-{peer_id}", None)

    def configure_sasl_gate(self, gate: SaslGate) -> None:
        for bug in self.workload_bugs & set(SASL_BUGS):  # (the acls workload adds bugs of its own)
            setattr(gate, SASL_BUGS[bug], True)

    def _start_clients(self) -> None:
        super()._start_clients()
        self.impostor.start()
        self.bearer.start()

    def _result(self) -> RunResult:
        result = super()._result()
        for client in self.clients:
            for name, count in client.sasl_counts.items():
                result.stats[f"sasl_{client.name}_{name}"] = count
        return result


def run(config: RunConfig) -> RunResult:
    """One sasl simulation of `config` (see the module docstring). Raises ValueError for an unknown bug."""
    return cluster_sim.run(config, simulation_class=SaslSimulation)
