"""``/settings``: a server's admins run the bot from Discord.

Who: members with Manage Server, server-wide (from their roles). The group has
``default_permissions(manage_guild=True)`` so the client hides it from everyone else, and every use is
checked again here (``interaction_check``), and once more when the Confirm button is pressed: a client
can be bypassed and a role can lose the permission between the command's display and its use.

What (each change is shown, confirmed with a button, then written to the audit log and the mod-log
channel; every answer is ephemeral): channels and threads where the bot answers every message, channels
where it ignores mentions, the server's instructions for the bot (added after the operator's persona),
whether it learns here and uses memories here, whether it deletes its reply to a message a member
deleted (off by default), the server's daily token budget and each member's (within
the operator's caps), the mod-log channel, ``reset`` (back to the operator's default) and ``show``.
Bad input (another server's channel, a channel or thread the bot cannot see or post in, instructions
over the cap, a budget over the cap) gets one clear sentence and changes nothing.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any, Callable, Iterable

import discord
from discord import app_commands
from discord.ext import commands

from bot.client import MemoryBot
from bot.engine import OPERATOR, Edit, GuildPolicy, SettingRefused, channel_listed, channel_persona, reset, set_field
from cogs._installs import guild_installed
from cogs._modlog import post_mod_log
from cogs.views import confirm, start_work, still_allowed

log = logging.getLogger(__name__)
audit = logging.getLogger("bot.audit")

AnyChannel = app_commands.AppCommandChannel | app_commands.AppCommandThread
FAILED = "Sorry, I couldn't save that just now: nothing was changed. Please try again in a moment."
THREADS = (discord.ChannelType.public_thread, discord.ChannelType.private_thread, discord.ChannelType.news_thread)
RESETTABLE = {
    "respond_channels": "channels where I answer every message",
    "mentions_off": "channels where I ignore mentions",
    "persona": "this server's instructions",
    "channel_personas": "every channel's own instructions",
    "learning": "learning",
    "use_memories": "using memories",
    "daily_tokens": "the server's daily token budget",
    "member_daily_tokens": "each member's daily token budget",
    "mod_log_channel": "the mod-log channel",
    "delete_replies": "deleting my replies to deleted messages",
}

# The settings that name channels: resetting one changes what happens in each channel it names.
CHANNEL_SETTINGS = frozenset({"respond_channels", "mentions_off", "channel_personas", "mod_log_channel"})


def has_manage_server(interaction: discord.Interaction) -> bool:
    """Manage Server from the member's roles, in a server; raises the error the central handler explains."""
    if interaction.guild_id is None or interaction.guild is None:
        raise app_commands.NoPrivateMessage()
    guild_installed(interaction)  # not as a user-installed app, nor in a server I am not in
    member = interaction.user
    if not isinstance(member, discord.Member) or not member.guild_permissions.manage_guild:
        raise app_commands.MissingPermissions(["manage_guild"])
    return True


def _onoff(value: bool) -> str:
    return "on" if value else "off"


def _tokens(value: int) -> str:
    return f"{value:,} tokens a day" if value else "no limit"


def _channels(ids: Iterable[str], limit: int = 900) -> str:
    """The channels as mentions, cut with "…and N more" within ``limit`` characters (an embed field holds
    1,024, and a list may name up to 100 channels: about 2,400 characters)."""
    ordered = sorted(ids, key=lambda c: (len(str(c)), str(c)))
    out: list[str] = []
    for n, c in enumerate(ordered):
        rest = len(ordered) - n
        tail = f", …and {rest - 1} more" if rest > 1 else ""
        if len(", ".join([*out, f"<#{c}>"])) + len(tail) > limit:
            return ", ".join(out) + f", …and {rest} more"
        out.append(f"<#{c}>")
    return ", ".join(out) or "none"


