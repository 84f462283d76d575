"""`flotilla up --secure`: the embedded cluster with SASL_SSL, generated certificates and an admin user, and
the client settings it prints work with kcat and the flotilla CLI as printed."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.external]


def test_up_secure_prints_client_settings_that_work(tmp_path):
    up = subprocess.Popen([sys.executable, "-m", "cli.main", "up", "--secure"], cwd=tmp_path, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        lines = []
        deadline = time.monotonic() + 60
        while not any(line.startswith("the same in ") for line in lines) and time.monotonic() < deadline:
            lines.append(up.stdout.readline())
        printed = "".join(lines)
        properties = re.search(r"the same in (\S+):", printed).group(1)
        assert "security.protocol=SASL_SSL" in printed and "sasl.password=" in printed
        assert os.stat(properties).st_mode & 0o077 == 0  # the admin password is not world-readable
        bootstrap = re.search(r"bootstrap.servers=(\S+)", printed).group(1)
        cli = [sys.executable, "-m", "cli.main"]
        command = ["-b", bootstrap, "--command-config", properties]

        def create():
            result = subprocess.run(cli + ["topics", "create", "greetings", *command], capture_output=True, text=True,
                                    timeout=60)
            return result.returncode == 0 or "already exists" in result.stderr

        while not create():
            assert time.monotonic() < deadline + 60, "the secured cluster did not accept the topic"
            time.sleep(1)
        produced = subprocess.run(["kcat", "-F", properties, "-b", bootstrap, "-P", "-t", "greetings"],
                                  input="hello\n", capture_output=True, text=True, timeout=60)
        assert produced.returncode == 0, produced.stderr
        consumed = subprocess.run(["kcat", "-F", properties, "-b", bootstrap, "-C", "-t", "greetings", "-e", "-q"],
                                  capture_output=True, text=True, timeout=60)
        assert consumed.stdout.split() == ["hello"], consumed.stderr
        # Without credentials the same port serves nothing.
        anonymous = subprocess.run(cli + ["topics", "list", "-b", bootstrap], capture_output=True, text=True,
                                   timeout=60)
        assert anonymous.returncode != 0
    finally:
        os.killpg(up.pid, signal.SIGTERM)
        up.wait(60)
