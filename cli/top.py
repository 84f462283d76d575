"""`flotilla top`: a live view of the cluster from the nodes' metrics endpoints (rich), refreshed every second.

It scrapes every node's `metrics_port` (from `--config FILE`, or `--metrics HOST:PORT[,HOST:PORT]`) and shows
rates between two scrapes: per topic produce (records/s, bytes/s) and consume (bytes/s); per broker requests/s
and the interval's p99 produce latency (a bucket bound, from the latency histograms' bucket deltas); under-replicated
partitions; the quorum leader, term and each voter's lag; each group's total lag. `q` quits (exit 0);
`--once --json` prints one sample (two scrapes `--interval` seconds apart) and exits. A node that does not
answer is shown as down, not an error.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import sys
import time
import urllib.request
from collections import defaultdict
from typing import Any

from cli.support import EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, UsageError, fail, load_cluster_config

SCRAPE_TIMEOUT_S = 2.0
Samples = dict[str, list[tuple[dict[str, str], float]]]


def add_parser(subparsers) -> None:
    top = subparsers.add_parser("top", help="a live view of the cluster (from the nodes' metrics endpoints)")
    top.add_argument("--config", metavar="FILE", help="cluster config file: its nodes' metrics_port")
    top.add_argument("--metrics", metavar="HOST:PORT[,HOST:PORT]", help="metrics endpoints to scrape")
    top.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (default 1)")
    top.add_argument("--once", action="store_true", help="print one sample and exit")
    top.add_argument("--json", action="store_true", help="with --once: JSON instead of tables")
    top.set_defaults(run=run)


def endpoints(args: argparse.Namespace) -> dict[str, str]:
    """{node label: metrics URL}. Raises UsageError."""
    if args.metrics:
        found = {}
        for item in args.metrics.split(","):
            host, _, port = item.strip().rpartition(":")
            if not host or not port.isdigit():
                raise UsageError(f"--metrics {item!r}: expected HOST:PORT")
            found[item.strip()] = f"http://{host}:{port}/metrics"
        return found
    config = load_cluster_config(args)
    if config is None:
        raise UsageError("give --config FILE (nodes with metrics_port) or --metrics HOST:PORT[,HOST:PORT]")
    found = {str(n.id): f"http://{n.host}:{n.metrics_port}/metrics" for n in config.nodes if n.metrics_port}
    if not found:
        raise UsageError(f"{config.source}: no node has a metrics_port; add `metrics_port = 9404` to its [[nodes]]")
    return found


def scrape(url: str) -> Samples | None:
    from prometheus_client.parser import text_string_to_metric_families

    try:
        body = urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S).read().decode()
    except (OSError, ValueError):
        return None
    samples: Samples = defaultdict(list)
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            samples[sample.name].append((sample.labels, sample.value))
    return samples


def _sum(samples: Samples | None, name: str, **match: str) -> float:
    if samples is None:
        return 0.0
    return sum(v for labels, v in samples.get(name, []) if all(labels.get(k) == val for k, val in match.items()))


def _by(samples: Samples | None, name: str, key: str) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for labels, value in (samples or {}).get(name, []):
        out[labels.get(key, "")] += value
    return out


def _p99_ms(before: Samples | None, after: Samples | None) -> float | None:
    """The interval's p99 produce latency (ms, a bucket bound) from the histogram bucket deltas (fetches are
    left out: long polls wait by design)."""
    if before is None or after is None:
        return None
    delta: dict[float, float] = defaultdict(float)
    for sign, samples in ((-1, before), (1, after)):
        for labels, value in samples.get("flotilla_request_latency_seconds_bucket", []):
            if labels.get("api") == "produce":
                delta[float(labels["le"])] += sign * value
    count = delta.get(float("inf"), 0.0)
    if count <= 0:
        return None
    for bound in sorted(delta):
        if delta[bound] >= 0.99 * count:
            return bound * 1000
    return None


def summarize(before: dict[str, Samples | None], after: dict[str, Samples | None], seconds: float) -> dict[str, Any]:
    """One sample of the cluster: rates over `seconds` between the two scrapes of every node."""
    topics: dict[str, dict[str, float]] = defaultdict(lambda: {"produce_records_per_s": 0.0, "produce_bytes_per_s": 0.0,
                                                               "consume_bytes_per_s": 0.0})
    brokers, groups = [], defaultdict(float)
    leader, term, voters = None, None, {}
    under_replicated = 0
    for node, now in after.items():
        then = before.get(node)
        brokers.append({"node": node, "up": now is not None,
                        "requests_per_s": (_sum(now, "flotilla_requests_total") - _sum(then, "flotilla_requests_total"))
                        / seconds if now is not None and then is not None else 0.0,
                        "produce_p99_ms": _p99_ms(then, now),
                        "under_replicated_partitions": int(_sum(now, "flotilla_under_replicated_partitions")),
                        "leader_partitions": int(_sum(now, "flotilla_leader_partitions"))})
        if now is None or then is None:
            continue
        under_replicated += int(_sum(now, "flotilla_under_replicated_partitions"))
        for metric, key in (("flotilla_messages_in_total", "produce_records_per_s"),
                            ("flotilla_bytes_in_total", "produce_bytes_per_s"),
                            ("flotilla_bytes_out_total", "consume_bytes_per_s")):
            earlier = _by(then, metric, "topic")
            for topic, value in _by(now, metric, "topic").items():
                topics[topic][key] += max(0.0, value - earlier.get(topic, 0.0)) / seconds
        for group, lag in _by(now, "flotilla_group_lag", "group").items():
            groups[group] += lag
        if _sum(now, "flotilla_raft_is_leader") == 1:
            leader, term = int(_sum(now, "flotilla_raft_leader")), int(_sum(now, "flotilla_raft_term"))
            voters = {voter: int(lag) for voter, lag in _by(now, "flotilla_raft_voter_lag", "voter").items()}
    return {"seconds": seconds, "topics": dict(sorted(topics.items())), "brokers": brokers,
            "under_replicated_partitions": under_replicated,
            "quorum": {"leader": leader, "term": term, "voter_lag": voters},
            "groups": {g: int(lag) for g, lag in sorted(groups.items())}}


def scrape_all(urls: dict[str, str]) -> dict[str, Samples | None]:
    return {node: scrape(url) for node, url in urls.items()}


def render(sample: dict[str, Any]):
    from rich.console import Group
    from rich.table import Table

    quorum = sample["quorum"]
    head = Table.grid(padding=(0, 2))
    head.add_row(f"[bold]flotilla top[/]  quorum leader {quorum['leader'] if quorum['leader'] is not None else '-'}"
                 f"  term {quorum['term'] if quorum['term'] is not None else '-'}"
                 f"  voter lag {', '.join(f'{v}:{lag}' for v, lag in sorted(quorum['voter_lag'].items())) or '-'}"
                 f"  under-replicated {sample['under_replicated_partitions']}   (q quits)")
    topics = Table(title="topics", expand=True)
    for column in ("TOPIC", "PRODUCE REC/S", "PRODUCE MB/S", "CONSUME MB/S"):
        topics.add_column(column, justify="left" if column == "TOPIC" else "right")
    for topic, rates in sample["topics"].items():
        topics.add_row(topic, f"{rates['produce_records_per_s']:,.0f}", f"{rates['produce_bytes_per_s'] / 1e6:,.2f}",
                       f"{rates['consume_bytes_per_s'] / 1e6:,.2f}")
    brokers = Table(title="brokers", expand=True)
    for column in ("NODE", "STATUS", "REQUESTS/S", "PRODUCE P99 MS", "LEADERS", "UNDER-REPLICATED"):
        brokers.add_column(column, justify="left" if column in ("NODE", "STATUS") else "right")
    for broker in sample["brokers"]:
        p99 = broker["produce_p99_ms"]
        brokers.add_row(broker["node"], "up" if broker["up"] else "[red]down[/]", f"{broker['requests_per_s']:,.0f}",
                        "-" if p99 is None else ("inf" if p99 == float("inf") else f"{p99:g}"),
                        str(broker["leader_partitions"]), str(broker["under_replicated_partitions"]))
    groups = Table(title="groups", expand=True)
    groups.add_column("GROUP")
    groups.add_column("LAG", justify="right")
    for group, lag in sample["groups"].items():
        groups.add_row(group, f"{lag:,}")
    return Group(head, topics, brokers, groups)


def run(args: argparse.Namespace) -> int:
    try:
        urls = endpoints(args)
    except UsageError as error:
        return fail(str(error), EXIT_USAGE)
    if args.interval <= 0:
        return fail("--interval must be positive", EXIT_USAGE)
    before, started = scrape_all(urls), time.monotonic()
    if all(v is None for v in before.values()):
        return fail(f"no metrics endpoint answered ({', '.join(urls.values())})", EXIT_UNREACHABLE)
    if args.once:
        time.sleep(args.interval)
        sample = summarize(before, scrape_all(urls), time.monotonic() - started)
        if args.json:
            print(json.dumps(sample, indent=2))
        else:
            from rich.console import Console

            Console().print(render(sample))
        return EXIT_OK
    return _live(urls, before, started, args.interval)


def _live(urls: dict[str, str], before, started: float, interval: float) -> int:
    import termios
    import tty

    from rich.live import Live

    stdin = sys.stdin.fileno()
    saved = termios.tcgetattr(stdin) if os.isatty(stdin) else None
    try:
        if saved is not None:
            tty.setcbreak(stdin)
        with Live(render(summarize(before, before, 1.0)), auto_refresh=False, screen=True) as live:
            while True:
                readable, _, _ = select.select([stdin], [], [], interval)
                if readable and os.read(stdin, 1) in (b"q", b"Q"):
                    return EXIT_OK
                after, now = scrape_all(urls), time.monotonic()
                live.update(render(summarize(before, after, max(now - started, 1e-3))), refresh=True)
                before, started = after, now
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        if saved is not None:
            termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
