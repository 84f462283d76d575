"""Explicit, asserted patches that make pysyncobj 0.3.17 safe and deterministic.

Theory of operation: pysyncobj keeps its clock, randomness, journal, snapshot serializer, poller and
pickle as *module globals* of `pysyncobj.syncobj` (and friends). This module replaces each of them, once,
at import, by a router that forwards to the driver that is *currently* calling into SyncObj (see
`driving`). Several drivers can therefore live in one process (the simulator), each with its own virtual
clock, seeded RNG and Storage; a call into SyncObj outside `driving` fails loudly instead of reading wall
time.

The correctness fixes (bugs A, B, D, E of research/pysyncobj-findings.md, and H, I, J and K found since) are
textual edits of the exact pysyncobj source, recompiled inside a `class SyncObj` wrapper so name mangling
still applies. Before any edit the source of every function we depend on is compared to a SHA-256 recorded
here, and the module refuses to load on any other pysyncobj version: a silent upstream change can never
leave a fix half applied. Each fix can be switched off per driver (`RaftDriver(bug_switches=...)`) so the
simulator and the tests can show the bug it prevents; production code never switches one off.

A  follower commits an unverified log on snapshot messages: the commit index only advances up to the
   last index this very message verified (prevLogIdx consistency check passed, or a snapshot completed).
B  nextIndex livelock: the leader keeps the *lowest* nextIndex a NACK asked for (min clamp), and a
   follower answers a term conflict with the first index of the conflicting term (one round per term).
   With it: a follower no longer truncates entries that match the resent ones (stock pysyncobj cuts its
   whole tail on any resend, forgetting acknowledged entries once a clamped nextIndex resends a prefix),
   and an ack for an earlier pipelined batch no longer rewinds nextIndex (which re-sent every in-flight
   entry on every ack).
D  dump/journal restart race: a journal that still holds the dumped entries is compacted to the dump
   point (the interrupted compaction is finished) instead of being cleared; the same rule keeps the
   entries after a matching snapshot on install (Raft section 7) instead of dropping committed ones.
adapter (always applied, requirements of driving pysyncobj step by step over a Storage):
   - the snapshot branch of __sendAppendEntries stops when no chunk is ready (it relied on wall time
     passing inside the loop, and the virtual clock is frozen inside a step); the loop is also capped at
     `SEND_ROUNDS_PER_PEER_MAX` rounds per peer and tick, so no other branch can spin without bound;
   - __loadDumpFile re-raises instead of logging every exception with a bare `except:`: a storage failure
     (or a simulated crash) in the middle of `clear()` otherwise left an empty journal behind and the node
     running on it (IndexError in __getCurrentLogIndex on the next message).
E  journal without a dump file never applies after restart: the snapshot is always persisted next to
   the journal, and the driver refuses a compacted journal without a snapshot (see driver.py).
H  a follower installs a snapshot no newer than what it applied (a leader resending it after the follower
   moved on): stock pysyncobj loads every completed install, which rolls the state machine back to the
   snapshot and replays the entries after it, so the application sees committed state go backwards (a
   broker re-applying leaderships it had lost since). With the fix such an install is dropped, the snapshot
   this node holds is kept, and the leader is told to continue after the last applied index (committed
   entries, which match the leader's log).
I  a follower's reply to a completed install claims its whole log: with fix D's kept tail (entries after the
   snapshot that the leader never compared with its own, possibly a deposed leader's uncommitted ones), the
   leader takes the tail as matched and counts the follower toward committing its own, different entries
   at those indices (a commit by a minority, lost at the next election). With the fix the reply claims the
   snapshot only (Raft's InstallSnapshot reply), and the leader verifies the tail by AppendEntries, which
   keeps its matching entries and truncates the others (fix B).
J  an entry whose command is at least append_entries_batch_bytes_max (64 KiB) is pickled and sent in chunks
   of that size, and the first chunk to reach the *command's* length is marked 'finish', not the first to
   reach the pickled entry's (a few dozen bytes longer: 49 for a proposal of 128 KiB, index and term below
   256). When a chunk boundary m * 64 KiB (m >= 2) falls between the two ends, the follower unpickles a
   truncated entry: UnpicklingError out of the driver step, which nothing in raftlog/shell.py or net/node.py
   catches, so the node process exits. The leader had advanced the follower's next index past the entry; the
   restarted follower's NACK lowers it and the same chunks go out again, so every follower that receives the
   entry crashes, none appends it, and with no follower able to take it the entry never commits: the metadata
   quorum is down until a leader without the entry is elected (the proposal then fails, and a retry of the
   same request makes the same entry). Metadata entries that large are a CreateTopics of ~800 partitions
   or more at RF=3 (one entry of ~162 bytes per partition: 810 partitions with a name of 18-40 characters
   falls in the first window), or a broker fenced while in ~1,000 or more ISRs (one entry of ~133 bytes per
   partition); entries of up to entry_bytes_max (1 MiB) cross 15 such boundaries. With the fix the
   'finish' test uses the pickled entry's length.
K  a follower's reply to AppendEntries (next_node_idx) carries no term, and the leader takes any success
   reply as a match: a reply a follower sent to this node while it led an earlier term, still in flight on
   a stream that was never reset (a path that lost every segment while TCP retransmitted them), raises the
   follower's matchIndex in the node's later term (__onBecomeLeader had reset it to 0). The entries it
   vouches for were the earlier term's, since replaced on the follower by another leader's; the node's new
   entries at those indices are counted on the follower, which never held them: with 5 voters an entry is
   acknowledged with two of them holding it and lost at the next election. With the fix the reply carries
   the follower's term (the term of the AppendEntries it answers), and a leader drops a reply of any other
   term (Raft section 5.1: a response from an earlier term is stale); a reply without a term (a node
   without this fix) is taken as before, so mixed versions still talk.
C (no fsync) is fixed by raftlog.journal, F by the FIFO transport, G by proposal deadlines (driver.py).
"""

