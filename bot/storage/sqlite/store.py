"""LangGraph's ``AsyncSqliteStore``, with every batch all-or-nothing, also when it fails or is cancelled.

The stock store runs a batch between ``BEGIN`` and a ``COMMIT`` in a ``finally``: a batch that fails on its
third statement commits the first two, and one whose task is cancelled (a shutdown's flush running out of
time, a reply's deadline) commits whatever ran before the cancel. The engine relies on one ``abatch``
being all-or-nothing (an extraction's deletes, inserts, change-log lines and watermark; an erasure's
steps), so here a batch that does not finish is rolled back. A cancel that lands on ``BEGIN`` itself left
the transaction open while the store's lock was already released, and every later batch then failed
with "cannot start a transaction within a transaction"; each statement of the frame now runs to its end
(``run_through``) and the cancel is raised after the connection is back to no transaction.
(PostgreSQL's counterpart: ``bot/storage/postgres/store.py``.)
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import aiosqlite
from langgraph.store.sqlite.aio import AsyncSqliteStore

from bot.storage.shielding import run_through


#: Upstream pages a namespace by ``updated_at`` alone, which every item of one batch shares: the key breaks
#: the ties, so pages never overlap or skip (see the PostgreSQL store, where they did).
TIE_BREAK = (" ORDER BY updated_at DESC", " ORDER BY updated_at DESC, prefix, key")


class TransactionalSqliteStore(AsyncSqliteStore):
    """``AsyncSqliteStore`` whose batches commit whole or not at all."""

    def _prepare_batch_search_queries(self, search_ops: Any) -> Any:
        queries, embeddings = super()._prepare_batch_search_queries(search_ops)
        return [(sql.replace(*TIE_BREAK), *rest) for sql, *rest in queries], embeddings

    async def _statement(self, sql: str) -> bool:
        """Run one frame statement to its end; return whether a cancel arrived meanwhile (raises its error)."""
        done, cancelled = await run_through(self.conn.execute(sql))
        if not done.cancelled() and done.exception() is not None and not cancelled:
            raise done.exception()
        return cancelled

    async def _roll_back(self) -> None:
        """End a transaction left open (a batch that failed or was cancelled, a failed COMMIT), to its end."""
        if self.conn.in_transaction:
            await run_through(self.conn.execute("ROLLBACK"))

    @asynccontextmanager
    async def _cursor(self, *, transaction: bool = True) -> AsyncIterator[aiosqlite.Cursor]:
        if not self.is_setup:
            await self.setup()
        async with self.lock:
            if not transaction:
                async with self.conn.cursor() as cur:
                    yield cur
                return
            if await self._statement("BEGIN"):
                await self._roll_back()
                raise asyncio.CancelledError
            try:
                async with self.conn.cursor() as cur:
                    yield cur
                cancelled = await self._statement("COMMIT")
            except BaseException:  # the batch or its COMMIT (a busy file) failed: it goes whole
                await self._roll_back()
                raise
            if cancelled:
                await self._roll_back()  # (a COMMIT that failed while the cancel came is not left open)
                raise asyncio.CancelledError  # committed (or rolled back) all the same: the batch is whole
