"""__consumer_offsets records in Kafka's byte layout, and `flotilla dump-log --offsets-decoder`."""

import json
import struct

from cli import main as cli
from coordinator.batches import coordinator_batch
from coordinator.shard import CoordinatorRecord
from groupcoord.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownRecordKey,
    decode_record,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_value,
)


def test_offset_commit_key_and_value_bytes_follow_kafkas_schemas():  # OffsetCommitKey v1, OffsetCommitValue v3
    key = encode_key(OffsetCommitKey("g", "t", 7))
    assert key == struct.pack(">h", 1) + b"\x00\x01g" + b"\x00\x01t" + struct.pack(">i", 7)
    value = encode_offset_commit_value(OffsetCommitValue(42, 3, "m", 1_700_000_000_000))
    assert value == struct.pack(">hqi", 3, 42, 3) + b"\x00\x01m" + struct.pack(">q", 1_700_000_000_000)
    assert decode_record(key, value) == (OffsetCommitKey("g", "t", 7), OffsetCommitValue(42, 3, "m", 1_700_000_000_000))
    assert decode_record(key, None) == (OffsetCommitKey("g", "t", 7), None)  # a tombstone


def test_group_metadata_round_trips_and_an_unknown_key_version_is_skipped():
    member = MemberMetadata("m-1", "i-1", "client", "/127.0.0.1", 30_000, 10_000, b"sub", b"assign")
    value = GroupMetadataValue("consumer", 4, "range", "m-1", 123, (member,))
    key = encode_key(GroupMetadataKey("g"))
    assert key == struct.pack(">h", 2) + b"\x00\x01g"
    assert decode_record(key, encode_group_metadata_value(value)) == (GroupMetadataKey("g"), value)
    assert decode_record(struct.pack(">h", 99) + b"whatever", b"x") == (UnknownRecordKey(99), None)


def test_dump_log_offsets_decoder_prints_offset_commits_and_group_metadata(tmp_path, capsys):
    records = [
        CoordinatorRecord(encode_key(GroupMetadataKey("g")),
                          encode_group_metadata_value(GroupMetadataValue("consumer", 1, "range", "m", 5, ()))),
        CoordinatorRecord(encode_key(OffsetCommitKey("g", "orders", 2)), encode_offset_commit_value(OffsetCommitValue(17))),
        CoordinatorRecord(encode_key(OffsetCommitKey("g", "orders", 3)), None),
    ]
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(coordinator_batch(records, None, 1_000))
    assert cli.main(["dump-log", "--offsets-decoder", str(path)]) == 0
    out = capsys.readouterr().out
    assert "key: GroupMetadataKey::group=g payload:" in out and '"generation": 1' in out
    assert "key: OffsetCommitKey::group=g,topic=orders,partition=2 payload:" in out and '"offset": 17' in out
    assert "partition=3 payload: <tombstone>" in out
    assert cli.main(["dump-log", "--offsets-decoder", "--json", str(path)]) == 0
    dumped = json.loads(capsys.readouterr().out)
    assert dumped[0]["records"][1]["decoded"]["value"]["offset"] == 17


def test_consumer_group_partition_metadata_bytes_follow_kafkas_schema():  # key version 4, value version 0
    import uuid

    from groupcoord import consumer_records as cr
    from groupcoord.consumer import TopicInfo, _partition_metadata_record

    topic_id = uuid.UUID(int=0x0102)
    record = _partition_metadata_record("g", {"t": TopicInfo(topic_id, 3)})
    assert record.key == struct.pack(">h", 4) + b"\x00\x01g"  # not flexible: int16 string length
    # flexible: compact array (length + 1), uuid, compact string, int32, an empty compact array of partition
    # metadata, the topic's tagged fields, then the value's
    assert record.value == (struct.pack(">h", 0) + b"\x02" + topic_id.bytes + b"\x02t" + struct.pack(">i", 3)
                            + b"\x01" + b"\x00" + b"\x00")
    key, value = decode_record(record.key, record.value)
    assert key == cr.ConsumerGroupPartitionMetadataKey("g")
    assert [(t.topic_id, t.topic_name, t.num_partitions) for t in value.topics] == [(topic_id, "t", 3)]
