"""Storage benchmark: pool checkouts per turn, reply overhead on PostgreSQL against SQLite, and turns
per second with one and with two bot processes on one PostgreSQL database at 100 concurrent channels
(with an instant model and with a 200 ms one).

    .venv/bin/python -m benchmarks.storage           # about 3 minutes
    .venv/bin/python -m benchmarks.storage --quick   # a smoke run

The model answers at once (``BenchModel`` with no latency), so what is measured is the engine and its
storage: loading the channel, the person's memories and settings, writing the checkpoint, the inbox and
usage, and (in the throughput runs) the background memory extraction. Each PostgreSQL run gets a fresh
database on ``MNEMO_TEST_POSTGRES`` (default 127.0.0.1:5432, user postgres), dropped afterwards. Lock and
serialization errors are counted: any exception a reply raised.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POOL_MAX = 6  # the default pool_max_size: two processes stay within a 20-connection server (docs/operating.md)
SERVER = os.environ.get("MNEMO_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


def _settings(data_dir: Path, backend: str, dsn: str | None, pool_max: int = 10, sync: bool = True,
              learning: bool = True):
    from pydantic import SecretStr

    from bot.settings import Settings

    settings = Settings.model_validate({
        "bot": {"data_dir": str(data_dir)},
        # Without learning (the reply runs): extraction is off the reply path, and its checkouts are not a turn's.
        "memory": {"extraction_quiet_seconds": 0.2 if learning else 3600,
                   "extraction_after_messages": 5 if learning else 100, "semantic": "off"},
        "limits": {"cooldown_seconds": 0},
        "storage": {"backend": backend, "pool_min_size": 2, "pool_max_size": pool_max, "synchronous_commit": sync},
    })
    if dsn:
        settings = settings.model_copy(update={"secrets": settings.secrets.model_copy(
            update={"database_url": SecretStr(dsn)})})
    return settings


def fresh_database() -> tuple[str, str]:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = f"mnemo_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(SERVER, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name, make_conninfo(**{**conninfo_to_dict(SERVER), "dbname": name})


def drop_database(name: str) -> None:
    import psycopg

    with psycopg.connect(SERVER, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _engine_run(settings, body, latency: float = 0.0):
    from benchmarks.bench_model import BenchModel
    from bot.engine import ChatEngine
    from bot.storage import open_storage

    async with open_storage(settings) as storage:
        engine = ChatEngine(settings=settings, storage=storage, chat_model=BenchModel(latency=latency))
        await engine.start()
        try:
            return await body(engine)
        finally:
            await engine.close()


async def reply_latency(turns: int, channels: int = 100) -> tuple[dict[str, list[float]], dict[str, list[float]],
                                                                   dict[str, float]]:
    """Milliseconds per reply on SQLite, on PostgreSQL and on PostgreSQL with ``synchronous_commit`` off,
    measured side by side in one process: each round sends the same message to the three bots, in a
    rotating order, so a slower stretch of the machine falls on all three alike and the ratio compares like
    with like (run one after another, the ratio moved by a third between runs). Replies go one at a time,
    round robin over ``channels`` channels (each has answered once before, so every reply loads a channel's
    own checkpoint among ``channels``). The first ``channels`` replies (one a new channel each) are timed apart:
    a new channel's first turn writes its checkpoint before the model call (``TurnRunner._durability``), so an
    erasure in another process finds it. Also pool checkouts per turn (the pool's own request counter, the
    turn's writes after the answer included; SQLite has no pool)."""
    from contextlib import AsyncExitStack

    from benchmarks.bench_model import BenchModel
    from bot.engine import ChatEngine, Speaker
    from bot.storage import open_storage

    backends = {"sqlite": ("sqlite", True), "postgres": ("postgres", True), "async": ("postgres", False)}
    databases = {}
    try:
        async with AsyncExitStack() as stack:
            engines = {}
            for key, (backend, sync) in backends.items():
                dsn = None
                if backend == "postgres":
                    databases[key], dsn = fresh_database()
                settings = _settings(Path(tempfile.mkdtemp()), backend, dsn, pool_max=POOL_MAX, sync=sync,
                                     learning=False)
                storage = await stack.enter_async_context(open_storage(settings))
                engine = ChatEngine(settings=settings, storage=storage, chat_model=BenchModel())
                await engine.start()
                stack.push_async_callback(engine.close)
                engines[key] = engine
            times: dict[str, list[float]] = {key: [] for key in engines}
            first: dict[str, list[float]] = {key: [] for key in engines}
            checkouts = dict.fromkeys(engines, 0)
            order = list(engines)
            for i in range(channels + turns):
                channel = str(7000 + i % channels)
                speaker = Speaker(user_id=str(i % 20), name=f"p{i % 20}", guild_id="900", channel_id=channel)
                for key in order[i % 3:] + order[:i % 3]:
                    engine = engines[key]
                    count = engine.storage.checkouts or (lambda: 0)
                    before = count()
                    start = time.perf_counter()
                    await engine.reply(channel, speaker, f"I like benchmark item {i}")
                    elapsed = (time.perf_counter() - start) * 1000
                    await engine.runner.close()  # the turn's tail (its last checkpoint) is part of the turn
                    if i >= channels:
                        times[key].append(elapsed)
                        checkouts[key] += count() - before
                    elif i >= 10:  # the first few warm the process up (imports, caches, the pool)
                        first[key].append(elapsed)
            return times, first, {key: n / turns for key, n in checkouts.items()}
    finally:
        for name in databases.values():
            drop_database(name)


async def worker(dsn: str, first: int, channels: int, turns: int, latency: float = 0.0) -> None:
    """One process of the throughput run: READY, wait for GO on stdin, answer, DONE <turns> <errors>."""
    from bot.engine import Speaker

    async def body(engine) -> None:
        sys.stdout.write("READY\n")
        sys.stdout.flush()
        await asyncio.to_thread(sys.stdin.readline)
        errors = 0

        async def channel(c: int) -> int:
            nonlocal errors
            done = 0
            for i in range(turns):
                speaker = Speaker(user_id=f"u{(c + i) % 20}", name="p", guild_id="900", channel_id=str(c))
                try:
                    await engine.reply(str(c), speaker, f"I like topic {c}-{i}")
                    done += 1
                except Exception:  # noqa: BLE001 - counted: a lock or serialization error, or any other
                    errors += 1
            return done

        done = sum(await asyncio.gather(*(channel(c) for c in range(first, first + channels))))
        sys.stdout.write(f"DONE {done} {errors}\n")
        sys.stdout.flush()

    await _engine_run(_settings(Path(tempfile.mkdtemp()), "postgres", dsn, pool_max=POOL_MAX), body, latency)


def throughput(processes: int, channels: int, turns: int, latency: float = 0.0) -> tuple[float, int]:
    """Turns per second over all processes (GO to the last DONE), and the errors they counted."""
    name, dsn = fresh_database()
    try:
        per = channels // processes
        procs = [subprocess.Popen([sys.executable, "-m", "benchmarks.storage", "worker", dsn, str(p * per), str(per),
                                   str(turns), str(latency)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                 for p in range(processes)]
        for p in procs:
            assert p.stdout.readline().strip() == "READY"
        start = time.perf_counter()
        for p in procs:
            p.stdin.write("GO\n")
            p.stdin.flush()
        results = [p.stdout.readline().split() for p in procs]
        elapsed = time.perf_counter() - start
        for p in procs:
            p.stdin.close()
            p.wait(60)
        done = sum(int(r[1]) for r in results)
        return done / elapsed, sum(int(r[2]) for r in results)
    finally:
        drop_database(name)


def table(title: str, header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([title, line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args, rest = parser.parse_known_args()
    if rest[:1] == ["worker"]:
        asyncio.run(worker(rest[1], int(rest[2]), int(rest[3]), int(rest[4]), float(rest[5])))
        return
    turns = 100 if args.quick else 300
    lat, first, checkouts = asyncio.run(reply_latency(turns))
    print(table("Pool checkouts per answered turn (PostgreSQL; the turn's writes after the answer included)",
                ["synchronous_commit", "checkouts/turn"],
                [["on", f"{checkouts['postgres']:.1f}"], ["off", f"{checkouts['async']:.1f}"]]))
    print()
    p50 = {b: statistics.median(v) for b, v in lat.items()}
    p95 = {b: sorted(v)[int(0.95 * len(v)) - 1] for b, v in lat.items()}
    print(table(f"Reply overhead with an instant model ({turns} replies a backend, one at a time, round robin over"
                f" 100 channels, the backends side by side, ms)",
                ["metric", "sqlite", "postgres", "postgres/sqlite", "postgres, synchronous_commit off", "that/sqlite"],
                [[m, f"{d['sqlite']:.1f}", f"{d['postgres']:.1f}", f"{d['postgres'] / d['sqlite']:.2f}x",
                  f"{d['async']:.1f}", f"{d['async'] / d['sqlite']:.2f}x"] for m, d in (("p50", p50), ("p95", p95))]))
    new = {b: statistics.median(v) for b, v in first.items()}
    print(f"first reply in a new channel (p50 of {len(first['sqlite'])}, ms): sqlite {new['sqlite']:.1f},"
          f" postgres {new['postgres']:.1f} ({new['postgres'] / new['sqlite']:.2f}x), synchronous_commit off"
          f" {new['async']:.1f} ({new['async'] / new['sqlite']:.2f}x)")
    print()
    per_channel = 3 if args.quick else 8
    repeats = 1 if args.quick else 3
    rows = []
    for latency in (0.0, 0.2):
        one = [throughput(1, 100, per_channel, latency) for _ in range(repeats)]
        two = [throughput(2, 100, per_channel, latency) for _ in range(repeats)]
        t1, t2 = statistics.median(t for t, _ in one), statistics.median(t for t, _ in two)
        model = "instant" if not latency else f"{latency * 1000:.0f} ms"
        rows += [[model, "1", f"{t1:.0f}", "1.00x", str(sum(e for _, e in one))],
                 [model, "2", f"{t2:.0f}", f"{t2 / t1:.2f}x", str(sum(e for _, e in two))]]
    print(table(f"Turns per second, 100 concurrent channels on one PostgreSQL database (median of {repeats};"
                f" pool_max_size {POOL_MAX})", ["model", "processes", "turns/s", "vs one process", "errors"], rows))
    print(f"\ncores on this machine: {os.cpu_count()}; load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