from __future__ import annotations

import hashlib
import inspect
import io
import pickle as _stdlib_pickle
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import pysyncobj.version

PYSYNCOBJ_VERSION_REQUIRED = "0.3.17"


class UnsupportedPysyncobjVersionError(RuntimeError):
    """The installed pysyncobj is not the exact version these patches were written and proven against."""


def check_version(found: str) -> None:
    """Raises UnsupportedPysyncobjVersionError unless `found` is the one supported pysyncobj version."""
    if found != PYSYNCOBJ_VERSION_REQUIRED:
        raise UnsupportedPysyncobjVersionError(
            f"raftlog requires pysyncobj=={PYSYNCOBJ_VERSION_REQUIRED} exactly (its fixes are source patches), "
            f"found pysyncobj {found}"
        )


check_version(pysyncobj.version.VERSION)

import pysyncobj.dns_resolver  # noqa: E402  (only after the version check)
import pysyncobj.serializer  # noqa: E402
import pysyncobj.syncobj as _syncobj  # noqa: E402
import pysyncobj.tcp_connection  # noqa: E402
import pysyncobj.transport  # noqa: E402
from pysyncobj.node import Node  # noqa: E402

# SHA-256 of inspect.getsource() of every SyncObj function whose exact behaviour the adapter relies on.
EXPECTED_SOURCE_SHA256: dict[str, str] = {
    "_SyncObj__onMessageReceived": "ddfe34b6c02821795146dc533fb7c0fcf6574a082a68a227b4c885c9e14be206",
    "_SyncObj__loadDumpFile": "ec66e83905de703bcead2735be875e71870a6bbe271c854867611e555a90bbba",
    "_SyncObj__applyLogEntries": "073db677773b5a2dddf17cc51f84ac8803ed456da0f0011e15240d6bd1600684",
    "_SyncObj__getEntries": "e29c4b33293b21018d1124c7e5835748c4c8092f7ce4af9e86f24633ccec7e0e",
    "_onTick": "cc9eb08232d005ba4e21a33ec453e5d02fe3537dadebda8571406c57f65a3c37",
    "_SyncObj__tryLogCompaction": "c2f8a0ec14cc7312e3ff41a16cde9be71ff0f908bd66aec9e2673d97a775be2c",
    "_SyncObj__sendAppendEntries": "9cb9073128c392fa9e5efc4691420ba435bfafb4c74e83a34f931fa16aa760c6",
    "_SyncObj__sendNextNodeIdx": "68aaeefc267b8896bc1074280ac2aa014c3306d9f207949ed945569cef5d114c",
    "_checkCommandsToApply": "a386a8079361d204f2c11f895416548c432a254671a9114258921c25108a966e",
}

