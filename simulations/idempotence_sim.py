"""The idempotence workload: the cluster workload with an idempotent producer that pipelines, as librdkafka and
Kafka's Java producer do with `enable.idempotence` (up to five requests in flight per partition).

Theory of operation. Everything of the cluster workload (simulations/cluster_sim.py: a consumer, every node and
network fault) runs as it does there; the producers are replaced by one idempotent producer (acks=all), which
gets a producer id with InitProducerId and stamps every batch with it, its epoch and the batch's base
sequence. Per partition it keeps at most `MAX_IN_FLIGHT` batches in flight, each with the sequence it was
given when first sent, all to one broker (when the leader moves, what is in flight to the old one is answered
first, as librdkafka drains it). An answer that fails a batch (a lost connection, a request timeout, a retriable error,
or OUT_OF_ORDER_SEQUENCE_NUMBER while an earlier batch of the partition is still unresolved, the consequence
of that batch's own failure) stops new sends on the partition; once nothing of it is in flight, every batch
not yet acknowledged goes again, in sequence order, with its own sequence. That is how Kafka's producers keep
order and write each record once across retries: a batch that reached the log before its answer was lost
is recognised by the leader as a duplicate of one of the producer's last five batches (txn/producer_state.py)
and answered with its first offsets, without a second append. Batches never expire (no delivery timeout), so
the liveness phase requires every record acknowledged.

Checkers (besides the cluster workload's: acked_not_lost, replicas_identical, ...):
- `idempotent_no_duplicates`: in the converged logs each record the producer sent appears at most once;
- `idempotent_in_order`: on each partition the producer's records appear in the order it sent them;
- `idempotent_never_refused`: the leader never refuses the first batch the producer has not seen acknowledged
  (OUT_OF_ORDER_SEQUENCE_NUMBER with no earlier batch unresolved: the leader lost track of the sequence), nor
  answers any batch with an error that is neither retriable nor that consequence. A node that still takes
  itself for the leader after the controller moved the partition (its metadata behind, after a partition of the
  network) judges by the producer state it had then, as a Kafka broker does (a Produce request carries no leader
  epoch): its refusal is not the leader's, and the client sends the batch again once its metadata names the
  leader (`leads_in_newest_epoch`, the simulation's view).

Planted bug: `--bugs dedup_last_batch_only` (a producer's state keeps the metadata of its last batch only, not
Kafka's five: a retried batch with others appended after it is refused as out of order, where Kafka answers it
as the duplicate it is).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode
from partitions.records import build_batch
from simulations import cluster_sim
from simulations.cluster_checkers import ClusterCheckers, ReplicaLog
from simulations.cluster_sim import CLIENT_ID_BASE, PARTITIONS, TOPIC, ClusterSimulation
from simulations.kafka_clients import RETRIABLE_PRODUCE_ERRORS, SimProducer
from simulations.run import RunConfig, RunResult

DESCRIPTION = "the cluster workload with an idempotent producer pipelining up to five batches per partition"
MAX_IN_FLIGHT = 5  # max.in.flight.requests.per.connection, the most Kafka allows with idempotence
LINGER_MS = 10  # short, so that batches pile up in flight when answers slow down
BATCH_RECORDS_MAX = 20
PRODUCE_VERSION = 9
INIT_PRODUCER_ID_VERSION = 4
NAME = "idem"
VALUE_PREFIX = f"{NAME}:".encode()  # SimProducer's values: "name:sequence"
IDEMPOTENCE_CHECKER_NAMES = ("idempotent_no_duplicates", "idempotent_in_order", "idempotent_never_refused")
IDEMPOTENCE_BUGS = {"dedup_last_batch_only": "bug_dedup_last_batch_only",
                    "follower_skips_producer_state": "bug_follower_skips_producer_state"}


@dataclass
class _SeqBatch:
    partition: int
    base_sequence: int
    values: list[bytes]
    keys: list[bytes | None]
    sending: bool = False
    acked: bool = False
    attempts: int = 0
    sent_to: int = -1  # the broker of the last attempt


class IdempotenceCheckers(ClusterCheckers):
    """The cluster workload's checkers plus the idempotence ones (see the module docstring)."""

    extra_checker_names = (*ClusterCheckers.extra_checker_names, *IDEMPOTENCE_CHECKER_NAMES)

    def check_final_logs(self, logs: dict[tuple[str, int], list[ReplicaLog]]) -> None:
        super().check_final_logs(logs)
        self.check_written_once_in_order(logs)

    def check_written_once_in_order(self, logs: dict[tuple[str, int], list[ReplicaLog]]) -> None:
        """idempotent_no_duplicates and idempotent_in_order over each partition's replica with the highest high
        watermark (replicas_identical compares the others with it)."""
        for key in sorted(logs):
            replicas = logs[key]
            if not replicas:
                continue
            replica = max(replicas, key=lambda r: r.high_watermark)
            seen: dict[bytes, int] = {}
            last_sequence = 0
            for offset in sorted(o for o in replica.values if o < replica.high_watermark):
                value = replica.values[offset]
                if value is None or not value.startswith(VALUE_PREFIX):
                    continue
                if value in seen:
                    self.violate("idempotent_no_duplicates", f"{key[0]}-{key[1]} holds {value.decode()} at offsets "
                                                             f"{seen[value]} and {offset} (node {replica.node_id})")
                seen[value] = offset
                sequence = int(value.split(b":")[1])
                if sequence < last_sequence:
                    self.violate("idempotent_in_order", f"{key[0]}-{key[1]} holds {value.decode()} at offset "
                                                        f"{offset}, after record {last_sequence} (node "
                                                        f"{replica.node_id})")
                last_sequence = max(last_sequence, sequence)


