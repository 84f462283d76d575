"""A group consumer in its own process, for tests that SIGKILL or restart it: confluent-kafka or kafka-python.

Usage: python -m tests.groupcoord.consumer_process CLIENT BOOTSTRAP GROUP TOPIC OUT_FILE [JSON_CONFIG]

It subscribes to TOPIC in GROUP and writes one line per event to OUT_FILE, flushed at once so that a SIGKILL
loses nothing written: `R <partition> <offset> <value>` per record consumed, `A <p,p,...>` for each new
assignment (the whole assignment after the change). Offsets are committed synchronously after every poll that
returned records and when partitions are revoked, so a record is consumed again only if the process dies
between consuming it and that commit. SIGTERM closes the consumer cleanly (LeaveGroup) and exits 0.
With FLOTILLA_TEST_CLIENT_DEBUG set, kafka-python logs at DEBUG to standard error (the process's log file).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys

POLL_TIMEOUT_S = 0.2
BATCH_MAX = 500


def main(argv: list[str]) -> int:
    client, bootstrap, group, topic, out_path = argv[:5]
    extra = json.loads(argv[5]) if len(argv) > 5 else {}
    stopping = []
    if os.environ.get("FLOTILLA_TEST_CLIENT_DEBUG"):
        logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(threadName)s %(name)s %(message)s")
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    with open(out_path, "a", buffering=1) as out:
        runner = run_confluent if client == "confluent" else run_kafka_python
        runner(bootstrap, group, topic, out, extra, stopping)
    return 0


def run_confluent(bootstrap: str, group: str, topic: str, out, extra: dict, stopping: list) -> None:
    from confluent_kafka import Consumer

    config = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
              "enable.auto.commit": False, **extra}
    consumer = Consumer(config)
    owned: set[int] = set()

    # confluent-kafka applies the (incremental, for cooperative-sticky and KIP-848) assignment itself after
    # these callbacks return.
    def on_assign(consumer_, partitions):
        owned.update(p.partition for p in partitions)
        out.write(f"A {','.join(map(str, sorted(owned)))}\n")

    def on_revoke(consumer_, partitions):
        try:
            consumer_.commit(asynchronous=False)
        except Exception as error:  # noqa: BLE001 - nothing consumed since the last commit
            out.write(f"E revoke-commit {error}\n")
        owned.difference_update(p.partition for p in partitions)
        out.write(f"A {','.join(map(str, sorted(owned)))}\n")

    def on_lost(consumer_, partitions):  # the session expired: the offsets are no longer ours to commit
        owned.difference_update(p.partition for p in partitions)
        out.write(f"A {','.join(map(str, sorted(owned)))}\n")

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    while not stopping:
        messages = consumer.consume(BATCH_MAX, POLL_TIMEOUT_S)
        consumed = [m for m in messages if m.error() is None]
        for message in consumed:
            out.write(f"R {message.partition()} {message.offset()} {message.value().decode()}\n")
        if consumed:
            try:
                consumer.commit(asynchronous=False)
            except Exception as error:  # noqa: BLE001 - reported, the next commit carries the offsets
                out.write(f"E commit {error}\n")
    consumer.close()


def run_kafka_python(bootstrap: str, group: str, topic: str, out, extra: dict, stopping: list) -> None:
    import kafka
    from kafka import ConsumerRebalanceListener, KafkaConsumer

    KAFKA_PYTHON_3 = int(kafka.__version__.split(".")[0]) >= 3

    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, **extra)
    owned: set[int] = set()

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            if revoked:
                try:
                    # kafka-python 3 runs listeners on its IO thread, where a blocking commit() raises; the
                    # main loop has committed everything polled already, so this one only makes sure.
                    if KAFKA_PYTHON_3:
                        consumer.commit_async()
                    else:
                        consumer.commit()
                except Exception as error:  # noqa: BLE001
                    out.write(f"E revoke-commit {error}\n")
            owned.difference_update(tp.partition for tp in revoked)
            out.write(f"A {','.join(map(str, sorted(owned)))}\n")

        def on_partitions_assigned(self, assigned):
            owned.update(tp.partition for tp in assigned)
            out.write(f"A {','.join(map(str, sorted(owned)))}\n")

    consumer.subscribe([topic], listener=Listener())
    while not stopping:
        batches = consumer.poll(timeout_ms=int(POLL_TIMEOUT_S * 1000), max_records=BATCH_MAX)
        count = 0
        for records in batches.values():
            for record in records:
                out.write(f"R {record.partition} {record.offset} {record.value.decode()}\n")
                count += 1
        if count:
            try:
                consumer.commit()
            except Exception as error:  # noqa: BLE001
                out.write(f"E commit {error}\n")
    consumer.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
