"""Controller RPC codec round trips; replica placement properties (Kafka's AdminUtils)."""

import collections

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata import requests as q
from metadata.placement import assign_replicas, rack_alternated
from partitions.errors import InvalidRequestError

int32 = st.integers(-(2**31), 2**31 - 1)
text = st.text(max_size=20)

MESSAGES = st.one_of(
    st.builds(q.BrokerRegistrationRequest, int32, st.binary(min_size=16, max_size=16), text, int32,
              st.none() | text, st.lists(text, max_size=2).map(tuple)),
    st.builds(q.BrokerHeartbeatRequest, int32, int32, int32, st.booleans(), st.booleans()),
    st.builds(
        q.CreateTopicsRequest,
        st.lists(
            st.builds(
                q.CreatableTopic,
                text,
                int32,
                int32,
                st.none() | st.lists(st.builds(q.ReplicaAssignment, int32, st.lists(int32).map(tuple))).map(tuple),
                st.lists(st.builds(q.ConfigEntry, text, st.none() | text), max_size=3).map(tuple),
            ),
            max_size=3,
        ).map(tuple),
        st.booleans(),
    ),
    st.builds(
        q.IncrementalAlterConfigsRequest,
        st.lists(
            st.builds(
                q.ConfigResource,
                st.sampled_from([2, 4]),
                text,
                st.lists(st.builds(q.AlterableConfig, text, st.none() | text, st.integers(0, 3))).map(tuple),
            ),
            max_size=3,
        ).map(tuple),
    ),
    st.builds(q.AlterPartitionRequest, int32, int32, st.binary(min_size=16, max_size=16), int32, int32, int32,
              st.lists(int32, max_size=5).map(tuple)),
    st.builds(q.ElectLeadersRequest, st.integers(0, 1),
              st.none() | st.lists(st.builds(q.TopicPartitions, text, st.lists(int32).map(tuple))).map(tuple)),
)


@settings(max_examples=100, deadline=None)
@given(MESSAGES)
def test_controller_requests_round_trip(request):
    assert q.decode_request(q.encode_request(request)) == request


@pytest.mark.parametrize(
    "response",
    [
        q.BrokerHeartbeatResponse(0, "", True, False, True),
        q.CreateTopicsResponse((q.CreatableTopicResult("t", 0, "", b"\x01" * 16, 3, 2, (q.ConfigEntry("a", "b"),)),)),
        q.AlterPartitionResponse(0, "", b"\x02" * 16, 1, 2, 3, 4, (2, 3)),
        q.AllocateProducerIdsResponse(0, "", 1000, 1000),
        q.ElectLeadersResponse(0, (q.PartitionResult("t", 0, 84, "not needed"),)),
    ],
)
def test_controller_responses_round_trip(response):
    assert q.decode_response(q.encode_response(response)) == response


def test_a_response_is_not_accepted_as_a_request():
    data = q.encode_response(q.AllocateProducerIdsResponse(0))
    with pytest.raises(InvalidRequestError):
        q.decode_request(data)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 12),
    st.integers(1, 40),
    st.integers(1, 12),
    st.integers(0, 100),
    st.integers(0, 100),
)
def test_placement_spreads_leaders_within_one_and_never_repeats_a_broker(brokers, partitions, rf, start, shift):
    rf = min(rf, brokers)
    racks = {b * 10: None for b in range(brokers)}
    assignments = assign_replicas(racks, partitions, rf, start, shift)
    assert len(assignments) == partitions
    for replicas in assignments:
        assert len(replicas) == rf == len(set(replicas)) and set(replicas) <= set(racks)
    leaders = collections.Counter(r[0] for r in assignments)
    counts = [leaders.get(b, 0) for b in racks]
    assert max(counts) - min(counts) <= 1
    replicas = collections.Counter(b for r in assignments for b in r)
    counts = [replicas.get(b, 0) for b in racks]
    assert max(counts) - min(counts) <= rf


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 4), st.integers(1, 3), st.integers(1, 30), st.integers(0, 50), st.integers(0, 50))
def test_rack_aware_placement_uses_as_many_racks_as_it_can(rack_count, per_rack, partitions, start, shift):
    racks = {r * 10 + i: f"rack-{r}" for r in range(rack_count) for i in range(per_rack)}
    rf = min(3, len(racks))
    for replicas in assign_replicas(racks, partitions, rf, start, shift):
        assert len(set(replicas)) == rf
        assert len({racks[b] for b in replicas}) == min(rf, rack_count)


def test_rack_alternated_list_matches_kafka():  # AdminUtilsTest.testGetRackAlternatedBrokerListAndAssignReplicasToBrokers
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated(racks) == [0, 3, 1, 5, 4, 2]


def test_placement_refuses_more_replicas_than_brokers():
    with pytest.raises(ValueError):
        assign_replicas({1: None, 2: None}, 1, 3, 0, 0)
