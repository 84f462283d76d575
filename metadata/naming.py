"""Topic name rules (Kafka's org.apache.kafka.common.internals.Topic).

A legal name is 1..249 characters of ASCII letters, digits, '.', '_' and '-', and is neither "." nor "..".
Two names that differ only by '.' versus '_' collide (they map to the same metric names), so the second
one cannot be created.
"""

from __future__ import annotations

import re

from partitions.errors import InvalidTopicError

topic_name_chars_max = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str) -> None:
    """Raises InvalidTopicError (INVALID_TOPIC_EXCEPTION) if `name` is not a legal topic name."""
    if not name:
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"Topic name cannot be \"{name}\"")
    if len(name) > topic_name_chars_max:
        raise InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {topic_name_chars_max} characters, topic name: {name}"
        )
    if not _LEGAL.fullmatch(name):
        raise InvalidTopicError(
            f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' "
            "and '-'"
        )


def collision_key(name: str) -> str:
    """Names with equal keys collide ('.' and '_' are interchangeable in metric names)."""
    return name.replace(".", "_")