def source_sha256(function: Callable[..., Any]) -> str:
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()


def verify_sources(functions: dict[str, Callable[..., Any]]) -> None:
    """Raises UnsupportedPysyncobjVersionError when a patched or relied-on function differs from 0.3.17's."""
    for name, expected in EXPECTED_SOURCE_SHA256.items():
        found = source_sha256(functions[name])
        if found != expected:
            raise UnsupportedPysyncobjVersionError(f"pysyncobj SyncObj.{name} source changed: sha256 {found}")


# Captured before any routing is installed: the stock functions and their source text.
_ORIGINAL_FUNCTIONS: dict[str, Callable[..., Any]] = {
    name: getattr(_syncobj.SyncObj, name) for name in EXPECTED_SOURCE_SHA256
}
verify_sources(_ORIGINAL_FUNCTIONS)
_ORIGINAL_SOURCE: dict[str, str] = {name: inspect.getsource(f) for name, f in _ORIGINAL_FUNCTIONS.items()}

# ---------------------------------------------------------------------------------------------------------
# The fixes: textual edits of the verified source. Each edit's `old` must occur exactly once.

BUG_NAMES: frozenset[str] = frozenset({"A", "B", "D", "E", "H", "I", "J", "K"})
# Messages (batches or snapshot chunks) one __sendAppendEntries call may send to one peer. Far above what
# a healthy tick sends (a follower thousands of entries behind needs hundreds of batches): a bound, not a
# pace. pysyncobj's own bound is 0.1 s of wall time, which a virtual clock never lets pass.
SEND_ROUNDS_PER_PEER_MAX = 10_000


@dataclass(frozen=True)
class _Edit:
    function: str
    old: str
    new: str


