"""The discrete-event loop: a virtual clock, one seeded RNG tree, and the trace that fingerprints a run.

Theory of operation: a run is a heap of events ordered by (time_us, sequence). The sequence number is
assigned at scheduling time, so two events due at the same microsecond fire in the order they were
scheduled: the run is a pure function of its seed. Time is an integer number of microseconds and only moves
when the next event is taken; nothing here reads a wall clock, starts a thread or touches global `random`.

Randomness: the run owns one `random.Random(seed)`; every component (a node, a link, the disk, the fault
schedule) gets its own stream from `derive_rng(name)`, seeded by sha256(seed, name). Streams are independent,
so adding a draw in the network does not shift the disk's torn-write choices: traces stay comparable across
small changes.

The trace: every delivered message, fault and client operation is appended as one canonical text line
("<time_us> <kind> <fields>"), built only from ints and strings (never reprs of objects, never the iteration
order of a hash-dependent set). The sha256 of all lines is the run's fingerprint: same seed, same hash, in any
process and under any PYTHONHASHSEED.
"""

from __future__ import annotations

import hashlib
import heapq
import random
from typing import Any, Callable, TextIO

US_PER_MS = 1_000
US_PER_S = 1_000_000
EVENTS_PER_RUN_MAX = 200_000_000  # a runaway loop (an event that reschedules itself at `now`) stops the run


class SimulationStalled(Exception):
    """The loop processed more events than a run may (a livelock of zero-delay events)."""


class Trace:
    """Canonical lines of a run and their running sha256. Lines go to `sink` (a text file) when given."""

    def __init__(self, sink: TextIO | None = None) -> None:
        self._hash = hashlib.sha256()
        self._sink = sink
        self.line_count = 0
        # Hear every line (simulations/picture.py, a checker's fault windows); they only watch, so the hash is
        # the same without them.
        self.listeners: list[Callable[[int, str, tuple[Any, ...]], None]] = []

    def append(self, time_us: int, kind: str, *fields: Any) -> None:
        """Record one line. Fields must be ints, strs or bools (their str() is stable across processes)."""
        for value in fields:
            if value.__class__ is not int and value.__class__ is not str:  # the common cases, without isinstance
                assert isinstance(value, (int, str)), f"trace field {value!r} of type {type(value).__name__} in {kind}"
        line = f"{time_us} {kind} {' '.join(map(str, fields))}\n" if fields else f"{time_us} {kind}\n"
        self._hash.update(line.encode())
        self.line_count += 1
        if self._sink is not None:
            self._sink.write(line)
        if self.listeners:
            for listener in self.listeners:
                listener(time_us, kind, fields)

    def sha256(self) -> str:
        return self._hash.hexdigest()


def derive_seed(seed: int, name: str) -> int:
    """A 64-bit seed for the stream `name` of run `seed`; independent of PYTHONHASHSEED."""
    digest = hashlib.sha256(f"{seed}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


class EventLoop:
    """A virtual clock and a heap of callbacks. Single-threaded; callbacks may schedule more events."""

    def __init__(self, seed: int, trace: Trace | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.trace = trace if trace is not None else Trace()
        self.now_us = 0
        self.events_processed = 0
        self._heap: list[tuple[int, int, Callable[..., Any], tuple[Any, ...]]] = []
        self._sequence = 0
        self._cancelled: set[int] = set()  # sequence numbers (ints hash to themselves: order-free use only)
        # Called with the virtual time after each event (simulations/picture.py samples state from it); it
        # must schedule nothing, so a run is the same with or without it.
        self.observer: Callable[[int], None] | None = None

    @property
    def now_ms(self) -> int:
        return self.now_us // US_PER_MS

    def derive_rng(self, name: str) -> random.Random:
        """An independent RNG for the component `name` (e.g. "node-2", "link-1-3", "disk-2")."""
        return random.Random(derive_seed(self.seed, name))

    def call_at(self, time_us: int, callback: Callable[..., Any], *args: Any) -> int:
        """Run `callback(*args)` at virtual time `time_us` (not before now). Returns a handle for `cancel`."""
        assert isinstance(time_us, int), f"time_us={time_us!r} must be an int"
        if time_us < self.now_us:
            time_us = self.now_us
        sequence = self._sequence = self._sequence + 1
        heapq.heappush(self._heap, (time_us, sequence, callback, args))
        return sequence

    def call_later(self, delay_us: int, callback: Callable[..., Any], *args: Any) -> int:
        assert delay_us >= 0, f"delay_us={delay_us}"
        return self.call_at(self.now_us + delay_us, callback, *args)

    def cancel(self, handle: int | None) -> None:
        """Forget a scheduled event; cancelling a fired or unknown handle is a no-op."""
        if handle is not None and handle <= self._sequence:
            self._cancelled.add(handle)

    def next_event_time_us(self) -> int | None:
        self._drop_cancelled_head()
        return self._heap[0][0] if self._heap else None

    def step(self) -> bool:
        """Fire the next event; False when none is left."""
        return self._fire_next(None)

    def run_until(self, time_us: int) -> None:
        """Fire every event due up to and including `time_us`, then set the clock to `time_us`."""
        while self._fire_next(time_us):
            pass
        self.now_us = max(self.now_us, time_us)

    def run_until_condition(self, predicate: Callable[[], bool], time_us_max: int) -> bool:
        """Fire events until `predicate()` holds (True) or the next event is past `time_us_max` (False)."""
        while not predicate():
            if not self._fire_next(time_us_max):
                self.now_us = max(self.now_us, time_us_max)
                return predicate()
        return True

    def _fire_next(self, time_us_max: int | None) -> bool:
        """Fire the next event if there is one due by `time_us_max` (None: any); False when there is none.
        The one place events fire: `step`, `run_until` and `run_until_condition` all come here."""
        heap = self._heap
        cancelled = self._cancelled
        while heap:
            time_us, sequence, callback, args = heap[0]
            if sequence in cancelled:
                cancelled.discard(heapq.heappop(heap)[1])
                continue
            if time_us_max is not None and time_us > time_us_max:
                return False
            heapq.heappop(heap)
            self.now_us = time_us
            self.events_processed += 1
            if self.events_processed > EVENTS_PER_RUN_MAX:
                raise SimulationStalled(f"more than {EVENTS_PER_RUN_MAX} events at t={time_us}us")
            callback(*args)
            if self.observer is not None:
                self.observer(time_us)
            return True
        return False

    def _drop_cancelled_head(self) -> None:
        heap = self._heap
        cancelled = self._cancelled
        while heap and heap[0][1] in cancelled:
            cancelled.discard(heapq.heappop(heap)[1])
