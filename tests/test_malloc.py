"""``bot.malloc``: freed large blocks go back to the system, so resident memory follows use; an operator's own
malloc setting wins. Measured in child processes with glibc's own ``malloc``/``free``, the pattern the model's
runs make: a large block freed first (which raises glibc's dynamic threshold), then 2 MB buffers freed while
others between them stay alive."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

from bot.malloc import return_freed_memory

ROOT = Path(__file__).resolve().parents[1]
CHILD = r"""
import ctypes, ctypes.util, sys
from bot.malloc import return_freed_memory
if sys.argv[1] == "fixed":
    assert return_freed_memory({})
libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def rss():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS:")) // 1024
big = libc.malloc(8 << 20); ctypes.memset(big, 1, 8 << 20); libc.free(big)
before = rss()
blocks = []
for _ in range(60):
    b = libc.malloc(2 << 20); ctypes.memset(b, 1, 2 << 20); blocks.append(b)
for b in blocks[::2]:  # every other one: the freed ones lie between live ones, as in a busy process
    libc.free(b)
print(rss() - before - 30 * 2)  # what the 30 freed blocks still hold
"""

glibc = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")


def retained_mb(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    return int(out.stdout.strip())


@glibc
def test_freed_large_buffers_leave_the_process():
    kept_default, kept_fixed = retained_mb("default"), retained_mb("fixed")
    assert kept_default >= 40  # 60 MB of 2 MB buffers freed, most of it still resident
    assert kept_fixed <= 10  # each was its own mapping, unmapped on free


def test_an_operators_own_setting_wins():
    assert return_freed_memory({"MALLOC_MMAP_THRESHOLD_": "65536"}) is False


TRIM_CHILD = r"""
import ctypes, sys, time
from bot.malloc import trim_periodically
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def rss():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS:")) // 1024
blocks = []
for _ in range(2000):  # 64 KB blocks: below the mmap threshold, so they live in the heap
    b = libc.malloc(64 << 10); ctypes.memset(b, 1, 64 << 10); blocks.append(b)
for b in blocks[:-1:2]:  # every other one: holes between live blocks, which free() cannot give back
    libc.free(b)
before = rss()
if sys.argv[1] == "trim":
    assert trim_periodically(0.05, {}) is not None
time.sleep(0.5)
print(before - rss())  # MB given back while the process kept running
"""


@glibc
def test_free_pages_inside_the_heap_are_given_back_while_the_process_runs():
    def given_back(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", TRIM_CHILD, mode], cwd=ROOT, capture_output=True, text=True,
                             check=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
        return int(out.stdout.strip())

    assert given_back("none") <= 5  # 62 MB of holes stay resident without a trim
    assert given_back("trim") >= 40  # the periodic trim returns them


def test_an_operators_malloc_tuning_turns_the_trim_off():
    from bot.malloc import trim_periodically

    assert trim_periodically(60, {"MALLOC_TRIM_THRESHOLD_": "0"}) is None
    assert trim_periodically(60, {"MALLOC_MMAP_THRESHOLD_": "131072"}) is None
