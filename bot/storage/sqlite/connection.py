"""SQLite connections: how every file is opened, and one transaction helper for the bot's own tables."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

import aiosqlite

from bot.storage.shielding import run_through


async def connect(path: Path, *, autocommit: bool = True) -> aiosqlite.Connection:
    """Open a SQLite file in WAL mode with incremental vacuum and a busy timeout.

    ``auto_vacuum`` only takes effect before the first table exists, so it is set first on new files;
    WAL lets the store, the checkpointer and the ledger read while another writes; the busy timeout turns
    writer contention into a short wait instead of "database is locked"; ``synchronous=NORMAL`` in WAL
    mode loses no committed transaction when the process dies (only on power loss). A cancel while opening
    waits for the open to end and closes what it opened: each connection runs a thread, and one left behind
    keeps the process from exiting.
    """
    opening, cancelled = await run_through(_configured(path, autocommit))
    if cancelled:  # an open connection is a thread of its own: a cancel must not leave it running
        if not opening.cancelled() and opening.exception() is None:
            await run_through(opening.result().close())
        raise asyncio.CancelledError
    return opening.result()


async def _configured(path: Path, autocommit: bool) -> aiosqlite.Connection:
    """Open and set up one connection; closed again if setting it up fails."""
    conn = await aiosqlite.connect(path, isolation_level=None if autocommit else "DEFERRED", timeout=30.0)
    try:
        await _pragmas(conn)
    except BaseException:
        await run_through(conn.close())
        raise
    return conn


async def _pragmas(conn: aiosqlite.Connection) -> None:
    await conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
    await conn.execute("PRAGMA journal_mode=WAL")
    await conn.execute("PRAGMA synchronous=NORMAL")
    await conn.execute("PRAGMA busy_timeout=30000")
    # Deleted content is overwritten with zeros, so erasing a person leaves their words in no free page.
    await conn.execute("PRAGMA secure_delete=ON")
    # Checkpoint the WAL every ~256 KiB of changes and truncate it back to 256 KiB afterwards: without a
    # size limit the -wal file stays at its high-water mark (4 MiB by default) for the life of the process.
    await conn.execute("PRAGMA wal_autocheckpoint=64")
    await conn.execute("PRAGMA journal_size_limit=262144")


class LedgerDb:
    """The ledger file's one autocommit connection, shared by the bot's own stores, with one lock.

    Reads go straight to the connection; writes run in :meth:`tx`. Public writers are wrapped in
    :func:`bot.storage.shielding.shielded`, so a caller that is cancelled (a reply deadline) cannot leave the connection inside
    an open transaction.
    """

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self.conn = conn
        self.lock = asyncio.Lock()

    @asynccontextmanager
    async def tx(self) -> AsyncIterator[aiosqlite.Connection]:
        """One immediate transaction: all of it or none of it."""
        async with self.lock:
            began = False
            try:
                await self.conn.execute("BEGIN IMMEDIATE")
                began = True
                yield self.conn
            except BaseException:
                if began or self.conn.in_transaction:
                    await self.conn.execute("ROLLBACK")
                raise
            await self.conn.execute("COMMIT")
