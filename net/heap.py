"""Python's cyclic garbage collector in a node process: the start-up heap frozen, every collection timed.

A full (generation 2) collection walks every object the collector tracks. Once a node has started it holds
about 60,000 of them (modules, classes, functions, the wire codec's generated encoders and decoders) that
live as long as the process, and a full collection of those took 30-60 ms of CPU on this project's 2-core
test machine. The interpreter runs one whenever a quarter more objects have survived to the oldest
generation, which a partition leader under 5,000 small produce requests/s reached every 10-20 s: a stall of
every request in flight, and the largest share of the leader's p99. `freeze_startup_heap()` moves what is
alive once the node serves into the permanent generation, which collections never walk (`gc.freeze`, the
pre-fork servers' idiom); later collections walk only what the node made since.

Only the start-up heap is frozen, once. Freezing again later would also freeze connections, fetch sessions
and producer states that die afterwards, and a frozen object that ends in a reference cycle is never freed.

`time_collections()` times every collection with `gc.callbacks` into `GC_PAUSES`, a histogram per
generation that the metrics endpoint exposes as `flotilla_gc_pause_seconds`. Both are for a node's own
process (cli/node.py -> net/node.py `run_node_forever`); nodes that tests start inside their own process
leave the test process's collector alone.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from broker.metrics import Histogram

GC_PAUSE_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)
GC_PAUSES: dict[int, Histogram] = {generation: Histogram(GC_PAUSE_BUCKETS_S) for generation in range(3)}
_started: list[float] = []  # perf_counter at the current collection's start (at most one)


def _on_collection(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _started[:] = [time.perf_counter()]
    elif _started:
        GC_PAUSES[info["generation"]].observe(time.perf_counter() - _started.pop())


def time_collections() -> None:
    """Time every collection of this process into GC_PAUSES (idempotent)."""
    if _on_collection not in gc.callbacks:
        gc.callbacks.append(_on_collection)


def freeze_startup_heap() -> int:
    """Collect once, then move every surviving object to the permanent generation; returns how many."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
