"""Option parsing and offset planning of the flotilla source, without Spark or a cluster."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from spark.options import (  # noqa: E402
    FlotillaOptionError,
    offsets_from_json_dict,
    offsets_json_dict,
    parse_sink_options,
    parse_source_options,
)
from spark.source import _rate_limit, _split_ranges  # noqa: E402

BOOTSTRAP = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


@pytest.mark.parametrize("options, named", [
    ({}, "subscribe"),
    ({"subscribe": "a", "assign": '{"a": [0]}'}, "exactly one"),
    ({"subscribe": "a", "subscribePattern": "a.*"}, "exactly one"),
    ({"assign": '{"a": [0]'}, "assign"),
    ({"assign": '{"a": 0}'}, "assign"),
    ({"subscribePattern": "a(("}, "subscribePattern"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": 1'}, "startingOffsets"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"x": 1}}'}, "startingOffsets"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": -5}}'}, "startingOffsets"),
    ({"subscribe": "a", "startingOffsets": "soonest"}, "startingOffsets"),
    ({"subscribe": "a", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
    ({"subscribe": "a", "minPartitions": "many"}, "minPartitions"),
    ({"subscribe": "a", "kafka.isolation.level": "serializable"}, "kafka.isolation.level"),
    ({"subscribe": "a", "startingTimestamp": "yesterday"}, "startingTimestamp"),
    ({"subscribe": "a", "endingOffsets": "latest"}, "endingOffsets"),
])
def test_bad_stream_options_fail_naming_the_option(options, named):
    with pytest.raises(FlotillaOptionError, match=named):
        parse_source_options({**BOOTSTRAP, **options}, streaming=True)


def test_bootstrap_servers_are_required():
    with pytest.raises(FlotillaOptionError, match="kafka.bootstrap.servers"):
        parse_source_options({"subscribe": "a"}, streaming=True)


def test_batch_options_refuse_latest_start_and_earliest_end():
    with pytest.raises(FlotillaOptionError, match="startingOffsets"):
        parse_source_options({**BOOTSTRAP, "subscribe": "a", "startingOffsets": "latest"}, streaming=False)
    with pytest.raises(FlotillaOptionError, match="endingOffsets"):
        parse_source_options({**BOOTSTRAP, "subscribe": "a", "endingOffsets": "earliest"}, streaming=False)
    with pytest.raises(FlotillaOptionError, match="endingOffsets"):
        parse_source_options({**BOOTSTRAP, "subscribe": "a", "endingOffsets": '{"a": {"0": -2}}'}, streaming=False)


def test_options_are_case_insensitive_and_defaults_match_kafka():
    options = parse_source_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "SUBSCRIBE": "a, b",
                                    "startingoffsets": '{"a": {"1": -2, "0": 5}}'}, streaming=True)
    assert options.subscribe == ("a", "b") and options.fail_on_data_loss and not options.include_headers
    assert options.starting == {"a": {1: -2, 0: 5}}
    assert parse_source_options({**BOOTSTRAP, "subscribe": "a"}, streaming=False).starting == "earliest"
    assert parse_source_options({**BOOTSTRAP, "subscribe": "a"}, streaming=True).starting == "latest"


def test_offsets_json_is_sorted_so_equal_offsets_have_equal_text():
    offsets = {"b": {10: 1, 2: 3}, "a": {0: 7}}
    as_json = offsets_json_dict(offsets)
    assert list(as_json) == ["a", "b"] and list(as_json["b"]) == ["2", "10"]
    assert offsets_from_json_dict(as_json) == offsets


def test_sink_needs_bootstrap_and_refuses_reader_options():
    assert parse_sink_options({**BOOTSTRAP, "topic": "t"}).topic == "t"
    with pytest.raises(FlotillaOptionError, match="subscribe"):
        parse_sink_options({**BOOTSTRAP, "subscribe": "t"})


def test_rate_limit_shares_the_cap_in_proportion_to_backlog():
    start = {"t": {0: 0, 1: 100, 2: 50}}
    latest = {"t": {0: 300, 1: 200, 2: 50}}
    limited = _rate_limit(start, latest, 100)
    assert limited == {"t": {0: 75, 1: 125, 2: 50}}
    assert _rate_limit(start, latest, 10_000) == latest


def test_rate_limit_reads_new_partitions_from_zero_and_never_exceeds_the_cap():
    start = {"t": {0: 10}}
    latest = {"t": {0: 13, 1: 4}, "u": {0: 5}}
    limited = _rate_limit(start, latest, 7)
    moved = limited["t"][0] - 10 + limited["t"][1] + limited["u"][0]
    assert moved == 7 and all(limited[t][p] <= latest[t][p] for t in latest for p in latest[t])


def test_min_partitions_splits_ranges_without_gaps_or_overlap():
    ranges = [("t", 0, 0, 1000, False), ("t", 1, 5, 15, True)]
    pieces = _split_ranges(ranges, 6)
    assert len(pieces) >= 6
    for topic, partition, begin, stop, _ in ranges:
        mine = sorted((b, s) for t, p, b, s, _ in pieces if (t, p) == (topic, partition))
        assert mine[0][0] == begin and mine[-1][1] == stop
        assert all(a[1] == b[0] for a, b in zip(mine, mine[1:]))
    assert all(new == (p == 1) for t, p, b, s, new in pieces)  # every piece of a new partition may start early


def test_security_options_reach_the_client_and_bad_ones_name_the_property():
    security = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
                "kafka.sasl.username": "alice", "kafka.sasl.password": "s", "kafka.ssl.ca.location": "/ca.pem",
                "kafka.max.poll.records": "10"}  # (a Kafka consumer option the source has no use for: left alone)
    source = parse_source_options({**BOOTSTRAP, "subscribe": "t", **security}, streaming=True)
    assert dict(source.security) == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                     "sasl.username": "alice", "sasl.password": "s", "ssl.ca.location": "/ca.pem"}
    assert parse_sink_options({**BOOTSTRAP, **security}).security == source.security
    assert parse_source_options({**BOOTSTRAP, "subscribe": "t"}, streaming=True).security == ()
    with pytest.raises(FlotillaOptionError, match="security.protocol must be one of"):
        parse_source_options({**BOOTSTRAP, "subscribe": "t", "kafka.security.protocol": "TLS"}, streaming=True)
    with pytest.raises(FlotillaOptionError, match="OAUTHBEARER needs one of sasl.oauthbearer.method=oidc"):
        parse_sink_options({**BOOTSTRAP, "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "OAUTHBEARER"})
