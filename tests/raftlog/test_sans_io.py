"""The sans-IO rule for raftlog/: only shell.py may import trio, socket, time, random, threading, asyncio,
selectors or os (pysyncobj itself imports them; the patches route every use it makes of them)."""

from __future__ import annotations

import ast
import pathlib

import raftlog

FORBIDDEN = {"trio", "socket", "time", "random", "threading", "asyncio", "selectors", "os"}


def _imported_roots(path: pathlib.Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_raftlog_cores_import_no_io_modules() -> None:
    package = pathlib.Path(raftlog.__file__).parent
    checked = 0
    for path in sorted(package.glob("*.py")):
        if path.name == "shell.py":
            assert _imported_roots(path) & {"trio", "socket"}, "the shell is where the I/O lives"
            continue
        assert not (_imported_roots(path) & FORBIDDEN), f"{path.name} imports {_imported_roots(path) & FORBIDDEN}"
        checked += 1
    assert checked >= 6
