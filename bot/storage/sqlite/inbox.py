"""The learning inbox on SQLite (see :class:`bot.engine.stores.Inbox`)."""

from __future__ import annotations

import json
import time

from bot.engine.stores import InboxTurn, PendingKey
from bot.storage.shielding import shielded
from bot.storage.sqlite.connection import LedgerDb

_TURN_COLS = "id, thread_id, user_id, author, human, ai, origin, created"


def _turn(row: tuple) -> InboxTurn:
    return InboxTurn(row[0], row[1], row[2], row[3], row[4], row[5], json.loads(row[6]), row[7])


class SqliteInbox:
    """Turns waiting to be learned from, in the ledger file; ``epoch`` names its ID sequence for the watermarks."""

    def __init__(self, db: LedgerDb, epoch: str, *, context_window: int = 8) -> None:
        self._db = db
        self._epoch = epoch
        self.context_window = context_window

    @property
    def epoch(self) -> str:
        return self._epoch

    @shielded
    async def record(self, *, thread_id: str, user_id: str, author: str, human: str, ai: str, origin: dict) -> int:
        async with self._db.tx() as db:
            cur = await db.execute(  # nothing while the person has paused learning (the protocol's docstring)
                "INSERT INTO memory_inbox (thread_id, user_id, author, human, ai, origin, created)"
                " SELECT ?, ?, ?, ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM prefs WHERE user_id = ? AND paused)",
                (thread_id, user_id, author, human, ai, json.dumps(origin), time.time(), user_id),
            )
            if cur.rowcount == 0:
                return 0
            cur = await db.execute(
                "SELECT COUNT(*) FROM memory_inbox WHERE thread_id=? AND user_id=? AND extracted=0",
                (thread_id, user_id),
            )
            (count,) = await cur.fetchone()
        return count

    async def pending(self) -> list[PendingKey]:
        cur = await self._db.conn.execute(
            "SELECT thread_id, user_id, COUNT(*), MAX(created) FROM memory_inbox WHERE extracted=0"
            " GROUP BY thread_id, user_id ORDER BY MAX(created)"
        )
        return [PendingKey(*row) for row in await cur.fetchall()]

    async def batch(self, thread_id: str, user_id: str, context: int) -> tuple[list[InboxTurn], list[InboxTurn]]:
        cur = await self._db.conn.execute(
            f"SELECT {_TURN_COLS} FROM memory_inbox WHERE thread_id=? AND user_id=? AND extracted=0 ORDER BY id",
            (thread_id, user_id),
        )
        pending = [_turn(r) for r in await cur.fetchall()]
        if not pending or context <= 0:
            return [], pending
        cur = await self._db.conn.execute(
            f"SELECT {_TURN_COLS} FROM memory_inbox WHERE thread_id=? AND id<? ORDER BY id DESC LIMIT ?",
            (thread_id, pending[0].id, context),
        )
        before = [_turn(r) for r in reversed(await cur.fetchall())]
        return before, pending

    async def every_turn(self) -> list[InboxTurn]:
        cur = await self._db.conn.execute(f"SELECT {_TURN_COLS} FROM memory_inbox ORDER BY id")
        return [_turn(r) for r in await cur.fetchall()]

    @shielded
    async def rewrite_turns(self, texts: dict[int, tuple[str, str]]) -> None:
        if not texts:
            return
        async with self._db.tx() as db:
            await db.executemany("UPDATE memory_inbox SET human=?, ai=? WHERE id=?",
                                 [(h, a, i) for i, (h, a) in texts.items()])

    @shielded
    async def mark_extracted(self, thread_id: str, ids: list[int]) -> None:
        if not ids:
            return
        async with self._db.tx() as db:
            await db.executemany("UPDATE memory_inbox SET extracted=1 WHERE id=?", [(i,) for i in ids])
            await db.execute(
                "DELETE FROM memory_inbox WHERE thread_id=? AND extracted=1 AND id NOT IN"
                " (SELECT id FROM memory_inbox WHERE thread_id=? ORDER BY id DESC LIMIT ?)",
                (thread_id, thread_id, self.context_window),
            )

    @shielded
    async def edit_message(self, message_id: str, human: str) -> list[InboxTurn]:
        async with self._db.tx() as db:
            cur = await db.execute(
                f"SELECT {_TURN_COLS} FROM memory_inbox WHERE json_extract(origin, '$.message_id')=? ORDER BY id",
                (message_id,),
            )
            before = [_turn(r) for r in await cur.fetchall()]
            if before:
                await db.execute(
                    "UPDATE memory_inbox SET human=? WHERE json_extract(origin, '$.message_id')=?", (human, message_id)
                )
        return before

    @shielded
    async def forget_messages(self, message_ids: set[str]) -> int:
        if not message_ids:
            return 0
        async with self._db.tx() as db:
            cur = await db.executemany(
                "DELETE FROM memory_inbox WHERE json_extract(origin, '$.message_id')=?", [(m,) for m in message_ids]
            )
            return cur.rowcount

    @shielded
    async def forget_thread(self, thread_id: str) -> int:
        async with self._db.tx() as db:
            cur = await db.execute("DELETE FROM memory_inbox WHERE thread_id=?", (thread_id,))
            return cur.rowcount

    @shielded
    async def forget_guild(self, guild_id: str) -> int:
        async with self._db.tx() as db:
            cur = await db.execute("DELETE FROM memory_inbox WHERE json_extract(origin, '$.guild_id')=?", (guild_id,))
            return cur.rowcount
