"""``python -m bot migrate-storage``: copy a SQLite data directory into an empty PostgreSQL database.

Conversations (each thread's latest checkpoint: pruning keeps nothing older), every item of the memory
store (memories, their history, extraction watermarks), and every row of the bot's own tables (pending
turns with their IDs and the inbox epoch, so nothing is learned twice; preferences, usage, the embeddings
cache, unfinished erasures with what they are about, servers still to sweep, where each message's text
reached, server settings). LangGraph's data goes through LangGraph's own interfaces;
the bot's rows through each backend's export/import. The SQLite files are opened as the writer, so a bot
still running on them makes this stop with one line; they are left as they were.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.store.base import BaseStore, PutOp

from bot.engine.stores import StorageUnavailable
from bot.settings import Settings, StorageSection

log = logging.getLogger(__name__)
PAGE = 500


@dataclass(frozen=True)
class Migrated:
    """What a migration copied, counted for the one line ``migrate-storage`` prints."""

    threads: int
    items: int
    pending_turns: int
    rows: int


async def _copy_store(source: BaseStore, target: BaseStore) -> int:
    copied, offset = 0, 0
    namespaces: list[tuple[str, ...]] = []
    while True:
        page = await source.alist_namespaces(limit=PAGE, offset=offset)
        namespaces += page
        if len(page) < PAGE:
            break
        offset += PAGE
    for ns in namespaces:
        offset = 0
        while True:
            items = await source.asearch(ns, limit=PAGE, offset=offset)
            items = [i for i in items if tuple(i.namespace) == tuple(ns)]  # asearch takes prefixes
            if items:
                await target.abatch([PutOp(tuple(i.namespace), i.key, i.value, index=False) for i in items])
                copied += len(items)
            if len(items) < PAGE:
                break
            offset += PAGE
    return copied


async def _copy_threads(source: BaseCheckpointSaver, target: BaseCheckpointSaver) -> int:
    threads: dict[str, None] = {}
    async for tup in source.alist(None):
        threads[str(tup.config["configurable"]["thread_id"])] = None
    for thread_id in threads:
        tup = await source.aget_tuple({"configurable": {"thread_id": thread_id}})
        if tup is None:
            continue
        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": tup.config["configurable"].get("checkpoint_ns", "")}}
        saved = await target.aput(config, tup.checkpoint, tup.metadata, dict(tup.checkpoint["channel_versions"]))
        by_task: dict[str, list] = {}
        for task_id, channel, value in tup.pending_writes or []:
            by_task.setdefault(task_id, []).append((channel, value))
        for task_id, writes in by_task.items():
            await target.aput_writes(saved, writes, task_id)
    return len(threads)


async def migrate_sqlite_to_postgres(settings: Settings) -> Migrated:
    """Copy ``settings.bot.data_dir`` (SQLite) into the database at ``DATABASE_URL``; it must hold no data."""
    from bot.storage.postgres import open_postgres
    from bot.storage.postgres.import_rows import holds_data, import_rows
    from bot.storage.sqlite import open_sqlite
    from bot.storage.sqlite.export import export_rows

    if not (settings.bot.data_dir / "ledger.sqlite").exists():
        raise StorageUnavailable(f"no SQLite data directory at {settings.bot.data_dir} (no ledger.sqlite)")
    sqlite_settings = settings.model_copy(update={"storage": replace_backend(settings, "sqlite")})
    async with open_sqlite(sqlite_settings) as src, open_postgres(settings) as dst:
        db = dst.inbox._db  # the backend's own connection helper: this module is part of storage
        if await holds_data(db):
            raise StorageUnavailable("the PostgreSQL database already holds bot data: migrate into an empty database")
        rows = await export_rows(src.inbox._db)
        threads = await _copy_threads(src.checkpointer, dst.checkpointer)
        items = await _copy_store(src.store, dst.store)
        await import_rows(db, rows)  # last: the epoch makes the copied watermarks count
    pending = sum(1 for r in rows["inbox"] if not r["extracted"])
    return Migrated(threads, items, pending, sum(len(v) for k, v in rows.items() if k != "epoch"))


def replace_backend(settings: Settings, backend: str) -> StorageSection:
    """The ``[storage]`` section with another backend, to open the other side of a migration with the same settings."""
    return settings.storage.model_copy(update={"backend": backend})

