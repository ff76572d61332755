"""Right-click menus (Discord's message and user context menus): "Remember this", "Forget this", "Purge memories".

- **Remember this** (a message): on one's own message, the bot remembers what it says, exactly as if the
  person had typed it into ``/memories remember`` (same rate limit, cap and code path: ``cogs.memories.teach``),
  as a memory the person wrote by hand (``source: "user"``; the message is kept as ``from_message``): no
  later event on the message, its deletion included, undoes it. On anyone else's message it is refused:
  nobody teaches the bot about another person.
- **Forget this** (a message): on one's own message, shows the memories whose sources include that message
  and erases them after a Confirm only the person can press. On anyone else's message it is refused.
- **Ask about this** (a message): any message the person can see; the bot answers about it, ephemerally,
  with the message as quoted context under the same rules as a reply chain (a private-mode author's words
  are not shown). The question runs in the person's own side conversation for that channel
  (``ask:<channel>:<person>``), so nobody else's conversation holds it, and nothing of it is learned: the
  question is the menu's, not the person's words.
- **Purge memories** (a member): ``/purge-memories`` on that member, with the same checks (in a server the
  bot is in and installed to, Manage Messages server-wide, checked again when Purge is pressed) and the
  same code path (``cogs.moderation.purge``).

Every answer is ephemeral. Refusals are answered at once; everything that reads the database defers first.
The two message menus can be used wherever ``/memories`` can, also as a user-installed app (see
``cogs._installs`` for what is kept where then); the purge menu is a server-install command only.
"""

from __future__ import annotations

import io
import logging
from dataclasses import replace

import discord
from discord import app_commands
from discord.ext import commands

from bot.client import MemoryBot
from bot.chunking import split_message
from bot.engine import MAX_CONTENT, Actor, EmptyAnswer, Incoming, Speaker, side_thread
from cogs import _memory_format as fmt
from cogs._context import marked_own, quote_of, readable_text, speaker_name
from cogs._failures import log_failure
from cogs._gate import interaction_allows
from cogs._input import input_builder
from cogs._installs import guild_installed
from cogs.memories import origin_of, reply, teach
from cogs.moderation import has_server_wide_manage_messages, in_server, purge
from cogs.chat import APOLOGY, OUT_OF_BUDGET, speaker_name_text
from cogs.views import confirm, confirmed_work, report_done

log = logging.getLogger(__name__)
# Discord allows 5 follow-ups to an interaction of a user install where the bot is not in the server (a DM
# between people, a group DM, a server it was not added to): past it, error 40094 and a cut-off answer.
MAX_FOLLOWUPS = 5

REMEMBER, FORGET, ASK, PURGE = "Remember this", "Forget this", "Ask about this", "Purge memories"
ASK_TEXT = "What can you tell me about this message?"
NOT_HERE = "I'm not set up to answer you here."
TOO_FAST = "You're going a bit fast for me. Ask me again in a moment."
NOT_YOURS = "I only learn about people from what they say themselves, so this only works on your own messages."
EVERYWHERE = app_commands.AppCommandContext(guild=True, dm_channel=True, private_channel=True)
ANY_INSTALL = app_commands.AppInstallationType(guild=True, user=True)


