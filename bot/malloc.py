"""Give freed large buffers back to the system: the process's resident memory follows what it uses.

The embedded embedding model (int8 weights on ONNX Runtime, ``bot.engine.recall.minilm``) turns its weights
into fp32 for every run: about 90 MB of buffers of 1-3 MB each, freed when the run ends. glibc's malloc
serves blocks that large with ``mmap`` and unmaps them on free, *until* the first such block is freed: then
it raises its threshold (up to 32 MB) and serves the next ones from its heaps, which keep the memory. After
a few hundred replies the bot held about 390 MB resident for what needs about 200 (``benchmarks/footprint.py``
on 2026-12-03: 396 MB after 1,000 replies across 100 channels without this, 282 MB with it; peak 491 against
397 MB). Fixing the threshold at glibc's default (128 KiB) turns that adjustment off.

The cost is one ``mmap``/``munmap`` pair per large block (a few per model run, microseconds each, beside a
run of tens of milliseconds). An operator's own ``MALLOC_MMAP_THRESHOLD_`` in the environment wins: this does
nothing then. On a C library other than glibc (musl, macOS) it does nothing.

Since the graph runs on int8 kernels (``bot.engine.recall.int8_kernels``) the model no longer makes those
90 MB a run, but other large buffers still come and go (a step's activations, SQLite's and the reply path's
blocks in worker threads). What stays behind is free memory *inside* glibc's heaps, between live blocks,
which ``free`` never returns: 32 MB after the footprint run's 1,000 replies (315 MB resident, 283 MB after
one ``malloc_trim``). :func:`trim_periodically` gives it back every few seconds from a daemon thread:
``malloc_trim(0)`` releases the free whole pages of every arena (``madvise``), a few milliseconds of work.
An operator's own ``MALLOC_TRIM_THRESHOLD_`` or ``MALLOC_MMAP_THRESHOLD_`` turns it off too.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform
import threading

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number (malloc.h)
THRESHOLD = 128 * 1024  # glibc's own default, made fixed


def return_freed_memory(environ: dict[str, str] | None = None) -> bool:
    """Fix glibc's mmap threshold (see the module docstring); True when it was set here."""
    env = os.environ if environ is None else environ
    if "MALLOC_MMAP_THRESHOLD_" in env:
        return False  # the operator chose
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        # the process's own symbols: libc is already loaded (find_library would run ldconfig at start-up)
        done = bool(ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, THRESHOLD))
    except (OSError, AttributeError) as exc:  # no mallopt: nothing to tune
        log.debug("mallopt unavailable: %s", exc)
        return False
    log.debug("malloc: large blocks are mapped and returned on free (threshold %d bytes)", THRESHOLD)
    return done


TRIM_SECONDS = 10.0  # often enough that what an operator reads is what the bot uses; each trim takes milliseconds


def _glibc() -> ctypes.CDLL | None:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(None)  # the process's own symbols: libc is already loaded
        libc.malloc_trim.argtypes = [ctypes.c_size_t]  # present on glibc; looked up here so a missing one is known at start
        libc.malloc_trim.restype = ctypes.c_int
        return libc
    except (OSError, AttributeError) as exc:
        log.debug("malloc_trim unavailable: %s", exc)
        return None


def trim_periodically(interval: float = TRIM_SECONDS, environ: dict[str, str] | None = None) -> threading.Event | None:
    """Start a daemon thread that calls ``malloc_trim(0)`` every ``interval`` seconds (module docstring).

    Returns the event that stops it, or None when it does not run (not glibc, or the operator tuned malloc).
    A daemon thread, not an asyncio task: the call blocks for its milliseconds and needs no event loop, and
    the process's exit does not wait for it.
    """
    env = os.environ if environ is None else environ
    if "MALLOC_TRIM_THRESHOLD_" in env or "MALLOC_MMAP_THRESHOLD_" in env:
        return None
    libc = _glibc()
    if libc is None:
        return None
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(interval):
            libc.malloc_trim(0)

    threading.Thread(target=run, name="malloc-trim", daemon=True).start()
    return stop
