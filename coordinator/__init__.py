"""The coordinator runtime, sans-IO: loads, drives and unloads coordinator shards over internal partitions.

Owns the machinery Kafka's CoordinatorRuntime owns, shared by the group coordinator (groupcoord/) and the
transaction coordinator (txn/): one shard per partition of an internal topic, loaded by replaying that
partition when this broker becomes its leader and unloaded when it resigns; requests answered by a shard's
`handle` as records + response; the records appended as one batch; the response held until the high
watermark passes it; timers as deadlines fired by `now_ms`.

Never imports: groupcoord/ or txn/ (they plug into it), broker/, net/ (the runtime does not know the Kafka
codec: the broker adapts), trio, sockets, clocks, threads or randomness.
"""
