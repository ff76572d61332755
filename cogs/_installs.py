"""Where an interaction comes from: a server the bot is in, or somewhere it only reaches as a user-installed app.

Not an extension: helpers for the memories, context-menu, moderation and settings cogs.

A user-installed command can be used in any server, also one the bot is not a member of (Discord sends
``context`` 0 with a ``guild_id`` but no bot member; discord.py then builds a stand-in ``interaction.guild``,
so ``interaction.guild`` is no sign of membership: the bot's own guild cache is). What is taught there is
kept like something said in a DM (``guild_id`` ``"dm"``): a server the bot is not in can never use it.
"""

from __future__ import annotations

import discord
from discord import app_commands

NOT_A_MEMBER = ("I'm not a member of this server, so I can't chat here or use server tools; a server admin can add me "
                "to the server for that. Your own `/memories` commands work everywhere.")


class NotInstalledHere(app_commands.CheckFailure):
    """A server-installed command used where the bot is not installed to the server (a user install)."""

    def __init__(self) -> None:
        super().__init__("This command needs me added to this server; it doesn't work as a user-installed app. "
                         + NOT_A_MEMBER)


def bot_in_server(interaction: discord.Interaction) -> bool:
    """Whether the interaction comes from a server the bot is a member of (False in DMs and group DMs too)."""
    return interaction.guild_id is not None and interaction.client.get_guild(interaction.guild_id) is not None


def memory_place(interaction: discord.Interaction) -> str:
    """The ``guild_id`` a memory taught through this interaction is kept under: the server, else ``"dm"``."""
    return str(interaction.guild_id) if bot_in_server(interaction) else "dm"


def guild_installed(interaction: discord.Interaction) -> bool:
    """A check for server tools: the bot is in this server and the command came through its server install.

    Runs after ``in_server`` (DMs get the "only in a server" answer first).
    """
    if not bot_in_server(interaction) or not interaction.is_guild_integration():
        raise NotInstalledHere()
    return True
