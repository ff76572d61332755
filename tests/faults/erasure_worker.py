"""Wipes one person from a data directory until it is killed (SIGKILL) by test_erasure_crash.py.

Prints ``ERASING`` just before the erasure starts and ``ERASED <seconds>`` once it returned.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from bot.engine.engine import create_engine
from bot.storage import open_storage
from tests.conftest import ScriptedChatModel, default_script, make_settings


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(data_dir: Path, user: str) -> None:
    settings = make_settings(data_dir)
    async with open_storage(settings) as storage:
        engine = create_engine(settings, storage, chat_model=ScriptedChatModel(default_script))
        say("ERASING")
        started = time.perf_counter()
        await engine.erase_person(user)
        say(f"ERASED {time.perf_counter() - started:.3f}")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))
