"""The quotas workload: the whole-cluster simulation while client byte-rate quotas are set, changed and removed
(simulations/quota_sim.py).

The planted bug (a throttled answer that does not mute the connection) fails `quota_respected` at a named seed
(the first failing seed of `flotilla simulate --workload quotas --seeds 40 --duration 60 --bugs
quota_throttle_not_muted`; 38 of the 40 catch it), replays to the same trace, and passes with the bug off; the
checker itself is shown to fail on a hand-fed client that sends more than its quota allows."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from metadata.image import ClientQuotasImage, FrozenMap
from net.protocol import messages
from net.protocol.codec import ApiKey, RequestHeader
from simulations.quota_sim import QuotaCheckers
from simulations.run import run_one
from tests.simulations.workloads import assert_sweep_passes, assert_teeth, failed_checkers, workload_config

THROTTLE_NOT_MUTED_SEED = 1
DELETIONS_NOT_COUNTED_SEED = 1


def test_a_fault_free_run_throttles_clients_and_passes_every_checker():
    result = run_one(workload_config("quotas", 1, 30.0))
    assert result.ok, failed_checkers(result)
    assert "quota_respected" in {v.name for v in result.checkers}
    assert result.stats["quotas_accepted"] >= 3
    assert result.stats["quota_throttled_stretches"] >= 1  # a quota had to act, not only stand by
    assert result.stats["churn_created"] >= 10 and result.stats["churn_deleted"] >= 10


def _process(now_ms: int, key: str, quota: float, client_id: str = "p") -> SimpleNamespace:
    image = ClientQuotasImage(FrozenMap({(("client-id", client_id),): FrozenMap({key: quota})}))
    return SimpleNamespace(node_id=1, incarnation=1, sim=SimpleNamespace(loop=SimpleNamespace(now_ms=now_ms)),
                           broker=SimpleNamespace(image=SimpleNamespace(quotas=image)))


def _produce(checkers: QuotaCheckers, now_ms: int, size: int, connection: int = 1, quota: float = 1000.0) -> None:
    process = _process(now_ms, "producer_byte_rate", quota)
    request_class = messages.ProduceRequest
    request = request_class(transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[
        request_class.TopicProduceData(name="t", partition_data=[
            request_class.PartitionProduceData(index=0, records=b"x" * size)])])
    checkers.observe_request(process, connection, RequestHeader(ApiKey.PRODUCE, 9, 1, "p"), request)


def test_quota_respected_allows_the_burst_and_the_quota_and_catches_more():
    checkers = QuotaCheckers()
    for second in range(30):  # 11 s of burst, then exactly the quota
        _produce(checkers, second * 1000, 1000 if second else 11_000)
    assert "quota_respected" not in checkers.violations
    checkers = QuotaCheckers()
    for second in range(30):  # twice the quota, sustained
        _produce(checkers, second * 1000, 2000)
    assert "under a quota of 1000 B/s" in checkers.violations.get("quota_respected", "")


def _fetched(checkers: QuotaCheckers, now_ms: int, size: int, client_id: str = "p") -> None:
    response_class = messages.FetchResponse
    response = response_class(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        response_class.FetchableTopicResponse(topic="t", partitions=[response_class.PartitionData(
            partition_index=0, error_code=0, high_watermark=0, last_stable_offset=0, log_start_offset=0,
            aborted_transactions=None, preferred_read_replica=-1, records=b"x" * size)])])
    checkers.observe_response(_process(now_ms, "consumer_byte_rate", 1000.0, client_id), 1,
                              RequestHeader(ApiKey.FETCH, 11, 1, client_id), response)


def test_quota_respected_counts_fetched_bytes_but_not_followers():
    checkers = QuotaCheckers()
    for second in range(30):
        # A follower under a quota of its client id: replication, never counted (the broker exempts it too).
        _fetched(checkers, second * 1000, 2000, client_id="replica-2")
    assert "quota_respected" not in checkers.violations
    for second in range(30):
        _fetched(checkers, second * 1000, 2000)
    assert "fetched records of 'p'" in checkers.violations.get("quota_respected", "")


def _churned(checkers: QuotaCheckers, now_ms: int, topics: int, deleted: bool = False, connection: int = 1) -> None:
    image = ClientQuotasImage(FrozenMap({(("client-id", "churner"),): FrozenMap({"controller_mutation_rate": 2.0})}))
    process = SimpleNamespace(node_id=1, incarnation=1, sim=SimpleNamespace(loop=SimpleNamespace(now_ms=now_ms)),
                              broker=SimpleNamespace(image=SimpleNamespace(quotas=image)))
    if deleted:
        response_class = messages.DeleteTopicsResponse
        response = response_class(throttle_time_ms=0, responses=[
            response_class.DeletableTopicResult(name=f"t{i}", error_code=0) for i in range(topics)])
        header = RequestHeader(ApiKey.DELETE_TOPICS, 3, 1, "churner")
    else:
        response_class = messages.CreateTopicsResponse
        response = response_class(throttle_time_ms=0, topics=[
            response_class.CreatableTopicResult(name=f"t{i}", error_code=0, error_message=None) for i in range(topics)])
        header = RequestHeader(ApiKey.CREATE_TOPICS, 4, 1, "churner")
    checkers.observe_response(process, connection, header, response)


def test_mutation_quota_respected_allows_the_burst_and_the_rate_and_catches_more():
    checkers = QuotaCheckers()  # 2 partitions a second: a burst of 22, then 2 a second
    _churned(checkers, 0, 11)  # the burst: 22 partitions
    for second in range(1, 30):
        _churned(checkers, second * 1000, 1, deleted=second % 2 == 0)  # 2 partitions a second
    assert "mutation_quota_respected" not in checkers.violations
    checkers = QuotaCheckers()
    for second in range(30):  # twice the rate, sustained, half of it deletions
        _churned(checkers, second * 1000, 1)
        _churned(checkers, second * 1000 + 500, 1, deleted=True)
    assert "controller_mutation_rate of 2/s" in checkers.violations.get("mutation_quota_respected", "")


@pytest.mark.slow
def test_deletions_not_counted_fails_mutation_quota_respected_at_its_known_seed():
    assert_teeth("quotas", "mutation_deletions_not_counted", DELETIONS_NOT_COUNTED_SEED, 60.0,
                 {"mutation_quota_respected"})


@pytest.mark.slow
def test_throttle_not_muted_fails_quota_respected_at_its_known_seed():
    assert_teeth("quotas", "quota_throttle_not_muted", THROTTLE_NOT_MUTED_SEED, 60.0, {"quota_respected"})


@pytest.mark.slow
def test_quotas_sweep_with_every_fix_in_place_finds_no_failure():
    assert_sweep_passes("quotas", 20, 30.0)
