"""Kafka's LogValidator rules that a leader applies on produce (kafka.log.LogValidator)."""

import pytest

from partitions.errors import ErrorCode, InvalidRecordError
from partitions.records import build_batch
from tests.partitions.logtools import open_log


def test_a_compacted_topic_refuses_a_batch_with_a_keyless_record_and_names_it():  # KIP-467 record errors
    log = open_log(cleanup_policy=("compact",))
    batch = build_batch([(b"k1", b"a"), (None, b"b"), (b"k3", b"c"), (None, b"d")], base_timestamp=1_000)
    with pytest.raises(InvalidRecordError) as refused:
        log.append_as_leader(bytearray(batch), 0, 1_000)
    assert refused.value.code == ErrorCode.INVALID_RECORD
    assert [index for index, _ in refused.value.record_errors] == [1, 3]
    assert "Compacted topic cannot accept message without key" in refused.value.message
    assert log.log_end_offset == 0  # nothing of the batch was appended


def test_keyed_records_to_a_compacted_topic_and_keyless_ones_elsewhere_are_appended():
    compacted = open_log(cleanup_policy=("compact",))
    compacted.append_as_leader(bytearray(build_batch([(b"k", b"v")], base_timestamp=1_000)), 0, 1_000)
    assert compacted.log_end_offset == 1
    deleting = open_log()
    deleting.append_as_leader(bytearray(build_batch([(None, b"v")], base_timestamp=1_000)), 0, 1_000)
    assert deleting.log_end_offset == 1
