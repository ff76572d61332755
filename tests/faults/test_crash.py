"""Crash safety: a process killed with SIGKILL at random points of a turn comes back with every thread
usable, every memory written before the kill still there, pending memory work resumed, and each
extraction's changes applied all together or not at all."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from langchain_core.messages import HumanMessage

from bot.engine.state import Speaker
from tests.conftest import (
    ScriptedChatModel,
    default_script,
    make_settings,
    record_figure,
    running_engine,
)

ROOT = Path(__file__).resolve().parents[2]
TRIALS = int(os.environ.get("CRASH_TRIALS", "30"))


def run_and_kill(data_dir: Path, seed: int, after: float) -> list[str]:
    """Start the worker, let it run ``after`` seconds past READY, SIGKILL it; return what it printed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.faults.crash_worker", str(data_dir), str(seed)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            lines.append(line.strip())
            if line.startswith("READY"):
                ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert ready.wait(60), "worker did not start"
    time.sleep(after)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    reader.join(10)
    return lines


async def test_thirty_kills_at_random_points_lose_nothing(tmp_path):
    rng = random.Random(7)
    data_dir = tmp_path / "data"
    acked_turns: list[tuple[str, str, int]] = []
    committed: dict[str, set[str]] = {}
    settings = make_settings(data_dir)
    for trial in range(TRIALS):
        lines = run_and_kill(data_dir, seed=trial, after=rng.uniform(0.05, 0.8))
        for line in lines:
            kind, *rest = line.split()
            if kind == "TURN":
                acked_turns.append((rest[0], rest[1], int(rest[2])))
            elif kind == "MEM":
                committed.setdefault(rest[0], set()).add(rest[1])

        # Restart: every memory committed so far is there, and every thread answers.
        async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
            for user, keys in committed.items():
                present = {m.key for m in await engine.memories.list(user)}
                assert keys <= present, f"trial {trial}: committed memories lost"
            for thread in ("t0", "t1", "t2"):
                state = await engine.thread_state(thread)
                reply = await engine.reply(thread, Speaker(user_id="checker", name="checker"), f"ping {trial}")
                assert reply.text.startswith("reply to")
                assert isinstance(state.get("messages", []), list)
            engine.scheduler._closed = True  # leave pending work for the next worker to resume
            engine.scheduler.close = _noop  # type: ignore[method-assign]

    # Finally resume everything pending and check every acknowledged turn was learned, in pairs.
    from tests.faults.crash_worker import script

    async with running_engine(settings, ScriptedChatModel(script)) as engine:
        await engine.scheduler.flush()
        assert await engine.inbox.pending() == []
        missing, half = [], []
        for thread, user, n in acked_turns:
            contents = [m.content for m in await engine.memories.list(user)]
            fact = f"I like item{n}"
            if fact not in contents and f"(pair) {fact}" not in contents:
                missing.append(n)
            elif (fact in contents) != (f"(pair) {fact}" in contents):
                half.append(n)
            assert contents.count(fact) <= 1, f"turn {n} extracted twice"
        assert missing == [], f"acknowledged turns never learned: {missing[:10]}"
        assert half == [], "an extraction was applied only in part"
        assert any(isinstance(m, HumanMessage) for m in (await engine.thread_state("t0"))["messages"])
    record_figure("SIGKILL trials at random points", TRIALS,
                  f"{len(acked_turns)} acknowledged turns, all learned exactly once; "
                  f"{sum(len(k) for k in committed.values())} committed memories, none lost; every thread usable")


async def _noop(*_a, **_k) -> None:
    return None
