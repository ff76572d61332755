"""``/memories``: what the bot knows about you, and your controls over it.

Every answer is ephemeral (memories are personal) and every command defers first, so the 3-second
interaction deadline is never at the mercy of the database. Destructive actions ask for a Confirm that
only the caller can press. The group is also a user-installed command (``allowed_installs``): in a server
the bot is not in, what is taught is kept as a DM memory (``cogs._installs``). ``teach`` is the one path of
a person teaching the bot, shared with the "Remember this" message menu (``cogs.context_menus``).
"""

from __future__ import annotations

import asyncio
import io
import logging

import discord
from discord import app_commands
from discord.ext import commands

from bot.client import MemoryBot
from bot.engine import (MAX_CONTENT, MAX_HISTORY, MAX_IMPORT_BYTES, Actor, ImportRefused, StoredMemory, bm25_scores,
                        export_file, parse_import)
from cogs import _memory_format as fmt
from cogs._installs import NOT_A_MEMBER, bot_in_server, memory_place
from cogs.views import PagerView, confirm, confirmed_work, remember_prompt, report_done

log = logging.getLogger(__name__)

FORGET_LIMIT = 10


def origin_of(interaction: discord.Interaction, message: discord.Message | None = None) -> dict:
    """Where a command was used, as a memory origin: a slash command has no message to link to; a message
    menu links to its message, so deleting that message later follows the rules of learned memories. A
    server the bot is not in counts as a DM (see ``cogs._installs``); its ID is kept for the link alone
    (``link_guild_id``: an ``@me`` link to a server's channel opens nothing)."""
    channel_id = message.channel.id if message is not None else interaction.channel_id
    origin = {"guild_id": memory_place(interaction), "channel_id": str(channel_id or ""),
              "message_id": str(message.id) if message is not None else "", "source": "user"}
    if message is not None and origin["guild_id"] == "dm" and interaction.guild_id:
        origin["link_guild_id"] = str(interaction.guild_id)
    return origin


AUTOCOMPLETE_SECONDS = 2.0  # of Discord's 3-second deadline, leaving the rest for the network


async def reply(interaction: discord.Interaction, content: str | None = None, **kwargs) -> None:
    """An ephemeral followup (every memory answer is one)."""
    await interaction.followup.send(content, ephemeral=True, **kwargs)


async def over_the_rate(bot: MemoryBot, interaction: discord.Interaction) -> bool:
    """Over ``limits.memory_commands_per_hour``: told so, True. Otherwise this attempt is counted."""
    wait = bot.engine.memory_command_wait(str(interaction.user.id))
    if wait > 0:
        await reply(interaction, f"You've added or changed memories {bot.settings.limits.memory_commands_per_hour} "
                    f"times in the last hour; try again in {max(1, round(wait / 60))} minutes. Nothing was changed.")
        return True
    return False


async def refused_write(bot: MemoryBot, interaction: discord.Interaction, adding: int | None = None, *,
                        counted: bool = False) -> bool:
    """Tell the person why a remember/import cannot happen now (rate limit, cap); True if refused.
    ``counted``: the rate limit was asked (and this attempt counted) already (:func:`over_the_rate`)."""
    engine = bot.engine
    user = str(interaction.user.id)
    if not counted and await over_the_rate(bot, interaction):
        return True
    cap = bot.settings.memory.max_per_person
    have = await engine.count_memories(user)
    if adding is not None and adding > cap:
        await reply(interaction, f"That would bring you to {adding} memories; I keep at most {cap} for one "
                    "person. Import a smaller file or delete some first. Nothing was changed.")
        return True
    if adding is None and have >= cap:
        await reply(interaction, f"You have {have} memories, the most I keep for one person. Delete some with "
                    "`/memories delete` or `/memories forget` first. Nothing was changed.")
        return True
    return False


