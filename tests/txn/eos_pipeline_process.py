"""An exactly-once consume-transform-produce pipeline with confluent-kafka, run as its own process so a test can
SIGKILL and restart it: a group consumer (read_committed) of the input topic, a transactional producer to
the output topic, the consumer's offsets committed in the producer's transaction (send_offsets_to_transaction).

    python -m tests.txn.eos_pipeline_process BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID PROGRESS_FILE [RATE]

Each output record carries its input record's value. On an abortable error the transaction is aborted and the
consumer rewinds to the committed offsets; a fatal one (fenced) exits with status 3 (the test restarts it).

PROGRESS_FILE gets a line per committed transaction with the number of records in it. RATE (records per
second, default unlimited) paces the pipeline, so that a test's kills land while input remains.

A transactional call that has not returned well after its own timeout exits the process with status 4, as a
supervisor's liveness probe would end it: librdkafka (2.16) can block in send_offsets_to_transaction() for ever
when the group coordinator it cached left the cluster's metadata (a restarted broker is fenced, so absent from
Metadata, until it has caught up, as in Kafka), and that call does not honour its timeout while it waits for a
coordinator (librdkafka issues 5511 and 5456).
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

TRANSACTION_RECORDS_MAX = 500
API_TIMEOUT_S = 30
HUNG_AFTER_S = API_TIMEOUT_S + 15  # a call still blocked this long after it began ignored its timeout
EXIT_HUNG = 4


class Watchdog:
    """Ends the process (status 4) when a transactional call stays blocked past its timeout."""

    def __init__(self) -> None:
        self.call: tuple[str, float] | None = None
        threading.Thread(target=self._watch, daemon=True).start()

    def __call__(self, name: str, function, *args):
        self.call = (name, time.monotonic())
        try:
            return function(*args)
        finally:
            self.call = None

    def _watch(self) -> None:
        while True:
            time.sleep(1)
            call = self.call
            if call is not None and time.monotonic() - call[1] > HUNG_AFTER_S:
                print(f"hung: {call[0]}() blocked for {HUNG_AFTER_S} s with a {API_TIMEOUT_S} s timeout", flush=True)
                os._exit(EXIT_HUNG)


def main(bootstrap: str, input_topic: str, output_topic: str, group: str, transactional_id: str,
         progress_path: str, rate: str = "0") -> int:
    records_per_second = float(rate)
    # Where the pipeline's thread is every 30 s, into the log the test keeps: a stall shows what it waits on.
    faulthandler.dump_traceback_later(30, repeat=True)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000,
                         # The group's, each partition's and each connection's state and every fetch, in the log the
                         # test keeps: what to read when a partition stops being consumed (the open liveness defect
                         # of issue #11).
                         "debug": "cgrp,topic,fetch,broker"})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5,
                         "transaction.timeout.ms": 30_000, "debug": "eos,protocol"})
    producer.init_transactions(60)
    watchdog = Watchdog()
    consumer.subscribe([input_topic])
    started, committed = time.monotonic(), 0
    with open(progress_path, "a") as progress:
        while True:
            messages = [m for m in consumer.consume(TRANSACTION_RECORDS_MAX, 1.0) if not m.error()]
            if not messages:
                continue
            try:
                producer.begin_transaction()
                for message in messages:
                    producer.produce(output_topic, key=message.key(), value=message.value(),
                                     partition=message.partition())
                positions = consumer.position(consumer.assignment())
                watchdog("send_offsets_to_transaction", producer.send_offsets_to_transaction, positions,
                         consumer.consumer_group_metadata(), API_TIMEOUT_S)
                watchdog("commit_transaction", producer.commit_transaction, API_TIMEOUT_S)
            except KafkaException as exc:
                error = exc.args[0]
                if error.fatal():
                    print(f"fatal: {error}", flush=True)
                    return 3
                print(f"abortable: {error}", flush=True)
                try:
                    watchdog("abort_transaction", producer.abort_transaction, API_TIMEOUT_S)
                except KafkaException as abort_error:
                    if abort_error.args[0].fatal():
                        return 3
                    time.sleep(0.5)
                _rewind(consumer)
                continue
            progress.write(f"{len(messages)}\n")
            progress.flush()
            committed += len(messages)
            if records_per_second > 0:
                time.sleep(max(0.0, committed / records_per_second - (time.monotonic() - started)))


def _rewind(consumer: Consumer) -> None:
    """Back to the group's committed offsets (what the aborted transaction consumed is read again)."""
    assignment = consumer.assignment()
    if not assignment:
        return
    for committed in consumer.committed(assignment, 30):
        if committed.offset >= 0:
            consumer.seek(committed)
        else:
            consumer.seek(TopicPartition(committed.topic, committed.partition, 0))


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:8]))
