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
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform

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
