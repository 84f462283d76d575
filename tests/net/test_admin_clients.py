"""Real admin clients at Kafka 3.9's admin versions on a real node: kafka-python 3 (CreateTopics v7, DeleteTopics
v6, CreatePartitions v3, DeleteRecords v2, DescribeConfigs v4, AlterConfigs v2, IncrementalAlterConfigs v1, its
highest) and confluent-kafka's AdminClient (librdkafka 2.16's highest: DeleteTopics v4, CreatePartitions v2 and
DeleteRecords v2 among them, flexible versions new here), unchanged; and the group, transaction, quorum, election
and SCRAM administration each client offers."""

import uuid

import pytest

from cli.local_cluster import LocalCluster
from tests.net.cluster_helpers import (FAST_BROKER_SETTINGS, eventually, logged_events, metadata, topic_of,
                                       wait_for_quorum)

pytestmark = [pytest.mark.slow, pytest.mark.external]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = LocalCluster(str(tmp_path_factory.mktemp("admin")), nodes=1, broker=FAST_BROKER_SETTINGS)
    cluster.start()
    wait_for_quorum(cluster)
    yield cluster
    cluster.stop()


def test_kafka_python_administers_topics_at_its_highest_versions(cluster):
    from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType
    from kafka.protocol.admin import (AlterConfigsRequest, CreatePartitionsRequest, CreateTopicsRequest,
                                      DeleteRecordsRequest, DeleteTopicsRequest, DescribeConfigsRequest,
                                      IncrementalAlterConfigsRequest)

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        versions = admin._manager.broker_version_data
        assert [versions.api_version(r) for r in (
            CreateTopicsRequest, DeleteTopicsRequest, CreatePartitionsRequest, DeleteRecordsRequest,
            DescribeConfigsRequest, AlterConfigsRequest, IncrementalAlterConfigsRequest)] == [7, 6, 3, 2, 4, 2, 1]

        created = admin.create_topics({"kp-admin": {"num_partitions": 2, "replication_factor": 1,
                                                    "configs": {"retention.ms": "3600000"}}})
        (topic,) = created["topics"]
        assert (topic["name"], topic["error_code"], topic["num_partitions"], topic["replication_factor"]) == \
            ("kp-admin", 0, 2, 1)
        assert topic["configs"]["retention.ms"] == {"value": "3600000", "read_only": False,
                                                    "config_source": "DYNAMIC_TOPIC_CONFIG", "is_sensitive": False}
        assert topic["configs"]["cleanup.policy"]["config_source"] == "DEFAULT_CONFIG"
        listed = eventually(lambda: topic_of(metadata(cluster), "kp-admin"), what="the topic")
        assert uuid.UUID(topic["topic_id"]).hex == listed["topic_id"]

        resource = ConfigResource(ConfigResourceType.TOPIC, "kp-admin", {"segment.ms": "600000"})
        admin.alter_configs([resource], incremental=True)
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp-admin")])
        configs = described["topic"]["kp-admin"]  # the configs that are not defaults
        assert {name: (c["value"], c["config_type"], c["documentation"]) for name, c in configs.items()} == {
            "retention.ms": ("3600000", "LONG", None), "segment.ms": ("600000", "LONG", None)}

        admin.create_partitions({"kp-admin": 3})
        eventually(lambda: len(topic_of(metadata(cluster), "kp-admin")["partitions"]) == 3, what="3 partitions")

        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers)
        for value in range(5):
            producer.send("kp-admin", value=b"%d" % value, partition=0)
        producer.flush()
        producer.close()
        admin.delete_records({TopicPartition("kp-admin", 0): 3})

        deleted = admin.delete_topics([uuid.UUID(topic["topic_id"])])  # v6: by id
        assert [(t["name"], t["error_code"]) for t in deleted["topics"]] == [("kp-admin", 0)]
        eventually(lambda: topic_of(metadata(cluster), "kp-admin") is None, what="the topic gone")
    finally:
        admin.close()


