"""Graph state and the per-turn context the graph runs with."""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass, field

from langgraph.graph import MessagesState

from bot.engine.policy.visibility import Visibility


class ChatState(MessagesState):
    """A thread's conversation: its recent messages plus a running summary of older ones.

    ``summary_authors`` lists whose messages were folded into the summary, so erasing a person can drop
    a summary that contains their words; ``summary_sources`` lists the message IDs folded into it, so a
    deleted or edited message can drop the summary built from its old text; ``guild_id`` says which
    server the thread is in, ``parent_id`` which channel a thread or forum post belongs to (Discord sends no
    deletion for the archived threads of a deleted channel).
    """

    summary: str
    summary_authors: list[str]
    summary_sources: list[str]
    guild_id: str  # the server the thread belongs to ("dm" for DMs): scopes a moderator purge
    parent_id: str  # a thread's channel ("" for a channel or DM): a deleted channel takes its threads along


IMAGE_TOKENS_UNKNOWN_SIZE = 1000  # a flat estimate for an image whose dimensions are not known


@dataclass(frozen=True)
class Image:
    """An image shown to the model for one answer only: its bytes are never stored anywhere.

    It travels beside the stored text (a placeholder such as ``[image: cat.png, 1.2 MB]``) on the turn's
    :class:`Incoming` and on the runtime context (:class:`Speaker`), never in the thread's messages, so no
    checkpoint, learning row or memory can hold it. Empty ``data`` means it was left out; ``note`` says why
    (animated, not an image), and the model is told so in words.
    """

    name: str
    media_type: str = "image/png"  # from the file's header bytes, not from what the upload claimed
    data: bytes = field(default=b"", repr=False)
    width: int | None = None
    height: int | None = None
    note: str = ""  # why it is not shown (data empty)
    spoiler: bool = False  # the sender hid it behind a spoiler: what is said about it stays hidden too

    @property
    def shown(self) -> bool:
        return bool(self.data)

    def data_url(self) -> str:
        """The image inlined as a ``data:`` URL (Discord's CDN links expire; a provider fetches nothing)."""
        return f"data:{self.media_type};base64,{base64.b64encode(self.data).decode('ascii')}"

    def estimated_tokens(self) -> int:
        """What a provider charges for it, when it reports no usage: OpenAI's tile rule (high detail: fit
        in 2048x2048, shortest side at most 768, then 85 + 170 per 512-pixel tile), else a flat 1,000."""
        if not self.shown:
            return 0
        if not self.width or not self.height:
            return IMAGE_TOKENS_UNKNOWN_SIZE
        w, h = float(self.width), float(self.height)
        scale = min(1.0, 2048 / max(w, h))
        w, h = w * scale, h * scale
        scale = min(1.0, 768 / min(w, h))
        w, h = w * scale, h * scale
        return 85 + 170 * math.ceil(w / 512) * math.ceil(h / 512)


@dataclass(frozen=True)
class Quote:
    """Someone else's message shown to the model for one answer only: never stored, never learned.

    ``kind`` says why it is shown: ``"reply"`` (the message being replied to, and the reply chain above
    it), ``"channel"`` (recent channel messages since the bot last spoke there), ``"starter"`` (the
    message a thread was started from), ``"forward"`` (a message forwarded in a message being answered:
    the author is who forwarded it) or ``"poll"`` (a poll in a message being answered).
    """

    author_id: str
    author_name: str
    text: str
    kind: str = "channel"
    is_bot: bool = False
    is_self: bool = False  # the bot's own message: shown as the assistant's, never as another bot's
    message_id: str = ""  # a quote of a message the thread already holds is not shown twice
    images: tuple[Image, ...] = ()  # images of the message replied to (this answer only; see Image)


@dataclass(frozen=True)
class Speaker:
    """Who sent the message being answered and where: enough to namespace and cite memories.

    ``quotes`` are the context the Discord side gathered for this answer (see :class:`Quote`); they go to
    the model as quoted text in a user-role message, never into the system prompt.
    """

    user_id: str
    name: str
    guild_id: str = "dm"  # a server ID, or "dm"
    channel_id: str = ""
    message_id: str = ""
    sent_at: str = ""  # when the message was sent (ISO 8601, UTC): what "yesterday" in it is counted from
    parent_id: str = ""  # a thread's (or forum post's) channel: its instructions apply in the thread too
    place: str = "a direct message"  # human-readable, for the prompt only
    visibility: Visibility | None = None  # the person's policy here, resolved once per message (the engine)
    persona_addition: str = ""  # the server's instructions for the bot (/settings), after the persona
    memories_off_here: bool = False  # the server's admins turned memories off in replies there
    memories_going: bool = False  # the person is being erased right now: none read, and the prompt says no more
    quotes: tuple[Quote, ...] = ()
    # The turn's images by Discord message ID (see Image): context for this answer only. The speaker is the
    # graph's runtime context, which LangGraph never writes to a checkpoint.
    images: tuple[tuple[str, tuple[Image, ...]], ...] = ()

    @property
    def in_dm(self) -> bool:
        return self.guild_id == "dm"

    @property
    def policy(self) -> Visibility:
        """Where this person's memories may be used (the defaults until the engine resolved it)."""
        return self.visibility or Visibility(place=self.guild_id)

    @property
    def use_memories(self) -> bool:
        """False in private mode: no memories in the prompt."""
        return self.policy.use_memories

    def origin(self) -> dict[str, str]:
        """Where a memory learned from this message came from, and when it was said (``sent_at``): the
        learning queue records a turn after its answer, which can be a timeout or a gathering window later,
        and "yesterday" said at 23:59 was counted from the next day."""
        where = {"guild_id": self.guild_id, "channel_id": self.channel_id, "message_id": self.message_id}
        return {**where, "sent_at": self.sent_at} if self.sent_at else where


@dataclass(frozen=True)
class Incoming:
    """One message of a turn: who sent it and its text. ``answer`` False: heard, not answered (a limit).

    ``text`` is what is stored (image placeholders included); ``images`` are shown to the model with it for
    this answer only and never stored (see :class:`Image`). ``again``: an earlier attempt at the same turn
    may have stored it already (the turn was restarted, for an edit of it or a deletion of another of its
    messages), so it replaces that copy instead of being added twice.
    """

    speaker: Speaker
    text: str
    answer: bool = True
    images: tuple[Image, ...] = ()
    again: bool = False