async def teach(bot: MemoryBot, interaction: discord.Interaction, text: str, origin: dict) -> None:
    """The one path of a person teaching the bot about themselves (``/memories remember``, "Remember this"):
    rate limit and cap first, then the memory, written by the person; the answer says where it counts."""
    if not text.strip():  # spaces only: Discord's client trims them, other clients need not
        await reply(interaction, "There is nothing to remember in that: nothing was saved.")
        return
    if origin["guild_id"] != "dm" and not (await bot.engine.guild_policy(origin["guild_id"])).learning:
        # The admins turned learning off in this server: nothing is kept as learned here, taught by hand
        # included (through the server install or a member's own). The person's DMs are theirs to teach in.
        await reply(interaction, "This server's admins turned off learning here, so nothing was saved. "
                    "You can teach me in our DMs instead.")
        return
    # Already kept: said so without counting against the hourly limit (checked again with the write, for a
    # second click while the first was being written).
    same = await bot.engine.already_remembered(interaction.user.id, text.strip(), origin["guild_id"])
    if same is None:
        if await refused_write(bot, interaction):
            return
        key, added = await bot.engine.remember_once(interaction.user.id, text.strip(), origin,
                                                    by=Actor("user", str(interaction.user.id)))
    else:
        key, added = same.key, False
    if not added:
        await reply(interaction, f"I already remember that (`{key[-8:]}`). Nothing was changed.")
        return
    note = ""
    if interaction.guild_id is not None and not bot_in_server(interaction):
        note = "\nI'll keep it like something you told me in a DM, since I'm not in this server. " + NOT_A_MEMBER
    await reply(interaction, f"Got it, I'll remember that (`{key[-8:]}`).{note}")


