"""Java's murmur2 and the default partitioner (vectors from Kafka's UtilsTest and the Java client)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from partitions.murmur2 import default_partition, murmur2, to_java_int, to_positive


def test_murmur2_matches_java_vectors_for_kafka_and_empty_key():
    assert murmur2(b"kafka") == 0xD067CF64
    assert murmur2(b"") == 0x106E08D9


def test_murmur2_matches_kafka_utils_test_signed_values():  # Kafka UtilsTest.testMurmur2
    cases = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    for key, expected in cases.items():
        assert to_java_int(murmur2(key)) == expected, key


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_murmur2_agrees_with_kafka_python(key):
    assert murmur2(key) == kafka_python_murmur2(key)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=32), st.integers(min_value=1, max_value=10_000))
def test_default_partition_is_positive_hash_modulo_partition_count(key, num_partitions):
    partition = default_partition(key, num_partitions)
    assert 0 <= partition < num_partitions
    assert partition == (kafka_python_murmur2(key) & 0x7FFFFFFF) % num_partitions


def test_default_partition_clears_the_sign_bit_rather_than_abs():
    # murmur2(b"kafka") has the sign bit set: Java's toPositive masks it, Math.abs would not.
    assert to_java_int(murmur2(b"kafka")) < 0
    assert default_partition(b"kafka", 7) == to_positive(0xD067CF64) % 7 == 0x5067CF64 % 7


def test_default_partition_refuses_zero_partitions():
    with pytest.raises(ValueError):
        default_partition(b"k", 0)
