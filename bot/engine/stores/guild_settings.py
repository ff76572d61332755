"""Per-server settings chosen by the server's admins with ``/settings``: what storage must keep.

One record per server, replaced whole, with a version number that goes up by one on every change: a
write says which version it replaces, so two processes changing the same server at once never lose
either change (the loser re-reads and re-applies its edit, see ``bot.engine.policy.server_settings``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Callable, Protocol

Notify = Callable[[str | None], None]  # a server's ID whose settings changed elsewhere; None: maybe all


@dataclass(frozen=True)
class ServerSettings:
    """What a server chose. ``None`` (or an absent channel set) means "the operator's default"."""

    guild_id: str
    respond_channels: frozenset[str] | None = None  # channels/threads where every message is answered
    mentions_off: frozenset[str] = field(default_factory=frozenset)  # channels where mentions are ignored
    persona: str | None = None  # the server's instructions, added after the operator's persona
    channel_personas: dict[str, str] = field(default_factory=dict)  # channel ID -> its instructions, after the server's
    learning: bool | None = None  # learn from conversations in this server
    use_memories: bool | None = None  # put people's memories into replies in this server
    daily_tokens: int | None = None  # this server's daily token budget
    member_daily_tokens: int | None = None  # each member's daily token budget here
    mod_log_channel: str | None = None
    delete_replies: bool | None = None  # delete the bot's reply on Discord when the message it answered is deleted
    version: int = 0  # 0: never stored
    updated_by: str = ""  # the admin's user ID
    updated_at: float = 0.0

    def to_json(self) -> str:
        """The chosen values as one JSON document (what backends store beside the key and the version)."""
        data = {}
        for f in fields(self):
            if f.name in ("guild_id", "version"):
                continue
            value = getattr(self, f.name)
            data[f.name] = sorted(value, key=lambda c: (len(c), c)) if isinstance(value, frozenset) else value
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, guild_id: str, version: int, text: str) -> "ServerSettings":
        """Inverse of :meth:`to_json`; keys a newer version wrote and this one does not know are ignored."""
        data = json.loads(text)
        known = {f.name for f in fields(cls)} - {"guild_id", "version"}
        values = {k: v for k, v in data.items() if k in known}
        for name in ("respond_channels", "mentions_off"):
            if values.get(name) is not None:
                values[name] = frozenset(str(c) for c in values[name])
        if values.get("mentions_off") is None:
            values.pop("mentions_off", None)
        if values.get("channel_personas") is None:
            values.pop("channel_personas", None)
        else:
            values["channel_personas"] = {str(k): str(v) for k, v in values["channel_personas"].items()}
        return cls(guild_id=guild_id, version=version, **values)


class GuildSettingsStore(Protocol):
    """Read rarely (the engine caches), written by admins; every backend implements it."""

    async def get(self, guild_id: str) -> ServerSettings | None:
        """The server's stored settings, or None when it never changed any."""
        ...

    async def put(self, settings: ServerSettings, *, replaces: int) -> bool:
        """Store ``settings`` (its ``version`` is ``replaces + 1``) if the stored version is ``replaces``.

        Returns False, changing nothing, when another writer got there first (or, for ``replaces=0``,
        when a record already exists).
        """
        ...

    async def delete(self, guild_id: str) -> bool:
        """Forget a server's settings (the bot left it); True if there were any."""
        ...

    async def count(self) -> int:
        """How many servers have settings of their own (for ``python -m bot stats``)."""
        ...

    def subscribe(self, notify: Notify) -> None:
        """Call ``notify(guild_id)`` whenever another process changes a server's settings.

        A single-process backend (SQLite) never calls it: every change goes through this process's
        engine, which invalidates its cache itself. A shared backend (PostgreSQL) calls it from
        LISTEN/NOTIFY, and with ``None`` after its listening connection was lost and restored (changes
        may have been missed meanwhile, so every cached entry is dropped).
        """
        ...
