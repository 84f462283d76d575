"""A test peer for the client: a small in-memory single-node Kafka broker over our own codec.

It exists so the client and the CLI can be tested without the real node; it is not a broker (one node, no
replication, no durability). It speaks the real wire protocol through net.protocol.codec, serves real record
batches (stamped with offsets by partitions.batch.stamp_batch) and can inject faults: a capped ApiVersions
version (KIP-511), NOT_LEADER_OR_FOLLOWER answers, a dropped connection.

`PeerBroker.serve(nursery)` runs it inside a trio test; `peer_in_thread()` runs it in a background thread
for the blocking client and the CLI.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from functools import partial
from dataclasses import dataclass, field

import trio

from net.protocol import messages
from net.protocol.codec import (
    SUPPORTED,
    ApiKey,
    FrameReader,
    RequestHeader,
    UnsupportedRequestVersionError,
    api_versions_response,
    decode_request,
    encode_api_versions_fallback,
    encode_response,
)
from partitions.batch import iter_batches, stamp_batch, validate_batch
from partitions.errors import ErrorCode, KafkaError

NODE_ID = 1
CLUSTER_ID = "peer-cluster"
TOPIC_CONFIG_DEFAULTS = {"cleanup.policy": "delete", "retention.ms": "604800000", "min.insync.replicas": "1"}
INTEGER_CONFIGS = {"retention.ms", "min.insync.replicas"}


class _CloseConnection(Exception):
    """Drop the connection without an answer."""


@dataclass
class PeerPartition:
    batches: list[tuple[int, bytes]] = field(default_factory=list)  # (base_offset, stamped batch)
    log_start_offset: int = 0
    log_end_offset: int = 0


@dataclass
class PeerTopic:
    partitions: list[PeerPartition]
    configs: dict[str, str] = field(default_factory=dict)
    topic_id: uuid.UUID = field(default_factory=uuid.uuid4)  # KIP-516: Metadata v10+ and Fetch v13+ carry it


class PeerBroker:
    """One in-memory node answering the apis the client uses."""

    def __init__(self, supported: dict[int, tuple[int, int]] | None = None, auto_create_partitions: int = 2):
        self.supported = dict(supported or SUPPORTED)
        self.auto_create_partitions = auto_create_partitions
        self.topics: dict[str, PeerTopic] = {}
        self.port = 0
        self.not_leader_answers = 0  # answer this many produce/fetch requests with NOT_LEADER_OR_FOLLOWER
        self.drop_next_connection_after_request = False
        self.produce_error_code = ErrorCode.NONE  # answer every produce with this code when set
        self.corrupt_fetched_batches = False  # flip a byte inside every batch served
        self.requests_seen: list[tuple[int, int]] = []  # (api_key, api_version)
        # (node id, port): Metadata also lists this broker and names it the controller (one that is down)
        self.listed_controller: tuple[int, int] | None = None
        self._appended: trio.Event | None = None  # made in serve(), inside the peer's trio loop

    async def serve(self, nursery: trio.Nursery) -> int:
        self._appended = trio.Event()
        listeners = await nursery.start(partial(trio.serve_tcp, self._handle_connection, 0, host="127.0.0.1"))
        self.port = listeners[0].socket.getsockname()[1]
        return self.port

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _handle_connection(self, stream: trio.SocketStream) -> None:
        try:
            await self._serve_connection(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, _CloseConnection):
            pass  # the client went away; a real broker shrugs too
        finally:
            await stream.aclose()

    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        reader = FrameReader()
        while data := await stream.receive_some(1 << 20):
            reader.receive_data(data)
            while (frame := reader.next_frame()) is not None:
                reply = await self._handle_frame(frame)
                if self.drop_next_connection_after_request:
                    self.drop_next_connection_after_request = False
                    return
                if reply:
                    await stream.send_all(reply)

    async def _handle_frame(self, frame: bytes) -> bytes | None:
        try:
            header, request = decode_request(frame)
        except UnsupportedRequestVersionError as error:
            if error.header.api_key != ApiKey.API_VERSIONS:
                raise _CloseConnection from None  # as a Kafka broker does for an api it does not know
            return encode_api_versions_fallback(error.header, self.supported)
        self.requests_seen.append((header.api_key, header.api_version))
        lowest, highest = self.supported.get(header.api_key, (0, -1))
        if not lowest <= header.api_version <= highest:
            if header.api_key == ApiKey.API_VERSIONS:
                return encode_api_versions_fallback(header, self.supported)
            raise AssertionError(f"client sent {header} outside the peer's versions {self.supported}")
        handler = getattr(self, f"_{ApiKey(header.api_key).name.lower()}")
        response = await handler(request, header)
        return None if response is None else encode_response(header, response)

    # Handlers.

    async def _api_versions(self, request, header: RequestHeader):
        return api_versions_response(ErrorCode.NONE, self.supported)

    async def _metadata(self, request, header):
        response_class = messages.MetadataResponse
        names = list(self.topics) if request.topics is None else [t.name for t in request.topics]
        topics = []
        for name in names:
            if name not in self.topics and request.allow_auto_topic_creation and self.auto_create_partitions:
                self.create_topic(name, self.auto_create_partitions)
                topics.append(response_class.MetadataResponseTopic(error_code=ErrorCode.LEADER_NOT_AVAILABLE,
                                                                   name=name))
                continue
            if name not in self.topics:
                topics.append(response_class.MetadataResponseTopic(
                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name))
                continue
            partitions = [
                response_class.MetadataResponsePartition(
                    error_code=0, partition_index=index, leader_id=NODE_ID, leader_epoch=0, replica_nodes=[NODE_ID],
                    isr_nodes=[NODE_ID], offline_replicas=[])
                for index in range(len(self.topics[name].partitions))
            ]
            topics.append(response_class.MetadataResponseTopic(error_code=0, name=name, partitions=partitions,
                                                               topic_id=self.topics[name].topic_id))
        brokers = [response_class.MetadataResponseBroker(node_id=NODE_ID, host="127.0.0.1", port=self.port)]
        controller_id = NODE_ID
        if self.listed_controller is not None:
            controller_id, port = self.listed_controller
            brokers.append(response_class.MetadataResponseBroker(node_id=controller_id, host="127.0.0.1", port=port))
        return response_class(brokers=brokers, cluster_id=CLUSTER_ID, controller_id=controller_id, topics=topics)

    def _partition(self, topic: str, partition: int) -> PeerPartition | None:
        peer_topic = self.topics.get(topic)
        if peer_topic is None or not 0 <= partition < len(peer_topic.partitions):
            return None
        return peer_topic.partitions[partition]

    def _take_not_leader(self) -> bool:
        if self.not_leader_answers > 0:
            self.not_leader_answers -= 1
            return True
        return False

    async def _produce(self, request, header):
        response_class = messages.ProduceResponse
        topic_data = request.topic_data[0]
        partition_data = topic_data.partition_data[0]
        error, base_offset = self._append(topic_data.name, partition_data.index, bytes(partition_data.records))
        if request.acks == 0:
            return None
        answer = response_class.PartitionProduceResponse(index=partition_data.index, error_code=error,
                                                         base_offset=base_offset)
        return response_class(responses=[response_class.TopicProduceResponse(
            name=topic_data.name, partition_responses=[answer])])

    def _append(self, topic: str, partition: int, batch: bytes) -> tuple[int, int]:
        if self.produce_error_code != ErrorCode.NONE:
            return self.produce_error_code, -1
        if self._take_not_leader():
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, -1
        peer_partition = self._partition(topic, partition)
        if peer_partition is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1
        try:
            header = validate_batch(batch)
        except KafkaError as error:
            return error.code, -1
        stamped = bytearray(batch)
        base_offset = peer_partition.log_end_offset
        stamp_batch(stamped, base_offset, 0)
        peer_partition.batches.append((base_offset, bytes(stamped)))
        peer_partition.log_end_offset = base_offset + header.last_offset_delta + 1
        self._appended.set()
        self._appended = trio.Event()
        return ErrorCode.NONE, base_offset

    async def _fetch(self, request, header):
        topic = request.topics[0]
        fetch_partition = topic.partitions[0]
        name = topic.topic
        if header.api_version >= 13:  # KIP-516: by id
            name = next((n for n, t in self.topics.items() if t.topic_id == topic.topic_id), None)
        peer_partition = self._partition(name, fetch_partition.partition) if name is not None else None
        if peer_partition is not None and fetch_partition.fetch_offset == peer_partition.log_end_offset:
            with trio.move_on_after(request.max_wait_ms / 1000):
                await self._appended.wait()
        return self._fetch_response(name, topic.topic_id, fetch_partition)

    def _fetch_response(self, topic: str | None, topic_id: uuid.UUID, fetch_partition):
        response_class = messages.FetchResponse
        peer_partition = self._partition(topic, fetch_partition.partition) if topic is not None else None
        data = response_class.PartitionData(partition_index=fetch_partition.partition)
        if self._take_not_leader():
            data.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        elif topic is None:
            data.error_code = ErrorCode.UNKNOWN_TOPIC_ID
        elif peer_partition is None:
            data.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        else:
            offset = fetch_partition.fetch_offset
            data.high_watermark = data.last_stable_offset = peer_partition.log_end_offset
            data.log_start_offset = peer_partition.log_start_offset
            if not peer_partition.log_start_offset <= offset <= peer_partition.log_end_offset:
                data.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
            else:
                data.records = self._read(peer_partition, offset, fetch_partition.partition_max_bytes)
                if self.corrupt_fetched_batches and data.records:
                    corrupted = bytearray(data.records)
                    corrupted[-1] ^= 0xFF  # inside the CRC-covered part of the last batch
                    data.records = bytes(corrupted)
        return response_class(throttle_time_ms=0, error_code=0, responses=[
            response_class.FetchableTopicResponse(topic=topic or "", topic_id=topic_id, partitions=[data])])

    @staticmethod
    def _read(peer_partition: PeerPartition, offset: int, bytes_max: int) -> bytes:
        chunks, size = [], 0
        for base_offset, batch in peer_partition.batches:
            last_offset = next(iter_batches(batch))[1].last_offset
            if last_offset < offset:
                continue
            if chunks and size + len(batch) > bytes_max:
                break  # at least one whole batch, as KIP-74
            chunks.append(batch)
            size += len(batch)
        return b"".join(chunks)

    async def _list_offsets(self, request, header):
        response_class = messages.ListOffsetsResponse
        topics = []
        for topic in request.topics:
            answers = []
            for p in topic.partitions:
                peer_partition = self._partition(topic.name, p.partition_index)
                answer = response_class.ListOffsetsPartitionResponse(partition_index=p.partition_index)
                if peer_partition is None:
                    answer.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif p.timestamp == -2:
                    answer.offset = peer_partition.log_start_offset
                elif p.timestamp == -1:
                    answer.offset = peer_partition.log_end_offset
                else:
                    answer.offset = peer_partition.log_end_offset  # no time index in the peer: latest
                answers.append(answer)
            topics.append(response_class.ListOffsetsTopicResponse(name=topic.name, partitions=answers))
        return response_class(topics=topics)

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        self.topics[name] = PeerTopic([PeerPartition() for _ in range(partitions)], dict(configs or {}))

    async def _create_topics(self, request, header):
        response_class = messages.CreateTopicsResponse
        results = []
        for topic in request.topics:
            result = response_class.CreatableTopicResult(name=topic.name, error_code=0)
            configs = {c.name: c.value for c in topic.configs}
            bad = _invalid_config(configs)
            if topic.name in self.topics:
                result.error_code, result.error_message = ErrorCode.TOPIC_ALREADY_EXISTS, f"{topic.name} exists"
            elif bad:
                result.error_code, result.error_message = ErrorCode.INVALID_CONFIG, bad
            elif topic.num_partitions == 0 or topic.num_partitions < -1:
                result.error_code, result.error_message = ErrorCode.INVALID_PARTITIONS, "partitions must be > 0"
            elif not request.validate_only:
                count = topic.num_partitions if topic.num_partitions > 0 else self.auto_create_partitions
                self.create_topic(topic.name, count, configs)
            results.append(result)
        return response_class(topics=results)

    async def _delete_topics(self, request, header):
        response_class = messages.DeleteTopicsResponse
        results = []
        # v6 names topics in `topics` (by name here: the client never asks by id)
        names = request.topic_names if header.api_version < 6 else [topic.name for topic in request.topics]
        for name in names:
            code = ErrorCode.NONE if self.topics.pop(name, None) else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            results.append(response_class.DeletableTopicResult(name=name, error_code=code))
        return response_class(responses=results)

    async def _create_partitions(self, request, header):
        response_class = messages.CreatePartitionsResponse
        results = []
        for topic in request.topics:
            result = response_class.CreatePartitionsTopicResult(name=topic.name, error_code=0)
            peer_topic = self.topics.get(topic.name)
            if peer_topic is None:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif topic.count <= len(peer_topic.partitions):
                result.error_code, result.error_message = ErrorCode.INVALID_PARTITIONS, "count must grow"
            else:
                peer_topic.partitions += [PeerPartition() for _ in range(topic.count - len(peer_topic.partitions))]
            results.append(result)
        return response_class(results=results)

    async def _describe_configs(self, request, header):
        response_class = messages.DescribeConfigsResponse
        results = []
        for resource in request.resources:
            result = response_class.DescribeConfigsResult(
                error_code=0, resource_type=resource.resource_type, resource_name=resource.resource_name)
            peer_topic = self.topics.get(resource.resource_name)
            if peer_topic is None:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                for key, default in TOPIC_CONFIG_DEFAULTS.items():
                    value = peer_topic.configs.get(key, default)
                    source = 1 if key in peer_topic.configs else 5
                    result.configs.append(response_class.DescribeConfigsResourceResult(
                        name=key, value=value, read_only=False, config_source=source, is_default=source == 5))
            results.append(result)
        return response_class(results=results)

    async def _incremental_alter_configs(self, request, header):
        response_class = messages.IncrementalAlterConfigsResponse
        responses = []
        for resource in request.resources:
            answer = response_class.AlterConfigsResourceResponse(
                error_code=0, resource_type=resource.resource_type, resource_name=resource.resource_name)
            peer_topic = self.topics.get(resource.resource_name)
            updates = {c.name: c.value for c in resource.configs if c.config_operation == 0}
            bad = _invalid_config(updates)
            if peer_topic is None:
                answer.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif bad:
                answer.error_code, answer.error_message = ErrorCode.INVALID_CONFIG, bad
            elif not request.validate_only:
                peer_topic.configs.update(updates)
                for config in resource.configs:
                    if config.config_operation == 1:
                        peer_topic.configs.pop(config.name, None)
            responses.append(answer)
        return response_class(responses=responses)

    async def _delete_records(self, request, header):
        response_class = messages.DeleteRecordsResponse
        topics = []
        for topic in request.topics:
            answers = []
            for p in topic.partitions:
                peer_partition = self._partition(topic.name, p.partition_index)
                answer = response_class.DeleteRecordsPartitionResult(partition_index=p.partition_index)
                offset = peer_partition.log_end_offset if peer_partition and p.offset == -1 else p.offset
                if peer_partition is None:
                    answer.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif not peer_partition.log_start_offset <= offset <= peer_partition.log_end_offset:
                    answer.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                else:
                    peer_partition.log_start_offset = answer.low_watermark = offset
                answers.append(answer)
            topics.append(response_class.DeleteRecordsTopicResult(name=topic.name, partitions=answers))
        return response_class(topics=topics)

    async def _describe_cluster(self, request, header):
        response_class = messages.DescribeClusterResponse
        broker = response_class.DescribeClusterBroker(broker_id=NODE_ID, host="127.0.0.1", port=self.port)
        return response_class(error_code=0, cluster_id=CLUSTER_ID, controller_id=NODE_ID, brokers=[broker])


def _invalid_config(configs: dict[str, str | None]) -> str | None:
    for key, value in configs.items():
        if key not in TOPIC_CONFIG_DEFAULTS:
            return f"unknown topic config {key!r}"
        if key in INTEGER_CONFIGS and not (value or "").lstrip("-").isdigit():
            return f"invalid value {value!r} for {key}: not an integer"
    return None


@contextlib.contextmanager
def peer_in_thread(**options):
    """A PeerBroker served by a trio loop in a background thread; yields it once it listens."""
    peer = PeerBroker(**options)
    ready = threading.Event()
    state: dict = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await peer.serve(nursery)
            state["cancel"] = nursery.cancel_scope.cancel
            state["token"] = trio.lowlevel.current_trio_token()
            ready.set()

    thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
    thread.start()
    assert ready.wait(10), "the peer did not start"
    try:
        yield peer
    finally:
        trio.from_thread.run_sync(state["cancel"], trio_token=state["token"])
        thread.join(10)


# The peer's own checks: it must be a faithful peer for the client tests to mean anything.


async def test_peer_answers_api_versions_with_its_capped_list(nursery):
    peer = PeerBroker(supported={**SUPPORTED, ApiKey.API_VERSIONS: (0, 2)})
    port = await peer.serve(nursery)
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    from net.protocol.codec import decode_response, encode_request

    header = RequestHeader(ApiKey.API_VERSIONS, 3, 7, "t")
    await stream.send_all(encode_request(header, messages.ApiVersionsRequest()))
    reader = FrameReader()
    while (frame := reader.next_frame()) is None:
        reader.receive_data(await stream.receive_some(65536))
    correlation_id, response = decode_response(ApiKey.API_VERSIONS, 3, frame)
    assert correlation_id == 7
    assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert {k.api_key: k.max_version for k in response.api_keys}[ApiKey.API_VERSIONS] == 2
    await stream.aclose()
