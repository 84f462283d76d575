"""Transaction version 2 (KIP-890 part 2) on a real three-node cluster over sockets, spoken by Flotilla's own
client (net/client): the broker advertises transaction.version 2 in ApiVersions; a producer that sends no
AddPartitionsToTxn has its partitions added by its Produce v12; every EndTxn v5 bumps the epoch (its answer
says which); a retried EndTxn is answered with success; the zombie's late produce of the old epoch is
refused; read_committed reads exactly the committed records; a transaction version 1 producer alongside keeps
its epoch."""

from __future__ import annotations

import time

import pytest

from cli.local_cluster import LocalCluster
from net.client.results import IsolationLevel
from net.client.sync import SyncKafkaClient
from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode
from partitions.records import build_batch
from tests.net.cluster_helpers import FAST_BROKER_SETTINGS, create_topic, eventually, wait_for_quorum

pytestmark = [pytest.mark.slow]
TARGETS = [("tv2-a", 0), ("tv2-a", 1), ("tv2-b", 0)]
TRANSACTIONS = 30
RECORDS_PER_PARTITION = 3
RETRIABLE = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
             ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_LEADER_OR_FOLLOWER,
             ErrorCode.REQUEST_TIMED_OUT, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = LocalCluster(str(tmp_path_factory.mktemp("tv2")), nodes=3, broker={
        **FAST_BROKER_SETTINGS, "offsets_topic_num_partitions": 3, "transaction_state_log_num_partitions": 3})
    cluster.start()
    wait_for_quorum(cluster)
    create_topic(cluster, "tv2-a", 2, 3)
    create_topic(cluster, "tv2-b", 1, 3)
    yield cluster
    cluster.stop()


