"""How the extractor reads a conversation: who said what, when, and which message taught what.

Speakers are identified by Discord ID in a header line the bot writes; a message's own text is always
indented under its header (every line of it, however it was split: ``\\n``, ``\\r``, U+2028...), so no text
can start a line of its own, forge a header, or pass as someone else's words. A member whose nickname is
another member's name is still told apart: the ID is in every header and the instructions go by ID.

Cost: the person's messages are given in full (up to ``MAX_MESSAGE_CHARS`` each), the bot's replies cut
to ``REPLY_CHARS`` (facts are about the person, not about what the bot said), and other people's lines cut
to ``CONTEXT_CHARS`` as context only. The new messages are numbered so the model can cite which ones a fact
came from (see ``attribute``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Sequence

from bot.engine.recall.lexical import bm25_scores

MAX_MESSAGE_CHARS = 4000  # a person's own message (what the reply path accepts by default)
REPLY_CHARS = 240
CONTEXT_CHARS = 140
CONTEXT_REPLY_CHARS = 60
_NAME_JUNK = re.compile(r"[\"\[\]#|<>`*_~\\]")


@dataclass(frozen=True)
class TurnText:
    """One exchange as the extractor reads it: what a person wrote, when, where, and the bot's answer."""

    author_id: str
    author: str
    human: str
    ai: str
    at: float = 0.0  # when the message was recorded, about when it was sent (epoch seconds, UTC)
    sent: float = 0.0  # when it was sent, where that is long before ``at``: an edit learned again (0: ``at``)
    origin: dict[str, Any] = field(default_factory=dict)  # guild_id, channel_id, message_id
    thread_id: str = ""
    turn_id: int = 0  # the inbox row


def clean_name(name: str) -> str:
    """A display name safe to put inside a header: one line, no quoting characters, at most 32 chars."""
    return _NAME_JUNK.sub("", " ".join(str(name).split()))[:32] or "someone"


def shorten(text: str, limit: int) -> str:
    """One line of at most ``limit`` characters, cut at a word with an ellipsis."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[:limit].rsplit(" ", 1)[0] or flat[:limit]
    return cut + " …"


def quoted(text: str, indent: str = "    | ") -> str:
    """Every line of ``text`` indented, so none of it can start a line of the transcript."""
    lines = text.splitlines() or [""]
    return "\n".join(indent + line for line in lines)


def stamp(at: float) -> str:
    """``2026-05-08 13:56 UTC (Friday)``: the day name helps resolve "next Friday"."""
    when = datetime.fromtimestamp(at or 0, timezone.utc)
    return when.strftime("%Y-%m-%d %H:%M UTC (%A)")


def context_block(turns: Sequence[TurnText]) -> str:
    """Earlier messages of the conversation, shortened, for context only."""
    if not turns:
        return "(none)"
    out = []
    for t in turns:
        out.append(f"- {stamp(t.sent or t.at)} · user {t.author_id} \"{clean_name(t.author)}\" wrote:")
        out.append(quoted(shorten(t.human, CONTEXT_CHARS)))
        if t.ai:
            out.append("  the assistant answered:")
            out.append(quoted(shorten(t.ai, CONTEXT_REPLY_CHARS)))
    return "\n".join(out)


def new_block(turns: Sequence[TurnText]) -> str:
    """The person's new messages in full, numbered #1.., each with its time and the bot's reply shortened."""
    out = []
    for n, t in enumerate(turns, 1):
        text = t.human if len(t.human) <= MAX_MESSAGE_CHARS else t.human[:MAX_MESSAGE_CHARS] + " [cut]"
        out.append(f"#{n} · {stamp(t.sent or t.at)} · user {t.author_id} \"{clean_name(t.author)}\" wrote:")
        out.append(quoted(text))
        if t.ai:
            out.append("  the assistant answered (shortened):")
            out.append(quoted(shorten(t.ai, REPLY_CHARS)))
    return "\n".join(out) or "(none)"


def source_of(turn: TurnText) -> dict[str, Any]:
    """The provenance entry of a message (see the memory ``sources`` contract)."""
    o = turn.origin
    source = {"guild_id": o.get("guild_id"), "channel_id": o.get("channel_id"), "message_id": o.get("message_id"),
              "at": datetime.fromtimestamp(turn.at or 0, timezone.utc).isoformat(timespec="seconds")}
    if turn.sent:  # ``at`` stays when it was learned (``steps._learned_after``); the memory's date is this
        source["sent_at"] = datetime.fromtimestamp(turn.sent, timezone.utc).isoformat(timespec="seconds")
    return source


def attribute(content: str, cited: Sequence[Any], turns: Sequence[TurnText]) -> list[TurnText]:
    """Which of the new messages a fact came from.

    The model's citations (``#`` numbers) are used when they name real messages. Otherwise (a patch whose
    citation was not updated, a model that did not cite) the fact is matched to the messages by the words
    they share (BM25): the best-matching message, and any other matching nearly as well. When no word is
    shared (a paraphrase), every new message is named: over-attributing keeps a fact alive only until all
    its messages are deleted, while naming the wrong single message would let it outlive the right one.
    """
    numbers = []
    for c in cited or []:
        try:
            n = int(str(c).lstrip("#"))
        except ValueError:
            continue
        if 1 <= n <= len(turns) and n not in numbers:
            numbers.append(n)
    if numbers:
        return [turns[n - 1] for n in sorted(numbers)]
    if len(turns) <= 1:
        return list(turns)
    scores = bm25_scores(content, [t.human for t in turns])
    best = max(scores)
    if best <= 0:
        return list(turns)
    return [t for t, s in zip(turns, scores) if s >= 0.6 * best]
