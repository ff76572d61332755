"""Posting an audit line to a server's mod-log channel. Not an extension: a helper for the cogs."""

from __future__ import annotations

import logging

import discord

log = logging.getLogger(__name__)


async def post_mod_log(guild: discord.Guild, channel_id: str | int | None, line: str) -> None:
    """Copy ``line`` to the mod-log channel (the server's, or the operator's) if it belongs to ``guild``.

    Nobody is pinged; a channel of another server or one the bot cannot post in keeps the line in the
    process log only.
    """
    if not channel_id:
        return
    channel = guild.get_channel_or_thread(int(channel_id)) or await _fetched(guild, int(channel_id))
    if channel is None:
        log.warning("mod-log channel %s is not in server %s; audit line kept in the log only", channel_id, guild.id)
        return
    if not isinstance(channel, discord.abc.Messageable):  # a forum, media channel or category set earlier
        log.warning("mod-log channel %s takes no messages; audit line kept in the log only", channel_id)
        return
    try:
        await channel.send(line[:2000], allowed_mentions=discord.AllowedMentions.none())
    except Exception:  # noqa: BLE001 - the audit copy never fails the change it reports (already made)
        log.warning("could not post to the mod-log channel %s", channel_id, exc_info=True)


async def _fetched(guild: discord.Guild, channel_id: int) -> discord.abc.GuildChannel | discord.Thread | None:
    """A mod-log channel discord.py has not cached: most often a thread that auto-archived (discord.py drops
    archived threads from its cache, and a restart only learns the active ones). Discord has it, and a
    message sent to an archived thread that is not locked unarchives it, so the audit line still goes out.
    None when Discord does not know it here (deleted, or another server's)."""
    elsewhere = guild._state.get_channel(channel_id)  # a channel this process knows in another server
    if elsewhere is not None and getattr(elsewhere, "guild", None) is not None and elsewhere.guild.id != guild.id:
        return None
    try:
        channel = await guild.fetch_channel(channel_id)
    except (discord.HTTPException, discord.InvalidData) as exc:
        # 404 (gone), 403 (no access), or another server's (discord.py raises InvalidData for those, after
        # the change was made: it surfaced as "something went wrong" after "Done"): the log keeps the line
        log.debug("mod-log channel %s could not be fetched: %r", channel_id, exc)
        return None
    return channel if getattr(channel, "guild", None) is not None and channel.guild.id == guild.id else None
