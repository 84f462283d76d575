"""Clients from npm for the compatibility tests: installed into build/js on first use (build/ is not part of
the repository), and the test skipped where node or npm is missing or node is older than the client needs."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PREFIX = os.path.join(ROOT, "build", "js")


def npm_package(spec: str, name: str, node_min: tuple[int, ...] = (0,)) -> str:
    """build/js's node_modules with `spec` (e.g. "kafkajs@2.2.4", package `name`) installed; skips the test
    without node and npm, or with a node older than `node_min`."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip(f"{name} needs node and npm")
    version = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    if tuple(int(part) for part in version.lstrip("v").split(".")[:3]) < node_min:
        pytest.skip(f"{name} needs node >= {'.'.join(map(str, node_min))}, not {version}")
    modules = os.path.join(PREFIX, "node_modules")
    os.makedirs(PREFIX, exist_ok=True)
    # One install at a time into build/js: test processes running side by side share it.
    with open(os.path.join(PREFIX, ".install-lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.isdir(os.path.join(modules, *name.split("/"))):
            installed = subprocess.run(
                ["npm", "install", "--no-audit", "--no-fund", "--silent", "--prefix", PREFIX, spec],
                capture_output=True, text=True, timeout=300)
            assert installed.returncode == 0, f"npm install {spec}: {installed.stderr[-2000:]}"
    return modules
