"""What the model is shown besides the conversation: reply chains, recent channel messages, thread starters.

Not an extension: helpers for the chat cog. Everything here becomes :class:`~bot.engine.state.Quote`s:
context for one answer, quoted (never instructions), never stored in the thread and never learned.

- **Reply chain**: the message replied to (with its author), then the message *it* replied to, up to
  ``discord.reply_chain_depth`` messages; from the gateway payload (``referenced_message``), discord.py's
  message cache, or the REST API.
- **Channel context** (server channels): the messages of the channel since the bot last spoke there,
  newest first until ``channel_context_messages`` or ``channel_context_tokens`` is reached, shown oldest
  first; from discord.py's cache when it reaches back far enough (the cache is a contiguous recent
  window per channel), else one history request. System messages (joins, pins) are skipped.
- **Forwards and polls**: a forwarded message (the snapshot Discord delivered in the message; the original
  is never fetched) and a poll (question, answers, votes so far), in a message being answered (as their
  own quotes) or in any quoted message (inside its quote).
- **Thread starter**: for a thread started from a message, that message (fetched once per thread); for a
  post in a forum or media channel (each post is a thread, and a conversation), the post's opening message.

Whose words are left out is decided by the engine (people in private mode); the cog only collects.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import replace
from typing import Awaitable, Callable, Container, Iterable

import discord

from bot.engine import Quote, estimate_tokens, safe_name

log = logging.getLogger(__name__)

QUOTE_CHARS = 1000  # one context message is cut at this many characters
# What people say. Not ``thread_starter_message`` (type 21): its content is empty, its text is the starter's,
# which the thread's context shows already (``StarterCache``); kept, it added a "(no text)" line.
CHAT_TYPES = (discord.MessageType.default, discord.MessageType.reply)
# discord.py names a channel or role it cannot resolve "#deleted-channel" / "@deleted-role": in a server the
# bot is not in (a user install) every one is unresolvable, and none is deleted.
_UNRESOLVED = {"#deleted-channel": "#(a channel)", "@deleted-role": "@(a role)"}
EMBED_CHARS = 600  # of one embed's text (title, description, fields) in a quote


def speaker_name(member: discord.abc.User) -> str:
    """The display name, cleaned so it cannot forge the ``[Name | user ID]`` header or break a line."""
    return safe_name(member.display_name, 64) or f"user {member.id}"


def readable_text(message: discord.Message) -> str:
    """A message's text as people read it: mentions as names (``clean_content``), and a channel or role the
    bot cannot resolve named neutrally, never "deleted" (stored as such by "Remember this" until 2026-12-07)."""
    text = message.clean_content
    for unresolved, neutral in _UNRESOLVED.items():
        if unresolved in text and unresolved not in message.content:
            text = text.replace(unresolved, neutral)
    return text


def embed_text(message: discord.Message) -> str:
    """What a message's embeds say (another bot's card, a link preview): title, description, fields, footer.

    Read for a quoted message only (a reply's, "Ask about this"): a member asking about a card asks about
    what they see. The message being answered never brings its own link previews (they arrive later, as
    an update, and are the linked page's words, not the member's).
    """
    out = []
    for embed in message.embeds:
        parts = [embed.title or "", embed.description or ""]
        parts += [f"{f.name}: {f.value}" for f in embed.fields]
        if embed.footer and embed.footer.text:
            parts.append(embed.footer.text)
        body = "\n".join(p.strip() for p in parts if p and p.strip())
        if body:
            out.append("[embed]\n" + (body if len(body) <= EMBED_CHARS else body[:EMBED_CHARS] + " [cut]"))
    return "\n".join(out)


def _cut(text: str) -> str:
    return text[:QUOTE_CHARS] + " [cut]" if len(text) > QUOTE_CHARS else text


def forwarded_texts(message: discord.Message) -> list[str]:
    """The messages forwarded in ``message``, as Discord delivered them in it (``message_snapshots``).

    Only the snapshot is read: the original is never fetched nor looked up in the cache (it may be in
    another server the bot is in, or changed or deleted since). Discord's snapshot has no author.
    """
    out = []
    for snap in getattr(message, "message_snapshots", None) or ():
        body = (snap.content or "").strip() + "".join(f"\n[attached {a.filename}]" for a in snap.attachments)
        # A forwarded card (another bot's embed) or sticker is what the member asks about, as in a reply.
        body += sticker_lines(getattr(snap, "stickers", None) or ())
        cards = embed_text(snap)
        out.append((body.strip() + ("\n" + cards if cards else "")).strip() or "(no text)")
    return out


def sticker_lines(stickers: Iterable[discord.StickerItem]) -> str:
    """Stickers as lines of a quote; their names are members' words (a server's stickers), so kept short
    and on one line."""
    return "".join(f"\n[sticker {safe_name(s.name, 30) or '?'}]" for s in stickers)


def poll_text(message: discord.Message) -> str:
    """A message's poll: question, answers and the votes Discord reported so far ("" without a poll)."""
    poll = getattr(message, "poll", None)
    if poll is None:
        return ""
    lines = [f"Poll: {poll.question}" + (" (several answers allowed)" if poll.multiple else "")]
    lines += [f"- {a.text} ({a.vote_count} votes)" for a in poll.answers]
    if poll.is_finalised():
        lines.append("(the poll has ended)")
    return "\n".join(lines)


