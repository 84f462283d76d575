"""A node keeps its heap's pages: buffers of a megabyte allocated and freed per request (a produce frame and
the copy its batch is stamped in) come back from the heap instead of as fresh pages from the system."""

from __future__ import annotations

import subprocess
import sys

_SCRIPT = """
import os, resource, sys
from net.malloc import keep_heap_pages
if sys.argv[1] == "kept":
    assert keep_heap_pages()
source = memoryview(bytearray(os.urandom(1 << 20)))
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    frame = bytes(source[4:]); batch = bytearray(frame); del frame, batch
before = faults()
for _ in range(200):  # as per produce request: the frame copied out, its batch copied to be stamped
    frame = bytes(source[4:]); batch = bytearray(memoryview(frame)[10:]); del frame, batch
print(faults() - before)
"""


def _page_faults(mode: str) -> int:
    result = subprocess.run([sys.executable, "-c", _SCRIPT, mode], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return int(result.stdout)


def test_megabyte_buffers_come_back_from_the_heap_once_its_pages_are_kept():
    default, kept = _page_faults("default"), _page_faults("kept")
    # 200 rounds of two 1 MB buffers are 100,000 pages: by default nearly each is a fault, kept nearly none.
    assert kept < 2_000, (default, kept)
    assert default > 20 * max(kept, 100), (default, kept)
