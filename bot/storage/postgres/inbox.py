"""The learning inbox on PostgreSQL (see :class:`bot.engine.stores.Inbox`)."""

from __future__ import annotations

import logging
import time

from psycopg.types.json import Jsonb

from bot.engine.stores import InboxTurn, PendingKey
from bot.storage.postgres.db import ConnectionLost, PgDb, retried
from bot.storage.postgres.locks import PostgresLocks
from bot.storage.postgres.text import without_nul
from bot.storage.shielding import shielded

log = logging.getLogger(__name__)

# True while the person ``%(user)s`` has paused learning (their preferences; see ``Inbox.record``).
PAUSED = "EXISTS (SELECT 1 FROM bot_prefs WHERE user_id = %(user)s AND paused)"

_TURN_COLS = "id, thread_id, user_id, author, human, ai, origin, created"


def _turn(row: dict) -> InboxTurn:
    return InboxTurn(row["id"], row["thread_id"], row["user_id"], row["author"], row["human"], row["ai"],
                     dict(row["origin"]), row["created"])


class PostgresInbox:
    """Turns waiting to be learned from, in the shared database; ``epoch`` names its ID sequence for the watermarks."""

    def __init__(self, db: PgDb, epoch: str, *, context_window: int = 8) -> None:
        self._db = db
        self._epoch = epoch
        self.context_window = context_window

    @property
    def epoch(self) -> str:
        return self._epoch

    @shielded
    async def record(self, *, thread_id: str, user_id: str, author: str, human: str, ai: str, origin: dict) -> int:
        author, human, ai = without_nul((author, human, ai))
        row = {"thread": thread_id, "user": user_id, "author": author, "human": human, "ai": ai,
               "origin": Jsonb(without_nul(origin)), "created": time.time()}
        try:
            return await self._record(row, again=False)
        except ConnectionLost as exc:  # once more; the row's creation time says whether the first one landed
            log.debug("recording a turn: connection lost (%s); once more on a fresh connection",
                      str(exc).splitlines()[0] if str(exc) else "")
            await exc.sweep()
        return await self._record(row, again=True)

    async def _record(self, row: dict, *, again: bool) -> int:
        # One statement: the insert (unless the person paused learning, or an erasure of them is running in
        # any process) and the count of what is now pending (the CTE's row is not yet visible to the count,
        # hence the + added).
        # Asked again after a lost connection, a row of this thread, person and creation time (to the
        # microsecond, from the first attempt) means the first attempt committed: not inserted twice.
        landed = (" AND NOT EXISTS (SELECT 1 FROM bot_inbox WHERE thread_id = %(thread)s AND user_id = %(user)s"
                  " AND created = %(created)s)") if again else ""
        async with self._db.connection() as conn:
            cur = await conn.execute(
                "WITH added AS (INSERT INTO bot_inbox (thread_id, user_id, author, human, ai, origin, created)"
                " SELECT %(thread)s, %(user)s, %(author)s, %(human)s, %(ai)s, %(origin)s, %(created)s"
                " WHERE NOT " + PostgresLocks.erasing_clause() + " AND NOT " + PAUSED + landed + " RETURNING id)"
                " SELECT (SELECT COUNT(*) FROM added) AS added, COUNT(*) AS n,"
                " COUNT(*) FILTER (WHERE created = %(created)s) AS landed FROM bot_inbox"
                " WHERE thread_id = %(thread)s AND user_id = %(user)s AND NOT extracted",
                row,
            )
            found = await cur.fetchone()
        if found["added"]:
            return int(found["n"]) + int(found["added"])
        if again and found["landed"]:
            return int(found["n"])  # the first attempt's row, already counted
        return 0  # refused: paused, or during an erasure

    @retried
    async def pending(self) -> list[PendingKey]:
        async with self._db.connection() as conn:
            cur = await conn.execute(
                "SELECT thread_id, user_id, COUNT(*) AS n, MAX(created) AS last FROM bot_inbox WHERE NOT extracted"
                " GROUP BY thread_id, user_id ORDER BY MAX(created)"
            )
            return [PendingKey(r["thread_id"], r["user_id"], int(r["n"]), r["last"]) for r in await cur.fetchall()]

    @retried
    async def batch(self, thread_id: str, user_id: str, context: int) -> tuple[list[InboxTurn], list[InboxTurn]]:
        async with self._db.connection() as conn:
            cur = await conn.execute(
                f"SELECT {_TURN_COLS} FROM bot_inbox WHERE thread_id = %s AND user_id = %s AND NOT extracted"
                " ORDER BY id", (thread_id, user_id),
            )
            pending = [_turn(r) for r in await cur.fetchall()]
            if not pending or context <= 0:
                return [], pending
            cur = await conn.execute(
                f"SELECT {_TURN_COLS} FROM bot_inbox WHERE thread_id = %s AND id < %s ORDER BY id DESC LIMIT %s",
                (thread_id, pending[0].id, context),
            )
            before = [_turn(r) for r in reversed(await cur.fetchall())]
        return before, pending

    async def every_turn(self) -> list[InboxTurn]:
        async with self._db.connection() as conn:
            cur = await conn.execute(f"SELECT {_TURN_COLS} FROM bot_inbox ORDER BY id")
            return [_turn(r) for r in await cur.fetchall()]

    @shielded
    async def rewrite_turns(self, texts: dict[int, tuple[str, str]]) -> None:
        if not texts:
            return
        async with self._db.tx() as conn:
            async with conn.cursor() as cur:
                await cur.executemany("UPDATE bot_inbox SET human = %s, ai = %s WHERE id = %s",
                                      [(*without_nul((h, a)), i) for i, (h, a) in texts.items()])

    @shielded
    async def mark_extracted(self, thread_id: str, ids: list[int]) -> None:
        if not ids:
            return
        async with self._db.tx() as conn:
            await conn.execute("UPDATE bot_inbox SET extracted = TRUE WHERE id = ANY(%s)", (list(ids),))
            await conn.execute(
                "DELETE FROM bot_inbox WHERE thread_id = %s AND extracted AND id NOT IN"
                " (SELECT id FROM bot_inbox WHERE thread_id = %s ORDER BY id DESC LIMIT %s)",
                (thread_id, thread_id, self.context_window),
            )

    @shielded
    async def edit_message(self, message_id: str, human: str) -> list[InboxTurn]:
        (human,) = without_nul((human,))
        async with self._db.tx() as conn:
            cur = await conn.execute(
                f"SELECT {_TURN_COLS} FROM bot_inbox WHERE origin->>'message_id' = %s ORDER BY id", (message_id,)
            )
            before = [_turn(r) for r in await cur.fetchall()]
            if before:
                await conn.execute("UPDATE bot_inbox SET human = %s WHERE origin->>'message_id' = %s",
                                   (human, message_id))
        return before

    @shielded
    async def forget_messages(self, message_ids: set[str]) -> int:
        if not message_ids:
            return 0
        async with self._db.tx() as conn:
            cur = await conn.execute("DELETE FROM bot_inbox WHERE origin->>'message_id' = ANY(%s)",
                                     (sorted(message_ids),))
            return cur.rowcount

    @shielded
    async def forget_thread(self, thread_id: str) -> int:
        async with self._db.tx() as conn:
            cur = await conn.execute("DELETE FROM bot_inbox WHERE thread_id = %s", (thread_id,))
            return cur.rowcount

    @shielded
    async def forget_guild(self, guild_id: str) -> int:
        async with self._db.tx() as conn:
            cur = await conn.execute("DELETE FROM bot_inbox WHERE origin->>'guild_id' = %s", (guild_id,))
            return cur.rowcount