class Producer:
    """A transactional producer reduced to its requests, at the versions given (TV2: Produce 12, EndTxn 5)."""

    def __init__(self, client: SyncKafkaClient, transactional_id: str, transaction_version: int) -> None:
        self.client = client
        self.transactional_id = transactional_id
        self.tv2 = transaction_version >= 2
        self.sequences: dict[tuple[str, int], int] = {}
        self.coordinator = None
        assert self._retry(self._find_coordinator).error_code == ErrorCode.NONE
        answer = self._retry(lambda: self._coordinator_request(ApiKey.INIT_PRODUCER_ID, messages.InitProducerIdRequest(
            transactional_id=transactional_id, transaction_timeout_ms=60_000), 4))
        self.producer_id, self.producer_epoch = answer.producer_id, answer.producer_epoch

    @staticmethod
    def _retry(attempt, seconds: float = 30):
        deadline = time.monotonic() + seconds
        while True:
            response = attempt()
            code = ErrorCode(response.error_code)
            if code not in RETRIABLE or time.monotonic() > deadline:
                return response
            time.sleep(0.1)

    def _find_coordinator(self):
        response = self.client.send(None, ApiKey.FIND_COORDINATOR, messages.FindCoordinatorRequest(
            key=self.transactional_id, key_type=1), api_version=2)
        if response.error_code == ErrorCode.NONE:
            self.coordinator = response.node_id
        return response

    def _coordinator_request(self, api_key: int, request, version: int):
        response = self.client.send(self.coordinator, api_key, request, api_version=version)
        if response.error_code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
            self._find_coordinator()
        return response

    def add_partitions(self, partitions: list[tuple[str, int]]) -> None:
        """TV1 only: AddPartitionsToTxn v3 before the first produce."""
        request_class = messages.AddPartitionsToTxnRequest
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        request = request_class(v3_and_below_transactional_id=self.transactional_id,
                                v3_and_below_producer_id=self.producer_id,
                                v3_and_below_producer_epoch=self.producer_epoch,
                                v3_and_below_topics=[request_class.AddPartitionsToTxnTopic(name=t, partitions=ps)
                                                     for t, ps in by_topic.items()])

        def attempt():
            response = self.client.send(self.coordinator, ApiKey.ADD_PARTITIONS_TO_TXN, request, api_version=3)
            codes = {r.partition_error_code for t in response.results_by_topic_v3_and_below
                     for r in t.results_by_partition}
            return messages.EndTxnResponse(error_code=max(codes))  # a carrier of the one error code

        assert self._retry(attempt).error_code == ErrorCode.NONE

    def produce(self, topic: str, partition: int, values: list[bytes], epoch: int | None = None,
                sequence: int | None = None) -> ErrorCode:
        """One transactional batch (retried while retriable); the partition's answer."""
        key = (topic, partition)
        base_sequence = self.sequences.get(key, 0) if sequence is None else sequence
        batch = build_batch([(None, value) for value in values], base_timestamp=int(time.time() * 1000),
                            producer_id=self.producer_id,
                            producer_epoch=self.producer_epoch if epoch is None else epoch,
                            base_sequence=base_sequence, is_transactional=True)
        request = messages.ProduceRequest(transactional_id=self.transactional_id, acks=-1, timeout_ms=10_000,
                                          topic_data=[messages.ProduceRequest.TopicProduceData(name=topic, partition_data=[
                                              messages.ProduceRequest.PartitionProduceData(index=partition, records=batch)])])

        def attempt():
            leader = self.client.leader_for(topic, partition).leader
            response = self.client.send(leader, ApiKey.PRODUCE, request, api_version=12 if self.tv2 else 8)
            return response.responses[0].partition_responses[0]

        code = ErrorCode(self._retry(attempt).error_code)
        if code == ErrorCode.NONE and sequence is None:
            self.sequences[key] = base_sequence + len(values)
        return code

    def commit_offsets(self, group: str, topic: str, partition: int, offset: int) -> ErrorCode:
        """TxnOffsetCommit v5 at the group coordinator, without AddOffsetsToTxn (TV2): its answer."""
        found = self._retry(lambda: self.client.send(None, ApiKey.FIND_COORDINATOR, messages.FindCoordinatorRequest(
            key=group, key_type=0), api_version=2))
        request_class = messages.TxnOffsetCommitRequest
        request = request_class(
            transactional_id=self.transactional_id, group_id=group, producer_id=self.producer_id,
            producer_epoch=self.producer_epoch, generation_id=-1, member_id="", group_instance_id=None,
            topics=[request_class.TxnOffsetCommitRequestTopic(name=topic, partitions=[
                request_class.TxnOffsetCommitRequestPartition(partition_index=partition, committed_offset=offset,
                                                              committed_leader_epoch=-1, committed_metadata="")])])

        def attempt():
            response = self.client.send(found.node_id, ApiKey.TXN_OFFSET_COMMIT, request, api_version=5)
            return messages.EndTxnResponse(error_code=response.topics[0].partitions[0].error_code)

        return ErrorCode(self._retry(attempt).error_code)

    def end(self, commit: bool, epoch: int | None = None):
        """EndTxn (v5 for TV2, v3 else) with the current epoch (or `epoch`): the answer."""
        request = messages.EndTxnRequest(transactional_id=self.transactional_id, producer_id=self.producer_id,
                                         producer_epoch=self.producer_epoch if epoch is None else epoch,
                                         committed=commit)
        answer = self._retry(lambda: self._coordinator_request(ApiKey.END_TXN, request, 5 if self.tv2 else 3))
        if answer.error_code == ErrorCode.NONE and self.tv2 and epoch is None:
            assert (answer.producer_id, answer.producer_epoch) != (-1, -1), answer
            self.producer_id, self.producer_epoch = answer.producer_id, answer.producer_epoch
            self.sequences.clear()  # a new epoch starts at sequence 0
        return answer


