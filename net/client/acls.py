"""ACL and SCRAM-user administration over a KafkaClient (what kafka-acls.sh and kafka-configs.sh --alter
--add-config SCRAM-... send): CreateAcls, DescribeAcls, DeleteAcls, AlterUserScramCredentials,
DescribeUserScramCredentials. Each raises KafkaError with the broker's code and message on failure."""

from __future__ import annotations

import os

from metadata.quota_control import describe_entity
from net.client.aio import KafkaClient
from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode, KafkaError
from security.acl import AclBinding, AclFilter
from security.sasl import SCRAM_ITERATIONS_DEFAULT, SCRAM_SALT_BYTES, ScramMechanism, salted_password


def new_scram_upsert(mechanism: ScramMechanism, password: str,
                     iterations: int = SCRAM_ITERATIONS_DEFAULT) -> tuple[bytes, bytes]:
    """(salt, SaltedPassword) for an AlterUserScramCredentials upsertion of `password` (a fresh random salt)."""
    salt = os.urandom(SCRAM_SALT_BYTES)
    return salt, salted_password(mechanism, password, salt, iterations)


def _check(code: int, message: str | None, what: str) -> None:
    if code != ErrorCode.NONE:
        raise KafkaError(f"{what}: {message or ErrorCode(code).name}", ErrorCode(code))


async def create_acls(client: KafkaClient, bindings: list[AclBinding]) -> None:
    request_class = messages.CreateAclsRequest
    request = request_class(creations=[request_class.AclCreation(
        resource_type=b.resource_type, resource_name=b.resource_name, resource_pattern_type=b.pattern_type,
        principal=b.principal, host=b.host, operation=b.operation, permission_type=b.permission_type)
        for b in bindings])
    response = await client._admin(ApiKey.CREATE_ACLS, request)
    for binding, result in zip(bindings, response.results):
        _check(result.error_code, result.error_message, f"cannot create {binding}")


async def describe_acls(client: KafkaClient, acl_filter: AclFilter) -> list[AclBinding]:
    request = messages.DescribeAclsRequest(
        resource_type_filter=acl_filter.resource_type, resource_name_filter=acl_filter.resource_name,
        pattern_type_filter=acl_filter.pattern_type, principal_filter=acl_filter.principal,
        host_filter=acl_filter.host, operation=acl_filter.operation, permission_type=acl_filter.permission_type)
    response = await client._request_any(ApiKey.DESCRIBE_ACLS, request)
    _check(response.error_code, response.error_message, "cannot describe ACLs")
    return [AclBinding(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
                       a.permission_type) for r in response.resources for a in r.acls]


async def delete_acls(client: KafkaClient, acl_filter: AclFilter) -> list[AclBinding]:
    request_class = messages.DeleteAclsRequest
    request = request_class(filters=[request_class.DeleteAclsFilter(
        resource_type_filter=acl_filter.resource_type, resource_name_filter=acl_filter.resource_name,
        pattern_type_filter=acl_filter.pattern_type, principal_filter=acl_filter.principal,
        host_filter=acl_filter.host, operation=acl_filter.operation, permission_type=acl_filter.permission_type)])
    response = await client._admin(ApiKey.DELETE_ACLS, request)
    result = response.filter_results[0]
    _check(result.error_code, result.error_message, "cannot delete ACLs")
    return [AclBinding(m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host, m.operation,
                       m.permission_type) for m in result.matching_acls]


async def upsert_scram_user(client: KafkaClient, name: str, password: str, mechanism: ScramMechanism,
                            iterations: int = SCRAM_ITERATIONS_DEFAULT) -> None:
    """Set the user's credential (salted here: the password never leaves this process)."""
    salt, salted = new_scram_upsert(mechanism, password, iterations)
    request_class = messages.AlterUserScramCredentialsRequest
    request = request_class(deletions=[], upsertions=[request_class.ScramCredentialUpsertion(
        name=name, mechanism=int(mechanism), iterations=iterations, salt=salt, salted_password=salted)])
    await _alter_scram(client, request)


async def delete_scram_user(client: KafkaClient, name: str, mechanism: ScramMechanism) -> None:
    request_class = messages.AlterUserScramCredentialsRequest
    request = request_class(upsertions=[], deletions=[request_class.ScramCredentialDeletion(
        name=name, mechanism=int(mechanism))])
    await _alter_scram(client, request)


async def _alter_scram(client: KafkaClient, request) -> None:
    response = await client._admin(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, request)
    for result in response.results:
        _check(result.error_code, result.error_message, f"user {result.user!r}")


async def describe_scram_users(client: KafkaClient, names: list[str] | None = None) -> dict[str, list[tuple[str, int]]]:
    """{user: [(mechanism name, iterations)]} for `names` (every user when None)."""
    request_class = messages.DescribeUserScramCredentialsRequest
    request = request_class(users=None if names is None else [request_class.UserName(name=n) for n in names])
    response = await client._request_any(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, request)
    _check(response.error_code, response.error_message, "cannot describe users")
    users = {}
    for result in response.results:
        _check(result.error_code, result.error_message, f"user {result.user!r}")
        users[result.user] = [(ScramMechanism(c.mechanism).mechanism_name, c.iterations) for c in result.credential_infos]
    return users


# ---- client quotas (kafka-configs.sh --entity-type users/clients, --add-config producer_byte_rate=...) --------

QuotaEntityKey = tuple[tuple[str, "str | None"], ...]  # ((entity type, name or None for the default), ...)


async def alter_client_quotas(client: KafkaClient, entity: QuotaEntityKey, set_values: dict[str, float],
                              remove: list[str] = (), validate_only: bool = False) -> None:
    """Set and remove quotas of one entity (AlterClientQuotas, sent to any broker, forwarded to the controller)."""
    request_class = messages.AlterClientQuotasRequest
    ops = [request_class.OpData(key=k, value=float(v), remove=False) for k, v in set_values.items()]
    ops += [request_class.OpData(key=k, value=0.0, remove=True) for k in remove]
    request = request_class(entries=[request_class.EntryData(
        entity=[request_class.EntityData(entity_type=t, entity_name=n) for t, n in entity], ops=ops)],
        validate_only=validate_only)
    response = await client._request_any(ApiKey.ALTER_CLIENT_QUOTAS, request)
    for entry in response.entries:
        _check(entry.error_code, entry.error_message, f"cannot alter the quotas of {describe_entity(entity)}")


async def describe_client_quotas(client: KafkaClient, components: list[tuple[str, int, "str | None"]] = (),
                                 strict: bool = False) -> list[tuple[QuotaEntityKey, dict[str, float]]]:
    """[(entity, {key: value})] of the entities the filter matches: components are (entity type, match type
    0 exact / 1 default / 2 any named, name)."""
    request_class = messages.DescribeClientQuotasRequest
    request = request_class(components=[request_class.ComponentData(entity_type=t, match_type=m, match=n)
                                        for t, m, n in components], strict=strict)
    response = await client._request_any(ApiKey.DESCRIBE_CLIENT_QUOTAS, request)
    _check(response.error_code, response.error_message, "cannot describe client quotas")
    return [(tuple((e.entity_type, e.entity_name) for e in entry.entity), {v.key: v.value for v in entry.values})
            for entry in response.entries or []]

