"""Benchmark this project's engine against the reference design, side by side, in one run.

    .venv/bin/python -m benchmarks.run            # full run (a few minutes)
    .venv/bin/python -m benchmarks.run --quick    # smaller figures, for a smoke check

Both designs use the same scripted model (``bench_model.BenchModel``: fixed latency per call, streamed
replies, same token estimate), the same conversations and real SQLite files in a temporary directory.
Latency is measured at the engine boundary (message in -> reply text out), which is what the Discord cog
waits for before sending. Prints one table per target with the ratio ours / reference.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

from langchain_core.messages import HumanMessage
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.store.sqlite.aio import AsyncSqliteStore

from benchmarks.bench_model import BenchModel
from benchmarks.reference import build_reference_graph
from bot.engine import MemoryRepository, Speaker, create_engine
from bot.settings import Settings
from bot.storage import open_storage

TOPICS = ["cycling", "sourdough", "jazz", "rust", "gardening", "chess", "hiking", "pottery", "sailing", "sushi",
          "climbing", "poetry", "astronomy", "tea", "football", "knitting", "linux", "painting", "birds", "running"]
VERBS = ["likes", "is learning", "wants to try", "has been doing", "dislikes", "plans a trip for", "reads about"]


def fact(i: int) -> str:
    r = random.Random(i)
    return f"The user {r.choice(VERBS)} {r.choice(TOPICS)} (note {i}) since {2000 + i % 25}"


def message(i: int) -> str:
    r = random.Random(10_000 + i)
    return f"Message {i}: I was thinking about {r.choice(TOPICS)} and {r.choice(TOPICS)} today, what do you think?"


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir()
               if p.name.endswith(("sqlite", "sqlite-wal", "sqlite-shm", ".db", ".db-wal", ".db-shm")))


# ---------------------------------------------------------------- the two designs, same interface
class Ours:
    name = "ours"

    def __init__(self, data_dir: Path, model: BenchModel, **memory) -> None:
        self.settings = Settings.model_validate(
            # Semantic recall off: the reference has none, and what the embedding model adds to a reply is
            # benchmarks/recall.py's to measure (ms per reply); here both designs do the same work.
            {"bot": {"data_dir": str(data_dir)},
             "memory": {"extraction_quiet_seconds": 0.5, "semantic": "off", **memory}}
        )
        self.model = model

    @asynccontextmanager
    async def open(self) -> AsyncIterator["Ours"]:
        async with open_storage(self.settings) as storage:
            self.engine = create_engine(self.settings, storage, chat_model=self.model)
            await self.engine.start()
            self.store = storage.store
            try:
                yield self
            finally:
                await self.engine.close()

    async def seed(self, user: str, n: int) -> None:
        await MemoryRepository(self.store).apply(user, inserts=[(fact(i), {"guild_id": "1"}) for i in range(n)])

    async def turn(self, thread: str, user: str, text: str) -> tuple[float, float]:
        t0 = time.perf_counter()
        first: list[float] = []
        speaker = Speaker(user_id=user, name=f"user{user}", guild_id="1", channel_id=thread)
        await self.engine.reply(thread, speaker, text, on_delta=lambda _t: first or first.append(time.perf_counter()))
        done = time.perf_counter()
        return done - t0, (first[0] if first else done) - t0

    async def idle(self) -> None:
        await self.engine.close()  # finish tails and flush extraction
        self.engine.scheduler._closed = False


class Reference:
    name = "reference"

    def __init__(self, data_dir: Path, model: BenchModel, **_ignored) -> None:
        self.data_dir = data_dir
        self.model = model

    @asynccontextmanager
    async def open(self) -> AsyncIterator["Reference"]:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        async with AsyncSqliteSaver.from_conn_string(str(self.data_dir / "state.db")) as saver, \
                AsyncSqliteStore.from_conn_string(str(self.data_dir / "store.db")) as store:
            await store.setup()
            self.store = store
            self.graph = build_reference_graph(self.model).compile(checkpointer=saver, store=store)
            yield self

    async def seed(self, user: str, n: int) -> None:
        for i in range(n):
            await self.store.aput(("memories", user), f"seed-{i}", {"content": fact(i)})

    async def turn(self, thread: str, user: str, text: str) -> tuple[float, float]:
        t0 = time.perf_counter()
        await self.graph.ainvoke({"messages": [HumanMessage(content=text)]},
                                 {"configurable": {"thread_id": thread}}, context={"user_id": user})
        elapsed = time.perf_counter() - t0
        return elapsed, elapsed  # the notebook has no streaming: first text is the whole reply

    async def idle(self) -> None:
        return None


DESIGNS = {"ours": Ours, "reference": Reference}
WARMUP = 3  # turns per design before latency is measured, the same for both


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


# ---------------------------------------------------------------- scenarios
async def latency(design_cls, tmp: Path, latency_s: float, turns: int) -> dict:
    model = BenchModel(latency=latency_s)
    d = design_cls(tmp, model)
    lat, ttft = [], []
    async with d.open():
        await d.seed("1", 20)
        for i in range(WARMUP):  # first calls pay one-off costs (imports, caches, statement preparation)
            await d.turn("lat", "1", message(10_000 + i))
            await asyncio.sleep(4 * latency_s)
        for i in range(turns):
            a, b = await d.turn("lat", "1", message(i))
            lat.append(a)
            ttft.append(b)
            await asyncio.sleep(max(0.0, 4 * latency_s - a))  # people take turns; nobody queues behind a tail
    return {"p50": pct(lat, 50), "p95": pct(lat, 95), "ttft50": pct(ttft, 50)}


async def bursty(design_cls, tmp: Path, bursts: int) -> float:
    model = BenchModel(latency=0.0)
    d = design_cls(tmp, model)
    sent = 0
    async with d.open():
        for b in range(bursts):
            for i in range(10):  # 10 messages "a minute" (time scaled down)
                await d.turn("burst", "1", message(sent))
                sent += 1
                await asyncio.sleep(0.02)
            await asyncio.sleep(1.0)  # then quiet (longer than the scaled quiet period)
        await d.idle()
    return model.ledger.count() / sent


async def prompt_tokens(design_cls, tmp: Path, memories: int, checkpoints: tuple[int, ...]) -> dict[int, tuple[float, int]]:
    model = BenchModel(latency=0.0)
    d = design_cls(tmp, model)
    out: dict[int, tuple[float, int]] = {}
    async with d.open():
        await d.seed("1", memories)
        for turn in range(1, max(checkpoints) + 1):
            model.ledger.turn = turn
            await d.turn("tok", "1", message(turn))
            if turn in checkpoints:
                await d.idle()
                window = range(max(1, turn - 49), turn + 1)  # 50 turns: several extraction cycles
                total = model.ledger.tokens_for_turns(window.start, window.stop - 1) / len(window)
                reply = [t for k, t, tn in model.ledger.calls if k == "reply" and tn == turn][-1]
                out[turn] = (total, reply)
    return out


async def db_growth(design_cls, tmp: Path, turns: int) -> int:
    d = design_cls(tmp, BenchModel(latency=0.0))
    async with d.open():
        for i in range(turns):
            await d.turn("db", "1", message(i))
    return folder_bytes(tmp)


async def throughput(design: str, tmp: Path, threads: int, turns_each: int) -> dict:
    d = DESIGNS[design](tmp, BenchModel(latency=0.0))
    errors = 0
    async with d.open():
        async def one(t: int) -> None:
            nonlocal errors
            for i in range(turns_each):
                try:
                    await d.turn(f"th{t}", str(t), message(i))
                except Exception as exc:  # noqa: BLE001 - counted, reported
                    errors += 1
                    if "locked" not in str(exc):
                        raise
        t0 = time.perf_counter()
        await asyncio.gather(*(one(t) for t in range(threads)))
        await d.idle()
        elapsed = time.perf_counter() - t0
    return {"tps": threads * turns_each / elapsed, "errors": errors,
            "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def throughput_in_subprocess(design: str, threads: int, turns_each: int) -> dict:
    """A fresh process per design, so peak memory is that design's own."""
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--throughput-child", design, str(threads), str(turns_each)],
        capture_output=True, text=True, check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- report
