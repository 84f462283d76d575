"""The `flotilla` Python data source: Spark's Kafka source and sink, over Flotilla's own client.

Theory of operation. An offset is Kafka's JSON layout, `{"topic": {"0": 23, "1": 7}}`: for each
topic-partition the next offset to read (exclusive end of what has been read). Spark records the end offset
of every micro-batch in its checkpoint before it runs the batch, and replays a batch with the same (start,
end); `read()` of a partition returns exactly the records in [start, end), so a replay reads the same rows:
exactly-once from the checkpoint. The driver side (`FlotillaStreamReader`) only lists partitions and offsets;
executors run `read_partition`, which opens its own connection lazily (spark/cluster.py) from the plain data
in a `FlotillaInputPartition`, fetches raw batches and decodes them into Arrow record batches.

Offsets, as Kafka's source does them: `startingOffsets` earliest / latest / JSON (-2 earliest, -1 latest),
`startingTimestamp` and `startingOffsetsByTimestamp` first (a timestamp without an offset fails the query);
partitions that appear later (new topics matching the subscription, grown topics) start at their earliest
offset. `maxOffsetsPerTrigger` caps a micro-batch, shared across partitions in proportion to their backlog;
`Trigger.AvailableNow` fixes the target offsets when the query starts. A start offset below the log start
offset (records deleted by retention or DeleteRecords) or a partition that vanished is data loss: with
`failOnDataLoss` true (the default) the query fails and says which range was lost, with false it skips.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from net.client.read_replica import ReadReplicas
from net.client.results import EARLIEST_TIMESTAMP
from partitions.errors import OffsetOutOfRangeError
from spark import cluster
from spark.columns import ColumnBuilder, next_fetch_offset
from spark.options import (
    EARLIEST,
    LATEST,
    FlotillaOptionError,
    SourceOptions,
    offsets_from_json_dict,
    offsets_json_dict,
    parse_include_headers,
    parse_sink_options,
    parse_source_options,
)

EMPTY_FETCHES_MAX = 50  # fetches that return nothing below the planned end before the read gives up
ARROW_BATCH_BYTES_MAX = 64 * 1024 * 1024  # keys and values in one Arrow batch (binary columns stop at 2 GiB)
HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


class FlotillaDataLossError(RuntimeError):
    """Offsets a query was to read are gone (deleted, or the partition vanished) and failOnDataLoss is true."""


def source_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema (the same names, types and order)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects for record batches of `schema`."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


class FlotillaDataSource(DataSource):
    """Format `flotilla`: stream and batch reads of topics, stream and batch writes to topics."""

    @classmethod
    def name(cls) -> str:
        return "flotilla"

    def schema(self) -> StructType:
        # Whether this is a stream or a batch read is not known here; reader() and streamReader() check the rest.
        return source_schema(parse_include_headers(self.options))

    def _check_schema(self, schema: StructType, options: SourceOptions) -> None:
        expected = source_schema(options.include_headers)
        if schema != expected:
            raise FlotillaOptionError(
                "the flotilla source has a fixed schema (Spark's Kafka source schema) and cannot be read with a "
                f"user-specified schema: got {schema.simpleString()}, expected {expected.simpleString()}")

    def reader(self, schema: StructType) -> "FlotillaBatchReader":
        options = parse_source_options(self.options, streaming=False)
        self._check_schema(schema, options)
        return FlotillaBatchReader(options, schema)

    def streamReader(self, schema: StructType) -> "FlotillaStreamReader":
        options = parse_source_options(self.options, streaming=True)
        self._check_schema(schema, options)
        return FlotillaStreamReader(options, schema)

    def writer(self, schema: StructType, overwrite: bool):
        from spark.sink import FlotillaBatchWriter

        return FlotillaBatchWriter(parse_sink_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool):
        from spark.sink import FlotillaStreamWriter

        return FlotillaStreamWriter(parse_sink_options(self.options), schema)


@dataclass(frozen=True)
class FlotillaInputPartition(InputPartition):
    """One task's work: records [start_offset, end_offset) of one topic-partition. Plain data only."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int
    bootstrap_servers: str
    fail_on_data_loss: bool
    include_headers: bool
    fetch_bytes_max: int
    arrow_batch_rows_max: int
    request_timeout_ms: int
    start_is_earliest: bool = False  # a partition found after the query started: its log start is not loss
    isolation_level: int = 0  # 1: read_committed
    client_rack: str = ""  # kafka.client.rack (KIP-392): the leader may send the reads to a replica in this rack
    security: tuple[tuple[str, str], ...] = ()  # client security properties (spark/options.py)


