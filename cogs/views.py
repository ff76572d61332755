"""Reusable views: a Confirm/Cancel prompt only its owner can press, and a memory pager.

Not an extension: helpers for the memories and moderation cogs.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import AsyncIterator, Awaitable, Callable, Sequence

import discord
from discord import app_commands
from discord.ext import commands

from cogs._installs import NOT_A_MEMBER

log = logging.getLogger(__name__)

CONFIRM_TIMEOUT = 60.0
PROMPTS_REMEMBERED = 2000
ALREADY_ANSWERED = "This prompt was already answered or has timed out: this click did nothing."


class OwnedView(discord.ui.View):
    """A view whose buttons answer only the person who opened it."""

    def __init__(self, owner_id: int, *, timeout: float = CONFIRM_TIMEOUT) -> None:
        super().__init__(timeout=timeout)
        self.owner_id = owner_id
        self.message: discord.InteractionMessage | None = None
        self.taken: set[int] = set()  # the clicks this view answers (``Prompts.unanswered``)

    async def interaction_check(self, interaction: discord.Interaction) -> bool:
        self.taken.add(interaction.id)  # first, before any await: the errors cog reads it (``Prompts``)
        if interaction.user.id != self.owner_id:
            await interaction.response.send_message("These buttons aren't for you.", ephemeral=True)
            return False
        return True


class ConfirmView(OwnedView):
    """Confirm/Cancel. ``value`` is True, False, or None when it timed out; the caller ``await view.wait()``s."""

    def __init__(self, owner_id: int, *, confirm_label: str = "Confirm", timeout: float = CONFIRM_TIMEOUT) -> None:
        super().__init__(owner_id, timeout=timeout)
        self.value: bool | None = None
        self.interaction: discord.Interaction | None = None
        self.confirm.label = confirm_label

    @discord.ui.button(label="Confirm", style=discord.ButtonStyle.danger)
    async def confirm(self, interaction: discord.Interaction, button: discord.ui.Button) -> None:
        await self._answer(interaction, True)

    @discord.ui.button(label="Cancel", style=discord.ButtonStyle.secondary)
    async def cancel(self, interaction: discord.Interaction, button: discord.ui.Button) -> None:
        await self._answer(interaction, False)

    async def _answer(self, interaction: discord.Interaction, value: bool) -> None:
        """The first click decides. Two clicks can reach the view before it stops (a double click, or
        Cancel then Confirm delivered in one read of the gateway): the later one is told it did nothing,
        never taken as the answer, and never left for Discord to report as failed."""
        if self.value is not None or self.is_finished():  # (finished: it timed out as the click came)
            await interaction.response.send_message(ALREADY_ANSWERED, ephemeral=True)
            return
        self.value, self.interaction = value, interaction
        self.stop()


def remember_prompt(client: discord.Client, message_id: int, view: OwnedView) -> None:
    """Note a prompt this process showed, for the errors cog (which owns ``Prompts``)."""
    errors = client.get_cog("Errors") if isinstance(client, commands.Bot) else None
    if errors is not None:
        errors.prompts.shown(message_id, view)


class Prompts:
    """The prompts with buttons this process showed (bounded), so a click no live view answers is told so.

    discord.py answers nothing for a click on a view that stopped (a second click after the first was
    taken) or that died with an earlier process (a restart while a prompt was on screen): Discord then
    shows "This interaction failed", without saying whether anything was erased. The errors cog answers
    those clicks (``unanswered``): "already answered" on a prompt of this process, "expired" on any other.
    Knowing the prompts by message ID, not by the time they were shown, needs no clock agreement with
    Discord, and a prompt shown a moment before a restart is still known as expired."""

    def __init__(self, most: int = PROMPTS_REMEMBERED) -> None:
        self.most = most
        # Each prompt's set of taken clicks, not its view: a pager's view holds every page of a listing
        # (up to a couple of MB at the memory cap), kept here long after Discord's 5 minutes were over.
        self._taken: dict[int, set[int]] = {}

    def shown(self, message_id: int, view: OwnedView) -> None:
        self._taken[message_id] = view.taken
        while len(self._taken) > self.most:
            del self._taken[next(iter(self._taken))]

    def unanswered(self, message_id: int, interaction_id: int) -> str | None:
        """None when a live view of this process takes this click; else what the click is told: whether the
        prompt is this process's (already answered or timed out) or an earlier one's."""
        taken = self._taken.get(message_id)
        if taken is None:
            return "expired"
        return None if interaction_id in taken else "answered"


async def confirm(
    interaction: discord.Interaction,
    question: str,
    *,
    confirm_label: str = "Confirm",
    cancelled: str = "Cancelled: nothing was changed.",
    embed: discord.Embed | None = None,
) -> tuple[bool, discord.Interaction | None]:
    """Ask ``question`` ephemerally with Confirm/Cancel; return (confirmed, the Confirm button's interaction).

    On Cancel the prompt is edited to ``cancelled``; on timeout, to say nothing happened. Both return
    (False, None), so the caller only handles the confirmed case. ``embed`` shows what is being confirmed
    (text too long for the question); it is removed with the buttons.
    """
    view = ConfirmView(interaction.user.id, confirm_label=confirm_label)
    extra = {"embed": embed} if embed is not None else {}
    gone = {"embed": None} if embed is not None else {}
    shown = await interaction.followup.send(question, view=view, ephemeral=True, wait=True, **extra)
    remember_prompt(interaction.client, shown.id, view)
    timed_out = await view.wait()
    if timed_out or view.value is None:
        try:
            await interaction.edit_original_response(content="Timed out: nothing was changed.", view=None, **gone)
        except discord.HTTPException:
            pass  # the person dismissed the prompt (10008) or the token expired: nothing left to tidy
        return False, None
    if not view.value:
        await view.interaction.response.edit_message(content=cancelled, view=None, **gone)
        return False, None
    return True, view.interaction


class PagerView(OwnedView):
    """Previous/Next buttons over pre-rendered pages (embeds)."""

    def __init__(self, owner_id: int, pages: Sequence[discord.Embed], *, timeout: float = 300.0) -> None:
        super().__init__(owner_id, timeout=timeout)
        self.pages = list(pages)
        self.index = 0
        self.shown: discord.WebhookMessage | None = None  # the message it is on, to take the buttons away
        self._sync()

    async def on_timeout(self) -> None:
        """Take the buttons off when they stop working: an expired button still shown invites a click that
        Discord then reports as "This interaction failed". The page shown stays."""
        if self.shown is None:
            return
        try:
            await self.shown.edit(view=None)
        except discord.HTTPException:
            pass  # dismissed by the person, or the token expired: nothing left to tidy

    def _sync(self) -> None:
        self.previous.disabled = self.index == 0
        self.next.disabled = self.index >= len(self.pages) - 1

    async def _show(self, interaction: discord.Interaction) -> None:
        self._sync()
        await interaction.response.edit_message(embed=self.pages[self.index], view=self)

    @discord.ui.button(label="Previous", style=discord.ButtonStyle.secondary)
    async def previous(self, interaction: discord.Interaction, button: discord.ui.Button) -> None:
        self.index = max(0, self.index - 1)
        await self._show(interaction)

    @discord.ui.button(label="Next", style=discord.ButtonStyle.secondary)
    async def next(self, interaction: discord.Interaction, button: discord.ui.Button) -> None:
        self.index = min(len(self.pages) - 1, self.index + 1)
        await self._show(interaction)



UNFINISHED = ("Sorry, something went wrong on my side, so this may not be done; it has been logged. "
              "Please try again in a moment.")
ERASURE_UNFINISHED = ("Sorry, something went wrong on my side before this erasure was done; it has been logged. "
                      "It is recorded, and I finish it on my own as soon as I can.")


class Work:
    """What ``confirmed_work`` yields: ``ok`` once its body ran through (then say what was done)."""

    def __init__(self) -> None:
        self.ok = False


@asynccontextmanager
async def confirmed_work(button: discord.Interaction, what: str, *,
                         recorded: Callable[[], Awaitable[bool]] | None = None) -> AsyncIterator[Work]:
    """The work after a Confirm click (``start_work`` first). If it fails (the database went away), the
    prompt itself becomes a short apology and the log gets the details: left as it was, the prompt still
    asked "Erase all ...? This cannot be undone." beside a separate apology. ``recorded()`` says whether
    an erasure that failed part-way is in the journal (it is then finished on its own, and the apology
    says so; "try again" would be the wrong advice). The caller reports success after the block, when
    ``ok``: a failure to report is not a failure of the work."""
    await start_work(button)
    work = Work()
    try:
        yield work
        work.ok = True
    except Exception:  # noqa: BLE001 - the person gets the apology, the log the details
        log.exception("%s failed after it was confirmed", what)
        failed = UNFINISHED
        try:
            if recorded is not None and await recorded():
                failed = ERASURE_UNFINISHED
        except Exception:  # noqa: BLE001 - the database is still away: the plain apology
            log.debug("could not read whether the erasure was recorded", exc_info=True)
        try:
            await button.edit_original_response(content=failed, view=None, embed=None)
        except discord.HTTPException:
            log.debug("could not put the apology on the prompt", exc_info=True)


async def report_done(button: discord.Interaction, content: str) -> None:
    """Put the work's result on the prompt, after ``confirmed_work``'s block: the work is done, so a prompt
    Discord no longer lets the bot edit (dismissed, its 15-minute token over after a long wait for the
    erasure lock) is only logged. Inside the block, that failure read as a failed erasure: an error
    traceback, and the prompt told to "try again"."""
    try:
        await button.edit_original_response(content=content, view=None, embed=None)
    except discord.HTTPException as exc:
        log.debug("could not report the result on the prompt: %s", exc.status)


async def start_work(button: discord.Interaction) -> None:
    """Answer the Confirm click by taking the buttons off the prompt, before the work begins.

    The work (an erasure, a settings change) can outlast Discord's 3 seconds, so the click must be answered
    first; answering it with a bare defer left Confirm and Cancel live until the final edit, and when the
    work failed (the database down) there was none: the person saw the apology beside a Confirm button
    whose click Discord then reports as "This interaction failed". The caller's last edit says what was done.
    """
    await button.response.edit_message(view=None)


async def still_allowed(button: discord.Interaction, check: Callable[[discord.Interaction], bool], refusal: str) -> bool:
    """Check a permission again on the confirming click (it may be gone since the prompt was shown); when it
    is, the prompt becomes ``refusal`` and nothing happens. A check that fails for another reason (the bot
    was removed from the server while the prompt was open) says its own reason the same way: the click is
    always answered, never left for Discord to report as failed."""
    try:
        check(button)
    except app_commands.MissingPermissions:
        await button.response.edit_message(content=refusal, view=None, embed=None)
        return False
    except app_commands.CheckFailure as failed:
        gone = button.guild_id is not None and button.client.get_guild(button.guild_id) is None
        reason = NOT_A_MEMBER if gone else str(failed) or refusal  # removed meanwhile: not "a user install"
        await button.response.edit_message(content=reason, view=None, embed=None)
        return False
    return True
