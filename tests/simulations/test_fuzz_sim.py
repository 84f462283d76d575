"""The fuzz workload: the whole-cluster simulation while two clients send every node well-formed requests with
hostile values (simulations/fuzz_sim.py, simulations/fuzz_requests.py).

The drawn requests reach every API a broker serves and get past the first checks of the handlers (names and
ids learned from answers, requests routed to leaders and coordinators); the planted bug (a CreateTopics that
forwards nothing indexes a controller result never asked for) ends a node at a named seed (the first failing
seed of `flotilla simulate --workload fuzz --seeds 40 --duration 30 --bugs create_topics_forward_nothing`),
replays to the same trace and passes with the bug off; a fixed bug the workload found is pinned at its seed."""

from __future__ import annotations

import random

import pytest

from net.protocol.codec import SUPPORTED, ApiKey, RequestHeader, decode_request, encode_request
from simulations.cluster_checkers import ClusterCheckers
from simulations.fuzz_requests import EXCLUDED_APIS, RequestFuzzer
from simulations.faults import DEFAULT_FAULTS
from simulations.run import RunConfig, run_one
from tests.simulations.workloads import assert_sweep_passes, failed_checkers, run_all, workload_config

CREATE_TOPICS_FORWARD_NOTHING_SEED = 1
DUPLICATE_PRODUCE_PARTITION_SEED = 6  # a Produce naming a partition twice raised out of the handler (fixed)


def test_drawn_requests_cover_every_served_api_and_survive_the_codec():
    fuzzer = RequestFuzzer(random.Random(7))
    drawn = set()
    for correlation_id in range(3_000):
        api_key, version, request = fuzzer.request()
        header, decoded = decode_request(memoryview(encode_request(RequestHeader(api_key, version, correlation_id,
                                                                                  "fuzz"), request))[4:])
        assert (header.api_key, header.api_version) == (api_key, version) and decoded == request
        drawn.add(api_key)
    assert drawn == set(SUPPORTED) - EXCLUDED_APIS


def test_the_fuzzer_never_names_the_workloads_topic_nor_elects_every_partition_uncleanly():
    fuzzer = RequestFuzzer(random.Random(3), topics=("fuzz0-a", "fuzz0-b"))
    for _ in range(4_000):
        api_key, version, request = fuzzer.request()
        assert "'sim'" not in repr(request)
        if api_key == ApiKey.ELECT_LEADERS and request.election_type != 0:
            assert request.topic_partitions is not None


def test_the_fuzzer_learns_ids_leaders_and_coordinators_from_answers():
    from net.protocol import messages

    fuzzer = RequestFuzzer(random.Random(1), topics=("fuzz0-a",))
    metadata = messages.MetadataResponse.MetadataResponseTopic
    partition = messages.MetadataResponse.MetadataResponsePartition
    fuzzer.learn(messages.MetadataResponse(topics=[metadata(name="fuzz0-a", partitions=[
        partition(partition_index=1, leader_id=3)])]))
    fuzzer.learn(messages.InitProducerIdResponse(producer_id=4000, producer_epoch=7))
    fuzzer.learn(messages.FindCoordinatorResponse(node_id=2),
                 messages.FindCoordinatorRequest(key="fuzz-g1", key_type=0))
    assert fuzzer.leaders == {("fuzz0-a", 1): 3} and fuzzer.coordinators == {(0, "fuzz-g1"): 2}
    assert 4000 in fuzzer.learned["producer_id"] and 7 in fuzzer.learned["producer_epoch"]
    produce = messages.ProduceRequest
    request = produce(acks=1, timeout_ms=1, topic_data=[produce.TopicProduceData(
        name="fuzz0-a", partition_data=[produce.PartitionProduceData(index=1, records=None)])])
    assert fuzzer.route(request) == 3
    assert fuzzer.route(messages.JoinGroupRequest(group_id="fuzz-g1")) == 2
    assert fuzzer.route(messages.InitProducerIdRequest(transactional_id="fuzz-g1")) is None  # another key type


def test_a_recreated_topic_starts_its_epochs_and_high_watermark_over():
    checkers = ClusterCheckers()
    checkers.observe_replica(1, 1, ("t", 0), 5, True, 0, b"old")
    checkers.observe_replica(2, 1, ("t", 0), 0, True, 0, b"new")  # deleted, created again, led by another
    assert not checkers.violations
    checkers.observe_replica(3, 1, ("t", 0), 0, True, 0, b"new")
    assert "led by nodes 2 and 3" in checkers.violations["one_leader_per_epoch"]


def test_a_fault_free_run_reaches_every_api_and_passes_every_checker():
    result = run_one(workload_config("fuzz", 1, 20.0))
    assert result.ok, failed_checkers(result)
    assert "answers_decode" in {v.name for v in result.checkers}
    stats = result.stats
    served = len(set(SUPPORTED) - EXCLUDED_APIS)
    for name in ("fuzz0", "fuzz1"):
        assert stats[f"{name}_sent"] >= 1_500 and stats[f"{name}_apis"] == served
        assert stats[f"{name}_answered_ok"] >= stats[f"{name}_sent"] // 3
    assert stats["acked_all"] > 0 and stats["acked_one"] > 0


@pytest.mark.slow
def test_create_topics_forward_nothing_ends_a_node_at_its_known_seed():
    config = RunConfig(seed=CREATE_TOPICS_FORWARD_NOTHING_SEED, nodes=3, duration_s=20.0, faults=DEFAULT_FAULTS,
                       workload="fuzz", bugs_live=frozenset({"create_topics_forward_nothing"}))
    buggy, replay, fixed = run_all(config, config, RunConfig(seed=config.seed, nodes=3, duration_s=20.0,
                                                             faults=DEFAULT_FAULTS, workload="fuzz"))
    assert "IndexError" in failed_checkers(buggy).get("no_node_error", ""), failed_checkers(buggy)
    assert replay.trace_sha256 == buggy.trace_sha256
    assert fixed.ok, failed_checkers(fixed)


@pytest.mark.slow
def test_the_seed_that_found_the_duplicate_produce_partition_passes():
    result = run_one(workload_config("fuzz", DUPLICATE_PRODUCE_PARTITION_SEED, 30.0, DEFAULT_FAULTS))
    assert result.ok, failed_checkers(result)


@pytest.mark.slow
def test_fuzz_sweep_with_every_fix_in_place_finds_no_failure():
    assert_sweep_passes("fuzz", 12, 20.0)
