"""The "memory updated" signal: a small reaction on the person's latest message when extraction changed
what the bot remembers about them, so learning is never invisible. On by default; ``/memories reactions``
turns it off per person. Nothing happens when an extraction changed nothing.
"""

from __future__ import annotations

import logging

import discord
from discord.ext import commands

from bot.client import MemoryBot
from bot.engine import WriteRequest, is_snowflake

log = logging.getLogger(__name__)

REACTION = "\N{BRAIN}"


class MemorySignal(commands.Cog):
    """Hooks into the engine's extraction scheduler while loaded."""

    def __init__(self, bot: MemoryBot) -> None:
        self.bot = bot

    async def cog_load(self) -> None:
        self.bot.engine.on_memory_change(self.memory_changed)

    async def cog_unload(self) -> None:
        self.bot.engine.on_memory_change(None)

    async def memory_changed(self, request: WriteRequest, changes: dict) -> None:
        prefs = await self.bot.engine.preferences(request.user_id)
        if not prefs.reactions:
            return
        channel_id, message_id = str(request.origin.get("channel_id", "")), str(request.origin.get("message_id", ""))
        if not (is_snowflake(channel_id) and is_snowflake(message_id)):
            return
        channel = self.bot.get_channel(int(channel_id))
        if channel is None:
            try:
                channel = await self.bot.fetch_channel(int(channel_id))
            except discord.HTTPException:
                log.debug("cannot reach channel %s to react", channel_id)
                return
        try:
            await channel.get_partial_message(int(message_id)).add_reaction(REACTION)
        except discord.HTTPException as exc:
            log.info("could not add the memory reaction in channel %s: %s", channel_id, exc)


async def setup(bot: MemoryBot) -> None:
    """discord.py's extension hook (``load_extension("cogs.memory_signal")``): add the "memory updated" reaction."""
    await bot.add_cog(MemorySignal(bot))
