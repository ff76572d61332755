"""``/purge-memories``: a moderator removes what the bot learned about a member in this server.

What a purge removes (and why): the member's memories that were learned in *this* server and their
change log, their messages (and the bot's replies to them) in this server's stored conversations, any
running summary of this server's channels built from their messages, and their turns from this server
still waiting for extraction. A moderator's authority is per server, so a purge never touches what the
member told the bot in DMs or in other servers; the member can wipe everything themselves with
``/memories wipe``. The member's change log keeps one content-free line saying a moderator purged N
memories in this server. The command is a top-level command because Discord ignores default
permissions on subcommands; it needs Manage Messages both as a default permission (hidden from others
in the client) and as a real check on every invocation (the client-side setting can be overridden),
and that check wants it server-wide (from roles), not from one channel's overwrite. It is checked again
when Purge is pressed (as ``/settings`` does): a moderator demoted while the prompt was on screen purges nothing.
A moderator purges only members below them in the role hierarchy (``outranks``), as Discord's own
member actions require. It is a server-install command only: as a user-installed app (or in a server the bot is not in) it is
refused (``cogs._installs``). The "Purge memories" user menu (``cogs.context_menus``) runs the same checks
and the same :func:`purge`.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

import discord
from discord import app_commands
from discord.ext import commands

from bot.client import MemoryBot
from bot.engine import Actor
from cogs._installs import guild_installed
from cogs._modlog import post_mod_log
from cogs.views import confirm, confirmed_work, report_done, still_allowed

log = logging.getLogger(__name__)
audit = logging.getLogger("bot.audit")


def in_server(interaction: discord.Interaction) -> bool:
    """A runtime guard behind ``guild_only`` (which only tells the client): checked before permissions."""
    if interaction.guild_id is None:
        raise app_commands.NoPrivateMessage()
    return True


def has_server_wide_manage_messages(interaction: discord.Interaction) -> bool:
    """Manage Messages from the member's roles in the server, not a channel overwrite.

    ``checks.has_permissions`` looks at the channel's permissions, so a member given Manage Messages in
    one channel only could purge what the bot learned about someone across the whole server.
    """
    member = interaction.user
    if not isinstance(member, discord.Member) or not member.guild_permissions.manage_messages:
        raise app_commands.MissingPermissions(["manage_messages"])
    return True


def outranks(moderator: discord.abc.User, target: discord.abc.Snowflake, guild: discord.Guild) -> bool:
    """Whether ``moderator`` may purge ``target`` here: Discord's rule for acting on a member (kick, ban,
    timeout) is that your highest role is above theirs, and the owner is above everyone. A purge erases for
    good what the bot learned about someone, so a helper role with Manage Messages cannot purge an admin or
    the owner. Anyone may purge themselves; someone no longer in the server has no rank to respect."""
    if target.id == moderator.id or guild.owner_id == moderator.id:
        return True
    if target.id == guild.owner_id:
        return False
    member = target if isinstance(target, discord.Member) else guild.get_member(target.id)
    if member is None:
        return True
    return isinstance(moderator, discord.Member) and moderator.top_role > member.top_role


async def _as_now(guild: discord.Guild, target: discord.abc.User) -> discord.abc.Snowflake:
    """The member as Discord has them now (their roles may have changed since the command resolved them),
    or just their ID when they are no longer in the server (or Discord cannot say: the roles from the command
    then stand)."""
    try:
        return await guild.fetch_member(target.id)
    except discord.NotFound:
        return discord.Object(target.id)
    except discord.HTTPException:
        return target


class Moderation(commands.Cog):
    """Moderator tools."""

    def __init__(self, bot: MemoryBot) -> None:
        self.bot = bot

    @app_commands.command(name="purge-memories")
    @app_commands.describe(member="The member whose memories from this server should be removed")
    @app_commands.guild_only()
    @app_commands.allowed_installs(guilds=True, users=False)
    @app_commands.default_permissions(manage_messages=True)
    @app_commands.check(has_server_wide_manage_messages)
    @app_commands.check(guild_installed)
    @app_commands.check(in_server)
    async def purge_memories(self, interaction: discord.Interaction, member: discord.User) -> None:
        """Remove everything I learned about a member in this server (moderators only)."""
        await interaction.response.defer(ephemeral=True, thinking=True)
        await purge(self.bot, interaction, member)


async def purge(bot: MemoryBot, interaction: discord.Interaction, member: discord.abc.User) -> None:
    """After the checks and the defer: ask, re-check the permission on Purge, erase, audit, post to the mod log.

    The one code path of ``/purge-memories`` and the "Purge memories" user menu.
    """
    guild = bot.get_guild(interaction.guild_id or 0)
    assert guild is not None  # the checks: in a server the bot is in
    if not outranks(interaction.user, member, guild):
        await interaction.followup.send(f"{member.mention}'s highest role is not below yours: only someone above "
                                        "them (or the server owner) can purge their memories. Nothing was removed.",
                                        ephemeral=True)
        return
    # Every memory this server contributed to, not only those last changed here (see bot.engine.erasure.memories).
    memories = [m for m in await bot.engine.list_memories(member.id) if str(guild.id) in m.places()]
    ok, button = await confirm(
        interaction,
        f"Remove the {len(memories)} memories I learned about {member.mention} in this server? Memories also "
        "learned elsewhere go back to what they were before this server added to them. This cannot be undone.",
        confirm_label="Purge",
        cancelled="Cancelled: nothing was removed.",
    )
    if not ok:
        return
    if not await still_allowed(button, has_server_wide_manage_messages,
                               "You no longer have the Manage Messages permission: nothing was removed."):
        return
    # (answered at once: the rank check asks Discord, erasing can take longer than 3 s)
    what = f"the purge of member {member.id} in server {guild.id}"
    async with confirmed_work(button, what, recorded=lambda: bot.engine.erasure_recorded(member.id)) as work:
        if not outranks(button.user, await _as_now(guild, member), guild):  # roles changed while the prompt was shown
            await button.edit_original_response(content=f"{member.mention}'s highest role is no longer below yours: "
                                                "nothing was removed.", view=None)
            return
        result = await bot.engine.erase_person(
            member.id, guild_id=str(guild.id), by=Actor("moderator", str(interaction.user.id))
        )
    if work.ok:
        await _report_purge(bot, interaction, button, guild, member, result)


async def _report_purge(bot: MemoryBot, interaction: discord.Interaction, button: discord.Interaction,
                        guild: discord.Guild, member: discord.Member | discord.User, result: Any) -> None:
    """The purge is done: the audit line, the moderator's answer, then the mod log (its channel read from
    the server's settings: when that read fails, the purge is still reported as done)."""
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    line = (
        f"memory purge: moderator {interaction.user} ({interaction.user.id}) purged {result.memories} memories"
        f" and {result.messages} messages of member {member} ({member.id}) in server {guild.name} ({guild.id}) at {when}"
    )
    if result.reduced:
        line += f"; {result.reduced} memories also learned elsewhere were cut back to what was learned there"
    audit.warning(line)
    # (a prompt Discord no longer lets the bot edit, after a long wait for the erasure lock, is only logged:
    # the mod-log line below is still posted)
    await report_done(button, f"Done: removed {result.memories} memories and {result.messages} stored messages of "
                      f"{member.mention} from this server"
                      + (f", and cut {result.reduced} back to what was learned elsewhere." if result.reduced else "."))
    try:
        policy = await bot.engine.guild_policy(guild.id)
    except Exception:  # noqa: BLE001 - the purge is done; only the mod-log line is lost (the audit log has it)
        log.exception("could not read the mod-log channel of server %s after a purge", guild.id)
        return
    await post_mod_log(guild, policy.mod_log_channel, line)


async def setup(bot: MemoryBot) -> None:
    """discord.py's extension hook (``load_extension("cogs.moderation")``): add the moderator tools."""
    await bot.add_cog(Moderation(bot))
