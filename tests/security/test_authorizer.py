"""The standard authorizer's rules (Kafka's StandardAuthorizer / AclAuthorizer semantics), as a pure function."""

import pytest

from metadata.image import FrozenMap
from metadata.records import AccessControlEntryRecord
from security.acl import (
    CLUSTER_RESOURCE_NAME,
    AclBinding,
    AclFilter,
    AclOperation as Op,
    AclPermissionType as Perm,
    Authorizer,
    AuthorizerSettings,
    InvalidAclError,
    PatternType,
    ResourceType as RT,
)


def acls(*bindings):
    return FrozenMap({bytes([i]) * 16: AccessControlEntryRecord(bytes([i]) * 16, *b) for i, b in enumerate(bindings)})


def allow(rtype, name, principal, op, pattern=PatternType.LITERAL, host="*"):
    return (rtype, name, pattern, principal, host, op, Perm.ALLOW)


def deny(rtype, name, principal, op, pattern=PatternType.LITERAL, host="*"):
    return (rtype, name, pattern, principal, host, op, Perm.DENY)


def authorizer(*bindings, super_users=(), allow_everyone=False):
    auth = Authorizer(AuthorizerSettings(frozenset(super_users), allow_everyone))
    auth.update(acls(*bindings))
    return auth


def test_no_acl_on_a_resource_denies_unless_allow_everyone_if_no_acl_found():
    assert not authorizer().authorize("User:alice", "1.2.3.4", Op.READ, RT.TOPIC, "a")
    assert authorizer(allow_everyone=True).authorize("User:alice", "1.2.3.4", Op.READ, RT.TOPIC, "a")
    # Once any ACL names the resource, the flag no longer applies (Kafka's rule: it is for resources without ACLs).
    auth = authorizer(allow(RT.TOPIC, "a", "User:bob", Op.READ), allow_everyone=True)
    assert not auth.authorize("User:alice", "h", Op.READ, RT.TOPIC, "a")
    assert auth.authorize("User:alice", "h", Op.READ, RT.TOPIC, "b")


def test_deny_overrides_allow():
    auth = authorizer(allow(RT.TOPIC, "a", "User:alice", Op.READ), deny(RT.TOPIC, "a", "User:alice", Op.READ))
    assert not auth.authorize("User:alice", "h", Op.READ, RT.TOPIC, "a")
    # A DENY of ALL denies every operation; a wildcard-principal DENY denies everyone.
    auth = authorizer(allow(RT.TOPIC, "a", "User:alice", Op.WRITE), deny(RT.TOPIC, "*", "User:*", Op.ALL))
    assert not auth.authorize("User:alice", "h", Op.WRITE, RT.TOPIC, "a")


def test_prefixed_and_wildcard_patterns():
    auth = authorizer(allow(RT.TOPIC, "orders-", "User:bob", Op.WRITE, PatternType.PREFIXED),
                      allow(RT.GROUP, "*", "User:bob", Op.READ))
    assert auth.authorize("User:bob", "h", Op.WRITE, RT.TOPIC, "orders-eu")
    assert not auth.authorize("User:bob", "h", Op.WRITE, RT.TOPIC, "order")
    assert not auth.authorize("User:bob", "h", Op.WRITE, RT.TOPIC, "payments")
    assert auth.authorize("User:bob", "h", Op.READ, RT.GROUP, "anything")


def test_read_write_delete_alter_imply_describe_but_a_deny_of_read_does_not_deny_describe():
    auth = authorizer(allow(RT.TOPIC, "a", "User:alice", Op.READ))
    assert auth.authorize("User:alice", "h", Op.DESCRIBE, RT.TOPIC, "a")
    assert not auth.authorize("User:alice", "h", Op.WRITE, RT.TOPIC, "a")
    auth = authorizer(allow(RT.TOPIC, "a", "User:alice", Op.ALTER_CONFIGS))
    assert auth.authorize("User:alice", "h", Op.DESCRIBE_CONFIGS, RT.TOPIC, "a")
    auth = authorizer(allow(RT.TOPIC, "a", "User:alice", Op.DESCRIBE), deny(RT.TOPIC, "a", "User:alice", Op.READ))
    assert auth.authorize("User:alice", "h", Op.DESCRIBE, RT.TOPIC, "a")


