"""Token usage and daily budgets: what each call cost, and whether a bucket has anything left today.

A budget bucket is a server, a member in a server, or a person's DMs. A server's budgets are its admins'
choice within the operator's caps (``GuildPolicy``); DM budgets are the operator's (``limits``). Usage
counts older than ``limits.usage_retention_days`` are dropped at start-up and once a UTC day.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter

from langchain_core.messages import BaseMessage

from bot.engine.learning.extraction import WriteRequest
from bot.engine.model import usage_of
from bot.engine.policy.server_settings import GuildPolicy
from bot.engine.recall import estimate_tokens
from bot.engine.state import Speaker
from bot.engine.stores import UsageStore
from bot.settings import LimitsSection

log = logging.getLogger(__name__)

MAX_BUCKETS_NOTICED = 100_000
OWED_WAIT_SECONDS = 2.0


def _today() -> str:
    return time.strftime("%Y-%m-%d", time.gmtime())


class UsageMeter:
    """Records usage per bucket and answers budget questions."""

    def __init__(self, store: UsageStore, limits: LimitsSection) -> None:
        self.store = store
        self.limits = limits
        self._pruned_on = ""
        self._noticed: dict[str, str] = {}  # budget bucket -> UTC day its notice was sent
        # (server, person) -> records left for after an answer and not yet written, and the event set once
        # none is left (see owe)
        self._owed: Counter[tuple[str, str]] = Counter()
        self._paid: dict[tuple[str, str], asyncio.Event] = {}

    def owe(self, speaker: Speaker) -> None:
        """A model call's record is left for after its answer (``conversation.graph.Later``): budget
        checks of the same place wait for it, so a person's next message is checked against the answer
        before it. Counted per server and person, so a busy server's writes never hold up another's checks
        (one process-wide count would rarely be zero with many channels answering)."""
        key = (speaker.guild_id, speaker.user_id)
        self._owed[key] += 1
        self._paid.setdefault(key, asyncio.Event())

    def paid(self, speaker: Speaker) -> None:
        """An owed record was written (or failed and was logged)."""
        key = (speaker.guild_id, speaker.user_id)
        if key not in self._owed:
            return
        self._owed[key] -= 1
        if self._owed[key] <= 0:
            del self._owed[key]
            self._paid.pop(key).set()

    async def settled(self, guild_id: str | None = None, user_id: str | None = None) -> None:
        """Wait for the owed records of a server (or of one person there; no arguments: all of them).

        Milliseconds; a stuck database is not waited out (``OWED_WAIT_SECONDS``). Anything that reads counts
        and must include the answer just given (budget checks, a copy of the data, a test) waits here
        first: the record is written just after the reply, not before it."""
        waits = [done.wait() for (g, u), done in self._paid.items()
                 if (guild_id is None or g == guild_id) and (user_id is None or u == user_id)]
        if waits:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*waits), OWED_WAIT_SECONDS)

    async def record(self, speaker: Speaker, message: BaseMessage, estimated_prompt: int = 0) -> None:
        """Count a reply's tokens against the speaker's buckets (and prune on a new UTC day).

        The provider's figures when it reports them (images included in its prompt count); otherwise
        ``estimated_prompt`` (the prompt's text at ~4 characters a token, plus each image's estimate, see
        ``state.Image``) and the answer's text, so a server without usage figures still spends its budget.
        """
        p, c = usage_of(message)
        if not p and not c:
            p, c = estimated_prompt, (estimate_tokens(message.text) if message.text else 0)
        await self.store.record(speaker.guild_id, speaker.user_id, p, c)
        if self._pruned_on != _today():
            await self.prune()

    async def record_extraction(self, request: WriteRequest, prompt: int, completion: int) -> None:
        """Count an extraction's calls (``CallWatcher``'s sums) against the place it learned from."""
        if prompt or completion:
            await self.store.record(str(request.origin.get("guild_id", "dm")), request.user_id, prompt, completion)

    async def prune(self) -> int:
        """Drop usage counts older than ``limits.usage_retention_days`` (at start-up and once a day)."""
        self._pruned_on = _today()
        cutoff = time.strftime("%Y-%m-%d", time.gmtime(time.time() - 86400 * self.limits.usage_retention_days))
        try:
            return await self.store.prune(cutoff)
        except Exception:  # noqa: BLE001 - housekeeping; tomorrow tries again
            log.exception("pruning old usage counts failed")
            return 0

    async def tokens_today(self, guild_id: str, user_id: str | None = None) -> int:
        """Tokens used today (UTC) in a server (or by one person there, or in DMs)."""
        await self.settled(guild_id, user_id)
        return await self.store.tokens_today(guild_id, user_id)

    async def exhausted(self, speaker: Speaker, policy: GuildPolicy) -> str | None:
        """The budget bucket (a server, a member there, or a person's DMs) with no tokens left today, if any."""
        await self.settled(speaker.guild_id, speaker.user_id if speaker.in_dm else None)
        if speaker.in_dm:
            cap = self.limits.dm_daily_tokens
            if cap and await self.store.tokens_today("dm", speaker.user_id) >= cap:
                return f"dm:{speaker.user_id}"
            return None
        if policy.daily_tokens and await self.store.tokens_today(speaker.guild_id) >= policy.daily_tokens:
            return f"guild:{speaker.guild_id}"
        member = policy.member_daily_tokens
        if member and await self.store.tokens_today(speaker.guild_id, speaker.user_id) >= member:
            return f"member:{speaker.guild_id}:{speaker.user_id}"
        return None

    def first_notice_today(self, bucket: str) -> bool:
        """Whether the out-of-budget notice for ``bucket`` is due (once per bucket per UTC day)."""
        day = _today()
        if self._noticed.get(bucket) == day:
            return False
        if len(self._noticed) > MAX_BUCKETS_NOTICED:
            self._noticed.clear()
        self._noticed[bucket] = day
        return True