_EDITS: dict[str, tuple[_Edit, ...]] = {
    "A": (
        _Edit(
            "_SyncObj__onMessageReceived",
            "            # Regular append entries\n            if 'prevLogIdx' in message:\n",
            "            verifiedIdx = None  # fix A: the last index this message proved to match the leader\n"
            "            # Regular append entries\n            if 'prevLogIdx' in message:\n",
        ),
        _Edit(
            "_SyncObj__onMessageReceived",
            "                self.__sendNextNodeIdx(node, nextNodeIdx=nextNodeIdx, success=True)\n",
            "                verifiedIdx = nextNodeIdx - 1\n"
            "                self.__sendNextNodeIdx(node, nextNodeIdx=nextNodeIdx, success=True)\n",
        ),
        _Edit(
            "_SyncObj__onMessageReceived",
            "                    self.__loadDumpFile(clearJournal=True)\n",
            "                    self.__loadDumpFile(clearJournal=True)\n"
            "                    verifiedIdx = self.__raftLastApplied  # the snapshot point, not a kept tail\n",
        ),
        _Edit(
            "_SyncObj__onMessageReceived",
            "            if leaderCommitIndex > self.__raftCommitIndex:\n"
            "                self.__raftCommitIndex = min(leaderCommitIndex, self.__getCurrentLogIndex())\n",
            "            if verifiedIdx is not None and leaderCommitIndex > self.__raftCommitIndex:\n"
            "                self.__raftCommitIndex = max(self.__raftCommitIndex, min(leaderCommitIndex, verifiedIdx))\n",
        ),
    ),
    "B": (
        _Edit(
            "_SyncObj__onMessageReceived",
            "                if prevEntries[0][2] != prevLogTerm:\n"
            "                    self.__sendNextNodeIdx(node, nextNodeIdx = prevLogIdx, success = False, reset=True)\n",
            "                if prevEntries[0][2] != prevLogTerm:\n"
            "                    # fix B: skip back over the whole conflicting term, never below our commit index\n"
            "                    conflictTerm = prevEntries[0][2]\n"
            "                    conflictIdx = prevLogIdx\n"
            "                    lowestIdx = max(self.__raftLog[0][1] + 1, self.__raftCommitIndex + 1)\n"
            "                    while conflictIdx > lowestIdx and self.__getEntries(conflictIdx - 1, 1)[0][2] == conflictTerm:\n"
            "                        conflictIdx -= 1\n"
            "                    self.__sendNextNodeIdx(node, nextNodeIdx = conflictIdx, success = False, reset=True)\n",
        ),
        _Edit(
            "_SyncObj__onMessageReceived",
            "                if len(prevEntries) > 1:\n                    # rollback cluster changes\n",
            "                # fix B: entries we already hold with the same index and term are no conflict. A resend\n"
            "                # from a lowered nextIndex must not truncate (and forget acknowledged) matching entries.\n"
            "                while newEntries and len(prevEntries) > 1 and \\\n"
            "                        (prevEntries[1][1], prevEntries[1][2]) == (newEntries[0][1], newEntries[0][2]):\n"
            "                    prevEntries, newEntries, prevLogIdx = prevEntries[1:], newEntries[1:], prevLogIdx + 1\n"
            "                if len(prevEntries) > 1 and newEntries:\n                    # rollback cluster changes\n",
        ),
        _Edit(
            "_SyncObj__onMessageReceived",
            "                if reset:\n                    self.__raftNextIndex[node] = nextNodeIdx\n",
            "                if reset:\n"
            "                    # fix B: pipelined NACKs arrive in a burst; keep the lowest index asked for\n"
            "                    self.__raftNextIndex[node] = min(nextNodeIdx, self.__raftNextIndex.get(node, nextNodeIdx))\n",
        ),
        _Edit(
            "_SyncObj__onMessageReceived",
            "                        self.__raftMatchIndex[node] = currentNodeIdx\n"
            "                        self.__raftNextIndex[node] = nextNodeIdx\n",
            "                        self.__raftMatchIndex[node] = currentNodeIdx\n"
            "                        # fix B: an ack for an earlier pipelined batch must not rewind nextIndex (the\n"
            "                        # stream is FIFO): rewinding re-sends every in-flight entry on every ack\n"
            "                        self.__raftNextIndex[node] = max(nextNodeIdx, self.__raftNextIndex.get(node, nextNodeIdx))\n",
        ),
    ),
    "D": (
        _Edit(
            "_SyncObj__loadDumpFile",
            "            if clearJournal or \\\n",
            "            dumpedEntries = self.__getEntries(data[2][1], 2)\n"
            "            if len(dumpedEntries) == 2 and \\\n"
            "                    tuple(dumpedEntries[0]) == tuple(data[2]) and tuple(dumpedEntries[1]) == tuple(data[1]):\n"
            "                # fix D: the journal still holds the dumped entries: finish the interrupted compaction\n"
            "                # (restart), or keep the entries that follow the snapshot (install, Raft section 7)\n"
            "                self.__deleteEntriesTo(data[2][1])\n"
            "            elif clearJournal or \\\n",
        ),
    ),
    # Not a bug fix but a requirement of driving pysyncobj with a virtual clock: the snapshot loop of
    # __sendAppendEntries only ends on wall time when no chunk is available; the virtual clock does not
    # move inside a tick, so stop sending to that node until the next tick instead. Always applied.
    "adapter": (
        _Edit(
            "_SyncObj__sendAppendEntries",
            "                    else:\n                        sendingSerialized = False\n",
            "                    else:\n                        sendingSerialized = False\n"
            "                        break  # adapter: no snapshot chunk available in this tick\n",
        ),
        _Edit(
            "_SyncObj__sendAppendEntries",
            "            sendingSerialized = False\n            nextNodeIndex = self.__raftNextIndex[node]\n",
            "            sendingSerialized = False\n            nextNodeIndex = self.__raftNextIndex[node]\n"
            "            sendRounds = 0  # adapter: the virtual clock cannot end this loop, a count does\n",
        ),
        _Edit(
            "_SyncObj__sendAppendEntries",
            "                sendSingle = False\n",
            "                sendSingle = False\n"
            "                sendRounds += 1\n"
            f"                if sendRounds >= {SEND_ROUNDS_PER_PEER_MAX}:\n"
            "                    break\n",
        ),
        _Edit(
            "_SyncObj__loadDumpFile",
            "        except:\n            logger.exception('failed to load full dump')\n",
            "        except:\n            logger.exception('failed to load full dump')\n"
            "            raise  # adapter: never keep running on a half-cleared journal\n",
        ),
    ),
    "H": (
        _Edit(
            "_SyncObj__onMessageReceived",
            "                if self.__serializer.setTransmissionData(serialized):\n",
            "                if self.__serializer.setTransmissionData(serialized) and \\\n"
            "                        self.__serializer.received_index() <= self.__raftLastApplied:\n"
            "                    # fix H: an install no newer than our state would roll it back: keep ours\n"
            "                    self.__serializer.discard_received()\n"
            "                    self.__sendNextNodeIdx(node, nextNodeIdx=self.__raftLastApplied + 1, success=True)\n"
            "                elif self.__serializer.install_received():\n",
        ),
    ),
    "I": (
        _Edit(
            "_SyncObj__onMessageReceived",
            "                    self.__sendNextNodeIdx(node, success=True)\n",
            "                    # fix I: claim the snapshot only; the leader verifies a kept tail by AppendEntries\n"
            "                    self.__sendNextNodeIdx(node, nextNodeIdx=self.__raftLastApplied + 1, success=True)\n",
        ),
    ),
    "K": (
        _Edit(
            "_SyncObj__sendNextNodeIdx",
            "            'success': success,\n",
            "            'success': success,\n"
            "            'term': self.__raftCurrentTerm,  # fix K: a leader drops a reply of another term\n",
        ),
        _Edit(
            "_SyncObj__onMessageReceived",
            "            if message['type'] == 'next_node_idx':\n",
            "            # fix K: a reply of another term (sent when this node led an earlier one) vouches for\n"
            "            # that term's entries only; a reply without a term (a node without fix K) counts as before\n"
            "            if message['type'] == 'next_node_idx' and \\\n"
            "                    message.get('term', self.__raftCurrentTerm) == self.__raftCurrentTerm:\n",
        ),
    ),
    "J": (
        _Edit(
            "_SyncObj__sendAppendEntries",
            "                            elif pos + batchSizeBytes >= len(entries[0][0]):\n",
            "                            elif pos + batchSizeBytes >= len(entry):  # fix J: the pickled entry's end\n",
        ),
    ),
    # E is not a source edit: it is the choice of a persisted snapshot (see driver.py); recorded here so
    # that every fix is switched through the same `bug_switches` and documented in one place.
    "E": (),
}

