"""Kafka 3.9's versions of the admin APIs (broker/handlers_admin.py, FindCoordinator, ApiVersions), sans-IO: real
BrokerCores and a real controller (tests/broker/test_broker_sans_io.Cluster), every request and answer through
the codec at the version under test. Each test names the JSON spec or the KIP whose version it checks."""

import uuid

import pytest

from broker import config_sources as cs
from broker.handlers_admin import BROKER_ONLY_CONFIG_TYPES, TOPIC_CONFIG_TYPES, config_type
from broker.apis import Deferred
from broker.core import IMAGE_WAIT_MS_MAX
from metadata.configs import BROKER_ONLY_CONFIGS, BROKER_TO_TOPIC_CONFIG, TOPIC_CONFIGS
from metadata.records import ConfigResourceType, QuotaEntityPart
from metadata.requests import (
    AclEntry,
    AlterClientQuotasRequest,
    CreatableTopic,
    CreateAclsRequest,
    CreateTopicsRequest,
    QuotaAlteration,
    QuotaOp,
)
from net.protocol import messages
from net.protocol.codec import ApiKey, Features, decode_response, encode_response
from net.protocol.types import NULL_UUID
from partitions.errors import ErrorCode
from security.acl import AclOperation as Op, AclPermissionType as Perm, Authorizer, AuthorizerSettings, PatternType
from security.acl import ResourceType as RT
from security.session import Session
from tests.broker.test_broker_sans_io import Cluster

CreateTopics = messages.CreateTopicsRequest
DeleteTopics = messages.DeleteTopicsRequest


def admin_call(cluster, api_key, version, request, broker_id=1):
    """Send to `broker_id`; a request forwarded to the controller is answered once the controller answered."""
    answer = cluster.call(broker_id, api_key, version, request)
    if not isinstance(answer, Deferred):
        return answer
    cluster.deliver_controller_calls()
    (header, response), = [(h, r) for request_id, h, r in cluster.apis[broker_id].poll(cluster.now_ms)
                           if request_id == answer.request_id]
    return decode_response(api_key, version, encode_response(header, response)[4:])[1]


def create(cluster, version, name, partitions=2, configs=(), validate_only=False):
    request = CreateTopics(topics=[CreateTopics.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=-1, assignments=[],
        configs=[CreateTopics.CreatableTopicConfig(name=k, value=v) for k, v in configs])], timeout_ms=5000,
        validate_only=validate_only)
    return admin_call(cluster, ApiKey.CREATE_TOPICS, version, request)


def delete(cluster, version, *topics):
    """`topics`: names (v0-5), or (name, id) pairs (v6)."""
    if version < 6:
        request = DeleteTopics(topic_names=list(topics), timeout_ms=5000)
        return admin_call(cluster, ApiKey.DELETE_TOPICS, version, request)
    return admin_call(cluster, ApiKey.DELETE_TOPICS, version, DeleteTopics(
        topics=[DeleteTopics.DeleteTopicState(name=name, topic_id=topic_id) for name, topic_id in topics],
        timeout_ms=5000))


def topic_id(cluster, name):
    return uuid.UUID(bytes=cluster.images[1].topics.by_name[name].topic_id)


def describe(cluster, version, resource_type, name):
    request_class = messages.DescribeConfigsRequest
    request = request_class(resources=[request_class.DescribeConfigsResource(
        resource_type=resource_type, resource_name=name, configuration_keys=None)], include_synonyms=True,
        include_documentation=version >= 3)
    (result,) = cluster.call(1, ApiKey.DESCRIBE_CONFIGS, version, request).results
    assert result.error_code == ErrorCode.NONE, result.error_message
    return {config.name: config for config in result.configs}


def secure(cluster, principal, *acls):
    cluster.commit(CreateAclsRequest(tuple(AclEntry(rtype, name, PatternType.LITERAL, principal, "*", op, Perm.ALLOW)
                                           for rtype, name, op in acls)))
    for apis in cluster.apis.values():
        apis.authorizer = Authorizer(AuthorizerSettings(frozenset({"User:admin"})))
        apis.session = Session("SASL_SSL", "SASL_SSL", "127.0.0.1", principal, authenticated=True)


# ---- CreateTopics v5-v7 (KIP-525; CreateTopicsResponse.json v7) ----------------------------------------------