def test_hosts_principals_and_super_users():
    auth = authorizer(allow(RT.TOPIC, "a", "User:alice", Op.READ, host="10.0.0.1"), super_users=["User:admin"])
    assert auth.authorize("User:alice", "10.0.0.1", Op.READ, RT.TOPIC, "a")
    assert not auth.authorize("User:alice", "10.0.0.2", Op.READ, RT.TOPIC, "a")
    assert not auth.authorize("User:mallory", "10.0.0.1", Op.READ, RT.TOPIC, "a")
    assert auth.authorize("User:admin", "anywhere", Op.ALTER, RT.CLUSTER, CLUSTER_RESOURCE_NAME)


def test_authorized_operations_bitfield_kip_430():
    auth = authorizer(allow(RT.TOPIC, "a", "User:alice", Op.READ))
    bits = auth.authorized_operations("User:alice", "h", RT.TOPIC, "a")
    assert bits == (1 << Op.READ) | (1 << Op.DESCRIBE)


def test_authorize_any_for_idempotent_producers_without_idempotent_write():
    auth = authorizer(allow(RT.TOPIC, "a", "User:alice", Op.WRITE))
    assert auth.authorize_any("User:alice", "h", Op.WRITE, RT.TOPIC)
    assert not auth.authorize_any("User:bob", "h", Op.WRITE, RT.TOPIC)


def test_the_index_is_rebuilt_when_the_acl_set_changes():
    auth = authorizer()
    assert not auth.authorize("User:alice", "h", Op.READ, RT.TOPIC, "a")
    auth.update(acls(allow(RT.TOPIC, "a", "User:alice", Op.READ)))
    assert auth.authorize("User:alice", "h", Op.READ, RT.TOPIC, "a")


@pytest.mark.parametrize("binding, fragment", [
    (AclBinding(RT.ANY, "a", PatternType.LITERAL, "User:a", "*", Op.READ, Perm.ALLOW), "only valid in a filter"),
    (AclBinding(RT.TOPIC, "a", PatternType.MATCH, "User:a", "*", Op.READ, Perm.ALLOW), "only valid in a filter"),
    (AclBinding(RT.GROUP, "g", PatternType.LITERAL, "User:a", "*", Op.WRITE, Perm.ALLOW), "does not apply"),
    (AclBinding(RT.CLUSTER, "c", PatternType.LITERAL, "User:a", "*", Op.ALTER, Perm.ALLOW), "kafka-cluster"),
    (AclBinding(RT.TOPIC, "a", PatternType.LITERAL, "alice", "*", Op.READ, Perm.ALLOW), "Type:name"),
    (AclBinding(RT.TOPIC, "", PatternType.LITERAL, "User:a", "*", Op.READ, Perm.ALLOW), "must not be empty"),
    (AclBinding(RT.TOPIC, "a", PatternType.LITERAL, "User:a", "*", 99, Perm.ALLOW), "99"),
])
def test_invalid_bindings_are_refused_with_the_reason(binding, fragment):
    with pytest.raises(InvalidAclError) as info:
        binding.validate()
    assert fragment in str(info.value)


def test_filters_match_as_kafka_describe_and_delete_do():
    literal = AclBinding(RT.TOPIC, "orders-eu", PatternType.LITERAL, "User:a", "*", Op.READ, Perm.ALLOW)
    prefixed = AclBinding(RT.TOPIC, "orders-", PatternType.PREFIXED, "User:a", "*", Op.READ, Perm.ALLOW)
    assert AclFilter().matches(literal) and AclFilter().matches(prefixed)
    assert AclFilter(RT.TOPIC, "orders-eu", PatternType.MATCH).matches(prefixed)
    assert AclFilter(RT.TOPIC, "orders-eu", PatternType.MATCH).matches(literal)
    assert not AclFilter(RT.TOPIC, "orders-eu", PatternType.LITERAL).matches(prefixed)
    assert not AclFilter(RT.GROUP).matches(literal)
    assert not AclFilter(principal="User:b").matches(literal)
