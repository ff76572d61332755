"""What the engine keeps besides LangGraph's checkpointer and store: the interfaces storage implements.

The engine declares these protocols and only ever talks to them; each backend (``bot/storage/sqlite/``,
``bot/storage/postgres/``) implements them, and ``bot.storage.open_storage`` picks one from config. The
arrows run one way: storage imports this package, the engine never imports ``bot.storage``, and no SQL
lives outside the backend folders.

How to add a store (say, per-server settings):

1. Declare it here, in its own module (``bot/engine/stores/guild_settings.py``): a small
   ``typing.Protocol`` with only the methods the engine calls, plus the frozen dataclasses they return.
   Re-export it below and add one attribute for it to :class:`Storage`.
2. Implement it in every backend, one module per store: ``bot/storage/sqlite/guild_settings.py`` (its
   table goes in that backend's ``schema.py``) and ``bot/storage/postgres/guild_settings.py`` (a new
   numbered migration in that backend's ``migrations.py``). Wire the instance into the backend's
   ``open_*`` function, next to the others.
3. If erasing a person must remove rows from it, extend ``Maintenance.erase_person_rows`` in each backend:
   erasure goes through that one method.
4. Test it in ``tests/storage/contract/``, one file per protocol: the ``storage`` fixture there runs every
   test on both backends (``second_process`` and ``raw`` for what one process sees of another, and rows).
"""

from __future__ import annotations

from typing import Protocol

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.store.base import BaseStore

from bot.engine.stores.guild_settings import GuildSettingsStore, ServerSettings
from bot.engine.stores.erasures import ErasureJob, ErasureJournal
from bot.engine.stores.inbox import Inbox, InboxTurn, PendingKey, still_queued
from bot.engine.stores.locks import ClaimLost, CrossProcessLocks, SingleProcessLocks
from bot.engine.stores.maintenance import Maintenance
from bot.engine.stores.prefs import PREF_FIELDS, Prefs, PrefsStore
from bot.engine.stores.reach import MessageReach
from bot.engine.stores.removed_guilds import RemovedGuilds
from bot.engine.stores.scopes import NoScopes, TurnScopes
from bot.engine.stores.usage import UsageRow, UsageStore
from bot.engine.stores.vectors import VectorCache

__all__ = [
    "ClaimLost", "CrossProcessLocks", "ErasureJob", "ErasureJournal", "SingleProcessLocks", "GuildSettingsStore", "Inbox", "InboxTurn", "PendingKey", "still_queued", "Maintenance",
    "MessageReach",
    "PREF_FIELDS", "Prefs", "PrefsStore", "RemovedGuilds", "NoScopes", "ServerSettings", "Storage", "StorageUnavailable", "UsageRow",
    "TurnScopes", "UsageStore", "VectorCache",
]


class StorageUnavailable(Exception):
    """The database cannot be used (unreachable, refused, or at an unknown schema version).

    The message is one line naming what failed, safe to log: it never holds a password.
    """


class Storage(Protocol):
    """Everything persistent, opened once at start-up (``bot.storage.open_storage``) and injected.

    ``checkpointer`` keeps conversation state per thread and ``store`` keeps memories per person
    (LangGraph's own interfaces); the rest are the engine's own small stores.
    """

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
    locks: CrossProcessLocks
    #: Where a turn's storage work begins, waits and ends (see ``stores/scopes.py``).
    scopes: TurnScopes
    #: Errors that mean "the database is unreachable right now, try again later" (an outage, an exhausted
    #: pool), as opposed to a bug. Empty for SQLite, whose file is always there.
    transient_errors: tuple[type[BaseException], ...]
