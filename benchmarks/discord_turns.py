"""Gathering through the real Discord path: model calls for a quick burst, and latency of a lone message.

    .venv/bin/python -m benchmarks.discord_turns            # a few minutes
    .venv/bin/python -m benchmarks.discord_turns --quick    # smaller figures, for a smoke check

Runs the real bot (real cogs, real engine, real SQLite files in a temporary folder) on the Discord
harness (``tests/fakes/discord_harness.py``: gateway payloads in, REST calls recorded) with the
benchmark model (``benchmarks/bench_model.py``: fixed latency per call, streamed replies).

1. One person sends three messages 0.4 s apart (all within a second); how many replies and reply
   model calls that costs (target: one reply call). A call started for the first message and cut short
   by the follow-up is counted separately ("cut short"), because it was started and may be billed for
   its prompt.
2. Reply latency of a lone message, message in -> reply sent to Discord, with gathering on
   (``discord.gather_seconds`` 1.5) and off (0), in the same run, as a ratio (target: unchanged), and the
   engine-level figure of ``benchmarks.run`` for the same model latency (the reference table in
   docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

from benchmarks.bench_model import BenchModel
from benchmarks.run import Ours, latency as engine_latency, pct
from bot.client import MemoryBot
from bot.engine import create_engine
from bot.settings import Settings
from bot.storage import open_storage
from tests.fakes import discord_harness as dh

GUILD_ID = 700
PERSON = dh.user(701, "sam", global_name="Sam")


class CountingModel(BenchModel):
    """The benchmark model, also counting reply calls that ran to the end (not cut short)."""

    completed: int = 0

    async def _astream(self, messages, stop=None, run_manager=None, **kwargs):
        async for chunk in super()._astream(messages, stop=stop, run_manager=run_manager, **kwargs):
            yield chunk
        if not kwargs.get("tools"):
            self.completed += 1


@asynccontextmanager
async def bot_rig(tmp: Path, model: BenchModel, gather: float, channels: list[int]) -> AsyncIterator[tuple]:
    settings = Settings.model_validate({
        "bot": {"data_dir": str(tmp)},
        "model": {"streaming": False},
        "memory": {"extraction_quiet_seconds": 3600, "extraction_after_messages": 100},
        "discord": {"gather_seconds": gather, "respond_channels": channels, "channel_context_messages": 0},
        "limits": {"burst": 0},
    })
    guild = dh.guild(GUILD_ID, "Bench", owner_id=int(PERSON["id"]), members=[dh.member(PERSON)],
                     channels=[dh.text_channel(c, GUILD_ID, f"c{c}") for c in channels])
    async with open_storage(settings) as storage:
        engine = create_engine(settings, storage, chat_model=model)
        bot = MemoryBot(settings=settings, engine=engine, storage=storage)
        h = await dh.start(bot, guilds=[guild])
        chat = bot.get_cog("Chat")
        h.idle_check = lambda: chat.idle() and engine.idle()
        sent_at: dict[str, float] = {}

        def record(call):
            out = h._new_message(int(call.params["channel_id"]), call)
            sent_at[out["channel_id"]] = time.perf_counter()
            return out

        h.on("POST", "/channels/{channel_id}/messages", record)
        try:
            yield h, sent_at
        finally:
            await engine.close()
            await h.close()


async def wait_for(predicate, timeout: float = 30.0) -> None:
    end = time.perf_counter() + timeout
    while not predicate():
        if time.perf_counter() > end:
            raise TimeoutError("no reply")
        await asyncio.sleep(0.005)


async def burst(tmp: Path, model_latency: float, bursts: int) -> dict:
    model = CountingModel(latency=model_latency)
    channels = [10_000 + i for i in range(bursts)]
    waits = []
    async with bot_rig(tmp, model, 1.5, channels) as (h, sent_at):
        for channel in channels:
            for i, text in enumerate(("hey", "can you help with my CV?", "hello??")):
                if i:
                    await asyncio.sleep(0.4)
                h.feed("MESSAGE_CREATE", dh.message(dh.snowflake(), channel, dh.member(PERSON), text, guild_id=GUILD_ID))
            last = time.perf_counter()
            await h.settle(timeout=30, quiet=0.2)  # every turn of the burst answered
            waits.append(sent_at[str(channel)] - last)  # to the last reply
        replies = len(h.sent_messages())
    started = model.ledger.count("reply")
    messages = 3 * bursts
    return {"messages": messages, "replies": replies, "completed": model.completed,
            "cut_short": started - model.completed, "calls_per_message": model.completed / messages,
            "wait": statistics.median(waits)}


async def lone(tmp: Path, model_latency: float, gather: float, turns: int) -> dict:
    model = BenchModel(latency=model_latency)
    channel = 20_000
    lat = []
    async with bot_rig(tmp, model, gather, [channel]) as (h, sent_at):
        for i in range(3 + turns):  # three warm-up turns, as in benchmarks.run
            sent_at.pop(str(channel), None)
            t0 = time.perf_counter()
            h.feed("MESSAGE_CREATE", dh.message(dh.snowflake(), channel, dh.member(PERSON), f"question {i}",
                                                guild_id=GUILD_ID))
            await wait_for(lambda: str(channel) in sent_at)
            if i >= 3:
                lat.append(sent_at[str(channel)] - t0)
            await h.settle(timeout=30, quiet=0.05)
            await asyncio.sleep(max(2.0, 4 * model_latency))  # longer than the window: each one is lone
    return {"p50": pct(lat, 50), "p95": pct(lat, 95)}


async def main(quick: bool) -> None:
    bursts = 3 if quick else 8
    turns = 8 if quick else 20
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print("Three messages from one person 0.4 s apart (gather_seconds 1.5)")
        print("| model call | messages | replies | reply calls | cut short | reply calls / message | last message -> last reply |")
        print("|------------|----------|---------|-------------|-----------|-----------------------|----------------------------|")
        for lat_s in (0.2, 1.0):
            b = await burst(root / f"burst-{lat_s}", lat_s, bursts)
            print(f"| {f'{lat_s * 1000:.0f} ms':<10} | {b['messages']:>8} | {b['replies']:>7} | {b['completed']:>11} | "
                  f"{b['cut_short']:>9} | {b['calls_per_message']:>21.2f} | {b['wait'] * 1000:>23.0f} ms |")
        print()
        print("Lone message latency, message in -> reply sent (Discord path), and the engine boundary (benchmarks.run)")
        print("| model call | metric | gathering on | gathering off | on/off | engine only |")
        print("|------------|--------|--------------|---------------|--------|-------------|")
        for lat_s in (0.2,) if quick else (0.2, 0.5):
            on = await lone(root / f"on-{lat_s}", lat_s, 1.5, turns)
            off = await lone(root / f"off-{lat_s}", lat_s, 0.0, turns)
            engine = await engine_latency(Ours, root / f"engine-{lat_s}", lat_s, turns)
            for metric in ("p50", "p95"):
                print(f"| {f'{lat_s * 1000:.0f} ms':<10} | {metric}    | {on[metric] * 1000:>9.0f} ms | "
                      f"{off[metric] * 1000:>10.0f} ms | {on[metric] / off[metric]:>5.2f}x | "
                      f"{engine[metric] * 1000:>8.0f} ms |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer turns, for a smoke check")
    asyncio.run(main(parser.parse_args().quick))
