"""Python packages that cannot share the test environment (they pin another confluent-kafka, say), for the
compatibility tests: a virtual environment per set of packages under build/pyenv-NAME (build/ is not part of
the repository), made on first use with the running interpreter and filled from the package index."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def python_with(name: str, requirements: list[str]) -> str:
    """The interpreter of build/pyenv-NAME, where `requirements` (pinned, e.g. "quixstreams==3.28.1") are
    installed; made once, and again when the requirements change."""
    prefix = os.path.join(ROOT, "build", f"pyenv-{name}")
    python = os.path.join(prefix, "bin", "python")
    wanted = "\n".join(sorted(requirements)) + "\n"
    stamp = os.path.join(prefix, "requirements.txt")
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    # One install at a time: test processes running side by side share the environment.
    with open(prefix + ".install-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(stamp):
            with open(stamp) as installed_for:
                if installed_for.read() == wanted:
                    return python
        made = subprocess.run([sys.executable, "-m", "venv", "--clear", prefix], capture_output=True, text=True,
                              timeout=300)
        assert made.returncode == 0, f"python -m venv {prefix}: {made.stderr[-2000:]}"
        installed = subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                                    *requirements], capture_output=True, text=True, timeout=900)
        assert installed.returncode == 0, f"pip install {requirements}: {installed.stderr[-3000:]}"
        with open(stamp, "w") as out:
            out.write(wanted)
    return python
