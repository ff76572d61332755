"""The embedded default backend: three SQLite files in ``bot.data_dir``, one process.

``conversations.sqlite`` (LangGraph's ``AsyncSqliteSaver``), ``memories.sqlite`` (LangGraph's
``AsyncSqliteStore``: memories, history, extraction watermarks) and ``ledger.sqlite`` (the bot's own
tables: inbox, usage, preferences, embeddings cache). The ledger has its own file so its writes never
wait for the store's (SQLite busy waits cost up to 100 ms).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from contextlib import asynccontextmanager, nullcontext
from pathlib import Path
from typing import AsyncIterator

from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from bot.engine.stores import StorageUnavailable
from bot.settings import Settings
from bot.storage.bundle import OpenStorage
from bot.storage.shielding import run_through, to_the_end
from bot.storage.sqlite import schema
from bot.storage.sqlite.connection import LedgerDb, connect
from bot.storage.sqlite.guild_settings import SqliteGuildSettings
from bot.storage.sqlite.erasures import SqliteErasures
from bot.storage.sqlite.reach import SqliteReach
from bot.storage.sqlite.store import TransactionalSqliteStore
from bot.storage.sqlite.inbox import SqliteInbox
from bot.storage.sqlite.lock import writer_lock
from bot.storage.sqlite.maintenance import SqliteMaintenance
from bot.storage.sqlite.prefs import SqlitePrefs
from bot.storage.sqlite.removed_guilds import SqliteRemovedGuilds
from bot.storage.sqlite.usage import SqliteUsage
from bot.storage.sqlite.vectors import SqliteVectors

log = logging.getLogger(__name__)

CONVERSATIONS_FILE = "conversations.sqlite"
MEMORIES_FILE = "memories.sqlite"
LEDGER_FILE = "ledger.sqlite"


@asynccontextmanager
async def open_sqlite(settings: Settings, *, writer: bool = True, existing: bool = False) -> AsyncIterator[OpenStorage]:
    """Open (creating if needed, unless ``existing``) the three files; close every connection on exit, even
    after an error.

    A writer holds the data directory's lock (``lock.py``) for as long as the files are open.
    """
    data_dir = settings.bot.data_dir
    if existing and not (data_dir / LEDGER_FILE).exists():  # a mistyped data_dir: not a new, empty database
        raise StorageUnavailable(f"no SQLite data directory at {data_dir} (no {LEDGER_FILE})")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file in the way, no permission, a read-only disk: one line, not a traceback
        raise StorageUnavailable(f"cannot use bot.data_dir {data_dir}: {exc.strerror or exc}") from None
    with writer_lock(data_dir) if writer else nullcontext():
        async with _open_files(settings, data_dir) as storage:
            yield storage


@asynccontextmanager
async def _open_files(settings: Settings, data_dir: Path) -> AsyncIterator[OpenStorage]:
    # The saver commits explicitly (as its own from_conn_string does), so it gets a deferred connection;
    # the store and the ledger issue their own BEGIN/COMMIT and need autocommit.
    opened: list = []  # closed on the way out, however far opening got (a cancel included)
    try:
        try:
            conv_conn = await connect(data_dir / CONVERSATIONS_FILE, autocommit=False)
            opened.append(conv_conn)
            mem_conn = await connect(data_dir / MEMORIES_FILE)
            opened.append(mem_conn)
            ledger_conn = await connect(data_dir / LEDGER_FILE)
            opened.append(ledger_conn)
            checkpointer = AsyncSqliteSaver(conv_conn)
            await to_the_end(checkpointer.setup())  # migrations are not cut off half-way (see ``to_the_end``)
            store = TransactionalSqliteStore(mem_conn)  # batches all-or-nothing (see store.py)
            await to_the_end(store.setup())
            ledger = LedgerDb(ledger_conn)
            epoch = await to_the_end(schema.setup(ledger))
            reach_since = await schema.reach_since(ledger)
        except (sqlite3.Error, OSError) as exc:  # not a database, no permission, a full disk: one line
            raise StorageUnavailable(f"cannot open the SQLite files in {data_dir}: {exc}") from None
        log.info("storage open in %s", data_dir)
        yield OpenStorage(
            backend="sqlite",
            checkpointer=checkpointer,
            store=store,
            inbox=SqliteInbox(ledger, epoch),
            prefs=SqlitePrefs(ledger),
            usage=SqliteUsage(ledger),
            vectors=SqliteVectors(ledger),
            maintenance=SqliteMaintenance(checkpointer, store, ledger),
            removed_guilds=SqliteRemovedGuilds(ledger),
            guild_settings=SqliteGuildSettings(ledger),
            erasures=SqliteErasures(ledger),
            reach=SqliteReach(ledger, reach_since),
        )
    finally:
        cancelled = False
        for conn in reversed(opened):
            closing, cut = await run_through(conn.close())  # a second cancel must not leave a thread behind
            cancelled = cancelled or cut
            if not closing.cancelled() and closing.exception() is not None:
                log.error("closing a database failed", exc_info=closing.exception())
        log.info("storage closed")
        if cancelled:
            raise asyncio.CancelledError
