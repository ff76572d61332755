"""Graph state and the per-turn context the graph runs with."""

from __future__ import annotations

from dataclasses import dataclass

from langgraph.graph import MessagesState


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
    use_memories: bool = True  # False in private mode: no memories in the prompt
    dm_in_servers: bool = False  # whether memories learned in DMs may appear in server prompts
    persona_addition: str = ""  # the server's instructions for the bot (/settings), after the persona
    memories_off_here: bool = False  # the server's admins turned memories off in replies there

    @property
    def in_dm(self) -> bool:
        return self.guild_id == "dm"

    def origin(self) -> dict[str, str]:
        """Where a memory learned from this message came from."""
        return {"guild_id": self.guild_id, "channel_id": self.channel_id, "message_id": self.message_id}