# The SyncObj functions the edits change: each is replaced by a dispatcher to its variant (`_install`).
PATCHED_FUNCTIONS: tuple[str, ...] = tuple(sorted({edit.function for edits in _EDITS.values() for edit in edits}))


def _apply_edits(function_name: str, bugs_live: frozenset[str]) -> str:
    source = _ORIGINAL_SOURCE[function_name]
    for bug in ["adapter"] + sorted(BUG_NAMES - bugs_live):
        for edit in _EDITS[bug]:
            if edit.function != function_name:
                continue
            count = source.count(edit.old)
            assert count == 1, f"fix {bug}: expected snippet found {count} times in {function_name}"
            source = source.replace(edit.old, edit.new)
    return source


_VARIANTS: dict[tuple[str, frozenset[str]], Callable[..., Any]] = {}


def variant(function_name: str, bugs_live: frozenset[str]) -> Callable[..., Any]:
    """SyncObj.<function_name> with every fix applied except those of `bugs_live` (compiled once)."""
    relevant = frozenset(b for b in bugs_live if any(e.function == function_name for e in _EDITS[b]))
    key = (function_name, relevant)
    if key not in _VARIANTS:
        body = _apply_edits(function_name, relevant)
        wrapper = "class SyncObj(object):\n" + body  # keeps `self.__x` mangled to `_SyncObj__x`
        namespace: dict[str, Any] = {}
        exec(compile(wrapper, f"<pysyncobj patched {function_name}>", "exec"), _syncobj.__dict__, namespace)
        _VARIANTS[key] = namespace["SyncObj"].__dict__[function_name]
    return _VARIANTS[key]


