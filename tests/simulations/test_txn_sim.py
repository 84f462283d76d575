"""The transactions workload: the whole-cluster simulation with exactly-once pipelines (simulations/txn_sim.py).

Its checkers are shown to fail on hand-fed violations; each planted bug fails a transaction checker at a named
seed (the first failing seed of `flotilla simulate --workload transactions --seeds 300 --duration 20
--bugs <BUG>` under the default fault mix), replays to the same trace, and passes with the bug off."""

from __future__ import annotations

import pytest

from simulations.faults import DEFAULT_FAULTS
from tests.simulations.workloads import assert_sweep_passes, assert_teeth, failed_checkers, workload_config
from simulations.run import RunConfig, run_one
from simulations.txn_checkers import TxnCheckers, parse_output

TEETH_DURATION_S = 20.0
# lso_ignores_open_txn: the reader reads an open transaction's records, which its abort then discards.
LSO_IGNORES_OPEN_TXN_SEED = 1
# txn_offsets_visible_early: an aborted transaction's input offsets become the group's anyway; its inputs are
# never processed again, so their outputs are missing.
TXN_OFFSETS_VISIBLE_EARLY_SEED = 1
# markers_before_prepare_committed: the coordinator's node is killed (with the pipeline) after its COMMIT marker
# reached another leader but before its PrepareCommit record was replicated; the next coordinator aborts the
# transaction, so one output partition committed it and the other aborted it. (Seed 29 until the pipelines
# became a per-seed mix of transaction versions 1 and 2, which changed every run; 61 until they started their
# next transaction as soon as EndTxn is answered; 3 until a starting node held its first Metadata requests, after
# which 128 is the first seed to catch it.)
MARKERS_BEFORE_PREPARE_COMMITTED_SEED = 128
# end_txn_retry_as_new_txn: a transaction version 2 pipeline's EndTxn(commit) is retried with the pre-bump epoch
# (its coordinator moved); the coordinator answers PRODUCER_FENCED instead of success, so the pipeline counts as
# failed a transaction that committed (KIP-890 part 2's retry rule, Kafka's TransactionCoordinator
# endTxnEpochBumped). (Seed 2 until the pipelines started their next transaction as soon as EndTxn is answered;
# 4 until a transaction version 1 TxnOffsetCommit was verified with the transaction coordinator; 22 until
# a starting node held its first Metadata requests; 23 until the nodes answered each connection in request order.)
END_TXN_RETRY_AS_NEW_TXN_SEED = 2
# complete_before_markers_written: the transaction is completed while its markers are still in flight; one that
# fails is never retried, so a committed transaction is committed on one output partition only (seed 4 fails
# first, on liveness: a TxnOffsetCommit whose marker was lost keeps the group's offsets unstable forever).
COMPLETE_BEFORE_MARKERS_WRITTEN_SEED = 29
# poll_ignores_changes: the coordinator runtimes are told nothing changed, so every answer held for the high
# watermark leaves at its write timeout as COORDINATOR_NOT_AVAILABLE: no pipeline ever commits (liveness).
POLL_IGNORES_CHANGES_SEED = 1
# end_txn_behind_parked_add: a pipeline aborts a transaction at once (AddPartitionsToTxn and EndTxn(abort) leave
# together, as librdkafka's abort_transaction sends them) while the markers of its commit before are written: its
# add parks behind them and the EndTxn, decided against the transaction being completed, is refused
# INVALID_TXN_STATE (12 of seeds 1-60 at 20 s; 5 of 1-16 at 60 s).
END_TXN_BEHIND_PARKED_ADD_SEED = 11
TXN_CHECKERS = {"no_aborted_read", "no_torn_transaction", "reads_below_lso", "lso_monotonic", "exactly_once",
                "fenced_never_commits", "added_txn_ends"}


def _config(seed: int, duration_s: float = 20.0, faults: str = "none", bugs: frozenset[str] = frozenset()) -> RunConfig:
    return workload_config("transactions", seed, duration_s, faults, bugs)


def test_a_fault_free_run_commits_transactions_and_passes_every_checker():
    result = run_one(_config(seed=2))
    assert result.ok, failed_checkers(result)
    assert result.stats["txn_committed"] > 10 and result.stats["txn_aborted"] > 0
    assert result.stats["txn_reader_records"] > 0
    assert result.stats["txn_tv2_pipelines"] == 2  # seed 2: both pipelines on transaction version 2


def test_seeds_mix_transaction_version_1_and_2_pipelines():  # KIP-890 part 2: both protocols on one cluster
    versions = {seed: run_one(_config(seed=seed, duration_s=2.0)).stats["txn_tv2_pipelines"] for seed in (1, 2, 3)}
    assert versions == {1: 1, 2: 2, 3: 1}


def _value(key: str, partition: int, offset: int) -> bytes:
    return f"{key}|{partition}:{offset}".encode()


def test_no_aborted_read_fails_on_reading_an_aborted_transaction_or_one_not_committed_at_the_end():
    checkers = TxnCheckers()
    checkers.observe_txn_aborted("p|0|1")
    checkers.observe_output_record(("out-a", 0), 5, _value("p|0|1", 0, 3), 10)
    assert "aborted" in checkers.violations["no_aborted_read"]
    later = TxnCheckers()
    later.observe_output_record(("out-a", 0), 5, _value("p|0|2", 0, 3), 10)
    later.check_final_transactions({("out-a", 0): []}, {}, ("out-a",))
    assert "not committed at the end" in later.violations["no_aborted_read"]


