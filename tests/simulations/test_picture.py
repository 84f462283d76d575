"""`flotilla simulate --seed N --html FILE`: the picture of a run changes nothing of the run, is one
self-contained page, and shows the swimlanes and the violation of a planted-bug seed in a real browser."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib

import pytest

from simulations.run import RunConfig, run_one
from tests.simulations.test_cluster_sim import HW_BUG_FAULTS, HW_BUG_SEED, TEETH_DURATION_S


def planted(tmp_path, html: bool) -> tuple:
    path = str(tmp_path / "seed.html") if html else None
    config = RunConfig(seed=HW_BUG_SEED, duration_s=TEETH_DURATION_S, faults=HW_BUG_FAULTS, workload="cluster",
                       bugs_live=frozenset({"hw_from_leader_leo"}), html_path=path)
    return run_one(config), path


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    return planted(tmp_path_factory.mktemp("picture"), html=True)


def test_drawing_a_run_changes_nothing_of_it(drawn, tmp_path):
    plain, _ = planted(tmp_path, html=False)
    result, _ = drawn
    assert result.trace_sha256 == plain.trace_sha256
    assert [(v.name, v.ok, v.detail) for v in result.checkers] == [(v.name, v.ok, v.detail) for v in plain.checkers]


def test_the_page_is_self_contained_with_a_lane_per_node_and_the_violation(drawn):
    result, path = drawn
    page = open(path, encoding="utf-8").read()
    assert "<script" not in page and " src=" not in page and "<link" not in page
    assert set(re.findall(r"https?://[^\"' ]+", page)) <= {"http://www.w3.org/2000/svg"}
    for lane in ("node 1", "node 2", "node 3", "network", "quorum leader", "sim-0", "sim-1", "sim-2"):
        assert f">{lane}</text>" in page, lane
    failed = [v for v in result.checkers if not v.ok]
    assert failed and page.count('class="violation"') == len(failed)
    for verdict in failed:
        assert verdict.name in page
    assert "fault.crash" in page  # the faults of the run, as tooltips on the node lanes


def red_pixels(png: bytes) -> int:
    """Strongly red pixels of an 8-bit RGB(A) PNG (a minimal decoder: enough for Chromium's screenshots)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    position, chunks, width = 8, b"", 0
    while position < len(png):
        length, kind = struct.unpack(">I4s", png[position:position + 8])
        data = png[position + 8:position + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", data[:10])
            assert depth == 8 and colour in (2, 6), (depth, colour)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            chunks += data
        position += 12 + length
    raw, stride, previous, count = zlib.decompress(chunks), width * channels, bytearray(width * channels), 0
    for row in range(height):
        kind, line = raw[row * (stride + 1)], bytearray(raw[row * (stride + 1) + 1:(row + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        count += sum(1 for i in range(0, stride, channels) if line[i] > 200 and line[i + 1] < 40 and line[i + 2] < 40)
        previous = line
    return count


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed")
def test_headless_chromium_renders_the_swimlanes_and_the_red_violation(drawn, tmp_path):
    _, path = drawn
    screenshot = tmp_path / "seed.png"
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={screenshot}", "--window-size=1450,700", f"file://{os.path.abspath(path)}"],
                   capture_output=True, timeout=120, check=True)
    png = screenshot.read_bytes()
    assert red_pixels(png) > 300  # the violation line (3 px wide, the height of the lanes) and the FAIL rows
    # The same page without its violation line and failed rows has (almost) no red: the red is the violation.
    page = open(path, encoding="utf-8").read()
    calm = re.sub(r'<line class="violation".*?</line>', "", page)
    calm = calm.replace('class="fail"', 'class="pass"').replace("<b style='color:#d50000'>", "<b>")
    (tmp_path / "calm.html").write_text(calm)
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={tmp_path / 'calm.png'}", "--window-size=1450,700",
                    f"file://{tmp_path / 'calm.html'}"], capture_output=True, timeout=120, check=True)
    assert red_pixels((tmp_path / "calm.png").read_bytes()) < red_pixels(png) // 4