def test_create_topics_v5_answers_the_new_topics_partitions_replication_factor_and_configs_as_describe_does():
    cluster = Cluster()
    (created,) = create(cluster, 5, "n", partitions=2, configs=[("retention.ms", "1000")]).topics
    assert (created.error_code, created.num_partitions, created.replication_factor) == (ErrorCode.NONE, 2, 3)
    assert created.topic_config_error_code == ErrorCode.NONE
    configs = {c.name: (c.value, c.config_source, c.read_only, c.is_sensitive) for c in created.configs}
    assert configs["retention.ms"] == ("1000", cs.TOPIC_CONFIG, False, False)
    assert configs["cleanup.policy"] == ("delete", cs.DEFAULT_CONFIG, False, False)
    # every config, with the value and source DescribeConfigs gives once the topic is in the image
    described = describe(cluster, 2, ConfigResourceType.TOPIC, "n")
    assert configs == {name: (c.value, c.config_source, c.read_only, c.is_sensitive) for name, c in described.items()}
    # v4 has none of these fields: the answer decodes with their defaults
    (older,) = create(cluster, 4, "m").topics
    assert (older.error_code, older.num_partitions, older.replication_factor, older.configs) == (0, -1, -1, [])


def test_create_topics_v5_names_a_dynamic_broker_default_as_the_source():
    from metadata.requests import AlterableConfig, ConfigResource, IncrementalAlterConfigsRequest

    cluster = Cluster()
    cluster.commit(IncrementalAlterConfigsRequest(resources=(ConfigResource(
        ConfigResourceType.BROKER, "", (AlterableConfig("log.retention.ms", "3600000"),)),)))
    (created,) = create(cluster, 5, "n").topics
    retention = {c.name: c for c in created.configs}["retention.ms"]
    assert (retention.value, retention.config_source) == ("3600000", cs.DYNAMIC_DEFAULT_BROKER_CONFIG)


def test_create_topics_v7_answers_the_topic_id_the_metadata_then_carries():
    cluster = Cluster()
    (created,) = create(cluster, 7, "n").topics
    assert created.error_code == ErrorCode.NONE and created.topic_id == topic_id(cluster, "n") != NULL_UUID
    (again,) = create(cluster, 7, "n").topics  # an error answers no id, no partitions, no configs
    assert again.error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert (again.topic_id, again.num_partitions, again.configs) == (NULL_UUID, -1, [])
    assert create(cluster, 6, "o").topics[0].topic_id == NULL_UUID  # v6 has no id field


def test_create_topics_v5_validate_only_answers_what_would_be_created_and_creates_nothing():
    cluster = Cluster()
    (validated,) = create(cluster, 5, "n", partitions=4, configs=[("cleanup.policy", "compact")],
                          validate_only=True).topics
    assert (validated.error_code, validated.num_partitions, validated.replication_factor) == (0, 4, 3)
    assert {c.name: c.value for c in validated.configs}["cleanup.policy"] == "compact"
    assert "n" not in cluster.images[1].topics.by_name


