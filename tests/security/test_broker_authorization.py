"""Authorization in the broker's handlers and the authentication gate of the dispatcher, sans-IO: real
BrokerCores and a real controller (tests/broker/test_broker_sans_io.Cluster), requests through the codec."""

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.config import Listener
from broker.security_config import SecuritySettings
from metadata.requests import AclEntry, AlterUserScramCredentialsRequest, CreateAclsRequest, ScramUpsertion
from net.dispatcher import KafkaDispatcher
from net.protocol import messages
from net.protocol.codec import ApiKey, RequestHeader, decode_response, encode_request
from net.server import CloseAfter, CloseConnection
from partitions.errors import ErrorCode
from security.acl import AclOperation as Op, AclPermissionType as Perm, Authorizer, AuthorizerSettings, PatternType
from security.acl import ResourceType as RT
from security.sasl import ScramMechanism
from net.client.acls import new_scram_upsert
from security.session import Session
from tests.broker.test_broker_sans_io import Cluster, fetch_request, produce_request


def allow(rtype, name, principal, op, pattern=PatternType.LITERAL):
    return AclEntry(rtype, name, pattern, principal, "*", op, Perm.ALLOW)


@pytest.fixture
def secured():
    from metadata.requests import CreatableTopic, CreateTopicsRequest

    cluster = Cluster()
    for name in ("a", "b", "orders-eu"):
        response = cluster.commit(CreateTopicsRequest(topics=(CreatableTopic(name=name, num_partitions=1,
                                                                             replication_factor=3),)))
        assert response.topics[0].error_code == ErrorCode.NONE
    cluster.commit(CreateAclsRequest((
        allow(RT.TOPIC, "a", "User:alice", Op.READ), allow(RT.GROUP, "g", "User:alice", Op.READ),
        allow(RT.TOPIC, "orders-", "User:bob", Op.WRITE, PatternType.PREFIXED),
        allow(RT.TOPIC, "a", "User:carol", Op.READ),
        AclEntry(RT.TOPIC, "a", PatternType.LITERAL, "User:carol", "*", Op.READ, Perm.DENY))))
    for apis in cluster.apis.values():
        apis.authorizer = Authorizer(AuthorizerSettings(frozenset({"User:admin"})))
    return cluster


def as_user(cluster, principal):
    for apis in cluster.apis.values():
        apis.session = Session("SASL_SSL", "SASL_SSL", "127.0.0.1", principal, authenticated=True)


def leader(cluster, topic):
    return cluster.images[1].topics.by_name[topic].partitions[0].leader


def produce_code(cluster, topic):
    response = cluster.call(leader(cluster, topic), ApiKey.PRODUCE, 8, produce_request(topic, 0, [b"v"], acks=1))
    return response.responses[0].partition_responses[0].error_code


def fetch_code(cluster, topic):
    response = cluster.call(leader(cluster, topic), ApiKey.FETCH, 11, fetch_request(topic, 0, 0))
    return response.responses[0].partitions[0].error_code


def metadata_topics(cluster, names=None):
    request = messages.MetadataRequest(topics=None if names is None else [
        messages.MetadataRequest.MetadataRequestTopic(name=n) for n in names], allow_auto_topic_creation=False)
    return {t.name: t.error_code for t in cluster.call(1, ApiKey.METADATA, 8, request).topics}


def test_a_reader_reads_but_does_not_write_and_does_not_see_other_topics(secured):
    as_user(secured, "User:alice")
    assert fetch_code(secured, "a") == ErrorCode.NONE
    assert produce_code(secured, "a") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert fetch_code(secured, "b") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert metadata_topics(secured) == {"a": ErrorCode.NONE}
    assert metadata_topics(secured, ["b"]) == {"b": ErrorCode.TOPIC_AUTHORIZATION_FAILED}


def test_prefixed_acls_deny_wins_and_super_users(secured):
    as_user(secured, "User:bob")
    assert produce_code(secured, "orders-eu") == ErrorCode.NONE
    assert produce_code(secured, "a") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    as_user(secured, "User:carol")
    assert fetch_code(secured, "a") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    as_user(secured, "User:admin")
    assert produce_code(secured, "b") == ErrorCode.NONE and fetch_code(secured, "b") == ErrorCode.NONE
    assert set(metadata_topics(secured)) == {"a", "b", "orders-eu"}


