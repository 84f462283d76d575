"""An exactly-once consume-transform-produce pipeline with confluent-kafka, run as its own process so a test can
SIGKILL and restart it: a group consumer (read_committed) of the input topic, a transactional producer to
the output topic, the consumer's offsets committed in the producer's transaction (send_offsets_to_transaction).

    python -m tests.txn.eos_pipeline_process BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID PROGRESS_FILE [RATE]

Each output record carries its input record's value. On an abortable error the transaction is aborted and the
consumer rewinds to the committed offsets; a fatal one (fenced) exits with status 3 (the test restarts it).
PROGRESS_FILE gets a line per committed transaction with the number of records in it. RATE (records per
second, default unlimited) paces the pipeline, so that a test's kills land while input remains.
"""

from __future__ import annotations

import faulthandler
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

TRANSACTION_RECORDS_MAX = 500


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
                producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 60)
                producer.commit_transaction(60)
            except KafkaException as exc:
                error = exc.args[0]
                if error.fatal():
                    print(f"fatal: {error}", flush=True)
                    return 3
                print(f"abortable: {error}", flush=True)
                try:
                    producer.abort_transaction(60)
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
