"""The pysyncobj patches refuse foreign versions and sources, and the allow-list unpickler refuses classes."""

from __future__ import annotations

import itertools
import os
import pickle
import subprocess
import sys

import pytest
import pysyncobj.syncobj

from raftlog import patches
from raftlog.patches import (
    PATCHED_FUNCTIONS,
    AllowListPickle,
    RaftNode,
    UnsupportedPysyncobjVersionError,
    check_version,
    verify_sources,
)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_check_version_refuses_any_other_pysyncobj_version() -> None:
    check_version("0.3.17")
    for other in ("0.3.16", "0.3.18", "0.3.17.post1", ""):
        with pytest.raises(UnsupportedPysyncobjVersionError, match=f"found pysyncobj {other}"):
            check_version(other)


def test_import_refuses_to_start_on_another_installed_version() -> None:
    code = ("import pysyncobj.version as v; v.VERSION = '0.3.18'\n"
            "try:\n    import raftlog.driver\nexcept RuntimeError as e:\n    print('refused:', e)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=60, check=True)
    assert "refused:" in result.stdout and "0.3.18" in result.stdout


def test_changed_pysyncobj_source_is_refused() -> None:
    verify_sources({name: patches._ORIGINAL_FUNCTIONS[name] for name in patches.EXPECTED_SOURCE_SHA256})

    def _onTick(self, timeToWait=0.0):  # noqa: N802,N803  a look-alike with different code
        return None

    functions = dict(patches._ORIGINAL_FUNCTIONS, _onTick=_onTick)
    with pytest.raises(UnsupportedPysyncobjVersionError, match="_onTick"):
        verify_sources(functions)


def test_every_fix_edit_matches_the_source_exactly_once() -> None:
    for function_name in PATCHED_FUNCTIONS:
        patched = patches._apply_edits(function_name, frozenset())
        stock = patches._apply_edits(function_name, patches.BUG_NAMES)
        assert patched != stock, function_name
    assert "fix A" in patches._apply_edits("_SyncObj__onMessageReceived", frozenset({"B", "D", "E"}))
    assert "fix A" not in patches._apply_edits("_SyncObj__onMessageReceived", frozenset({"A"}))


def test_every_combination_of_fixes_switched_off_applies_and_compiles() -> None:
    # Fixes H and I edit neighbouring lines of the install branch; each must apply with or without the other.
    # J edits the chunked-entry loop of __sendAppendEntries, next to the adapter's edits of the same function.
    # K edits the reply (__sendNextNodeIdx) and the leader's handling of it, above fix B's edits there.
    for size in range(len(patches.BUG_NAMES) + 1):
        for live in itertools.combinations(sorted(patches.BUG_NAMES), size):
            for function_name in PATCHED_FUNCTIONS:
                source = patches._apply_edits(function_name, frozenset(live))  # asserts one match per edit
                compile("class SyncObj(object):\n" + source, function_name, "exec")
            install_reply = patches._apply_edits("_SyncObj__onMessageReceived", frozenset(live))
            assert ("fix I" in install_reply) == ("I" not in live), live
            chunked_entry = patches._apply_edits("_SyncObj__sendAppendEntries", frozenset(live))
            assert ("fix J" in chunked_entry) == ("J" not in live), live
            assert ("len(entries[0][0]):" in chunked_entry) == ("J" in live), live
            reply = patches._apply_edits("_SyncObj__sendNextNodeIdx", frozenset(live))
            assert ("'term': self.__raftCurrentTerm" in reply) == ("K" not in live), live
            assert ("fix K" in install_reply) == ("K" not in live), live
            assert ("fix B" in install_reply) == ("B" not in live), live


def test_syncobj_globals_are_routed_not_wall_clock() -> None:
    with pytest.raises(AssertionError, match="outside RaftDriver"):
        pysyncobj.syncobj.monotonicTime()
    with pytest.raises(AssertionError, match="outside RaftDriver"):
        pysyncobj.syncobj.random.random()
    with pytest.raises(AssertionError, match="sleep"):
        pysyncobj.syncobj.time.sleep(0.1)
    assert pysyncobj.syncobj.pickle is AllowListPickle


class _Exploit:
    def __reduce__(self) -> tuple:
        return (os.system, ("echo pwned",))


def test_allow_list_unpickler_refuses_foreign_classes() -> None:
    with pytest.raises(pickle.UnpicklingError, match="allow-list"):
        AllowListPickle.loads(pickle.dumps(_Exploit()))
    with pytest.raises(pickle.UnpicklingError, match="allow-list"):
        AllowListPickle.loads(pickle.dumps(pysyncobj.syncobj.SyncObjConf, protocol=2))


def test_allow_list_unpickler_loads_what_pysyncobj_pickles() -> None:
    command = (0, (b"\x00\x01payload",))
    assert AllowListPickle.loads(AllowListPickle.dumps(command)) == command
    entry = (b"\x00cmd", 7, 3)
    assert AllowListPickle.loads(AllowListPickle.dumps(entry)) == entry
    membership = ["add", 4, RaftNode(4)]
    loaded = AllowListPickle.loads(AllowListPickle.dumps(membership))
    assert loaded == membership and isinstance(loaded[2], RaftNode)


def test_raft_node_identity_does_not_depend_on_hash_seed() -> None:
    assert hash(RaftNode(3)) == 3 and RaftNode(3) == RaftNode(3) and RaftNode(2) < RaftNode(3)
    assert [n.id for n in sorted({RaftNode(5), RaftNode(1), RaftNode(3)})] == [1, 3, 5]
    with pytest.raises(AssertionError):
        RaftNode("1:2")  # type: ignore[arg-type]
