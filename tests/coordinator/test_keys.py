"""Keys land on the partition a Java broker picks: String.hashCode and Utils.abs (Kafka's
GroupCoordinator.partitionFor / TransactionStateManager.partitionFor)."""

from coordinator.keys import INT32_MIN, java_abs, java_string_hash, partition_for_key


def test_java_string_hash_matches_javas_values():
    # Values of "x".hashCode() in Java.
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == INT32_MIN  # the classic Integer.MIN_VALUE string
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00  # a surrogate pair: two UTF-16 units


def test_utils_abs_maps_integer_min_value_to_zero():
    assert java_abs(INT32_MIN) == 0
    assert java_abs(-5) == 5
    assert partition_for_key("polygenelubricants", 50) == 0


def test_partition_is_stable_and_in_range():
    assert partition_for_key("hello", 50) == 99162322 % 50
    assert all(0 <= partition_for_key(f"group-{i}", 7) < 7 for i in range(200))