def _install_dispatcher(function_name: str) -> None:
    def dispatch(self: Any, *args: Any, **kwargs: Any) -> Any:
        return variant(function_name, current().bugs_live)(self, *args, **kwargs)

    dispatch.__name__ = function_name
    setattr(_syncobj.SyncObj, function_name, dispatch)


# ---------------------------------------------------------------------------------------------------------
# Routing of process-wide globals to the driver that is currently calling into SyncObj.


class DriverContext(Protocol):
    """What a driver exposes to the routed globals while it is `driving`."""

    bugs_live: frozenset[str]

    def now_seconds(self) -> float: ...

    def random(self) -> float: ...

    def snapshot_exists(self, path: str) -> bool: ...

    def make_journal(self) -> Any: ...

    def make_serializer(self) -> Any: ...


_CONTEXT_STACK: list[DriverContext] = []


def current() -> DriverContext:
    assert _CONTEXT_STACK, "pysyncobj was entered outside RaftDriver (no virtual clock, RNG or storage bound)"
    return _CONTEXT_STACK[-1]


class driving:  # noqa: N801  (used as `with patches.driving(driver):`)
    """Bind pysyncobj's clock, RNG, journal, serializer and fixes to `context` for the enclosed calls. A class,
    not a generator-based context manager: every Raft step enters it."""

    __slots__ = ("context",)

    def __init__(self, context: DriverContext) -> None:
        self.context = context

    def __enter__(self) -> None:
        _CONTEXT_STACK.append(self.context)

    def __exit__(self, *exc_info: object) -> None:
        popped = _CONTEXT_STACK.pop()
        assert popped is self.context, "driver contexts must nest"


def _virtual_monotonic() -> float:
    assert _CONTEXT_STACK, "pysyncobj was entered outside RaftDriver (no virtual clock, RNG or storage bound)"
    return _CONTEXT_STACK[-1].now_seconds()  # current(), inlined: pysyncobj reads its clock many times a tick


class _RandomRouter:
    """Stands in for the `random` module inside pysyncobj: only `random()` is used (election timeouts)."""

    def random(self) -> float:
        return current().random()

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"pysyncobj asked for random.{name}, which the adapter does not route")


class _TimeRouter:
    """Stands in for `time` in pysyncobj.syncobj: a tick must never sleep."""

    def sleep(self, seconds: float) -> None:
        raise AssertionError(f"pysyncobj tried to sleep {seconds} s inside a tick")

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"pysyncobj asked for time.{name}, which the adapter does not route")


class _PathRouter:
    def isfile(self, path: str) -> bool:
        return current().snapshot_exists(path)


class _OsRouter:
    """Stands in for `os` in pysyncobj.syncobj: its only use is `os.path.isfile(fullDumpFile)`."""

    path = _PathRouter()

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"pysyncobj asked for os.{name}, which the adapter does not route")