def test_confluent_kafka_administers_topics_at_librdkafkas_versions(cluster):
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                       NewTopic, ResourceType)

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    created = admin.create_topics([NewTopic("ck-admin", 2, 1, config={"retention.ms": "3600000"})],
                                  operation_timeout=20)
    assert created["ck-admin"].result(30) is None
    eventually(lambda: topic_of(metadata(cluster), "ck-admin"), what="the topic")

    resource = ConfigResource(ResourceType.TOPIC, "ck-admin", incremental_configs=[
        ConfigEntry("segment.ms", "600000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    described = admin.describe_configs([ConfigResource(ResourceType.TOPIC, "ck-admin")])
    configs = next(iter(described.values())).result(30)
    assert configs["retention.ms"].value == "3600000" and configs["segment.ms"].value == "600000"

    assert admin.create_partitions([NewPartitions("ck-admin", 3)], operation_timeout=20)["ck-admin"].result(30) is None
    eventually(lambda: len(topic_of(metadata(cluster), "ck-admin")["partitions"]) == 3, what="3 partitions")

    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for value in range(5):
        producer.produce("ck-admin", value=b"%d" % value, partition=0)
    assert producer.flush(30) == 0
    deleted = admin.delete_records([TopicPartition("ck-admin", 0, 3)])
    assert next(iter(deleted.values())).result(30).low_watermark == 3

    assert admin.delete_topics(["ck-admin"], operation_timeout=20)["ck-admin"].result(30) is None
    eventually(lambda: topic_of(metadata(cluster), "ck-admin") is None, what="the topic gone")


def test_kafka_python_administers_groups_transactions_the_quorum_and_credentials(cluster):
    """The rest of kafka-python 3's admin surface a user reaches for: transactions (ListTransactions,
    DescribeTransactions, DescribeProducers), a group's members and offsets (DescribeGroups, LeaveGroup v3+ by
    member id, OffsetCommit/OffsetFetch/OffsetDelete as an administrator, DeleteGroups), DescribeQuorum,
    DescribeTopicPartitions with its cursor, ElectLeaders, ListPartitionReassignments and SCRAM credentials."""
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import (MemberToRemove, NewTopic, OffsetSpec, ScramMechanism, TransactionState,
                             UserScramCredentialDeletion, UserScramCredentialUpsertion)
    from kafka.errors import NoError
    from kafka.structs import OffsetAndMetadata

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    producer = consumer = None
    try:
        admin.create_topics([NewTopic("kp-groups", 3, 1)])
        admin.wait_for_topics(["kp-groups"], timeout_ms=30000)

        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="kp-admin-tx")
        producer.init_transactions()
        producer.begin_transaction()
        for value in range(10):
            producer.send("kp-groups", value=b"%d" % value, partition=0)
        producer.flush()
        listed = [t for listings in admin.list_transactions().values() for t in listings]
        assert [(t.transactional_id, t.state) for t in listed] == [("kp-admin-tx", TransactionState.ONGOING)]
        described = admin.describe_transactions(["kp-admin-tx"])["kp-admin-tx"]
        assert (described.state, described.producer_id, described.topic_partitions) == \
            (TransactionState.ONGOING, listed[0].producer_id, {TopicPartition("kp-groups", 0)})
        (state,) = admin.describe_producers([TopicPartition("kp-groups", 0)])[TopicPartition("kp-groups", 0)] \
            .active_producers
        assert (state.producer_id, state.last_sequence, state.current_transaction_start_offset) == \
            (described.producer_id, 9, 0)
        producer.commit_transaction()
        assert eventually(lambda: admin.describe_transactions(["kp-admin-tx"])["kp-admin-tx"].state
                          == TransactionState.COMPLETE_COMMIT, what="the commit")

        consumer = KafkaConsumer("kp-groups", bootstrap_servers=cluster.bootstrap_servers, group_id="kp-admin-g",
                                 auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=5000)
        assert sorted(int(record.value) for record in consumer) == list(range(10))
        consumer.commit()
        group = admin.describe_groups(["kp-admin-g"])["kp-admin-g"]
        assert (group["group_state"], group["protocol_data"], len(group["members"])) == ("Stable", "range", 1)
        (member,) = group["members"]
        assert member["member_assignment"]["assigned_partitions"] == [{"topic": "kp-groups", "partitions": [0, 1, 2]}]
        removal = MemberToRemove(member_id=member["member_id"])
        assert admin.remove_group_members("kp-admin-g", [removal]) == {member["member_id"]: NoError}
        assert admin.describe_groups(["kp-admin-g"])["kp-admin-g"]["group_state"] == "Empty"
        consumer.close()
        consumer = None

        partitions = [TopicPartition("kp-groups", p) for p in range(3)]
        offsets = admin.list_group_offsets({"kp-admin-g": None})["kp-admin-g"]
        # 10 records and the transaction's COMMIT marker on partition 0
        assert {tp: o.offset for tp, o in offsets.items()} == dict(zip(partitions, [11, 0, 0]))
        assert admin.alter_group_offsets("kp-admin-g", {partitions[0]: OffsetAndMetadata(4, "", -1)}) == \
            {partitions[0]: NoError}
        assert admin.reset_group_offsets("kp-admin-g", {partitions[1]: OffsetSpec.LATEST}) == \
            {partitions[1]: {"error": NoError, "offset": 0}}
        assert admin.delete_group_offsets("kp-admin-g", [partitions[2]]) == {partitions[2]: NoError}
        offsets = admin.list_group_offsets({"kp-admin-g": None})["kp-admin-g"]
        assert {tp: o.offset for tp, o in offsets.items()} == {partitions[0]: 4, partitions[1]: 0}
        assert admin.delete_groups(["kp-admin-g"]) == {"kp-admin-g": "OK"}
        assert admin.describe_groups(["kp-admin-g"])["kp-admin-g"]["group_state"] == "Dead"

        (quorum,) = admin.describe_metadata_quorum()["topics"]
        (log,) = quorum["partitions"]
        assert (quorum["topic_name"], log["leader_id"], [v["replica_id"] for v in log["current_voters"]]) == \
            ("__cluster_metadata", 1, [1])
        assert log["current_voters"][0]["log_end_offset"] >= log["high_watermark"] > 0

        first = admin.describe_topic_partitions(["kp-groups"], response_partition_limit=2)
        assert [p["partition_index"] for p in first["topics"][0]["partitions"]] == [0, 1]
        assert first["next_cursor"] == {"topic_name": "kp-groups", "partition_index": 2}
        rest = admin.describe_topic_partitions(["kp-groups"], cursor=first["next_cursor"])
        assert [p["partition_index"] for p in rest["topics"][0]["partitions"]] == [2]
        assert rest["next_cursor"] is None

        elected = admin.elect_leaders(0, {"kp-groups": [0]}, raise_errors=False)
        assert [(r.topic, [(p.partition_id, p.error_code) for p in r.partition_result])
                for r in elected.replica_election_results] == [("kp-groups", [(0, 84)])]  # ELECTION_NOT_NEEDED
        assert admin.list_partition_reassignments() == {}

        upsert = UserScramCredentialUpsertion("kp-user", ScramMechanism.SCRAM_SHA_512, "secret", iterations=4096)
        assert admin.alter_user_scram_credentials([upsert]) == {"kp-user": None}
        credentials = admin.describe_user_scram_credentials(["kp-user"])["kp-user"]
        assert [(c["mechanism"], c["iterations"]) for c in credentials["credential_infos"]] == \
            [(ScramMechanism.SCRAM_SHA_512, 4096)]
        deletion = UserScramCredentialDeletion("kp-user", ScramMechanism.SCRAM_SHA_512)
        assert admin.alter_user_scram_credentials([deletion]) == {"kp-user": None}
        assert admin.describe_user_scram_credentials() == {}
    finally:
        for client in (producer, consumer, admin):
            if client is not None:
                client.close()


def test_confluent_kafka_administers_both_kinds_of_group_leaders_and_credentials(cluster):
    """librdkafka's group administration: ListGroups v5 with its type and state filters, DescribeGroups for a
    classic group and ConsumerGroupDescribe for a KIP-848 one, OffsetCommit as an administrator (refused while
    the group has members, as Kafka refuses it), DeleteGroups (NON_EMPTY_GROUP, then deleted); then ElectLeaders
    and the SCRAM credential APIs."""
    from confluent_kafka import (Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions, ConsumerGroupType,
                                 ElectionType, KafkaError, KafkaException, Producer, TopicPartition)
    from confluent_kafka.admin import (AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialDeletion, UserScramCredentialUpsertion)

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    assert admin.create_topics([NewTopic("ck-groups", 2, 1)], operation_timeout=20)["ck-groups"].result(30) is None
    eventually(lambda: topic_of(metadata(cluster), "ck-groups"), what="the topic")
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for value in range(6):
        producer.produce("ck-groups", value=b"%d" % value, partition=value % 2)
    assert producer.flush(30) == 0

    def joined(group_id: str, **config) -> Consumer:
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group_id,
                             "client.id": group_id, "auto.offset.reset": "earliest", **config})
        consumer.subscribe(["ck-groups"])
        eventually(lambda: consumer.poll(0.2) is not None and len(consumer.assignment()) == 2,
                   what=f"{group_id} assigned both partitions")
        return consumer

    classic, modern = joined("ck-classic"), joined("ck-848", **{"group.protocol": "consumer"})
    try:
        def listed(**filters) -> list:
            return sorted((g.group_id, g.type, g.state) for g in admin.list_consumer_groups(**filters).result(30).valid)

        stable = ConsumerGroupState.STABLE
        assert listed() == [("ck-848", ConsumerGroupType.CONSUMER, stable),
                            ("ck-classic", ConsumerGroupType.CLASSIC, stable)]
        assert listed(types={ConsumerGroupType.CONSUMER}) == [("ck-848", ConsumerGroupType.CONSUMER, stable)]
        assert listed(types={ConsumerGroupType.CLASSIC}, states={stable}) == \
            [("ck-classic", ConsumerGroupType.CLASSIC, stable)]

        def described(group_id: str):
            group = admin.describe_consumer_groups([group_id])[group_id].result(30)
            (member,) = group.members
            return (group.type, group.state, group.partition_assignor, member.client_id,
                    sorted(tp.partition for tp in member.assignment.topic_partitions))

        assert described("ck-classic") == (ConsumerGroupType.CLASSIC, stable, "range", "ck-classic", [0, 1])
        assert described("ck-848") == (ConsumerGroupType.CONSUMER, stable, "uniform", "ck-848", [0, 1])

        with pytest.raises(KafkaException) as refused:
            admin.delete_consumer_groups(["ck-848"])["ck-848"].result(30)
        assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
        request = ConsumerGroupTopicPartitions("ck-848", [TopicPartition("ck-groups", 0, 1)])
        (answer,) = admin.alter_consumer_group_offsets([request])["ck-848"].result(30).topic_partitions
        assert answer.error.code() == KafkaError.UNKNOWN_MEMBER_ID
    finally:
        classic.close()
        modern.close()

    assert described_state(admin, "ck-848") == ConsumerGroupState.EMPTY
    (answer,) = admin.alter_consumer_group_offsets([request])["ck-848"].result(30).topic_partitions
    assert (answer.offset, answer.error) == (1, None)
    (fetched,) = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("ck-848", [TopicPartition("ck-groups", 0)])])["ck-848"].result(30) \
        .topic_partitions
    assert fetched.offset == 1
    deleted = admin.delete_consumer_groups(["ck-848", "ck-classic"])
    assert [deleted[g].result(30) for g in ("ck-848", "ck-classic")] == [None, None]
    assert described_state(admin, "ck-848") == ConsumerGroupState.DEAD

    elected = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("ck-groups", 0)]).result(30)
    assert [error.code() for error in elected.values()] == [KafkaError.ELECTION_NOT_NEEDED]

    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
    upsert = UserScramCredentialUpsertion("ck-user", info, b"secret", b"salt-of-ck-user")
    assert admin.alter_user_scram_credentials([upsert])["ck-user"].result(30) is None
    description = admin.describe_user_scram_credentials(["ck-user"])["ck-user"].result(30)
    assert [(i.mechanism, i.iterations) for i in description.scram_credential_infos] == \
        [(ScramMechanism.SCRAM_SHA_256, 8192)]
    deletion = UserScramCredentialDeletion("ck-user", ScramMechanism.SCRAM_SHA_256)
    assert admin.alter_user_scram_credentials([deletion])["ck-user"].result(30) is None
    with pytest.raises(KafkaException) as missing:
        admin.describe_user_scram_credentials(["ck-user"])["ck-user"].result(30)
    assert missing.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND


def described_state(admin, group_id: str):
    return admin.describe_consumer_groups([group_id])[group_id].result(30).state


def test_a_producer_hears_why_the_cluster_cannot_create_its_topic(cluster):
    """This one-node cluster's default replication factor is 3, so the controller refuses to auto-create a topic:
    the node logs the refusal at once and, after the grace a restarting broker would need (15 s), answers its
    error in Metadata (as Kafka did before KRaft; Kafka 3.9 answers UNKNOWN_TOPIC_OR_PARTITION and logs it at
    debug level), so kafka-python fails the send with the cause instead of timing out on "Failed to update
    metadata" after max_block_ms."""
    from kafka import KafkaProducer
    from kafka.errors import InvalidReplicationFactorError

    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, max_block_ms=60000)
    try:
        with pytest.raises(InvalidReplicationFactorError):
            producer.send("kp-refused", value=b"lost").get(timeout=60)
    finally:
        producer.close()
    (refusal,) = eventually(lambda: [e for e in logged_events(cluster, "topic_auto_create_refused", 1)
                                     if e["topic"] == "kp-refused"], what="the refusal logged")
    assert (refusal["error"], refusal["reason"]) == ("INVALID_REPLICATION_FACTOR", "Unable to replicate the "
        "partition 3 time(s): The target replication factor of 3 cannot be reached because only 1 broker(s) are "
        "registered.")
    assert topic_of(metadata(cluster), "kp-refused") is None


def test_an_admin_client_made_as_the_cluster_starts_creates_its_topic(tmp_path):
    """librdkafka's AdminClient looks the controller up with its first Metadata request. A node answered it, in
    the half second before its broker registered, with no brokers and no topics, which librdkafka drops as a
    partial answer and does not ask again: CreateTopics waited until its timeout. The node now holds that
    Metadata until it knows a broker (broker/handlers_cluster.py), so the topic is created in about a second."""
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = LocalCluster(str(tmp_path), nodes=1, broker=FAST_BROKER_SETTINGS,
                           topic_defaults={"partitions": 1, "replication_factor": 1, "min_insync_replicas": 1})
    cluster.start()  # returns once the node accepts connections: before its broker has registered
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        assert admin.create_topics([NewTopic("early", 2, 1)])["early"].result(timeout=30) is None
        assert len(eventually(lambda: topic_of(metadata(cluster), "early"), what="the topic")["partitions"]) == 2
    finally:
        cluster.stop()
