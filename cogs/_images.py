"""Images for a vision model: which attachments are images, what their bytes really are, and whether they move.

Not an extension: helpers for ``cogs._input``. Everything here reads header bytes only (no image library):
the type comes from the file's signature, not from what the upload claimed, and animated images (GIF with
more than one frame, APNG, animated WebP) are recognised so they can be left out.
"""

from __future__ import annotations

import struct
from urllib.parse import urlsplit

IMAGE_TYPES = ("image/png", "image/jpeg", "image/webp", "image/gif")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif")
# Where embed images may be downloaded from: Discord's CDN and media proxy only (an embed's own URL may
# point anywhere, including inside the bot's network).
DISCORD_MEDIA_HOSTS = (".discordapp.net", ".discordapp.com", ".discord.com")


def is_image(content_type: str | None, filename: str) -> bool:
    """Whether an attachment is one of the image types a vision model takes (PNG, JPEG, WebP, GIF)."""
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    if kind:
        return kind in IMAGE_TYPES
    return filename.lower().endswith(IMAGE_SUFFIXES)


def sniff(data: bytes) -> str | None:
    """The image type from the file's signature, or None when it is none of the four."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def is_animated(data: bytes, media_type: str) -> bool:
    """Whether the image moves: a GIF with more than one frame, a PNG with an ``acTL`` chunk (APNG), a WebP
    with the animation flag or an ``ANIM`` chunk. A file too broken to walk counts as animated when it is
    a GIF or a PNG (it is left out rather than sent to fail the whole answer)."""
    try:
        if media_type == "image/gif":
            return _gif_frames(data) > 1
        if media_type == "image/png":
            return _png_animated(data)
        if media_type == "image/webp":
            return _webp_animated(data)
    except (IndexError, struct.error, ValueError):
        return True
    return False


def _gif_frames(data: bytes) -> int:
    """Image descriptors in a GIF, walking its blocks (stops counting at 2)."""
    flags = data[10]
    pos = 13 + (3 * 2 ** ((flags & 7) + 1) if flags & 0x80 else 0)  # header, screen descriptor, colour table
    frames = 0
    while pos < len(data):
        block = data[pos]
        if block == 0x3B:  # trailer
            return frames
        if block == 0x21:  # extension: label, then sub-blocks
            pos = _skip_sub_blocks(data, pos + 2)
        elif block == 0x2C:  # image descriptor (+ local colour table), LZW code size, then sub-blocks
            frames += 1
            if frames > 1:
                return frames
            local = data[pos + 9]
            pos += 10 + (3 * 2 ** ((local & 7) + 1) if local & 0x80 else 0)
            pos = _skip_sub_blocks(data, pos + 1)
        else:
            raise ValueError("not a GIF block")
    return frames


def _skip_sub_blocks(data: bytes, pos: int) -> int:
    while True:
        size = data[pos]
        pos += 1 + size
        if size == 0:
            return pos


def _png_animated(data: bytes) -> bool:
    pos = 8
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"acTL":
            return True
        if kind in (b"IDAT", b"IEND"):  # acTL must come before the image data
            return False
        pos += 12 + length
    raise ValueError("PNG without image data")


def _webp_animated(data: bytes) -> bool:
    pos = 12
    while pos + 8 <= len(data):
        kind, length = data[pos:pos + 4], struct.unpack("<I", data[pos + 4:pos + 8])[0]
        if kind == b"VP8X" and len(data) > pos + 8:
            return bool(data[pos + 8] & 0x02)
        if kind in (b"ANIM", b"ANMF"):
            return True
        if kind in (b"VP8 ", b"VP8L"):
            return False
        pos += 8 + length + (length & 1)
    return False


def media_host(url: str) -> bool:
    """Whether a URL is on Discord's CDN or media proxy (HTTPS)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    return parts.scheme == "https" and any(host == h[1:] or host.endswith(h) for h in DISCORD_MEDIA_HOSTS)


def human_size(size: int) -> str:
    """``1.2 MB``, ``340 KB``, ``512 bytes`` (decimal units, like ``model.max_image_bytes``)."""
    if size >= 1_000_000:
        return f"{size / 1_000_000:.1f} MB"
    if size >= 1000:
        return f"{size / 1000:.0f} KB"
    return f"{size} bytes"
