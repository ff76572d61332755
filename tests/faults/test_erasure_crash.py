"""Erasure is durable: a wipe killed with SIGKILL at a random moment is finished at the next start, and
then the person's words (and every quote of them) are in no byte of the data directory; a wipe killed
before it was recorded has erased nothing (never half)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from bot.engine.state import Speaker
from tests.conftest import (
    ScriptedChatModel,
    make_settings,
    record_figure,
    running_engine,
)
from tests.faults.test_erasure import ASK, CANARIES, files_containing, quoting_script

ROOT = Path(__file__).resolve().parents[2]
TRIALS = int(os.environ.get("ERASURE_CRASH_TRIALS", "12"))
ALICE, BOB = "802", "803"


async def seed(data_dir: Path) -> int:
    """Alice speaks in six channels; in six others the bot quotes her to Bob, who quotes her too."""
    settings = make_settings(data_dir, conversation={"summarize_after_messages": 8, "keep_messages": 4})
    async with running_engine(settings, ScriptedChatModel(quoting_script)) as engine:
        for c in range(6):
            for said, _ in CANARIES:
                alice = Speaker(user_id=ALICE, name="Alice", guild_id="900", channel_id=f"a{c}", message_id="1")
                await engine.reply(f"a{c}", alice, f"{said} (channel {c})")
        await engine.scheduler.flush()
        for c in range(6):
            bob = Speaker(user_id=BOB, name="Bob", guild_id="900", channel_id=f"b{c}", message_id="2")
            for _, quoted in CANARIES:
                await engine.reply(f"b{c}", bob, f"{ASK} {quoted.split()[0]}?")
                await engine.reply(f"b{c}", bob, f"she wrote {quoted} to me")
            await engine.reply(f"b{c}", bob, f"I like my own bob-only-phrase-{c}")
        origin = {"guild_id": "900", "channel_id": "b0", "message_id": "3", "source": "extraction"}
        await engine.memories.apply(BOB, inserts=[(f"Bob heard Alice say {q}", origin) for _, q in CANARIES])
        await engine.memories.apply(ALICE, inserts=[(f"Alice fact {i}", origin) for i in range(30)])
        count = len(await engine.memories.list(ALICE))
        engine.scheduler._closed = True  # Bob's last turns stay pending: quotes in pending turns too
        engine.scheduler.close = _noop  # type: ignore[method-assign]
    return count


async def _noop(*_a, **_k) -> None:
    return None


def wipe_and_kill(data_dir: Path, after: float | None) -> tuple[bool, float | None]:
    """Run the worker; SIGKILL it ``after`` seconds past ERASING (None: let it finish). Return
    (killed before it reported ERASED, the duration it reported)."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.faults.erasure_worker", str(data_dir), ALICE],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines: list[str] = []
    started = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            lines.append(line.strip())
            if line.startswith("ERASING"):
                started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert started.wait(60), "worker did not start"
    if after is None:
        proc.wait(60)
    else:
        time.sleep(after)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    reader.join(10)
    done = [float(line.split()[1]) for line in lines if line.startswith("ERASED")]
    return not done, (done[0] if done else None)


async def test_a_wipe_killed_at_any_moment_is_finished_at_the_next_start(tmp_path):
    template = tmp_path / "template"
    alice_memories = await seed(template)
    assert all(files_containing(template, q) for _, q in CANARIES)
    calibrate = tmp_path / "calibrate"
    shutil.copytree(template, calibrate)
    _, duration = wipe_and_kill(calibrate, None)
    assert duration is not None
    rng = random.Random(11)
    mid, before_record, after_done = 0, 0, 0
    for trial in range(TRIALS):
        data_dir = tmp_path / f"trial{trial}"
        shutil.copytree(template, data_dir)
        killed_early, _ = wipe_and_kill(data_dir, rng.uniform(0, duration * 1.2))
        settings = make_settings(data_dir)
        async with running_engine(settings, ScriptedChatModel(quoting_script)) as engine:
            # start() has finished any recorded erasure; pending extraction must not bring anything back.
            await engine.scheduler.flush()
            alice = await engine.memories.list(ALICE)
            assert await engine.storage.erasures.unfinished() == []
        left = [q for _, q in CANARIES if files_containing(data_dir, q)]
        assert all(files_containing(data_dir, f"bob-only-phrase-{c}") for c in range(6)), "Bob's words stay"
        if not alice and not left:
            if killed_early:
                mid += 1
            else:
                after_done += 1
            continue
        # Otherwise the kill came before the erasure was recorded: then nothing at all was erased.
        assert killed_early and len(alice) == alice_memories and len(left) == len(CANARIES), (
            f"trial {trial}: a half-finished erasure ({len(alice)} memories, {len(left)} canaries left: "
            f"{[files_containing(data_dir, q) for q in left]})")
        before_record += 1
    assert mid > 0, "no kill landed during an erasure: the trials measured nothing"
    record_figure("SIGKILL trials during a wipe", TRIALS,
                  f"{mid} killed mid-erasure, all finished at restart; {before_record} before it was recorded "
                  f"(nothing erased); {after_done} after; 0 words left on disk, 0 written back")
