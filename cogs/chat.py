"""Conversations: which messages the bot answers, what the model is given, and how replies go out.

It answers in DMs; in servers when @mentioned, when someone replies to one of its messages, and in every
message of the channels (or threads of the channels) listed in ``discord.respond_channels`` (or chosen by the
server's admins with ``/settings``, who can also turn mentions off in a channel). Never to
itself, other bots, webhooks or system messages. ``thread_id`` is the channel's ID (a thread's own ID, a
DM channel's ID); ``user_id`` is the author's ID.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import weakref

import discord
from discord.ext import commands

from bot.client import MemoryBot
from bot.engine.guild_settings import GuildPolicy
from bot.engine.state import Speaker
from cogs._gate import Cooldown, access_allows
from cogs._replying import NO_PINGS, ReplyWriter, typing_indicator

log = logging.getLogger(__name__)

APOLOGY = "Sorry, I couldn't come up with an answer just now. Please try again in a moment."
SLOW_DOWN = "You're going a bit fast for me: give me a couple of seconds between messages."
OUT_OF_BUDGET = "I've used up today's allowance here, so I'm taking a break until midnight UTC."
TEXT_TYPES = ("text/", "application/json", "application/xml", "application/x-yaml", "application/toml")
TEXT_SUFFIXES = (".txt", ".md", ".py", ".json", ".csv", ".log", ".yaml", ".yml", ".toml", ".ini", ".js", ".ts",
                 ".html", ".css", ".xml", ".sh", ".rs", ".go", ".java", ".c", ".h", ".cpp", ".sql")
_SAFE_NAME = re.compile(r"[\[\]\n\r|`]")


def speaker_name(member: discord.abc.User) -> str:
    """The display name, cleaned so it cannot forge the ``[Name | user ID]`` author tags."""
    return _SAFE_NAME.sub("", member.display_name).strip()[:64] or f"user {member.id}"


class Chat(commands.Cog):
    """Answers messages with the engine."""

    def __init__(self, bot: MemoryBot) -> None:
        self.bot = bot
        self.engine = bot.engine
        self.config = bot.settings.discord
        self.max_chars = bot.settings.conversation.max_input_chars
        self.streaming = bot.settings.model.streaming
        self.deadline = bot.settings.model.timeout_seconds  # the most anyone waits for an answer or an apology
        self._locks: weakref.WeakValueDictionary[int, asyncio.Lock] = weakref.WeakValueDictionary()
        self.access = bot.settings.access
        self.cooldown = Cooldown(bot.settings.limits.cooldown_seconds)
        self._budget_noticed: dict[str, str] = {}  # budget bucket -> UTC day a notice was sent

    def should_answer(self, message: discord.Message, policy: GuildPolicy) -> bool:
        """Whether this message is addressed to the bot (see module docstring), under the server's settings."""
        me = self.bot.user
        if me is None or message.author.bot or message.webhook_id is not None or message.author.id == me.id:
            return False
        if message.type not in (discord.MessageType.default, discord.MessageType.reply):
            return False
        if message.guild is None:
            return True
        channel = message.channel
        parent_id = getattr(channel, "parent_id", None)
        if policy.answers_everything(channel.id, parent_id):
            return True
        if not policy.answers_mentions(channel.id, parent_id):  # /settings mentions off in this channel
            return False
        if me in message.mentions:
            return True
        ref = message.reference
        resolved = ref.resolved if ref is not None else None
        return isinstance(resolved, discord.Message) and resolved.author.id == me.id

    async def build_input(self, message: discord.Message) -> str:
        """The message text for the model: own mention removed, text attachments read, long input cut."""
        me = self.bot.user
        text = message.content
        if me is not None:
            text = re.sub(rf"<@!?{me.id}>", "", text)
        text = text.strip()
        for attachment in message.attachments:
            text += await self._attachment_text(attachment)
        if len(text) > self.max_chars:
            cut = len(text) - self.max_chars
            text = text[: self.max_chars] + f"\n[note: the message was cut here; {cut} more characters were not shown]"
        return text.strip()

    async def _attachment_text(self, attachment: discord.Attachment) -> str:
        kind = attachment.content_type or "unknown type"
        is_text = kind.startswith(TEXT_TYPES) or attachment.filename.lower().endswith(TEXT_SUFFIXES)
        reason = "too large to read" if is_text else "not a text file"
        if is_text and attachment.size <= self.config.max_attachment_bytes:
            try:
                data = await attachment.read()
                body = data.decode("utf-8", errors="replace").replace("```", "'''")
                return f"\n\n[attached file {attachment.filename}]\n```\n{body}\n```"
            except Exception as exc:  # noqa: BLE001 - a failed download is mentioned, not fatal
                log.warning("could not download attachment %s: %r", attachment.id, exc)
                reason = "could not be downloaded"
        return f"\n\n[attached {attachment.filename} ({kind}, {attachment.size} bytes): {reason}, not shown]"

    def speaker(self, message: discord.Message) -> Speaker:
        channel = message.channel
        if message.guild is None:
            place = "a direct message with them"
        else:
            place = f"#{getattr(channel, 'name', 'channel')} on the server {message.guild.name}"
        return Speaker(
            user_id=str(message.author.id),
            name=speaker_name(message.author),
            guild_id=str(message.guild.id) if message.guild else "dm",
            channel_id=str(channel.id),
            message_id=str(message.id),
            place=place,
        )

    @commands.Cog.listener()
    async def on_message(self, message: discord.Message) -> None:
        policy = await self.engine.guild_policy(message.guild.id if message.guild else None)  # once per message
        if not self.should_answer(message, policy) or not access_allows(message, self.access):
            return
        allowed, notice = self.cooldown.check(message.author.id)
        if not allowed:
            if notice:
                await self.notify(message, SLOW_DOWN)
            return
        lock = self._locks.get(message.channel.id)
        if lock is None:
            lock = self._locks[message.channel.id] = asyncio.Lock()
        async with lock:  # taken before any await: one channel's messages are handled in arrival order
            await self.answer(message, policy)

    async def notify(self, message: discord.Message, text: str) -> None:
        try:
            await message.reply(text, allowed_mentions=NO_PINGS, mention_author=False)
        except discord.HTTPException:
            log.warning("could not send a notice in channel %s", message.channel.id)

    async def answer(self, message: discord.Message, policy: GuildPolicy) -> None:
        """Answer one message; whatever fails on the way, the person gets one short apology."""
        writer = ReplyWriter(message, streaming=self.streaming)
        try:
            reply = await self._think(message, writer, policy)
        except asyncio.TimeoutError:
            log.warning("answering message %s in channel %s took longer than %.0f s", message.id, message.channel.id,
                        self.deadline)
            await writer.fail(APOLOGY)
            return
        except Exception as exc:  # noqa: BLE001 - the user gets an apology, the log the details
            log.error("answering message %s in channel %s failed: %r", message.id, message.channel.id, exc, exc_info=exc)
            await writer.fail(APOLOGY)
            return
        if reply is None:
            return
        try:
            await writer.finish(reply)
        except discord.HTTPException:
            log.exception("sending the reply to message %s failed", message.id)

    async def _think(self, message: discord.Message, writer: ReplyWriter, policy: GuildPolicy) -> str | None:
        """The answer's text, or None when the message gets no answer (out of budget, nothing to answer)."""
        speaker = self.speaker(message)
        bucket = await self.engine.budget_exhausted(speaker, policy)
        if bucket is not None:
            day = time.strftime("%Y-%m-%d", time.gmtime())
            if self._budget_noticed.get(bucket) != day:
                self._budget_noticed[bucket] = day
                await self.notify(message, OUT_OF_BUDGET)
            return None
        text = await self.build_input(message)
        if not text:
            if self.bot.user not in message.mentions:
                return None  # nothing to answer (a sticker, an embed, whitespace); a bare mention gets a hello
            text = "(the message was empty: they only mentioned you)"
        async with typing_indicator(message.channel):
            reply = await self.engine.reply(
                str(message.channel.id), speaker, text, on_delta=writer.on_delta, timeout=self.deadline, policy=policy
            )
        return reply.text


async def setup(bot: MemoryBot) -> None:
    await bot.add_cog(Chat(bot))
