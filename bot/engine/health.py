"""The front door's verbs for the health check and the metrics endpoint.

A mixin of :class:`bot.engine.ChatEngine` (see ``memories/verbs.py`` for why mixins).
"""

from __future__ import annotations

import time

from langgraph.store.base import BaseStore

from bot.engine.stores import Inbox, UsageStore
from bot.metrics import Backlog, Metrics


class HealthVerbs:
    """Is storage answering, and how much is waiting to be learned."""

    inbox: Inbox
    store: BaseStore
    usage: UsageStore
    metrics: Metrics

    async def learning_backlog(self) -> Backlog:
        """Turns waiting to be learned from (in every process sharing this storage), and the oldest's age."""
        pending = await self.inbox.pending()
        if not pending:
            return Backlog(turns=0, oldest_age_seconds=0.0)
        oldest = min(p.last_created for p in pending)
        return Backlog(turns=sum(p.count for p in pending), oldest_age_seconds=time.time() - oldest)

    async def storage_answers(self) -> bool:
        """Whether the databases answer a read right now (the health check's storage half)."""
        await self.store.aget(("health",), "ping")
        await self.usage.tokens_today("health")
        return True

    async def sample_backlog(self) -> None:
        """Refresh the backlog gauges from storage (run before each metrics scrape)."""
        self.metrics.set_backlog(await self.learning_backlog())