class SimIdempotentProducer(SimProducer):
    """An idempotent acks=all producer with up to MAX_IN_FLIGHT batches in flight per partition (see the module
    docstring). Record generation, keys and partitioning are SimProducer's."""

    def __init__(self, host: Any, client_id: int, records_per_s: int, keyed: bool, checkers: IdempotenceCheckers
                 ) -> None:
        super().__init__(host, client_id, NAME, TOPIC, PARTITIONS, -1, keyed, records_per_s, checkers.observe_ack)
        self.checkers = checkers
        self.producer_id: int | None = None
        self.producer_epoch = -1
        self._init_inflight = False
        self._next_sequence = {p: 0 for p in range(PARTITIONS)}
        self._unacked: dict[int, deque[_SeqBatch]] = {p: deque() for p in range(PARTITIONS)}
        self._resend: dict[int, bool] = {p: False for p in range(PARTITIONS)}
        self.stopped = False  # refused for good: the run has failed idempotent_never_refused
        self.max_in_flight_seen = 0

    def pending_records(self) -> int:
        if self.stopped:
            return 0
        return sum(len(q) for q in self._queues.values()) + sum(
            len(b.values) for q in self._unacked.values() for b in q if not b.acked)

    def _tick(self) -> None:
        if self.running and self.producer_id is None and not self._init_inflight:
            self._init_producer_id()
        super()._tick()

    def _init_producer_id(self) -> None:
        broker_id = self.any_broker()
        if broker_id is None:
            return
        request = messages.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000,
                                                 producer_id=-1, producer_epoch=-1)

        def on_answer(response: Any) -> None:
            self._init_inflight = False
            if response is None or response.error_code != ErrorCode.NONE:
                return  # again at a later tick
            self.producer_id, self.producer_epoch = response.producer_id, response.producer_epoch
            self.host.trace("client.producer_id", self.name, self.producer_id, self.producer_epoch)

        self._init_inflight = self.send(broker_id, ApiKey.INIT_PRODUCER_ID, INIT_PRODUCER_ID_VERSION, request,
                                        on_answer)

    def _maybe_send(self, partition: int) -> None:
        if self.producer_id is None or self.stopped:
            return
        batches = self._unacked[partition]
        in_flight = sum(1 for b in batches if b.sending)
        leader = self.leaders.get(partition)
        if in_flight and (leader is None or any(b.sending and b.sent_to != leader.leader_id for b in batches)):
            return  # the leader moved: what is on its way to the old one is answered first (librdkafka drains it)
        if self._resend[partition]:
            if in_flight or self.loop.now_ms < self._retry_at_ms.get(partition, 0):
                return  # every answer first: a resend must not overtake what is still on its way
            self._resend[partition] = False
        for batch in batches:  # what waits to go again, in sequence order
            if batch.acked or batch.sending:
                continue
            if in_flight >= MAX_IN_FLIGHT or not self._send_seq_batch(batch):
                return
            in_flight += 1
        queue = self._queues[partition]
        while queue and in_flight < MAX_IN_FLIGHT:
            lingering = self.generating and len(queue) < BATCH_RECORDS_MAX
            if lingering and self.loop.now_ms - self._oldest_queued_ms.get(partition, 0) < LINGER_MS:
                return
            if leader is None or leader.leader_id not in self.connected:
                return  # a new batch takes its sequence only when it can leave
            self._oldest_queued_ms[partition] = self.loop.now_ms
            taken, self._queues[partition] = queue[:BATCH_RECORDS_MAX], queue[BATCH_RECORDS_MAX:]
            queue = self._queues[partition]
            batch = _SeqBatch(partition, self._next_sequence[partition], [v for _, v in taken],
                              [k for k, _ in taken])
            self._next_sequence[partition] += len(taken)
            batches.append(batch)
            self.stats.sent_records += len(batch.values)
            if not self._send_seq_batch(batch):
                return
            in_flight += 1
        self.max_in_flight_seen = max(self.max_in_flight_seen, in_flight)

    def _send_seq_batch(self, batch: _SeqBatch) -> bool:
        leader = self.leaders.get(batch.partition)
        if leader is None:
            return False
        records = build_batch(zip(batch.keys, batch.values), base_timestamp=self.loop.now_ms,
                              producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                              base_sequence=batch.base_sequence)
        request = self._produce_request(batch.partition, records)
        if not self.send(leader.leader_id, ApiKey.PRODUCE, PRODUCE_VERSION, request,
                         lambda response, batch=batch: self._on_seq_response(batch, response)):
            return False
        batch.attempts += 1
        batch.sending = True
        batch.sent_to = leader.leader_id
        self.host.trace("client.produce", self.name, batch.partition, leader.leader_id, len(batch.values),
                        batch.attempts, batch.base_sequence)
        return True

    def _on_seq_response(self, batch: _SeqBatch, response: Any) -> None:
        batch.sending = False
        if self.stopped or batch.acked:
            return
        partition = batch.partition
        if response is None:
            self._retry_partition(batch, "network")
            return
        answer = response.responses[0].partition_responses[0]
        code = answer.error_code
        if code == ErrorCode.NONE:
            batch.acked = True
            self._report_acknowledged(partition, batch.values, answer.base_offset)
            batches = self._unacked[partition]
            while batches and batches[0].acked:
                batches.popleft()
            self._maybe_send(partition)
        elif code in RETRIABLE_PRODUCE_ERRORS:
            self._retry_partition(batch, ErrorCode(code).name)
        elif code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and self._earlier_unresolved(batch):
            self._retry_partition(batch, "out_of_order_behind_a_retry")
        elif code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and \
                not self.host.leads_in_newest_epoch(batch.sent_to, (self.topic, partition)):
            # A node that has not yet learnt it lost the partition (cut off while the controller moved it, its
            # image not caught up) judges the sequence by the producer state it had then; the client took it for
            # the leader from that node's own stale Metadata answer. Kafka's Produce carries no leader epoch, so
            # a Kafka broker answers the same; the batch was not appended, and goes again to the leader.
            self._retry_partition(batch, "out_of_order_from_a_stale_leader")
        else:
            head = "the first unacknowledged batch" if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER else "a batch"
            self.checkers.violate("idempotent_never_refused",
                                  f"{self.topic}-{partition}: {head} (sequence {batch.base_sequence}, "
                                  f"{len(batch.values)} records, attempt {batch.attempts}) refused "
                                  f"{ErrorCode(code).name} at {self.loop.now_ms} ms")
            self.host.trace("client.produce_error", self.name, partition, int(code))
            self.stopped = True

    def _earlier_unresolved(self, batch: _SeqBatch) -> bool:
        for other in self._unacked[batch.partition]:
            if other is batch:
                return False
            if not other.acked:
                return True
        return False

    def _retry_partition(self, batch: _SeqBatch, reason: str) -> None:
        """SimProducer's retry (a backoff, the metadata refreshed first), of every unacknowledged batch of the
        partition."""
        self._retry(batch, reason)
        self._resend[batch.partition] = True