def test_create_topics_v5_without_describe_configs_answers_a_config_error_instead_of_the_configs():
    cluster = Cluster()
    secure(cluster, "User:maker", (RT.TOPIC, "n", Op.CREATE), (RT.TOPIC, "d", Op.CREATE),
           (RT.TOPIC, "d", Op.DESCRIBE_CONFIGS))
    (hidden,) = create(cluster, 5, "n").topics
    assert (hidden.error_code, hidden.topic_config_error_code) == (ErrorCode.NONE, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    assert (hidden.num_partitions, hidden.replication_factor, hidden.configs) == (-1, -1, [])
    assert "n" in cluster.images[1].topics.by_name
    (shown,) = create(cluster, 5, "d").topics
    assert shown.topic_config_error_code == ErrorCode.NONE and shown.num_partitions == 2 and shown.configs
    (denied,) = create(cluster, 5, "x").topics
    assert denied.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED and denied.num_partitions == -1


# ---- DeleteTopics v5-v6 (DeleteTopicsRequest.json v6, Kafka's ControllerApis.deleteTopics) --------------------

def test_delete_topics_v6_deletes_by_id_or_by_name_and_answers_the_ids():
    cluster = Cluster()
    for name in ("a", "b"):
        create(cluster, 7, name)
    ids = {name: topic_id(cluster, name) for name in ("a", "b")}
    unknown = uuid.UUID(int=12345)
    answers = delete(cluster, 6, (None, ids["a"]), ("b", NULL_UUID), (None, unknown), ("a", ids["a"]),
                     (None, NULL_UUID)).responses
    assert [(r.name, r.topic_id, r.error_code) for r in answers] == [
        ("a", ids["a"], ErrorCode.NONE),
        ("b", ids["b"], ErrorCode.NONE),
        (None, unknown, ErrorCode.UNKNOWN_TOPIC_ID),
        ("a", ids["a"], ErrorCode.INVALID_REQUEST),  # both a name and an id
        (None, NULL_UUID, ErrorCode.INVALID_REQUEST),  # neither
    ]
    assert [r.error_message is None for r in answers] == [True, True, False, False, False]
    assert not {"a", "b"} & set(cluster.images[1].topics.by_name)


def test_delete_topics_v5_answers_an_error_message_and_v4_none():
    cluster = Cluster()
    (missing,) = delete(cluster, 5, "nope").responses
    assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and missing.error_message
    assert delete(cluster, 4, "nope").responses[0].error_message is None  # v4 has no message field


def test_delete_topics_v6_by_id_names_a_refused_topic_only_to_a_principal_that_may_describe_it():
    cluster = Cluster()
    for name in ("seen", "hidden", "mine"):
        create(cluster, 7, name)
    ids = {name: topic_id(cluster, name) for name in ("seen", "hidden", "mine")}
    secure(cluster, "User:u", (RT.TOPIC, "seen", Op.DESCRIBE), (RT.TOPIC, "mine", Op.DELETE))
    answers = delete(cluster, 6, *[(None, ids[name]) for name in ("seen", "hidden", "mine")]).responses
    assert [(r.name, r.error_code) for r in answers] == [
        ("seen", ErrorCode.TOPIC_AUTHORIZATION_FAILED), (None, ErrorCode.TOPIC_AUTHORIZATION_FAILED),
        ("mine", ErrorCode.NONE)]
    remaining = set(cluster.images[1].topics.by_name)
    assert {"seen", "hidden"} <= remaining and "mine" not in remaining


# ---- KIP-599's strict versions: CreateTopics v6+, DeleteTopics v5+, CreatePartitions v3+ ------------------------

def quota_exceeded_cluster():
    """A cluster whose client "test" (every request's client id here) has used its whole mutation burst and
    more: 2 partitions a second, a burst of 22; 30 partitions created at permissive v5."""
    cluster = Cluster()
    cluster.commit(AlterClientQuotasRequest((QuotaAlteration((QuotaEntityPart("client-id", "test"),),
                                                             (QuotaOp("controller_mutation_rate", 2.0, False),)),)))
    create(cluster, 7, "spare", partitions=1)
    permissive = create(cluster, 5, "big", partitions=29)
    assert permissive.topics[0].error_code == ErrorCode.NONE and permissive.throttle_time_ms > 0
    return cluster


def test_strict_create_topics_refuses_a_client_over_its_mutation_quota_and_permissive_accepts():
    cluster = quota_exceeded_cluster()
    refused = create(cluster, 6, "late")
    assert refused.topics[0].error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED and refused.throttle_time_ms > 0
    assert "late" not in cluster.images[1].topics.by_name
    assert create(cluster, 6, "check", validate_only=True).topics[0].error_code == ErrorCode.NONE  # never counted
    assert create(cluster, 5, "late").topics[0].error_code == ErrorCode.NONE


def test_strict_delete_topics_and_create_partitions_refuse_a_client_over_its_mutation_quota():
    cluster = quota_exceeded_cluster()
    (refused,) = delete(cluster, 5, "spare").responses
    assert refused.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED and "spare" in cluster.images[1].topics.by_name
    (by_id,) = delete(cluster, 6, (None, topic_id(cluster, "spare"))).responses
    assert (by_id.name, by_id.error_code) == ("spare", ErrorCode.THROTTLING_QUOTA_EXCEEDED)
    request_class = messages.CreatePartitionsRequest
    grow = request_class(topics=[request_class.CreatePartitionsTopic(name="big", count=30, assignments=None)],
                         timeout_ms=5000, validate_only=False)
    assert admin_call(cluster, ApiKey.CREATE_PARTITIONS, 3, grow).results[0].error_code == \
        ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert admin_call(cluster, ApiKey.CREATE_PARTITIONS, 2, grow).results[0].error_code == ErrorCode.NONE
    assert delete(cluster, 4, "spare").responses[0].error_code == ErrorCode.NONE
    assert len(cluster.images[1].topics.by_name["big"].partitions) == 30


# ---- the flexible versions that change nothing else -----------------------------------------------------------

def test_flexible_versions_answer_as_the_versions_before_them():
    cluster = Cluster()
    create(cluster, 7, "t", partitions=1)
    request_class = messages.CreatePartitionsRequest
    for version, count in ((1, 2), (2, 3), (3, 4)):
        grow = request_class(topics=[request_class.CreatePartitionsTopic(name="t", count=count, assignments=None)],
                             timeout_ms=5000, validate_only=False)
        assert admin_call(cluster, ApiKey.CREATE_PARTITIONS, version, grow).results[0].error_code == ErrorCode.NONE
    assert len(cluster.images[1].topics.by_name["t"].partitions) == 4
    for version, incremental in ((1, False), (2, False), (0, True), (1, True)):
        request_class = messages.IncrementalAlterConfigsRequest if incremental else messages.AlterConfigsRequest
        config = request_class.AlterableConfig(name="retention.ms", value=f"{1000 + version}",
                                               **({"config_operation": 0} if incremental else {}))
        request = request_class(resources=[request_class.AlterConfigsResource(
            resource_type=ConfigResourceType.TOPIC, resource_name="t", configs=[config])], validate_only=False)
        api_key = ApiKey.INCREMENTAL_ALTER_CONFIGS if incremental else ApiKey.ALTER_CONFIGS
        assert admin_call(cluster, api_key, version, request).responses[0].error_code == ErrorCode.NONE
        assert describe(cluster, 4, ConfigResourceType.TOPIC, "t")["retention.ms"].value == f"{1000 + version}"


# ---- DescribeConfigs v3-v4 (DescribeConfigsResponse.json: ConfigType, Documentation) ----------------------------

@pytest.mark.parametrize("version", [3, 4])
def test_describe_configs_v3_answers_each_configs_type_and_null_documentation(version):
    cluster = Cluster()
    create(cluster, 7, "t")
    topic = describe(cluster, version, ConfigResourceType.TOPIC, "t")
    assert {name: topic[name].config_type for name in ("retention.ms", "segment.bytes", "cleanup.policy",
                                                       "min.cleanable.dirty.ratio",
                                                       "unclean.leader.election.enable", "compression.type")} == {
        "retention.ms": 5, "segment.bytes": 3, "cleanup.policy": 7, "min.cleanable.dirty.ratio": 6,
        "unclean.leader.election.enable": 1, "compression.type": 2}  # LONG, INT, LIST, DOUBLE, BOOLEAN, STRING
    assert all(config.documentation is None for config in topic.values())
    broker = describe(cluster, version, ConfigResourceType.BROKER, "1")
    assert (broker["log.retention.ms"].config_type, broker["broker.id"].config_type) == (5, 3)
    assert all(config.config_type == 0 for config in describe(cluster, 2, ConfigResourceType.TOPIC, "t").values())


def test_every_config_flotilla_describes_has_its_kafka_type():
    assert set(TOPIC_CONFIG_TYPES) == set(TOPIC_CONFIGS)
    assert set(BROKER_ONLY_CONFIGS) <= set(BROKER_ONLY_CONFIG_TYPES)
    assert all(config_type(ConfigResourceType.BROKER, name) != 0 for name in BROKER_TO_TOPIC_CONFIG)
    assert config_type(ConfigResourceType.TOPIC, "no.such.config") == 0


# ---- FindCoordinator v6 (KIP-932's share key type) and ApiVersions v4 (KAFKA-17011) ------------------------------

def find(cluster, version, key_type, key="g"):
    request = messages.FindCoordinatorRequest(key=key, key_type=key_type, coordinator_keys=[key])
    response = cluster.call(1, ApiKey.FIND_COORDINATOR, version, request)
    return response.coordinators[0].error_code if version >= 4 else response.error_code


def test_find_coordinator_v6_answers_the_share_key_type_as_kafka_3_9_does():
    from broker.coordinators import CoordinatorApis

    cluster = Cluster()
    cluster.apis[1].register(CoordinatorApis(cluster.apis[1]))  # no coordinator services: none is asked here
    assert find(cluster, 5, 2) == ErrorCode.INVALID_REQUEST  # before v6 the key type does not exist
    assert find(cluster, 3, 2) == ErrorCode.INVALID_REQUEST
    assert find(cluster, 6, 2) == ErrorCode.COORDINATOR_NOT_AVAILABLE  # known, but no share coordinator
    assert find(cluster, 6, 3) == ErrorCode.INVALID_REQUEST  # no such key type
    secure(cluster, "User:client", (RT.GROUP, "g", Op.DESCRIBE))
    assert find(cluster, 6, 2) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED  # brokers (CLUSTER_ACTION) only
    secure(cluster, "User:broker", (RT.CLUSTER, "kafka-cluster", Op.CLUSTER_ACTION))
    assert find(cluster, 6, 2) == ErrorCode.COORDINATOR_NOT_AVAILABLE


def test_api_versions_v4_lists_features_from_level_0_and_v3_leaves_them_out():
    cluster = Cluster()
    cluster.apis[1].features = lambda: Features({"transaction.version": (0, 2), "kraft.version": (1, 1)},
                                                {"transaction.version": 2}, 7)
    request = messages.ApiVersionsRequest(client_software_name="t", client_software_version="1")
    v4 = cluster.call(1, ApiKey.API_VERSIONS, 4, request)
    assert [(f.name, f.min_version) for f in v4.supported_features] == [
        ("kraft.version", 1), ("transaction.version", 0)]
    v3 = cluster.call(1, ApiKey.API_VERSIONS, 3, request)
    assert [(f.name, f.min_version) for f in v3.supported_features] == [("kraft.version", 1)]
    assert v3.finalized_features == v4.finalized_features != []  # finalized levels are the same in both
    served = {(k.api_key, k.min_version, k.max_version) for k in v4.api_keys}
    assert {(ApiKey.API_VERSIONS, 0, 4), (ApiKey.CREATE_TOPICS, 0, 7), (ApiKey.DELETE_TOPICS, 0, 6),
            (ApiKey.CREATE_PARTITIONS, 0, 3), (ApiKey.DELETE_RECORDS, 0, 2), (ApiKey.DESCRIBE_CONFIGS, 0, 4),
            (ApiKey.ALTER_CONFIGS, 0, 2), (ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1)} <= served


def forwarded_create_answered_early(cluster, broker_id, name):
    """CreateTopics sent to `broker_id`, forwarded, committed and answered by the controller while the broker's
    image trails (cut off from the metadata): (the deferred answer, the broker)."""
    request = CreateTopics(topics=[CreateTopics.CreatableTopic(
        name=name, num_partitions=1, replication_factor=-1, assignments=[], configs=[])], timeout_ms=5000)
    deferred = cluster.call(broker_id, ApiKey.CREATE_TOPICS, 7, request)
    broker = cluster.brokers[broker_id]
    (call,) = broker.take_controller_requests()
    assert call.read_your_write
    response = cluster.commit(call.request, cut_off={broker_id})
    broker.on_controller_response(call, response, cluster.now_ms, cluster.raft_index)
    return deferred, broker


def test_a_forwarded_admin_write_is_answered_once_this_brokers_image_has_it():
    """Broker 2 names itself the controller to clients and forwards their writes; the controller answers once
    it has committed one, when broker 2's image may not have it yet. The answer waits for the image (at most
    IMAGE_WAIT_MS_MAX), so the client's next Metadata here lists the topic it created."""
    cluster = Cluster()
    deferred, broker = forwarded_create_answered_early(cluster, 2, "mine")
    broker.tick(cluster.now_ms)
    assert cluster.apis[2].poll(cluster.now_ms) == [] and broker.awaiting_image  # an observer fetches at once
    held_index = cluster.raft_index
    cluster.apply_entry(2, *cluster.log[-1])
    assert broker.image.provenance.raft_index == held_index
    broker.tick(cluster.now_ms)
    ((request_id, _, answer),) = cluster.apis[2].poll(cluster.now_ms)
    assert request_id == deferred.request_id and answer.topics[0].error_code == ErrorCode.NONE
    assert not broker.awaiting_image and broker.image_waits_expired == 0
    metadata = cluster.call(2, ApiKey.METADATA, 12, messages.MetadataRequest(
        topics=[messages.MetadataRequest.MetadataRequestTopic(name="mine")], allow_auto_topic_creation=False))
    assert metadata.topics[0].error_code == ErrorCode.NONE and len(metadata.topics[0].partitions) == 1


def test_a_forwarded_answer_goes_out_when_the_image_does_not_catch_up_in_time():
    cluster = Cluster()
    deferred, broker = forwarded_create_answered_early(cluster, 3, "late")
    broker.tick(cluster.now_ms + IMAGE_WAIT_MS_MAX - 1)
    assert cluster.apis[3].poll(cluster.now_ms) == []
    broker.tick(cluster.now_ms + IMAGE_WAIT_MS_MAX)
    assert broker.image_waits_expired == 1
    ((request_id, _, answer),) = cluster.apis[3].poll(cluster.now_ms)
    assert request_id == deferred.request_id and answer.topics[0].error_code == ErrorCode.NONE


def test_calls_the_broker_makes_for_itself_are_answered_without_waiting_for_the_image():
    cluster = Cluster()
    broker = cluster.brokers[2]
    answers = []
    broker.call_controller(CreateTopicsRequest(topics=(CreatableTopic(name="auto", num_partitions=1),)),
                           lambda response, now_ms: answers.append(response))
    (call,) = broker.take_controller_requests()
    assert not call.read_your_write
    broker.on_controller_response(call, cluster.commit(call.request, cut_off={2}), cluster.now_ms, cluster.raft_index)
    assert len(answers) == 1
