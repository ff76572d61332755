"""Open and close the databases in one place.

The graph and the cogs only ever see a :class:`Storage`: a LangGraph checkpointer (conversation state per
thread), a LangGraph store (memories per person) and a :class:`~bot.engine.ledger.Ledger` (the bot's own
small tables: pending memory work, usage, preferences). Choosing the backend happens here only, keyed by
``storage.backend`` in config, so a server database (LangGraph's Postgres saver and store) can be added
as one more branch without touching the graph or the cogs.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator

import aiosqlite
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.store.base import BaseStore
from langgraph.store.sqlite.aio import AsyncSqliteStore

from bot.engine.ledger import Ledger
from bot.settings import Settings

log = logging.getLogger(__name__)

CONVERSATIONS_FILE = "conversations.sqlite"
MEMORIES_FILE = "memories.sqlite"
LEDGER_FILE = "ledger.sqlite"  # its own file: no writer contention with the store (busy waits cost up to 100 ms)


@dataclass
class Storage:
    """Everything persistent, opened once at start-up and closed on shutdown."""

    checkpointer: BaseCheckpointSaver
    store: BaseStore
    ledger: Ledger
    data_dir: Path
    guild_settings: object = None

    async def compact(self) -> None:
        """Flush the write-ahead logs into the databases and truncate them, reclaiming free pages.

        Used after an erasure: the WAL files still hold page images written before the delete.
        """
        if isinstance(self.checkpointer, AsyncSqliteSaver):
            async with self.checkpointer.lock:
                await _truncate_wal(self.checkpointer.conn)
        if isinstance(self.store, AsyncSqliteStore):
            async with self.store.lock:
                await _truncate_wal(self.store.conn)
        await self.ledger.checkpoint()

    async def prune_thread(self, thread_id: str) -> None:
        """Drop a thread's superseded checkpoints (see :func:`prune_sqlite_thread`)."""
        if isinstance(self.checkpointer, AsyncSqliteSaver):
            await prune_sqlite_thread(self.checkpointer, thread_id)


VACUUM_FREE_PAGES = 256


async def _truncate_wal(conn: aiosqlite.Connection) -> None:
    await conn.commit()
    await conn.execute("PRAGMA incremental_vacuum")
    await conn.commit()
    await conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


async def prune_sqlite_thread(saver: AsyncSqliteSaver, thread_id: str) -> None:
    """Keep only a thread's latest checkpoint and its writes; reclaim free pages now and then.

    Nothing reads old checkpoints (no time travel, no human-in-the-loop resume), and every checkpoint
    holds the whole state, so without this the file grows with every turn forever. Checkpoint IDs are
    time-ordered, so the latest is the maximum. Free pages go back to the file system through incremental
    vacuum once enough have piled up, so one thread's footprint stops growing.
    """
    async with saver.lock:
        conn = saver.conn
        cur = await conn.execute(
            "SELECT MAX(checkpoint_id) FROM checkpoints WHERE thread_id=? AND checkpoint_ns=''", (thread_id,)
        )
        row = await cur.fetchone()
        if not row or row[0] is None:
            return
        latest = row[0]
        await conn.execute("DELETE FROM checkpoints WHERE thread_id=? AND checkpoint_id<>?", (thread_id, latest))
        await conn.execute("DELETE FROM writes WHERE thread_id=? AND checkpoint_id<>?", (thread_id, latest))
        await conn.commit()
        cur = await conn.execute("PRAGMA freelist_count")
        (free,) = await cur.fetchone()
        if free >= VACUUM_FREE_PAGES:
            await conn.execute("PRAGMA incremental_vacuum")
            await conn.commit()


async def _connect(path: Path, *, autocommit: bool = True) -> aiosqlite.Connection:
    """Open a SQLite file in WAL mode with incremental vacuum and a busy timeout.

    ``auto_vacuum`` only takes effect before the first table exists, so it is set first on new files;
    WAL lets the store, the checkpointer and the ledger read while another writes; the busy timeout turns
    writer contention into a short wait instead of "database is locked"; ``synchronous=NORMAL`` in WAL
    mode loses no committed transaction when the process dies (only on power loss).
    """
    conn = await aiosqlite.connect(path, isolation_level=None if autocommit else "DEFERRED", timeout=30.0)
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
    return conn


@asynccontextmanager
async def open_storage(settings: Settings) -> AsyncIterator[Storage]:
    """Open the configured backend; close every connection on exit, even after an error."""
    if settings.storage.backend != "sqlite":  # pragma: no cover - guarded by the settings Literal
        raise ValueError(f"unsupported storage backend {settings.storage.backend!r}")
    data_dir = settings.bot.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    # The saver commits explicitly (as its own from_conn_string does), so it gets a deferred connection;
    # the store and the ledger issue their own BEGIN/COMMIT and need autocommit.
    conv_conn = await _connect(data_dir / CONVERSATIONS_FILE, autocommit=False)
    mem_conn = await _connect(data_dir / MEMORIES_FILE)
    ledger_conn = await _connect(data_dir / LEDGER_FILE)
    try:
        checkpointer = AsyncSqliteSaver(conv_conn)
        await checkpointer.setup()
        store = AsyncSqliteStore(mem_conn)
        await store.setup()
        ledger = Ledger(ledger_conn)
        await ledger.setup()
        from bot._tmp_sqlite_guild_settings import SCHEMA, LedgerDb, SqliteGuildSettings

        await ledger_conn.executescript(SCHEMA)
        log.info("storage open in %s", data_dir)
        yield Storage(checkpointer=checkpointer, store=store, ledger=ledger, data_dir=data_dir,
                      guild_settings=SqliteGuildSettings(LedgerDb(ledger)))
    finally:
        for conn in (ledger_conn, mem_conn, conv_conn):
            try:
                await conn.close()
            except Exception:  # noqa: BLE001 - closing must try every connection
                log.exception("closing a database failed")
        log.info("storage closed")
