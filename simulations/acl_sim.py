"""The acls workload: the sasl workload with the authorizer on while an administrator changes ACLs.

Theory of operation. Everything of the sasl workload (simulations/sasl_sim.py: the cluster workload with every
client authenticated on a SASL listener whose sessions expire, under every node and network fault) runs as it
does there, with the nodes' authorizer on (Kafka's StandardAuthorizer rules, security/acl.py; `admin` and the
brokers' own inter-broker principal are super users; `allow_everyone_if_no_acl_found`, so that the clients
work before the first ACL lands). An administrator ("acl-admin") first grants the producers WRITE and the reader
READ on the topic, then every `FLIP_MS` alternately creates and deletes a DENY of WRITE on the topic for the
producer "one" (CreateAcls, DeleteAcls, each retried until answered without error): "one" is refused while
the DENY is in its broker's image, and writes again once it is gone. Once the faults heal, the DENY is deleted
for good and the administrator stops.

Checker `acls_follow_image`: every authorization a node decides is the decision Kafka's rules give for the ACL
bindings of that node's metadata image at that moment, computed by the checker's own plain reading of those
rules over the image's records (not by the node's authorizer and its index). With the cluster's
`metadata_identical`, which holds every node's image to the same committed records, that is: each node
enforces exactly the ACLs the quorum has committed, as far as it has applied them.

Checker `acls_read_your_writes`: right after the administrator's CreateAcls or DeleteAcls of the DENY is
answered, it asks the same broker on the same connection (DescribeAcls), and the answer must show its write:
the broker forwards the write to the quorum leader and answers only once its own image has what the leader had
applied (BrokerCore.on_controller_response), as it names itself the controller to clients. Not checked: a
broker that gave up waiting for its image (IMAGE_WAIT_MS_MAX, `image_waits_expired`), a connection that broke
in between, or within UNKNOWN_OUTCOME_SETTLE_MS of a write whose outcome the administrator does not know (no
answer, or an error), which may still land and undo what it reads.

Planted bugs: `--bugs acl_index_kept_on_delete` (the authorizer rebuilds its index only when ACLs are added,
so a deleted DENY goes on refusing), `--bugs acl_allow_before_deny` (the first matching binding decides, so
an ALLOW created before a DENY wins over it) and `--bugs answer_before_image` (a forwarded request is answered
as soon as the controller answers).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode
from security.acl import (
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from simulations import cluster_sim
from simulations.cluster_sim import CLIENT_ID_BASE, PARTITIONS, TOPIC
from simulations.kafka_clients import KafkaClientBase
from simulations.loop import US_PER_MS
from simulations.run import RunConfig, RunResult
from simulations.sasl_sim import SaslCheckers, SaslSimulation

DESCRIPTION = "the sasl workload with the authorizer on while an administrator grants and revokes ACLs"
FLIP_MS = 2_000
RETRY_MS = 200
DESCRIBE_ACLS_VERSION = 3
UNKNOWN_OUTCOME_SETTLE_MS = 15_000  # a write's forwarding (10 s of controller call) and commit are over by then
ACL_CHECKER_NAMES = ("acls_follow_image", "acls_read_your_writes")
ACL_BUGS = {"acl_index_kept_on_delete": "bug_index_kept_on_delete", "acl_allow_before_deny": "bug_allow_before_deny"}
BROKER_ACL_BUGS = {"answer_before_image": "bug_answer_before_image"}  # BrokerCore's
SUPER_USERS = ("User:admin", "User:acl-admin", "User:ANONYMOUS")  # ANONYMOUS: the brokers, to each other
CREATE_ACLS_VERSION = 3
DELETE_ACLS_VERSION = 3
# (principal, operation, permission) on the topic: the grants first, then the DENY that comes and goes
GRANTS = (("User:all", AclOperation.WRITE, AclPermissionType.ALLOW),
          ("User:one", AclOperation.WRITE, AclPermissionType.ALLOW),
          ("User:reader", AclOperation.READ, AclPermissionType.ALLOW))
REVOCATION = ("User:one", AclOperation.WRITE, AclPermissionType.DENY)
_IMPLIES_DESCRIBE = (AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER)


def reference_decision(bindings: list[Any], principal: str, host: str, operation: int, resource_type: int,
                       name: str, allow_if_none: bool) -> bool:
    """Kafka's rules, read plainly over every binding (see security/acl.py's docstring; super users apart)."""
    on_resource = [b for b in bindings if b.resource_type == resource_type and (
        b.pattern_type == PatternType.LITERAL and b.resource_name in (name, WILDCARD_RESOURCE)
        or b.pattern_type == PatternType.PREFIXED and name.startswith(b.resource_name))]
    if not on_resource:
        return allow_if_none
    mine = [b for b in on_resource if b.principal in (principal, WILDCARD_PRINCIPAL) and b.host in (host, WILDCARD_HOST)]
    if any(b.permission_type == AclPermissionType.DENY and b.operation in (operation, AclOperation.ALL) for b in mine):
        return False
    return any(b.permission_type == AclPermissionType.ALLOW and (
        b.operation in (operation, AclOperation.ALL)
        or operation == AclOperation.DESCRIBE and b.operation in _IMPLIES_DESCRIBE
        or operation == AclOperation.DESCRIBE_CONFIGS and b.operation == AclOperation.ALTER_CONFIGS) for b in mine)


class AclCheckers(SaslCheckers):
    """The sasl workload's checkers plus `acls_follow_image` (see the module docstring)."""

    extra_checker_names = (*SaslCheckers.extra_checker_names, *ACL_CHECKER_NAMES)

    def __init__(self) -> None:
        super().__init__()
        self.decisions = 0
        self.refusals = 0
        self.reads_checked = 0

    def observe_read_after_write(self, node_id: int, wrote: str, present: bool) -> None:
        """The administrator's DescribeAcls on `node_id` right after its write there was answered (`wrote`:
        "denied" or "revoked_deny"); `present`: whether the answer lists the DENY."""
        self.reads_checked += 1
        if present != (wrote == "denied"):
            self.violate("acls_read_your_writes", f"node {node_id} answered the DENY {wrote}, then described the "
                                                  f"ACLs {'with' if present else 'without'} it")

    def observe_authorization(self, node_id: int, image: Any, principal: str, host: str, operation: int,
                              resource_type: int, name: str, decided: bool) -> None:
        if principal in SUPER_USERS:
            return
        self.decisions += 1
        self.refusals += not decided
        expected = reference_decision(list(image.acls.by_id.values()), principal, host, operation, resource_type, name,
                                      allow_if_none=True)
        if decided != expected:
            self.violate("acls_follow_image", f"node {node_id} {'allowed' if decided else 'refused'} {principal} "
                                              f"{AclOperation(operation).name} on {ResourceType(resource_type).name} "
                                              f"{name!r} where the {len(image.acls.by_id)} ACLs of its image "
                                              f"{'refuse' if decided else 'allow'} it")


