"""Regressions for bugs the deterministic simulator found in raftlog, each reproduced without the simulator.

1. A storage failure while a snapshot install clears the journal was swallowed by pysyncobj's bare
   `except:` in __loadDumpFile; the node kept running on an empty journal and raised IndexError in
   __getCurrentLogIndex at its next message (`flotilla simulate --seed 18 --duration 10`).
2. A power loss can leave a zero-filled journal tail; an all-zero record header (length 0, CRC 0) passed
   the check because crc32(b"") == 0 and replay died with CBORDecodeEOF: the node never came back
   (`--seed 131 --faults crash=0.03,crash_in_step=0.08,power_loss_in_step=0.02,isolate_leader=0.01`).
3. __sendAppendEntries only leaves its loop on wall time when no snapshot chunk is ready; inside a
   driver step the clock is frozen, so the step never returned.
4. The journal fsynced its own directory but not the parents `makedirs` created: a power loss could
   take a fresh node's whole journal with the directory entry.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import signal
import struct
import zlib
from typing import Iterator

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partitions.storage import MemoryStorage
from raftlog.journal import StorageJournal
from simulations.disk import SimDisk
from tests.raftlog.harness import FAST_CONFIG, Cluster
from tests.raftlog.storages import PowerLossStorage

REWRITE_BYTES_MIN = 1 << 30
COMPACTING = dataclasses.replace(FAST_CONFIG, log_compaction_entries_min=10, snapshot_chunk_bytes_max=64)
STEP_WALL_SECONDS_MAX = 20  # a scenario of a few simulated seconds takes well under one second


@contextlib.contextmanager
def wall_clock_bound(seconds: float) -> Iterator[None]:
    """Turn a step that never returns into a test failure instead of a hung test run."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"a driver step did not return within {seconds} s of wall time")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _lagging_follower_needs_a_snapshot(seed: int, storages: dict[int, PowerLossStorage] | None = None
                                       ) -> tuple[Cluster, int, int]:
    """A follower cut off while the leader commits and compacts past it; still cut off on return."""
    cluster = Cluster(seed=seed, config=COMPACTING, storages=storages)
    leader = cluster.wait_leader()
    for i in range(5):
        cluster.commit(b"a-%d" % i)
    lagging = next(i for i in cluster.ids if i != leader)
    for other in cluster.ids:
        if other != lagging:
            cluster.partition(lagging, other)
    for i in range(40):
        cluster.commit(b"b-%d" % i)
    cluster.run_for(3000)  # any compaction of the lagging node's own has happened by now
    assert cluster.members[leader].driver.status().log_start_index > 10
    return cluster, leader, lagging


# -- 1 ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1])
def test_storage_failure_while_install_clears_the_journal_stops_the_node_instead_of_emptying_its_log(
        seed: int) -> None:
    storages = {i: PowerLossStorage() for i in (1, 2, 3)}
    cluster, leader, lagging = _lagging_follower_needs_a_snapshot(seed, storages)
    # The install writes the snapshot, then clears the journal by an atomic rewrite: fail that rewrite.
    storages[lagging].crash_when = lambda operation, path: operation == "open" and path.endswith("raft.journal.tmp")
    cluster.heal()
    assert cluster.run_until(lambda: cluster.members[lagging].driver is None, 5_000), (
        "the failed journal rewrite must end the step with an error (the node stops), not be logged and ignored")
    cluster.start(lagging)
    assert cluster.run_until(lambda: cluster.members[lagging].driver.status().last_applied
                             == cluster.members[leader].driver.status().last_applied, 10_000)
    assert cluster.members[lagging].machine.data() == cluster.members[leader].machine.data()
    cluster.check_prefix_consistency()


# -- 2 ---------------------------------------------------------------------------------------------------------

def _journal_with_entries(storage: MemoryStorage, count: int) -> list[tuple[bytes, int, int]]:
    journal = StorageJournal(storage, "raft", REWRITE_BYTES_MIN)
    for index in range(1, count + 1):
        journal.add(b"entry-%d" % index, index, 1)
    journal.setCurrentTerm(1, 2)
    journal.flush()
    return list(journal[:])