def test_acl_administration_needs_cluster_alter(secured):
    as_user(secured, "User:alice")
    request = messages.CreateAclsRequest(creations=[messages.CreateAclsRequest.AclCreation(
        resource_type=RT.TOPIC, resource_name="b", resource_pattern_type=PatternType.LITERAL,
        principal="User:alice", host="*", operation=Op.READ, permission_type=Perm.ALLOW)])
    response = secured.call(1, ApiKey.CREATE_ACLS, 3, request)
    assert response.results[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    describe = messages.DescribeAclsRequest(resource_type_filter=RT.ANY, resource_name_filter=None,
                                            pattern_type_filter=PatternType.ANY, principal_filter=None,
                                            host_filter=None, operation=Op.ANY, permission_type=Perm.ANY)
    assert secured.call(1, ApiKey.DESCRIBE_ACLS, 3, describe).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    as_user(secured, "User:admin")
    described = secured.call(1, ApiKey.DESCRIBE_ACLS, 3, describe)
    assert described.error_code == ErrorCode.NONE
    assert sum(len(r.acls) for r in described.resources) == 5


def test_without_an_authorizer_the_acl_apis_answer_security_disabled():
    cluster = Cluster()
    describe = messages.DescribeAclsRequest(resource_type_filter=RT.ANY, resource_name_filter=None,
                                            pattern_type_filter=PatternType.ANY, principal_filter=None,
                                            host_filter=None, operation=Op.ANY, permission_type=Perm.ANY)
    assert cluster.call(1, ApiKey.DESCRIBE_ACLS, 3, describe).error_code == ErrorCode.SECURITY_DISABLED


# ---- the dispatcher's authentication gate ---------------------------------------------------------------------

SASL_LISTENER = Listener("SASL_PLAINTEXT", "127.0.0.1", 9093, "SASL_PLAINTEXT")
SECURITY = SecuritySettings(plain_users={"admin": "admin-secret"}, connection_failed_authentication_delay_ms=100)


def dispatcher(cluster):
    gate = KafkaDispatcher(cluster.apis[1], lambda: cluster.now_ms, lambda: None, security=SECURITY)
    gate.connection_opened(1, "127.0.0.1", SASL_LISTENER, None)
    return gate


def frame(api_key, version, request, correlation_id=7):
    return encode_request(RequestHeader(api_key, version, correlation_id, "test"), request)[4:]


def answer(api_key, version, reply):
    data = reply.reply if isinstance(reply, CloseAfter) else reply
    return decode_response(api_key, version, data[4:])[1]


def test_nothing_but_the_sasl_apis_is_served_before_authentication(secured):
    gate = dispatcher(secured)
    versions = answer(ApiKey.API_VERSIONS, 3, gate.handle_frame(1, frame(ApiKey.API_VERSIONS, 3,
                                                                          messages.ApiVersionsRequest())))
    assert versions.error_code == ErrorCode.NONE
    assert {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE} <= {k.api_key for k in versions.api_keys}
    with pytest.raises(CloseConnection):
        gate.handle_frame(1, frame(ApiKey.METADATA, 8, messages.MetadataRequest(topics=None)))


def test_a_failed_authentication_is_answered_after_the_delay_then_closed(secured):
    gate = dispatcher(secured)
    handshake = answer(ApiKey.SASL_HANDSHAKE, 1, gate.handle_frame(1, frame(
        ApiKey.SASL_HANDSHAKE, 1, messages.SaslHandshakeRequest(mechanism="PLAIN"))))
    assert handshake.error_code == ErrorCode.NONE and "SCRAM-SHA-512" in handshake.mechanisms
    reply = gate.handle_frame(1, frame(ApiKey.SASL_AUTHENTICATE, 2,
                                       messages.SaslAuthenticateRequest(auth_bytes=b"\x00admin\x00wrong")))
    assert isinstance(reply, CloseAfter) and reply.delay_s == pytest.approx(0.1)
    assert answer(ApiKey.SASL_AUTHENTICATE, 2, reply).error_code == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_unknown_mechanism_is_refused_and_closed(secured):
    reply = dispatcher(secured).handle_frame(1, frame(ApiKey.SASL_HANDSHAKE, 1,
                                                      messages.SaslHandshakeRequest(mechanism="GSSAPI")))
    assert isinstance(reply, CloseAfter)
    assert answer(ApiKey.SASL_HANDSHAKE, 1, reply).error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM


def test_authenticated_scram_user_is_the_principal_of_its_requests(secured):
    import scramp

    salt, salted = new_scram_upsert(ScramMechanism.SCRAM_SHA_256, "alice-secret", 4096)
    secured.commit(AlterUserScramCredentialsRequest(upsertions=(
        ScramUpsertion("alice", ScramMechanism.SCRAM_SHA_256, 4096, salt, salted),)))
    gate = dispatcher(secured)
    gate.handle_frame(1, frame(ApiKey.SASL_HANDSHAKE, 1, messages.SaslHandshakeRequest(mechanism="SCRAM-SHA-256")))
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "alice-secret")
    first = answer(ApiKey.SASL_AUTHENTICATE, 2, gate.handle_frame(1, frame(
        ApiKey.SASL_AUTHENTICATE, 2, messages.SaslAuthenticateRequest(auth_bytes=client.get_client_first().encode()))))
    client.set_server_first(bytes(first.auth_bytes).decode())
    final = answer(ApiKey.SASL_AUTHENTICATE, 2, gate.handle_frame(1, frame(
        ApiKey.SASL_AUTHENTICATE, 2, messages.SaslAuthenticateRequest(auth_bytes=client.get_client_final().encode()))))
    client.set_server_final(bytes(final.auth_bytes).decode())
    reply = gate.handle_frame(1, frame(ApiKey.METADATA, 8, messages.MetadataRequest(
        topics=None, allow_auto_topic_creation=False)))
    assert {t.name for t in answer(ApiKey.METADATA, 8, reply).topics} == {"a"}  # alice may describe only a


