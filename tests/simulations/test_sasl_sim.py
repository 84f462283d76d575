"""The sasl workload: the whole-cluster simulation with every client on a SASL listener whose sessions expire
(simulations/sasl_sim.py).

Each planted bug (the gate serving an expired session; a re-authentication that changes the principal) fails
its checker at a named seed (the first failing seed of `flotilla simulate --workload sasl --seeds 40 --duration
60 --bugs ...`), replays to the same trace, and passes with the bug off; the checkers themselves are shown to
fail on hand-fed frames."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from broker.sasl_gate import SaslOutcome
from net.protocol import messages
from net.protocol.codec import ApiKey, RequestHeader, encode_request, encode_response
from simulations.faults import DEFAULT_FAULTS
from simulations.run import run_one, sweep
from simulations.sasl_sim import SaslCheckers
from security.session import Session
from tests.simulations.workloads import assert_teeth, failed_checkers, workload_config

EXPIRED_SESSION_SERVED_SEED = 1
REAUTH_PRINCIPAL_CHANGE_SEED = 1


def test_a_fault_free_run_authenticates_reauthenticates_and_passes_every_checker():
    result = run_one(workload_config("sasl", 1, 30.0))
    assert result.ok, failed_checkers(result)
    assert {"sessions_expire", "principal_kept"} <= {v.name for v in result.checkers}
    stats = result.stats
    # Sessions last 2 s: the clients that re-authenticate do so many times on the same connections, the old
    # producer is closed at the end of each session and authenticates anew, the impostor is refused each time.
    assert stats["sasl_all_reauthenticated"] >= 10 and stats["sasl_reader_reauthenticated"] >= 10
    assert stats["sasl_one_reauthenticated"] == 0 and stats["sasl_one_authenticated"] >= 10
    assert stats["sasl_mallory_reauthenticated"] == 0 and stats["sasl_mallory_refused"] >= 5
    assert stats["acked_all"] > 0 and stats["acked_one"] > 0


def _process(now_ms: int) -> SimpleNamespace:
    return SimpleNamespace(node_id=1, incarnation=1, sim=SimpleNamespace(loop=SimpleNamespace(now_ms=now_ms)))


def _authenticated(checkers: SaslCheckers, now_ms: int, user: str, lifetime_ms: int = 2000) -> None:
    header = RequestHeader(ApiKey.SASL_AUTHENTICATE, 1, 1, "c")
    frame = encode_request(header, messages.SaslAuthenticateRequest(auth_bytes=f"\x00{user}\x00pw".encode()))
    reply = encode_response(header, messages.SaslAuthenticateResponse(
        error_code=0, error_message=None, auth_bytes=b"", session_lifetime_ms=lifetime_ms))
    checkers.observe_sasl(_process(now_ms), 7, memoryview(frame)[4:], SaslOutcome(reply), Session(
        "SASL_PLAINTEXT", "SASL_PLAINTEXT", "h", f"User:{user}"))


def _served(checkers: SaslCheckers, now_ms: int, principal: str) -> None:
    frame = encode_request(RequestHeader(ApiKey.METADATA, 8, 2, "c"), messages.MetadataRequest(topics=None))
    checkers.observe_sasl(_process(now_ms), 7, memoryview(frame)[4:], None,
                          Session("SASL_PLAINTEXT", "SASL_PLAINTEXT", "h", principal))


def test_sessions_expire_allows_renewed_sessions_and_catches_a_request_after_the_end():
    checkers = SaslCheckers()
    _authenticated(checkers, 1000, "all")
    _served(checkers, 2999, "User:all")
    _authenticated(checkers, 2900, "all")  # renewed: now ends at 4900
    _served(checkers, 4000, "User:all")
    assert not checkers.violations
    _served(checkers, 4900, "User:all")
    assert "0 ms after its session ended" in checkers.violations["sessions_expire"]


def test_principal_kept_catches_a_connection_served_as_someone_else():
    checkers = SaslCheckers()
    _authenticated(checkers, 1000, "mallory")
    _served(checkers, 1500, "User:mallory")
    assert not checkers.violations
    _authenticated(checkers, 2000, "admin")  # a re-authentication answered as a success...
    _served(checkers, 2100, "User:admin")  # ... and the connection served as admin
    assert "as User:admin, which authenticated as User:mallory" in checkers.violations["principal_kept"]


@pytest.mark.slow
def test_expired_session_served_fails_sessions_expire_at_its_known_seed():
    assert_teeth("sasl", "expired_session_served", EXPIRED_SESSION_SERVED_SEED, 60.0, {"sessions_expire"})


@pytest.mark.slow
def test_reauth_principal_change_fails_principal_kept_at_its_known_seed():
    assert_teeth("sasl", "reauth_principal_change", REAUTH_PRINCIPAL_CHANGE_SEED, 60.0, {"principal_kept"})


@pytest.mark.slow
def test_sasl_sweep_with_every_fix_in_place_finds_no_failure():
    summary = sweep(workload_config("sasl", 1, 30.0, DEFAULT_FAULTS), list(range(1, 21)), jobs=2)
    assert summary.runs == 20 and not summary.failed_seeds, summary.format()