@app_commands.allowed_contexts(guilds=True, dms=True, private_channels=True)
@app_commands.allowed_installs(guilds=True, users=True)
class Memories(commands.GroupCog, group_name="memories", group_description="See and control what I remember about you."):
    """The /memories command group."""

    def __init__(self, bot: MemoryBot) -> None:
        self.bot = bot
        self.engine = bot.engine
        self._importing = asyncio.Lock()  # one import at a time in this process (see ``import_``)
        self._exporting: set[str] = set()  # people whose export is being prepared
        super().__init__()

    def actor(self, interaction: discord.Interaction) -> Actor:
        return Actor("user", str(interaction.user.id))

    async def reply(self, interaction: discord.Interaction, content: str | None = None, **kwargs) -> None:
        await reply(interaction, content, **kwargs)

    async def own_memory_choices(self, interaction: discord.Interaction, current: str) -> list[app_commands.Choice[str]]:
        """The person's memories matching what they typed. Discord drops an autocomplete answered after 3
        seconds ("Loading options failed"): a slow or failing store gives an empty list in time instead,
        and the command itself (which defers) still takes a memory's ID typed by hand."""
        needle = current.lower().strip()
        try:
            memories = await asyncio.wait_for(self.engine.list_memories(interaction.user.id), AUTOCOMPLETE_SECONDS)
        except Exception as exc:  # noqa: BLE001 - a timeout or an outage: no suggestions, logged
            log.warning("memory suggestions for an autocomplete failed: %r", exc)
            return []
        hits = [m for m in reversed(memories) if not needle or needle in m.content.lower() or m.short_id.startswith(needle)]
        return [app_commands.Choice(name=f"{m.short_id} · {m.content}"[:100], value=m.key) for m in hits[:25]]

    async def find(self, interaction: discord.Interaction, key: str) -> StoredMemory | None:
        found = await self.engine.find_memory(interaction.user.id, key)
        if found is None:
            await self.reply(interaction, "I couldn't find that memory among yours.")
        return found

    # ---- seeing
    @app_commands.command(name="view")
    async def view(self, interaction: discord.Interaction) -> None:
        """See what I remember about you, and your memory settings (only you can see this)."""
        await interaction.response.defer(ephemeral=True, thinking=True)
        memories = await self.engine.list_memories(interaction.user.id)
        prefs = await self.engine.preferences(str(interaction.user.id))
        status = fmt.status_line(prefs, self.bot.settings.memory.dm_memories_in_servers, self.bot.settings.memory.scope)
        pages = fmt.pages(self.bot, interaction.user, memories, status)
        view = PagerView(interaction.user.id, pages) if len(pages) > 1 else discord.utils.MISSING
        shown = await interaction.followup.send(embed=pages[0], view=view, ephemeral=True, wait=True)
        if view:
            view.shown = shown
            remember_prompt(self.bot, shown.id, view)

    @app_commands.command(name="history")
    @app_commands.describe(memory="The memory whose changes you want to see")
    async def history(self, interaction: discord.Interaction, memory: str) -> None:
        """See how one memory was created and changed, by whom, and where it came from."""
        await interaction.response.defer(ephemeral=True, thinking=True)
        entries = await self.engine.memory_history(interaction.user.id, memory)
        if not entries:
            found = await self.find(interaction, memory)
            if found is None:
                return
            entries = await self.engine.memory_history(interaction.user.id, found.key)
            memory = found.key
        await self.reply(interaction, embed=fmt.history_embed(self.bot, memory[-8:], entries))

    @app_commands.command(name="export")
    async def export(self, interaction: discord.Interaction) -> None:
        """Download what I remember about you, with its change history, as a JSON file."""
        await interaction.response.defer(ephemeral=True, thinking=True)
        user = str(interaction.user.id)
        if user in self._exporting:  # each export holds the whole change log in memory: one at a time each
            await self.reply(interaction, "Your export is already being prepared: it will arrive in a moment.")
            return
        self._exporting.add(user)
        try:
            await self._export(interaction, user)
        finally:
            self._exporting.discard(user)

    async def _export(self, interaction: discord.Interaction, user: str) -> None:
        document = await self.engine.export(user)
        memories = document["memories"]
        made = await asyncio.to_thread(export_file, document)
        without = ""
        if made is None and document.get("history"):
            # The change log keeps every old text and only grows (deleting memories adds to it): the
            # memories themselves still come, without it, rather than nothing.
            made = await asyncio.to_thread(export_file, {**document, "history": []})
            without = (" Their change history is too large for one file on Discord, so this file holds the memories"
                       " without their change history.")
        if made is None:
            await self.reply(interaction, f"Your {len(memories)} memories are too large for one file on Discord,"
                             " even compressed.")
            return
        data, ending = made
        file = discord.File(io.BytesIO(data), filename=f"memories-{user}{ending}")
        packed = " (compressed: `/memories import` takes it as it is)" if ending.endswith(".gz") else ""
        await self.reply(interaction, f"Here are your {len(memories)} memories{packed}.{without}", file=file)

    # ---- teaching and correcting
    @app_commands.command(name="remember")
    @app_commands.describe(text="What I should remember about you, in your own words")
    async def remember(self, interaction: discord.Interaction, text: app_commands.Range[str, 1, MAX_CONTENT]) -> None:
        """Tell me something to remember about you."""
        await interaction.response.defer(ephemeral=True, thinking=True)
        await teach(self.bot, interaction, text, origin_of(interaction))

    @app_commands.command(name="edit")
    @app_commands.describe(memory="The memory to change (start typing to search yours)", text="The corrected text")
    async def edit(self, interaction: discord.Interaction, memory: str, text: app_commands.Range[str, 1, MAX_CONTENT]) -> None:
        """Correct one thing I remember about you."""
        await interaction.response.defer(ephemeral=True, thinking=True)
        if not text.strip():  # an empty memory would also make the person's export fail its own import
            await self.reply(interaction, "The corrected text is empty: nothing was changed.")
            return
        found = await self.find(interaction, memory)
        if found is None:
            return
        if found.content == text.strip():  # nothing to log, index or erase
            await self.reply(interaction, f"`{found.short_id}` already says that: nothing was changed.")
            return
        # Counted like remember and import: each edit keeps the old text in the change log, which every
        # erasure reads, and takes the erasure lock; a script re-editing one memory grew both without end.
        if await over_the_rate(self.bot, interaction):
            return
        # The place it was learned stays (a DM fact edited in a server stays a DM fact); the source is you.
        origin = {**found.origin, "source": "user"}
        if not await self.engine.edit_memory(interaction.user.id, found.key, text.strip(), origin,
                                             by=self.actor(interaction)):
            # Gone between the lookup and the edit (the memory cap, a deleted message, another command).
            await self.reply(interaction, f"`{found.short_id}` was deleted a moment ago; nothing was changed.")
            return
        await self.reply(interaction, f"Updated `{found.short_id}`: {fmt.clip(text)}")

    @app_commands.command(name="delete")
    @app_commands.describe(memory="The memory to delete (start typing to search yours)")
    async def delete(self, interaction: discord.Interaction, memory: str) -> None:
        """Delete one thing I remember about you (asks first)."""
        await interaction.response.defer(ephemeral=True, thinking=True)
        found = await self.find(interaction, memory)
        if found is None:
            return
        # Asked first, as every removal is: the autocomplete list is easy to mis-tap, and a deleted memory
        # comes back only from an export the person kept.
        ok, button = await confirm(interaction, f"Delete `{found.short_id}`: {fmt.clip(found.content)}?",
                                   confirm_label="Delete", cancelled="Cancelled: nothing was deleted.")
        if not ok:
            return
        async with confirmed_work(button, f"deleting a memory of user {interaction.user.id}") as work:
            changes = await self.engine.delete_memories(interaction.user.id, [found.key], by=self.actor(interaction))
        if work.ok:
            await report_done(button, f"Deleted `{found.short_id}`: {fmt.clip(found.content)}" if changes.deleted
                              else f"`{found.short_id}` was already gone: nothing else was deleted.")

    @edit.autocomplete("memory")
    @delete.autocomplete("memory")
    @history.autocomplete("memory")
    async def memory_autocomplete(self, interaction: discord.Interaction, current: str) -> list[app_commands.Choice[str]]:
        return await self.own_memory_choices(interaction, current)

    @app_commands.command(name="forget")
    @app_commands.describe(text="Words that describe what I should forget")
    async def forget(self, interaction: discord.Interaction, text: app_commands.Range[str, 1, 200]) -> None:
        """Find what I remember that matches your words and delete it (asks first)."""
        await interaction.response.defer(ephemeral=True, thinking=True)
        memories = await self.engine.list_memories(interaction.user.id)
        scored = sorted(zip(bm25_scores(text, [m.content for m in memories]), range(len(memories))), reverse=True)
        matches = [memories[i] for score, i in scored if score > 0][:FORGET_LIMIT]
        if not matches:
            await self.reply(interaction, "Nothing I remember about you matches those words.")
            return
        listing = "\n".join(f"`{m.short_id}` {fmt.clip(m.content, 150)}" for m in matches)
        ok, button = await confirm(interaction, f"Forget these {len(matches)}?\n{listing}", confirm_label="Forget",
                                   cancelled="Cancelled: nothing was forgotten.")
        if not ok:
            return
        async with confirmed_work(button, f"forgetting memories of user {interaction.user.id}") as work:
            changes = await self.engine.delete_memories(interaction.user.id, [m.key for m in matches],
                                                        by=self.actor(interaction))
        if work.ok:
            await report_done(button, f"Forgotten: {len(changes.deleted)} memories.")

    # ---- erasing and importing
    @app_commands.command(name="wipe")
    async def wipe(self, interaction: discord.Interaction) -> None:
        """Erase everything I remember about you and your messages I keep (asks first)."""
        await interaction.response.defer(ephemeral=True, thinking=True)
        count = await self.engine.count_memories(interaction.user.id)
        ok, button = await confirm(
            interaction,
            f"Erase all {count} things I remember about you, their history, and your messages in my stored "
            "conversations? This cannot be undone.",
            confirm_label="Wipe",
            cancelled="Cancelled: nothing was deleted.",
        )
        if not ok:
            return
        # (answered at once: erasing every conversation can take longer than 3 seconds)
        async with confirmed_work(button, f"the wipe of user {interaction.user.id}",
                                  recorded=lambda: self.engine.erasure_recorded(interaction.user.id)) as work:
            result = await self.engine.erase_person(interaction.user.id)
        if not work.ok:
            return
        log.info("user %s wiped their data: %d memories, %d messages", interaction.user.id, result.memories,
                 result.messages)
        await report_done(button, f"Done: deleted {result.memories} memories and {result.messages} stored messages.")

    @app_commands.command(name="import")
    @app_commands.describe(file="A file from /memories export")
    async def import_(self, interaction: discord.Interaction, file: discord.Attachment) -> None:
        """Bring back memories from a /memories export file (asks first if it would change any you have)."""
        await interaction.response.defer(ephemeral=True, thinking=True)
        # Counted before the file is read: a refused file costs the bot as much as an accepted one.
        if await over_the_rate(self.bot, interaction):
            return
        # One import at a time in this process, from reading the file to writing it (or the prompt's answer):
        # a parsed file is held all that while, so several at once would add up their memory.
        async with self._importing:
            await self._import(interaction, file)

    async def _import(self, interaction: discord.Interaction, file: discord.Attachment) -> None:
        try:
            if file.size > MAX_IMPORT_BYTES:
                raise ImportRefused(f"the file is larger than {MAX_IMPORT_BYTES // 1_000_000} MB")
            # Validating a large file takes a second or two: off the event loop, which serves everyone.
            memories, history = await asyncio.to_thread(parse_import, await file.read(), str(interaction.user.id))
        except ImportRefused as exc:
            await self.reply(interaction, f"I can't import that file: {exc}. Nothing was changed.")
            return
        current = {m.key: m for m in await self.engine.list_memories(interaction.user.id)}
        if await refused_write(self.bot, interaction, adding=len(set(current) | {m["id"] for m in memories}),
                               counted=True):
            return
        if history:  # the change log has no cap of its own: new entries from file after file would pile up
            logged = {e.key for e in await self.engine.memory_history(interaction.user.id)}
            if len(logged | {h["key"] for h in history}) > MAX_HISTORY:
                await self.reply(interaction, f"That would bring your change log over {MAX_HISTORY:,} entries. "
                                 "Nothing was changed.")
                return
        # Bringing back an old export over memories corrected since is a removal of the corrections: asked
        # first, listing what would change. An import that only adds (the usual case: after a wipe, or on
        # another bot) goes ahead without a question.
        replaced = [current[m["id"]] for m in memories if m["id"] in current and current[m["id"]].content != m["content"]]
        if not replaced:
            count = await self.engine.restore_memories(interaction.user.id, memories, history, by=self.actor(interaction))
            await self.reply(interaction, f"Imported {count} memories.")
            return
        listing = "\n".join(f"`{m.short_id}` {fmt.clip(m.content, 150)}" for m in replaced[:FORGET_LIMIT])
        more = f"\n… and {len(replaced) - FORGET_LIMIT} more" if len(replaced) > FORGET_LIMIT else ""
        ok, button = await confirm(
            interaction,
            f"Import {len(memories)} memories? The file's text would replace {len(replaced)} of what I "
            f"remember now:\n{listing}{more}",
            confirm_label="Import", cancelled="Cancelled: nothing was imported.")
        if not ok:
            return
        async with confirmed_work(button, f"the import of user {interaction.user.id}") as work:
            count = await self.engine.restore_memories(interaction.user.id, memories, history, by=self.actor(interaction))
        if work.ok:
            await report_done(button, f"Imported {count} memories.")

    # ---- settings
    async def set_pref(self, interaction: discord.Interaction, message: str, **values: bool | str) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)
        await self.engine.set_preferences(str(interaction.user.id), **values)
        await self.reply(interaction, message)

    @app_commands.command(name="pause")
    async def pause(self, interaction: discord.Interaction) -> None:
        """Stop learning new things about you (I still use what I already know)."""
        await self.set_pref(interaction, "Paused: I won't learn anything new about you until `/memories resume`.", paused=True)

    @app_commands.command(name="resume")
    async def resume(self, interaction: discord.Interaction) -> None:
        """Start learning about you again."""
        await self.set_pref(interaction, "Resumed: I'll learn from our conversations again.", paused=False)

    @app_commands.command(name="private")
    @app_commands.describe(enabled="On: I don't use what I remember when I answer you")
    async def private(self, interaction: discord.Interaction, enabled: bool) -> None:
        """Keep your memories out of my replies entirely (or let me use them again)."""
        text = ("Private mode on: I won't use what I remember in replies." if enabled
                else "Private mode off: I'll use what I remember again.")
        await self.set_pref(interaction, text, private=enabled)

    @app_commands.command(name="reactions")
    @app_commands.describe(enabled="On: I react to your message when I learn something from it")
    async def reactions(self, interaction: discord.Interaction, enabled: bool) -> None:
        """Choose whether I react with \N{BRAIN} when I update what I remember about you."""
        text = "I'll react when I learn something." if enabled else "I won't react when I learn something."
        await self.set_pref(interaction, text, reactions=enabled)

    @app_commands.command(name="share-dm")
    @app_commands.describe(enabled="On: what you tell me in DMs can be used when I answer you in servers")
    async def share_dm(self, interaction: discord.Interaction, enabled: bool) -> None:
        """Choose whether what I learned in DMs may be used in servers (off by default)."""
        text = ("DM memories may now be used in servers." if enabled
                else "DM memories stay in DMs: I won't use them in servers.")
        await self.set_pref(interaction, text, dm_in_servers=enabled)

    @app_commands.command(name="scope")
    @app_commands.describe(where="server: what you say in a server stays in that server; everywhere: all servers")
    @app_commands.choices(where=[app_commands.Choice(name="this server only (each server its own)", value="server"),
                                 app_commands.Choice(name="every server", value="global")])
    async def scope(self, interaction: discord.Interaction, where: app_commands.Choice[str]) -> None:
        """Choose whether what you told me in one server may be used in the others."""
        text = ("What you say in a server stays in that server (and in our DMs)." if where.value == "server"
                else "What you say in one server may now be used in every server.")
        await self.set_pref(interaction, text, scope=where.value)


async def setup(bot: MemoryBot) -> None:
    """discord.py's extension hook (``load_extension("cogs.memories")``): add the /memories command group."""
    await bot.add_cog(Memories(bot))
