"""A picture of one simulation run: a self-contained HTML page with an SVG swimlane per node.

Theory of operation: a `Timeline` watches a run without touching it. It hears every trace line (faults,
node starts and crashes, partitions and heals) as one of the trace's listeners, and it samples the nodes' state
every `SAMPLE_INTERVAL_MS` of virtual time from the event loop's observer (called after each event; it
schedules nothing, so the run and its trace hash are the same with or without a picture). A sample is, per
node, whether it runs, the quorum leader and term it believes, and per partition of the workload's topic the
leader, ISR and high watermark as the partition's leader sees them. `write_html` draws:
- per node a lane: up (green) or down (grey), pauses (amber), and every fault as a marker with its trace line
  as tooltip; partitions and heals of the network on a lane of their own;
- a quorum lane coloured by the leader node, with the term written where it changes;
- per partition a lane coloured by its leader, the ISR size as text where it changes, and the high
  watermark as a line;
- every failed checker as a red line at the moment it was detected (the end of the run for the final
  checks), with its detail.
No script, no external fetch: the page is one file.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

SAMPLE_INTERVAL_MS = 100
NODE_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22")
FAULT_KINDS_DOWN = ("fault.crash", "fault.power_loss", "fault.crash_in_step", "fault.power_loss_in_step",
                    "fault.power_loss_all", "fault.controlled_shutdown")
LANE_HEIGHT = 26
LEFT = 150
WIDTH = 1400


@dataclass
class Sample:
    time_ms: int
    running: dict[int, bool]
    quorum: dict[int, tuple[int | None, int]]  # node -> (leader it believes, term)
    partitions: dict[int, tuple[int, tuple[int, ...], int]]  # partition -> (leader, isr, high watermark)


@dataclass
class Timeline:
    node_ids: list[int]
    topic: str
    partitions: int
    samples: list[Sample] = field(default_factory=list)
    events: list[tuple[int, str, str]] = field(default_factory=list)  # (time ms, kind, the trace line)
    _next_sample_ms: int = 0

    def on_trace(self, time_us: int, kind: str, fields: tuple[Any, ...]) -> None:
        if kind.startswith(("fault.", "node.", "net.down", "net.up", "net.heal", "net.partition", "net.isolate")):
            if kind in ("net.up", "net.down") and fields and int(fields[0]) not in self.node_ids:
                return  # clients coming and going
            self.events.append((time_us // 1000, kind, f"{time_us // 1000} ms {kind} {' '.join(map(str, fields))}"))

    def observe(self, now_us: int, sim: Any) -> None:
        now_ms = now_us // 1000
        if now_ms < self._next_sample_ms:
            return
        self._next_sample_ms = now_ms - now_ms % SAMPLE_INTERVAL_MS + SAMPLE_INTERVAL_MS
        running, quorum, partitions = {}, {}, {}
        for node_id in self.node_ids:
            process = sim.processes.get(node_id)
            running[node_id] = process is not None and process.alive
            if process is None:
                continue
            if process.raft is not None:  # observers (broker-only nodes) have no Raft of their own
                status = process.raft.status()
                quorum[node_id] = (status.leader_id, status.term)
            broker = process.broker
            for partition in range(self.partitions):
                hosted = broker.partitions.get((self.topic, partition)) if broker is not None else None
                if hosted is not None and hosted.replica.is_leader:
                    partitions[partition] = (node_id, tuple(hosted.replica.isr), hosted.replica.high_watermark)
        self.samples.append(Sample(now_ms, running, quorum, partitions))

    # ---- drawing -----------------------------------------------------------------------------------------

    def write_html(self, path: str, title: str, verdicts: list[Any], end_ms: int) -> None:
        with open(path, "w", encoding="utf-8") as out:
            out.write(self.html(title, verdicts, end_ms))

    def html(self, title: str, verdicts: list[Any], end_ms: int) -> str:
        end_ms = max(end_ms, 1, *(s.time_ms for s in self.samples[-1:]))
        lanes: list[str] = []
        body: list[str] = []
        y = 30

        def x(time_ms: float) -> float:
            return LEFT + (WIDTH - LEFT - 20) * time_ms / end_ms

        def lane(label: str) -> int:
            nonlocal y
            lanes.append(f'<text class="label" x="8" y="{y + 17}">{html.escape(label)}</text>'
                         f'<line class="lane" x1="{LEFT}" x2="{WIDTH - 20}" y1="{y + LANE_HEIGHT}" '
                         f'y2="{y + LANE_HEIGHT}"/>')
            top = y
            y += LANE_HEIGHT + 6
            return top

        def segments(values: list[tuple[int, Any]]):
            """(start ms, end ms, value) runs of equal values."""
            runs, start, current = [], None, None
            for time_ms, value in values:
                if start is None or value != current:
                    if start is not None:
                        runs.append((start, time_ms, current))
                    start, current = time_ms, value
            if start is not None:
                runs.append((start, end_ms, current))
            return runs

        for node_id in self.node_ids:
            top = lane(f"node {node_id}")
            for start, stop, up in segments([(s.time_ms, s.running.get(node_id, False)) for s in self.samples]):
                colour = "#4caf50" if up else "#bdbdbd"
                body.append(f'<rect x="{x(start):.1f}" y="{top + 6}" width="{max(x(stop) - x(start), 0.5):.1f}" '
                            f'height="{LANE_HEIGHT - 10}" fill="{colour}"><title>node {node_id} '
                            f'{"up" if up else "down"} {start}-{stop} ms</title></rect>')
            for time_ms, kind, line in self.events:
                if line.split()[3:4] == [str(node_id)] or (kind.startswith("node.") and f" {node_id} " in f"{line} "):
                    colour = "#d32f2f" if kind in FAULT_KINDS_DOWN else "#ff9800" if "pause" in kind else "#333"
                    body.append(f'<path class="fault" d="M{x(time_ms):.1f},{top + 2} l-4,-6 h8 z" fill="{colour}">'
                                f'<title>{html.escape(line)}</title></path>')
        top = lane("network")
        for time_ms, kind, line in self.events:
            if kind.startswith(("fault.partition", "fault.isolate", "fault.one_way", "net.heal", "fault.heal")):
                colour = "#2e7d32" if "heal" in kind else "#6a1b9a"
                body.append(f'<rect x="{x(time_ms) - 1:.1f}" y="{top + 6}" width="3" height="{LANE_HEIGHT - 10}" '
                            f'fill="{colour}"><title>{html.escape(line)}</title></rect>')
        top = lane("quorum leader")
        quorum = [(s.time_ms, _majority_view(s.quorum)) for s in self.samples]
        for start, stop, (leader, term) in segments(quorum):
            colour = NODE_COLOURS[(leader - 1) % len(NODE_COLOURS)] if leader is not None else "#eeeeee"
            body.append(f'<rect x="{x(start):.1f}" y="{top + 6}" width="{max(x(stop) - x(start), 0.5):.1f}" '
                        f'height="{LANE_HEIGHT - 10}" fill="{colour}"><title>leader {leader} term {term} '
                        f'{start}-{stop} ms</title></rect>')
            body.append(f'<text class="small" x="{x(start) + 2:.1f}" y="{top + 4}">t{term}</text>')
        for partition in range(self.partitions):
            top = lane(f"{self.topic}-{partition}")
            states = [(s.time_ms, s.partitions.get(partition, (None, (), None))[:2]) for s in self.samples]
            for start, stop, (leader, isr) in segments(states):
                colour = NODE_COLOURS[(leader - 1) % len(NODE_COLOURS)] if leader is not None else "#eeeeee"
                body.append(f'<rect x="{x(start):.1f}" y="{top + 6}" width="{max(x(stop) - x(start), 0.5):.1f}" '
                            f'height="{LANE_HEIGHT - 10}" fill="{colour}" opacity="0.55"><title>leader {leader} '
                            f'ISR {list(isr)} {start}-{stop} ms</title></rect>')
                body.append(f'<text class="small" x="{x(start) + 2:.1f}" y="{top + 4}">isr {len(isr)}</text>')
            marks = [(s.time_ms, s.partitions[partition][2]) for s in self.samples if partition in s.partitions]
            top_hw = max((hw for _, hw in marks), default=0) or 1
            points = " ".join(f"{x(t):.1f},{top + LANE_HEIGHT - 4 - (LANE_HEIGHT - 10) * hw / top_hw:.1f}"
                              for t, hw in marks)
            if points:
                body.append(f'<polyline class="hw" points="{points}"><title>high watermark (max {top_hw})'
                            f'</title></polyline>')
        failures = [v for v in verdicts if not v.ok]
        for verdict in failures:
            body.append(f'<line class="violation" x1="{x(end_ms):.1f}" x2="{x(end_ms):.1f}" y1="20" y2="{y}">'
                        f'<title>{html.escape(verdict.name)}: {html.escape(verdict.detail)}</title></line>')
        axis = "".join(f'<text class="small" x="{x(t):.1f}" y="{y + 16}">{t / 1000:g} s</text>'
                       for t in range(0, end_ms + 1, max(1000, end_ms // 10 // 1000 * 1000)))
        verdict_rows = "".join(
            f'<tr class="{"fail" if not v.ok else "pass"}"><td>{html.escape(v.name)}</td>'
            f'<td>{"FAIL" if not v.ok else "pass"}</td><td>{html.escape(v.detail)}</td></tr>' for v in verdicts)
        legend = " ".join(f'<span style="color:{NODE_COLOURS[(n - 1) % len(NODE_COLOURS)]}">&#9632; node {n}</span>'
                          for n in self.node_ids)
        return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 16px; }}
.label {{ font-size: 13px; }} .small {{ font-size: 10px; fill: #333; }}
.lane {{ stroke: #e0e0e0; }} .hw {{ fill: none; stroke: #000; stroke-width: 1.2; }}
.violation {{ stroke: #d50000; stroke-width: 3; }}
table {{ border-collapse: collapse; margin-top: 12px; }} td {{ border: 1px solid #ccc; padding: 3px 8px; }}
tr.fail td {{ background: #ffebee; color: #b71c1c; }}
</style></head><body>
<h2>{html.escape(title)}</h2>
<p>{legend} &nbsp; lanes: node up (green) / down (grey), faults &#9660;; quorum leader and term; each partition's
leader, ISR size and high watermark (line). {"<b style='color:#d50000'>Red line: a checker failed.</b>" if failures else ""}</p>
<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{y + 30}" viewBox="0 0 {WIDTH} {y + 30}">
{''.join(lanes)}{''.join(body)}{axis}
</svg>
<table><tr><td><b>checker</b></td><td><b>verdict</b></td><td><b>detail</b></td></tr>{verdict_rows}</table>
</body></html>
"""


def _majority_view(quorum: dict[int, tuple[int | None, int]]) -> tuple[int | None, int]:
    """The leader and term the running nodes agree on most (the highest term first)."""
    if not quorum:
        return None, 0
    votes: dict[tuple[int | None, int], int] = {}
    for view in quorum.values():
        votes[view] = votes.get(view, 0) + 1
    return max(votes, key=lambda view: (view[1], votes[view], view[0] is not None))
