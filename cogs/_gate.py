"""Who may talk to the bot: the allow/block lists in ``[access]`` (how fast is the engine's: ``policy.limits``).

Not an extension: helpers for the chat cog. Slash commands are not gated: everyone can always see,
export and erase what the bot holds about them.
"""

from __future__ import annotations

import discord

from bot.settings import AccessSection


def access_allows(message: discord.Message, access: AccessSection) -> bool:
    """Whether the lists in ``[access]`` let this message be answered."""
    author = message.author
    if author.id in access.block_users or (access.allow_users and author.id not in access.allow_users):
        return False
    if message.guild is None:
        return access.dms_enabled
    channel = message.channel
    ids = {channel.id, getattr(channel, "parent_id", None)}
    if ids & set(access.block_channels) or (access.allow_channels and not ids & set(access.allow_channels)):
        return False
    roles = {r.id for r in getattr(author, "roles", [])}
    if roles & set(access.block_roles) or (access.allow_roles and not roles & set(access.allow_roles)):
        return False
    return True
