"""LangGraph's ``AsyncPostgresStore``, with every batch in one transaction, on the turn's connection.

The stock store sends a batch's statements through a pipeline on an autocommit connection: each
statement commits on its own, so a batch that deletes one memory and inserts another can stop half-way.
The engine relies on one ``abatch`` being all-or-nothing (an extraction's memories, their history and
its watermark; an erasure's deletes), so here the batch runs inside ``BEGIN ... COMMIT`` (still
pipelined: one round trip). ``tests/storage/test_postgres.py`` shows a stock batch leaving half its
work behind where this one leaves none.

Connections come from ``db.lent``: the turn's when a turn lends one (``scope.py``). The stock store's
``aget``/``asearch`` hand their request to a task of LangGraph's own that batches what arrives in the same
tick; that task is no part of any turn, so inside a turn they run in the caller's task instead, on the
turn's connection. A batch runs once more when its connection was lost under it: its reads are reads
and its writes upserts or deletes by key, the same the second time.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Iterable

from langgraph.store.base import GetOp, Item, Op, PutOp, Result, SearchItem, SearchOp
from langgraph.store.base.batch import _ensure_refresh
from langgraph.store.postgres.aio import AsyncPostgresStore
from psycopg import AsyncCursor
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from bot.storage.postgres.connection import Outages
from bot.storage.postgres.db import lent, retried
from bot.storage.postgres.locks import fence
from bot.storage.postgres.scope import CURRENT_SCOPE
from bot.storage.postgres.text import without_nul


PUT_CHUNK = 5_000  # writes per statement group: PostgreSQL takes at most 65,535 parameters in one statement


def _in_turn() -> bool:
    scope = CURRENT_SCOPE.get()
    return scope is not None and scope.open


#: Upstream pages a namespace by ``updated_at`` alone. Every item one batch writes (an import, an
#: extraction's memories, a wipe's history) shares it, and PostgreSQL's top-N sort orders ties differently
#: for each LIMIT/OFFSET: pages overlapped and skipped items, so a wipe listing a person's 1,300 memories
#: saw 1,197 and left 103 behind. The key breaks the ties (a unique order across pages).
TIE_BREAK = ("ORDER BY store.updated_at DESC", "ORDER BY store.updated_at DESC, store.prefix, store.key")


class TransactionalPostgresStore(AsyncPostgresStore):
    """``AsyncPostgresStore`` over a pool whose batches are transactions (and whose values hold no NUL)."""

    def __init__(self, pool: AsyncConnectionPool, outages: Outages, **kwargs: Any) -> None:
        super().__init__(pool, **kwargs)
        self.outages = outages

    def _prepare_batch_search_queries(self, search_ops: Any) -> Any:
        queries, embeddings = super()._prepare_batch_search_queries(search_ops)
        return [(sql.replace(*TIE_BREAK), params) for sql, params in queries], embeddings

    @retried
    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await super().abatch(
            [op._replace(value=without_nul(op.value)) if isinstance(op, PutOp) and op.value else op for op in ops])

    async def _batch_put_ops(self, put_ops: Any, cur: AsyncCursor[DictRow]) -> None:
        """Upstream writes a batch's deletes of one namespace as one ``DELETE ... IN (...)`` and its inserts as
        one multi-row ``INSERT``, a parameter per key (five per row): a wipe of a person with 70,000 history
        lines would exceed PostgreSQL's 65,535 and fail every retry. The writes go in chunks, in order, on the
        same cursor, so still inside the batch's one transaction (a later write of a key still wins)."""
        ops = list(put_ops)
        for start in range(0, len(ops), PUT_CHUNK):
            await super()._batch_put_ops(ops[start:start + PUT_CHUNK], cur)

    async def aget(self, namespace: tuple[str, ...], key: str, *, refresh_ttl: bool | None = None) -> Item | None:
        if not _in_turn():
            return await super().aget(namespace, key, refresh_ttl=refresh_ttl)
        return (await self.abatch([GetOp(namespace, key, refresh_ttl=_ensure_refresh(self.ttl_config, refresh_ttl))]))[0]

    async def asearch(self, namespace_prefix: tuple[str, ...], /, *, query: str | None = None,
                      filter: dict[str, Any] | None = None, limit: int = 10, offset: int = 0,
                      refresh_ttl: bool | None = None) -> list[SearchItem]:
        if not _in_turn():
            return await super().asearch(namespace_prefix, query=query, filter=filter, limit=limit, offset=offset,
                                         refresh_ttl=refresh_ttl)
        op = SearchOp(namespace_prefix, filter, limit, offset, query,
                      refresh_ttl=_ensure_refresh(self.ttl_config, refresh_ttl))
        return (await self.abatch([op]))[0]

    @asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[AsyncCursor[DictRow]]:
        async with lent(self.conn, self.outages) as conn:
            if not pipeline:  # setup() and the TTL sweep: single statements, as upstream
                async with conn.cursor(binary=True, row_factory=dict_row) as cur:
                    yield cur
                return
            async with conn.transaction():
                await fence(conn)  # under a claim whose lease ran out, nothing is written (ClaimLost)
                async with conn.pipeline(), conn.cursor(binary=True, row_factory=dict_row) as cur:
                    yield cur