@app_commands.guild_only()
@app_commands.allowed_installs(guilds=True, users=False)
@app_commands.default_permissions(manage_guild=True)
class SettingsCommands(commands.GroupCog, group_name="settings", group_description="How I behave in this server (Manage Server)"):
    """The ``/settings`` group."""

    def __init__(self, bot: MemoryBot) -> None:
        self.bot = bot
        super().__init__()

    async def interaction_check(self, interaction: discord.Interaction) -> bool:
        """The real check behind ``default_permissions``, on every use."""
        return has_manage_server(interaction)

    # ---- helpers
    def _refuse_channel(self, interaction: discord.Interaction, channel: AnyChannel, *, post: bool) -> str | None:
        """Why ``channel`` cannot be used (None when it can): another server's, a category, invisible to me."""
        guild = interaction.guild
        assert guild is not None
        # discord.py stamps resolved channels with the interaction's server, so ask the cache whose it is.
        known = self.bot.get_channel(channel.id)
        if channel.guild_id != guild.id or (known is not None and getattr(known, "guild", guild).id != guild.id):
            return "That channel belongs to another server: pick one of this server's channels. Nothing was changed."
        if channel.type == discord.ChannelType.category:
            return "That is a category, not a channel: pick a channel or a thread. Nothing was changed."
        real = guild.get_channel_or_thread(channel.id)
        kind = "thread" if channel.type in THREADS else "channel"
        if real is None or not real.permissions_for(guild.me).view_channel:
            return f"I can't see that {kind}; give me access to it first. Nothing was changed."
        if not self._member_sees(interaction, channel, real):
            return f"You can't see that {kind} yourself: pick one you can see. Nothing was changed."
        perms = real.permissions_for(guild.me)
        # In a forum or media channel the bot answers inside its posts (threads): that is Send Messages in Threads.
        in_threads = isinstance(real, (discord.Thread, discord.ForumChannel))
        can_post = perms.send_messages_in_threads if in_threads else perms.send_messages
        if post and not can_post:
            return f"I can see that {kind} but I'm not allowed to send messages there. Nothing was changed."
        if post and isinstance(real, discord.Thread) and real.locked and not perms.manage_threads:
            # discord.py's permissions ignore a lock; Discord refuses a message there without Manage Threads
            return "That thread is locked, and I can't post in a locked thread. Nothing was changed."
        return None

    @staticmethod
    def _hidden_from(viewer: discord.abc.User | None, guild: discord.Guild, channel_ids: Iterable[str]) -> set[str]:
        """Which of these channels the admin cannot see, by the cache (a channel it does not hold, such as an
        archived thread, counts as seen: it was set by someone who could see it)."""
        if not isinstance(viewer, discord.Member):
            return set()
        return {c for c in channel_ids if (ch := guild.get_channel_or_thread(int(c))) is not None
                and not ch.permissions_for(viewer).view_channel}

    @staticmethod
    def _member_sees(interaction: discord.Interaction, channel: AnyChannel, real: Any) -> bool:
        """Whether the admin can see the channel: Manage Server is not access to every channel, and a
        channel's ID can be sent from a modified client without the picker; settings for a channel they
        cannot read (answering everything there, instructions for the bot) are not theirs to change.
        Discord resolves the option with the admin's permissions in it; the cache is asked otherwise."""
        given = getattr(channel, "permissions", None)
        if isinstance(given, discord.Permissions):
            return given.view_channel
        member = interaction.user
        return real is None or not isinstance(member, discord.Member) or real.permissions_for(member).view_channel

    async def _parent_decides(self, interaction: discord.Interaction, channel: AnyChannel, does: str, listed: str) -> bool:
        """Whether a thread's parent channel has the setting the admin wants off for the thread alone. A thread
        follows its parent, and no list excepts one: the change was confirmed as "Done" and changed nothing.
        Refused then, with where to change it (True: answered)."""
        parent = getattr(channel, "parent_id", None)
        if channel.type not in THREADS or parent is None:
            return False
        await interaction.response.defer(ephemeral=True, thinking=True)
        assert interaction.guild is not None
        chosen = getattr(await self.bot.engine.guild_policy(interaction.guild.id), listed)
        if str(parent) not in chosen or str(channel.id) in chosen:  # its own entry can always be taken out
            return False
        await interaction.followup.send(f"<#{parent}> {does}, and its threads follow it: change it there. "
                                        "Nothing was changed.", ephemeral=True)
        return True

    def _operator_channels_here(self, guild: discord.Guild) -> frozenset[str]:
        return frozenset(c for c in self.bot.engine.operator_defaults().respond_channels if guild.get_channel_or_thread(int(c)))

    async def _propose(
        self, interaction: discord.Interaction, question: str, edit: Edit, describe: Callable[[GuildPolicy], str],
        *, embed: discord.Embed | None = None,
    ) -> None:
        """Check the change, ask for confirmation, re-check the permission on the click, then apply and audit."""
        if not interaction.response.is_done():  # a caller that had to read first has deferred already
            await interaction.response.defer(ephemeral=True, thinking=True)
        guild = interaction.guild
        assert guild is not None
        try:
            await self.bot.engine.preview_settings(guild.id, edit)
        except SettingRefused as refused:
            await interaction.followup.send(str(refused), ephemeral=True)
            return
        ok, button = await confirm(interaction, question, confirm_label="Apply", embed=embed)
        if not ok:
            return
        if not await still_allowed(button, has_manage_server,
                                   "You no longer have the Manage Server permission: nothing was changed."):
            return
        await start_work(button)
        try:
            before, after = await self.bot.engine.change_settings(guild.id, edit, by=str(button.user.id))
        except SettingRefused as refused:  # someone else changed something meanwhile
            await button.edit_original_response(content=str(refused), view=None, embed=None)
            return
        except Exception:  # noqa: BLE001 - the database failed: a short apology here, the details in the log
            log.exception("changing the settings of server %s failed", guild.id)
            await button.edit_original_response(content=FAILED, view=None, embed=None)
            return
        what = describe(after)
        await button.edit_original_response(content=f"Done: {what}.", view=None, embed=None)
        await self._audit(interaction, button.user, what, after, before)

    async def _audit(self, interaction: discord.Interaction, admin: discord.abc.User, what: str,
                     after: GuildPolicy, before: GuildPolicy | None = None) -> None:
        """The change in the process's audit log and in the mod-log channel; a change of the mod-log channel
        itself goes to the old one too, so the staff who read it see where the lines went (or that they stop)."""
        guild = interaction.guild
        assert guild is not None
        when = datetime.now(timezone.utc).isoformat(timespec="seconds")
        line = f"server settings: {admin} ({admin.id}) changed {what} in server {guild.name} ({guild.id}) at {when}"
        audit.warning(line)
        await post_mod_log(guild, after.mod_log_channel, line)
        if before is not None and before.mod_log_channel and before.mod_log_channel != after.mod_log_channel:
            await post_mod_log(guild, before.mod_log_channel, line)

    # ---- commands
    @app_commands.command(name="show")
    async def show(self, interaction: discord.Interaction) -> None:
        """Show this server's settings and where each comes from."""
        await interaction.response.defer(ephemeral=True, thinking=True)
        guild = interaction.guild
        assert guild is not None
        policy = await self.bot.engine.guild_policy(guild.id)
        used = await self.bot.engine.tokens_today(str(guild.id))
        await interaction.followup.send(embed=self.render(guild, policy, used, interaction.user), ephemeral=True)

    def render(self, guild: discord.Guild, p: GuildPolicy, used_today: int,
               viewer: discord.User | discord.Member | None = None) -> discord.Embed:
        def src(name: str) -> str:
            return " *(operator default)*" if p.sources.get(name) == OPERATOR else " *(set here)*"

        def mine(name: str, channel_id: str) -> bool:
            """Whether to show a channel of this setting: every one the server set (each was checked to be
            its own when set; a thread that auto-archived is not in the cache but still is), and of the
            operator's list, which names every server's channels, those the cache knows to be here."""
            return p.sources.get(name) != OPERATOR or guild.get_channel_or_thread(int(channel_id)) is not None

        here = frozenset(c for c in p.respond_channels if mine("respond_channels", c))
        embed = discord.Embed(title=f"Settings in {guild.name}",
                              description=p.persona_addition or "*No instructions of this server's own.*")
        embed.add_field(name="Instructions", value=("shown above" if p.persona_addition else "none") + src("persona"),
                        inline=False)
        embed.add_field(name="Answers every message in", value=_channels(here) + src("respond_channels"), inline=False)
        embed.add_field(name="Ignores mentions in", value=_channels(p.mentions_off) + src("mentions_off"), inline=False)
        embed.add_field(name="Learns from conversations", value=_onoff(p.learning) + src("learning"))
        embed.add_field(name="Uses memories in replies", value=_onoff(p.use_memories) + src("use_memories"))
        embed.add_field(name="Daily token budget",
                        value=f"{_tokens(p.daily_tokens)} ({used_today:,} used today)" + src("daily_tokens"),
                        inline=False)
        embed.add_field(name="Each member's daily budget", value=_tokens(p.member_daily_tokens) + src("member_daily_tokens"),
                        inline=False)
        personas = sorted(p.channel_personas.items())  # set by the server only, for its own channels
        # A channel the admin cannot see keeps its instructions to those who can.
        unseen = self._hidden_from(viewer, guild, p.channel_personas)
        hidden = len(unseen)
        personas = [(c, t) for c, t in personas if c not in unseen]
        if hidden and not personas:
            embed.add_field(name="Channel instructions (after the server's)",
                            value=f"{hidden} in channels you can't see.", inline=False)
        if personas:
            listing, shown = "", 0
            for c, t in personas:
                line = f"<#{c}>: {discord.utils.escape_mentions(t)[:150]}{'…' if len(t) > 150 else ''}\n"
                if len(listing) + len(line) > 950:
                    break
                listing, shown = listing + line, shown + 1
            if shown < len(personas):
                listing += f"…and {len(personas) - shown} more."
            if hidden:
                listing += f"\n({hidden} more in channels you can't see.)"
            embed.add_field(name="Channel instructions (after the server's)", value=listing.strip(), inline=False)
        embed.add_field(name="Deletes its reply when the message is deleted",
                        value=_onoff(p.delete_replies) + src("delete_replies"))
        log_here = p.mod_log_channel if p.mod_log_channel and mine("mod_log_channel", p.mod_log_channel) else None
        embed.add_field(name="Mod-log channel", value=(f"<#{log_here}>" if log_here else "none") + src("mod_log_channel"),
                        inline=False)
        if len(embed) > 6000 and embed.description:  # Discord refuses an embed over 6,000 characters in all
            cut = max(0, len(embed.description) - (len(embed) - 5990))
            embed.description = embed.description[:cut] + "…"
        return embed

    @app_commands.command(name="answer-all")
    @app_commands.describe(channel="A channel or thread of this server",
                           on="Answer every message there (on), or only mentions and replies (off)")
    async def answer_all(self, interaction: discord.Interaction, channel: AnyChannel, on: bool) -> None:
        """Choose channels and threads where I answer every message."""
        if (why := self._refuse_channel(interaction, channel, post=on)) is not None:
            await interaction.response.send_message(why, ephemeral=True)
            return
        assert interaction.guild is not None
        if not on and await self._parent_decides(interaction, channel, "answers every message", "respond_channels"):
            return
        start = self._operator_channels_here(interaction.guild)
        edit = channel_listed("respond_channels", str(channel.id), on, start)
        verb = "answer every message" if on else "answer only mentions and replies"
        await self._propose(interaction, f"Make me {verb} in <#{channel.id}>?", edit,
                            lambda p: f"answer every message in <#{channel.id}>: {_onoff(on)}")

    @app_commands.command(name="mentions")
    @app_commands.describe(channel="A channel or thread of this server", on="Answer mentions and replies there (on) or ignore them (off)")
    async def mentions(self, interaction: discord.Interaction, channel: AnyChannel, on: bool) -> None:
        """Choose whether I answer mentions at all in a channel."""
        if (why := self._refuse_channel(interaction, channel, post=False)) is not None:
            await interaction.response.send_message(why, ephemeral=True)
            return
        if on and await self._parent_decides(interaction, channel, "ignores mentions", "mentions_off"):
            return
        edit = channel_listed("mentions_off", str(channel.id), not on, frozenset())
        question = (f"Answer mentions and replies in <#{channel.id}> again?" if on
                    else f"Ignore mentions and replies to me in <#{channel.id}>? "
                         "(Channels where I answer every message still get answers.)")
        await self._propose(interaction, question, edit, lambda p: f"answer mentions in <#{channel.id}>: {_onoff(on)}")

    @app_commands.command(name="instructions")
    @app_commands.describe(text="What I should know or do in this server (added to my persona)",
                           channel="Only in this channel (and its threads and forum posts), after the server's")
    async def instructions(self, interaction: discord.Interaction, text: app_commands.Range[str, 1, 4000],
                           channel: AnyChannel | None = None) -> None:
        """Give me this server's instructions, or one channel's (added after my persona)."""
        text = text.strip()
        if channel is None:
            embed = discord.Embed(title="New instructions for this server", description=text or "(empty)")
            await self._propose(interaction, "Use these instructions in this server?", set_field("persona", text),
                                lambda p: f"this server's instructions: set ({len(text):,} characters)", embed=embed)
            return
        if (why := self._refuse_channel(interaction, channel, post=False)) is not None:
            await interaction.response.send_message(why, ephemeral=True)
            return
        embed = discord.Embed(title="New instructions for one channel", description=text or "(empty)")
        await self._propose(interaction, f"Use these instructions in <#{channel.id}> (and its threads and posts), "
                            "after this server's?", channel_persona(str(channel.id), text),
                            lambda p: f"the instructions of <#{channel.id}>: set ({len(text):,} characters)", embed=embed)

    @app_commands.command(name="learning")
    @app_commands.describe(on="Learn from conversations in this server (on) or not (off)")
    async def learning(self, interaction: discord.Interaction, on: bool) -> None:
        """Choose whether I learn about people from conversations in this server."""
        question = ("Learn from conversations in this server again?" if on else
                    "Stop learning from conversations in this server? (What waits to be learned is dropped; "
                    "what I already know stays until people or moderators remove it.)")
        await self._propose(interaction, question, set_field("learning", on), lambda p: f"learning: {_onoff(on)}")

    @app_commands.command(name="memories")
    @app_commands.describe(on="Use what I remember about people in my replies here (on) or not (off)")
    async def memories(self, interaction: discord.Interaction, on: bool) -> None:
        """Choose whether I use what I remember about people in this server."""
        question = ("Use memories in my replies in this server again?" if on
                    else "Stop using memories in my replies in this server? (Nothing is deleted.)")
        await self._propose(interaction, question, set_field("use_memories", on),
                            lambda p: f"using memories: {_onoff(on)}")

    @app_commands.command(name="delete-replies")
    @app_commands.describe(on="When a member deletes a message I answered, delete my reply too (on) or keep it (off)")
    async def delete_replies(self, interaction: discord.Interaction, on: bool) -> None:
        """Choose whether I delete my reply when the message I answered is deleted."""
        question = ("When a member deletes a message I answered, delete my reply to it too (every part of it)?"
                    if on else "Keep my replies when the message I answered is deleted?")
        await self._propose(interaction, question, set_field("delete_replies", on),
                            lambda p: f"deleting my replies to deleted messages: {_onoff(on)}")

    @app_commands.command(name="budget")
    @app_commands.describe(tokens="Most tokens I may use in this server per UTC day")
    async def budget(self, interaction: discord.Interaction, tokens: app_commands.Range[int, 1, 1_000_000_000]) -> None:
        """Set this server's daily token budget (within this bot's limit)."""
        await self._propose(interaction, f"Set this server's daily token budget to {tokens:,}?",
                            set_field("daily_tokens", tokens),
                            lambda p: f"the server's daily token budget: {_tokens(p.daily_tokens)}")

    @app_commands.command(name="member-budget")
    @app_commands.describe(tokens="Most tokens one member may use here per UTC day")
    async def member_budget(self, interaction: discord.Interaction,
                            tokens: app_commands.Range[int, 1, 1_000_000_000]) -> None:
        """Set each member's daily token budget in this server (within this bot's limit)."""
        await self._propose(interaction, f"Set each member's daily token budget here to {tokens:,}?",
                            set_field("member_daily_tokens", tokens),
                            lambda p: f"each member's daily token budget: {_tokens(p.member_daily_tokens)}")

    @app_commands.command(name="mod-log")
    @app_commands.describe(channel="Where I post a line for every settings change and moderator purge")
    async def mod_log(self, interaction: discord.Interaction, channel: AnyChannel) -> None:
        """Choose the channel where I log settings changes and moderator purges."""
        if (why := self._refuse_channel(interaction, channel, post=True)) is not None:
            await interaction.response.send_message(why, ephemeral=True)
            return
        if channel.type in (discord.ChannelType.forum, discord.ChannelType.media):
            # A forum takes posts (threads), not messages: the log goes in one of its posts, or a text channel.
            await interaction.response.send_message(
                "A forum or media channel takes posts, not messages: pick a text channel, or one post (thread) "
                "of that forum. Nothing was changed.", ephemeral=True)
            return
        await self._propose(interaction, f"Post the mod log in <#{channel.id}>?",
                            set_field("mod_log_channel", str(channel.id)),
                            lambda p: f"the mod-log channel: <#{channel.id}>")

    @app_commands.command(name="reset")
    @app_commands.describe(setting="The setting to put back to this bot's default",
                           channel="With instructions: remove only this channel's own instructions")
    @app_commands.choices(setting=[app_commands.Choice(name=v, value=k) for k, v in RESETTABLE.items()])
    async def reset_setting(self, interaction: discord.Interaction, setting: app_commands.Choice[str],
                            channel: AnyChannel | None = None) -> None:
        """Put one setting back to this bot's default (or remove one channel's instructions)."""
        label = RESETTABLE.get(setting.value)
        if label is None:  # a client sending a value that was never offered
            await interaction.response.send_message("That is not a setting I know. Nothing was changed.", ephemeral=True)
            return
        if channel is not None:
            if setting.value not in ("persona", "channel_personas"):
                await interaction.response.send_message(
                    "Only instructions can be reset for one channel. Nothing was changed.", ephemeral=True)
                return
            real = interaction.guild.get_channel_or_thread(channel.id) if interaction.guild else None
            if not self._member_sees(interaction, channel, real):
                await interaction.response.send_message(
                    "You can't see that channel yourself: pick one you can see. Nothing was changed.", ephemeral=True)
                return
            await self._propose(interaction, f"Remove the instructions of <#{channel.id}>?",
                                channel_persona(str(channel.id), None),
                                lambda p: f"the instructions of <#{channel.id}>: removed")
            return
        if setting.value in CHANNEL_SETTINGS and interaction.guild is not None:
            # Settings of channels the admin cannot see are not theirs to change (see ``_member_sees``), and
            # a reset of a whole list changes every channel in it. Answered first: reading the settings (a
            # database read past the cache) can outlast Discord's 3 s.
            await interaction.response.defer(ephemeral=True, thinking=True)
            policy = await self.bot.engine.guild_policy(interaction.guild.id)
            value = getattr(policy, setting.value) if policy.sources.get(setting.value) != OPERATOR else None
            named = {value} if isinstance(value, str) else set(value or ())  # (the operator's: a reset changes nothing)
            if setting.value == "respond_channels":  # the operator's channels stay listed after the reset
                named -= self._operator_channels_here(interaction.guild)
            if hidden := len(self._hidden_from(interaction.user, interaction.guild, named)):
                await interaction.followup.send(
                    f"{hidden} of the channels in {label} are ones you can't see: change the others one channel "
                    "at a time, or ask someone who can see them. Nothing was changed.", ephemeral=True)
                return
        await self._propose(interaction, f"Put {label} back to this bot's default?", reset(setting.value),
                            lambda p: f"{label}: back to the default")


async def setup(bot: MemoryBot) -> None:
    """discord.py's extension hook (``load_extension("cogs.settings")``): add the /settings command group."""
    await bot.add_cog(SettingsCommands(bot))
