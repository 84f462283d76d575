"""The controller's ACL and SCRAM-credential requests (Kafka's AclControlManager and ScramControlManager).

Pure functions of the current image: each validates a request and returns the records to commit and the
response, as the rest of the QuorumController does. ACL ids are derived from the controller's seeded digest
(deterministic, so the simulator reproduces them). Credentials arrive as Kafka's AlterUserScramCredentials
carries them (salt, SaltedPassword, iterations) and are stored as salt, StoredKey and ServerKey.
"""

from __future__ import annotations

from typing import Callable

from metadata.image import MetadataImage
from metadata.records import (
    AccessControlEntryRecord,
    MetadataRecord,
    RemoveAccessControlEntryRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from metadata.requests import (
    AclEntry,
    AclResult,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsFilterResult,
    DeleteAclsRequest,
    DeleteAclsResponse,
    UserResult,
)
from partitions.errors import ErrorCode
from security.acl import AclBinding, AclFilter, InvalidAclError, binding_of
from security.sasl import SCRAM_ITERATIONS_MAX, SCRAM_ITERATIONS_MIN, ScramMechanism, scram_credential

acls_max = 100_000
salt_bytes_max = 1024


def create_acls(image: MetadataImage, request: CreateAclsRequest,
                new_id: Callable[[bytes], bytes]) -> tuple[list[MetadataRecord], CreateAclsResponse]:
    existing = {binding_of(entry) for entry in image.acls.by_id.values()}
    taken = set(image.acls.by_id)
    records: list[MetadataRecord] = []
    results = []
    for creation in request.creations:
        binding = _binding(creation)
        try:
            binding.validate()
        except InvalidAclError as error:
            results.append(AclResult(ErrorCode.INVALID_REQUEST, str(error)))
            continue
        if binding in existing:  # Kafka answers success for a binding that already exists
            results.append(AclResult(ErrorCode.NONE))
            continue
        if len(existing) >= acls_max:
            results.append(AclResult(ErrorCode.INVALID_REQUEST, f"the cluster holds {acls_max} ACLs, the maximum"))
            continue
        acl_id = new_id(repr(binding).encode())
        assert acl_id not in taken, f"ACL id collision {acl_id.hex()}"
        taken.add(acl_id)
        existing.add(binding)
        records.append(AccessControlEntryRecord(acl_id, *_fields(binding)))
        results.append(AclResult(ErrorCode.NONE))
    return records, CreateAclsResponse(tuple(results))


def delete_acls(image: MetadataImage, request: DeleteAclsRequest) -> tuple[list[MetadataRecord], DeleteAclsResponse]:
    removed: set[bytes] = set()
    records: list[MetadataRecord] = []
    results = []
    for entry in request.filters:
        acl_filter = AclFilter(entry.resource_type, entry.resource_name, entry.pattern_type, entry.principal,
                               entry.host, entry.operation, entry.permission_type)
        try:
            acl_filter.validate()
        except InvalidAclError as error:
            results.append(DeleteAclsFilterResult(ErrorCode.INVALID_REQUEST, str(error)))
            continue
        matching = []
        for acl_id, record in image.acls.by_id.items():
            binding = binding_of(record)
            if acl_filter.matches(binding):
                matching.append(AclEntry(*_fields(binding)))
                if acl_id not in removed:
                    removed.add(acl_id)
                    records.append(RemoveAccessControlEntryRecord(acl_id))
        results.append(DeleteAclsFilterResult(ErrorCode.NONE, "", tuple(matching)))
    return records, DeleteAclsResponse(tuple(results))


def alter_scram_credentials(
    image: MetadataImage, request: AlterUserScramCredentialsRequest
) -> tuple[list[MetadataRecord], AlterUserScramCredentialsResponse]:
    """Kafka's rules: a user named twice for one mechanism, an unknown mechanism, iterations outside
    4096..16384, an empty name or salt, or deleting what does not exist fail that user's changes (all of them)."""
    errors: dict[str, tuple[int, str]] = {}
    seen: set[tuple[str, int]] = set()
    changes = [(d.name, d.mechanism, None) for d in request.deletions]
    changes += [(u.name, u.mechanism, u) for u in request.upsertions]
    for name, mechanism, upsertion in changes:
        error = _scram_change_error(image, name, mechanism, upsertion, seen)
        seen.add((name, mechanism))
        if error is not None and name not in errors:
            errors[name] = error
    records: list[MetadataRecord] = []
    for name, mechanism, upsertion in changes:
        if name in errors:
            continue
        if upsertion is None:
            records.append(RemoveUserScramCredentialRecord(name, mechanism))
        else:
            credential = scram_credential(ScramMechanism(mechanism), upsertion.salt, upsertion.salted_password,
                                          upsertion.iterations)
            records.append(UserScramCredentialRecord(name, mechanism, credential.salt, credential.stored_key,
                                                     credential.server_key, credential.iterations))
    users = list(dict.fromkeys(name for name, _, _ in changes))
    results = tuple(UserResult(user, *errors.get(user, (ErrorCode.NONE, ""))) for user in users)
    return records, AlterUserScramCredentialsResponse(results)


def _scram_change_error(image: MetadataImage, name: str, mechanism: int, upsertion, seen) -> tuple[int, str] | None:
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if (name, mechanism) in seen:
        return ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"
    if mechanism not in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism {mechanism}"
    if upsertion is None:
        if (name, mechanism) not in image.scram.credentials:
            return ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
        return None
    if not SCRAM_ITERATIONS_MIN <= upsertion.iterations <= SCRAM_ITERATIONS_MAX:
        return (ErrorCode.UNACCEPTABLE_CREDENTIAL,
                f"Iterations {upsertion.iterations} not in {SCRAM_ITERATIONS_MIN}..{SCRAM_ITERATIONS_MAX}")
    if not upsertion.salt or len(upsertion.salt) > salt_bytes_max or not upsertion.salted_password:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
    return None


def _binding(entry: AclEntry) -> AclBinding:
    return AclBinding(entry.resource_type, entry.resource_name, entry.pattern_type, entry.principal, entry.host,
                      entry.operation, entry.permission_type)


def _fields(binding: AclBinding) -> tuple:
    return (binding.resource_type, binding.resource_name, binding.pattern_type, binding.principal, binding.host,
            binding.operation, binding.permission_type)
