"""Replication throttling (Kafka's follower.replication.throttled.rate with follower.replication.throttled.replicas),
sans-IO: a follower fetches the throttled replicas it hosts no faster than the rate, so moving a partition
onto it does not take the bandwidth clients need; replicas that are not throttled are fetched as always.

A token bucket: `rate` bytes are added per second up to one second's worth; fetched bytes of throttled
replicas are taken out (the balance may go negative after a large response) and throttled replicas are left
out of fetch requests while it is not positive, and a fetch asks for no more than the balance. Which replicas are throttled comes from the topic config
(a list of "partition:broker" or "*"), the rate from the dynamic broker config (per broker, then the
cluster-wide default); without a rate nothing is throttled.
"""

from __future__ import annotations

from metadata.configs import split_list

FOLLOWER_RATE_CONFIG = "follower.replication.throttled.rate"
LEADER_RATE_CONFIG = "leader.replication.throttled.rate"
FOLLOWER_REPLICAS_CONFIG = "follower.replication.throttled.replicas"
LEADER_REPLICAS_CONFIG = "leader.replication.throttled.replicas"


class ReplicationQuota:
    """A byte rate as a token bucket holding at most one second of tokens (see the module docstring)."""

    def __init__(self, rate_bytes_per_s: int | None = None) -> None:
        self.rate: int | None = None
        self._tokens = 0.0
        self._updated_ms: int | None = None
        self.set_rate(rate_bytes_per_s)

    def set_rate(self, rate_bytes_per_s: int | None) -> None:
        if rate_bytes_per_s != self.rate:
            self.rate = rate_bytes_per_s
            self._tokens = float(rate_bytes_per_s or 0)
            self._updated_ms = None

    def _refill(self, now_ms: int) -> None:
        if self._updated_ms is not None and self.rate is not None:
            self._tokens = min(float(self.rate), self._tokens + self.rate * (now_ms - self._updated_ms) / 1000)
        self._updated_ms = now_ms

    def exceeded(self, now_ms: int) -> bool:
        if self.rate is None:
            return False
        self._refill(now_ms)
        return self._tokens <= 0

    def available(self, now_ms: int) -> int | None:
        """Bytes that may be fetched now (None: no limit); a fetch asks for no more, so a response overdraws
        the bucket by at most one batch (a leader always returns at least one, KIP-74)."""
        if self.rate is None:
            return None
        self._refill(now_ms)
        return max(0, int(self._tokens))

    def record(self, size: int, now_ms: int) -> None:
        if self.rate is not None:
            self._refill(now_ms)
            self._tokens -= size


def is_throttled(replicas_config: str | None, partition: int, broker_id: int) -> bool:
    """Whether "partition:broker" (or "*") is in a *.replication.throttled.replicas value."""
    if not replicas_config:
        return False
    entries = split_list(replicas_config)
    return "*" in entries or f"{partition}:{broker_id}" in entries


def parse_rate(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return max(0, int(value))
    except ValueError:
        return None