def log_end_offsets(cluster):
    return {(b, key): hosted.log.log_end_offset for b, broker in cluster.brokers.items()
            for key, hosted in broker.partitions.items()}


API_KEYS = sorted(messages.REQUESTS)


@st.composite
def hostile_frames(draw):
    """Garbage, truncated and well-formed frames of every API (the shapes a fuzzer reaches)."""
    kind = draw(st.integers(0, 2))
    if kind == 0:
        return draw(st.binary(max_size=200))
    api_key = draw(st.sampled_from(API_KEYS + [-1, 17, 36, 32000, 9999]))
    head = struct.pack(">hhi", api_key, draw(st.integers(-1, 14)), draw(st.integers(-2**31, 2**31 - 1)))
    return head + draw(st.binary(max_size=120))


@settings(max_examples=2_000, deadline=None, database=None)
@given(st.lists(hostile_frames(), min_size=1, max_size=5))
def test_hostile_frames_before_authentication_change_nothing(frames):
    cluster = FUZZ_CLUSTER
    before = log_end_offsets(cluster)
    gate = dispatcher(cluster)
    for data in frames:
        try:
            reply = gate.handle_frame(1, data)
        except CloseConnection:
            break
        if isinstance(reply, CloseAfter):
            break
    gate.connection_closed(1)
    assert log_end_offsets(cluster) == before


def _fuzz_cluster():
    from metadata.requests import CreatableTopic, CreateTopicsRequest

    cluster = Cluster()
    cluster.commit(CreateTopicsRequest(topics=(CreatableTopic(name="t", num_partitions=3, replication_factor=3),)))
    for partition in range(3):  # something in every log, so a change would show
        leader_id = cluster.images[1].topics.by_name["t"].partitions[partition].leader
        cluster.call(leader_id, ApiKey.PRODUCE, 8, produce_request("t", partition, [b"before"], acks=1))
    assert len(log_end_offsets(cluster)) == 9 and all(log_end_offsets(cluster)[k] >= 0 for k in log_end_offsets(cluster))
    return cluster


FUZZ_CLUSTER = _fuzz_cluster()


def mutated(rng: random.Random, frame_bytes: bytes, changes: int) -> bytes:
    """`frame_bytes` with `changes` random byte flips, truncations or extensions."""
    template = bytearray(frame_bytes)
    for _ in range(changes):
        choice = rng.random()
        if choice < 0.5 and template:
            template[rng.randrange(len(template))] = rng.randrange(256)
        elif choice < 0.75:
            del template[rng.randrange(len(template) + 1):]
        else:
            template += rng.randbytes(rng.randint(1, 16))
    return bytes(template)


def test_100000_random_frames_before_authentication_change_nothing():
    """The issue's bar: at least 100,000 hostile frames against the pre-authentication path (seeded, so a
    failure reproduces), the broker answering or closing each, and no log changing."""
    rng = random.Random(20261125)
    cluster = FUZZ_CLUSTER
    before = log_end_offsets(cluster)
    templates = [frame(ApiKey.PRODUCE, 8, produce_request("t", 0, [b"v"])), frame(ApiKey.API_VERSIONS, 3,
                 messages.ApiVersionsRequest()), frame(ApiKey.SASL_HANDSHAKE, 1, messages.SaslHandshakeRequest(
                 mechanism="PLAIN")), frame(ApiKey.SASL_AUTHENTICATE, 2, messages.SaslAuthenticateRequest(
                 auth_bytes=b"\x00admin\x00x"))]
    sent = closed = 0
    connection = 0
    gate = dispatcher(cluster)
    while sent < 100_000:
        template = mutated(rng, rng.choice(templates), rng.randint(0, 4))
        sent += 1
        try:
            reply = gate.handle_frame(connection, template)
            done = isinstance(reply, CloseAfter)
        except CloseConnection:
            done = True
        if done:
            closed += 1
            gate.connection_closed(connection)
            connection += 1
            gate.connection_opened(connection, "127.0.0.1", SASL_LISTENER, None)
    assert closed > 10_000  # most mutations are refused with a closed connection
    assert log_end_offsets(cluster) == before