@pytest.mark.parametrize("tail", [
    bytes(8),  # an all-zero header: length 0, CRC 0 == crc32(b"")
    bytes(4096),  # a page of zeros, as a power loss leaves when the size reached disk but the data did not
    bytes(5),  # shorter than a header
    struct.pack(">II", 1, zlib.crc32(b"\xff")) + b"\xff",  # CRC fine, body not CBOR
    struct.pack(">II", 3, zlib.crc32(cbor2.dumps(["Q", 1]))) + cbor2.dumps(["Q", 1])[:3],  # cut CBOR body
    (lambda body: struct.pack(">II", len(body), zlib.crc32(body)) + body)(cbor2.dumps({"E": 1})),  # not a record
    (lambda body: struct.pack(">II", len(body), zlib.crc32(body)) + body)(cbor2.dumps([["E"], 1])),  # odd kind
], ids=["zero_header", "zero_page", "short_header", "not_cbor", "cut_cbor", "not_a_record", "unhashable_kind"])
def test_journal_replay_cuts_a_zero_filled_or_undecodable_tail_and_keeps_every_fsynced_entry(tail: bytes) -> None:
    storage = MemoryStorage()
    entries = _journal_with_entries(storage, 5)
    durable_bytes = len(storage.files["raft/raft.journal"])
    storage.files["raft/raft.journal"] += tail
    reopened = StorageJournal(storage, "raft", REWRITE_BYTES_MIN)
    assert list(reopened[:]) == entries
    assert (reopened.getCurrentTerm(), reopened.getVotedForNodeId()) == (1, 2)
    assert len(storage.files["raft/raft.journal"]) == durable_bytes
    reopened.add(b"entry-6", 6, 1)  # appends follow the valid records, and replay again
    reopened.flush()
    assert list(StorageJournal(storage, "raft", REWRITE_BYTES_MIN)[:]) == entries + [(b"entry-6", 6, 1)]


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 8), st.data())
def test_journal_torn_at_any_byte_then_zero_filled_recovers_a_prefix(count: int, data: st.DataObject) -> None:
    storage = MemoryStorage()
    entries = _journal_with_entries(storage, count)
    content = bytes(storage.files["raft/raft.journal"])
    cut = data.draw(st.integers(0, len(content)))
    zeros = data.draw(st.integers(0, 600))
    storage.files["raft/raft.journal"] = bytearray(content[:cut] + bytes(zeros))
    recovered = list(StorageJournal(storage, "raft", REWRITE_BYTES_MIN)[:])
    assert recovered == entries[:len(recovered)]
    assert len(storage.files["raft/raft.journal"]) <= cut


def test_node_restarts_after_a_power_loss_left_a_zero_filled_journal_tail() -> None:
    storages = {i: PowerLossStorage() for i in (1, 2, 3)}
    cluster = Cluster(seed=3, storages=storages)
    leader = cluster.wait_leader()
    for i in range(10):
        cluster.commit(b"e-%d" % i)
    follower = next(i for i in cluster.ids if i != leader)
    cluster.crash(follower)
    storages[follower].power_loss()
    storages[follower].names[f"raft-{follower}/raft.journal"].data += bytes(300)  # size reached disk, data not
    cluster.start(follower)
    cluster.commit(b"after")
    assert cluster.run_until(lambda: cluster.members[follower].machine.data()[-1:] == [b"after"], 5_000)
    assert cluster.members[follower].machine.data() == [b"e-%d" % i for i in range(10)] + [b"after"]


# -- 3 ---------------------------------------------------------------------------------------------------------

def test_leader_step_returns_when_a_follower_needs_a_snapshot_and_none_is_ready() -> None:
    cluster, leader, lagging = _lagging_follower_needs_a_snapshot(seed=4)
    leader_storage = cluster.members[leader].storage
    leader_storage.delete(f"raft-{leader}/raft.snapshot")  # lost behind the node's back: no chunk can be made
    with wall_clock_bound(STEP_WALL_SECONDS_MAX):
        cluster.heal()
        cluster.run_for(2_000)
    # The follower cannot be repaired without a snapshot, but the leader keeps stepping and committing.
    assert cluster.leader() is not None
    cluster.commit(b"still-committing")
    assert cluster.members[lagging].driver.status().last_applied < cluster.members[leader].driver.status().last_applied


# -- 4 ---------------------------------------------------------------------------------------------------------

def test_fresh_journal_in_new_nested_directories_survives_a_power_loss() -> None:
    disk = SimDisk(random.Random(7))
    journal = StorageJournal(disk, "data/node-1/raft", REWRITE_BYTES_MIN)
    journal.add(b"first", 1, 1)
    journal.setCurrentTerm(1, 1)
    assert journal.flush()
    disk.power_loss()
    reopened = StorageJournal(disk, "data/node-1/raft", REWRITE_BYTES_MIN)
    assert list(reopened[:]) == [(b"first", 1, 1)]
    assert (reopened.getCurrentTerm(), reopened.getVotedForNodeId()) == (1, 1)


def test_journal_in_the_storage_root_survives_a_power_loss() -> None:
    disk = SimDisk(random.Random(8))
    journal = StorageJournal(disk, "", REWRITE_BYTES_MIN)
    journal.add(b"first", 1, 1)
    assert journal.flush()
    disk.power_loss()
    assert list(StorageJournal(disk, "", REWRITE_BYTES_MIN)[:]) == [(b"first", 1, 1)]
