"""Clients of the transactions simulation: an exactly-once consume-transform-produce pipeline and a
read_committed reader, over the real codec.

Theory of operation. `SimTxnPipeline` is what a Kafka Streams task with exactly-once does, reduced to its
protocol, for the input partitions it owns (static ownership: the group protocol is the groups workload's):

    FindCoordinator(transaction) -> InitProducerId -> FindCoordinator(group) -> OffsetFetch(require_stable)
    then per transaction: Fetch input (from the position) -> AddPartitionsToTxn(out-a[p], out-b[p])
    -> Produce (transactional, idempotent sequences) to both -> AddOffsetsToTxn(group)
    -> TxnOffsetCommit(position) -> EndTxn(commit, or abort for a share of them)

Half of the aborts of a transaction version 1 pipeline come at once, as an application's abort_transaction
right after it began: AddPartitionsToTxn and EndTxn(abort) leave together on the coordinator's connection,
as librdkafka sends them, the add's answer not waited for (`ABORT_AT_ONCE_SHARE`).

A pipeline on transaction version 2 (KIP-890 part 2, `transaction_version=2`) is a Kafka 4.0 client: it sends
neither AddPartitionsToTxn nor AddOffsetsToTxn. Its Produce v12 adds the output partitions (the leader asks
the coordinator), its TxnOffsetCommit v5 the group's offsets partition, and its EndTxn v5 answers with the
producer id and epoch of the next transaction (the epoch bumped by every EndTxn, sequences start again at 0);
a retried EndTxn carries the pre-bump epoch and must be answered as the first one.

Each output record's value names its transaction and its input: "txn_id|epoch|txn_seq|in_partition:in_offset".
A retriable answer (a coordinator or leader moving, CONCURRENT_TRANSACTIONS, a timeout) repeats the step
(every step is idempotent at the broker: a produce retry carries the same sequence). Anything else
(PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, OUT_OF_ORDER_SEQUENCE_NUMBER, ...) starts the
instance over with InitProducerId, which bumps the epoch and aborts the open transaction at the
coordinator; positions are then fetched again with require_stable (UNSTABLE_OFFSET_COMMIT waits). After
an abort the positions go back to the last committed offsets.

Faults of the workload: `crash()` (the instance is gone mid-transaction; restarted later), `pause()` /
`resume()` (a stalled process: if it stays stalled past the transaction timeout the coordinator aborts its
transaction with a bumped epoch, and on resume it must be fenced, never commit).

`SimTxnReader` reads the output topics from offset 0 with Fetch isolation_level=1 and drops the records of
aborted transactions as Kafka's consumer does (net.client.aio.decode_fetched), reporting each record with the
last stable offset of the response that carried it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from net.client.aio import decode_fetched
from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode, KafkaError
from partitions.records import build_batch
from simulations.kafka_clients import (
    FETCH_VERSION,
    METADATA_VERSION,
    PRODUCE_VERSION,
    RETRIABLE_PRODUCE_ERRORS,
    FaultedClient,
    KafkaClientBase,
    PartitionLeader,
)
from simulations.loop import US_PER_MS

TICK_MS = 50
RETRY_BACKOFF_MS = 100
TXN_TIMEOUT_MS = 3_000
RECORDS_PER_TXN_MAX = 500
ABORT_SHARE = 0.1
# Of the aborted transactions of a transaction version 1 pipeline, those aborted before any record was produced:
# AddPartitionsToTxn and EndTxn(abort) leave together, as librdkafka's abort_transaction sends EndTxn without
# waiting for an unanswered AddPartitionsToTxn (which the coordinator may hold behind the markers of the
# transaction before). Drawn from a stream of its own, so the other choices of a seed stay as they were.
ABORT_AT_ONCE_SHARE = 0.5
FETCH_MAX_WAIT_MS = 100
PARTITION_BYTES_MAX = 128 * 1024
FIND_COORDINATOR_VERSION = 2
INIT_PRODUCER_ID_VERSION = 3
ADD_PARTITIONS_VERSION = 3
ADD_OFFSETS_VERSION = 3
END_TXN_VERSION = 3
TXN_OFFSET_COMMIT_VERSION = 3
# Transaction version 2 (a Kafka 4.0 client on a cluster with transaction.version 2): the produce and the
# offset commit add their partitions, no AddPartitionsToTxn or AddOffsetsToTxn.
PRODUCE_VERSION_TV2 = 12
END_TXN_VERSION_TV2 = 5
TXN_OFFSET_COMMIT_VERSION_TV2 = 5
OFFSET_FETCH_VERSION = 7
PRODUCE_TIMEOUT_MS = 3_000
OUTPUT_TOPICS = ("out-a", "out-b")

COORDINATOR_ERRORS = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})
RETRIABLE_TXN_ERRORS = COORDINATOR_ERRORS | {ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.REQUEST_TIMED_OUT,
                                             ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.UNKNOWN_SERVER_ERROR}



class MultiTopicClient(KafkaClientBase):
    """KafkaClientBase with the leaders of several topics: `leaders_of[(topic, partition)]`."""

    def __init__(self, host: Any, client_id: int, name: str, topics: tuple[str, ...], partitions: int) -> None:
        super().__init__(host, client_id, name, topics[0], partitions)
        self.topics = topics
        self.leaders_of: dict[tuple[str, int], PartitionLeader] = {}

    def refresh_metadata(self) -> None:
        if self._metadata_inflight:
            return
        broker_id = self.any_broker()
        if broker_id is None:
            return
        request_class = messages.MetadataRequest
        request = request_class(topics=[request_class.MetadataRequestTopic(name=t) for t in self.topics],
                                allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                                include_topic_authorized_operations=False)
        if self.send(broker_id, ApiKey.METADATA, METADATA_VERSION, request, self._on_metadata):
            self._metadata_inflight = True

    def _on_metadata(self, response: Any) -> None:
        self._metadata_inflight = False
        self._metadata_due_ms = self.loop.now_ms + 2_000
        if response is None:
            return
        for topic in response.topics:
            if topic.name not in self.topics or topic.error_code != ErrorCode.NONE:
                continue
            for partition in topic.partitions:
                key = (topic.name, partition.partition_index)
                if partition.error_code == ErrorCode.NONE and partition.leader_id >= 0:
                    self.leaders_of[key] = PartitionLeader(partition.leader_id, partition.leader_epoch)
                else:
                    self.leaders_of.pop(key, None)

    def maybe_refresh_metadata(self) -> None:
        if self.loop.now_ms >= self._metadata_due_ms or len(self.leaders_of) < self.partitions * len(self.topics):
            self.refresh_metadata()


@dataclass
class _Txn:
    """The transaction in progress."""

    seq: int
    partition: int  # the input partition it consumes
    end_offset: int  # the input position after it
    outputs: dict[str, list[bytes]] = field(default_factory=dict)  # output topic -> values
    produced: set = field(default_factory=set)  # output topics acknowledged
    commit: bool = True
    abort_at_once: bool = False  # AddPartitionsToTxn and EndTxn(abort) sent together, nothing produced
    added: bool = False  # its AddPartitionsToTxn was answered NONE
    end_refused: bool = False  # its EndTxn was answered INVALID_TXN_STATE


class SimTxnPipeline(FaultedClient, MultiTopicClient):
    """One exactly-once pipeline instance (see the module docstring)."""

    TRACE_KIND = "txn"
    TICK_MS = TICK_MS

    def __init__(self, host: Any, client_id: int, name: str, transactional_id: str, group: str, input_topic: str,
                 partitions: int, owned: list[int], checkers: Any, transaction_version: int = 1) -> None:
        super().__init__(host, client_id, name, (input_topic, *OUTPUT_TOPICS), partitions)
        self.transactional_id = transactional_id
        self.tv2 = transaction_version >= 2
        self.group = group
        self.input_topic = input_topic
        self.owned = owned
        self.checkers = checkers
        self.paused = False
        self._deferred: list[Callable[[], None]] = []
        self.txn_seq = 0
        self.committed_txns = 0
        self.aborted_txns = 0
        self.restarts = 0
        self.epoch_token = 0
        # Each output record keyed by its value (its transaction and input, unique), for compacted output topics
        # (a compacted topic refuses records without a key); without it, outputs have no key.
        self.keyed_outputs = False
        self.abort_rng = self.loop.derive_rng(f"client-{name}-abort-at-once")
        self._reset()

    def _reset(self) -> None:
        self.state = "find_txn"
        self.epoch_token += 1
        self.txn_coordinator: int | None = None
        self.group_coordinator: int | None = None
        self.producer_id = -1
        self.producer_epoch = -1
        self.sequences: dict[tuple[str, int], int] = {}
        self.positions: dict[int, int] = {}
        self.committed: dict[int, int] = {}
        self.txn: _Txn | None = None
        self.inflight = False
        self.retry_at_ms = 0
        self._next_partition = 0
        self.input_end: dict[int, int] = {}  # the input high watermark seen per owned partition
        self.state_after_find = "init"
        self.state_after_group: str | None = None
        self.consume_at_once = False  # the next fetch leaves at once, not at the next tick

    # --- lifecycle (FaultedClient) ----------------------------------------------------------------------------

    def _guard_token(self) -> int:
        return self.epoch_token

    def _on_restart(self) -> None:
        self.restarts += 1

    def idle(self) -> bool:
        """Caught up: everything it owns is consumed up to the input's end and committed, no transaction open."""
        return (self.state == "consume" and self.txn is None
                and all(self.committed.get(p, -1) >= self.input_end.get(p, 0) and self.input_end.get(p, -1) >= 0
                        for p in self.owned))

    def _answered(self) -> None:
        self._step_now()  # the next step leaves at once, as a client's would, not at the next tick

    def _step_now(self) -> None:
        if self.running and not self.paused and not self.inflight and self.loop.now_ms >= self.retry_at_ms \
                and (self.state != "consume" or self.consume_at_once):
            self.consume_at_once = False
            getattr(self, f"_step_{self.state}")()

    def _request(self, broker: int | None, api_key: int, version: int, request: Any,
                 callback: Callable[[Any], None]) -> None:
        token = self.epoch_token
        if broker is None or not self.send(broker, api_key, version, request, self._guarded(token, callback)):
            self.inflight = False
            self.retry_at_ms = self.loop.now_ms + RETRY_BACKOFF_MS
            if api_key in (ApiKey.OFFSET_FETCH, ApiKey.TXN_OFFSET_COMMIT):
                self.group_coordinator = None
            elif api_key != ApiKey.PRODUCE and api_key != ApiKey.FETCH:
                self.txn_coordinator = None
            return
        self.inflight = True

    def _later(self) -> None:
        self.inflight = False
        self.retry_at_ms = self.loop.now_ms + RETRY_BACKOFF_MS

    def _start_over(self, reason: str) -> None:
        """A fatal answer for this producer epoch: InitProducerId again (aborting the open transaction)."""
        self.host.trace("txn.start_over", self.name, reason)
        if self.txn is not None:
            self.checkers.observe_txn_fenced(self.txn_key(self.txn))
        self._reset()
        self.retry_at_ms = self.loop.now_ms + RETRY_BACKOFF_MS

    def txn_key(self, txn: _Txn) -> str:
        return f"{self.transactional_id}|{self.producer_epoch}|{txn.seq}"

    # --- the state machine -------------------------------------------------------------------------------

    def _tick(self) -> None:
        if not self.running:
            return
        self.loop.call_later(TICK_MS * US_PER_MS, self._tick)
        if self.paused:
            return
        self.maybe_refresh_metadata()
        if self.inflight or self.loop.now_ms < self.retry_at_ms:
            return
        step = getattr(self, f"_step_{self.state}")
        step()

    def _step_find_txn(self) -> None:
        request = messages.FindCoordinatorRequest(key=self.transactional_id, key_type=1)

        def on_found(response: Any) -> None:
            if response is None or response.error_code != ErrorCode.NONE:
                self._later()
                return
            self.inflight = False
            self.txn_coordinator = response.node_id
            self.state = "init" if self.producer_id < 0 else self.state_after_find

        self._request(self.any_broker(), ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION, request, on_found)

    def _to_txn_coordinator(self, api_key: int, version: int, request: Any, on_answer: Callable[[int], None],
                            code_of: Callable[[Any], int] = lambda r: r.error_code) -> None:
        """Send to the transaction coordinator; coordinator errors find it again and repeat the state."""
        if self.txn_coordinator is None:
            self.state_after_find, self.state = self.state, "find_txn"
            return

        def on_response(response: Any) -> None:
            if response is None:
                self.txn_coordinator = None
                self.state_after_find, self.state = self.state, "find_txn"
                self._later()
                return
            code = code_of(response)
            if code in COORDINATOR_ERRORS:
                self.txn_coordinator = None
                self.state_after_find, self.state = self.state, "find_txn"
                self._later()
            elif code in RETRIABLE_TXN_ERRORS:
                self._later()
            else:
                self.inflight = False
                on_answer(code, response)

        self._request(self.txn_coordinator, api_key, version, request, on_response)

    def _step_init(self) -> None:
        request = messages.InitProducerIdRequest(transactional_id=self.transactional_id,
                                                 transaction_timeout_ms=TXN_TIMEOUT_MS, producer_id=-1, producer_epoch=-1)

        def on_answer(code: int, response: Any) -> None:
            if code != ErrorCode.NONE:
                self._later()
                return
            self.producer_id, self.producer_epoch = response.producer_id, response.producer_epoch
            self.sequences = {}
            self.host.trace("txn.init", self.name, self.producer_id, self.producer_epoch)
            self.checkers.observe_init(self.transactional_id, self.producer_epoch)
            self.state = "find_group"

        self._to_txn_coordinator(ApiKey.INIT_PRODUCER_ID, INIT_PRODUCER_ID_VERSION, request, on_answer)

    def _step_find_group(self) -> None:
        request = messages.FindCoordinatorRequest(key=self.group, key_type=0)

        def on_found(response: Any) -> None:
            if response is None or response.error_code != ErrorCode.NONE:
                self._later()
                return
            self.inflight = False
            self.group_coordinator = response.node_id
            self.state = self.state_after_group or "offsets"
            self.state_after_group = None

        self._request(self.any_broker(), ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION, request, on_found)

    def _step_offsets(self) -> None:
        if self.group_coordinator is None:
            self.state_after_group, self.state = "offsets", "find_group"
            return
        request_class = messages.OffsetFetchRequest
        request = request_class(group_id=self.group, require_stable=True, topics=[request_class.OffsetFetchRequestTopic(
            name=self.input_topic, partition_indexes=list(self.owned))])

        def on_response(response: Any) -> None:
            if response is None or response.error_code in COORDINATOR_ERRORS:
                self.group_coordinator = None
                self.state_after_group, self.state = "offsets", "find_group"
                self._later()
                return
            codes = [p.error_code for t in response.topics for p in t.partitions]
            if response.error_code != ErrorCode.NONE or any(codes):
                self._later()  # UNSTABLE_OFFSET_COMMIT: a transaction of ours is still being decided
                return
            self.inflight = False
            for topic in response.topics:
                for partition in topic.partitions:
                    offset = max(partition.committed_offset, 0)
                    self.positions[partition.partition_index] = offset
                    self.committed[partition.partition_index] = offset
            self.host.trace("txn.positions", self.name, ",".join(f"{p}:{o}" for p, o in sorted(self.positions.items())))
            self.state = "consume"

        self._request(self.group_coordinator, ApiKey.OFFSET_FETCH, OFFSET_FETCH_VERSION, request, on_response)

    def _step_consume(self) -> None:
        partition = self.owned[self._next_partition % len(self.owned)]
        self._next_partition += 1
        leader = self.leaders_of.get((self.input_topic, partition))
        if leader is None:
            self._later()
            return
        position = self.positions[partition]
        request_class = messages.FetchRequest
        request = request_class(
            replica_id=-1, max_wait_ms=FETCH_MAX_WAIT_MS, min_bytes=1, max_bytes=PARTITION_BYTES_MAX, isolation_level=1,
            session_id=0, session_epoch=-1, topics=[request_class.FetchTopic(topic=self.input_topic, partitions=[
                request_class.FetchPartition(partition=partition, current_leader_epoch=leader.leader_epoch,
                                             fetch_offset=position, log_start_offset=-1,
                                             partition_max_bytes=PARTITION_BYTES_MAX)])],
            forgotten_topics_data=[], rack_id="")

        def on_fetched(response: Any) -> None:
            self.inflight = False
            if response is None:
                self._later()
                return
            data = response.responses[0].partitions[0]
            if response.error_code or data.error_code:
                self._metadata_due_ms = 0
                self._later()
                return
            self.input_end[partition] = data.last_stable_offset
            try:
                records, _ = decode_fetched(data.records, position)
            except KafkaError:
                self._later()  # a corrupt read: fetched again
                return
            records = records[:RECORDS_PER_TXN_MAX]
            if not records:
                return
            self._begin(partition, records)

        self._request(leader.leader_id, ApiKey.FETCH, FETCH_VERSION, request, on_fetched)

    def _begin(self, partition: int, records: list) -> None:
        self.txn_seq += 1
        txn = _Txn(self.txn_seq, partition, records[-1].offset + 1)
        txn.commit = self.rng.random() >= ABORT_SHARE
        txn.abort_at_once = not txn.commit and not self.tv2 and self.abort_rng.random() < ABORT_AT_ONCE_SHARE
        key = self.txn_key(txn)
        for topic in OUTPUT_TOPICS:
            txn.outputs[topic] = [f"{key}|{partition}:{r.offset}".encode() for r in records]
        self.txn = txn
        self.checkers.observe_txn_begin(key, partition, [r.offset for r in records],
                                        {(t, partition): len(v) for t, v in txn.outputs.items()})
        self.state = "produce" if self.tv2 else "add_partitions"

    def _step_add_partitions(self) -> None:
        txn = self.txn
        request_class = messages.AddPartitionsToTxnRequest
        request = request_class(
            v3_and_below_transactional_id=self.transactional_id, v3_and_below_producer_id=self.producer_id,
            v3_and_below_producer_epoch=self.producer_epoch,
            v3_and_below_topics=[request_class.AddPartitionsToTxnTopic(name=t, partitions=[txn.partition])
                                 for t in OUTPUT_TOPICS])

        def code_of(response: Any) -> int:
            codes = [p.partition_error_code for t in response.results_by_topic_v3_and_below
                     for p in t.results_by_partition if p.partition_error_code]
            return codes[0] if codes else ErrorCode.NONE

        def on_answer(code: int, response: Any) -> None:
            if code != ErrorCode.NONE:
                self._start_over(f"add_partitions:{ErrorCode(code).name}")
                return
            txn.added = True
            self.state = "produce"

        key = self.txn_key(txn)

        def on_unawaited_answer(response: Any) -> None:
            # A broker answers this before the EndTxn sent behind it on the same connection; the check below also
            # covers the other order (the simulated listener's planted bug answers_when_ready).
            if not self.running or response is None or code_of(response) != ErrorCode.NONE:
                return
            txn.added = True
            if txn.end_refused:
                self.checkers.observe_end_txn_refused(key, txn.commit)

        if txn.abort_at_once and self.txn_coordinator is not None:
            # Its answer is not waited for: the EndTxn(abort) sent behind it on the same connection, which the
            # coordinator handles after it, ends this transaction.
            self.host.trace("txn.abort_at_once", self.name, key)
            self.send(self.txn_coordinator, ApiKey.ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_VERSION, request,
                      on_unawaited_answer)
            self.state = "end"
            self._step_end()
            return
        self._to_txn_coordinator(ApiKey.ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_VERSION, request, on_answer, code_of)

    def _step_produce(self) -> None:
        txn = self.txn
        pending = [t for t in OUTPUT_TOPICS if t not in txn.produced]
        if not pending:
            if self.tv2:
                self.state = "txn_commit"
                self._step_txn_commit()
            else:
                self.state = "add_offsets"
                self._step_add_offsets()
            return
        topic = pending[0]
        key = (topic, txn.partition)
        leader = self.leaders_of.get(key)
        if leader is None:
            self._later()
            return
        sequence = self.sequences.get(key, 0)
        values = txn.outputs[topic]
        batch = build_batch([(v if self.keyed_outputs else None, v) for v in values],
                            base_timestamp=self.loop.now_ms,
                            producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                            base_sequence=sequence, is_transactional=True)
        request_class = messages.ProduceRequest
        request = request_class(transactional_id=self.transactional_id, acks=-1, timeout_ms=PRODUCE_TIMEOUT_MS,
                                topic_data=[request_class.TopicProduceData(name=topic, partition_data=[
                                    request_class.PartitionProduceData(index=txn.partition, records=batch)])])

        def on_response(response: Any) -> None:
            self.inflight = False
            if response is None:
                self._later()  # the same batch again: a duplicate is answered with its offsets
                return
            code = response.responses[0].partition_responses[0].error_code
            if code == ErrorCode.NONE:
                self.sequences[key] = sequence + len(values)
                txn.produced.add(topic)
            elif code in RETRIABLE_PRODUCE_ERRORS:
                self._metadata_due_ms = 0
                self._later()
            else:
                self._start_over(f"produce:{ErrorCode(code).name}")

        self._request(leader.leader_id, ApiKey.PRODUCE, PRODUCE_VERSION_TV2 if self.tv2 else PRODUCE_VERSION, request,
                      on_response)

    def _step_add_offsets(self) -> None:
        request = messages.AddOffsetsToTxnRequest(transactional_id=self.transactional_id, producer_id=self.producer_id,
                                                  producer_epoch=self.producer_epoch, group_id=self.group)

        def on_answer(code: int, response: Any) -> None:
            if code != ErrorCode.NONE:
                self._start_over(f"add_offsets:{ErrorCode(code).name}")
                return
            self.state = "txn_commit"

        self._to_txn_coordinator(ApiKey.ADD_OFFSETS_TO_TXN, ADD_OFFSETS_VERSION, request, on_answer)

    def _step_txn_commit(self) -> None:
        if self.group_coordinator is None:
            self.state_after_group, self.state = "txn_commit", "find_group"
            return
        txn = self.txn
        request_class = messages.TxnOffsetCommitRequest
        request = request_class(
            transactional_id=self.transactional_id, group_id=self.group, producer_id=self.producer_id,
            producer_epoch=self.producer_epoch, generation_id=-1, member_id="", group_instance_id=None,
            topics=[request_class.TxnOffsetCommitRequestTopic(name=self.input_topic, partitions=[
                request_class.TxnOffsetCommitRequestPartition(partition_index=txn.partition,
                                                              committed_offset=txn.end_offset,
                                                              committed_leader_epoch=-1, committed_metadata="")])])

        def on_response(response: Any) -> None:
            self.inflight = False
            if response is None:
                self.group_coordinator = None
                self._later()
                return
            code = response.topics[0].partitions[0].error_code
            if code in COORDINATOR_ERRORS:
                self.group_coordinator = None
                self._later()
            elif code in RETRIABLE_TXN_ERRORS:
                self._later()
            elif code != ErrorCode.NONE:
                self._start_over(f"txn_offset_commit:{ErrorCode(code).name}")
            else:
                self.state = "end"

        self._request(self.group_coordinator, ApiKey.TXN_OFFSET_COMMIT,
                      TXN_OFFSET_COMMIT_VERSION_TV2 if self.tv2 else TXN_OFFSET_COMMIT_VERSION, request, on_response)

    def _step_end(self) -> None:
        txn = self.txn
        request = messages.EndTxnRequest(transactional_id=self.transactional_id, producer_id=self.producer_id,
                                         producer_epoch=self.producer_epoch, committed=txn.commit)

        def on_answer(code: int, response: Any) -> None:
            if code == ErrorCode.INVALID_TXN_STATE:
                txn.end_refused = True
                if txn.added:
                    self.checkers.observe_end_txn_refused(self.txn_key(txn), txn.commit)
            if code != ErrorCode.NONE:
                self._start_over(f"end_txn:{ErrorCode(code).name}")
                return
            key = self.txn_key(txn)
            self.host.trace("txn.end", self.name, key, int(txn.commit))
            if self.tv2:  # the next transaction's producer id and epoch (bumped; a new id after an overflow)
                self.producer_id, self.producer_epoch = response.producer_id, response.producer_epoch
                self.sequences = {}
            if txn.commit:
                self.committed_txns += 1
                self.positions[txn.partition] = txn.end_offset
                self.committed[txn.partition] = txn.end_offset
                self.checkers.observe_txn_committed(key)
            else:
                self.aborted_txns += 1
                self.positions[txn.partition] = self.committed[txn.partition]
                self.checkers.observe_txn_aborted(key)
            self.txn = None
            self.state = "consume"
            # As a librdkafka pipeline, whose consumer has the next records prefetched: the next transaction
            # starts as soon as EndTxn is answered, usually before the coordinator has written the markers.
            self.consume_at_once = True

        self._to_txn_coordinator(ApiKey.END_TXN, END_TXN_VERSION_TV2 if self.tv2 else END_TXN_VERSION, request,
                                 on_answer)
        if self.inflight and self.txn_coordinator is not None:
            self.host.end_txn_sent(self, self.txn_coordinator)  # the workload may kill the coordinator now


