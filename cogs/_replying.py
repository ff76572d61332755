"""Sending a reply the Discord way: typing while thinking, streamed edits, split parts, no pings.

Not an extension: a helper the chat cog uses.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager
from typing import AsyncIterator

import discord

from bot.chunking import split_message

log = logging.getLogger(__name__)

NO_PINGS = discord.AllowedMentions.none()
EDIT_INTERVAL = 1.1  # seconds between edits of a streaming message (Discord's edit rate limits)
CURSOR = " \u258c"


@asynccontextmanager
async def typing_indicator(channel: discord.abc.Messageable) -> AsyncIterator[None]:
    """"Bot is typing…" while the body runs; a channel that refuses it costs nothing but the indicator."""
    indicator = channel.typing()
    try:
        await indicator.__aenter__()
    except discord.HTTPException as exc:
        log.info("no typing indicator in channel %s: %s", getattr(channel, "id", "?"), exc)
        indicator = None
    try:
        yield
    finally:
        if indicator is not None:
            await indicator.__aexit__(None, None, None)


REPLY_NEEDS_HISTORY = 160002  # Discord: "Cannot reply without permission to read message history"


def _my_permissions(message: discord.Message) -> discord.Permissions | None:
    """The bot's permissions where ``message`` was sent; None in DMs, or when the bot's member or the channel
    is unknown (then everything counts as allowed, and Discord's refusal is handled like any failed send).

    A channel not in discord.py's cache (a private thread whose THREAD_CREATE comes after its first
    message) is a ``PartialMessageable``, whose permissions are always none: read as such, the mention
    would be dropped though the bot may well answer there. A thread whose parent is not cached cannot
    compute them at all (``ClientException``)."""
    me = message.guild.me if message.guild is not None else None
    if me is None or isinstance(message.channel, discord.PartialMessageable):
        return None
    try:
        return message.channel.permissions_for(me)
    except discord.ClientException:
        return None


def may_speak(message: discord.Message) -> bool:
    """Whether the bot may post where ``message`` was sent: Send Messages in a channel, Send Messages in
    Threads in a thread (and Manage Threads once it is locked)."""
    perms = _my_permissions(message)
    if perms is None:
        return True
    if isinstance(message.channel, discord.Thread):
        return perms.send_messages_in_threads and (not message.channel.locked or perms.manage_threads)
    return perms.send_messages


def _may_quote(message: discord.Message) -> bool:
    """A reply (a message reference) needs Read Message History in servers."""
    perms = _my_permissions(message)
    return perms is None or perms.read_message_history


async def reply_to(trigger: discord.Message, text: str) -> discord.Message:
    """Send ``text`` as a reply to ``trigger``, without pings, and as a plain message if it is gone.

    ``Message.reply`` sends the reference with Discord's default ``fail_if_not_exists`` (true): once the
    person deleted their message, the reply is refused (400, unknown message) and the answer is lost,
    including the part of it meant for their other messages of the same turn. With it false, Discord posts
    it without the reference, and the deletion's own handling removes it if the server asked for that.

    Discord also refuses every reply (403, 160002) from a bot without Read Message History in the channel:
    there the answer goes out as a plain message, decided from the cached permissions and, when those are
    stale, from the refusal itself.
    """
    if _may_quote(trigger):
        try:
            return await trigger.channel.send(text, reference=trigger.to_reference(fail_if_not_exists=False),
                                              allowed_mentions=NO_PINGS, mention_author=False)
        except discord.Forbidden as exc:
            if exc.code != REPLY_NEEDS_HISTORY:
                raise
            log.info("no Read Message History in channel %s: sending without the reply", trigger.channel.id)
    return await trigger.channel.send(text, allowed_mentions=NO_PINGS)


class ReplyWriter:
    """Delivers one answer as a reply to ``trigger``: streamed into one message, then split if needed."""

    def __init__(self, trigger: discord.Message, *, streaming: bool, adopt: "ReplyWriter | None" = None) -> None:
        self.trigger = trigger
        self.streaming = streaming
        self.first: discord.Message | None = None
        self._latest = ""
        self._shown = ""
        self._last_edit = 0.0
        self._flusher: asyncio.Task | None = None
        self._lock = asyncio.Lock()
        self._done = False
        self.deleted: discord.Message | None = None  # the preview, once someone deleted it (see ``finish``)
        self.refused = False  # Discord refused a preview for good: no more (and none for a restarted turn)
        if adopt is not None:
            # A turn started again with follow-ups: its new answer streams into the preview already shown
            # (a reply to the message it was first written for), instead of leaving a half answer behind.
            adopt._stop_streaming()
            self.lock_after(adopt)
            self.first = adopt.first
            self._shown = adopt._shown
            self._last_edit = adopt._last_edit
            self._done = self.refused = adopt.refused
            if adopt.first is not None:
                self.trigger = adopt.trigger

    def lock_after(self, previous: "ReplyWriter") -> None:
        """Share the previous writer's lock, so a preview edit it has in flight finishes first."""
        self._lock = previous._lock

    def on_delta(self, text_so_far: str) -> None:
        """Called by the engine while the model streams; edits happen on a timer, never per token."""
        if not self.streaming:
            return
        self._latest = text_so_far
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_later())

    async def _flush_later(self) -> None:
        wait = max(0.0, self._last_edit + EDIT_INTERVAL - time.monotonic())
        await asyncio.sleep(wait)
        async with self._lock:
            if self._done:
                return
            preview = split_message(self._latest)[:1]
            if not preview or preview[0] == self._shown:
                return
            text = preview[0]
            shown = text if len(text) + len(CURSOR) > 2000 else text + CURSOR
            try:
                if self.first is None:
                    self.first = await reply_to(self.trigger, shown)
                else:
                    await self.first.edit(content=shown, allowed_mentions=NO_PINGS)
                self._shown = text
            except discord.NotFound:  # someone deleted the preview: the answer is not posted again (``finish``)
                self.deleted = self.first
                self._done = True
            except discord.Forbidden as exc:
                # Refused for good (the person blocked the bot or closed their DMs: 50007; a permission lost
                # meanwhile): no more previews, each one refused again and counted against Discord's limit
                # on invalid requests. ``finish`` tries the answer once.
                log.info("a streaming preview in channel %s was refused (%s); no more previews",
                         self.trigger.channel.id, exc.code)
                self._done = self.refused = True
            except discord.HTTPException:
                log.warning("a streaming edit failed; the final text will still be sent", exc_info=True)
            self._last_edit = time.monotonic()

    def _stop_streaming(self) -> None:
        """No more previews; a preview already being sent finishes first (we then wait on the lock)."""
        self._done = True
        if self._flusher is not None and not self._lock.locked():
            self._flusher.cancel()

    async def finish(self, text: str) -> list[discord.Message]:
        """Send (or complete) the final answer: every part at most 2,000 characters; the parts sent.

        A preview someone deleted meanwhile (a moderator, a clean-up bot) is the answer deleted, as deleting
        the finished reply would be: nothing is posted again, nothing is returned, and ``deleted`` is the
        preview (the caller takes the answer out of the stored conversation, as that deletion does). A later
        part that fails ends the sending there (logged), and the parts already out are returned, so they are
        recorded as the answer's messages; only a first part that cannot be sent at all raises.
        """
        self._stop_streaming()
        async with self._lock:
            parts = split_message(text) or ["(no answer)"]
            sent: list[discord.Message] = []
            if self.deleted is not None:
                return sent
            if self.first is not None:
                try:
                    await self.first.edit(content=parts[0], allowed_mentions=NO_PINGS)
                except discord.NotFound:
                    self.deleted = self.first
                    return sent
                sent.append(self.first)
            else:
                self.first = await reply_to(self.trigger, parts[0])
                sent.append(self.first)
            for part in parts[1:]:
                try:
                    sent.append(await self.trigger.channel.send(part, allowed_mentions=NO_PINGS))
                except discord.HTTPException:
                    log.warning("part %d of %d of an answer in channel %s could not be sent", len(sent) + 1,
                                len(parts), self.trigger.channel.id, exc_info=True)
                    break
            return sent

    async def discard(self) -> None:
        """No answer after all (the turn was dropped): remove a preview that was already shown."""
        self._stop_streaming()
        async with self._lock:
            if self.first is not None:
                try:
                    await self.first.delete()
                except discord.HTTPException:
                    log.warning("could not remove a streamed preview", exc_info=True)

    async def fail(self, notice: str) -> None:
        """Replace whatever was streamed with a short apology (or send one)."""
        self._stop_streaming()
        async with self._lock:
            try:
                if self.first is not None:
                    await self.first.edit(content=notice, allowed_mentions=NO_PINGS)
                else:
                    await reply_to(self.trigger, notice)
            except discord.HTTPException:
                log.warning("could not send the apology", exc_info=True)