class SimAclAdmin(KafkaClientBase):
    """Grants, then flips the revocation every FLIP_MS until `stop` (see the module docstring)."""

    def __init__(self, host: Any, client_id: int) -> None:
        super().__init__(host, client_id, "acl-admin", TOPIC, PARTITIONS)
        self.granted = False
        self.denied = False  # the revocation is in place (its CreateAcls answered)
        self.final = False  # the faults have healed: delete the revocation and stop
        self.flips = 0
        self._inflight = False  # a write, or the read after it, awaits its answer
        self._unknown_since_ms: int | None = None  # when the last write whose outcome is unknown was sent
        self._sent: tuple[int, int | None, Any, int] | None = None  # broker, connection, process, waits expired
        self._sent_ms = 0

    def start(self) -> None:
        self.loop.call_later(RETRY_MS * US_PER_MS, self._step)

    def stop(self) -> None:
        self.final = True

    def _step(self) -> None:
        if not self.running or self.final and not self.denied:
            return
        broker_id = self.any_broker()
        delay_ms = FLIP_MS if self.granted else RETRY_MS  # (a flip that fails is tried again at the next one)
        if broker_id is not None and not self._inflight:
            if not self.granted:
                self._inflight = self._create(broker_id, GRANTS, "granted")
            elif self.denied:
                self._inflight = self._delete(broker_id)
            else:
                self._inflight = self._create(broker_id, (REVOCATION,), "denied")
        self.loop.call_later(delay_ms * US_PER_MS, self._step)

    def _note_sent(self, broker_id: int) -> None:
        process = self.host.processes.get(broker_id)
        expired = process.broker.image_waits_expired if process is not None else 0
        self._sent = (broker_id, self._connection_number.get(broker_id), process, expired)
        self._sent_ms = self.loop.now_ms

    def _answered(self, ok: bool, done: str) -> None:
        """A write's answer: a success is read back from the same broker; otherwise its outcome is unknown."""
        if not ok:
            self._inflight = False
            self._unknown_since_ms = self._sent_ms
            return
        self.flips += done != "granted"
        self.host.trace("client.acls", done)
        settled = self._unknown_since_ms is None or self._sent_ms - self._unknown_since_ms >= UNKNOWN_OUTCOME_SETTLE_MS
        if done == "granted" or not settled or not self._read_back(done):
            self._inflight = False

    def _read_back(self, wrote: str) -> bool:
        assert self._sent is not None
        broker_id, connection, process, expired = self._sent
        principal, operation, permission = REVOCATION
        request = messages.DescribeAclsRequest(
            resource_type_filter=ResourceType.TOPIC, resource_name_filter=TOPIC, pattern_type_filter=PatternType.LITERAL,
            principal_filter=principal, host_filter=WILDCARD_HOST, operation=operation, permission_type=permission)

        def on_described(response: Any) -> None:
            self._inflight = False
            same = (self._connection_number.get(broker_id) == connection and self.host.processes.get(broker_id) is process
                    and process is not None and process.broker.image_waits_expired == expired)
            if response is None or response.error_code != ErrorCode.NONE or not same:
                return
            present = any(resource.acls for resource in response.resources)
            self.host.checkers.observe_read_after_write(broker_id, wrote, present)

        return self.send(broker_id, ApiKey.DESCRIBE_ACLS, DESCRIBE_ACLS_VERSION, request, on_described)

    def _create(self, broker_id: int, entries: tuple, done: str) -> bool:
        self._note_sent(broker_id)
        creation = messages.CreateAclsRequest.AclCreation
        request = messages.CreateAclsRequest(creations=[creation(
            resource_type=ResourceType.TOPIC, resource_name=TOPIC, resource_pattern_type=PatternType.LITERAL,
            principal=principal, host=WILDCARD_HOST, operation=operation, permission_type=permission)
            for principal, operation, permission in entries])
        return self.send(broker_id, ApiKey.CREATE_ACLS, CREATE_ACLS_VERSION, request,
                         lambda response: self._on_create(response, done))

    def _on_create(self, response: Any, done: str) -> None:
        ok = response is not None and all(result.error_code == ErrorCode.NONE for result in response.results)
        if ok and done == "granted":
            self.granted = True
        elif ok:
            self.denied = True
        self._answered(ok, done)

    def _delete(self, broker_id: int) -> bool:
        self._note_sent(broker_id)
        principal, operation, permission = REVOCATION
        request = messages.DeleteAclsRequest(filters=[messages.DeleteAclsRequest.DeleteAclsFilter(
            resource_type_filter=ResourceType.TOPIC, resource_name_filter=TOPIC,
            pattern_type_filter=PatternType.LITERAL, principal_filter=principal, host_filter=WILDCARD_HOST,
            operation=operation, permission_type=permission)])
        return self.send(broker_id, ApiKey.DELETE_ACLS, DELETE_ACLS_VERSION, request, self._on_delete)

    def _on_delete(self, response: Any) -> None:
        ok = response is not None and all(result.error_code == ErrorCode.NONE for result in response.filter_results)
        if ok:
            self.denied = False
        self._answered(ok, "revoked_deny")


