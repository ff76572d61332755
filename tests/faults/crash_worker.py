"""A bot engine that chats as fast as it can until it is killed (SIGKILL) by test_crash.py.

It prints one line per fact the test can hold it to, flushed before anything else happens:
``READY``; ``TURN <thread> <user> <n>`` once the reply to message n exists (the turn is recorded);
``MEM <user> <key>`` once a memory change is committed. Model calls sleep a little, in a thread, so kills
land everywhere: mid-model-call, mid-checkpoint, mid-extraction, between commits.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from pathlib import Path

from langchain_core.messages import AIMessage

from bot.engine.engine import create_engine
from bot.engine.state import Speaker
from bot.storage import open_storage
from tests.conftest import (
    Call,
    ScriptedChatModel,
    cited_facts,
    default_script,
    make_settings,
    tool_call,
)


def script(call: Call):
    time.sleep(random.uniform(0, 0.02))
    if call.is_extraction:
        facts = [f for f, _n in cited_facts(call)]
        calls = []
        for f in facts:  # two memories per fact: an extraction's changes must land together or not at all
            calls += [tool_call("Memory", {"content": f}, len(calls)), tool_call("Memory", {"content": f"(pair) {f}"}, len(calls) + 1)]
        return AIMessage(content="", tool_calls=calls)
    return default_script(call)


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(data_dir: Path, seed: int) -> None:
    random.seed(seed)
    settings = make_settings(data_dir, memory={"extraction_quiet_seconds": 0.05, "extraction_after_messages": 2},
                             conversation={"summarize_after_messages": 8, "keep_messages": 4})

    async def changed(request, changes) -> None:
        for key in changes.get("inserted", []):
            say(f"MEM {request.user_id} {key}")

    async with open_storage(settings) as storage:
        engine = create_engine(settings, storage, chat_model=ScriptedChatModel(script), on_memory_change=changed)
        await engine.start()
        say("READY")
        n = int(time.time() * 1000) % 1_000_000 * 1000  # distinct message numbers across restarts
        while True:
            thread, user = f"t{n % 3}", f"user{n % 2}"
            speaker = Speaker(user_id=user, name=user, guild_id="900", channel_id=thread, message_id=str(n))
            await engine.reply(thread, speaker, f"I like item{n}")
            say(f"TURN {thread} {user} {n}")
            n += 1
            await asyncio.sleep(random.uniform(0, 0.01))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2])))
