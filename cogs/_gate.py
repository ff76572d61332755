"""Who may talk to the bot: the allow/block lists in ``[access]`` (how fast is the engine's: ``policy.limits``).

Not an extension: helpers for the chat cog and the "Ask about this" menu (the one command that asks the
model). Other slash commands are not gated: everyone can always see, export and erase what the bot holds
about them.
"""

from __future__ import annotations

from typing import AbstractSet

import discord

from bot.settings import AccessSection


def access_allows(message: discord.Message, access: AccessSection) -> bool:
    """Whether the lists in ``[access]`` let this message be answered."""
    channel = message.channel
    return allows(access, message.author, in_dm=message.guild is None, channel_id=channel.id,
                  parent_id=getattr(channel, "parent_id", None))


def unknown_server(message: discord.Message) -> bool:
    """A server message from a server this process does not know: discord.py gives it no guild (a
    ``PartialMessageable`` that still carries the ``guild_id``), so every ``message.guild is None`` test
    would read it as a DM: answered without a mention, kept and learned in the DM scope, where it could
    reach the member's DMs. It is not handled at all: the server is unknown only when its GUILD_CREATE was
    lost or could not be read, and that server's settings (its own channel rules) are unknown too."""
    return message.guild is None and getattr(message.channel, "guild_id", None) is not None


def interaction_allows(interaction: discord.Interaction, access: AccessSection) -> bool:
    """Whether the lists in ``[access]`` let a command that asks the model ("Ask about this") be answered:
    the same lists as a message in that channel, so a blocked member cannot get answers through a menu.

    Used from a person's own install in a server the bot is not in, it counts as a DM (as the engine counts
    it: no server's settings apply there, and nothing of that server reaches the bot otherwise), so an
    operator's ``dms_enabled = false`` holds there too."""
    channel = interaction.channel
    guild_id = interaction.guild_id
    in_dm = guild_id is None or interaction.client.get_guild(guild_id) is None
    return allows(access, interaction.user, in_dm=in_dm,
                  channel_id=interaction.channel_id, parent_id=getattr(channel, "parent_id", None))


def blocked(access: AccessSection, author: discord.abc.User, roles: AbstractSet[int] | None = None) -> bool:
    """Whether the block lists name this author (by ID or role). Their messages are not read as channel
    context either: what a blocked member posts around a mention would otherwise still steer the answers.
    A member who may talk to the bot can still point at one (a reply, a forward, "Ask about this").
    ``roles``: the author's role IDs, where the author carries none (a message read from history)."""
    if roles is None:
        roles = {r.id for r in getattr(author, "roles", [])}
    return author.id in access.block_users or bool(roles & set(access.block_roles))


def allows(access: AccessSection, author: discord.abc.User, *, in_dm: bool, channel_id: int | None,
           parent_id: int | None) -> bool:
    if blocked(access, author) or (access.allow_users and author.id not in access.allow_users):
        return False
    if in_dm:
        return access.dms_enabled
    ids = {channel_id, parent_id} - {None}
    if ids & set(access.block_channels) or (access.allow_channels and not ids & set(access.allow_channels)):
        return False
    roles = {r.id for r in getattr(author, "roles", [])}
    return not (access.allow_roles and not roles & set(access.allow_roles))
