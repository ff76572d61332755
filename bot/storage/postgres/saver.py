"""LangGraph's ``AsyncPostgresSaver``, storing no NUL character.

The saver keeps primitive channel values (a running summary is a ``str``) inline in a ``jsonb`` column,
which cannot hold ``\\u0000``; a person who typed one would otherwise break their channel. Values that
go to the blob table (messages) are bytes and are left exactly as they are.
"""

from __future__ import annotations

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

from bot.storage.postgres.text import without_nul


class NulFreePostgresSaver(AsyncPostgresSaver):
    """``AsyncPostgresSaver`` with NUL characters taken out of a checkpoint's inline values and metadata."""

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        values = checkpoint["channel_values"]
        if any(isinstance(v, str) and "\x00" in v for v in values.values()):
            checkpoint = {**checkpoint, "channel_values": {
                k: without_nul(v) if isinstance(v, str) else v for k, v in values.items()}}
        return await super().aput(config, checkpoint, without_nul(metadata), new_versions)
