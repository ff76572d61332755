"""LangGraph's ``AsyncPostgresSaver``: on the turn's connection, each write one transaction, no NUL.

- Connections: the stock saver takes a process-wide ``asyncio.Lock`` around every statement, needed when
  it is given one connection and not when it is given a pool; with a pool it serialized every channel's
  checkpoint reads and writes in the process behind one another. Here each call borrows a connection
  like the bot's own tables (``db.lent``: the turn's when it lends one, else the pool's) and takes no lock.
- Transactions: a checkpoint write is several statements (its blobs, then the checkpoint row; a task's
  writes, one per channel). The stock saver pipelines them on an autocommit connection, so each commits
  on its own, and with ``synchronous_commit`` on each waits for its own flush to disk. Here they run in
  one ``BEGIN ... COMMIT``, still pipelined: one round trip, one flush, all or nothing.
- Retries: reading and writing a checkpoint are idempotent (upserts keyed by the checkpoint), so each
  runs once more when its connection was lost under it (``db.retried``).
- NUL: the saver keeps primitive channel values (a running summary is a ``str``) inline in a ``jsonb``
  column, which cannot hold ``\\u0000``; a person who typed one would otherwise break their channel.
  Values that go to the blob table (messages) are bytes and are left exactly as they are.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Sequence

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import AsyncCursor
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from bot.storage.postgres.connection import Outages
from bot.storage.postgres.db import lent, retried
from bot.storage.postgres.text import without_nul


class NulFreePostgresSaver(AsyncPostgresSaver):
    """``AsyncPostgresSaver`` over the pool (see the module docstring)."""

    def __init__(self, pool: AsyncConnectionPool, outages: Outages, **kwargs: Any) -> None:
        super().__init__(pool, **kwargs)
        self.outages = outages

    @asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[AsyncCursor[DictRow]]:
        async with lent(self.conn, self.outages) as conn:
            if pipeline:
                async with conn.transaction(), conn.pipeline(), conn.cursor(binary=True, row_factory=dict_row) as cur:
                    yield cur
            else:
                async with conn.cursor(binary=True, row_factory=dict_row) as cur:
                    yield cur

    @retried
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await super().aget_tuple(config)

    @retried
    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        values = checkpoint["channel_values"]
        if any(isinstance(v, str) and "\x00" in v for v in values.values()):
            checkpoint = {**checkpoint, "channel_values": {
                k: without_nul(v) if isinstance(v, str) else v for k, v in values.items()}}
        return await super().aput(config, checkpoint, without_nul(metadata), new_versions)

    @retried
    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        await super().aput_writes(config, writes, task_id, task_path)
