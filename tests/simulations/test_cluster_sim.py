"""The whole-cluster simulation: determinism, checkers that can fail, and runs that must pass.

Runs here are short (a few simulated seconds, about a tenth of that in wall time); whole runs and sweeps are
marked slow.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from metadata.records import BrokerRegistrationChangeRecord, encode_record
from partitions.records import build_batch
from simulations import cluster_sim
from simulations.cluster_checkers import BatchSummary, ClusterCheckers, ReplicaLog
from simulations.faults import DEFAULT_FAULTS
from simulations.run import RunConfig, sweep
from tests.simulations.workloads import run_all, session_pool

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUIET_SHAPE = cluster_sim.ClusterShape(records_per_s=200, keyed=True, read_corruption_probability=0.0)


def _config(seed: int, duration_s: float = 4.0, faults: str = "none", bugs: frozenset[str] = frozenset()) -> RunConfig:
    return RunConfig(seed=seed, duration_s=duration_s, faults=faults, workload="cluster", bugs_live=bugs)


def _failed(result) -> list[str]:
    return [verdict.name for verdict in result.checkers if not verdict.ok]


# --- checkers on hand-made observations (each must be able to fail) -----------------------------------


def test_acked_record_read_with_another_value_fails_acked_not_lost():
    checkers = ClusterCheckers()
    checkers.observe_ack(("t", 0), 5, b"a")
    checkers.observe_consumed(("t", 0), 0, b"x", 10)
    assert "acked_not_lost" not in checkers.violations
    checkers.consumer_next_offset[("t", 0)] = 5
    checkers.observe_consumed(("t", 0), 5, b"b", 10)
    assert "acked_not_lost" in checkers.violations


def test_read_at_or_above_high_watermark_fails_reads_committed():
    checkers = ClusterCheckers()
    checkers.observe_consumed(("t", 0), 0, b"a", 1)
    assert not checkers.violations
    checkers.observe_consumed(("t", 0), 1, b"b", 1)
    assert "reads_committed" in checkers.violations


def test_consumer_gap_fails_offsets_dense():
    checkers = ClusterCheckers()
    checkers.observe_consumed(("t", 0), 0, b"a", 5)
    checkers.observe_consumed(("t", 0), 2, b"c", 5)
    assert "offsets_dense" in checkers.violations


def test_leader_high_watermark_moving_back_fails_hw_monotonic():
    checkers = ClusterCheckers()
    checkers.observe_replica(1, 1, ("t", 0), 10, True, 3)
    checkers.observe_replica(1, 2, ("t", 0), 4, True, 3)  # a new process lifetime may start lower
    assert not checkers.violations
    checkers.observe_replica(1, 2, ("t", 0), 3, True, 3)
    assert "hw_monotonic" in checkers.violations


def test_two_leaders_in_one_epoch_fail_one_leader_per_epoch():
    checkers = ClusterCheckers()
    checkers.observe_replica(1, 1, ("t", 0), 0, True, 3)
    checkers.observe_replica(2, 1, ("t", 0), 0, True, 4)
    assert not checkers.violations
    checkers.observe_replica(2, 1, ("t", 0), 0, True, 3)
    assert "one_leader_per_epoch" in checkers.violations


def test_two_raft_leaders_in_one_term_and_diverging_metadata_fail():
    checkers = ClusterCheckers()
    checkers.observe_raft_leader(1, 5)
    checkers.observe_raft_leader(2, 5)
    checkers.observe_metadata(1, 7, [b"x"])
    checkers.observe_metadata(2, 7, [b"y"])
    assert {"one_raft_leader_per_term", "metadata_identical"} <= set(checkers.violations)


def test_a_fence_no_fault_explains_fails_live_brokers_kept_at_its_first_replay_only():
    checkers = ClusterCheckers()
    asked = []

    def unexplained(broker_id, broker_epoch):
        asked.append((broker_id, broker_epoch))
        return "no fault touched it" if broker_id == 2 else None

    checkers.unexplained_fence = unexplained
    fence = [encode_record(BrokerRegistrationChangeRecord(1, 5, fenced=True))]
    checkers.observe_metadata(1, 10, fence)
    checkers.observe_metadata(2, 11, [encode_record(BrokerRegistrationChangeRecord(2, 6, fenced=False))])
    assert "live_brokers_kept" not in checkers.violations and asked == [(1, 5)]  # explained; an unfence is none
    checkers.observe_metadata(1, 12, [encode_record(BrokerRegistrationChangeRecord(2, 6, fenced=True))])
    checkers.observe_metadata(2, 12, [encode_record(BrokerRegistrationChangeRecord(2, 6, fenced=True))])
    assert asked == [(1, 5), (2, 6)]  # the entry's second replay (another node) is not the fence again
    assert "broker 2 (epoch 6) fenced at Raft index 12: no fault touched it" in checkers.violations["live_brokers_kept"]


def test_replicas_differing_below_high_watermark_fail_replicas_identical():
    batch_a = BatchSummary(0, 1, 0, 111)
    batch_b = BatchSummary(0, 1, 1, 222)
    checkers = ClusterCheckers()
    checkers.observe_ack(("t", 0), 0, b"v")
    checkers.check_final_logs({("t", 0): [
        ReplicaLog(1, 0, 2, 2, [batch_a], {0: b"v", 1: b"w"}),
        ReplicaLog(2, 0, 2, 2, [batch_b], {0: b"v", 1: b"w"}),
    ]})
    assert set(checkers.violations) == {"replicas_identical"}


def test_acked_record_missing_from_converged_log_fails_acked_not_lost():
    checkers = ClusterCheckers()
    checkers.observe_ack(("t", 0), 1, b"w")
    checkers.check_final_logs({("t", 0): [ReplicaLog(1, 0, 1, 1, [BatchSummary(0, 0, 0, 1)], {0: b"v"})]})
    assert "acked_not_lost" in checkers.violations


def test_consumer_refuses_a_batch_with_a_flipped_byte():
    from simulations.kafka_clients import SimConsumer

    seen = []

    class Host:
        loop = cluster_sim.EventLoop(1)
        node_ids = [1]

        def trace(self, *fields):
            pass

    consumer = SimConsumer(Host(), 109, "reader", "t", 1, lambda *args: seen.append(args))
    batch = bytearray(build_batch([(None, b"value")]))
    batch[-1] ^= 0x01
    with pytest.raises(Exception):
        consumer._consume(0, bytes(batch), 1)
    assert not seen and consumer.position(0) == 0


# --- whole runs -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_fault_free_run_passes_every_checker():
    result = cluster_sim.run(_config(seed=1), QUIET_SHAPE)
    assert result.ok, [(v.name, v.detail) for v in result.checkers if not v.ok]
    assert result.stats["acked_all"] > 0 and result.stats["consumed"] >= result.stats["acked_all"]


@pytest.mark.slow
def test_same_seed_same_trace_in_one_process_and_different_seeds_differ():
    first = cluster_sim.run(_config(seed=7, duration_s=2.0), QUIET_SHAPE)
    again = cluster_sim.run(_config(seed=7, duration_s=2.0), QUIET_SHAPE)
    other = cluster_sim.run(_config(seed=8, duration_s=2.0), QUIET_SHAPE)
    assert first.trace_sha256 == again.trace_sha256
    assert first.trace_sha256 != other.trace_sha256


def _trace_hash_in_fresh_process(seed: int, hash_seed: str) -> str:
    command = [sys.executable, "-m", "cli.main", "simulate", "--workload", "cluster", "--seed", str(seed),
               "--duration", "3", "--json"]
    completed = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600,
                               env={**os.environ, "PYTHONHASHSEED": hash_seed})
    import json

    return json.loads(completed.stdout.strip().splitlines()[-1])["trace_sha256"]


@pytest.mark.slow
def test_same_seed_same_trace_hash_in_fresh_processes_with_different_hash_seeds():
    # The default fault mix: crashes, restarts from disk and network faults all replay.
    first = _trace_hash_in_fresh_process(5, "1")
    assert first == _trace_hash_in_fresh_process(5, "2")
    assert first != _trace_hash_in_fresh_process(6, "1")


def test_unknown_bug_switch_is_refused():
    with pytest.raises(ValueError, match="unknown bug switches"):
        cluster_sim.run(_config(seed=1, bugs=frozenset({"Z"})), QUIET_SHAPE)


# Teeth: with a planted broker bug switched on, a known seed fails a checker that is about that bug (not a
# node error), replays to the same trace, and passes with the bug off. Each seed is the first failing one of
# `flotilla simulate --workload cluster --seeds 300 --duration 8 --faults <FAULTS> --bugs <BUG>`.
# hw_from_leader_leo acknowledges acks=all writes once the leader alone has them: slow links keep the
# followers behind and a crash of the leader hands the partition to a follower that never had them.
HW_BUG_SEED = 4
HW_BUG_FAULTS = "crash=0.05,delay=0.1,power_loss=0.01"
# truncate_to_own_hw makes a follower cut its log to its own high watermark when it follows a new leader,
# dropping acknowledged records it alone still held; the next failover elects it.
TRUNCATE_BUG_SEED = 2
TRUNCATE_BUG_FAULTS = "crash=0.03,power_loss=0.01,isolate_leader=0.02"
TEETH_DURATION_S = 8.0
BUG_CHECKERS = {"acked_not_lost", "replicas_identical", "reads_committed", "hw_monotonic"}


def _assert_teeth(bug: str, seed: int, faults: str) -> None:
    buggy = _config(seed=seed, duration_s=TEETH_DURATION_S, faults=faults, bugs=frozenset({bug}))
    first, replay, fixed = run_all(buggy, buggy, _config(seed=seed, duration_s=TEETH_DURATION_S, faults=faults))
    failed = set(_failed(first))
    assert failed & BUG_CHECKERS, [(v.name, v.detail) for v in first.checkers]
    assert "no_node_error" not in failed, [(v.name, v.detail) for v in first.checkers]
    assert replay.trace_sha256 == first.trace_sha256
    assert fixed.ok, [(v.name, v.detail) for v in fixed.checkers if not v.ok]


@pytest.mark.slow
def test_hw_from_leader_leo_fails_a_safety_checker_at_its_known_seed():
    _assert_teeth("hw_from_leader_leo", HW_BUG_SEED, HW_BUG_FAULTS)


@pytest.mark.slow
def test_truncate_to_own_hw_fails_a_safety_checker_at_its_known_seed():
    _assert_teeth("truncate_to_own_hw", TRUNCATE_BUG_SEED, TRUNCATE_BUG_FAULTS)


# answers_when_ready: the simulated listener sends each answer as soon as it is ready, where a broker answers a
# connection in request order (net/server.py): a consumer's fetch parked for records is overtaken by the answer
# to its next request. Caught at the first seed of a fault-free run, as at seeds 1-3 tried; the same seeds pass
# without it.
ANSWERS_WHEN_READY_SEED = 1


@pytest.mark.slow
def test_answers_when_ready_fails_answers_in_order_at_its_known_seed():
    buggy = _config(seed=ANSWERS_WHEN_READY_SEED, duration_s=10.0, bugs=frozenset({"answers_when_ready"}))
    first, replay, fixed = run_all(buggy, buggy, _config(seed=ANSWERS_WHEN_READY_SEED, duration_s=10.0))
    assert _failed(first) == ["answers_in_order"], [(v.name, v.detail) for v in first.checkers]
    assert replay.trace_sha256 == first.trace_sha256
    assert fixed.ok, [(v.name, v.detail) for v in fixed.checkers if not v.ok]


# quiet_session_never_ages: a leader parks a quiet follower session without a walk however old its last
# touches are. Idle followers at the log end stay in sync (as in Kafka), but the first records after the
# idle phase find their caught-up times as old as the spell, and the next ISR check drops them. Caught at the
# first seed of a fault-free run, as at every seed tried (1-6); the same seeds pass with the bug off.
QUIET_BUG_SEED = 1


@pytest.mark.slow
def test_quiet_session_never_ages_fails_idle_isr_stable_at_its_known_seed():
    buggy = _config(seed=QUIET_BUG_SEED, bugs=frozenset({"quiet_session_never_ages"}))
    first, replay, fixed = run_all(buggy, buggy, _config(seed=QUIET_BUG_SEED))
    assert _failed(first) == ["idle_isr_stable"], [(v.name, v.detail) for v in first.checkers]
    assert "after the idle spell" in next(v.detail for v in first.checkers if v.name == "idle_isr_stable")
    assert replay.trace_sha256 == first.trace_sha256
    assert fixed.ok, [(v.name, v.detail) for v in fixed.checkers if not v.ok]


# live_brokers_kept, under the `pauses` fault profile (nodes paused, nothing else). Each seed is the first
# failing one of `flotilla simulate --workload cluster --seeds 60 --duration 10 --faults pauses --bugs <BUG>`.
# wait_out_moved_controller: a broker's heartbeat waits on the paused controller after the survivors elected
# another, whose fresh sessions run out (caught at seeds 3, 5 and 38 of 60).
# sessions_count_stalls: the controller, back from a pause it kept its leadership through (the other voters
# had no quorum), counts the pause against every session and fences the brokers whose heartbeats waited in its
# sockets (seed 23 of 60).
MOVED_CONTROLLER_SEED = 3
STALL_SEED = 23


@pytest.mark.slow
@pytest.mark.parametrize("bug, seed", [("wait_out_moved_controller", MOVED_CONTROLLER_SEED),
                                       ("sessions_count_stalls", STALL_SEED)])
def test_a_live_broker_fenced_by_a_controller_s_pause_fails_live_brokers_kept_at_its_known_seed(bug, seed):
    buggy = _config(seed=seed, duration_s=10.0, faults="pauses", bugs=frozenset({bug}))
    first, replay, fixed = run_all(buggy, buggy, _config(seed=seed, duration_s=10.0, faults="pauses"))
    assert _failed(first) == ["live_brokers_kept"], [(v.name, v.detail) for v in first.checkers]
    assert replay.trace_sha256 == first.trace_sha256
    assert fixed.ok, [(v.name, v.detail) for v in fixed.checkers if not v.ok]


@pytest.mark.slow
def test_a_sweep_of_paused_nodes_with_every_fix_in_place_finds_no_failure():
    summary = sweep(_config(seed=1, duration_s=10.0, faults="pauses"), list(range(1, 31)), pool=session_pool())
    assert not summary.failed_seeds, summary.format()


@pytest.mark.slow
def test_sweep_with_every_fix_in_place_finds_no_failure():
    # The CLI's default fault mix (crashes, power loss, crash points, partitions, pauses, delays, drops,
    # resets): about two minutes for 50 seeds of 10 simulated seconds.
    summary = sweep(_config(seed=1, duration_s=10.0, faults=DEFAULT_FAULTS), list(range(1, 51)), pool=session_pool())
    assert not summary.failed_seeds, summary.format()