def carried_text(message: discord.Message) -> str:
    """What a quoted message carries besides its own words: forwarded messages and a poll."""
    parts = [f"[forwarded message]\n{t}" for t in forwarded_texts(message)]
    return "\n".join(parts + [p for p in (poll_text(message),) if p])


def carried_quotes(message: discord.Message) -> list[Quote]:
    """Forwards and a poll in a message being answered, as context quotes under that message's author."""
    who = dict(author_id=str(message.author.id), author_name=speaker_name(message.author), is_bot=message.author.bot)
    quotes = [Quote(text=_cut(t), kind="forward", message_id=f"{message.id}:forward:{i}", **who)
              for i, t in enumerate(forwarded_texts(message))]
    if poll := poll_text(message):
        quotes.append(Quote(text=_cut(poll), kind="poll", message_id=f"{message.id}:poll", **who))
    return quotes


def quote_of(message: discord.Message, kind: str) -> Quote:
    """One message as context: its text, its files' names, what it carries (forwards, a poll) and its embeds."""
    text = readable_text(message).strip()
    if message.attachments:
        text += "".join(f"\n[attached {a.filename}]" for a in message.attachments)
    text += sticker_lines(message.stickers)  # a sticker alone is what "Ask about this" asks about
    if carried := carried_text(message):
        text = f"{text}\n{carried}".strip()
    if embeds := embed_text(message):
        text = f"{text}\n{embeds}".strip()
    return Quote(author_id=str(message.author.id), author_name=speaker_name(message.author),
                 text=_cut(text.strip()) or "(no text)", kind=kind, is_bot=message.author.bot, message_id=str(message.id))


def marked_own(quotes: Iterable[Quote], me: discord.abc.User | None) -> tuple[Quote, ...]:
    """The bot's own messages among ``quotes`` marked as its own (``Quote.is_self``)."""
    mine = str(me.id) if me is not None else None
    return tuple(replace(q, is_self=True) if q.author_id == mine else q for q in quotes)


def _cached(bot: discord.Client, message_id: int) -> discord.Message | None:
    return discord.utils.get(reversed(bot.cached_messages), id=message_id)


async def _fetch(bot: discord.Client, channel_id: int, message_id: int, *, fresh: bool = False) -> discord.Message | None:
    """The message, from discord.py's cache when it has it (unless ``fresh``), else from Discord."""
    found = None if fresh else _cached(bot, message_id)
    if found is not None:
        return found
    channel = bot.get_channel(channel_id)
    if channel is None or not hasattr(channel, "fetch_message"):
        return None
    try:
        return await channel.fetch_message(message_id)
    except discord.HTTPException as exc:
        log.debug("cannot fetch message %s in channel %s: %s", message_id, channel_id, exc)
        return None


def _same_place(ref: discord.MessageReference, message: discord.Message) -> bool:
    """Whether a reference is a reply in the message's own channel (the only chain that is followed).

    A forward (``type`` 1) or a cross-post points at a message elsewhere, possibly in another server the
    bot is in: following it would put that server's messages, read with the bot's permissions there, into
    this one's prompt. A reply on Discord is always in the same channel, so anything else stops the chain.
    """
    if getattr(ref, "type", None) == discord.MessageReferenceType.forward:
        return False
    if ref.channel_id != message.channel.id:
        return False
    here = message.guild.id if message.guild is not None else None
    return ref.guild_id is None or ref.guild_id == here


def _freshly_signed(current: discord.Message, delivered: object) -> discord.Message:
    """``current`` (the cached copy, which follows edits) with the file links of ``delivered`` (the copy the
    reply's own payload carried, signed when the reply arrived).

    Discord's CDN links expire about a day after they are signed: a cached copy of a photo posted yesterday
    links to files the CDN now refuses, and the model was told the image "could not be downloaded". Only
    the files still on the current copy are taken (an edit can remove files, never add them).
    """
    if not isinstance(delivered, discord.Message) or delivered is current or delivered.id != current.id:
        return current
    keep = {a.id for a in current.attachments}
    fresh = copy.copy(current)
    fresh.attachments = [a for a in delivered.attachments if a.id in keep]
    fresh.embeds = delivered.embeds if len(delivered.embeds) == len(current.embeds) else current.embeds
    return fresh


