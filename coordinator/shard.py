"""The contract between the coordinator runtime and a coordinator shard (Kafka's CoordinatorShard).

Theory of operation. A coordinator (groups, transactions) is a set of shards, one per partition of its
internal topic (`__consumer_offsets`, `__transaction_state`). The runtime (coordinator/runtime.py) owns
everything that touches the log and time; a shard owns the coordinator's state and its rules:

- `handle(request_id, request, now_ms) -> CoordinatorResult`: answer one request with the records to append
  and, usually, its response. The shard must not change its *durable* state here (what its records
  describe: committed offsets, group metadata, transaction metadata): that changes only in `replay`. It may
  change *volatile* state that Kafka keeps in memory only (members waiting in a JoinGroup, deadlines,
  requests parked until a rebalance completes): `response=None` parks the request, and a later result
  answers it through `completions`.
- `replay(record)`: the only way durable state changes. The runtime calls it for each record of a result
  once that result's batch is in the shard's partition (in offset order), and for every record of the
  partition while loading. A shard must reach the same durable state from the same records, whether they
  arrive from its own `handle` or from a load.
- `poll(now_ms) -> CoordinatorResult`: fire the deadlines that have passed (session timeouts, rebalance
  timeouts, offset retention, transaction timeouts). `next_deadline_ms()` says when to call it next.
- `on_loaded(now_ms)`: the load finished (every record of the partition up to its log end offset was
  replayed); rebuild volatile state from durable state (e.g. session deadlines for the members of stable
  groups), as Kafka's `onLoaded` does.
- `parked_request_ids()`: the requests the shard holds; on unload the runtime answers each of them with
  NOT_COORDINATOR.

Responses are held by the runtime until the partition's high watermark passes the last offset the shard had
written when the response was produced (Kafka's deferred event queue): a response never reports state that
a leader failover could lose. A result with no records is held the same way behind earlier writes.

Requests and responses are whatever the coordinator's adapter in broker/ passes in and expects back: the
decoded Kafka messages of net.protocol (so a shard builds response messages as Kafka's does), or the
coordinator's own request objects for internal operations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class CoordinatorRecord:
    """One record of an internal topic: Kafka's key/value schemas as bytes. `value=None` is a tombstone."""

    key: bytes
    value: bytes | None


@dataclass(frozen=True)
class LoadedRecord:
    """A record read back from the shard's partition (while loading, or replayed after an append)."""

    offset: int
    key: bytes | None
    value: bytes | None
    producer_id: int = -1
    producer_epoch: int = -1
    # Control batches (transaction markers) reach the shard too, so that a group shard can make
    # transactional offset commits visible on COMMIT and drop them on ABORT (KIP-98).
    is_control: bool = False
    control_type: int | None = None  # 0 ABORT, 1 COMMIT (Kafka's ControlRecordType), when is_control


Notice = tuple[str, dict[str, Any]]  # (event, fields) for the node's log


@dataclass
class TransactionalWrite:
    """The records of a result belong to a producer's transaction (TxnOffsetCommit): the batch is written
    with this producer id and epoch and the transactional flag, and becomes visible on its marker."""

    producer_id: int
    producer_epoch: int


@dataclass
class CoordinatorResult:
    """What a shard answers: records to append as one batch, this request's response (None: parked, or
    nothing to answer for a timer), and responses of earlier parked requests that this result releases."""

    records: list[CoordinatorRecord] = field(default_factory=list)
    response: Any = None
    completions: list[tuple[int, Any]] = field(default_factory=list)  # (request_id, response)
    transactional: TransactionalWrite | None = None
    # The completions report nothing this result's records add (a transaction's markers are written; its
    # Complete record is bookkeeping): they wait only for the shard's earlier writes.
    completions_precede_records: bool = False
    # Decisions an operator wants a log line for (a transaction aborted at its timeout, a member whose session
    # expired), each (event, fields): reported once this result's records are appended, never for a result
    # whose append failed.
    notices: list[Notice] = field(default_factory=list)

    @staticmethod
    def answer(response: Any, records: list[CoordinatorRecord] | None = None) -> "CoordinatorResult":
        return CoordinatorResult(records=list(records or ()), response=response)


class CoordinatorShard(Protocol):
    """One shard of a coordinator (see the module docstring for the contract)."""

    def handle(self, request_id: int, request: Any, now_ms: int) -> CoordinatorResult: ...

    def replay(self, record: LoadedRecord) -> None: ...

    def poll(self, now_ms: int) -> CoordinatorResult: ...

    def next_deadline_ms(self) -> int | None: ...

    def on_loaded(self, now_ms: int) -> None: ...

    def parked_request_ids(self) -> list[int]: ...
