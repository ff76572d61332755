"""The front door's verbs for a person's memories and preferences (``/memories``, the console, the CLI).

A mixin of :class:`bot.engine.ChatEngine`: the cogs see one object with one short method per verb, and the
verbs live beside what they use. The engine's ``__init__`` sets the attributes annotated here.
"""

from __future__ import annotations

from typing import Awaitable, Callable, MutableMapping

from bot.engine.concurrency import RateLimiter
from bot.engine.erasure.eraser import Eraser
from bot.engine.memories.export import export_memories
from bot.engine.memories.records import Actor, HistoryEntry, MemoryChanges, StoredMemory, same_fact
from bot.engine.memories.repository import MemoryRepository
from bot.engine.recall import SemanticIndex
from bot.engine.stores import Prefs, PrefsStore, Storage, still_queued


class MemoryVerbs:
    """List, teach, correct, delete, export and restore a person's memories; read and set preferences."""

    memories: MemoryRepository
    memory_commands: RateLimiter[str]
    prefs: PrefsStore
    storage: Storage
    eraser: Eraser  # corrections and deletions are removals: they go through the one door
    turns_done: Callable[[str], Awaitable[None]]  # waits for this process's turns in a thread to end
    semantic: SemanticIndex | None  # memory vectors (None: lexical recall only)
    not_learned: MutableMapping[str, None]  # messages never to be learned from (``never_learn``)

    async def list_memories(self, user_id: str | int) -> list[StoredMemory]:
        """Every memory of a person, oldest first."""
        return await self.memories.list(user_id)

    async def count_memories(self, user_id: str | int) -> int:
        """How many memories a person has."""
        return await self.memories.count(user_id)

    async def find_memory(self, user_id: str | int, key_or_prefix: str) -> StoredMemory | None:
        """A person's memory by key or by the short ID shown to them."""
        return await self.memories.resolve(user_id, key_or_prefix)

    async def memory_history(self, user_id: str | int, key: str | None = None) -> list[HistoryEntry]:
        """A person's change log (of one memory, or all)."""
        return await self.memories.history(user_id, key)

    def memory_command_wait(self, user_id: str) -> float:
        """Seconds until the person may teach or import again (0: now, and this one is counted)."""
        return self.memory_commands.retry_after(user_id)

    async def remember(self, user_id: str | int, text: str, origin: dict, *, by: Actor) -> str:
        """Add a memory the person wrote themselves (see :meth:`remember_once`); returns its key."""
        key, _added = await self.remember_once(user_id, text, origin, by=by)
        return key

    async def already_remembered(self, user_id: str | int, text: str, place: str) -> StoredMemory | None:
        """A memory the person wrote by hand, kept in ``place`` alone (a server ID or ``"dm"``), that
        already says ``text`` (case, spacing and a closing full stop aside): "Remember this" twice on one
        message, or the same ``/memories remember``, kept two copies, each counted against the hourly limit
        and the cap.

        The same words kept for another place are not the same memory: where a memory may be used follows
        its places (a DM fact is not used in a server unless the person shares their DMs), so teaching it
        in the server must keep it there too. Nor is a learned one: deleting or editing the message it was
        learned from takes it along, and a memory taught by hand stays (docs/using.md)."""
        wanted = same_fact(text)
        return next((m for m in await self.memories.list(user_id)
                     if m.hand_written and same_fact(m.content) == wanted and m.places() <= {place}), None)

    async def remember_once(self, user_id: str | int, text: str, origin: dict, *, by: Actor) -> tuple[str, bool]:
        """Add a memory the person wrote themselves, after any erasure of theirs running (``Eraser.adding``),
        unless the same hand-written memory is already kept for the place (checked under the erasure lock,
        so two quick clicks store one); returns (key, whether it was added)."""
        async with self.eraser.adding(str(user_id)):
            same = await self.already_remembered(user_id, text, str(origin.get("guild_id") or "dm"))
            if same is not None:
                return same.key, False
            key = await self.memories.add(user_id, text, origin, actor=by)
        self.index_soon(user_id)
        return key, True

    async def edit_memory(self, user_id: str | int, key: str, text: str, origin: dict, *, by: Actor) -> bool:
        """Replace a memory's text with the person's own (through the Eraser: the old text's vector goes)."""
        changed = await self.eraser.replace_memory(user_id, key, text, origin, by=by)
        if changed:
            self.index_soon(user_id)
        return changed

    def index_soon(self, user_id: str | int) -> None:
        """Give a person's new or changed memories their vectors now, in the background, as extraction's
        are: a memory without one counts as typical at the next reply, and at 1,000 memories "what's my PIN
        hint?" just after teaching it would not choose it."""
        if self.semantic is not None:
            user = str(user_id)
            self.semantic.index_later(user, lambda: self.memories.list(user))

    async def delete_memories(self, user_id: str | int, keys: list[str], *, by: Actor,
                              from_message: str | None = None) -> MemoryChanges:
        """Delete memories the person chose (through the Eraser, journaled); ``from_message``: "Forget this"
        on one of their messages, whose turn still waiting to be learned goes too."""
        messages = [str(from_message)] if from_message else []
        return await self.eraser.erase_memories(user_id, keys, by=by, messages=messages)

    def never_learn(self, message_id: str) -> None:
        """"Forget this" on a message not answered yet: it is answered and kept, but never queued to be
        learned from (checked as its turn is queued, in this process: the one that answers it)."""
        self.not_learned[str(message_id)] = None

    async def waiting_to_learn(self, user_id: str | int, thread_id: str, message_id: str) -> bool:
        """Whether one of the person's messages is still queued to be learned from (not learned yet, or
        queued again by an edit).

        A message still being answered is queued only as its turn ends: that turn is waited for first, or
        "Forget this" on it would find nothing and the message would be learned moments later.
        """
        await self.turns_done(str(thread_id))
        return await still_queued(self.storage.inbox, thread_id, str(user_id), message_id)

    async def export(self, user_id: str) -> dict:
        """Everything held as memories about a person, with its change log, as a JSON document."""
        return export_memories(user_id, await self.memories.list(user_id), await self.memories.history(user_id))

    async def restore_memories(self, user_id: str | int, memories: list[dict], history: list[dict], *,
                               by: Actor) -> int:
        """Restore memories read from an export of this person (``parse_import``); returns how many. A text
        the import replaces is removed as an edit's is (through the Eraser: held, journaled, its vector goes)."""
        restored = await self.eraser.restore_memories(user_id, memories, history, by=by)
        if restored:
            self.index_soon(user_id)
        return restored

    async def preferences(self, user_id: str) -> Prefs:
        """A person's memory preferences."""
        return await self.prefs.get(user_id)

    async def set_preferences(self, user_id: str, **values: bool | str) -> None:
        """Change a person's memory preferences."""
        await self.prefs.set(user_id, **values)
