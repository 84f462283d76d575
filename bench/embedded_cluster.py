"""Time from `EmbeddedCluster()` (the pytest fixture's cluster) to a ready single node, and to a ready
three-node cluster: median and spread over --repeats starts. Baseline, same run: starting a Python
interpreter that imports the node's modules and exits (the floor any node start pays).

    python bench/embedded_cluster.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from flotilla_testing import EmbeddedCluster  # noqa: E402


def baseline_seconds() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import net.node, cli.main"], check=True,
                   cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return time.perf_counter() - started


def ready_seconds(nodes: int) -> float:
    started = time.perf_counter()
    with EmbeddedCluster(nodes=nodes):
        elapsed = time.perf_counter() - started
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    baseline = statistics.median(baseline_seconds() for _ in range(args.repeats))
    print(f"RESULT baseline.python_import_node_modules {baseline:.3f} s", flush=True)
    for nodes, target in ((1, "target <= 2 s"), (3, "")):
        runs = [ready_seconds(nodes) for _ in range(args.repeats)]
        median = statistics.median(runs)
        print(f"RESULT embedded_cluster.{nodes}node.ready {median:.3f} s ratio_to_baseline={median / baseline:.2f} "
              f"min={min(runs):.3f} max={max(runs):.3f} runs={args.repeats} {target}".rstrip(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