def table(title: str, header: list[str], rows: list[list]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    print(f"\n{title}")
    print("| " + " | ".join(str(h).ljust(w) for h, w in zip(header, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(str(x).ljust(w) for x, w in zip(r, widths)) + " |")


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


async def main(quick: bool) -> None:
    turns = 20 if quick else 30
    checkpoints = (10, 100) if quick else (10, 100, 500)
    sizes = (10, 100) if quick else (10, 100, 1000)
    db_turns = 200 if quick else 1000
    with tempfile.TemporaryDirectory() as root:
        root = Path(root)
        rows = []
        for lat_s in ((0.2,) if quick else (0.2, 0.5)):
            res = {n: await latency(c, root / f"lat-{n}-{lat_s}", lat_s, turns) for n, c in DESIGNS.items()}
            o, r = res["ours"], res["reference"]
            for k in ("p50", "p95", "ttft50"):
                rows.append([f"{lat_s * 1000:.0f} ms", k, f"{o[k] * 1000:.0f} ms", f"{r[k] * 1000:.0f} ms",
                             ratio(o[k], r[k]), f"{o[k] / lat_s:.2f}x", f"{r[k] / lat_s:.2f}x"])
        table(f"Reply latency, message in -> reply text out ({turns} turns, one thread, 20 memories)",
              ["model call", "metric", "ours", "reference", "ours/reference", "ours / one call", "reference / one call"],
              rows)

        calls = {n: await bursty(c, root / f"burst-{n}", 2 if quick else 3) for n, c in DESIGNS.items()}
        table("Model calls per user message, bursty chat (10 messages, then quiet)",
              ["ours", "reference", "ours/reference"],
              [[f"{calls['ours']:.2f}", f"{calls['reference']:.2f}", ratio(calls["ours"], calls["reference"])]])

        rows = []
        for m in sizes:
            tok = {n: await prompt_tokens(c, root / f"tok-{n}-{m}", m, checkpoints) for n, c in DESIGNS.items()}
            for t in checkpoints:
                (ot, orp), (rt, rrp) = tok["ours"][t], tok["reference"][t]
                rows.append([m, t, f"{ot:.0f}", f"{rt:.0f}", ratio(ot, rt), orp, rrp])
        table("Prompt tokens per turn (all calls incl. background extraction and summaries, mean of the last "
              "50 turns) and of the reply prompt at that turn",
              ["memories", "turn", "ours", "reference", "ours/reference", "ours reply", "reference reply"], rows)

        size = {n: await db_growth(c, root / f"db-{n}", db_turns) for n, c in DESIGNS.items()}
        table(f"Database bytes after {db_turns} turns in one thread (all SQLite files)",
              ["ours", "reference", "ours/reference"],
              [[f"{size['ours'] / 1024:.0f} KiB", f"{size['reference'] / 1024:.0f} KiB", ratio(size["ours"], size["reference"])]])

    rows = []
    for threads in (1, 10, 100):
        each = 5 if threads < 100 else (2 if quick else 5)
        tp = {}
        for n in DESIGNS:  # median of three runs, each in a fresh process
            runs = sorted((throughput_in_subprocess(n, threads, each) for _ in range(3)), key=lambda x: x["tps"])
            tp[n] = runs[1]
        rows.append([threads, f"{tp['ours']['tps']:.0f}", f"{tp['reference']['tps']:.0f}", ratio(tp["ours"]["tps"], tp["reference"]["tps"]),
                     tp["ours"]["errors"], tp["reference"]["errors"], f"{tp['ours']['rss_mib']:.0f}", f"{tp['reference']['rss_mib']:.0f}"])
    table("Turns per second with a zero-latency model (replies + background work; median of 3 runs), "
          "lock errors, peak RSS (MiB)",
          ["threads", "ours", "reference", "ours/reference", "ours lock errors", "ref lock errors", "ours RSS", "ref RSS"], rows)


def cli() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--throughput-child", nargs=3, metavar=("DESIGN", "THREADS", "TURNS"))
    args = p.parse_args()
    if args.throughput_child:
        design, threads, turns = args.throughput_child
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(asyncio.run(throughput(design, Path(tmp), int(threads), int(turns)))))
        return
    asyncio.run(main(args.quick))


if __name__ == "__main__":
    cli()