class _NullPoller:
    """No sockets: inbound traffic is handed to the driver by its caller, so a poll never waits."""

    def subscribe(self, descr: Any, callback: Any, eventMask: int) -> None:  # noqa: N803
        raise AssertionError("the adapter's transport has no file descriptors to poll")

    def unsubscribe(self, descr: Any) -> None:
        pass

    def poll(self, timeout: float) -> None:
        assert timeout == 0, f"a tick must not block, poll timeout={timeout}"


# ---------------------------------------------------------------------------------------------------------
# Stable node identity and the allow-list unpickler.


class RaftNode(Node):
    """A quorum member identified by its integer node id: hash, equality and order depend on the id only,
    never on PYTHONHASHSEED (ints hash to themselves)."""

    def __init__(self, id: int) -> None:  # noqa: A002  (pysyncobj's name)
        assert isinstance(id, int) and not isinstance(id, bool), f"node id must be an int, got {id!r}"
        super().__init__(id)

    # pysyncobj keys its per-peer dicts by node: these read Node's `_id` attribute, not its `id` property.
    def __hash__(self) -> int:
        return hash(self._id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Node) and self._id == other._id

    def __lt__(self, other: RaftNode) -> bool:
        return self.id < other.id

    def __str__(self) -> str:
        return str(self.id)

    def __reduce__(self) -> tuple[Any, tuple[int]]:
        return (RaftNode, (self.id,))


_ALLOWED_CLASSES: frozenset[tuple[str, str]] = frozenset({(__name__, "RaftNode")})


class _AllowListUnpickler(_stdlib_pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED_CLASSES:
            raise _stdlib_pickle.UnpicklingError(f"class {module}.{name} is not on the raftlog allow-list")
        return super().find_class(module, name)


class AllowListPickle:
    """Replaces `pysyncobj.pickle` inside pysyncobj: what it still pickles (command tuples of ints and
    bytes, chunked log entries, membership changes naming a RaftNode) loads through an allow-list; any
    other class in a log entry or a peer's message is refused instead of executed."""

    @staticmethod
    def to_bytes(data: bytes | str) -> bytes:
        return data if isinstance(data, bytes) else data.encode("utf-8")

    @staticmethod
    def dumps(obj: Any, protocol: int | None = None) -> bytes:
        return _stdlib_pickle.dumps(obj, protocol=5)

    @staticmethod
    def dump(obj: Any, file: Any, protocol: int | None = None) -> None:
        file.write(AllowListPickle.dumps(obj))

    @staticmethod
    def loads(data: bytes | str) -> Any:
        return _AllowListUnpickler(io.BytesIO(AllowListPickle.to_bytes(data))).load()

    @staticmethod
    def load(file: Any) -> Any:
        return _AllowListUnpickler(file).load()


def _route_journal(journalFile: Any = None) -> Any:  # noqa: N803
    return current().make_journal()


def _route_serializer(*args: Any, **kwargs: Any) -> Any:
    return current().make_serializer()


def _route_poller(pollerType: str) -> _NullPoller:  # noqa: N803
    return _NullPoller()


def _install() -> None:
    for module in (_syncobj, pysyncobj.transport, pysyncobj.tcp_connection, pysyncobj.dns_resolver):
        assert hasattr(module, "monotonicTime"), f"{module.__name__} has no monotonicTime to route"
        module.monotonicTime = _virtual_monotonic
    for module in (_syncobj, pysyncobj.transport, pysyncobj.dns_resolver):
        module.random = _RandomRouter()
    _syncobj.time = _TimeRouter()
    _syncobj.os = _OsRouter()
    _syncobj.pickle = AllowListPickle
    pysyncobj.serializer.pickle = AllowListPickle
    _syncobj.createJournal = _route_journal
    _syncobj.Serializer = _route_serializer
    _syncobj.createPoller = _route_poller
    _syncobj.PIPE_NOTIFIER_ENABLED = False  # no os.pipe: appends are batched per tick by the driver
    for function_name in PATCHED_FUNCTIONS:
        _install_dispatcher(function_name)
        variant(function_name, frozenset())  # compile the all-fixes variant now: a bad edit fails at import
        variant(function_name, BUG_NAMES)


_install()
