"""MetadataImage + MetadataDelta: local changes, snapshots (image -> records -> image), determinism."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata.controller import ControllerConfig, QuorumController
from metadata.image import EMPTY_IMAGE, MetadataDelta, Provenance, image_to_records, records_to_image
from metadata.records import (
    NO_LEADER,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    decode_record_batch,
)
from metadata.requests import (
    AllocateProducerIdsRequest,
    AlterableConfig,
    AlterConfigOp,
    ConfigResource,
    CreatePartitionsRequest,
    DeleteTopicsRequest,
    ElectionType,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
)
from tests.metadata.harness import Cluster

TID = b"\x01" * 16


def _image_with_topic():
    delta = MetadataDelta(EMPTY_IMAGE)
    delta.replay(TopicRecord("t", TID))
    delta.replay(PartitionRecord(TID, 0, (1, 2, 3), (1, 2, 3), 1))
    delta.replay(PartitionRecord(TID, 1, (2, 3, 1), (2, 3, 1), 2))
    return delta.apply()


def test_delta_reports_leaders_followers_for_a_broker():
    image = _image_with_topic()
    delta = MetadataDelta(image)
    delta.replay(PartitionChangeRecord(TID, 0, leader=2, isr=(2, 3)))
    changes = delta.local_changes(2)
    assert [(c.topic_name, c.partition, c.leader_epoch, c.partition_epoch) for c in changes.leaders] == [
        ("t", 0, 1, 1)
    ]
    assert changes.followers == () and changes.deleted == ()
    for_1 = delta.local_changes(1)
    assert [c.partition for c in for_1.followers] == [0] and for_1.leaders == ()
    assert delta.local_changes(7) == delta.local_changes(7).__class__((), (), ())
    after = delta.apply()
    assert after.topics.partition(TID, 0).leader == 2
    assert image.topics.partition(TID, 0).leader == 1  # the old image is untouched
    assert after.topics.by_name["t"].partitions[1] is image.topics.by_name["t"].partitions[1]  # shared


def test_delta_reports_deleted_partitions_to_their_replicas():
    delta = MetadataDelta(_image_with_topic())
    delta.replay(RemoveTopicRecord(TID))
    assert [(c.topic_name, c.partition) for c in delta.local_changes(3).deleted] == [("t", 0), ("t", 1)]
    assert delta.changed_partitions() == ()
    assert not delta.apply().topics.by_id


def test_delta_reports_a_replica_reassigned_away_as_deleted():
    delta = MetadataDelta(_image_with_topic())
    delta.replay(PartitionChangeRecord(TID, 0, isr=(1, 2), replicas=(1, 2)))
    assert [c.partition for c in delta.local_changes(3).deleted] == [0]


def test_new_leader_bumps_leader_epoch_every_change_bumps_partition_epoch():
    delta = MetadataDelta(_image_with_topic())
    delta.replay(PartitionChangeRecord(TID, 0, isr=(1, 2)))
    state = delta.partition(TID, 0)
    assert (state.leader, state.leader_epoch, state.partition_epoch) == (1, 0, 1)
    delta.replay(PartitionChangeRecord(TID, 0, leader=NO_LEADER))
    state = delta.partition(TID, 0)
    assert (state.leader, state.leader_epoch, state.partition_epoch) == (NO_LEADER, 1, 2)


@pytest.mark.parametrize(
    "record",
    [
        PartitionChangeRecord(TID, 0, leader=9),  # leader outside the ISR
        PartitionChangeRecord(TID, 0, isr=(1, 9)),  # ISR outside the replicas
        PartitionChangeRecord(TID, 0, isr=()),  # empty ISR
        PartitionChangeRecord(TID, 5, isr=(1,)),  # unknown partition
        TopicRecord("t", b"\x02" * 16),  # name taken
    ],
)
def test_replay_of_an_invariant_breaking_record_fails_loudly(record):
    delta = MetadataDelta(_image_with_topic())
    delta.replay(PartitionChangeRecord(TID, 0, leader=2, isr=(2, 3)))
    with pytest.raises(AssertionError):
        delta.replay(record)


def test_partition_record_may_not_move_epochs_backwards():
    delta = MetadataDelta(_image_with_topic())
    delta.replay(PartitionChangeRecord(TID, 0, leader=2, isr=(2, 3)))
    with pytest.raises(AssertionError):
        delta.replay(PartitionRecord(TID, 0, (1, 2, 3), (1,), 1, leader_epoch=0, partition_epoch=0))


def test_broker_epochs_only_grow_per_broker():
    delta = MetadataDelta(EMPTY_IMAGE)
    delta.replay(RegisterBrokerRecord(1, b"a" * 16, 5, "h", 1, None, ()))
    with pytest.raises(AssertionError):
        delta.replay(RegisterBrokerRecord(1, b"b" * 16, 5, "h", 1, None, ()))


def test_provenance_counts_records_and_takes_raft_positions():
    delta = MetadataDelta(EMPTY_IMAGE)
    delta.replay(TopicRecord("t", TID))
    assert delta.apply().provenance == Provenance(0, -1)
    delta.replay(PartitionRecord(TID, 0, (1,), (1,), 1), Provenance(41, 3))
    assert delta.apply().provenance == Provenance(41, 3)
    with pytest.raises(AssertionError):
        delta.replay(PartitionChangeRecord(TID, 0, isr=(1,)), Provenance(40, 3))


# ---- hypothesis: controller histories ---------------------------------------------------------------------

operations = st.lists(
    st.one_of(
        st.tuples(st.just("register"), st.integers(1, 5), st.integers(0, 2)),
        st.tuples(st.just("heartbeat"), st.integers(1, 5), st.booleans()),
        st.tuples(st.just("create"), st.sampled_from("abcde"), st.integers(1, 6), st.integers(1, 3)),
        st.tuples(st.just("delete"), st.sampled_from("abcde")),
        st.tuples(st.just("grow"), st.sampled_from("abcde"), st.integers(1, 3)),
        st.tuples(st.just("shrink_isr"), st.sampled_from("abcde"), st.integers(0, 5)),
        st.tuples(st.just("expand_isr"), st.sampled_from("abcde"), st.integers(0, 5)),
        st.tuples(st.just("config"), st.sampled_from("abcde"), st.sampled_from(["true", "false"])),
        st.tuples(st.just("pids"), st.integers(1, 5)),
        st.tuples(st.just("elect"), st.sampled_from([ElectionType.PREFERRED, ElectionType.UNCLEAN])),
        st.tuples(st.just("time"), st.sampled_from([100, 4_000, 9_500, 20_000]), st.frozensets(st.integers(1, 5))),
    ),
    min_size=5,
    max_size=40,
)


def _apply_operation(c: Cluster, op) -> None:
    kind, *args = op
    image = c.image
    if kind == "register":
        c.register(args[0], rack=None, incarnation=args[1])
    elif kind == "heartbeat" and image.cluster.broker(args[0]) is not None:
        c.heartbeat(args[0], want_shutdown=args[1] and args[0] % 2 == 0)
    elif kind == "create":
        c.create_topic(args[0], args[1], args[2], configs={"min.insync.replicas": "1"})
    elif kind == "delete":
        c.run(DeleteTopicsRequest((args[0],)))
    elif kind == "grow" and args[0] in image.topics.by_name:
        c.run(CreatePartitionsRequest(args[0], len(c.topic(args[0]).partitions) + args[1]))
    elif kind in ("shrink_isr", "expand_isr") and args[0] in image.topics.by_name:
        _alter_isr(c, args[0], args[1], kind == "expand_isr")
    elif kind == "config" and args[0] in image.topics.by_name:
        ops = (AlterableConfig("unclean.leader.election.enable", args[1], AlterConfigOp.SET),)
        c.run(IncrementalAlterConfigsRequest((ConfigResource(2, args[0], ops),)))
    elif kind == "pids" and image.cluster.broker(args[0]) is not None:
        c.run(AllocateProducerIdsRequest(args[0], c.epoch(args[0])))
    elif kind == "elect":
        c.run(ElectLeadersRequest(args[0]))
    elif kind == "time":  # the brokers in args[1] heartbeat on the way
        c.keep_alive(*sorted(b for b in args[1] if b in image.cluster.brokers), now_ms=c.now_ms + args[0] // 2)
        c.tick(c.now_ms + args[0] - args[0] // 2)


def _alter_isr(c: Cluster, name: str, index: int, expand: bool) -> None:
    partitions = c.topic(name).partitions
    state = partitions[index % len(partitions)]
    if state.leader == NO_LEADER:
        return
    if expand:
        isr = state.isr + tuple(b for b in state.replicas if b not in state.isr and c.image.cluster.is_active(b))
    else:
        isr = (state.leader,)
    c.alter_isr(name, index % len(partitions), isr)


def _check_invariants(image) -> None:
    for topic in image.topics.by_id.values():
        for state in topic.partitions.values():
            assert state.leader == NO_LEADER or image.cluster.broker(state.leader) is not None
            if state.leader != NO_LEADER:
                assert image.cluster.is_active(state.leader), state


@settings(max_examples=60, deadline=None)
@given(operations, st.integers(0, 2**32))
def test_image_to_records_to_image_round_trips_after_any_history(history, seed):
    c = Cluster(seed=seed)
    c.start_brokers(1, 2, 3)
    c.create_topic("a", 4, 3)
    c.create_topic("b", 2, 2, configs={"unclean.leader.election.enable": "true"})
    for op in history:
        _apply_operation(c, op)
        _check_invariants(c.image)
    image = c.image
    assert records_to_image(image_to_records(image), image.provenance) == image
    follower = QuorumController(ControllerConfig(), random.Random(seed + 1))
    for entry in c.log:
        follower.replay_batch(decode_record_batch(entry))
    assert follower.image() == image  # determinism: same records, same image
    restored = QuorumController(ControllerConfig(), random.Random(seed + 2))
    restored.load_snapshot(c.controller.snapshot(), image.provenance)
    assert restored.image() == image


def test_snapshot_of_a_non_trivial_image_round_trips():
    c = Cluster()
    c.start_brokers(1, 2, 3, 4)
    c.create_topic("orders", 8, 3, configs={"retention.ms": "60000", "cleanup.policy": "compact"})
    c.create_topic("audit", 2, 2)
    c.keep_alive(1, 2, 3, now_ms=8_000)
    c.tick(9_001)
    c.run(AllocateProducerIdsRequest(1, c.epoch(1)))
    image = c.image
    records = image_to_records(image)
    assert len(records) > 15
    assert records_to_image(records, image.provenance) == image
    assert records_to_image(records, image.provenance) != records_to_image(records[:-1], image.provenance)
