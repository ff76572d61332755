"""One writer per SQLite data directory: an exclusive lock file held for the life of the process.

Two processes writing the same files break the guarantees (each would flush the same pending turns and
store every fact twice; a shell wipe would be undone by the other's extraction in flight; the prefs
cache would go stale). The bot, the console and a shell wipe take the lock; read-only shell commands do
not need it (SQLite's WAL lets them read beside a writer). ``flock`` is released by the kernel when the
process ends, however it ends (SIGKILL included), so a crash never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from bot.engine.stores import StorageUnavailable
from bot.storage.bundle import StorageBusy

LOCK_FILE = "writer.lock"


@contextmanager
def writer_lock(data_dir: Path) -> Iterator[None]:
    """Hold the data directory's writer lock, or raise :class:`StorageBusy` naming the holder."""
    path = data_dir / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:  # a data directory owned by someone else (a bind mount): one line, not a traceback
        raise StorageUnavailable(f"cannot use bot.data_dir {data_dir}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise StorageBusy(f"another process (pid {holder}) is already using the data directory {data_dir}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock

