"""Two processes on one PostgreSQL database, one of them SIGKILLed at random moments, 30 times: every
acknowledged turn is learned exactly once, nothing committed is lost, and the survivor takes the dead
one's work over (once its claim's lease has run out)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg

from tests.conftest import record_figure
from tests.faults.pg_crash_worker import LEASE_SECONDS

ROOT = Path(__file__).resolve().parents[2]
TRIALS = int(os.environ.get("CRASH_TRIALS", "30"))


class Worker:
    """A worker process and the lines it printed (read on a thread)."""

    def __init__(self, dsn: str, name: str, seed: int, turns: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.pg_crash_worker", dsn, name, str(seed), str(turns)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.lines: list[str] = []
        self.ready, self.idle = threading.Event(), threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        assert self.ready.wait(90), f"worker {name} did not start"

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.strip())
            if line.startswith("READY"):
                self.ready.set()
            elif line.startswith("IDLE"):
                self.idle.set()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.reader.join(10)


def facts(lines: list[str]) -> tuple[list[tuple[str, int]], set[str]]:
    turns, keys = [], set()
    for line in lines:
        kind, *rest = line.split()
        if kind == "TURN":
            turns.append((rest[1], int(rest[2])))
        elif kind == "MEM":
            keys.add(rest[1])
    return turns, keys


def memories(dsn: str) -> dict[str, list[str]]:
    """Every person's memory texts, read straight from the store's table."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT prefix, key, value->>'content' FROM store WHERE prefix LIKE 'memories.%'").fetchall()
    out: dict[str, list[str]] = {}
    for prefix, key, content in rows:
        out.setdefault(prefix.split(".", 1)[1], []).append(content)
    return out


def stored_keys(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {r[0] for r in conn.execute("SELECT key FROM store WHERE prefix LIKE 'memories.%'").fetchall()}


def wait_until_nothing_pending(dsn: str, within: float) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        with psycopg.connect(dsn) as conn:
            if conn.execute("SELECT COUNT(*) FROM bot_inbox WHERE NOT extracted").fetchone()[0] == 0:
                return True
        time.sleep(0.2)
    return False


def check_once(dsn: str, acked: list[tuple[str, int]]) -> tuple[list[int], list[int], list[int]]:
    """(never learned, learned twice, half of a pair) among the acknowledged turns."""
    held = memories(dsn)
    missing, twice, half = [], [], []
    for user, n in acked:
        contents = held.get(user, [])
        fact, pair = f"I like item{n}", f"(pair) I like item{n}"
        if fact not in contents and pair not in contents:
            missing.append(n)
        elif (fact in contents) != (pair in contents):
            half.append(n)
        if contents.count(fact) > 1 or contents.count(pair) > 1:
            twice.append(n)
    return missing, twice, half


async def test_thirty_kills_of_one_of_two_processes_lose_nothing(pg_backend):
    dsn = pg_backend.database_url
    rng = random.Random(11)
    survivor = await asyncio.to_thread(Worker, dsn, "b", 999, 40)
    acked: list[tuple[str, int]] = []
    committed: set[str] = set()
    taken_over = 0
    try:
        for trial in range(TRIALS):
            victim = await asyncio.to_thread(Worker, dsn, "a", trial, 0)
            await asyncio.sleep(rng.uniform(0.05, 0.8))
            victim.kill()
            turns, keys = facts(victim.lines)
            acked += turns
            committed |= keys
            assert committed <= stored_keys(dsn), f"trial {trial}: committed memories lost"
            with psycopg.connect(dsn) as conn:
                left = conn.execute("SELECT COUNT(*) FROM bot_inbox WHERE NOT extracted").fetchone()[0]
            taken_over += bool(left)
            # The survivor finishes the dead process's work once the lease runs out.
            assert await asyncio.to_thread(wait_until_nothing_pending, dsn, 20 + 4 * LEASE_SECONDS), \
                f"trial {trial}: the survivor did not take the work over"
            missing, twice, half = check_once(dsn, turns)
            assert (missing, twice, half) == ([], [], []), f"trial {trial}"
        assert await asyncio.to_thread(survivor.idle.wait, 120)
        assert await asyncio.to_thread(wait_until_nothing_pending, dsn, 30)
    finally:
        survivor.kill()
    turns, keys = facts(survivor.lines)
    acked += turns
    committed |= keys
    assert committed <= stored_keys(dsn), "committed memories lost"
    missing, twice, half = check_once(dsn, acked)
    assert missing == [], f"acknowledged turns never learned: {missing[:10]}"
    assert twice == [], f"turns learned twice: {twice[:10]}"
    assert half == [], "an extraction was applied only in part"
    record_figure("SIGKILL trials, 2 processes [postgres]", TRIALS,
                  f"{len(acked)} acknowledged turns, all learned exactly once; {len(committed)} committed memories, none lost; "
                  f"the survivor finished the dead one's pending work in {taken_over} trials")
