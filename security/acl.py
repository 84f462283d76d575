"""ACLs and the standard authorizer (Kafka's StandardAuthorizer semantics), sans-IO.

Theory of operation: an ACL binding is (resource pattern, principal, host, operation, permission). The
bindings live in the metadata image (`image.acls`, replayed from AccessControlEntryRecords); `Authorizer`
answers `authorize(principal, host, operation, resource_type, resource_name)` as a pure function of that
image and its own static settings (super users, allow-everyone-if-no-ACL-found). Kafka's rules:
- a super user may do everything;
- the ACLs that apply to a resource are the ones of its type whose pattern matches: LITERAL equal to the name
  or the wildcard `*`, PREFIXED a prefix of the name; of those, the ones for this principal (or `User:*`) and
  this host (or `*`);
- a matching DENY wins over any ALLOW; a DENY matches its own operation or ALL;
- an ALLOW matches its operation, ALL, or an operation that implies the one asked: READ, WRITE, DELETE and
  ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS;
- with no ACL at all on the resource (for anyone), `allow_everyone_if_no_acl_found` decides (false by
  default once an authorizer is on, as Kafka's).
The index (ACLs by resource type, literal name and prefix) is rebuilt when the image's ACL set changes,
never on the request path.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable

WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"


class ResourceType(enum.IntEnum):
    """Kafka's ResourceType wire values."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    """Kafka's PatternType wire values (ANY and MATCH exist only in filters)."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    """Kafka's AclOperation wire values."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(enum.IntEnum):
    """Kafka's AclPermissionType wire values."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_RESOURCE_NAME = "kafka-cluster"  # Kafka's only cluster resource name

# The operations an ALLOW of the key also grants (Kafka's AclEntry implied operations).
_IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                                      AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.ALTER_CONFIGS}),
}

# Operations that apply to each resource type (Kafka's AclEntry.supportedOperations), for validating
# CreateAcls and for KIP-430's authorized-operations bitfields.
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                                   AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                                   AclOperation.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}),
    ResourceType.CLUSTER: frozenset({AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                                     AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                                     AclOperation.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE,
                                              AclOperation.TWO_PHASE_COMMIT}),
    ResourceType.DELEGATION_TOKEN: frozenset({AclOperation.DESCRIBE}),
    ResourceType.USER: frozenset({AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS}),
}


class InvalidAclError(ValueError):
    """A binding or filter that Kafka would refuse (the message says which field and why)."""


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL (Kafka's AclBinding); also the fields of an AccessControlEntryRecord."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int

    def validate(self) -> None:
        """Raises InvalidAclError for a binding Kafka refuses to create."""
        try:
            resource_type = ResourceType(self.resource_type)
            pattern_type = PatternType(self.pattern_type)
            operation = AclOperation(self.operation)
            permission = AclPermissionType(self.permission_type)
        except ValueError as error:
            raise InvalidAclError(str(error)) from None
        if resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            raise InvalidAclError(f"resource type {resource_type.name} is only valid in a filter")
        if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAclError(f"pattern type {pattern_type.name} is only valid in a filter")
        if operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            raise InvalidAclError(f"operation {operation.name} is only valid in a filter")
        if permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise InvalidAclError(f"permission type {permission.name} is only valid in a filter")
        if operation != AclOperation.ALL and operation not in SUPPORTED_OPERATIONS[resource_type]:
            raise InvalidAclError(f"operation {operation.name} does not apply to a {resource_type.name} resource")
        if not self.resource_name:
            raise InvalidAclError("the resource name must not be empty")
        if resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_RESOURCE_NAME:
            raise InvalidAclError(f"the cluster resource is named {CLUSTER_RESOURCE_NAME!r}")
        if ":" not in self.principal:
            raise InvalidAclError(f"principal {self.principal!r} is not of the form Type:name (e.g. User:alice)")
        if not self.host:
            raise InvalidAclError("the host must not be empty (use * for any host)")


@dataclass(frozen=True, slots=True)
class AclFilter:
    """A filter over bindings (DescribeAcls, DeleteAcls): None fields and ANY match everything."""

    resource_type: int = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: int = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: int = AclOperation.ANY
    permission_type: int = AclPermissionType.ANY

    def validate(self) -> None:
        """Raises InvalidAclError for UNKNOWN values (Kafka refuses a filter that contains them)."""
        try:
            values = (ResourceType(self.resource_type), PatternType(self.pattern_type),
                      AclOperation(self.operation), AclPermissionType(self.permission_type))
        except ValueError as error:
            raise InvalidAclError(str(error)) from None
        if any(value.name == "UNKNOWN" for value in values):
            raise InvalidAclError("a filter must not contain UNKNOWN values")

    def matches(self, binding: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and binding.resource_type != self.resource_type:
            return False
        if not self._matches_pattern(binding):
            return False
        if self.principal is not None and binding.principal != self.principal:
            return False
        if self.host is not None and binding.host != self.host:
            return False
        if self.operation != AclOperation.ANY and binding.operation != self.operation:
            return False
        return self.permission_type == AclPermissionType.ANY or binding.permission_type == self.permission_type

    def _matches_pattern(self, binding: AclBinding) -> bool:
        if self.pattern_type == PatternType.MATCH:
            # Every pattern that would apply to the named resource (Kafka's MATCH).
            if self.resource_name is None:
                return True
            if binding.pattern_type == PatternType.LITERAL:
                return binding.resource_name in (self.resource_name, WILDCARD_RESOURCE)
            return self.resource_name.startswith(binding.resource_name)
        if self.pattern_type != PatternType.ANY and binding.pattern_type != self.pattern_type:
            return False
        return self.resource_name is None or binding.resource_name == self.resource_name


def binding_of(entry: Any) -> AclBinding:
    """The binding of anything with the seven binding fields (an AccessControlEntryRecord)."""
    return AclBinding(entry.resource_type, entry.resource_name, entry.pattern_type, entry.principal, entry.host,
                      entry.operation, entry.permission_type)


class _Index:
    """Bindings by resource type: literal name -> bindings, prefix -> bindings."""

    def __init__(self, bindings: Iterable[AclBinding]) -> None:
        self.literal: dict[tuple[int, str], list[AclBinding]] = defaultdict(list)
        self.prefixed: dict[int, dict[str, list[AclBinding]]] = defaultdict(lambda: defaultdict(list))
        self.count = 0
        for binding in bindings:
            self.count += 1
            if binding.pattern_type == PatternType.LITERAL:
                self.literal[(binding.resource_type, binding.resource_name)].append(binding)
            else:
                self.prefixed[binding.resource_type][binding.resource_name].append(binding)

    def applicable(self, resource_type: int, name: str) -> list[AclBinding]:
        found = list(self.literal.get((resource_type, name), ()))
        if name != WILDCARD_RESOURCE:
            found.extend(self.literal.get((resource_type, WILDCARD_RESOURCE), ()))
        prefixes = self.prefixed.get(resource_type)
        if prefixes:
            for prefix, bindings in prefixes.items():
                if name.startswith(prefix):
                    found.extend(bindings)
        return found


@dataclass(frozen=True)
class AuthorizerSettings:
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False


class Authorizer:
    """Kafka's standard authorizer over the ACLs of the current metadata image (see the module docstring).

    Planted bugs for the simulator (simulations/acl_sim.py), never configured: `bug_index_kept_on_delete` (the
    index is rebuilt only when ACLs were added, so a deleted binding still applies) and `bug_allow_before_deny`
    (the first matching binding decides, so an ALLOW met before a DENY wins)."""

    bug_index_kept_on_delete = False
    bug_allow_before_deny = False

    def __init__(self, settings: AuthorizerSettings) -> None:
        self.settings = settings
        self._source: object = None
        self._index = _Index(())

    def update(self, acls_by_id: Any) -> None:
        """Point at the image's ACL map (rebuilds the index only when the map object changed)."""
        if acls_by_id is self._source:
            return
        self._source = acls_by_id
        if self.bug_index_kept_on_delete and len(acls_by_id) < self._index.count:
            return
        self._index = _Index(binding_of(entry) for entry in acls_by_id.values())

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  resource_name: str) -> bool:
        if principal in self.settings.super_users:
            return True
        applicable = self._index.applicable(resource_type, resource_name)
        if not applicable:
            return self.settings.allow_everyone_if_no_acl_found
        allowed = False
        for binding in applicable:
            if binding.principal not in (principal, WILDCARD_PRINCIPAL):
                continue
            if binding.host not in (host, WILDCARD_HOST):
                continue
            if binding.permission_type == AclPermissionType.DENY:
                if binding.operation in (operation, AclOperation.ALL):
                    return False
            elif not allowed:
                allowed = (binding.operation in (operation, AclOperation.ALL)
                           or binding.operation in _IMPLIED_BY.get(operation, ()))
                if allowed and self.bug_allow_before_deny:
                    return True
        return allowed

    def authorize_any(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Whether the principal may do `operation` on at least one resource of the type (Kafka's
        authorizeByResourceType: an ALLOW for it that no DENY of the same pattern cancels)."""
        if principal in self.settings.super_users:
            return True
        for binding_list in list(self._index.literal.items()):
            (rtype, name), bindings = binding_list
            if rtype == resource_type and self.authorize(principal, host, operation, resource_type, name):
                if any(b.permission_type == AclPermissionType.ALLOW for b in bindings):
                    return True
        for prefix, bindings in self._index.prefixed.get(resource_type, {}).items():
            if any(b.permission_type == AclPermissionType.ALLOW and b.principal in (principal, WILDCARD_PRINCIPAL)
                   and b.operation in (operation, AclOperation.ALL) for b in bindings):
                denied = any(b.permission_type == AclPermissionType.DENY and b.principal in (principal, WILDCARD_PRINCIPAL)
                             and b.operation in (operation, AclOperation.ALL) for b in bindings)
                if not denied:
                    return True
        return False

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, resource_name: str) -> int:
        """KIP-430's bitfield: bit `op` set for each operation of the resource type the principal may do."""
        bits = 0
        for operation in SUPPORTED_OPERATIONS[resource_type]:
            if self.authorize(principal, host, operation, resource_type, resource_name):
                bits |= 1 << operation
        return bits
