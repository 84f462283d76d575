"""Property tests for the raft journal (replay, torn tails) and the peer message codec."""

from __future__ import annotations

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partitions.storage import MemoryStorage
from raftlog.codec import MalformedRaftMessageError, decode_message, encode_message
from raftlog.journal import StorageJournal

REWRITE_BYTES_MIN = 1 << 30

_op = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 3), st.binary(min_size=1, max_size=20)),
    st.tuples(st.just("delete_from"), st.integers(0, 10)),
    st.tuples(st.just("delete_to"), st.integers(0, 10)),
    st.tuples(st.just("clear")),
    st.tuples(st.just("term"), st.integers(0, 50), st.one_of(st.none(), st.integers(1, 5))),
    st.tuples(st.just("commit"), st.integers(1, 100)),
    st.tuples(st.just("flush")),
)


def _apply(journal: StorageJournal, model: dict, op: tuple) -> None:
    kind = op[0]
    entries = model["entries"]
    if kind == "add":
        index = entries[-1][1] + 1 if entries else 1
        term = (entries[-1][2] if entries else 0) + op[1]
        journal.add(op[2], index, term)
        entries.append((op[2], index, term))
    elif kind == "delete_from":
        journal.deleteEntriesFrom(op[1])
        del entries[op[1]:]
    elif kind == "delete_to":
        journal.deleteEntriesTo(op[1])
        del entries[:op[1]]
    elif kind == "clear":
        journal.clear()
        entries.clear()
    elif kind == "term":
        journal.setCurrentTerm(op[1], op[2])
        model["term"], model["vote"] = op[1], op[2]
    elif kind == "commit":
        journal.setRaftCommitIndex(op[1])
        model["commit"] = op[1]
    else:
        journal.flush()


@settings(max_examples=150, deadline=None)
@given(st.lists(_op, max_size=40))
def test_journal_replays_exactly_what_was_flushed(ops: list[tuple]) -> None:
    storage = MemoryStorage()
    journal = StorageJournal(storage, "raft", REWRITE_BYTES_MIN)
    model = {"entries": [], "term": 0, "vote": None, "commit": 1}
    for op in ops:
        _apply(journal, model, op)
    journal.flush()
    reopened = StorageJournal(storage, "raft", REWRITE_BYTES_MIN)
    assert list(reopened[:]) == model["entries"]
    assert (reopened.getCurrentTerm(), reopened.getVotedForNodeId(), reopened.getRaftCommitIndex()) == (
        model["term"], model["vote"], model["commit"])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["add", "delete_from", "flush"]), min_size=1, max_size=30), st.data())
def test_journal_torn_at_any_byte_recovers_a_state_it_once_had(kinds: list[str], data: st.DataObject) -> None:
    storage = MemoryStorage()
    journal = StorageJournal(storage, "raft", REWRITE_BYTES_MIN)
    model = {"entries": [], "term": 0, "vote": None, "commit": 1}
    states = [[]]
    for kind in kinds:
        op = ("add", 0, b"x" * data.draw(st.integers(1, 5))) if kind == "add" else (
            ("delete_from", data.draw(st.integers(0, 5))) if kind == "delete_from" else ("flush",))
        _apply(journal, model, op)
        states.append(list(model["entries"]))
    journal.flush()
    content = bytes(storage.files["raft/raft.journal"])
    cut = data.draw(st.integers(0, len(content)))
    storage.files["raft/raft.journal"] = bytearray(content[:cut])
    recovered = list(StorageJournal(storage, "raft", REWRITE_BYTES_MIN)[:])
    assert recovered in states
    assert len(storage.files["raft/raft.journal"]) <= cut  # the torn tail was cut off


def test_journal_rewrites_when_mostly_dead_and_stays_replayable() -> None:
    storage = MemoryStorage()
    journal = StorageJournal(storage, "raft", rewrite_bytes_min=1000)
    for round_number in range(50):
        journal.add(b"payload-%d" % round_number, round_number + 1, 1)
        journal.flush()
        if round_number % 2:
            journal.deleteEntriesFrom(len(journal) - 1)
            journal.add(b"again-%d" % round_number, round_number + 1, 2)
            journal.flush()
    assert len(storage.files["raft/raft.journal"]) < 4000
    assert list(StorageJournal(storage, "raft", 1000)[:]) == list(journal[:])


VALID_MESSAGES = [
    {"type": "request_vote", "term": 3, "last_log_index": 10, "last_log_term": 2},
    {"type": "response_vote", "term": 3},
    {"type": "append_entries", "term": 3, "commit_index": 9, "entries": [(b"\x00a", 10, 3)], "prevLogIdx": 9,
     "prevLogTerm": 2},
    {"type": "append_entries", "term": 3, "commit_index": 9, "serialized": (b"chunk", True, False)},
    {"type": "append_entries", "term": 3, "commit_index": 9, "serialized": None},
    {"type": "next_node_idx", "next_node_idx": 11, "reset": False, "success": True},
    {"type": "timeout_now", "term": 4},
]


@pytest.mark.parametrize("message", VALID_MESSAGES)
def test_codec_round_trips_pysyncobj_messages(message: dict) -> None:
    decoded = decode_message(encode_message(message))
    assert decoded == cbor2.loads(cbor2.dumps(message))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_codec_rejects_arbitrary_bytes_only_with_its_typed_error(payload: bytes) -> None:
    try:
        message = decode_message(payload)
    except MalformedRaftMessageError:
        return
    assert message["type"] in ("request_vote", "response_vote", "append_entries", "next_node_idx", "timeout_now")


@pytest.mark.parametrize("message", [
    {"type": "apply_command", "command": b"\x00x"},
    {"type": "request_vote", "term": True, "last_log_index": 1, "last_log_term": 1},
    {"type": "append_entries", "term": 1, "commit_index": 1, "entries": [[b"", 1, 1]]},
    {"type": "append_entries", "term": 1, "commit_index": 1, "entries": [[b"\x00", 1]]},
    {"type": "append_entries", "term": 1, "commit_index": 1, "transmission": "start"},
    {"type": "next_node_idx", "next_node_idx": 3, "reset": 0, "success": True},
    ["not", "a", "map"],
])
def test_codec_rejects_malformed_messages(message: object) -> None:
    with pytest.raises(MalformedRaftMessageError):
        decode_message(cbor2.dumps(message))
