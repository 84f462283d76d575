"""The `flotilla` sink: DataFrames (batch or streaming) written to topics, as Spark's Kafka sink does.

Theory of operation: the driver checks the DataFrame's columns once (`check_sink_schema`): `value` (string
or binary) is required; `key` (string or binary), `headers` (array<struct<key: string, value: binary>>),
`partition` (int) and `topic` (string) are optional, and a `topic` option, when given, overrides the column.
Each task receives Arrow record batches, turns them into (key, value, headers) tuples grouped by topic and
partition, and produces them with acks=all through the process's client (spark/cluster.py). A row without a
partition is placed by the client's default partitioner (murmur2 of the key, as Java's). Delivery is
at-least-once, as Spark's Kafka sink: a task retried after a produce that reached the broker writes its
rows again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from spark import cluster
from spark.options import FlotillaOptionError, SinkOptions

PRODUCE_ROWS_MAX = 20_000  # rows handed to one produce_records call: bounds a task's memory


@dataclass
class FlotillaCommitMessage(WriterCommitMessage):
    rows: int


def check_sink_schema(schema: StructType, options: SinkOptions) -> None:
    """Raise FlotillaOptionError when the DataFrame cannot be written (naming the column or option)."""
    types = {field.name: field.dataType for field in schema.fields}
    if "value" not in types:
        raise FlotillaOptionError(f"the flotilla sink needs a 'value' column (string or binary); columns: "
                                  f"{sorted(types)}")
    for name in ("key", "value"):
        if name in types and not isinstance(types[name], (StringType, BinaryType)):
            raise FlotillaOptionError(f"column '{name}' must be string or binary, not {types[name].simpleString()}")
    if options.topic is None and "topic" not in types:
        raise FlotillaOptionError("no topic: set the option 'topic' or give the DataFrame a 'topic' column")
    if "topic" in types and not isinstance(types["topic"], StringType):
        raise FlotillaOptionError(f"column 'topic' must be string, not {types['topic'].simpleString()}")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise FlotillaOptionError(f"column 'partition' must be int, not {types['partition'].simpleString()}")
    if "headers" in types:
        headers = types["headers"]
        ok = isinstance(headers, ArrayType) and isinstance(headers.elementType, StructType) and \
            [f.name for f in headers.elementType.fields] == ["key", "value"] and \
            isinstance(headers.elementType["key"].dataType, StringType) and \
            isinstance(headers.elementType["value"].dataType, (BinaryType, StringType))
        if not ok:
            raise FlotillaOptionError(f"column 'headers' must be array<struct<key:string,value:binary>>, not "
                                      f"{headers.simpleString()}")


def _as_binary(column: pa.Array | None) -> list | None:
    if column is None:
        return None
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())
    return column.to_pylist()


def write_batches(options: SinkOptions, batches: Iterator[pa.RecordBatch]) -> int:
    """Produce every row of `batches`; returns the number of rows. Raises the client's typed errors
    (UnknownTopicOrPartitionError, RecordTooLargeError, NotEnoughReplicasError, NetworkError...)."""
    client = cluster.client_for(options.bootstrap_servers, options.request_timeout_ms, options.security)
    rows = 0
    pending: dict[tuple[str, int | None], list[tuple]] = {}
    pending_rows = 0
    for batch in batches:
        for group, record in _records(batch, options.topic):
            pending.setdefault(group, []).append(record)
            pending_rows += 1
            if pending_rows >= PRODUCE_ROWS_MAX:
                rows += _flush(client, pending)
                pending, pending_rows = {}, 0
    return rows + _flush(client, pending)


def _records(batch: pa.RecordBatch, topic_option: str | None) -> Iterator[tuple[tuple[str, int | None], tuple]]:
    names = batch.schema.names
    values = _as_binary(batch.column("value"))
    keys = _as_binary(batch.column("key")) if "key" in names else [None] * batch.num_rows
    topics = [topic_option] * batch.num_rows if topic_option else batch.column("topic").to_pylist()
    partitions = batch.column("partition").to_pylist() if "partition" in names else [None] * batch.num_rows
    headers = batch.column("headers").to_pylist() if "headers" in names else [None] * batch.num_rows
    for row in range(batch.num_rows):
        topic = topics[row]
        if not topic:
            raise FlotillaOptionError(f"row {row} has no topic (null 'topic' column and no 'topic' option)")
        row_headers = tuple((h["key"], h["value"].encode() if isinstance(h["value"], str) else h["value"])
                            for h in headers[row] or ())
        yield (topic, partitions[row]), (keys[row], values[row], row_headers)


def _flush(client, pending: dict[tuple[str, int | None], list[tuple]]) -> int:
    rows = 0
    for (topic, partition), records in pending.items():
        client.produce_records(topic, records, acks=-1, partition=partition)
        rows += len(records)
    return rows


class FlotillaBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        check_sink_schema(schema, options)
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> FlotillaCommitMessage:
        return FlotillaCommitMessage(write_batches(self.options, iterator))


class FlotillaStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        check_sink_schema(schema, options)
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> FlotillaCommitMessage:
        return FlotillaCommitMessage(write_batches(self.options, iterator))

    def commit(self, messages, batchId: int) -> None:
        """Nothing to do: every row was acknowledged (acks=all) before its task finished."""

    def abort(self, messages, batchId: int) -> None:
        """Nothing to undo: rows already produced stay (at-least-once, as Spark's Kafka sink)."""
