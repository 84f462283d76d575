"""The group coordinator's settings, with Kafka's names (group.*, offsets.*) and defaults, and Flotilla's limits."""

from __future__ import annotations

from dataclasses import dataclass

DAY_MS = 24 * 60 * 60 * 1000


@dataclass(frozen=True)
class GroupConfig:
    session_timeout_ms_min: int = 6_000  # group.min.session.timeout.ms
    session_timeout_ms_max: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms
    # group.max.size: Kafka's default is unbounded; a bound keeps a JoinGroup storm's memory finite.
    group_max_size: int = 1_000
    offset_metadata_bytes_max: int = 4_096  # offset.metadata.max.bytes
    offsets_retention_ms: int = 7 * DAY_MS  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    member_metadata_bytes_max: int = 1024 * 1024  # a member's protocol metadata (or assignment), all protocols
    groups_per_shard_max: int = 100_000
    consumer_session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms (KIP-848)
    consumer_heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms (KIP-848)
    # group.consumer.migration.policy: whether a non-empty classic group becomes a consumer group when a
    # consumer-protocol member joins it (upgrade), and back when its last such member leaves (downgrade)
    consumer_migration_policy: str = "bidirectional"

    @property
    def upgrade_enabled(self) -> bool:
        return self.consumer_migration_policy in ("bidirectional", "upgrade")

    @property
    def downgrade_enabled(self) -> bool:
        return self.consumer_migration_policy in ("bidirectional", "downgrade")

    def __post_init__(self) -> None:
        assert 0 < self.session_timeout_ms_min <= self.session_timeout_ms_max, self
        assert self.group_max_size > 0 and self.initial_rebalance_delay_ms >= 0, self
