"""LogConfig: Kafka's topic config names and defaults."""

from __future__ import annotations

import pytest

from partitions.errors import InvalidConfigError
from partitions.log_config import LogConfig


def test_defaults_are_kafkas():
    config = LogConfig()
    assert config.segment_bytes == 1 << 30 and config.segment_ms == 604_800_000
    assert config.retention_ms == 604_800_000 and config.retention_bytes == -1
    assert config.index_interval_bytes == 4096 and config.segment_index_bytes == 10 << 20
    assert config.max_message_bytes == 1_048_588 and config.cleanup_policy == ("delete",)
    assert config.flush_messages is None and config.flush_ms is None


def test_from_topic_configs_parses_kafka_names():
    config = LogConfig.from_topic_configs(
        {
            "retention.ms": "-1",
            "cleanup.policy": "compact,delete",
            "min.cleanable.dirty.ratio": "0.1",
            "message.timestamp.type": "LogAppendTime",
            "flush.messages": "9223372036854775807",
            "flush.ms": "1000",
            "min.insync.replicas": "2",  # owned by replication: accepted, ignored here
        }
    )
    assert config.retention_ms == -1 and config.cleanup_policy == ("compact", "delete")
    assert config.compact and config.delete and config.log_append_time
    assert config.flush_messages is None and config.flush_ms == 1000
    assert LogConfig.from_topic_configs(config.to_topic_configs()) == config


@pytest.mark.parametrize(
    "configs, key",
    [
        ({"retention.msx": "1"}, "retention.msx"),
        ({"segment.bytes": "many"}, "segment.bytes"),
        ({"segment.bytes": "1"}, "segment.bytes"),
        ({"cleanup.policy": "shred"}, "cleanup.policy"),
        ({"message.timestamp.type": "Now"}, "message.timestamp.type"),
        ({"min.cleanable.dirty.ratio": "2"}, "min.cleanable.dirty.ratio"),
        ({"segment.bytes": str(1 << 31)}, "segment.bytes"),
    ],
)
def test_bad_topic_configs_name_the_key(configs, key):
    with pytest.raises(InvalidConfigError) as raised:
        LogConfig.from_topic_configs(configs)
    assert key in str(raised.value)
