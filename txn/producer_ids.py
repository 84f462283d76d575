"""Producer ids on a broker: Kafka's RPCProducerIdManager, sans-IO.

Theory of operation: the controller hands out disjoint blocks of producer ids (metadata/requests.py
AllocateProducerIdsRequest -> AllocateProducerIdsResponse(producer_id_start, producer_id_len), normally
PRODUCER_ID_BLOCK_SIZE = 1000 ids). This manager serves InitProducerId from the current block and asks for
the next block ahead of time, once `PREFETCH_RATIO` (90%) of the current one is used, so that InitProducerId
rarely waits. The node drives it:

    if manager.needs_block(now_ms): manager.on_block_requested(now_ms); send AllocateProducerIdsRequest
    response ok  -> manager.on_block(start, length)
    response bad -> manager.on_block_failed(now_ms)      (retried after BLOCK_RETRY_BACKOFF_MS)
    producer_id = manager.next_id()   # None: no id until the next block arrives; answer
                                      # COORDINATOR_LOAD_IN_PROGRESS (retriable), as Kafka does

Invariants: at most one block request in flight and at most one block waiting; ids handed out strictly
increase, so no id is ever handed out twice; a block that does not lie wholly above every id this manager
has seen (a stale or repeated response) is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFETCH_RATIO = 0.9  # Kafka's ProducerIdManager.PidPrefetchThreshold
BLOCK_RETRY_BACKOFF_MS = 50  # Kafka's ProducerIdManager.RetryBackoffMs
PRODUCER_ID_MAX = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """Ids [start, start + length)."""

    start: int
    length: int

    @property
    def end(self) -> int:
        return self.start + self.length


class ProducerIdManager:
    """Hands out producer ids from controller-allocated blocks. Not thread-safe: one owner."""

    def __init__(self) -> None:
        self.current: ProducerIdBlock | None = None
        self.next_in_block = 0  # index in `current` of the next id to hand out
        self.prefetched: ProducerIdBlock | None = None
        self.request_in_flight = False
        self.retry_after_ms = 0
        self.highest_seen = -1  # the end (exclusive) - 1 of the newest block accepted

    @property
    def remaining(self) -> int:
        """Ids left in the current block (not counting a prefetched one)."""
        return 0 if self.current is None else self.current.length - self.next_in_block

    def next_id(self) -> int | None:
        """The next producer id, or None when none is available until a block arrives."""
        if self.remaining == 0 and self.prefetched is not None:
            self.current, self.next_in_block, self.prefetched = self.prefetched, 0, None
        if self.remaining == 0:
            return None
        producer_id = self.current.start + self.next_in_block
        self.next_in_block += 1
        return producer_id

    def needs_block(self, now_ms: int) -> bool:
        """Whether the node should send AllocateProducerIdsRequest now: no block is waiting or being
        fetched, the retry backoff is over, and the current block is at least 90% used (or there is none)."""
        if self.request_in_flight or self.prefetched is not None or now_ms < self.retry_after_ms:
            return False
        if self.current is None:
            return True
        return self.next_in_block >= int(self.current.length * PREFETCH_RATIO)

    def on_block_requested(self, now_ms: int) -> None:
        assert not self.request_in_flight, "a producer-id block request is already in flight"
        self.request_in_flight = True

    def on_block(self, start: int, length: int) -> bool:
        """The controller's block. Returns False (and ignores it) when it is empty, out of range or not
        above every id already seen (a stale or repeated response)."""
        self.request_in_flight = False
        if length <= 0 or start <= self.highest_seen or start < 0 or start + length - 1 > PRODUCER_ID_MAX:
            return False
        block = ProducerIdBlock(start, length)
        self.highest_seen = block.end - 1
        if self.remaining == 0 and self.prefetched is None:
            self.current, self.next_in_block = block, 0
        else:
            assert self.prefetched is None, f"a block {self.prefetched} is already waiting"
            self.prefetched = block
        return True

    def on_block_failed(self, now_ms: int) -> None:
        """The request failed (error response or no answer): retry after BLOCK_RETRY_BACKOFF_MS."""
        self.request_in_flight = False
        self.retry_after_ms = now_ms + BLOCK_RETRY_BACKOFF_MS
