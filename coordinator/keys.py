"""Which partition of an internal topic owns a key: Kafka's `Utils.abs(key.hashCode()) % partitions`.

Java's String.hashCode is `s[0]*31^(n-1) + ... + s[n-1]` over the UTF-16 code units, in 32-bit two's
complement arithmetic; Kafka's Utils.abs maps Integer.MIN_VALUE to 0 (Math.abs would leave it negative). A
group id or transactional id lands on the same partition of `__consumer_offsets` / `__transaction_state` as
on a Java broker, so a cluster's data could move between the two.
"""

from __future__ import annotations

INT32_MIN = -(2**31)


def java_string_hash(text: str) -> int:
    """Java's String.hashCode of `text`, as a signed 32-bit int."""
    units = text.encode("utf-16-be")
    value = 0
    for index in range(0, len(units), 2):
        value = (31 * value + (units[index] << 8 | units[index + 1])) & 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def java_abs(value: int) -> int:
    """Kafka's Utils.abs: |value|, and 0 for Integer.MIN_VALUE."""
    return 0 if value == INT32_MIN else abs(value)


def partition_for_key(key: str, partitions: int) -> int:
    assert partitions > 0, partitions
    return java_abs(java_string_hash(key)) % partitions