async def reply_chain(bot: discord.Client, message: discord.Message, depth: int, *,
                      images: Callable[[discord.Message], Awaitable[tuple]] | None = None,
                      deleted: Container[int] = (), edited: Container[int] = ()) -> list[Quote]:
    """The message replied to and the chain above it, oldest first (at most ``depth`` messages).

    ``images(message)`` gives the images of the message replied to (not of the ones above it): they are
    shown with its quote, for this answer only.

    Each message is read as it is now: discord.py's cached copy first (it follows edits), and the copy the
    reply's payload carried (``ref.resolved``, frozen when the reply arrived) only when the cache has none.
    A message in ``deleted`` (deleted since, which removes it from the cache but not from that frozen copy)
    ends the chain: its author took it back, and quoting it would put it in the prompt and the stored answer.
    One in ``edited`` (edited since) that the cache no longer holds is read from Discord, not from the copy.
    """
    chain: list[Quote] = []
    ref = message.reference
    while ref is not None and ref.message_id is not None and len(chain) < depth and _same_place(ref, message):
        if ref.message_id in deleted or isinstance(ref.resolved, discord.DeletedReferencedMessage):
            break
        resolved = _cached(bot, ref.message_id)
        if resolved is None and ref.message_id not in edited:
            resolved = ref.resolved if isinstance(ref.resolved, discord.Message) else None
        if resolved is None:
            resolved = await _fetch(bot, ref.channel_id, ref.message_id)
        elif resolved.poll is not None and not resolved.poll.is_finalised():
            # A poll still open is read from Discord: the cached copy counts no vote cast after it was
            # posted (discord.py counts a vote only for a cached member, and this bot caches none), and
            # "which option is winning?" read every answer at 0.
            resolved = await _fetch(bot, ref.channel_id, ref.message_id, fresh=True) or resolved
        if resolved is None or resolved.channel.id != message.channel.id:
            break
        quote = quote_of(resolved, "reply")
        if images is not None and not chain:
            quote = replace(quote, images=await images(_freshly_signed(resolved, ref.resolved)))
        chain.append(quote)
        ref = resolved.reference
    return list(reversed(chain))


async def channel_context(bot: discord.Client, before: discord.Message, *, count: int, tokens: int,
                          skip: Callable[[discord.Message], bool] = lambda _m: False) -> list[Quote]:
    """Recent messages of ``before``'s channel since the bot last spoke there, oldest first; a message
    ``skip`` names (a blocked member's) is left out and costs nothing."""
    if count <= 0 or tokens <= 0 or before.guild is None:
        return []
    channel = before.channel
    me = bot.user
    cached = sorted((m for m in bot.cached_messages if m.channel.id == channel.id and m.id < before.id),
                    key=lambda m: m.id, reverse=True)
    picked, complete = _take(cached, me, count, tokens, skip)
    if not complete:
        try:
            history = [m async for m in channel.history(limit=count + 1, before=before)]
            picked, _ = _take(history, me, count, tokens, skip)
        except discord.HTTPException as exc:  # no Read Message History here: the cache is what there is
            log.info("no channel history for context in %s: %s", channel.id, exc)
    return list(reversed(picked))


def _take(newest_first: list[discord.Message], me: discord.ClientUser | None, count: int,
          tokens: int, skip: Callable[[discord.Message], bool]) -> tuple[list[Quote], bool]:
    """Quotes of the messages until the bot's own, ``count`` or the token cap (newest first); and whether
    that end was reached. A message costs what is shown of it (cut to ``QUOTE_CHARS``)."""
    picked: list[Quote] = []
    used = 0
    for m in newest_first:
        if me is not None and m.author.id == me.id:
            return picked, True
        if m.type not in CHAT_TYPES or skip(m):
            continue
        quote = quote_of(m, "channel")
        cost = estimate_tokens(quote.text) + 8
        if len(picked) >= count or used + cost > tokens:
            return picked, True
        picked.append(quote)
        used += cost
    return picked, False


class StarterCache:
    """The message each thread was started from, fetched once per thread (None when there is none)."""

    def __init__(self, limit: int = 2000) -> None:
        self.limit = limit
        self._known: dict[int, Quote | None] = {}

    async def get(self, bot: discord.Client, thread: discord.Thread) -> Quote | None:
        if thread.id in self._known:
            return self._known[thread.id]
        message = thread.starter_message
        # A thread started from a message has that message's ID, in the parent channel; a forum or media
        # post (whose parent has no messages) opens with a message of the thread's ID in the thread itself.
        source = thread if isinstance(thread.parent, discord.ForumChannel) else thread.parent
        if message is None and source is not None and hasattr(source, "fetch_message"):
            try:
                message = await source.fetch_message(thread.id)
            except (discord.NotFound, discord.Forbidden):
                message = None  # none (a thread not started from a message), or not readable: kept as such
            except discord.HTTPException as exc:
                # Discord failing now (a 5xx, a rate limit): asked again next time, not kept as "no starter"
                # for the rest of the process (every answer in the post went on without its topic).
                log.debug("could not fetch the starter of thread %s: %s", thread.id, exc.status)
                return None
        quote = quote_of(message, "starter") if message is not None else None
        if len(self._known) >= self.limit:
            self._known.clear()
        self._known[thread.id] = quote
        return quote

    def forget(self, thread_id: int) -> None:
        """The thread was deleted."""
        self._known.pop(thread_id, None)

    def forget_message(self, message_id: int) -> None:
        """A message was edited or deleted: a thread it started reads it afresh (a deleted one is gone)."""
        self._known.pop(message_id, None)  # a thread started from a message has that message's ID
        for thread_id, quote in list(self._known.items()):
            if quote is not None and quote.message_id == str(message_id):
                del self._known[thread_id]
