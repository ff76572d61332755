"""The one home for app-command errors: a clear ephemeral sentence for the user, a traceback for the log."""

from __future__ import annotations

import logging

import discord
from discord import app_commands
from discord.ext import commands

from bot.client import MemoryBot
from cogs._failures import log_failure
from cogs._installs import NotInstalledHere
from cogs.views import ALREADY_ANSWERED, Prompts

log = logging.getLogger(__name__)

GENERIC = "Something went wrong on my side. It has been logged; please try again later."
EXPIRED = "This prompt has expired (I restarted since it was shown): nothing was done. Run the command again."


def _permission_names(perms: list[str]) -> str:
    return ", ".join(p.replace("_", " ").replace("guild", "server").title() for p in perms)


def user_message(error: app_commands.AppCommandError) -> str | None:
    """The sentence for errors the user can act on; None for the ones that are our fault."""
    if isinstance(error, app_commands.MissingPermissions):
        return f"You need the {_permission_names(error.missing_permissions)} permission to use this command."
    if isinstance(error, app_commands.BotMissingPermissions):
        return f"I need the {_permission_names(error.missing_permissions)} permission here to do that."
    if isinstance(error, app_commands.NoPrivateMessage):
        return "This command only works in a server."
    if isinstance(error, NotInstalledHere):
        return str(error)
    if isinstance(error, app_commands.CommandOnCooldown):
        return f"Slow down a little: try again in {error.retry_after:.0f} seconds."
    if isinstance(error, app_commands.CheckFailure):
        return "You can't use this command here."
    return None


class Errors(commands.Cog):
    """Installs the tree's error handler on load and restores the default on unload."""

    def __init__(self, bot: MemoryBot) -> None:
        self.bot = bot
        self._previous = bot.tree.on_error
        self.prompts = Prompts()  # the prompts with buttons this process showed (``cogs.views.confirm``)

    @commands.Cog.listener()
    async def on_interaction(self, interaction: discord.Interaction) -> None:
        """A button no live view answers: a prompt shown before this process started (a restart, a deploy),
        whose view died with the old process, or a second click on a prompt of this process already answered
        or timed out. discord.py answers nothing there, and Discord shows "This interaction failed" without
        saying whether anything was deleted: the click is told that it did nothing. Every view here lives
        in the process that showed it (none is persistent). A view takes its click before this listener
        runs (discord.py starts the view's task first, and ``OwnedView.interaction_check`` notes the click
        before its first await)."""
        message = interaction.message
        if interaction.type is not discord.InteractionType.component or message is None:
            return
        why = self.prompts.unanswered(message.id, interaction.id)
        if why is None or interaction.response.is_done():
            return
        try:
            await interaction.response.send_message(EXPIRED if why == "expired" else ALREADY_ANSWERED, ephemeral=True)
        except discord.HTTPException:
            log.debug("could not answer a button no live view took", exc_info=True)

    async def cog_load(self) -> None:
        self.bot.tree.on_error = self.on_app_command_error

    async def cog_unload(self) -> None:
        self.bot.tree.on_error = self._previous

    async def on_app_command_error(self, interaction: discord.Interaction, error: app_commands.AppCommandError) -> None:
        text = user_message(error)
        if text is None:
            name = interaction.command.qualified_name if interaction.command else "?"
            cause = getattr(error, "original", error)  # a command's own exception, wrapped by discord.py
            log_failure(log, self.bot.engine.outages, cause, "app command /%s failed", name)
            text = GENERIC
        try:
            if interaction.response.is_done():
                await interaction.followup.send(text, ephemeral=True)
            else:
                await interaction.response.send_message(text, ephemeral=True)
        except discord.HTTPException:
            log.warning("could not tell the user about an error", exc_info=True)


async def setup(bot: MemoryBot) -> None:
    """discord.py's extension hook (``load_extension("cogs.errors")``): add the error handler for every command."""
    await bot.add_cog(Errors(bot))