def read_committed(client: SyncKafkaClient, expected: int) -> dict[tuple[str, int], list[bytes]]:
    def read():
        got = {}
        for topic, partition in TARGETS:
            offset, values = 0, []
            while True:
                result = client.fetch(topic, partition, offset, max_wait_ms=100,
                                      isolation_level=IsolationLevel.READ_COMMITTED)
                values += [record.value for record in result.records]
                if result.next_offset == offset or result.next_offset >= result.last_stable_offset:
                    break
                offset = result.next_offset
            got[(topic, partition)] = values
        return got if sum(len(v) for v in got.values()) >= expected else None

    return eventually(read, seconds=30, what=f"{expected} committed records")


def test_transaction_version_1_setting_finalizes_1_and_caps_end_txn_and_txn_offset_commit(tmp_path):
    single = LocalCluster(str(tmp_path), nodes=1, broker={
        **FAST_BROKER_SETTINGS, "transaction_version": 1, "offsets_topic_replication_factor": 1,
        "transaction_state_log_replication_factor": 1, "transaction_state_log_min_isr": 1})
    single.start()
    try:
        wait_for_quorum(single)
        with SyncKafkaClient(single.bootstrap_servers) as client:
            response = eventually(lambda: client.send(None, ApiKey.API_VERSIONS, messages.ApiVersionsRequest(
                client_software_name="flotilla-test", client_software_version="1"), api_version=3), seconds=30)
            assert {(f.name, f.max_version_level) for f in response.finalized_features} == {("transaction.version", 1)}
            versions = {key.api_key: key.max_version for key in response.api_keys}
            assert (versions[ApiKey.END_TXN], versions[ApiKey.TXN_OFFSET_COMMIT]) == (4, 4)
    finally:
        single.stop()


def test_api_versions_finalizes_transaction_version_2(cluster):
    with SyncKafkaClient(cluster.bootstrap_servers) as client:
        response = client.send(None, ApiKey.API_VERSIONS, messages.ApiVersionsRequest(
            client_software_name="flotilla-test", client_software_version="1"), api_version=4)
        assert {(f.name, f.max_version_level) for f in response.finalized_features} == {("transaction.version", 2)}
        assert {(f.name, f.min_version, f.max_version) for f in response.supported_features} == \
            {("transaction.version", 0, 2)}
        # before v4 a supported range from level 0 is left out, as Kafka 3.9 does (KAFKA-17011)
        older = client.send(None, ApiKey.API_VERSIONS, messages.ApiVersionsRequest(
            client_software_name="flotilla-test", client_software_version="1"), api_version=3)
        assert older.supported_features == [] and older.finalized_features == response.finalized_features
        versions = {key.api_key: key.max_version for key in response.api_keys}
        assert (versions[ApiKey.PRODUCE], versions[ApiKey.END_TXN], versions[ApiKey.TXN_OFFSET_COMMIT]) == (12, 5, 5)


def test_tv2_commits_and_aborts_bump_the_epoch_and_read_committed_sees_the_commits(cluster):
    with SyncKafkaClient(cluster.bootstrap_servers) as client:
        producer = Producer(client, "tv2-pipeline", transaction_version=2)
        first_epoch = producer.producer_epoch
        committed: dict[tuple[str, int], list[bytes]] = {key: [] for key in TARGETS}
        for number in range(TRANSACTIONS):
            commit = number % 4 != 3
            values = {key: [f"{number}-{key[0]}-{key[1]}-{i}".encode() for i in range(RECORDS_PER_PARTITION)]
                      for key in TARGETS}
            for (topic, partition), batch in values.items():  # no AddPartitionsToTxn: the produce adds them
                assert producer.produce(topic, partition, batch) == ErrorCode.NONE
            epoch = producer.producer_epoch
            answer = producer.end(commit)
            assert (answer.error_code, answer.producer_epoch) == (ErrorCode.NONE, epoch + 1)
            if commit:
                for key, batch in values.items():
                    committed[key] += batch
        assert producer.producer_epoch == first_epoch + TRANSACTIONS
        assert read_committed(client, sum(len(v) for v in committed.values())) == committed


