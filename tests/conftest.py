"""The test session's bytecode cache for the processes it starts.

The suite starts a Python process for every node, every `flotilla` command it runs and every simulation
worker, each importing a good part of the packages. Where the environment says not to write bytecode
(PYTHONDONTWRITEBYTECODE, as some container images set), each of them compiled every module it imports from
source again: 0.1 s of CPU more for a `flotilla` command, 0.2 s for a node's imports, on the two-core machine
the suite is timed on. For the processes the session starts, that setting is lifted and their bytecode goes to
a temporary directory of the session's own (PYTHONPYCACHEPREFIX), removed when the session ends: the source
tree gets no `__pycache__`, and what the user set for other processes is unchanged."""

from __future__ import annotations

import os
import shutil
import tempfile

_ENVIRONMENT_KEYS = ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
_saved: dict[str, str | None] = {}
_cache_dir: str | None = None


def pytest_configure(config) -> None:
    global _cache_dir
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return  # bytecode is cached already (beside the sources, or where the user said)
    _saved.update({key: os.environ.get(key) for key in _ENVIRONMENT_KEYS})
    _cache_dir = tempfile.mkdtemp(prefix="flotilla-tests-pycache-")
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    os.environ["PYTHONPYCACHEPREFIX"] = _cache_dir


def pytest_unconfigure(config) -> None:
    global _cache_dir
    if _cache_dir is None:
        return
    for key, value in _saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    shutil.rmtree(_cache_dir, ignore_errors=True)
    _cache_dir = None
