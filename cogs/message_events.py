"""Edits and deletions on Discord, honoured in what the bot keeps.

Raw gateway events are used throughout, so a message that is not in discord.py's cache (sent before a
restart, or pushed out of the cache) is handled the same as one that is:

- ``MESSAGE_UPDATE`` that is an edit: the stored message, a waiting one, and its queued learning take the
  new text; what was learned from the old text is learned again (``ChatEngine.message_edited``).
  A turn still waiting to be answered is the chat cog's own: it listens to the same events.
  Discord also sends ``MESSAGE_UPDATE`` with the full, unchanged message when a link preview unfolds, the
  message is pinned, a thread is started from it or an embed changes: those change nothing. Checked
  cheapest first (:func:`not_an_edit`): no ``content``; no ``edited_timestamp`` (never edited); the same
  ``edited_timestamp`` as the cached message, or the same content and attachments as it. Only then is
  the text built (attachments are downloaded only now), and the engine compares it with what it stored
  for the message: the same text is no edit either (``message_edited`` returns False, touching nothing).
- ``MESSAGE_DELETE`` / ``MESSAGE_DELETE_BULK``: the messages leave the waiting turns, the conversation
  (with the bot's answers to them; a deleted bot reply leaves alone), any summary built from them, the
  learning queue, and every memory learned only from them (the files compacted in the batch's one
  compaction). With ``/settings delete-replies on`` the bot then deletes its own replies to them on Discord
  (every part of a split reply).
- ``CHANNEL_DELETE`` / ``THREAD_DELETE``: that conversation is deleted, and the channel's own
  ``/settings instructions``.
- ``GUILD_DELETE`` without ``unavailable`` (the bot was removed): the server's data is deleted after
  ``retention.removed_server_days``; with ``unavailable: true`` (an outage) nothing happens.
  ``GUILD_CREATE`` (the bot is back) cancels a pending deletion.

Messages never stored, in channels never seen, already deleted, or deleted before they were handled cost
a lookup and change nothing.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, TypeVar

import discord
from discord.ext import commands

from bot.client import MemoryBot
from cogs._context import speaker_name
from cogs._input import DownloadFailed, input_builder

log = logging.getLogger(__name__)

T = TypeVar("T")
# How long a removal Discord told us of is retried through a database outage (then it is logged as lost).
RETRY_FOR_SECONDS = 30 * 60
RETRY_FIRST_DELAY = 1.0  # seconds; doubled after each failed try, up to a minute
CHANGES_REMEMBERED = 10_000  # messages whose latest edit or deletion is known (an older waiting edit yields)
SERVER_EVENTS_REMEMBERED = 10_000  # servers whose latest removal or return is known (an older retry yields)


def not_an_edit(payload: discord.RawMessageUpdateEvent) -> bool:
    """Whether an update is plainly not an edit, judged without building the text (no download).

    A message never edited has no ``edited_timestamp``: an update of it (a link preview, a pin, a thread
    started from it) is not an edit. When discord.py still holds the message as it was, an update with the
    same ``edited_timestamp``, or with the same content and attachments, is not one either. Otherwise the
    engine decides, by comparing the text with what it stored.
    """
    if not payload.data.get("edited_timestamp"):
        return True
    before = payload.cached_message
    if before is None:
        return False
    after = payload.message
    if before.edited_at is not None and before.edited_at == after.edited_at:
        return True
    same_files = "attachments" not in payload.data or [a.id for a in before.attachments] == [a.id for a in after.attachments]
    return before.content == after.content and same_files


class MessageEvents(commands.Cog):
    """Keeps stored conversations, the learning queue and memories in step with Discord."""

    def __init__(self, bot: MemoryBot) -> None:
        self.bot = bot
        self.engine = bot.engine
        self.inputs = input_builder(bot)
        self._retrying: set[asyncio.Task] = set()
        self._server_events: dict[int, int] = {}  # server -> the number of its newest removal or return
        self._server_locks: dict[int, asyncio.Lock] = {}  # a server's events apply one at a time
        # Messages whose last edit could not be applied (a file's download failed): discord.py's cache took the
        # edit's timestamp all the same, so the next pin or unfurl would read as "not an edit" and the old
        # text would stay; for these the next update is judged by the engine (bounded).
        self._unapplied: dict[int, None] = {}
        self._changes = 0  # numbers the edits and deletions heard, in order
        self._newest: dict[int, int] = {}  # message ID -> the number of its newest edit or deletion (bounded)

    async def cog_unload(self) -> None:
        if self._retrying:
            log.warning("%d edits or deletions still waiting for the database are dropped at shutdown",
                        len(self._retrying))
        for task in list(self._retrying):
            task.cancel()

    def _heard_change(self, message_id: int) -> int:
        """Number a new edit or deletion of a message; an edit of it still waiting for the database is then
        stale and is never applied (late, its older text would overwrite the newer one)."""
        self._changes += 1
        self._newest.pop(message_id, None)  # re-inserted last: the dict stays in order of the latest change
        self._newest[message_id] = self._changes
        while len(self._newest) > CHANGES_REMEMBERED:
            del self._newest[next(iter(self._newest))]
        return self._changes

    def _is_newest(self, message_id: int, number: int) -> bool:
        return self._newest.get(message_id) == number

    def _retry_later(self, what: str, call: Callable[[], Awaitable[T]],
                     then: Callable[[T], Awaitable[None]] | None = None, *,
                     still_wanted: Callable[[], bool] = lambda: True) -> None:
        """Try ``call`` again until the database is back: Discord sends an edit or a deletion once, and a
        deletion dropped in an outage would leave the deleted words stored for good. Backs off from 1 s to
        a minute, for at most ``RETRY_FOR_SECONDS``; a failure that is not an outage ends it (logged).
        ``still_wanted`` is asked before each try (a newer edit supersedes an older one). A try under way is
        never cancelled for that: the engine journals an edit's plan, and a cut-short one would be replayed."""
        async def again() -> None:
            loop = asyncio.get_running_loop()
            end, delay = loop.time() + RETRY_FOR_SECONDS, RETRY_FIRST_DELAY
            while True:
                await asyncio.sleep(delay)
                if not still_wanted():
                    log.debug("dropped %s: a newer change came", what)
                    return
                try:
                    result = await call()
                except Exception as exc:  # noqa: BLE001 - an outage is waited out, anything else logged
                    if self.engine.outages(exc) and loop.time() + delay < end:
                        delay = min(60.0, delay * 2)
                        continue
                    log.error("gave up %s: %s", what, type(exc).__name__, exc_info=exc)
                    return
                log.info("done %s after the database came back", what)
                if then is not None:
                    try:
                        await then(result)
                    except Exception:  # noqa: BLE001 - logged; what was stored is already right
                        log.exception("finishing %s failed", what)
                return

        task = asyncio.get_running_loop().create_task(again())
        self._retrying.add(task)
        task.add_done_callback(self._retrying.discard)

    async def _with_files(self, payload: discord.RawMessageUpdateEvent) -> discord.Message:
        """The edited message with the files it has now.

        An update without an ``attachments`` key says nothing about them, but discord.py builds
        ``payload.message`` with none: read as is, the files' text would look removed, be erased from the
        stored message and learned again. They are then the cached copy's (an update without the key did not
        change them), or, for a message no longer cached, the message as Discord has it now. When even that
        cannot be read, the update is applied as it came: of the two mistakes, forgetting a file's text is
        the one that keeps nothing a member may have meant to take back.
        """
        message = payload.message
        if "attachments" in payload.data:
            return message
        before = payload.cached_message
        if before is not None:
            message.attachments = list(before.attachments)
            return message
        try:
            current = await self.bot.get_partial_messageable(payload.channel_id).fetch_message(payload.message_id)
        except Exception as exc:  # noqa: BLE001 - gone, no access, an outage: applied without its files
            log.info("the files of edited message %s could not be read (%s): applied without them",
                     payload.message_id, type(exc).__name__)
            return message
        message.attachments = list(current.attachments)
        return message

    @commands.Cog.listener()
    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        content = payload.data.get("content")
        if content is None:
            return
        author = payload.data.get("author") or {}
        me = self.bot.user
        if me is not None and str(author.get("id")) == str(me.id):
            return  # the bot's own streaming edits
        if author.get("bot") or payload.data.get("webhook_id"):
            # Other bots' and webhooks' messages are never answered, heard or learned from (``should_answer``),
            # so nothing of them is stored to edit; another AI bot streaming its answer edits once a second,
            # and each edit would otherwise read the learning queue and take the erasures' lock.
            return
        if not_an_edit(payload) and payload.message_id not in self._unapplied:
            return
        edited = payload.message.edited_at
        stamp = edited.timestamp() if edited else None
        number = self._heard_change(payload.message_id)  # newer than any edit still waiting for the database
        message = await self._with_files(payload)
        if not self._is_newest(payload.message_id, number):  # a newer change came while its files were read
            return
        try:
            text = await self.inputs.build(me, message, content, strict=True)
        except DownloadFailed:  # judged again at its next update; a stub text would read as an edit
            log.warning("the update of message %s was not applied: an attachment could not be downloaded",
                        payload.message_id)
            self._unapplied[payload.message_id] = None
            while len(self._unapplied) > CHANGES_REMEMBERED:
                del self._unapplied[next(iter(self._unapplied))]
            return
        except Exception:  # noqa: BLE001 - one failed edit must not stop the others
            log.exception("reading the edit of message %s failed", payload.message_id)
            return

        self._unapplied.pop(payload.message_id, None)

        def apply() -> Awaitable[bool]:
            # The author's name as the chat cog gives it: an edit of a message no longer in the learning
            # queue was re-learned under the bare user ID ("1234 works at Acme").
            names = {str(message.author.id): speaker_name(message.author)}
            return self.engine.message_edited(str(payload.channel_id), str(payload.message_id), text, edited_at=stamp,
                                              names=names)

        try:
            changed = await apply()
        except Exception as exc:  # noqa: BLE001 - one failed edit must not stop the others
            if self.engine.outages(exc):
                if not self._is_newest(payload.message_id, number):
                    return  # a newer edit (or the deletion) came meanwhile: it is what counts
                log.warning("the edit of message %s waits for the database (%s)", payload.message_id,
                            type(exc).__name__)
                self._retry_later(f"applying the edit of message {payload.message_id}", apply,
                                  still_wanted=lambda: self._is_newest(payload.message_id, number))
                return
            log.exception("applying the edit of message %s failed", payload.message_id)
            return
        if changed:
            log.info("applied the edit of message %s in channel %s", payload.message_id, payload.channel_id)

    @commands.Cog.listener()
    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        cached = [payload.cached_message] if payload.cached_message is not None else []
        await self._deleted(payload.channel_id, payload.guild_id, {payload.message_id}, self._texts(cached))

    @commands.Cog.listener()
    async def on_raw_bulk_message_delete(self, payload: discord.RawBulkMessageDeleteEvent) -> None:
        await self._deleted(payload.channel_id, payload.guild_id, set(payload.message_ids),
                            self._texts(payload.cached_messages))

    def _texts(self, messages: list[discord.Message]) -> dict[str, str]:
        """What deleted messages said, as discord.py's cache still holds them (others' messages only): one
        the bot showed only as context (a reply chain, channel context, a forward) has no stored text, and
        the eraser cuts these words from the answers that repeated it (see ``Eraser.erase_messages``)."""
        me = self.bot.user
        texts: dict[str, str] = {}
        for message in messages:
            if me is not None and message.author.id == me.id:
                continue
            parts = [message.content, *(s.content for s in getattr(message, "message_snapshots", ()) or ())]
            text = "\n".join(p for p in parts if p)
            if text.strip():
                texts[str(message.id)] = text
        return texts

    async def _deleted(self, channel_id: int, guild_id: int | None, message_ids: set[int],
                       shown: dict[str, str] | None = None) -> None:
        ids = {str(i) for i in message_ids}
        for message_id in message_ids:
            self._heard_change(message_id)  # an edit of it still waiting is not applied

        async def replies_too(result: Any) -> None:  # the engine's MessageErasure
            if result.replies and guild_id is not None and (await self.engine.guild_policy(guild_id)).delete_replies:
                await self._delete_replies(channel_id, result.replies)

        try:
            result = await self.engine.messages_deleted(str(channel_id), ids, shown=shown)
        except Exception as exc:  # noqa: BLE001 - logged; the next delete is handled all the same
            if self.engine.outages(exc):
                log.warning("erasing %d deleted messages in channel %s waits for the database (%s)",
                            len(ids), channel_id, type(exc).__name__)
                self._retry_later(f"erasing {len(ids)} deleted messages in channel {channel_id}",
                                  lambda: self.engine.messages_deleted(str(channel_id), ids, shown=shown),
                                  replies_too)
                return
            log.exception("erasing %d deleted messages in channel %s failed", len(message_ids), channel_id)
            return
        await replies_too(result)

    async def _delete_replies(self, channel_id: int, reply_ids: tuple[str, ...]) -> None:
        """``/settings delete-replies on``: the bot's own messages that answered the deleted ones go too.

        The IDs are those the bot recorded for the parts it sent (``attach_sent``), so they are its own; a
        cached message by anyone else is skipped all the same. Already deleted, or no longer allowed in the
        channel: logged at DEBUG (nothing to do about it).
        """
        me = self.bot.user
        channel = self.bot.get_partial_messageable(channel_id)
        for reply_id in reply_ids:
            cached = discord.utils.get(self.bot.cached_messages, id=int(reply_id))
            if cached is not None and (me is None or cached.author.id != me.id):
                continue
            try:
                await channel.get_partial_message(int(reply_id)).delete()
            except (discord.NotFound, discord.Forbidden) as exc:
                log.debug("could not delete reply %s in channel %s: %s", reply_id, channel_id, type(exc).__name__)
            except discord.HTTPException as exc:
                log.debug("deleting reply %s in channel %s failed: %s", reply_id, channel_id, exc.status)

    @commands.Cog.listener()
    async def on_guild_channel_delete(self, channel: discord.abc.GuildChannel) -> None:
        # Archived threads get no deletion event; only a text, news, forum or media channel has threads.
        # (discord.py sends a thread deletion for each open thread of the channel it still has.)
        await self._thread_gone(channel.id, channel.guild.id,
                                threads=isinstance(channel, (discord.TextChannel, discord.ForumChannel)))

    @commands.Cog.listener()
    async def on_raw_thread_delete(self, payload: discord.RawThreadDeleteEvent) -> None:
        await self._thread_gone(payload.thread_id, payload.guild_id, threads=False)

    async def _thread_gone(self, channel_id: int, guild_id: int | None, *, threads: bool) -> None:
        try:
            await self.engine.channel_deleted(str(channel_id), threads=threads)
        except Exception as exc:  # noqa: BLE001
            if self.engine.outages(exc):  # Discord sends the deletion once: wait the outage out, as for messages
                log.warning("deleting the conversation of channel %s waits for the database (%s)", channel_id,
                            type(exc).__name__)
                self._retry_later(f"deleting the conversation of channel {channel_id}",
                                  lambda: self.engine.channel_deleted(str(channel_id), threads=threads))
            else:
                log.exception("deleting the conversation of channel %s failed", channel_id)
        if guild_id is None:
            return
        def settings_gone() -> Awaitable[bool]:  # the channel's /settings (instructions, lists, mod-log) go too
            return self.engine.channel_settings_gone(str(guild_id), str(channel_id))

        try:
            if await settings_gone():
                log.info("deleted the settings of deleted channel %s in server %s", channel_id, guild_id)
        except Exception as exc:  # noqa: BLE001
            if self.engine.outages(exc):  # sent once, as the conversation's deletion: wait the outage out
                log.warning("deleting the settings of channel %s waits for the database (%s)", channel_id,
                            type(exc).__name__)
                self._retry_later(f"deleting the settings of channel {channel_id}", settings_gone)
            else:
                log.exception("deleting the settings of channel %s failed", channel_id)

    @commands.Cog.listener()
    async def on_guild_remove(self, guild: discord.Guild) -> None:
        """A real removal (discord.py sends ``guild_unavailable`` instead for an outage)."""
        log.info("removed from server %s; its data is deleted after the retention period", guild.id)
        await self._server_event(guild.id, removed=True)

    @commands.Cog.listener()
    async def on_guild_join(self, guild: discord.Guild) -> None:
        await self._server_event(guild.id, removed=False)

    @commands.Cog.listener()
    async def on_guild_available(self, guild: discord.Guild) -> None:
        await self._server_event(guild.id, removed=False)

    async def _server_event(self, guild_id: int, *, removed: bool) -> None:
        """Record a removal from a server (its data goes after the retention period) or its end (added back,
        or there again after an outage). Discord sends each once: in a database outage it is retried, as a
        deletion is (a removal missed would keep its data past the promise; an end missed would let the
        sweep delete the data of a server the bot is in). A server's events apply one at a time, and each
        only while it is the newest: a removal retried after the server came back is not applied."""
        self._server_events.pop(guild_id, None)  # re-inserted last: the bound drops the oldest news first
        number = self._server_events[guild_id] = self._changes = self._changes + 1
        while len(self._server_events) > SERVER_EVENTS_REMEMBERED:
            oldest = next(iter(self._server_events))
            del self._server_events[oldest]
            self._server_locks.pop(oldest, None)
        lock = self._server_locks.setdefault(guild_id, asyncio.Lock())

        def newest() -> bool:
            return self._server_events.get(guild_id) == number

        async def call() -> None:
            async with lock:
                if not newest():
                    return
                await (self.engine.server_removed(str(guild_id)) if removed else self.engine.server_back(str(guild_id)))

        what = f"recording {'the removal from' if removed else 'the return to'} server {guild_id}"
        try:
            await call()
        except Exception as exc:  # noqa: BLE001 - logged; an outage is waited out
            if self.engine.outages(exc):
                log.warning("%s waits for the database (%s)", what, type(exc).__name__)
                self._retry_later(what, call, still_wanted=newest)
                return
            log.exception("%s failed", what)


async def setup(bot: MemoryBot) -> None:
    await bot.add_cog(MessageEvents(bot))
