"""One of two bot engines on one PostgreSQL database, for test_crash_postgres.py.

``python -m tests.faults.pg_crash_worker DSN NAME SEED TURNS``: chats in its own three channels with
two people the other worker talks to as well (so their extractions contend for the same claims), as fast
as it can, for TURNS turns (0: until killed), then only does memory work. Prints, flushed: ``READY``;
``TURN <thread> <user> <n>`` once the reply to message n exists; ``MEM <user> <key>`` once a memory change
is committed; ``IDLE`` when it stopped chatting.
"""

from __future__ import annotations

import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

from bot.engine.engine import create_engine
from bot.engine.state import Speaker
from bot.storage import open_storage
from tests.conftest import Backend, ScriptedChatModel, make_settings
from tests.faults.crash_worker import say, script

LEASE_SECONDS = 1.5


async def main(dsn: str, name: str, seed: int, turns: int) -> None:
    random.seed(seed)
    settings = make_settings(Path(tempfile.mkdtemp(prefix=f"pgcrash-{name}-")), Backend("postgres", dsn),
                             memory={"extraction_quiet_seconds": 0.05, "extraction_after_messages": 2},
                             conversation={"summarize_after_messages": 8, "keep_messages": 4},
                             storage={"claim_lease_seconds": LEASE_SECONDS, "pool_max_size": 4})

    async def changed(request, changes) -> None:
        for key in changes.get("inserted", []):
            say(f"MEM {request.user_id} {key}")

    async with open_storage(settings) as storage:
        engine = create_engine(settings, storage, chat_model=ScriptedChatModel(script), on_memory_change=changed)
        await engine.start()
        say("READY")
        n = int(time.time() * 1000) % 1_000_000 * 1000 + (0 if name == "a" else 500)  # distinct across runs
        done = 0
        while turns == 0 or done < turns:
            thread, user = f"{name}-t{n % 3}", f"user{n % 2}"
            speaker = Speaker(user_id=user, name=user, guild_id="900", channel_id=thread, message_id=str(n))
            await engine.reply(thread, speaker, f"I like item{n}")
            say(f"TURN {thread} {user} {n}")
            n += 1
            done += 1
            await asyncio.sleep(random.uniform(0, 0.01))
        say("IDLE")
        await asyncio.Event().wait()  # the memory work goes on until this process is stopped


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
