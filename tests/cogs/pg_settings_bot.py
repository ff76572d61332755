"""One bot process for the two-process /settings test: a real MemoryBot in the Discord harness on the
PostgreSQL backend, sharing one database with the other process.

Driven over stdin/stdout, one command a line, one answer a line: ``go`` turns on "answer every message"
in its own channels through real /settings interactions (Apply clicked); ``warm`` sends one message (so
the server's settings are in this process's cache); ``extra`` turns on one more channel of its own;
``check`` sends a plain message in each of the *other* process's channels (its extra one included) and
answers how many were answered; ``quit``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from bot.client import MemoryBot
from bot.engine.engine import create_engine
from bot.storage import open_storage
from tests.cogs.conftest import ALICE, GUILD, GUILD2, GUILD_ID, OWNER
from tests.conftest import Backend, ScriptedChatModel, default_script, make_settings
from tests.fakes import discord_harness as dh

CHANNELS = {"a": [3100 + n for n in range(6)], "b": [3200 + n for n in range(6)]}
EXTRA = {"a": 3199, "b": 3299}


async def main(dsn: str, me: str, data_dir: Path) -> None:
    settings = make_settings(data_dir, Backend("postgres", dsn), model={"streaming": False},
                             limits={"burst": 0}, discord={"respond_channels": []},
                             server_settings={"cache_seconds": 3600})
    ids = CHANNELS["a"] + CHANNELS["b"] + list(EXTRA.values())
    channels = [dh.text_channel(c, GUILD_ID, f"room-{c}") for c in ids]
    async with open_storage(settings) as storage:
        engine = create_engine(settings, storage, chat_model=ScriptedChatModel(default_script))
        bot = MemoryBot(settings=settings, engine=engine, storage=storage)
        h = await dh.start(bot, guilds=[dict(GUILD, channels=GUILD["channels"] + channels), GUILD2])
        try:
            say("ready")
            other = "b" if me == "a" else "a"
            while (command := (await line()).strip()) != "quit":
                if command == "go":
                    for c in CHANNELS[me]:
                        await turn_on(h, c)
                    say("changed")
                elif command == "extra":
                    await turn_on(h, EXTRA[me])
                    say("changed")
                elif command == "warm":
                    await h.send_message(dh.message(dh.snowflake(), EXTRA[other], dh.member(ALICE), "warming",
                                                    guild_id=GUILD_ID))
                    say("warm")
                elif command == "check":
                    answered = 0
                    for c in CHANNELS[other] + [EXTRA[other]]:
                        await h.send_message(dh.message(dh.snowflake(), c, dh.member(ALICE), "hello room",
                                                        guild_id=GUILD_ID))
                        answered += await until(lambda c=c: any("hello room" in (s.content or "")
                                                                for s in h.sent_messages(c)))
                    say(json.dumps({"answered": answered, "errors": len(h.errors)}))
        finally:
            await engine.close()
            await h.close()


async def turn_on(h, channel_id: int) -> None:
    """/settings answer-all <channel> on, then Apply, as the server's owner."""
    res = await h.invoke_slash("settings answer-all", user=OWNER, channel_id=channel_id,
                               options={"channel": dh.text_channel(channel_id, GUILD_ID, "room"), "on": True})
    prompt = res[-1]
    apply = next(b["custom_id"] for row in prompt.components for b in row["components"] if b.get("label") == "Apply")
    done = await h.click(apply, prompt.message, user=OWNER)
    responses = lambda: h.interaction_responses(int(done.interaction["id"]))  # noqa: E731
    assert await until(lambda: any("Done" in (c.content or "") for c in responses())), responses()


async def until(check, timeout: float = 15.0) -> bool:
    """Wait (bounded) for what a PostgreSQL round trip may still be doing when the harness looks idle."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


async def line() -> str:
    return await asyncio.to_thread(sys.stdin.readline)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], Path(sys.argv[3])))
