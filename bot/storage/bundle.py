"""The concrete :class:`~bot.engine.stores.Storage` every backend hands out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.store.base import BaseStore

from bot.engine.stores import (
    CrossProcessLocks, ErasureJournal, GuildSettingsStore, Inbox, Maintenance, MessageReach, PrefsStore, RemovedGuilds,
    NoScopes, SingleProcessLocks, TurnScopes, UsageStore, VectorCache,
)


class StorageBusy(RuntimeError):
    """The storage is already in use by another writer (one line, for the person who started this one)."""


@dataclass
class OpenStorage:
    """Everything persistent, opened once at start-up and closed on shutdown (satisfies ``Storage``)."""

    backend: str
    checkpointer: BaseCheckpointSaver
    store: BaseStore
    inbox: Inbox
    prefs: PrefsStore
    usage: UsageStore
    vectors: VectorCache
    maintenance: Maintenance
    removed_guilds: RemovedGuilds
    guild_settings: GuildSettingsStore
    erasures: ErasureJournal
    reach: MessageReach
    locks: CrossProcessLocks = field(default_factory=SingleProcessLocks)
    transient_errors: tuple[type[BaseException], ...] = field(default=())
    scopes: TurnScopes = field(default_factory=NoScopes)
    #: Connections handed out so far, for tests and benchmarks (None: the backend has no pool).
    checkouts: Callable[[], int] | None = None
