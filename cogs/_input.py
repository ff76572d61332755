"""What a Discord message becomes for the engine: the bot's own mention removed, text attachments read,
long input cut. Not an extension: the chat cog (new messages) and the events cog (edits) both build a
message's text here, so an edit is compared with exactly what was stored.

Images (``model.vision``): with a model that takes them, an image attachment's stored text is a short
placeholder (``[image: cat.png, 1.2 MB]``, saying so when it is too large or past the per-message count),
decided from the attachment's metadata alone, so an edit builds the same text without downloading
anything. The bytes are downloaded separately (:meth:`InputBuilder.images`) for the answer only and go to
the engine as :class:`~bot.engine.Image`, never as text. Without vision an image is named like any
other attachment (name, type, size), and the log says why, once per process.
"""

from __future__ import annotations

import asyncio
import codecs
import logging
import re
from dataclasses import replace
from typing import Awaitable

import discord

from bot.engine import Image
from cogs._images import human_size, is_animated, is_image, media_host, sniff

log = logging.getLogger(__name__)
_NO_VISION_TOLD: set[str] = set()  # model names whose "no images" line was logged (once per process)

TEXT_TYPES = ("text/", "application/json", "application/xml", "application/x-yaml", "application/toml")
TEXT_SUFFIXES = (".txt", ".md", ".py", ".json", ".csv", ".log", ".yaml", ".yml", ".toml", ".ini", ".js", ".ts",
                 ".html", ".css", ".xml", ".sh", ".rs", ".go", ".java", ".c", ".h", ".cpp", ".sql")