class IdempotenceSimulation(ClusterSimulation):
    """The cluster simulation with one pipelining idempotent producer (see the module docstring)."""

    checkers_class = IdempotenceCheckers
    extra_bugs = IDEMPOTENCE_BUGS
    idle_phase_ms = 0  # the cluster workload covers the idle phase

    def configure_node(self, state: Any) -> None:
        super().configure_node(state)
        for bug in sorted(self.workload_bugs):
            setattr(state.broker, IDEMPOTENCE_BUGS[bug], True)

    def _make_producers(self) -> list[SimProducer]:
        self.idempotent = SimIdempotentProducer(self, CLIENT_ID_BASE + 3, self.shape.records_per_s, self.shape.keyed,
                                                self.checkers)
        return [self.idempotent]

    def leads_in_newest_epoch(self, node_id: int, key: tuple[str, int]) -> bool:
        """Whether `node_id` leads partition `key` in the newest leader epoch any running node knows of (the
        checkers' view: a client cannot see it)."""
        epochs = [process.broker.partitions[key].replica.leader_epoch for process in self.processes.values()
                  if key in process.broker.partitions]
        process = self.processes.get(node_id)
        hosted = process.broker.partitions.get(key) if process is not None else None
        return hosted is not None and hosted.replica.is_leader and hosted.replica.leader_epoch >= max(epochs)

    def _lagging(self) -> str | None:
        if self.idempotent.producer_id is None:
            return "no producer id yet"
        return super()._lagging()

    def _result(self) -> RunResult:
        result = super()._result()
        result.stats["max_in_flight"] = self.idempotent.max_in_flight_seen
        result.stats["retries"] = self.idempotent.stats.retries
        return result


def run(config: RunConfig) -> RunResult:
    """One idempotence simulation of `config` (see the module docstring). Raises ValueError for an unknown bug."""
    return cluster_sim.run(config, simulation_class=IdempotenceSimulation)
