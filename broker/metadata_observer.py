"""A broker-only node's fetches of the metadata log (a KRaft observer), sans-IO: one implementation for the real
node (net/node.py) and the simulator (simulations/node_process.py).

Theory of operation. A node that is no controller has no Raft log of its own: it asks the quorum leader for the
committed entries after its image (`NodeState.metadata_fetch_request`), replays the answer
(`NodeState.apply_metadata_fetch`) and asks again. `MetadataObserver` keeps one fetch in flight and decides
when the next one leaves; the runtime only carries the request and its answer, and keeps the time, through a
`MetadataFetchPort`:
- a fetch goes to the controller `NodeState.controller_to_ask` names: the leader the last answer named, or, while
  this node knows none it can reach, the controllers in turn;
- an answer is matched to the fetch by the controller asked (a later one from another is dropped); an answer
  that brought entries, or that the leader held (it waits up to METADATA_FETCH_WAIT_MS_MAX for news before it
  answers), is followed by the next fetch at once, any other after OBSERVER_FETCH_INTERVAL_MS
  (`NodeState.metadata_fetch_again_at_once`);
- a fetch that fails (no answer within the runtime's timeout, its connection lost, an error answer) forgets the
  leader and is tried again after CONTROLLER_RETRY_BACKOFF_MS, at the next controller;
- `fetch_now` (a controller call's answer needs the metadata it was written in, broker/controller_calls.py) sends
  a fetch at once unless one is in flight, and makes the answer of the one in flight be followed at once.

It never sleeps, never opens a connection and never reads a clock: the port's timers keep the time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

from broker.controller_calls import CONTROLLER_RETRY_BACKOFF_MS

if TYPE_CHECKING:
    from broker.node_state import NodeState

OBSERVER_FETCH_INTERVAL_MS = 100  # the next fetch after an answer its controller did not hold


class MetadataFetchPort(Protocol):
    """What a runtime gives `MetadataObserver`."""

    def reachable(self, node_id: int) -> bool:
        """Whether a fetch to `node_id` can leave now (a runtime that finds out by trying answers True)."""

    def send_fetch(self, target: int, request: dict) -> bool:
        """Send `request` to controller `target`; its answer comes back through `on_answer`, a failure through
        `on_failure` (or the fetch's timeout). A runtime that can tell drops the late outcome of an earlier fetch
        (`MetadataObserver.fetch_id` moved on); one that cannot hands a late answer from the controller asked to
        the fetch in flight, which replays its entries all the same. False: it could not leave (tried again
        after a backoff)."""

    def call_later(self, delay_ms: int, action: Callable[[], None]) -> Any:
        """Run `action` after `delay_ms` (0: as soon as the runtime can); returns a handle for `cancel`."""

    def cancel(self, handle: Any) -> None:
        """A timer of `call_later` that has not fired does not fire."""

    def applied(self) -> None:
        """An answer was replayed: the runtime steps the node (the image may have moved)."""


class MetadataObserver:
    """One observer's metadata fetches (see the module's docstring). `timeout_ms`: how long a fetch may go
    unanswered before it counts as failed; above the leader's hold, METADATA_FETCH_WAIT_MS_MAX."""

    def __init__(self, state: "NodeState", port: MetadataFetchPort, timeout_ms: int) -> None:
        self.state = state
        self.port = port
        self.timeout_ms = timeout_ms
        self.asked: int | None = None  # the controller the fetch in flight went to
        self.fetch_id = 0  # counts the fetches sent: a runtime tells a late outcome of an earlier one by it
        self._timeout: Any = None
        self._next: Any = None  # the timer of the next fetch, while one waits
        self._wanted = False  # the answer of the fetch in flight is followed at once
        # Planted bug (the simulator's observer_stops_after_failure): a failed fetch plans no next one, so the
        # node's image stays where it was until something else asks for a fetch (`fetch_now`).
        self.bug_stops_after_failure = False

    def fetch(self) -> None:
        """Send the next fetch, unless one is in flight."""
        if self.asked is not None:
            return
        if self._next is not None:  # this one goes now (fetch_now): the one planned does not go too
            self.port.cancel(self._next)
            self._next = None
        target = self.state.controller_to_ask(self.port.reachable)
        self.fetch_id += 1
        if target is None or not self.port.send_fetch(target, self.state.metadata_fetch_request()):
            self._fetch_later(CONTROLLER_RETRY_BACKOFF_MS)
            return
        self.asked = target
        self._timeout = self.port.call_later(self.timeout_ms, self.on_failure)

    def fetch_now(self) -> None:
        """The node needs metadata newer than its image: fetch at once, or at once after the fetch in flight."""
        self._wanted = True
        self.fetch()

    def on_answer(self, controller: int, answer: dict) -> None:
        """A controller answered (the runtime has decoded it; an error answer has an "error" key)."""
        if self.asked != controller:
            return  # an answer after its fetch's timeout
        if "error" in answer:
            self.on_failure()
            return
        self._end_fetch()
        applied = self.state.apply_metadata_fetch(answer)
        self.port.applied()
        at_once = self.state.metadata_fetch_again_at_once(answer, applied) or self._wanted
        self._wanted = False
        self._fetch_later(0 if at_once else OBSERVER_FETCH_INTERVAL_MS)

    def on_failure(self) -> None:
        """The fetch in flight failed (its timeout, a transport error): forget the leader, try again later."""
        if self.asked is None:
            return
        self._end_fetch()
        self.state.leader_hint = None
        if not self.bug_stops_after_failure:
            self._fetch_later(CONTROLLER_RETRY_BACKOFF_MS)

    def on_connection_lost(self, node_id: int) -> None:
        if self.asked == node_id:
            self.on_failure()

    def close(self) -> None:
        """The node stops: no timer of this class fires."""
        for handle in (self._timeout, self._next):
            if handle is not None:
                self.port.cancel(handle)
        self._timeout = self._next = None

    def _fetch_later(self, delay_ms: int) -> None:
        self._next = self.port.call_later(delay_ms, self._planned_fetch)

    def _planned_fetch(self) -> None:
        self._next = None
        self.fetch()

    def _end_fetch(self) -> None:
        self.port.cancel(self._timeout)
        self._timeout = None
        self.asked = None
