"""The idempotence workload (simulations/idempotence_sim.py): the cluster workload with an idempotent producer
that keeps up to five batches in flight per partition, as librdkafka does.

Each planted bug (a producer's state recognising a duplicate of its last batch only; a follower appending what
it fetches without its producers' state) fails its checkers at a named seed (the first failing seed of
`flotilla simulate --workload idempotence --seeds 10 --duration 30 --bugs ...`), replays to the same trace, and
passes with the bug off."""

from __future__ import annotations

import dataclasses

import pytest

from simulations.cluster_checkers import ReplicaLog
from simulations.idempotence_sim import IdempotenceCheckers
from simulations.run import run_one
from simulations.faults import DEFAULT_FAULTS
from tests.simulations.workloads import (assert_sweep_passes, assert_teeth, failed_checkers, run_all,
                                         workload_config)

DEDUP_LAST_BATCH_ONLY_SEED = 1
FOLLOWER_SKIPS_PRODUCER_STATE_SEED = 1


def replica(values: dict[int, bytes]) -> ReplicaLog:
    return ReplicaLog(node_id=1, log_start_offset=0, log_end_offset=len(values), high_watermark=len(values),
                      batches=[], values=values)


def test_the_checkers_catch_a_record_written_twice_and_records_out_of_order():
    checkers = IdempotenceCheckers()
    checkers.check_written_once_in_order({("sim", 0): [replica({0: b"idem:1", 1: b"idem:2", 2: b"other:1", 3: b"idem:3"})]})
    assert not checkers.violations
    checkers.check_written_once_in_order({("sim", 1): [replica({0: b"idem:4", 1: b"idem:5", 2: b"idem:4"})]})
    assert checkers.violations["idempotent_no_duplicates"] == "sim-1 holds idem:4 at offsets 0 and 2 (node 1)"
    assert "sim-1 holds idem:4 at offset 2, after record 5" in checkers.violations["idempotent_in_order"]


def test_a_fault_free_run_pipelines_and_writes_every_record_once():
    result = run_one(workload_config("idempotence", 1, 20.0))
    assert result.ok, failed_checkers(result)
    assert result.stats["acked_idem"] == result.stats["consumed"] > 5_000 and result.stats["failed_idem"] == 0


@pytest.mark.slow
def test_a_stale_leaders_refusal_sends_the_batch_again_to_the_leader(tmp_path):
    # Seed 22: node 1, cut off while the controller moved partition 0 to node 2, answers the producer's Metadata
    # from its stale image after the heal, and refuses the next batch OUT_OF_ORDER_SEQUENCE_NUMBER by the producer
    # state it had when it was cut off; the batch goes again to node 2, which appends it.
    trace_path = tmp_path / "trace.txt"
    config = dataclasses.replace(workload_config("idempotence", 22, 60.0, DEFAULT_FAULTS), trace_path=str(trace_path))
    (result,) = run_all(config)
    assert result.ok, failed_checkers(result)
    assert "16251050 client.retry idem 0 out_of_order_from_a_stale_leader" in trace_path.read_text().splitlines()


@pytest.mark.slow
def test_dedup_last_batch_only_fails_idempotent_never_refused_at_its_known_seed():
    buggy = assert_teeth("idempotence", "dedup_last_batch_only", DEDUP_LAST_BATCH_ONLY_SEED, 30.0,
                         {"idempotent_never_refused"})
    assert buggy.stats["max_in_flight"] == 5


@pytest.mark.slow
def test_follower_skips_producer_state_fails_idempotent_no_duplicates_at_its_known_seed():
    assert_teeth("idempotence", "follower_skips_producer_state", FOLLOWER_SKIPS_PRODUCER_STATE_SEED, 30.0,
                 {"idempotent_no_duplicates"})


@pytest.mark.slow
def test_idempotence_sweep_with_every_fix_in_place_finds_no_failure():
    assert_sweep_passes("idempotence", 12, 60.0)