class ContextMenus(commands.Cog):
    """Adds the three menus to the command tree on load and removes them on unload (a cog cannot hold them
    as decorated methods: discord.py's context menus are tree-level commands)."""

    def __init__(self, bot: MemoryBot) -> None:
        self.bot = bot
        self.engine = bot.engine
        purge_menu = app_commands.ContextMenu(
            name=PURGE, callback=self.purge_member,
            allowed_contexts=app_commands.AppCommandContext(guild=True),
            allowed_installs=app_commands.AppInstallationType(guild=True, user=False))
        purge_menu.default_permissions = discord.Permissions(manage_messages=True)
        for check in (in_server, guild_installed, has_server_wide_manage_messages):  # in this order, as the command
            purge_menu.add_check(check)
        self.menus = [
            app_commands.ContextMenu(name=REMEMBER, callback=self.remember_message, allowed_contexts=EVERYWHERE,
                                     allowed_installs=ANY_INSTALL),
            app_commands.ContextMenu(name=FORGET, callback=self.forget_message, allowed_contexts=EVERYWHERE,
                                     allowed_installs=ANY_INSTALL),
            app_commands.ContextMenu(name=ASK, callback=self.ask_about, allowed_contexts=EVERYWHERE,
                                     allowed_installs=ANY_INSTALL),
            purge_menu,
        ]

    async def cog_load(self) -> None:
        for menu in self.menus:
            self.bot.tree.add_command(menu)

    async def cog_unload(self) -> None:
        for menu in self.menus:
            self.bot.tree.remove_command(menu.name, type=menu.type)

    async def ask_about(self, interaction: discord.Interaction, message: discord.Message) -> None:
        """Answer about a message, ephemerally, with it as context (see the module docstring).

        It asks the model, so it is gated as a message is: the ``[access]`` lists, the server's
        ``/settings`` for the channel (mentions off there: no answers there either, unless it answers every
        message) and the per-person rate
        limit. The lists and the limit are answered at once; the server's settings after the defer (a read)."""
        guild_id = str(interaction.guild_id) if interaction.guild_id and self.bot.get_guild(interaction.guild_id) else "dm"
        if not interaction_allows(interaction, self.bot.settings.access) or (
                guild_id != "dm" and not interaction.app_permissions.view_channel):
            # A channel of a server the bot is in, that its admins keep it out of: Discord still sends the
            # message, but the bot would carry it to the model and keep its answer in a channel whose
            # deletions it never hears.
            await self.refuse(interaction, NOT_HERE)
            return
        if not self.engine.admit(interaction.user.id):
            await self.refuse(interaction, TOO_FAST)
            return
        await interaction.response.defer(ephemeral=True, thinking=True)
        server = await self.engine.guild_policy(None if guild_id == "dm" else guild_id)
        channel_parent = getattr(interaction.channel, "parent_id", None)
        if guild_id != "dm" and not (server.answers_everything(interaction.channel_id, channel_parent)
                                     or server.answers_mentions(interaction.channel_id, channel_parent)):
            await interaction.followup.send(NOT_HERE, ephemeral=True)
            return
        place = ("a direct message with them" if guild_id == "dm"
                 else f"#{speaker_name_text(getattr(interaction.channel, 'name', None) or 'channel')}")
        # The side conversation belongs to the channel (a thread's to its channel): deleting it takes this along.
        parent = getattr(interaction.channel, "parent_id", None) or interaction.channel_id
        speaker = Speaker(user_id=str(interaction.user.id), name=speaker_name(interaction.user), guild_id=guild_id,
                          channel_id=str(interaction.channel_id or ""), parent_id=str(parent or ""), place=place)
        policy = replace(server, learning=False)
        thread = side_thread(interaction.channel_id, interaction.user.id)

        async def context() -> tuple:
            # its pictures too (with vision on), as a reply to it would show them: asking about a photo
            # asks about the photo, not its file name
            images = await input_builder(self.bot).quoted_images(self.bot, message)
            return marked_own([replace(quote_of(message, "reply"), images=images)], self.bot.user)

        try:
            result = await self.engine.turn(thread, [Incoming(speaker, ASK_TEXT)], context=context, policy=policy,
                                            timeout=self.bot.settings.model.timeout_seconds)  # as a chat answer
        except Exception as exc:  # noqa: BLE001 - a short apology here, the details in the log
            if isinstance(exc, EmptyAnswer):  # the model answered nothing: a warning, no traceback
                log.warning("answering Ask about this in channel %s: %s", interaction.channel_id, exc)
            else:
                log_failure(log, self.engine.outages, exc, "answering Ask about this in channel %s failed",
                            interaction.channel_id)
            await interaction.followup.send(APOLOGY, ephemeral=True)
            return
        if result.reply is None:
            await interaction.followup.send(OUT_OF_BUDGET[result.spent or "server"], ephemeral=True)
            return
        parts = split_message(result.reply.text) or ["…"]
        if len(parts) > MAX_FOLLOWUPS:  # the rest as a file in the last message Discord allows
            rest = io.BytesIO(result.reply.text.encode())
            parts, file = parts[:MAX_FOLLOWUPS - 1], discord.File(rest, filename="answer.txt")
        else:
            file = None
        for part in parts:
            await interaction.followup.send(part, ephemeral=True, allowed_mentions=discord.AllowedMentions.none())
        if file is not None:
            await interaction.followup.send("The whole answer, as a file:", file=file, ephemeral=True)

    @staticmethod
    async def refuse(interaction: discord.Interaction, text: str) -> None:
        await interaction.response.send_message(text, ephemeral=True)

    async def remember_message(self, interaction: discord.Interaction, message: discord.Message) -> None:
        """Remember what one's own message says (as ``/memories remember`` with its text)."""
        if message.author.id != interaction.user.id:
            await self.refuse(interaction, NOT_YOURS)
            return
        if message.type not in (discord.MessageType.default, discord.MessageType.reply):
            # a notice Discord wrote under their name ("started a thread", a pin): its text is not theirs
            await self.refuse(interaction, "That is a notice from Discord, not something you wrote. Nothing was changed.")
            return
        text = readable_text(message).strip()
        if not text:
            await self.refuse(interaction, "That message has no text I could remember. Nothing was changed.")
            return
        if len(text) > MAX_CONTENT:
            await self.refuse(interaction, f"That message is longer than the {MAX_CONTENT} characters one memory "
                              "holds: use `/memories remember` with the part worth keeping. Nothing was changed.")
            return
        await interaction.response.defer(ephemeral=True, thinking=True)
        await teach(self.bot, interaction, text, origin_of(interaction, message))

    async def forget_message(self, interaction: discord.Interaction, message: discord.Message) -> None:
        """Show what was learned from one's own message and erase it after a confirmation."""
        if message.author.id != interaction.user.id:
            await self.refuse(interaction, NOT_YOURS.replace("learn about", "forget what I learned about"))
            return
        await interaction.response.defer(ephemeral=True, thinking=True)
        mine = str(message.id)
        learned = [m for m in await self.engine.list_memories(interaction.user.id) if mine in m.about_messages()]
        if not learned:
            # Not learned yet (the conversation has not gone quiet, the model is down, it waits to be
            # answered): it would be moments later. Nothing learned is lost, so no confirmation: it is taken
            # out of the queue at once, or marked never to be learned while it still waits for its answer.
            chat = self.bot.get_cog("Chat")
            held = chat is not None and chat.forget_waiting(message.channel.id, message.id)
            if await self.engine.waiting_to_learn(interaction.user.id, str(message.channel.id), mine):
                changes = await self.engine.delete_memories(interaction.user.id, [], from_message=mine,
                                                            by=Actor("user", str(interaction.user.id)))
                await reply(interaction, f"I had just learned {len(changes.deleted)} things from that message: they are"
                            " forgotten, and I won't learn from it again." if changes.deleted else
                            "I hadn't learned anything from that message yet, and now I won't.")
                return
            await reply(interaction, "I hadn't learned anything from that message yet, and now I won't." if held
                        else "I didn't learn anything from that message: there is nothing to forget.")
            return
        listing = "\n".join(f"`{m.short_id}` {fmt.clip(m.content, 150)}" for m in learned[:10])
        more = f"\n…and {len(learned) - 10} more." if len(learned) > 10 else ""
        ok, button = await confirm(interaction, f"Forget the {len(learned)} things I learned from that message?\n"
                                   f"{listing}{more}", confirm_label="Forget",
                                   cancelled="Cancelled: nothing was forgotten.")
        if not ok:
            return
        chat = self.bot.get_cog("Chat")
        if chat is not None:  # its turn may still wait (a "Remember this" before it was answered): never learned
            chat.forget_waiting(message.channel.id, message.id)
        async with confirmed_work(button, f"forgetting memories of user {interaction.user.id}") as work:
            changes = await self.engine.delete_memories(interaction.user.id, [m.key for m in learned],
                                                        by=Actor("user", str(interaction.user.id)), from_message=mine)
        if work.ok:  # reported after the block: a failure to report is not a failure of the erasure
            await report_done(button, f"Forgotten: {len(changes.deleted)} memories.")

    async def purge_member(self, interaction: discord.Interaction, member: discord.Member | discord.User) -> None:
        """``/purge-memories`` on this member (the checks ran before this is called)."""
        await interaction.response.defer(ephemeral=True, thinking=True)
        await purge(self.bot, interaction, member)


async def setup(bot: MemoryBot) -> None:
    """discord.py's extension hook (``load_extension("cogs.context_menus")``): add the right-click menus."""
    await bot.add_cog(ContextMenus(bot))
