"""`flotilla simulate`: run the deterministic simulator for one seed or a sweep of seeds.

Per run it prints the seed, the trace sha256, each checker's verdict and the simulated and wall seconds
(`--json`: one JSON object per line); a failed run prints the command that replays it; a sweep prints
progress and a summary. Exit status 1 when any run failed, 2 for bad arguments.

The simulator (the `simulations` package, below `cli` in the layering) is imported when the subcommand runs,
not when `flotilla` starts, so other commands do not pay for loading it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "simulate",
        help="run the deterministic fault-injection simulator",
        description="Run the deterministic simulator: one seed is one reproducible run.",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--seed", type=int, help="run this one seed")
    which.add_argument("--seeds", type=int, metavar="K", help="sweep K seeds starting at --start-seed")
    parser.add_argument("--start-seed", type=int, default=1, help="first seed of a sweep (default 1)")
    parser.add_argument("--nodes", type=int, default=3, help="number of nodes (default 3)")
    parser.add_argument("--duration", type=float, default=60.0, help="simulated seconds of faults (default 60)")
    parser.add_argument(
        "--faults", default=None,
        help='fault rates "kind=p,..." (probability per 100 simulated ms), "none", or omit for the default mix',
    )
    parser.add_argument("--workload", default="raft", help="workload to run (default raft)")
    parser.add_argument(
        "--bugs", default="",
        help="comma-separated fixes to switch OFF to reproduce known bugs (raft workload: A,B,D,E,H,I,J,K)",
    )
    parser.add_argument("--trace", metavar="FILE", help="write the trace lines of a single run to FILE")
    parser.add_argument("--html", metavar="FILE",
                        help="draw a single run as one self-contained HTML page (cluster, groups and transactions)")
    parser.add_argument("--json", action="store_true", help="one JSON object per run on stdout")
    parser.add_argument("--stop-at-first-failure", action="store_true", help="end a sweep at its first failure")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="run a sweep's seeds in N worker processes (default 1; results stay in seed order)")
    parser.add_argument(
        "--wall-timeout", type=float, default=600.0,
        help="stop and fail a run after this many real seconds (safety net; default 600)",
    )
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from simulations import faults, run as simulations_run
    base_config = simulations_run.RunConfig(
        seed=args.seed if args.seed is not None else args.start_seed,
        nodes=args.nodes,
        duration_s=args.duration,
        faults=args.faults if args.faults is not None else faults.DEFAULT_FAULTS,
        workload=args.workload,
        bugs_live=frozenset(b.strip() for b in args.bugs.split(",") if b.strip()),
        trace_path=args.trace if args.seeds is None else None,
        html_path=args.html if args.seeds is None else None,
    )
    try:
        base_config.validate()
        if args.seeds is not None and args.seeds <= 0:
            raise ValueError(f"--seeds {args.seeds}: expected a positive count")
        if args.jobs < 1:
            raise ValueError(f"--jobs {args.jobs}: expected at least 1")
        if args.trace and args.seeds is not None:
            raise ValueError("--trace writes one run's trace: use it with --seed")
        if args.html and args.seeds is not None:
            raise ValueError("--html draws one run: use it with --seed")
        if args.html and args.workload == "raft":
            raise ValueError("--html draws the cluster, groups and transactions workloads, not raft")
    except ValueError as error:
        print(f"flotilla simulate: {error}", file=sys.stderr)
        return 2
    if args.seeds is None:
        return _run_single(simulations_run, base_config, args)
    return _run_sweep(simulations_run, base_config, args)


def _run_single(simulations_run: Any, config: Any, args: argparse.Namespace) -> int:
    result = simulations_run.run_one(config, args.wall_timeout)
    if args.json:
        simulations_run.print_json(result, sys.stdout)
        if not result.ok:
            print(f"replay: {simulations_run.replay_command(config)}", file=sys.stderr)
    else:
        print(simulations_run.format_result(result, config))
    if config.html_path:
        print(f"picture: {config.html_path}", file=sys.stderr if args.json else sys.stdout)
    return 0 if result.ok else 1


def _run_sweep(simulations_run: Any, base_config: Any, args: argparse.Namespace) -> int:
    seeds = list(range(args.start_seed, args.start_seed + args.seeds))
    progress = sys.stderr if args.json else sys.stdout

    def on_result(result: Any, config: Any) -> None:
        if args.json:
            simulations_run.print_json(result, sys.stdout)
        done = seeds.index(result.seed) + 1
        verdict = "ok" if result.ok else "FAILED"
        print(f"[{done}/{len(seeds)}] seed {result.seed} {verdict} {result.trace_sha256[:16]} "
              f"{result.simulated_seconds:.1f} sim s / {result.wall_seconds:.2f} wall s", file=progress, flush=True)
        if not result.ok:
            if not args.json:
                print(simulations_run.format_result(result, config), file=progress, flush=True)
            print(f"replay: {simulations_run.replay_command(config)}", file=progress, flush=True)
            if config.workload != "raft":
                print(f"picture: {simulations_run.replay_command(config)} --html seed-{result.seed}.html",
                      file=progress, flush=True)

    summary = simulations_run.sweep(
        base_config, seeds, on_result, stop_at_first_failure=args.stop_at_first_failure,
        wall_seconds_max=args.wall_timeout, jobs=args.jobs,
    )
    print(summary.format(), file=progress, flush=True)
    return 1 if summary.failed_seeds else 0