def test_tv2_retried_end_txn_succeeds_and_the_zombies_late_produce_is_fenced(cluster):
    with SyncKafkaClient(cluster.bootstrap_servers) as client:
        producer = Producer(client, "tv2-zombie", transaction_version=2)
        old_epoch = producer.producer_epoch
        assert producer.produce("tv2-a", 0, [b"z-0"]) == ErrorCode.NONE
        assert producer.end(commit=True).producer_epoch == old_epoch + 1
        # The answer was lost: the retry with the pre-bump epoch is answered as the first one.
        retry = producer.end(commit=True, epoch=old_epoch)
        assert (retry.error_code, retry.producer_id, retry.producer_epoch) == \
            (ErrorCode.NONE, producer.producer_id, old_epoch + 1)
        # The zombie's produce of the old epoch: the marker fenced the partition of the transaction, the
        # coordinator fences any other partition the produce would add.
        assert producer.produce("tv2-a", 0, [b"late"], epoch=old_epoch, sequence=1) == ErrorCode.INVALID_PRODUCER_EPOCH
        assert producer.produce("tv2-b", 0, [b"late"], epoch=old_epoch, sequence=0) == ErrorCode.INVALID_PRODUCER_EPOCH
        assert producer.end(commit=True, epoch=old_epoch + 1).error_code == ErrorCode.PRODUCER_FENCED


def test_tv1_producer_alongside_keeps_its_epoch(cluster):
    with SyncKafkaClient(cluster.bootstrap_servers) as client:
        producer = Producer(client, "tv1-pipeline", transaction_version=1)
        epoch = producer.producer_epoch
        for number in range(3):
            producer.add_partitions([("tv2-b", 0)])
            assert producer.produce("tv2-b", 0, [f"tv1-{number}".encode()]) == ErrorCode.NONE
            assert producer.end(commit=True).error_code == ErrorCode.NONE
        assert producer.producer_epoch == epoch
        # Without AddPartitionsToTxn, a version 1 producer's first produce is refused (KIP-890 part 1).
        assert producer.produce("tv2-a", 1, [b"unadded"]) == ErrorCode.INVALID_TXN_STATE


def committed_offset(client: SyncKafkaClient, group: str, topic: str, partition: int) -> int:
    """The group's committed offset (OffsetFetch v7 with require_stable: waits out a pending transaction)."""
    request_class = messages.OffsetFetchRequest
    request = request_class(group_id=group, require_stable=True, topics=[request_class.OffsetFetchRequestTopic(
        name=topic, partition_indexes=[partition])])

    def fetch():
        found = client.send(None, ApiKey.FIND_COORDINATOR, messages.FindCoordinatorRequest(key=group, key_type=0),
                            api_version=2)
        response = client.send(found.node_id, ApiKey.OFFSET_FETCH, request, api_version=7)
        answer = response.topics[0].partitions[0]
        return None if response.error_code or answer.error_code else answer.committed_offset

    return eventually(fetch, seconds=30, what=f"the offset of {group}")


def test_tv2_txn_offset_commit_v5_adds_the_offsets_partition_without_add_offsets_to_txn(cluster):
    with SyncKafkaClient(cluster.bootstrap_servers) as client:
        producer = Producer(client, "tv2-offsets", transaction_version=2)
        for offset, commit in ((10, True), (20, False), (30, True)):
            assert producer.produce("tv2-b", 0, [f"offsets-{offset}".encode()]) == ErrorCode.NONE
            assert producer.commit_offsets("tv2-group", "tv2-a", 0, offset) == ErrorCode.NONE
            assert producer.end(commit).error_code == ErrorCode.NONE
            # The markers reached __consumer_offsets too: the offset is decided (committed or dropped).
            assert committed_offset(client, "tv2-group", "tv2-a", 0) == (offset if commit else 10)
        stale = producer.producer_epoch - 1
        producer.producer_epoch = stale
        assert producer.commit_offsets("tv2-group", "tv2-a", 0, 99) == ErrorCode.INVALID_PRODUCER_EPOCH