def decoded(data: bytes) -> str:
    """A text file's bytes as text: by its byte-order mark (UTF-8, UTF-16 as Windows PowerShell writes
    with ``>``, UTF-32), else UTF-8, else Windows-1252 (Notepad's "ANSI"). Decoding everything as UTF-8 gave
    a null between every character of a UTF-16 file, and replacement marks in accented ANSI text."""
    for bom, codec in ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF32_LE, "utf-32"),
                       (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF16_LE, "utf-16"),
                       (codecs.BOM_UTF16_BE, "utf-16")):
        if data.startswith(bom):
            return data.decode(codec, errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


SPOILER = re.compile(r"\|\|(.+?)\|\|", re.DOTALL)  # Discord's ||spoiler|| spans

#: One file's download, at most. discord.py's HTTP session has no timeout of its own (aiohttp's default is
#: five minutes), and downloads run before the answer's deadline and typing indicator: a stalled CDN held a
#: turn, and the channel's turns behind it, for minutes per file with no sign of life.
DOWNLOAD_SECONDS = 15.0


async def downloaded(read: Awaitable[bytes]) -> bytes:
    """The bytes of one download, or :class:`TimeoutError` after :data:`DOWNLOAD_SECONDS`."""
    return await asyncio.wait_for(read, DOWNLOAD_SECONDS)


class DownloadFailed(Exception):
    """A text attachment could not be downloaded while an edit's text was being built."""

class InputBuilder:
    """Builds the text the engine stores and answers for one message."""

    def __init__(self, *, max_chars: int, max_attachment_bytes: int, vision: bool = False,
                 max_image_bytes: int = 5_000_000, max_images: int = 4, model_name: str = "") -> None:
        self.max_chars = max_chars
        self.max_attachment_bytes = max_attachment_bytes
        self.vision = vision
        self.max_image_bytes = max_image_bytes
        self.max_images = max_images
        self.model_name = model_name

    async def build(self, me: discord.abc.User | None, message: discord.Message, content: str | None = None, *,
                    strict: bool = False) -> str:
        """The message text for the model: own mention removed, text attachments read, image placeholders,
        long input cut. Downloads text attachments only (never images).

        ``strict`` (an edit): a text attachment that cannot be downloaded raises :class:`DownloadFailed`
        instead of becoming a "could not be downloaded" line. The text is compared with what was stored,
        and a line where the file's words were would read as an edit that took them back."""
        text = message.content if content is None else content
        if me is not None:
            text = re.sub(rf"<@!?{me.id}>", "", text)
        own = message.guild.self_role if message.guild is not None else None
        if own is not None:  # the bot's managed role, mentioned to address it (see ``cogs.chat``)
            text = text.replace(own.mention, "")
        text = text.strip()
        images = 0
        words, placeholders = text, []  # what the length cut may shorten, and what it must keep
        for attachment in message.attachments:
            if is_image(attachment.content_type, attachment.filename):
                if self.vision:
                    images += 1
                    placeholders.append("\n" + self.image_placeholder(attachment, images))
                    text += placeholders[-1]
                    continue
                self._tell_no_vision()
            read = await self.attachment_text(attachment, strict=strict)
            text += read
            words += read
        if not text and getattr(message, "message_snapshots", None):  # a bare forward: answered, shown as context
            text = "(they forwarded a message; it is shown above as context)"
        elif not text and getattr(message, "poll", None) is not None:
            text = "(they posted a poll; it is shown above as context)"
        if len(text) > self.max_chars:
            # The words and file contents are cut, the image lines kept (after them): cut away, the images
            # were still shown for this answer, but the stored text no longer said an image was there.
            room = max(0, self.max_chars - sum(len(p) for p in placeholders))
            cut = len(words) - room
            text = (words[:room] + f"\n[note: the message was cut here; {cut} more characters were not shown]"
                    + "".join(placeholders))
        return text.strip()

    async def attachment_text(self, attachment: discord.Attachment, *, strict: bool = False) -> str:
        """A text attachment's contents (within the size cap), else a line naming it (``strict``: a failed
        download raises :class:`DownloadFailed`)."""
        kind = attachment.content_type or "unknown type"
        is_text = kind.startswith(TEXT_TYPES) or attachment.filename.lower().endswith(TEXT_SUFFIXES)
        reason = "too large to read" if is_text else "not a text file"
        if is_text and attachment.size <= self.max_attachment_bytes:
            try:
                data = await downloaded(attachment.read())
                body = decoded(data).replace("```", "'''")
                hidden = (", which the sender hid behind a spoiler: wrap anything you say about what it says in"
                          " ||double bars|| so it stays hidden") if attachment.is_spoiler() else ""
                return f"\n\n[attached file {attachment.filename}{hidden}]\n```\n{body}\n```"
            except Exception as exc:  # noqa: BLE001 - a failed download is mentioned, not fatal
                log.warning("could not download attachment %s: %r", attachment.id, exc)
                if strict:
                    raise DownloadFailed(attachment.id) from exc
                reason = "could not be downloaded"
        return f"\n\n[attached {attachment.filename} ({kind}, {attachment.size} bytes): {reason}, not shown]"


    # ---- images (vision models only)
    def image_placeholder(self, attachment: discord.Attachment, number: int) -> str:
        """What is stored for an image attachment (the ``number``-th image of its message)."""
        size = human_size(attachment.size)
        if attachment.size > self.max_image_bytes:
            why = f": too large to show (over {human_size(self.max_image_bytes)})"
        elif number > self.max_images:
            why = f": not shown (only {self.max_images} images of a message are)"
        else:
            why = ""
        return f"[image: {attachment.filename}, {size}{why}]"

    def shown_attachments(self, message: discord.Message) -> list[discord.Attachment]:
        """The image attachments shown to the model: within the size cap and the count (the message's own
        are those whose placeholder says so; a forward's are named in its quote)."""
        if not self.vision:
            return []
        images = [a for a in files_of(message) if is_image(a.content_type, a.filename)][: self.max_images]
        return [a for a in images if a.size <= self.max_image_bytes]

    async def images(self, message: discord.Message, most: int | None = None) -> tuple[Image, ...]:
        """The message's images for this answer: downloaded, checked, never stored (see the module doc).
        ``most``: how many of them the turn still shows (the rest are named, not downloaded)."""
        out = []
        shown = self.shown_attachments(message)
        if most is not None and len(shown) > most:
            out += [Image(a.filename, note=f"only the turn's last {self.max_images} images are shown")
                    for a in shown[: len(shown) - most]]
            shown = shown[len(shown) - most:]
        for attachment in shown:
            try:
                data = await downloaded(attachment.read())
            except Exception as exc:  # noqa: BLE001 - a failed download is mentioned, not fatal
                log.warning("could not download image attachment %s: %r", attachment.id, exc)
                out.append(Image(attachment.filename, note="it could not be downloaded"))
                continue
            image = self.checked(attachment.filename, data, attachment.width, attachment.height)
            out.append(replace(image, spoiler=attachment.is_spoiler()))
        return tuple(out)

    async def quoted_images(self, bot: discord.Client, message: discord.Message) -> tuple[Image, ...]:
        """Images of a message being replied to: its image attachments, then the images of its embeds
        (downloaded through Discord's media proxy only), within the same caps."""
        if not self.vision:
            return ()
        found = list(await self.images(message))
        too_large = [a for a in files_of(message) if is_image(a.content_type, a.filename)][: self.max_images]
        found += [Image(a.filename, note=f"it is too large (over {human_size(self.max_image_bytes)})")
                  for a in too_large if a.size > self.max_image_bytes]  # its quote names it, without a size
        hidden = SPOILER.findall(message.content or "")
        for embed in message.embeds:
            if len(found) >= self.max_images:
                break
            if embed.type in ("gifv", "video"):  # moving pictures; their still is not what was posted
                continue
            picture = embed.image if embed.image.url else embed.thumbnail
            url = next((u for u in (picture.proxy_url, picture.url) if u and media_host(u)), None)
            if url is None:
                continue
            name = url.split("?", 1)[0].rsplit("/", 1)[-1] or "embed image"
            try:
                data = await downloaded(bot.http.get_from_cdn(url))
            except Exception as exc:  # noqa: BLE001 - a failed download is mentioned, not fatal
                log.warning("could not download an embed image of message %s: %r", message.id, exc)
                continue
            if len(data) > self.max_image_bytes:
                found.append(Image(name, note=f"it is too large (over {human_size(self.max_image_bytes)})"))
                continue
            image = self.checked(name, data, picture.width, picture.height)
            # A link posted as ||https://...|| has its preview hidden on Discord: described openly, the
            # answer gave away what the poster hid.
            found.append(replace(image, spoiler=bool(embed.url) and any(embed.url in s for s in hidden)))
        return tuple(found[: self.max_images])

    def checked(self, name: str, data: bytes, width: int | None, height: int | None) -> Image:
        """An image to show, or one left out with the reason (not really an image, animated, too large)."""
        media_type = sniff(data)
        if media_type is None:
            return Image(name, note="it is not a PNG, JPEG, WebP or GIF image")
        if len(data) > self.max_image_bytes:  # the upload's declared size was wrong
            return Image(name, note=f"it is too large (over {human_size(self.max_image_bytes)})")
        if is_animated(data, media_type):
            return Image(name, note="animated images are not shown")
        return Image(name, media_type, data, width=width, height=height)

    def _tell_no_vision(self) -> None:
        if self.model_name not in _NO_VISION_TOLD:
            _NO_VISION_TOLD.add(self.model_name)
            log.info("images are not sent to the model %r (model.vision is off, or \"auto\" and the name matches "
                     "no model.vision_models pattern): image attachments are described by name, type and size",
                     self.model_name)


def files_of(message: discord.Message) -> list[discord.Attachment]:
    """A message's files, then those of the messages it forwards: "what is this?" with a forwarded photo is
    about the photo, and Discord delivers a forward's files, like any attachment, in its snapshot."""
    return list(message.attachments) + [a for snap in getattr(message, "message_snapshots", None) or ()
                                        for a in snap.attachments]


def input_builder(bot: discord.Client) -> InputBuilder:
    """The builder configured from the bot's settings."""
    settings = bot.settings  # type: ignore[attr-defined]
    model = settings.model
    return InputBuilder(max_chars=settings.conversation.max_input_chars,
                        max_attachment_bytes=settings.discord.max_attachment_bytes, vision=model.takes_images,
                        max_image_bytes=model.max_image_bytes, max_images=model.max_images_per_message,
                        model_name=model.name)
