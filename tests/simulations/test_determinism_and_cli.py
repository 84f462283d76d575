"""One seed is one run: same trace hash in fresh processes under any PYTHONHASHSEED; the CLI's contract."""

import json
import os
import subprocess
import sys

import pytest

from cli.main import main
from simulations.faults import DEFAULT_FAULTS, format_faults, parse_faults
from simulations.run import RunConfig, replay_command, sweep

FAULTS = "crash=0.02,power_loss=0.01,partition=0.02,isolate_leader=0.02,drop=0.01,pause=0.01,reset=0.02"


def _simulate_in_fresh_process(seed, hash_seed):
    environment = dict(os.environ, PYTHONHASHSEED=str(hash_seed))
    completed = subprocess.run(
        [sys.executable, "-m", "cli.main", "simulate", "--seed", str(seed), "--duration", "6",
         "--faults", FAULTS, "--json"],
        capture_output=True, text=True, env=environment, timeout=300,
    )
    assert completed.returncode in (0, 1), completed.stderr[-2000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_same_seed_gives_the_same_trace_hash_in_fresh_processes_with_different_hash_seeds():
    first = _simulate_in_fresh_process(11, 0)
    second = _simulate_in_fresh_process(11, 987654)
    other_seed = _simulate_in_fresh_process(12, 0)
    assert first["trace_sha256"] == second["trace_sha256"]
    assert first["checkers"] == second["checkers"]
    assert other_seed["trace_sha256"] != first["trace_sha256"]


def test_json_output_has_the_documented_fields(capsys):
    assert main(["simulate", "--seed", "3", "--duration", "2", "--faults", "none", "--json"]) == 0
    record = json.loads(capsys.readouterr().out.strip())
    assert set(record) == {"seed", "trace_sha256", "ok", "checkers", "simulated_seconds", "wall_seconds"}
    assert record["seed"] == 3 and record["ok"] is True and len(record["trace_sha256"]) == 64
    assert set(record["checkers"].values()) == {"pass"}
    assert "acked_not_lost" in record["checkers"] and "liveness" in record["checkers"]


def test_trace_file_holds_the_lines_whose_hash_is_reported(tmp_path, capsys):
    import hashlib

    trace_path = tmp_path / "trace.txt"
    assert main(["simulate", "--seed", "4", "--duration", "2", "--faults", "none", "--json",
                 "--trace", str(trace_path)]) == 0
    record = json.loads(capsys.readouterr().out.strip())
    content = trace_path.read_bytes()
    assert hashlib.sha256(content).hexdigest() == record["trace_sha256"]
    assert b" client.ack " in content and b" net.deliver " in content


def test_sweep_prints_progress_and_a_summary(capsys):
    assert main(["simulate", "--seeds", "2", "--start-seed", "5", "--duration", "2", "--faults", "none"]) == 0
    out = capsys.readouterr().out
    assert "[1/2] seed 5 ok" in out and "[2/2] seed 6 ok" in out
    assert "2 runs, 0 failed" in out and "seeds/min" in out


def test_a_sweep_in_two_jobs_gives_each_seed_the_trace_of_a_sweep_in_one(capsys):
    config = RunConfig(seed=1, nodes=3, duration_s=4.0, faults=FAULTS, workload="cluster")
    seeds = [7, 3, 5, 4]  # not sorted: results come back in the order asked
    serial, parallel = [], []
    one = sweep(config, seeds, lambda result, run: serial.append((run.seed, result.seed, result.trace_sha256)))
    two = sweep(config, seeds, lambda result, run: parallel.append((run.seed, result.seed, result.trace_sha256)),
                jobs=2)
    assert [entry[0] for entry in parallel] == seeds and all(a == b for a, b, _ in parallel)
    assert parallel == serial
    assert (two.runs, two.failed_seeds, two.jobs) == (one.runs, one.failed_seeds, 2)
    assert "with 2 jobs" in two.format()


def test_a_sweep_in_two_jobs_stops_at_its_first_failure_in_seed_order():
    # With raft fix A off the first failing seed is 9 (tests/simulations/test_raft_sim.py).
    config = RunConfig(seed=0, duration_s=10.0, bugs_live=frozenset({"A"}))
    seen = []
    summary = sweep(config, list(range(1, 13)), lambda result, run: seen.append((run.seed, result.ok)),
                    stop_at_first_failure=True, jobs=2)
    assert summary.failed_seeds == [9] and summary.runs == 9
    assert seen == [(seed, seed != 9) for seed in range(1, 10)]


@pytest.mark.parametrize("arguments", [
    ["--faults", "crash=2"], ["--faults", "meteor=0.1"], ["--nodes", "0"], ["--workload", "nope"],
    ["--duration", "-1"], ["--jobs", "0"],
])
def test_bad_arguments_exit_2_with_a_message(arguments, capsys):
    assert main(["simulate", "--seed", "1", *arguments]) == 2
    assert "flotilla simulate:" in capsys.readouterr().err


def test_fault_text_round_trips_and_the_replay_command_parses_back():
    rates = parse_faults(DEFAULT_FAULTS)
    assert parse_faults(format_faults(rates)) == rates
    config = RunConfig(seed=9, nodes=5, duration_s=12.5, faults=FAULTS, bugs_live=frozenset({"B", "A"}))
    command = replay_command(config)
    assert command.startswith("flotilla simulate --seed 9 --nodes 5 --duration 12.5 --faults ")
    assert command.endswith("--workload raft --bugs A,B")


def test_a_killed_sweeps_workers_end_themselves():
    """`flotilla simulate --jobs 2` killed outright runs no clean-up: its worker processes end by themselves
    (each watches its parent) instead of running their queued seeds and then waiting forever."""
    import signal
    import time

    sweep_process = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "simulate", "--workload", "cluster", "--seeds", "50", "--duration", "30",
         "--faults", "none", "--jobs", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children_path = f"/proc/{sweep_process.pid}/task/{sweep_process.pid}/children"

    def children() -> list[int]:
        try:
            with open(children_path) as listing:
                return [int(pid) for pid in listing.read().split()]
        except FileNotFoundError:
            return []

    def alive(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False

    workers: list[int] = []
    try:
        deadline = time.monotonic() + 60
        workers = children()
        while len(workers) < 2 and time.monotonic() < deadline:  # the two workers (and the pool's helper)
            time.sleep(0.1)
            workers = children()
        assert len(workers) >= 2, workers
        sweep_process.send_signal(signal.SIGKILL)
        sweep_process.wait()
        deadline = time.monotonic() + 30
        while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(alive(pid) for pid in workers), [pid for pid in workers if alive(pid)]
    finally:  # this test's own processes only, by id
        sweep_process.kill()
        sweep_process.wait()
        for pid in workers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