class SimTxnReader(MultiTopicClient):
    """A read_committed reader of the output topics (see the module docstring)."""

    def __init__(self, host: Any, client_id: int, name: str, topics: tuple[str, ...], partitions: int,
                 on_record: Callable[[tuple[str, int], int, bytes, int], None]) -> None:
        super().__init__(host, client_id, name, topics, partitions)
        self.on_record = on_record
        self.positions = {(t, p): 0 for t in topics for p in range(partitions)}
        self.fetching: set[tuple[str, int]] = set()
        self.retry_at: dict[tuple[str, int], int] = {}
        self.records = 0
        self.rewinds = 0

    def rewind(self) -> None:
        """Read every partition again from offset 0 (an answer to a fetch in flight is then ignored)."""
        self.positions = dict.fromkeys(self.positions, 0)
        self.rewinds += 1
        self.host.trace("client.rewind", self.name)

    def start(self) -> None:
        self.loop.call_later(TICK_MS * US_PER_MS, self._tick)

    def _tick(self) -> None:
        if not self.running:
            return
        self.loop.call_later(TICK_MS * US_PER_MS, self._tick)
        self.maybe_refresh_metadata()
        for key in sorted(self.positions):
            self._fetch(key)

    def _fetch(self, key: tuple[str, int]) -> None:
        leader = self.leaders_of.get(key)
        if key in self.fetching or leader is None or self.loop.now_ms < self.retry_at.get(key, 0):
            return
        topic, partition = key
        position = self.positions[key]
        request_class = messages.FetchRequest
        request = request_class(
            replica_id=-1, max_wait_ms=FETCH_MAX_WAIT_MS, min_bytes=1, max_bytes=PARTITION_BYTES_MAX, isolation_level=1,
            session_id=0, session_epoch=-1, topics=[request_class.FetchTopic(topic=topic, partitions=[
                request_class.FetchPartition(partition=partition, current_leader_epoch=leader.leader_epoch,
                                             fetch_offset=position, log_start_offset=-1,
                                             partition_max_bytes=PARTITION_BYTES_MAX)])],
            forgotten_topics_data=[], rack_id="")
        if self.send(leader.leader_id, ApiKey.FETCH, FETCH_VERSION, request,
                     lambda response: self._on_fetched(key, position, leader, response)):
            self.fetching.add(key)

    def _on_fetched(self, key: tuple[str, int], position: int, leader: PartitionLeader, response: Any) -> None:
        self.fetching.discard(key)
        if response is None or self.positions[key] != position:
            self.retry_at[key] = self.loop.now_ms + RETRY_BACKOFF_MS
            return
        data = response.responses[0].partitions[0]
        if response.error_code or data.error_code:
            self._metadata_due_ms = 0
            self.retry_at[key] = self.loop.now_ms + RETRY_BACKOFF_MS
            return
        aborted = sorted((a.first_offset, a.producer_id) for a in (data.aborted_transactions or []))
        try:
            records, next_offset = decode_fetched(data.records, position, aborted)
        except KafkaError:
            self.retry_at[key] = self.loop.now_ms + RETRY_BACKOFF_MS
            return
        for record in records:
            self.on_record(key, record.offset, bytes(record.value or b""), data.last_stable_offset)
            self.records += 1
        if next_offset > position:
            self.positions[key] = next_offset
            self._fetch(key)
        else:
            self.retry_at[key] = self.loop.now_ms + TICK_MS

    def caught_up(self, ends: dict[tuple[str, int], int]) -> str | None:
        for key, end in sorted(ends.items()):
            if self.positions.get(key, 0) < end:
                return f"reader at {self.positions.get(key, 0)} of {key[0]}-{key[1]} < {end}"
        return None
