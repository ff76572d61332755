"""Footprint of the three installs side by side: light (no semantic recall), semantic (ONNX) and semantic-torch.

    python3 -m benchmarks.footprint                        # builds three venvs under /tmp/mnemo-footprint
    python3 -m benchmarks.footprint --skip-install         # reuses them
    python3 -m benchmarks.footprint --wheels-only          # only the x86_64 / aarch64 wheel check

For each install, in a throwaway venv (``pip install`` of this project with the extra; torch's CPU build comes
from ``PIP_FIND_LINKS``, as in .ci/run):

1. **install size**: ``du`` of the venv's site-packages.
2. **resident memory**: the real bot (real cogs and engine on the Discord harness, ``tests/fakes``, real
   SQLite files; the fake's own records of requests are dropped as the run goes) answers 1,000 messages
   across 100 channels from 20 people, each with 300 memories (past the
   1,000-token memory budget, so every reply that is not lexical-only embeds its query) whose vectors were
   indexed first, as writes do; the model is the benchmark model (``benchmarks/bench_model.py``, no latency).
   VmRSS and VmHWM from ``/proc/self/status`` after the run, with the embedding model loaded: as the last reply
   ends, and at rest (11 s later, once ``bot.malloc``'s periodic trim has run, as in ``python -m bot run``).
3. **warm start-up**: from the process start to ready (storage open, engine started, gateway READY handled,
   embedding model loaded), on the data directory the run above left (files in the page cache), best of 3.

Then (``--wheels``, on by default) it checks that every package the light and semantic installs hold has a
wheel on the package index for x86_64 and for aarch64 Linux (``pip download --only-binary=:all:
--platform ... --no-deps``, CPython 3.11 and 3.12). Prints markdown tables with the command and the date;
nothing here is asserted by a test. Targets (issue 22): semantic install <= 300 MB, running bot <= 250 MB
resident, warm start-up <= 3 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INSTALLS = {"light": "", "semantic": "semantic", "semantic-torch": "semantic-torch"}
CHANNELS, MESSAGES, PEOPLE, MEMORIES = 100, 1000, 20, 300
PLATFORMS = {"x86_64": ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"],
             "aarch64": ["manylinux_2_28_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64"]}


# ---------------------------------------------------------------- the parent: venvs, children, tables
def build(venv: Path, extra: str) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    env = {**os.environ}
    if not env.get("PIP_FIND_LINKS") and Path("/opt/wheels").is_dir():
        env["PIP_FIND_LINKS"] = "/opt/wheels"
    target = f"{ROOT}[{extra}]" if extra else str(ROOT)
    subprocess.run([str(venv / "bin/pip"), "install", "-q", "--disable-pip-version-check", target], check=True, env=env)


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def du_mb(path: Path) -> float:
    out = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0]) / 1e6


def child(venv: Path, mode: str, data: Path, env_extra: dict[str, str]) -> dict:
    """Run this file in the venv's Python (the repository on the path for the harness); its last line is JSON."""
    env = {**os.environ, **env_extra, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    proc = subprocess.run([str(venv / "bin/python"), "-m", "benchmarks.footprint", "--child", mode, "--data", str(data)],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{venv.name} {mode} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["wall"] = wall
    return result


def wheel_check(venvs: dict[str, Path], pythons: tuple[str, ...] = ("3.11", "3.12")) -> list[tuple]:
    """(package==version, {arch/python: ok}) for every package of the light and semantic installs."""
    pins: set[str] = set()
    for name in ("light", "semantic"):
        frozen = subprocess.run([str(venvs[name] / "bin/pip"), "freeze", "--exclude-editable", "--disable-pip-version-check"],
                                capture_output=True, text=True, check=True).stdout
        pins |= {line.strip() for line in frozen.splitlines() if "==" in line and not line.startswith("remembering-bot")}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for pin in sorted(pins, key=str.lower):
            found = {}
            for arch, platforms in PLATFORMS.items():
                for py in pythons:
                    cmd = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                           "--only-binary=:all:", "--python-version", py, "--implementation", "cp", "-d", tmp, pin]
                    for p in platforms:
                        cmd += ["--platform", p]
                    found[f"{arch} py{py}"] = subprocess.run(cmd, capture_output=True, text=True).returncode == 0
            rows.append((pin, found))
    return rows


def main(args: argparse.Namespace) -> int:
    base = Path(args.dir)
    base.mkdir(parents=True, exist_ok=True)
    venvs = {name: base / name for name in INSTALLS}
    names = [n for n in INSTALLS if n in args.installs]
    print(f"command: python -m benchmarks.footprint {' '.join(sys.argv[1:])}")
    print(f"date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; {os.cpu_count()} CPUs, {sys.platform}, "
          f"Python {sys.version.split()[0]}; env {args.env or '-'}")
    if not args.skip_install and not args.wheels_only:
        for name in names:
            print(f"building {name} ...", file=sys.stderr, flush=True)
            build(venvs[name], INSTALLS[name])
    if not args.wheels_only:
        env_extra = dict(kv.split("=", 1) for kv in args.env)
        rows = []
        for name in names:
            data = base / f"data-{name}"
            subprocess.run(["rm", "-rf", str(data)], check=True)
            run = child(venvs[name], "run", data, env_extra)
            starts = [child(venvs[name], "startup", data, env_extra) for _ in range(3)]
            best = min(starts, key=lambda s: s["ready"])
            ready = best["ready"]
            times = ", ".join(f"{s['ready']:.2f}" for s in starts)
            print(f"{name}: start-up {times} s", file=sys.stderr, flush=True)
            run["startup_detail"] = best
            rows.append((name, du_mb(site_packages(venvs[name])), run, ready))
            print(f"{name}: {json.dumps(run)}", file=sys.stderr, flush=True)  # as it comes: the table waits for all
        print()
        print(f"| install | site-packages | embedder | RSS after {MESSAGES:,} replies / {CHANNELS} channels, at rest "
              f"| the same, as the last reply ends | peak (VmHWM) | warm start-up to ready | replies with a query vector |")
        print("|---|---|---|---|---|---|---|---|")
        for name, size, run, ready in rows:
            print(f"| {name} | {size:.0f} MB | {run['embedder'] or 'none (lexical)'} | {run['rss_mb']:.0f} MB | "
                  f"{run['rss_busy_mb']:.0f} MB | {run['hwm_mb']:.0f} MB | {ready:.2f} s | {run['query_vectors']} |")
        print()
        for name, _size, run, _ready in rows:
            d = run["startup_detail"]
            print(f"{name}: start-up (best of 3): imports {d['imports_s']:.2f} s, engine started and READY {d['started_s']:.2f} s,"
                  f" embedding model loaded {d['ready']:.2f} s")
            print(f"{name}: RSS {run['rss_before_mb']:.0f} MB after start-up and indexing {run['indexed']} memories "
                  f"({run['index_s']:.1f} s), {run['rss_mb']:.0f} MB after the replies ({run['replies']} sent, "
                  f"{run['reply_s']:.1f} s)")
    if args.wheels:
        print("\nWheels on the package index for every package of the light and semantic installs "
              "(pip download --only-binary=:all: --no-deps --platform manylinux_2_28/2_17/2014_<arch>):")
        checked = wheel_check(venvs)
        columns = list(checked[0][1]) if checked else []
        print("| package | " + " | ".join(columns) + " |")
        print("|---|" + "---|" * len(columns))
        for pin, found in checked:
            print(f"| {pin} | " + " | ".join("yes" if found[c] else "**NO**" for c in columns) + " |")
        missing = [pin for pin, found in checked if not all(found.values())]
        print(f"\n{len(checked)} packages; without a wheel somewhere: {', '.join(missing) or 'none'}")
    return 0


# ---------------------------------------------------------------- the child: the bot itself
def status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def forget(h) -> int:
    """Count the replies the fake Discord recorded, then drop its records (every request and message it
    saw): they are the harness's memory, not the bot's, and would grow the measured process by tens of MB."""
    sent = len(h.sent_messages())
    h.calls.clear()
    h.messages.clear()
    return sent


async def child_main(mode: str, data: Path) -> dict:
    from bot.malloc import TRIM_SECONDS, return_freed_memory, trim_periodically

    return_freed_memory()  # as `python -m bot run` does at start
    trim_periodically()
    from benchmarks.bench_model import BenchModel
    from benchmarks.run import fact
    from bot.client import MemoryBot
    from bot.engine import MemoryRepository, create_engine
    from bot.settings import Settings
    from bot.storage import open_storage
    from tests.fakes import discord_harness as dh

    imported = time.perf_counter() - START
    guild_id = 700
    people = [dh.user(1000 + i, f"p{i}", global_name=f"Person {i}") for i in range(PEOPLE)]
    channels = [10_000 + i for i in range(CHANNELS)]
    settings = Settings.model_validate({
        "bot": {"data_dir": str(data)},
        "model": {"streaming": False},
        "memory": {"extraction_quiet_seconds": 3600, "extraction_after_messages": 100, "semantic": "auto"},
        "discord": {"gather_seconds": 0, "respond_channels": channels, "channel_context_messages": 0},
        "limits": {"burst": 0},
    })
    guild = dh.guild(guild_id, "Bench", owner_id=int(people[0]["id"]), members=[dh.member(p) for p in people],
                     channels=[dh.text_channel(c, guild_id, f"c{c}") for c in channels])
    out: dict = {}
    async with open_storage(settings) as storage:
        engine = create_engine(settings, storage, chat_model=BenchModel(latency=0.0))
        bot = MemoryBot(settings=settings, engine=engine, storage=storage)
        h = await dh.start(bot, guilds=[guild])
        chat = bot.get_cog("Chat")
        h.idle_check = lambda: chat.idle() and engine.idle()
        try:
            started = time.perf_counter() - START
            loading = [t for t in engine._background if t.get_name() == "load-embedding-model"]
            await asyncio.gather(*loading)
            out["ready"] = time.perf_counter() - START  # (the interpreter's own start is a few ms before START)
            out.update(imports_s=imported, started_s=started)  # the model loads in the background from engine start
            out["embedder"] = engine.semantic.embedder if engine.semantic is not None else ""
            if mode == "startup":
                return out
            repo = MemoryRepository(storage.store)
            t0 = time.perf_counter()
            indexed = 0
            for i, p in enumerate(people):
                await repo.apply(p["id"], inserts=[(fact(i * MEMORIES + j), {"guild_id": str(guild_id)}) for j in range(MEMORIES)])
                if engine.semantic is not None:
                    indexed += await engine.semantic.index(p["id"], await repo.list(p["id"]))
            out.update(indexed=indexed, index_s=time.perf_counter() - t0, rss_before_mb=status_mb("VmRSS"))
            t0 = time.perf_counter()
            forget(h)  # start-up's records
            sent = 0
            for n in range(MESSAGES):
                channel, person = channels[n % CHANNELS], people[n % PEOPLE]
                h.feed("MESSAGE_CREATE", dh.message(dh.snowflake(), channel, dh.member(person),
                                                    f"Message {n}: what do you remember about my cycling and sushi plans?",
                                                    guild_id=guild_id))
                if n % CHANNELS == CHANNELS - 1:
                    await h.settle(timeout=120, quiet=0.1)
                    sent += forget(h)
            await h.settle(timeout=120, quiet=0.2)
            sent += forget(h)
            out.update(reply_s=time.perf_counter() - t0, replies=sent,
                       query_vectors=engine.semantic.query_embeddings if engine.semantic is not None else 0,
                       rss_busy_mb=status_mb("VmRSS"), hwm_mb=status_mb("VmHWM"))
            await asyncio.sleep(TRIM_SECONDS + 1)  # at rest, as an operator reads it: the periodic trim has run
            out["rss_mb"] = status_mb("VmRSS")
            return out
        finally:
            await engine.close()
            await h.close()


START = time.perf_counter()

if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.footprint", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default="/tmp/mnemo-footprint", help="where the venvs are built")
    parser.add_argument("--skip-install", action="store_true", help="reuse the venvs already built in --dir")
    parser.add_argument("--installs", nargs="+", default=list(INSTALLS), choices=list(INSTALLS))
    parser.add_argument("--no-wheels", dest="wheels", action="store_false", help="skip the x86_64/aarch64 wheel check")
    parser.add_argument("--wheels-only", action="store_true", help="only the wheel check (the venvs must exist)")
    parser.add_argument("--env", nargs="*", default=[], help="KEY=VALUE for the bot's process (e.g. MALLOC_ARENA_MAX=2)")
    parser.add_argument("--child", choices=["run", "startup"], help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parsed = parser.parse_args()
    if parsed.child:
        import logging

        logging.basicConfig(level=logging.WARNING)
        print(json.dumps(asyncio.run(child_main(parsed.child, Path(parsed.data)))))
        sys.exit(0)
    sys.exit(main(parsed))