def test_10000_random_frames_during_a_reauthentication_change_nothing():
    """KIP-368's path: a connection authenticated with a session lifetime starts a re-authentication, then
    gets a hostile frame (seeded); the broker answers or closes each, never serves one as a request, and no
    log changes."""
    rng = random.Random(20261127)
    cluster = FUZZ_CLUSTER
    before = log_end_offsets(cluster)
    security = SecuritySettings(plain_users={"admin": "admin-secret"}, connection_failed_authentication_delay_ms=100,
                                connections_max_reauth_ms=60_000)
    clock = [cluster.now_ms]
    gate = KafkaDispatcher(cluster.apis[1], lambda: clock[0], lambda: None, security=security)
    handshake = frame(ApiKey.SASL_HANDSHAKE, 1, messages.SaslHandshakeRequest(mechanism="PLAIN"))
    authenticate = frame(ApiKey.SASL_AUTHENTICATE, 2, messages.SaslAuthenticateRequest(auth_bytes=b"\x00admin\x00admin-secret"))
    templates = [frame(ApiKey.PRODUCE, 8, produce_request("t", 0, [b"v"])), authenticate, handshake,
                 frame(ApiKey.METADATA, 8, messages.MetadataRequest(topics=None))]
    outcomes = {"closed": 0, "answered": 0}
    for connection in range(1, 10_001):
        gate.connection_opened(connection, "127.0.0.1", SASL_LISTENER, None)
        gate.handle_frame(connection, handshake)
        lifetime = answer(ApiKey.SASL_AUTHENTICATE, 2, gate.handle_frame(connection, authenticate)).session_lifetime_ms
        assert lifetime == 60_000
        clock[0] += 1_000  # a re-authentication may start a second after the last
        assert answer(ApiKey.SASL_HANDSHAKE, 1, gate.handle_frame(connection, handshake)).error_code == ErrorCode.NONE
        template = mutated(rng, rng.choice(templates), rng.randint(1, 4))
        try:
            reply = gate.handle_frame(connection, template)
            outcomes["closed" if isinstance(reply, CloseAfter) else "answered"] += 1
            if not isinstance(reply, CloseAfter):  # only the exchange is served: a SaslAuthenticate answer
                assert answer(ApiKey.SASL_AUTHENTICATE, 2, reply).error_code == ErrorCode.NONE
        except CloseConnection:
            outcomes["closed"] += 1
        gate.connection_closed(connection)
    assert outcomes["closed"] > 9_000, outcomes
    assert log_end_offsets(cluster) == before


def test_describe_log_dirs_needs_cluster_describe(secured):
    """Without DESCRIBE on the cluster no log directory is listed, and from v3 the answer says why, as Kafka's."""
    for version in (1, 3, 4):
        as_user(secured, "User:alice")
        refused = secured.call(1, ApiKey.DESCRIBE_LOG_DIRS, version, messages.DescribeLogDirsRequest(topics=None))
        assert refused.results == [] and refused.error_code == (
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED if version >= 3 else ErrorCode.NONE)
        as_user(secured, "User:admin")
        (log_dir,) = secured.call(1, ApiKey.DESCRIBE_LOG_DIRS, version, messages.DescribeLogDirsRequest(
            topics=None)).results
        assert log_dir.error_code == ErrorCode.NONE and {t.name for t in log_dir.topics} == {"a", "b", "orders-eu"}


def test_create_topics_with_nothing_to_forward_is_answered(secured):
    """Nothing reaches the controller when the request names no topic or every one it names is denied; the
    answer says so (the handler used to index a result that was never asked for, which crashed the node)."""
    request_class = messages.CreateTopicsRequest
    empty = secured.call(1, ApiKey.CREATE_TOPICS, 4, request_class(topics=[], timeout_ms=1000, validate_only=False))
    assert empty.topics == []
    as_user(secured, "User:alice")
    denied = secured.call(1, ApiKey.CREATE_TOPICS, 4, request_class(topics=[request_class.CreatableTopic(
        name="new", num_partitions=1, replication_factor=1, assignments=[], configs=[])], timeout_ms=1000,
        validate_only=False))
    assert [(t.name, t.error_code) for t in denied.topics] == [("new", ErrorCode.TOPIC_AUTHORIZATION_FAILED)]


