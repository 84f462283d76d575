"""The controller's ACL and SCRAM requests: validation, records, replay into the image, snapshots."""

import random

from metadata.controller import ControllerConfig, QuorumController
from metadata.image import MetadataDelta, Provenance, image_to_records, records_to_image
from metadata.requests import (
    AclEntry,
    AclFilterEntry,
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    DeleteAclsRequest,
    ScramDeletion,
    ScramUpsertion,
)
from partitions.errors import ErrorCode
from security.acl import AclOperation as Op, AclPermissionType as Perm, PatternType, ResourceType as RT
from net.client.acls import new_scram_upsert
from security.sasl import ScramMechanism, salted_password, scram_credential


def controller():
    return QuorumController(ControllerConfig(default_replication_factor=1), random.Random(3))


def commit(ctl, request, index=[0]):
    result = ctl.handle(request, 0)
    index[0] += 1
    ctl.replay_batch(result.records, Provenance(index[0], 1))
    return result


READ_A = AclEntry(RT.TOPIC, "a", PatternType.LITERAL, "User:alice", "*", Op.READ, Perm.ALLOW)


def test_create_acls_writes_one_record_per_new_binding_and_is_idempotent():
    ctl = controller()
    result = commit(ctl, CreateAclsRequest((READ_A, AclEntry(RT.GROUP, "g", PatternType.LITERAL, "User:alice", "*",
                                                             Op.READ, Perm.ALLOW))))
    assert [r.error_code for r in result.response.results] == [ErrorCode.NONE, ErrorCode.NONE]
    assert len(result.records) == 2 and len(ctl.image().acls.by_id) == 2
    again = commit(ctl, CreateAclsRequest((READ_A,)))
    assert again.records == [] and again.response.results[0].error_code == ErrorCode.NONE


def test_invalid_acls_are_refused_one_by_one():
    bad = AclEntry(RT.GROUP, "g", PatternType.LITERAL, "User:alice", "*", Op.WRITE, Perm.ALLOW)
    result = commit(controller(), CreateAclsRequest((bad, READ_A)))
    assert [r.error_code for r in result.response.results] == [ErrorCode.INVALID_REQUEST, ErrorCode.NONE]
    assert "does not apply" in result.response.results[0].message and len(result.records) == 1


def test_delete_acls_by_filter_returns_what_matched():
    ctl = controller()
    commit(ctl, CreateAclsRequest((READ_A,)))
    everything = AclFilterEntry(RT.ANY, None, PatternType.ANY, None, None, Op.ANY, Perm.ANY)
    other = AclFilterEntry(RT.TOPIC, "b", PatternType.ANY, None, None, Op.ANY, Perm.ANY)
    result = commit(ctl, DeleteAclsRequest((other, everything)))
    assert result.response.results[0].matching == () and result.response.results[1].matching == (READ_A,)
    assert ctl.image().acls.by_id == {}


def upsert(name, mechanism=ScramMechanism.SCRAM_SHA_512, iterations=4096, password="pw"):
    salt, salted = new_scram_upsert(mechanism, password, iterations)
    return ScramUpsertion(name, mechanism, iterations, salt, salted)


def test_scram_credentials_are_stored_salted_and_checked_as_kafka_checks():
    ctl = controller()
    result = commit(ctl, AlterUserScramCredentialsRequest(upsertions=(upsert("alice"),)))
    assert result.response.results[0].error_code == ErrorCode.NONE
    record = ctl.image().scram.credentials[("alice", ScramMechanism.SCRAM_SHA_512)]
    expected = scram_credential(ScramMechanism.SCRAM_SHA_512, record.salt,
                                salted_password(ScramMechanism.SCRAM_SHA_512, "pw", record.salt, 4096), 4096)
    assert (record.stored_key, record.server_key) == (expected.stored_key, expected.server_key)
    assert b"pw" not in record.stored_key + record.server_key + record.salt
    failures = commit(ctl, AlterUserScramCredentialsRequest(
        deletions=(ScramDeletion("nobody", ScramMechanism.SCRAM_SHA_256),),
        upsertions=(upsert("bob", iterations=100), ScramUpsertion("carol", 9, 4096, b"salt", b"salted"), upsert("dave"), upsert("dave"),
                    upsert(""))))
    codes = {r.user: r.error_code for r in failures.response.results}
    assert codes == {"nobody": ErrorCode.RESOURCE_NOT_FOUND, "bob": ErrorCode.UNACCEPTABLE_CREDENTIAL,
                     "carol": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "dave": ErrorCode.DUPLICATE_RESOURCE,
                     "": ErrorCode.UNACCEPTABLE_CREDENTIAL}
    assert failures.records == []
    deleted = commit(ctl, AlterUserScramCredentialsRequest(
        deletions=(ScramDeletion("alice", ScramMechanism.SCRAM_SHA_512),)))
    assert deleted.response.results[0].error_code == ErrorCode.NONE and ctl.image().scram.credentials == {}


def test_acls_and_credentials_survive_a_snapshot():
    ctl = controller()
    commit(ctl, CreateAclsRequest((READ_A,)))
    commit(ctl, AlterUserScramCredentialsRequest(upsertions=(upsert("alice"),)))
    image = ctl.image()
    restored = records_to_image(image_to_records(image), image.provenance)
    assert restored == image
    delta = MetadataDelta(restored)
    assert delta.acls() == dict(image.acls.by_id)
