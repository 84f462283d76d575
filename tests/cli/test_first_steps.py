"""The README's "First steps", pasted into a shell as a newcomer would: they finish, and do what they say."""

import os
import re
import shutil
import signal
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = [pytest.mark.slow]


def first_steps() -> str:
    readme = open(os.path.join(ROOT, "README.md")).read()
    section = readme[readme.index("## First steps"):readme.index("## Status")]
    return re.search(r"```sh\n(.*?)```", section, re.S).group(1)


def test_the_first_steps_finish_and_round_trip_the_greetings(tmp_path):
    assert shutil.which("flotilla"), "the console script is installed by pip install -e ."
    script = "set -e\n" + first_steps() + "wait\n"
    # Its own session, so that a failing step leaves nothing running: everything the script started is in
    # that process group, which is stopped at the end whatever happened.
    shell = subprocess.Popen(["bash", "-c", script], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        stdout, stderr = shell.communicate(timeout=240)
    finally:
        try:
            os.killpg(shell.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        shell.wait(30)
    result = subprocess.CompletedProcess(shell.args, shell.returncode, stdout, stderr)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-2000:])
    consumed = sorted(line.split(" ", 2)[2] for line in result.stdout.splitlines() if re.match(r"^\d+ \d+ k\d=", line))
    assert consumed == ["k1=hello", "k2=bonjour", "k3=hola"], result.stdout
    assert "greetings" in result.stdout  # topics describe
