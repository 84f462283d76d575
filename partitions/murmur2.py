"""Java's murmur2 hash and the default partitioner of keyed records.

Theory of operation: Kafka's Java client (org.apache.kafka.common.utils.Utils.murmur2) hashes a record key
with MurmurHash2 (seed 0x9747b28c, m 0x5bd1e995, r 24; little-endian 4-byte words) and picks the partition
`toPositive(hash) % num_partitions`, where toPositive clears the sign bit. librdkafka's murmur2_random,
kafka-python and kafkajs agree, so a key lands on the same partition whichever client wrote it.

Java computes in a signed 32-bit int; here the hash is returned as the same 32 bits read unsigned
(`murmur2(b"kafka") == 0xD067CF64`); `to_java_int` gives Java's signed view.
"""

from __future__ import annotations

import struct

MURMUR2_SEED = 0x9747B28C
MURMUR2_M = 0x5BD1E995
MURMUR2_R = 24
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Java's Utils.murmur2 of `data`, as an unsigned 32-bit int. Raises nothing."""
    data = bytes(data)
    length = len(data)
    m = MURMUR2_M
    h = (MURMUR2_SEED ^ length) & _MASK32
    words = length // 4
    for (k,) in struct.iter_unpack("<I", data[: words * 4]):
        k = (k * m) & _MASK32
        k ^= k >> MURMUR2_R
        k = (k * m) & _MASK32
        h = ((h * m) & _MASK32) ^ k
    tail = data[words * 4 :]
    # Java falls through the switch: 3 remaining bytes take all three steps, 2 take two, 1 takes one.
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if len(tail) >= 1:
        h ^= tail[0]
        h = (h * m) & _MASK32
    h ^= h >> 13
    h = (h * m) & _MASK32
    h ^= h >> 15
    return h


def to_java_int(value: int) -> int:
    """The signed 32-bit (Java int) reading of an unsigned 32-bit value."""
    assert 0 <= value <= _MASK32, f"value={value}"
    return value - (1 << 32) if value & 0x80000000 else value


def to_positive(value: int) -> int:
    """Java's Utils.toPositive: the value with its sign bit cleared."""
    return value & 0x7FFFFFFF


def default_partition(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition Java's default partitioner picks for a non-null key. Raises ValueError when
    num_partitions is not positive."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions={num_partitions} must be positive")
    return to_positive(murmur2(key)) % num_partitions