def test_a_request_whose_handler_raises_closes_only_its_connection():
    cluster = Cluster()
    gate = KafkaDispatcher(cluster.apis[1], lambda: cluster.now_ms, lambda: None)
    gate.connection_opened(1, "127.0.0.1", None, None)

    def broken(header, request, now_ms):
        raise IndexError("a handler's bug")

    handlers = cluster.apis[1]._handlers
    working = handlers[ApiKey.METADATA]
    handlers[ApiKey.METADATA] = broken
    try:
        with pytest.raises(CloseConnection, match="failed handling the request"):
            gate.handle_frame(1, frame(ApiKey.METADATA, 8, messages.MetadataRequest(topics=None)))
    finally:
        handlers[ApiKey.METADATA] = working
    assert answer(ApiKey.METADATA, 8, gate.handle_frame(1, frame(ApiKey.METADATA, 8, messages.MetadataRequest(
        topics=None)))).brokers


def test_a_deferred_answer_whose_build_raises_closes_only_its_connection():
    """A forwarded request's answer is built when the controller answers, out of the request handler: a build
    that raises there (a bug) fails that request alone, its connection closed, where it ended the node."""
    from broker.apis import Deferred, RequestFailed
    from net.server import CLOSE_REPLY, PendingReply

    cluster = Cluster()
    apis = cluster.apis[1]
    gate = KafkaDispatcher(apis, lambda: cluster.now_ms, lambda: None)
    gate.connection_opened(1, "127.0.0.1", None, None)
    deferred = []

    def deferring(header, request, now_ms):
        deferred.append((apis.defer(), header))
        return Deferred(deferred[-1][0])

    handlers = apis._handlers
    working = handlers[ApiKey.DESCRIBE_CLUSTER]
    handlers[ApiKey.DESCRIBE_CLUSTER] = deferring
    try:
        pending = gate.handle_frame(1, frame(ApiKey.DESCRIBE_CLUSTER, 0, messages.DescribeClusterRequest()))
    finally:
        handlers[ApiKey.DESCRIBE_CLUSTER] = working
    assert isinstance(pending, PendingReply) and not pending.done
    request_id, header = deferred[0]
    apis.answer_deferred(request_id, header, lambda: [][0])  # the bug a CreateTopics build once had
    completed = apis.poll(cluster.now_ms)
    assert [type(response) for _, _, response in completed] == [RequestFailed]
    gate.complete(completed)
    assert pending.done and pending._reply is CLOSE_REPLY
    assert answer(ApiKey.METADATA, 8, gate.handle_frame(1, frame(ApiKey.METADATA, 8, messages.MetadataRequest(
        topics=None)))).brokers  # the node and the dispatcher go on


@pytest.mark.parametrize("principal", ["User:alice", "User:bob", "User:carol", "User:ANONYMOUS"])
def test_hostile_well_formed_requests_under_acls_are_each_answered(secured, principal):
    """Requests drawn by simulations/fuzz_requests.py (every served API, hostile values, names the ACLs
    mention) from principals with some, few or denied rights: every handler answers (at once or, for those
    forwarded to the controller, once it has answered) with a response its version can carry; none raises."""
    import random

    from broker.apis import Deferred, RequestFailed
    from net.protocol.codec import encode_response
    from simulations.fuzz_requests import RequestFuzzer

    as_user(secured, principal)
    fuzzer = RequestFuzzer(random.Random(principal), topics=("a", "b", "orders-eu", "orders-new"))
    fuzzer.serve(secured.apis[1].supported_apis)
    for correlation_id in range(1_500):
        api_key, version, request = fuzzer.request()
        broker_id = fuzzer.route(request) or 1 + correlation_id % 3
        header = RequestHeader(api_key, version, correlation_id, "fuzz")
        result = secured.apis[broker_id if broker_id in secured.apis else 1].handle(header, request, secured.now_ms)
        if result is not None and not isinstance(result, Deferred):
            fuzzer.learn(decode_response(api_key, version, encode_response(header, result)[4:])[1], request)
        if correlation_id % 20 == 0:
            secured.replicate(rounds=1)
    secured.replicate()
    for completed in secured.completed.values():
        for _, header, response in completed:
            assert not isinstance(response, RequestFailed), response.error
            encode_response(header, response)
