"""``/memories``: what the bot knows about you. Every answer is ephemeral: memories are personal."""

from __future__ import annotations

import io
import json
import logging

import discord
from discord import app_commands
from discord.ext import commands

from bot.client import MemoryBot
from bot.engine.erasure import erase_person
from bot.engine.export import export_memories
from bot.engine.memory import StoredMemory
from cogs.views import PagerView, confirm

log = logging.getLogger(__name__)

PAGE_SIZE = 10
SHOWN_CHARS = 300


def jump_url(origin: dict) -> str | None:
    """A link to the message a memory came from, when it came from a Discord message."""
    channel, message = origin.get("channel_id"), origin.get("message_id")
    if not (str(channel).isdigit() and str(message).isdigit()):
        return None
    guild = origin.get("guild_id")
    return f"https://discord.com/channels/{guild if str(guild).isdigit() else '@me'}/{channel}/{message}"


@app_commands.allowed_contexts(guilds=True, dms=True, private_channels=True)
class Memories(commands.GroupCog, group_name="memories", group_description="See, export and delete what I remember about you."):
    """The /memories command group."""

    def __init__(self, bot: MemoryBot) -> None:
        self.bot = bot
        self.repo = bot.engine.memories
        super().__init__()

    def where(self, origin: dict) -> str:
        """Where a memory was learned, in words: "a DM", or "Server › #channel"."""
        gid = str(origin.get("guild_id", ""))
        if gid == "dm":
            place = "a DM"
        elif not gid.isdigit():
            place = "elsewhere"
        else:
            guild = self.bot.get_guild(int(gid))
            place = guild.name if guild else f"server {gid}"
            cid = str(origin.get("channel_id", ""))
            channel = guild.get_channel_or_thread(int(cid)) if guild and cid.isdigit() else None
            if channel is not None:
                place += f" › #{channel.name}"
        link = jump_url(origin)
        return f"[{place}]({link})" if link else place

    def describe(self, m: StoredMemory) -> str:
        text = m.content if len(m.content) <= SHOWN_CHARS else m.content[: SHOWN_CHARS - 1] + "…"
        when = int(m.updated_at.timestamp())
        return f"`{m.short_id}` {discord.utils.escape_mentions(text)}\n-# learned <t:{when}:R> in {self.where(m.origin)}"

    def pages(self, user: discord.abc.User, memories: list[StoredMemory]) -> list[discord.Embed]:
        chunks = [memories[i : i + PAGE_SIZE] for i in range(0, len(memories), PAGE_SIZE)] or [[]]
        out = []
        for n, chunk in enumerate(chunks, start=1):
            embed = discord.Embed(
                title=f"What I remember about {user.display_name}",
                description="\n".join(self.describe(m) for m in chunk) or "Nothing yet.",
            )
            embed.set_footer(text=f"{len(memories)} memories · page {n} of {len(chunks)}")
            out.append(embed)
        return out

    @app_commands.command(name="view")
    async def view(self, interaction: discord.Interaction) -> None:
        """See what I remember about you (only you can see this)."""
        await interaction.response.defer(ephemeral=True, thinking=True)
        memories = await self.repo.list(interaction.user.id)
        pages = self.pages(interaction.user, memories)
        view = PagerView(interaction.user.id, pages) if len(pages) > 1 else discord.utils.MISSING
        await interaction.followup.send(embed=pages[0], view=view, ephemeral=True)

    @app_commands.command(name="delete")
    @app_commands.describe(memory="The memory to delete (start typing to search yours)")
    async def delete(self, interaction: discord.Interaction, memory: str) -> None:
        """Delete one thing I remember about you."""
        await interaction.response.defer(ephemeral=True, thinking=True)
        found = await self.repo.resolve(interaction.user.id, memory)
        if found is None:
            await interaction.followup.send("I couldn't find that memory among yours.", ephemeral=True)
            return
        await self.repo.delete(interaction.user.id, found.key)
        await interaction.followup.send(
            f"Deleted `{found.short_id}`: {discord.utils.escape_mentions(found.content[:SHOWN_CHARS])}", ephemeral=True
        )

    @delete.autocomplete("memory")
    async def delete_autocomplete(self, interaction: discord.Interaction, current: str) -> list[app_commands.Choice[str]]:
        needle = current.lower().strip()
        memories = await self.repo.list(interaction.user.id)
        hits = [m for m in reversed(memories) if not needle or needle in m.content.lower() or m.short_id.startswith(needle)]
        return [
            app_commands.Choice(name=f"{m.short_id} · {m.content}"[:100], value=m.key) for m in hits[:25]
        ]

    @app_commands.command(name="wipe")
    async def wipe(self, interaction: discord.Interaction) -> None:
        """Delete everything I remember about you (asks first)."""
        await interaction.response.defer(ephemeral=True, thinking=True)
        count = len(await self.repo.list(interaction.user.id))
        if count == 0:
            await interaction.followup.send("I don't remember anything about you, so there is nothing to wipe.", ephemeral=True)
            return
        ok, button = await confirm(
            interaction, f"Delete all {count} things I remember about you? This cannot be undone.", confirm_label="Wipe"
        )
        if not ok:
            if button is not None:
                await button.response.edit_message(content="Cancelled: nothing was deleted.", view=None)
            return
        result = await erase_person(self.bot.storage, interaction.user.id)
        log.info("user %s wiped their memories: %d", interaction.user.id, result.memories)
        await button.response.edit_message(content=f"Done: deleted {result.memories} memories.", view=None)

    @app_commands.command(name="export")
    async def export(self, interaction: discord.Interaction) -> None:
        """Download what I remember about you as a JSON file."""
        await interaction.response.defer(ephemeral=True, thinking=True)
        memories = await self.repo.list(interaction.user.id)
        document = export_memories(str(interaction.user.id), memories)
        data = json.dumps(document, indent=2, ensure_ascii=False).encode("utf-8")
        file = discord.File(io.BytesIO(data), filename=f"memories-{interaction.user.id}.json")
        await interaction.followup.send(f"Here are your {len(memories)} memories.", file=file, ephemeral=True)


async def setup(bot: MemoryBot) -> None:
    await bot.add_cog(Memories(bot))
