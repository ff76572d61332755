"""What a Discord message becomes for the engine: the bot's own mention removed, text attachments read,
long input cut. Not an extension: the chat cog (new messages) and the events cog (edits) both build a
message's text here, so an edit is compared with exactly what was stored."""

from __future__ import annotations

import logging
import re

import discord

log = logging.getLogger(__name__)

TEXT_TYPES = ("text/", "application/json", "application/xml", "application/x-yaml", "application/toml")
TEXT_SUFFIXES = (".txt", ".md", ".py", ".json", ".csv", ".log", ".yaml", ".yml", ".toml", ".ini", ".js", ".ts",
                 ".html", ".css", ".xml", ".sh", ".rs", ".go", ".java", ".c", ".h", ".cpp", ".sql")


class InputBuilder:
    """Builds the text the engine stores and answers for one message."""

    def __init__(self, *, max_chars: int, max_attachment_bytes: int) -> None:
        self.max_chars = max_chars
        self.max_attachment_bytes = max_attachment_bytes

    async def build(self, me: discord.abc.User | None, message: discord.Message, content: str | None = None) -> str:
        """The message text for the model: own mention removed, text attachments read, long input cut."""
        text = message.content if content is None else content
        if me is not None:
            text = re.sub(rf"<@!?{me.id}>", "", text)
        text = text.strip()
        for attachment in message.attachments:
            text += await self.attachment_text(attachment)
        if not text and getattr(message, "message_snapshots", None):  # a bare forward: answered, shown as context
            text = "(they forwarded a message; it is shown above as context)"
        elif not text and getattr(message, "poll", None) is not None:
            text = "(they posted a poll; it is shown above as context)"
        if len(text) > self.max_chars:
            cut = len(text) - self.max_chars
            text = text[: self.max_chars] + f"\n[note: the message was cut here; {cut} more characters were not shown]"
        return text.strip()

    async def attachment_text(self, attachment: discord.Attachment) -> str:
        """A text attachment's contents (within the size cap), else a line naming it."""
        kind = attachment.content_type or "unknown type"
        is_text = kind.startswith(TEXT_TYPES) or attachment.filename.lower().endswith(TEXT_SUFFIXES)
        reason = "too large to read" if is_text else "not a text file"
        if is_text and attachment.size <= self.max_attachment_bytes:
            try:
                data = await attachment.read()
                body = data.decode("utf-8", errors="replace").replace("```", "'''")
                return f"\n\n[attached file {attachment.filename}]\n```\n{body}\n```"
            except Exception as exc:  # noqa: BLE001 - a failed download is mentioned, not fatal
                log.warning("could not download attachment %s: %r", attachment.id, exc)
                reason = "could not be downloaded"
        return f"\n\n[attached {attachment.filename} ({kind}, {attachment.size} bytes): {reason}, not shown]"


def input_builder(bot: discord.Client) -> InputBuilder:
    """The builder configured from the bot's settings."""
    settings = bot.settings  # type: ignore[attr-defined]
    return InputBuilder(max_chars=settings.conversation.max_input_chars,
                        max_attachment_bytes=settings.discord.max_attachment_bytes)