class AclSimulation(SaslSimulation):
    """The sasl simulation with the authorizer on and ACLs changing (see the module docstring)."""

    checkers_class = AclCheckers
    extra_bugs = {**SaslSimulation.extra_bugs, **ACL_BUGS, **BROKER_ACL_BUGS}
    security_settings_extra = {"authorizer": True, "super_users": list(SUPER_USERS),
                               "allow_everyone_if_no_acl_found": True}

    def _build_clients(self) -> None:
        super()._build_clients()
        self.acl_admin = SimAclAdmin(self, CLIENT_ID_BASE + 24)
        self.acl_admin.sasl_user, self.acl_admin.sasl_password = "acl-admin", self.admin.sasl_password
        self.clients = [*self.clients, self.acl_admin]
        assert self.sasl_security is not None
        self.sasl_security = dataclasses.replace(self.sasl_security, plain_users={
            **self.sasl_security.plain_users, "acl-admin": self.admin.sasl_password})

    def configure_node(self, state: Any) -> None:
        super().configure_node(state)
        for bug, attribute in BROKER_ACL_BUGS.items():
            setattr(state.broker, attribute, bug in self.workload_bugs)
        authorizer = state.apis.authorizer if state.apis is not None else None
        if authorizer is None:
            return
        for bug, attribute in ACL_BUGS.items():
            setattr(authorizer, attribute, bug in self.workload_bugs)
        checkers, broker, node_id = self.checkers, state.broker, state.node_id
        decide = authorizer.authorize

        def authorize(principal: str, host: str, operation: Any, resource_type: Any, name: str) -> bool:
            decided = decide(principal, host, operation, resource_type, name)
            checkers.observe_authorization(node_id, broker.image, principal, host, int(operation), int(resource_type),
                                           name, decided)
            return decided

        authorizer.authorize = authorize

    def _start_clients(self) -> None:
        super()._start_clients()
        self.acl_admin.start()

    def _heal_everything(self) -> None:
        super()._heal_everything()
        self.acl_admin.stop()

    def _result(self) -> RunResult:
        result = super()._result()
        result.stats["acl_flips"] = self.acl_admin.flips
        result.stats["acl_decisions"] = self.checkers.decisions
        result.stats["acl_refusals"] = self.checkers.refusals
        result.stats["acl_reads_checked"] = self.checkers.reads_checked
        return result


def run(config: RunConfig) -> RunResult:
    """One acls simulation of `config` (see the module docstring). Raises ValueError for an unknown bug."""
    return cluster_sim.run(config, simulation_class=AclSimulation)
