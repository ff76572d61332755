"""Open and close the databases in one place.

The engine and the cogs only ever see a :class:`~bot.engine.stores.Storage`: LangGraph's checkpointer
(conversation state per thread) and store (memories per person), and the engine's own small stores
(learning inbox, preferences, usage, vector cache, maintenance). Each backend lives in its own folder and
implements the interfaces in ``bot/engine/stores/``; ``storage.backend`` in config picks one here.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator

from bot.settings import Settings
from bot.storage.bundle import OpenStorage, StorageBusy

__all__ = ["OpenStorage", "StorageBusy", "open_storage"]


@asynccontextmanager
async def open_storage(settings: Settings, *, writer: bool = True, existing: bool = False) -> AsyncIterator[OpenStorage]:
    """Open the configured backend; close every connection on exit, even after an error.

    ``writer`` False is for read-only commands beside a running bot: an embedded backend (SQLite) lets
    one writer process at a time open its files and raises :class:`StorageBusy` for a second one.
    ``existing``: the shell's commands on what is stored (``stats``, ``memories``): a SQLite data
    directory that is not there is an error, not an empty one created to report zeros.
    """
    backend = settings.storage.backend
    if backend == "sqlite":
        from bot.storage.sqlite import open_sqlite

        async with open_sqlite(settings, writer=writer, existing=existing) as storage:
            yield storage
        return
    if backend == "postgres":
        from bot.storage.postgres import open_postgres  # psycopg is only imported when it is used

        async with open_postgres(settings) as storage:
            yield storage
        return
    raise ValueError(f"unsupported storage backend {backend!r}")  # pragma: no cover - a settings Literal
