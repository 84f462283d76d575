"""The event loop: virtual time, deterministic ties, cancellation, derived RNG streams, the trace hash."""

import pytest

from simulations.loop import EventLoop, Trace, derive_seed


def test_events_fire_in_time_order_and_ties_in_scheduling_order():
    loop = EventLoop(1)
    fired = []
    loop.call_at(20, fired.append, "late")
    loop.call_at(10, fired.append, "first-at-10")
    loop.call_at(10, fired.append, "second-at-10")
    loop.run_until(100)
    assert fired == ["first-at-10", "second-at-10", "late"]
    assert loop.now_us == 100


def test_cancelled_event_never_fires():
    loop = EventLoop(1)
    fired = []
    handle = loop.call_at(5, fired.append, "x")
    loop.cancel(handle)
    loop.run_until(10)
    assert fired == []


def test_run_until_condition_stops_when_the_predicate_holds_or_time_runs_out():
    loop = EventLoop(1)
    state = {"n": 0}

    def tick():
        state["n"] += 1
        loop.call_later(10, tick)

    loop.call_at(0, tick)
    assert loop.run_until_condition(lambda: state["n"] >= 5, 1_000)
    assert loop.now_us == 40
    assert not loop.run_until_condition(lambda: state["n"] >= 10_000, 2_000)
    assert loop.now_us == 2_000


def test_derived_rngs_are_independent_and_reproducible():
    a, b = EventLoop(3), EventLoop(3)
    assert a.derive_rng("node-1").random() == b.derive_rng("node-1").random()
    assert a.derive_rng("node-1").random() != a.derive_rng("node-2").random()
    assert derive_seed(3, "x") != derive_seed(4, "x")


def test_trace_hash_depends_on_every_line_and_rejects_unstable_fields():
    first, second = Trace(), Trace()
    first.append(1, "kind", 1, "a")
    second.append(1, "kind", 1, "b")
    assert first.sha256() != second.sha256()
    with pytest.raises(AssertionError):
        first.append(2, "kind", 1.5)
    with pytest.raises(AssertionError):
        first.append(2, "kind", object())
