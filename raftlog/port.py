"""The RaftLog port: the narrow interface the rest of Flotilla uses to replicate its metadata log.

Theory of operation: an owner (the quorum controller) proposes opaque entries (bytes of CBOR records) and
gets a ticket back; the outcome of every ticket arrives exactly once through `take_completions` as either
the raft index the entry was committed at or a typed `RaftError`. Independently, every node (leader or
not) drains `take_committed`: the committed entries in raft-index order, each exactly once per process
lifetime, which the owner replays into its state machine. Snapshots are owned by the state machine: the
adapter calls `snapshot_fn()` for the state after every entry already taken, and `restore_fn(bytes)` when
a snapshot replaces that state (at restart, or when a leader installs one on a lagging follower); after a
restore, `take_committed` continues with the first entry after the snapshot.

Errors carry Kafka error codes (NOT_CONTROLLER, REQUEST_TIMED_OUT, ...) so net/ translates them in its one
place. A `ProposalTimeoutError` means "outcome unknown": the entry may still commit later (it then shows
up in `take_committed` on every node, and in `take_late_completions` of the proposing driver).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

from partitions.errors import ErrorCode, KafkaError

SnapshotFn = Callable[[], bytes]
RestoreFn = Callable[[bytes], None]


class RaftError(KafkaError):
    """A proposal (or a raft operation) failed; `code` is the Kafka error code to report."""

    code = ErrorCode.UNKNOWN_SERVER_ERROR


class NotLeaderError(RaftError):
    """This node is not the quorum leader; `leader_hint` is the node id of the last known leader, if any."""

    code = ErrorCode.NOT_CONTROLLER

    def __init__(self, leader_hint: int | None, message: str = "") -> None:
        self.leader_hint = leader_hint
        super().__init__(message or f"not the leader (leader hint: {leader_hint})")


class ProposalTimeoutError(RaftError):
    """The deadline passed before the outcome was known. The entry may still commit (outcome unknown)."""

    code = ErrorCode.REQUEST_TIMED_OUT


class ProposalDiscardedError(RaftError):
    """The entry was overwritten by a new leader's log: it will never commit. Safe to retry."""

    code = ErrorCode.NOT_CONTROLLER


class ProposalQueueFullError(RaftError):
    """Too many proposals in flight (`proposals_inflight_max`); back off and retry."""

    code = ErrorCode.THROTTLING_QUOTA_EXCEEDED


class ProposalTooLargeError(RaftError):
    """The entry exceeds `entry_bytes_max`."""

    code = ErrorCode.MESSAGE_TOO_LARGE


class RaftStorageError(RaftError):
    """The journal or snapshot on disk is unusable (corrupt, or a compacted journal without its snapshot)."""

    code = ErrorCode.KAFKA_STORAGE_ERROR


class RaftClosedError(RaftError):
    """The driver was closed while the proposal was pending."""

    code = ErrorCode.NOT_CONTROLLER


@dataclass(frozen=True)
class MemberProgress:
    """A voter as the local node sees it. match_index and last_contact_ms are known on the leader only
    (None elsewhere); for the local node match_index is its own last log index."""

    id: int
    match_index: int | None
    last_contact_ms: int | None
    is_voter: bool = True
    connected: bool = False


@dataclass(frozen=True)
class RaftStatus:
    node_id: int
    leader_id: int | None
    term: int  # the quorum epoch (Kafka's leader epoch of the metadata log)
    raft_commit_index: int
    last_applied: int
    is_leader: bool
    log_start_index: int
    log_end_index: int
    snapshot_index: int | None
    members: tuple[MemberProgress, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class RaftConfig:
    """Timing and limits of one quorum member. Units are in the names; times are milliseconds."""

    election_timeout_min_ms: int = 500
    election_timeout_max_ms: int = 1500
    heartbeat_interval_ms: int = 100
    # A leader that heard from no majority for this long steps down (Kafka: controller.quorum.fetch.timeout.ms).
    leader_fallback_timeout_ms: int = 2000
    log_compaction_entries_min: int = 5000
    log_compaction_interval_ms: int = 300_000
    append_entries_batch_bytes_max: int = 64 * 1024
    snapshot_chunk_bytes_max: int = 64 * 1024
    entry_bytes_max: int = 1024 * 1024
    proposals_inflight_max: int = 10_000
    message_bytes_max: int = 8 * 1024 * 1024
    journal_rewrite_bytes_min: int = 4 * 1024 * 1024

    def validate(self) -> None:
        """Raises AssertionError naming the values when the limits contradict each other."""
        assert 0 < self.heartbeat_interval_ms * 3 < self.election_timeout_min_ms, (
            f"heartbeat_interval_ms={self.heartbeat_interval_ms} must be < election_timeout_min_ms/3"
            f" ({self.election_timeout_min_ms})"
        )
        assert self.election_timeout_min_ms < self.election_timeout_max_ms, (
            f"election_timeout_min_ms={self.election_timeout_min_ms} >= max={self.election_timeout_max_ms}"
        )
        assert self.leader_fallback_timeout_ms > self.heartbeat_interval_ms, (
            f"leader_fallback_timeout_ms={self.leader_fallback_timeout_ms} <= heartbeat={self.heartbeat_interval_ms}"
        )
        assert self.log_compaction_entries_min >= 2, f"log_compaction_entries_min={self.log_compaction_entries_min}"
        assert self.entry_bytes_max + 1024 < self.message_bytes_max, (
            f"entry_bytes_max={self.entry_bytes_max} does not fit message_bytes_max={self.message_bytes_max}"
        )
        assert 0 < self.snapshot_chunk_bytes_max < self.message_bytes_max - 1024, (
            f"snapshot_chunk_bytes_max={self.snapshot_chunk_bytes_max} message_bytes_max={self.message_bytes_max}"
        )
        assert 0 < self.append_entries_batch_bytes_max, f"{self.append_entries_batch_bytes_max=}"
        assert self.proposals_inflight_max > 0, f"{self.proposals_inflight_max=}"


class RaftLog(Protocol):
    """The port. Implemented by `raftlog.driver.RaftDriver` (sans-IO) and wrapped by `raftlog.shell`."""

    def propose(self, data: bytes, deadline_ms: int) -> int:
        """Queue `data` for replication; returns a ticket whose outcome arrives via take_completions."""

    def take_completions(self) -> list[tuple[int, int | RaftError]]:
        """(ticket, raft_commit_index) for committed proposals, (ticket, RaftError) for failed ones."""

    def take_committed(self) -> list[tuple[int, bytes]]:
        """Committed entries (raft index, data) in order, each exactly once."""

    def status(self) -> RaftStatus:
        """Leader, term, commit and apply progress, and per-member replication progress."""

    def leadership(self) -> tuple[bool, int, int | None]:
        """(is leader, current term, leader id or None): what `status` says of them, without building it (its
        owner asks at every step)."""
