"""How memories and their history read in Discord: places, jump links, lines and pages.

Not an extension: helpers for the memories cog.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Sequence

import discord

from bot.engine import HistoryEntry, Prefs, StoredMemory, is_snowflake

PAGE_SIZE = 10
_LINK_MARKUP = re.compile(r"[\[\]()<>]")  # what could close or open a masked link around a place name
SHOWN_CHARS = 300


def jump_url(origin: dict) -> str | None:
    """A link to the message a memory came from, when it came from a Discord message."""
    channel, message = origin.get("channel_id"), origin.get("message_id")
    if not (is_snowflake(channel) and is_snowflake(message)):
        return None
    guild = origin.get("guild_id")
    if not is_snowflake(guild):  # a DM, or a server the bot is not in (kept as a DM memory, linked there)
        guild = origin.get("link_guild_id") if is_snowflake(origin.get("link_guild_id")) else "@me"
    return f"https://discord.com/channels/{guild}/{channel}/{message}"


def clip(text: str, limit: int = SHOWN_CHARS) -> str:
    text = discord.utils.escape_mentions(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def where(client: discord.Client, origin: dict) -> str:
    """Where something was learned, in words: "a DM", or "Server › #channel", linked when possible."""
    gid = str(origin.get("guild_id", ""))
    if gid == "dm":
        place = "a DM"
    elif not is_snowflake(gid):
        place = {"user": "your own words", "import": "an import"}.get(str(origin.get("source")), "elsewhere")
    else:
        guild = client.get_guild(int(gid))
        place = guild.name if guild else f"server {gid}"
        cid = str(origin.get("channel_id", ""))
        channel = guild.get_channel_or_thread(int(cid)) if guild and is_snowflake(cid) else None
        if channel is not None:
            place += f" \u203a #{channel.name}"
        place = _LINK_MARKUP.sub("", place)  # names members chose: "a](https://evil.example) [b" links nowhere
    link = jump_url(origin)
    return f"[{place}]({link})" if link else place


def when(moment: datetime | str) -> str:
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return f"<t:{int(moment.timestamp())}:R>"


def describe(client: discord.Client, m: StoredMemory) -> str:
    """One memory as a line: its text, when it was learned (``created_at``) and where.

    Not ``updated_at``: a correction or a merge moves it, and showing it as the learning date told people
    the bot had just learned something it knew for months. What changed and when is ``/memories history``'s.
    """
    return f"`{m.short_id}` {clip(m.content)}\n-# learned {when(m.created_at)} in {where(client, m.origin)}"


def status_line(prefs: Prefs, dm_default: bool, scope_default: str = "server") -> str:
    learning = "paused (`/memories resume`)" if prefs.paused else "on"
    private = "on: I don't use memories in replies" if prefs.private else "off"
    dm = prefs.dm_in_servers if prefs.dm_in_servers is not None else dm_default
    scope = getattr(prefs, "scope", None) or scope_default
    return (f"**Learning:** {learning} · **Private mode:** {private} · "
            f"**DM memories in servers:** {'shared' if dm else 'kept to DMs'} · "
            f"**Server memories:** {'each server its own' if scope == 'server' else 'used in every server'}")


EMBED_TEXT_LIMIT = 4096  # Discord's limit for an embed description
_ROOM = 200  # headroom below it


def pages(client: discord.Client, user: discord.abc.User, memories: Sequence[StoredMemory], status: str) -> list[discord.Embed]:
    """At most 10 memories a page, fewer when long ones would overflow the embed description."""
    chunks: list[list[str]] = [[]]
    budget = EMBED_TEXT_LIMIT - _ROOM - len(status)
    for m in memories:
        line = describe(client, m)
        used = sum(len(x) + 1 for x in chunks[-1])
        if chunks[-1] and (len(chunks[-1]) >= PAGE_SIZE or used + len(line) > budget):
            chunks.append([])
        chunks[-1].append(line)
    out = []
    for n, chunk in enumerate(chunks, start=1):
        body = "\n".join(chunk) or "Nothing yet."
        embed = discord.Embed(title=f"What I remember about {user.display_name}", description=f"{status}\n\n{body}")
        embed.set_footer(text=f"{len(memories)} memories · page {n} of {len(chunks)}")
        out.append(embed)
    return out


ACTOR_WORDS = {"extraction": "learned from chat", "user": "by you", "moderator": "by a moderator", "import": "imported"}


def history_embed(client: discord.Client, short_id: str, entries: Sequence[HistoryEntry]) -> discord.Embed:
    lines = []
    for e in entries[-15:]:
        change = {"created": f"created: {clip(e.after or '', 150)}",
                  "updated": f"changed from {clip(e.before or '', 100)} to {clip(e.after or '', 100)}",
                  "deleted": f"deleted (was: {clip(e.before or '', 150)})"}[e.action]
        lines.append(f"{when(e.at)} · {ACTOR_WORDS.get(e.actor, e.actor)} · {change} · {where(client, e.origin)}")
    while lines and sum(len(x) + 1 for x in lines) > EMBED_TEXT_LIMIT - _ROOM:
        lines.pop(0)  # keep the most recent changes that fit
    embed = discord.Embed(title=f"History of memory {short_id}", description="\n".join(lines) or "No changes recorded.")
    if len(lines) < len(entries):
        embed.set_footer(text=f"showing the last {len(lines)} of {len(entries)} changes")
    return embed