def test_reads_below_lso_and_lso_monotonic_fail_on_their_violations():
    checkers = TxnCheckers()
    checkers.observe_output_record(("out-a", 0), 10, _value("p|0|1", 0, 0), 10)
    assert "at or above the last stable offset 10" in checkers.violations["reads_below_lso"]
    checkers.observe_last_stable_offset(1, 1, ("out-a", 0), 4, 20)
    checkers.observe_last_stable_offset(1, 2, ("out-a", 0), 4, 5)  # a restarted process: allowed
    assert "lso_monotonic" not in checkers.violations
    checkers.observe_last_stable_offset(1, 2, ("out-a", 0), 4, 3)
    assert "from 5 back to 3" in checkers.violations["lso_monotonic"]


def test_torn_exactly_once_and_fenced_checks_on_a_final_view():
    checkers = TxnCheckers()
    checkers.observe_txn_begin("p|0|1", 0, [0, 1], {("out-a", 0): 2, ("out-b", 0): 2})
    checkers.observe_txn_begin("p|0|2", 0, [2], {("out-a", 0): 1, ("out-b", 0): 1})
    checkers.observe_txn_fenced("p|0|2")
    view = {("out-a", 0): [(0, _value("p|0|1", 0, 0)), (1, _value("p|0|1", 0, 1)), (3, _value("p|0|2", 0, 2))],
            ("out-b", 0): [(0, _value("p|0|1", 0, 0))]}
    checkers.check_final_transactions(view, {0: 3}, ("out-a", "out-b"))
    assert "p|0|1" in checkers.violations["no_torn_transaction"]
    assert "p|0|2" in checkers.violations["fenced_never_commits"]
    assert checkers.violations["exactly_once"].startswith("out-b")  # out-a holds inputs 0-2, out-b only 0
    assert "missing [1, 2]" in checkers.violations["exactly_once"]
    assert parse_output(_value("pipe-0|3|7", 2, 41)) == ("pipe-0|3|7", 2, 41)


def _assert_teeth(bug: str, seed: int) -> None:
    assert_teeth("transactions", bug, seed, TEETH_DURATION_S, TXN_CHECKERS)


@pytest.mark.slow
def test_lso_ignores_open_txn_fails_a_transaction_checker_at_its_known_seed():
    _assert_teeth("lso_ignores_open_txn", LSO_IGNORES_OPEN_TXN_SEED)


@pytest.mark.slow
def test_txn_offsets_visible_early_fails_a_transaction_checker_at_its_known_seed():
    _assert_teeth("txn_offsets_visible_early", TXN_OFFSETS_VISIBLE_EARLY_SEED)


@pytest.mark.slow
def test_markers_before_prepare_committed_fails_a_transaction_checker_at_its_known_seed():
    _assert_teeth("markers_before_prepare_committed", MARKERS_BEFORE_PREPARE_COMMITTED_SEED)


@pytest.mark.slow
def test_end_txn_retry_as_new_txn_fails_a_transaction_checker_at_its_known_seed():
    _assert_teeth("end_txn_retry_as_new_txn", END_TXN_RETRY_AS_NEW_TXN_SEED)


@pytest.mark.slow
def test_poll_ignores_changes_fails_liveness_at_its_known_seed():
    # A poll reads only the coordinator partitions that moved: one that is never told stops the pipelines.
    assert_teeth("transactions", "poll_ignores_changes", POLL_IGNORES_CHANGES_SEED, TEETH_DURATION_S, {"liveness"})


@pytest.mark.slow
def test_end_txn_behind_parked_add_fails_a_transaction_checker_at_its_known_seed():
    _assert_teeth("end_txn_behind_parked_add", END_TXN_BEHIND_PARKED_ADD_SEED)


def test_added_txn_ends_fails_on_an_end_txn_refused_after_its_add():
    checkers = TxnCheckers()
    checkers.observe_end_txn_refused("p|0|3", False)
    assert "EndTxn(abort) of transaction p|0|3" in checkers.violations["added_txn_ends"]


@pytest.mark.slow
def test_a_broker_fenced_during_a_long_partition_is_not_a_live_broker_lost():
    # Seed 2016 partitions nodes 2 and 3 (the quorum) from node 1 for 4.8 s: the controller fences broker 1,
    # as it must, 4.2 s after the partition's last traced change. live_brokers_kept took that for a fence no fault
    # explained until it counted a partition still in force as a disturbance of every node.
    result = run_one(workload_config("transactions", 2016, 60.0, DEFAULT_FAULTS, frozenset()))
    assert result.ok, failed_checkers(result)


def test_transactions_sweep_with_every_fix_in_place_finds_no_failure():
    assert_sweep_passes("transactions", 20, 20.0)


@pytest.mark.slow
def test_complete_before_markers_written_fails_a_transaction_checker_at_its_known_seed():
    _assert_teeth("complete_before_markers_written", COMPLETE_BEFORE_MARKERS_WRITTEN_SEED)
