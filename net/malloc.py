"""The C allocator's thresholds for a node process (glibc).

A broker allocates and frees buffers of about a megabyte per request: a produce request's frame and the copy
its batch is stamped in, a follower's fetch response. glibc serves an allocation above its mmap threshold
(128 KiB at start, raised as such blocks are freed) with mmap, and gives free memory at the top of its heap
back to the system above its trim threshold; with blocks of that size coming and going, the heap was given
back and taken again around every request, and every page of every buffer was a fresh page fault: 1 MB
produce requests of 1 KiB records cost a node about 1.2 s of CPU per 250,000 records, 0.4 s once the heap
keeps its pages. The thresholds are fixed at the highest values glibc's own adjustment reaches on 64-bit
(DEFAULT_MMAP_THRESHOLD_MAX, and twice that for trimming), where it would otherwise arrive only after the
right sequence of frees: blocks up to 32 MiB (a TLS fetch response's file slices read into memory) come from
the heap, and at most 64 MiB of free heap is kept.
"""

from __future__ import annotations

import ctypes
import ctypes.util

MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 2 * MMAP_THRESHOLD_BYTES  # glibc's own ratio when it moves the threshold itself
_M_TRIM_THRESHOLD = -1  # malloc.h
_M_MMAP_THRESHOLD = -3


def keep_heap_pages() -> bool:
    """Set the thresholds for this process; False where the C library has no mallopt (not glibc)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
