"""The acls workload (simulations/acl_sim.py): the sasl workload with the authorizer on while an administrator
grants and revokes ACLs.

Each planted bug (an index kept when ACLs are deleted; the first matching binding deciding) fails
`acls_follow_image` at a named seed, and a forwarded write answered before the broker's image has it fails
`acls_read_your_writes` (the first failing seed of `flotilla simulate --workload acls --seeds 40
--duration 60 --bugs ...`), replays to the same trace, and passes with the bug off. The checker's plain reading
of Kafka's rules agrees with the node's authorizer on random ACL sets, so what it flags is the node's fault."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from security.acl import AclBinding, AclOperation, AclPermissionType, Authorizer, AuthorizerSettings, PatternType
from simulations.acl_sim import AclCheckers, reference_decision
from simulations.run import run_one
from tests.simulations.workloads import assert_sweep_passes, assert_teeth, failed_checkers, workload_config

INDEX_KEPT_ON_DELETE_SEED = 1
ALLOW_BEFORE_DENY_SEED = 1
ANSWER_BEFORE_IMAGE_SEED = 37  # (1 until the nodes answered each connection in request order)
TOPIC = 2
OPERATIONS = [AclOperation.ALL, AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.DELETE,
              AclOperation.ALTER, AclOperation.ALTER_CONFIGS, AclOperation.DESCRIBE_CONFIGS]

_BINDING = st.builds(
    AclBinding, st.just(TOPIC), st.sampled_from(["sim", "si", "s", "*", "other"]),
    st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]), st.sampled_from(["User:one", "User:two", "User:*"]),
    st.sampled_from(["*", "h1"]), st.sampled_from(OPERATIONS),
    st.sampled_from([AclPermissionType.ALLOW, AclPermissionType.DENY]))


@settings(max_examples=300, deadline=None)
@given(bindings=st.lists(_BINDING, max_size=6), principal=st.sampled_from(["User:one", "User:two"]),
       host=st.sampled_from(["h1", "h2"]), operation=st.sampled_from(OPERATIONS[1:]),
       name=st.sampled_from(["sim", "simple", "other"]), allow_if_none=st.booleans())
def test_the_checkers_reading_of_kafkas_rules_agrees_with_the_authorizer(bindings, principal, host, operation, name,
                                                                         allow_if_none):
    authorizer = Authorizer(AuthorizerSettings(allow_everyone_if_no_acl_found=allow_if_none))
    authorizer.update({index: binding for index, binding in enumerate(bindings)})
    assert authorizer.authorize(principal, host, operation, TOPIC, name) == reference_decision(
        bindings, principal, host, operation, TOPIC, name, allow_if_none)


def test_acls_follow_image_catches_a_decision_its_image_does_not_give():
    checkers = AclCheckers()
    deny = AclBinding(TOPIC, "sim", PatternType.LITERAL, "User:one", "*", AclOperation.WRITE, AclPermissionType.DENY)
    image = SimpleNamespace(acls=SimpleNamespace(by_id={b"1": deny}))
    checkers.observe_authorization(1, image, "User:one", "h", AclOperation.WRITE, TOPIC, "sim", False)
    checkers.observe_authorization(1, image, "User:admin", "h", AclOperation.WRITE, TOPIC, "sim", True)  # super user
    assert not checkers.violations and checkers.decisions == 1
    checkers.observe_authorization(2, image, "User:one", "h", AclOperation.WRITE, TOPIC, "sim", True)
    assert "node 2 allowed User:one WRITE on TOPIC 'sim'" in checkers.violations["acls_follow_image"]


def test_a_fault_free_run_grants_revokes_and_passes_every_checker():
    result = run_one(workload_config("acls", 1, 30.0))
    assert result.ok, failed_checkers(result)
    assert "acls_follow_image" in {v.name for v in result.checkers}
    stats = result.stats
    # The DENY came and went every 2 s: "one" was refused some of its writes, the others none
    assert stats["acl_flips"] >= 10 and stats["acl_refusals"] > 0 and stats["acl_decisions"] > stats["acl_refusals"]
    assert stats["failed_one"] > 0 and stats["acked_one"] > 0 and stats["failed_all"] == 0
    assert stats["acl_reads_checked"] >= 10  # each flip read back from the broker that answered it


def test_acls_read_your_writes_catches_a_read_that_misses_the_write_just_answered():
    checkers = AclCheckers()
    checkers.observe_read_after_write(2, "denied", True)
    checkers.observe_read_after_write(2, "revoked_deny", False)
    assert not checkers.violations and checkers.reads_checked == 2
    checkers.observe_read_after_write(3, "revoked_deny", True)
    assert "node 3 answered the DENY revoked_deny" in checkers.violations["acls_read_your_writes"]


@pytest.mark.slow
def test_acl_index_kept_on_delete_fails_acls_follow_image_at_its_known_seed():
    assert_teeth("acls", "acl_index_kept_on_delete", INDEX_KEPT_ON_DELETE_SEED, 60.0, {"acls_follow_image"})


@pytest.mark.slow
def test_acl_allow_before_deny_fails_acls_follow_image_at_its_known_seed():
    assert_teeth("acls", "acl_allow_before_deny", ALLOW_BEFORE_DENY_SEED, 60.0, {"acls_follow_image"})


@pytest.mark.slow
def test_answer_before_image_fails_acls_read_your_writes_at_its_known_seed():
    assert_teeth("acls", "answer_before_image", ANSWER_BEFORE_IMAGE_SEED, 60.0, {"acls_read_your_writes"})


@pytest.mark.slow
def test_acls_sweep_with_every_fix_in_place_finds_no_failure():
    assert_sweep_passes("acls", 20, 30.0)
