"""LangGraph's ``AsyncPostgresStore``, with every batch in one transaction.

The stock store sends a batch's statements through a pipeline on an autocommit connection: each
statement commits on its own, so a batch that deletes one memory and inserts another can stop half-way.
The engine relies on one ``abatch`` being all-or-nothing (an extraction's memories, their history and
its watermark; an erasure's deletes), so here the batch runs inside ``BEGIN ... COMMIT`` (still
pipelined: one round trip). ``tests/storage/test_postgres.py`` shows a stock batch leaving half its
work behind where this one leaves none.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator, Iterable

from psycopg import AsyncCursor
from psycopg.rows import DictRow, dict_row
from langgraph.store.base import Op, PutOp, Result
from langgraph.store.postgres.aio import AsyncPostgresStore

from bot.storage.postgres.locks import fence
from bot.storage.postgres.text import without_nul


class TransactionalPostgresStore(AsyncPostgresStore):
    """``AsyncPostgresStore`` over a pool whose batches are transactions (and whose values hold no NUL)."""

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await super().abatch(
            [op._replace(value=without_nul(op.value)) if isinstance(op, PutOp) and op.value else op for op in ops])

    @asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[AsyncCursor[DictRow]]:
        if not pipeline:  # setup() and the TTL sweep: single statements, as upstream
            async with super()._cursor() as cur:
                yield cur
            return
        async with self.conn.connection() as conn:
            async with conn.transaction():
                await fence(conn)  # under a claim whose lease ran out, nothing is written (ClaimLost)
                async with conn.pipeline(), conn.cursor(binary=True, row_factory=dict_row) as cur:
                    yield cur
