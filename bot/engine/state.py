"""Graph state and the per-turn context the graph runs with."""

from __future__ import annotations

from dataclasses import dataclass

from langgraph.graph import MessagesState

from bot.engine.visibility import Visibility


class ChatState(MessagesState):
    """A thread's conversation: its recent messages plus a running summary of older ones.

    ``summary_authors`` lists whose messages were folded into the summary, so erasing a person can drop
    a summary that contains their words; ``guild_id`` says which server the thread is in.
    """

    summary: str
    summary_authors: list[str]
    guild_id: str  # the server the thread belongs to ("dm" for DMs): scopes a moderator purge


@dataclass(frozen=True)
class Speaker:
    """Who sent the message being answered and where: enough to namespace and cite memories."""

    user_id: str
    name: str
    guild_id: str = "dm"  # a server ID, or "dm"
    channel_id: str = ""
    message_id: str = ""
    place: str = "a direct message"  # human-readable, for the prompt only
    visibility: Visibility | None = None  # the person's policy here, resolved once per message (the engine)
    persona_addition: str = ""  # the server's instructions for the bot (/settings), after the persona
    memories_off_here: bool = False  # the server's admins turned memories off in replies there

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
        """Where a memory learned from this message came from."""
        return {"guild_id": self.guild_id, "channel_id": self.channel_id, "message_id": self.message_id}
