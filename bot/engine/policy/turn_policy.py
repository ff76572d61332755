"""One :class:`TurnPolicy` per turn: the server's settings and the person's preferences, resolved once.

Before a turn runs, the answering speaker is resolved here in one step: where their memories may be used
(their preferences, the operator's defaults, the server's memory switch), the server's instructions, and
the context quotes minus those of people in private mode. Nothing downstream rewrites the speaker again.
Learning is resolved here too, at the moment the extraction runs (a person may pause, or a server turn
learning off, after turns were queued).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from bot.engine.learning.extraction import WriteRequest
from bot.engine.policy.server_settings import GuildPolicy, GuildSettingsService
from bot.engine.policy.visibility import resolve_visibility
from bot.engine.state import Incoming, Quote, Speaker
from bot.engine.stores import PrefsStore
from bot.settings import Settings


@dataclass(frozen=True)
class TurnPolicy:
    """What one turn may do: the resolved speaker it answers, and whether it is learned from."""

    server: GuildPolicy
    speaker: Speaker  # the answering speaker, with visibility, the server's instructions and the quotes shown
    learning: bool


class Policies:
    """Resolves server settings, personal preferences and visibility for turns and for learning."""

    def __init__(self, settings: Settings, prefs: PrefsStore, servers: GuildSettingsService) -> None:
        self.settings = settings
        self.prefs = prefs
        self.servers = servers

    async def server(self, guild_id: str | int | None) -> GuildPolicy:
        """A server's effective settings (``"dm"``/None: DMs), cached; see ``policy.server_settings``."""
        return await self.servers.policy(guild_id)

    async def for_turn(self, incoming: Sequence[Incoming], *, quotes: Sequence[Quote] = (),
                       server: GuildPolicy | None = None) -> TurnPolicy:
        """Resolve the turn once: the last answered message's author is the one answered."""
        answering = next((m.speaker for m in reversed(incoming) if m.answer), incoming[-1].speaker)
        server = server or await self.server(answering.guild_id)
        prefs = await self.prefs.get(answering.user_id)
        visibility = resolve_visibility(prefs, self.settings.memory, answering.guild_id)
        if not server.use_memories:  # the server's admins keep memories out of replies there
            visibility = replace(visibility, use_memories=False)
        shown = await self._shown_quotes(answering.user_id, tuple(quotes) or answering.quotes)
        # The turn's images ride on the runtime context, never in the thread's messages (see state.Image).
        images = tuple((m.speaker.message_id, m.images) for m in incoming if m.images and m.speaker.message_id)
        addition = server.persona_for(answering.channel_id, answering.parent_id)
        speaker = replace(answering, visibility=visibility, persona_addition=addition,
                          memories_off_here=not server.use_memories, quotes=shown, images=images)
        return TurnPolicy(server=server, speaker=speaker, learning=server.learning)

    async def _shown_quotes(self, user_id: str, quotes: Sequence[Quote]) -> tuple[Quote, ...]:
        """Context quotes minus those of people in private mode (their words are not used for others)."""
        shown = []
        for q in quotes:
            if q.author_id != user_id and not q.is_bot and (await self.prefs.get(q.author_id)).private:
                continue
            shown.append(q)
        return tuple(shown)

    async def for_learning(self, request: WriteRequest) -> WriteRequest | None:
        """The extraction request as it may run now, or None when it must be dropped (paused, learning off)."""
        prefs = await self.prefs.get(request.user_id)
        if prefs.paused:  # paused after these turns were queued: they are dropped, not learned
            return None
        place = str(request.origin.get("guild_id", "dm"))
        if not (await self.server(place)).learning:
            return None  # the server turned learning off after these turns were queued: dropped too
        return replace(request, visibility=resolve_visibility(prefs, self.settings.memory, place, for_reply=False),
                       max_memories=self.settings.memory.max_per_person)