# ------------------------------------------------------------------------------------------------------
# Planning (driver): resolving offsets.


class _Planner:
    """Shared by the batch and stream readers: subscription, offset resolution, partition planning."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    @property
    def client(self):
        return cluster.client_for(self.options.bootstrap_servers, self.options.request_timeout_ms,
                                  self.options.security)

    def subscribed_partitions(self, strict: bool) -> dict[str, list[int]]:
        """topic -> partitions the subscription covers now. With `strict`, topics named by subscribe or
        assign must exist (raises UnknownTopicOrPartitionError naming the option)."""
        options = self.options
        if options.assign is not None:
            found = cluster.require_topics(self.client, sorted(options.assign), "assign") if strict else \
                cluster.topic_partitions(self.client, sorted(options.assign))
            for topic, wanted in options.assign.items():
                missing = sorted(set(wanted) - set(found.get(topic, wanted if not strict else [])))
                if missing and strict:
                    raise FlotillaOptionError(f"option 'assign': {topic} has no partition(s) {missing}")
            return {t: [p for p in ps if p in found.get(t, [])] for t, ps in options.assign.items() if t in found}
        if options.subscribe_pattern is not None:
            every = cluster.topic_partitions(self.client, None)
            return {t: ps for t, ps in every.items() if options.matches(t)}
        if strict:
            return cluster.require_topics(self.client, list(options.subscribe), "subscribe")
        return cluster.topic_partitions(self.client, list(options.subscribe))

    def starting_offsets(self, partitions: dict[str, list[int]]) -> dict[str, dict[int, int]]:
        """Concrete start offsets per the starting options (timestamps first, as Kafka's source)."""
        options = self.options
        if options.starting_by_timestamp is not None:
            return self._by_timestamp(partitions, options.starting_by_timestamp, "startingOffsetsByTimestamp")
        if options.starting_timestamp is not None:
            every = {t: {p: options.starting_timestamp for p in ps} for t, ps in partitions.items()}
            return self._by_timestamp(partitions, every, "startingTimestamp")
        return self._resolve(partitions, options.starting, "startingOffsets")

    def _resolve(self, partitions: dict[str, list[int]], spec: str | dict, option: str) -> dict[str, dict[int, int]]:
        earliest = cluster.earliest_offsets(self.client, partitions)
        latest = cluster.latest_offsets(self.client, partitions, self.options.isolation_level)
        if spec == "earliest":
            return earliest
        if spec == "latest":
            return latest
        resolved: dict[str, dict[int, int]] = {}
        for topic, given in spec.items():
            if topic not in partitions:
                raise FlotillaOptionError(f"option '{option}': topic {topic!r} is not subscribed or does not exist")
            for partition, offset in given.items():
                if partition not in partitions[topic]:
                    raise FlotillaOptionError(f"option '{option}': {topic}-{partition} does not exist")
                value = earliest[topic][partition] if offset == EARLIEST else \
                    latest[topic][partition] if offset == LATEST else offset
                resolved.setdefault(topic, {})[partition] = value
        missing = sorted(f"{t}-{p}" for t, ps in partitions.items() for p in ps if p not in resolved.get(t, {}))
        if missing:
            raise FlotillaOptionError(f"option '{option}' gives no offset for {', '.join(missing)}")
        return resolved

    def _by_timestamp(self, partitions: dict[str, list[int]], timestamps: dict[str, dict[int, int]],
                      option: str) -> dict[str, dict[int, int]]:
        resolved: dict[str, dict[int, int]] = {}
        for topic, ps in sorted(partitions.items()):
            for partition in ps:
                timestamp = timestamps.get(topic, {}).get(partition)
                if timestamp is None:
                    raise FlotillaOptionError(f"option '{option}' gives no timestamp for {topic}-{partition}")
                answer = self.client.list_offsets(topic, [partition], timestamp)[partition]
                if answer.offset < 0:
                    raise FlotillaOptionError(f"option '{option}': {topic}-{partition} has no record at or after "
                                              f"timestamp {timestamp}")
                resolved.setdefault(topic, {})[partition] = answer.offset
        return resolved

    def input_partitions(self, start: dict[str, dict[int, int]], end: dict[str, dict[int, int]]
                         ) -> list[FlotillaInputPartition]:
        """One input partition per topic-partition with records in [start, end) (split further to reach
        minPartitions). Partitions in `end` but not in `start` are new: they start at offset 0, read from
        their log start. Raises FlotillaDataLossError for a partition that went backwards or vanished."""
        ranges = []
        for topic in sorted(end):
            for partition in sorted(end[topic]):
                stop = end[topic][partition]
                begin = start.get(topic, {}).get(partition)
                is_new = begin is None
                begin = 0 if is_new else begin
                if stop < begin:
                    self.data_loss(f"{topic}-{partition}: the end offset {stop} is below the start offset {begin} "
                                   "(the topic may have been deleted and recreated)")
                    continue
                if stop > begin:
                    ranges.append((topic, partition, begin, stop, is_new))
        for topic in sorted(start):
            for partition in sorted(start[topic]):
                if partition not in end.get(topic, {}):
                    self.data_loss(f"{topic}-{partition} is gone (topic or partition deleted)")
        return [self._input_partition(*piece) for piece in _split_ranges(ranges, self.options.min_partitions)]

    def _input_partition(self, topic, partition, begin, stop, is_new) -> FlotillaInputPartition:
        options = self.options
        return FlotillaInputPartition(topic, partition, begin, stop, options.bootstrap_servers,
                                      options.fail_on_data_loss, options.include_headers, options.fetch_bytes_max,
                                      options.arrow_batch_rows_max, options.request_timeout_ms, is_new,
                                      options.isolation_level, options.client_rack, options.security)

    def data_loss(self, message: str) -> None:
        if self.options.fail_on_data_loss:
            raise FlotillaDataLossError(message + ". Set failOnDataLoss=false to skip lost data.")


def _split_ranges(ranges: list[tuple], min_partitions: int | None) -> list[tuple]:
    """Split offset ranges so there are at least `min_partitions` pieces, each range into pieces in
    proportion to its size (Kafka's KafkaOffsetRangeCalculator)."""
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(stop - begin for _, _, begin, stop, _ in ranges)
    pieces = []
    for topic, partition, begin, stop, is_new in ranges:
        size = stop - begin
        parts = max(1, min(size, round(size * min_partitions / total)))
        for index in range(parts):
            piece_begin = begin + size * index // parts
            piece_stop = begin + size * (index + 1) // parts
            pieces.append((topic, partition, piece_begin, piece_stop, is_new))
    return pieces


# ------------------------------------------------------------------------------------------------------
# Readers.


class FlotillaBatchReader(DataSourceReader):
    """Batch read of [startingOffsets, endingOffsets)."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        planner = _Planner(options, schema)
        partitions = planner.subscribed_partitions(strict=True)
        self._start = planner.starting_offsets(partitions)
        self._end = planner._resolve(partitions, options.ending, "endingOffsets")
        for topic, ends in self._end.items():
            for partition, stop in ends.items():
                begin = self._start[topic][partition]
                if stop < begin:
                    raise FlotillaOptionError(f"{topic}-{partition}: endingOffsets {stop} is below startingOffsets "
                                              f"{begin}")
        self._partitions = planner.input_partitions(self._start, self._end)

    def partitions(self) -> list[FlotillaInputPartition]:
        return self._partitions

    def read(self, partition: FlotillaInputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, arrow_schema(self.schema))


class FlotillaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch source. Offsets are Kafka's JSON layout; see the module docstring."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._planner = _Planner(options, schema)
        self._planner.subscribed_partitions(strict=True)  # unknown topics fail at start
        self._initial: dict | None = None
        self._target: dict[str, dict[int, int]] | None = None  # Trigger.AvailableNow: the latest at start

    def initialOffset(self) -> dict:
        if self._initial is None:  # Spark asks twice on a fresh query: answer the same both times
            partitions = self._planner.subscribed_partitions(strict=True)
            self._initial = offsets_json_dict(self._planner.starting_offsets(partitions))
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._available()

    def _available(self) -> dict[str, dict[int, int]]:
        partitions = self._planner.subscribed_partitions(strict=False)
        return cluster.latest_offsets(self._planner.client, partitions, self._planner.options.isolation_level)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        start_offsets = offsets_from_json_dict(start)
        latest = self._target if self._target is not None else self._available()
        latest = {topic: dict(ends) for topic, ends in latest.items()}
        for topic, ends in start_offsets.items():
            for partition, begin in ends.items():
                # A vanished partition is left out of the end offset: partitions() reports it as data loss.
                if partition in latest.get(topic, {}):
                    latest[topic][partition] = max(latest[topic][partition], begin)
        if isinstance(limit, ReadMaxRows):
            latest = _rate_limit(start_offsets, latest, limit.max_rows)
        return offsets_json_dict(latest)

    def reportLatestOffset(self) -> dict | None:
        return offsets_json_dict(self._available())

    def partitions(self, start: dict, end: dict) -> list[FlotillaInputPartition]:
        return self._planner.input_partitions(offsets_from_json_dict(start), offsets_from_json_dict(end))

    def read(self, partition: FlotillaInputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, arrow_schema(self.schema))

    def commit(self, end: dict) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, not in a consumer group."""

    def stop(self) -> None:
        cluster.close_clients()


def _rate_limit(start: dict[str, dict[int, int]], latest: dict[str, dict[int, int]], rows_max: int
                ) -> dict[str, dict[int, int]]:
    """Cap the records between start and latest at `rows_max`, shared in proportion to each partition's
    backlog (largest remainders get the leftover), as Kafka's rateLimit. Deterministic for given inputs."""
    backlog = {(t, p): stop - start.get(t, {}).get(p, 0) for t, ps in latest.items() for p, stop in ps.items()}
    backlog = {key: max(0, size) for key, size in backlog.items()}
    total = sum(backlog.values())
    if total <= rows_max:
        return latest
    shares = {key: rows_max * size // total for key, size in backlog.items()}
    leftover = rows_max - sum(shares.values())
    by_remainder = sorted(backlog, key=lambda key: (-(rows_max * backlog[key] % total), key))
    for key in by_remainder[:leftover]:
        shares[key] += 1
    limited: dict[str, dict[int, int]] = {}
    for (topic, partition), share in shares.items():
        begin = start.get(topic, {}).get(partition, 0)
        limited.setdefault(topic, {})[partition] = begin + share if backlog[(topic, partition)] else \
            latest[topic][partition]
    return limited


# ------------------------------------------------------------------------------------------------------
# Reading (executors).


def read_partition(split: FlotillaInputPartition, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The records of `split` as Arrow record batches of `schema` (at most arrow_batch_rows_max rows each, and
    about ARROW_BATCH_BYTES_MAX bytes of keys and values).
    Raises FlotillaDataLossError when failOnDataLoss and records in the range were deleted; NetworkError."""
    client = cluster.client_for(split.bootstrap_servers, split.request_timeout_ms, split.security)
    with _Fetcher(client, split) as fetcher:
        yield from _read_with(fetcher, client, split, schema)


def _read_with(fetcher: "_Fetcher", client, split: FlotillaInputPartition, schema: pa.Schema
               ) -> Iterator[pa.RecordBatch]:
    offset = split.start_offset
    builder = ColumnBuilder(offset, split.end_offset, split.include_headers)
    empty_fetches = 0
    while offset < split.end_offset:
        answer = fetcher.fetch(offset)
        if isinstance(answer.error, OffsetOutOfRangeError):
            offset = _skip_lost(client, split, offset)
            if builder.rows:
                yield builder.to_arrow(split.topic, split.partition, schema)
            builder = ColumnBuilder(offset, split.end_offset, split.include_headers)
            continue
        if answer.error is not None:
            raise answer.error
        fetcher.prefetch(next_fetch_offset(answer.records, offset))  # the broker works while we decode
        next_offset = builder.add_fetched(answer.records, answer.aborted)
        if next_offset <= offset:
            empty_fetches += 1
            if empty_fetches > EMPTY_FETCHES_MAX:
                raise FlotillaDataLossError(
                    f"{split.topic}-{split.partition}: no records at offset {offset} after {empty_fetches} fetches "
                    f"(high watermark {answer.high_watermark}, planned end {split.end_offset})")
            continue
        empty_fetches = 0
        offset = next_offset
        if builder.rows >= split.arrow_batch_rows_max or builder.payload_bytes >= ARROW_BATCH_BYTES_MAX:
            yield builder.to_arrow(split.topic, split.partition, schema)
            builder = ColumnBuilder(offset, split.end_offset, split.include_headers)
    if builder.rows:
        yield builder.to_arrow(split.topic, split.partition, schema)


class _Fetcher:
    """The fetches of one split, with the next one in flight (on a helper thread) while the current one is
    decoded. A fetch for another offset than the one in flight is made directly.

    With `kafka.client.rack`, the leader may name a replica in the reader's rack (KIP-392): the fetches go there
    from then on, and back to the leader (which may name one again) when that replica answers an error or cannot
    be reached, as Kafka's consumer does (net/client/read_replica.py, keyed 0: a fetcher reads one partition).
    Fetches are made one at a time, so `_read_replicas` needs no lock."""

    def __init__(self, client, split: FlotillaInputPartition) -> None:
        self._client = client
        self._split = split
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="flotilla-prefetch")
        self._pending: tuple[int, Future] | None = None
        self._read_replicas = ReadReplicas(split.client_rack)

    def __enter__(self) -> "_Fetcher":
        return self

    def __exit__(self, *exc_info) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _fetch_now(self, offset: int) -> cluster.RawFetch:
        split, routes = self._split, self._read_replicas
        replica = routes.replica(0)
        if replica is not None:
            answer = cluster.fetch_raw(self._client, split.topic, split.partition, offset, split.fetch_bytes_max,
                                       split.isolation_level, split.client_rack, replica)
            if answer.error is None:
                return answer
            routes.failed(0)
        answer = cluster.fetch_raw(self._client, split.topic, split.partition, offset, split.fetch_bytes_max,
                                   split.isolation_level, routes.rack_for_leader(0))
        if answer.error is None and routes.named(0, answer.preferred_read_replica, -1) and not answer.records:
            return self._fetch_now(offset)  # the leader named the replica instead of answering: ask it now (once:
        return answer  # if it fails, the leader is asked without the rack)

    @property
    def read_replica(self) -> int | None:
        """The replica the fetches go to instead of the leader (KIP-392), None for the leader."""
        return self._read_replicas.replica(0)

    def fetch(self, offset: int) -> cluster.RawFetch:
        pending, self._pending = self._pending, None
        if pending is not None and pending[0] == offset:
            return pending[1].result()
        return self._fetch_now(offset)

    def prefetch(self, offset: int) -> None:
        if offset < self._split.end_offset:
            self._pending = (offset, self._pool.submit(self._fetch_now, offset))


def _skip_lost(client, split: FlotillaInputPartition, offset: int) -> int:
    """The offset to go on from when `offset` is below the log start: the log start, if skipping is allowed.
    Raises FlotillaDataLossError with failOnDataLoss (unless the partition is new to the query)."""
    log_start = client.list_offsets(split.topic, [split.partition], EARLIEST_TIMESTAMP)[split.partition].offset
    if log_start <= offset:
        raise FlotillaDataLossError(f"{split.topic}-{split.partition}: offset {offset} out of range but the log "
                                    f"starts at {log_start} (was the topic recreated?)")
    if split.fail_on_data_loss and not split.start_is_earliest:
        lost_end = min(log_start, split.end_offset)
        raise FlotillaDataLossError(
            f"{split.topic}-{split.partition}: offsets [{offset}, {lost_end}) were deleted before they were read "
            f"(log start offset is now {log_start}). Set failOnDataLoss=false to skip lost data.")
    return min(log_start, split.end_offset)
