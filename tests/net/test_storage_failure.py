"""A node whose data directory fails (a write refused, as on a full disk) stops at once with a message that says
so, instead of answering every produce with a closed connection and logging it as a handler's bug; started
again on a healthy disk it recovers its log, every acknowledged record in it."""

from __future__ import annotations

import os
import time

import pytest

from cli.local_cluster import LocalCluster
from tests.net.cluster_helpers import FAST_BROKER_SETTINGS

FILE_SIZE_LIMIT = 2 * 1024 * 1024  # RLIMIT_FSIZE: a segment write past 2 MiB fails (EFBIG), as on a full disk
RECORDS = 6_000
VALUE_BYTES = 1_000


@pytest.mark.slow
def test_a_node_whose_disk_fails_stops_and_recovers_every_acknowledged_record(tmp_path):
    from confluent_kafka import Consumer, Producer

    cluster = LocalCluster(str(tmp_path), nodes=1, file_size_limit=FILE_SIZE_LIMIT, broker=FAST_BROKER_SETTINGS,
                           topic_defaults={"partitions": 1, "replication_factor": 1, "min_insync_replicas": 1})
    cluster.start()
    try:
        acknowledged: dict[int, bytes] = {}

        def delivered(error, message) -> None:
            if error is None:
                acknowledged[message.offset()] = message.value()

        # What the stopped node never answered fails after message.timeout.ms, which is all flush() waits for.
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 5,
                             "message.timeout.ms": 5_000})
        for index in range(RECORDS):
            producer.produce("filling", b"%08d" % index + b"x" * (VALUE_BYTES - 8), on_delivery=delivered)
            producer.poll(0)
            if index == RECORDS // 6:  # a first MiB acknowledged for sure: answers in flight die with the node
                assert producer.flush(30) == 0
        producer.flush(30)
        assert cluster.processes[1].wait(timeout=30) == 1  # stopped: the write past the limit failed
        assert 0 < len(acknowledged) < RECORDS
        with open(cluster.log_path(1)) as log:
            text = log.read()
        assert "storage_failed" in text and "File too large" in text
        data_dir = os.path.join(str(tmp_path), "node-1")
        assert f"flotilla: node 1: stopped: its data directory {data_dir} failed: write to logs/filling-0/" in text
        assert "request_failed" not in text and "internal_error" not in text  # a failed disk is no handler bug

        cluster.file_size_limit = None  # the disk fixed
        cluster.start_node(1)
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "after",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe(["filling"])
        read: dict[int, bytes] = {}
        deadline = time.monotonic() + 60
        while not acknowledged.keys() <= read.keys() and time.monotonic() < deadline:
            for message in consumer.consume(1000, 1):
                if message.error() is None:
                    read[message.offset()] = message.value()
        consumer.close()
        assert {offset: read.get(offset) for offset in acknowledged} == acknowledged
        assert sorted(read) == list(range(len(read)))  # the recovered log is dense from 0
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
        producer.produce("filling", b"after")
        assert producer.flush(30) == 0
    finally:
        cluster.stop()
