"""Transaction administration over a `KafkaClient`: list and describe transactions, describe a partition's
producers, find hanging transactions and abort one (what `kafka-transactions.sh` and AdminClient do).

Theory of operation: a transactional id's requests go to its coordinator (FindCoordinator, key type 1),
retried while the coordinator moves or loads. ListTransactions asks every live broker (each lists the ids
of the shards it leads). DescribeProducers asks a partition's leader. A *hanging* transaction is one a
partition leader holds open (a producer with a current transaction start offset) for longer than the
maximum transaction timeout, which the coordinator does not know as Ongoing on that partition: its
producer and coordinator are gone, and the partition's last stable offset is stuck behind it. `abort`
writes the ABORT marker for it straight to the partition leader (WriteTxnMarkers, as AdminClient's
abortTransaction does), with the coordinator epoch the leader last saw for that producer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from net.client.aio import KafkaClient, gather
from net.client.errors import raise_for_code
from net.client.groups import COORDINATOR_RETRY_CODES, FIND_COORDINATOR_VERSION
from net.protocol import messages
from net.protocol.codec import ApiKey

COORDINATOR_KEY_TYPE_TRANSACTION = 1
TRANSACTION_MAX_TIMEOUT_MS_DEFAULT = 900_000


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str
    coordinator: int


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    coordinator: int
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_ms: int  # -1 when no transaction is running
    partitions: list[tuple[str, int]] = field(default_factory=list)


@dataclass(frozen=True)
class ProducerInfo:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1 when no transaction is open on the partition


async def find_transaction_coordinator(client: KafkaClient, transactional_id: str) -> int:
    request = messages.FindCoordinatorRequest(key=transactional_id, key_type=COORDINATOR_KEY_TYPE_TRANSACTION)

    async def attempt() -> int:
        response = await client.send(None, ApiKey.FIND_COORDINATOR, request, api_version=FIND_COORDINATOR_VERSION)
        raise_for_code(response.error_code, response.error_message,
                       f"find coordinator of transactional id {transactional_id!r}")
        return response.node_id

    return await client._retrying(attempt, COORDINATOR_RETRY_CODES)


async def list_transactions(client: KafkaClient, states: list[str] | None = None,
                            producer_ids: list[int] | None = None) -> list[TransactionListing]:
    metadata = await client.metadata([])
    listings: list[TransactionListing] = []

    async def ask(broker_id: int) -> None:
        request = messages.ListTransactionsRequest(state_filters=list(states or []),
                                                   producer_id_filters=list(producer_ids or []))
        response = await client.send(broker_id, ApiKey.LIST_TRANSACTIONS, request)
        raise_for_code(response.error_code, None, f"list transactions on broker {broker_id}")
        for state in response.transaction_states:
            listings.append(TransactionListing(state.transactional_id, state.producer_id, state.transaction_state,
                                               broker_id))

    await gather([lambda broker_id=broker_id: ask(broker_id) for broker_id in sorted(metadata.brokers)])
    return sorted(listings, key=lambda listing: listing.transactional_id)


async def describe_transaction(client: KafkaClient, transactional_id: str) -> TransactionDescription:
    """Raises the typed error of the coordinator's answer (TRANSACTIONAL_ID_NOT_FOUND for an unknown id)."""
    request = messages.DescribeTransactionsRequest(transactional_ids=[transactional_id])

    async def attempt():
        coordinator = await find_transaction_coordinator(client, transactional_id)
        response = await client.send(coordinator, ApiKey.DESCRIBE_TRANSACTIONS, request)
        state = response.transaction_states[0]
        if state.error_code in COORDINATOR_RETRY_CODES:
            raise_for_code(state.error_code, None, f"transactional id {transactional_id!r}")
        return coordinator, state

    coordinator, state = await client._retrying(attempt, COORDINATOR_RETRY_CODES)
    raise_for_code(state.error_code, None, f"describe transactional id {transactional_id!r}")
    return TransactionDescription(
        transactional_id, coordinator, state.transaction_state, state.producer_id, state.producer_epoch,
        state.transaction_timeout_ms, state.transaction_start_time_ms,
        sorted((topic.topic, p) for topic in state.topics for p in topic.partitions))


async def describe_producers(client: KafkaClient, topic: str, partition: int,
                             broker_id: int | None = None) -> list[ProducerInfo]:
    """The producers the partition's leader (or `broker_id`) knows. Raises its typed error."""
    if broker_id is None:
        broker_id = (await client.leader_for(topic, partition)).leader
    request = messages.DescribeProducersRequest(topics=[messages.DescribeProducersRequest.TopicRequest(
        name=topic, partition_indexes=[partition])])
    response = await client.send(broker_id, ApiKey.DESCRIBE_PRODUCERS, request)
    answer = response.topics[0].partitions[0]
    raise_for_code(answer.error_code, answer.error_message, f"describe producers of {topic}-{partition}")
    return [ProducerInfo(p.producer_id, p.producer_epoch, p.last_sequence, p.last_timestamp, p.coordinator_epoch,
                         p.current_txn_start_offset) for p in answer.active_producers]


@dataclass(frozen=True)
class HangingTransaction:
    topic: str
    partition: int
    producer: ProducerInfo
    transactional_id: str | None  # the id the coordinator maps to this producer id, when it knows one


async def find_hanging(client: KafkaClient, broker_id: int, now_ms: int,
                       max_timeout_ms: int = TRANSACTION_MAX_TIMEOUT_MS_DEFAULT) -> list[HangingTransaction]:
    """Open transactions on the partitions `broker_id` leads that started (last wrote) more than
    `max_timeout_ms` ago and that their coordinator does not hold Ongoing on that partition."""
    metadata = await client.metadata(None)
    hanging = []
    ongoing = {listing.producer_id: listing for listing in await list_transactions(client)}
    for topic in sorted(metadata.topics.values(), key=lambda t: t.name):
        for partition in sorted(topic.partitions.values(), key=lambda p: p.partition):
            if partition.leader != broker_id:
                continue
            for producer in await describe_producers(client, topic.name, partition.partition, broker_id):
                if producer.current_txn_start_offset < 0 or now_ms - producer.last_timestamp <= max_timeout_ms:
                    continue
                listing = ongoing.get(producer.producer_id)
                if listing is not None and listing.state == "Ongoing":
                    description = await describe_transaction(client, listing.transactional_id)
                    if (topic.name, partition.partition) in description.partitions:
                        continue  # the coordinator will finish or time it out
                hanging.append(HangingTransaction(topic.name, partition.partition, producer,
                                                  listing.transactional_id if listing else None))
    return hanging


async def abort_transaction(client: KafkaClient, topic: str, partition: int, producer_id: int,
                            producer_epoch: int, coordinator_epoch: int) -> None:
    """Write an ABORT marker for the producer's open transaction on the partition (its leader answers once
    the marker is committed). Raises the typed error of the leader's answer."""
    leader = (await client.leader_for(topic, partition)).leader
    request = messages.WriteTxnMarkersRequest(markers=[messages.WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=False,
        coordinator_epoch=coordinator_epoch,
        topics=[messages.WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=topic, partition_indexes=[partition])])])
    response = await client.send(leader, ApiKey.WRITE_TXN_MARKERS, request)
    result = response.markers[0].topics[0].partitions[0]
    raise_for_code(result.error_code, None, f"abort the transaction of producer {producer_id} on {topic}-{partition}")
