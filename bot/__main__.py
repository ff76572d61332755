"""Command line: ``python -m bot [--config PATH] [run|sync|console|memories|stats|health|migrate-storage]``.

Order of start-up: settings (exit 2 with one line on any problem) -> logging -> storage -> engine -> bot.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Awaitable, Callable, TypeVar

from bot.settings import ConfigError, Settings, load_settings

if TYPE_CHECKING:  # the engine (LangGraph, LangChain: 1.5 s) is imported by the commands that use it, not by
    from bot.engine import Storage  # ``health``, which Docker runs every 30 s

log = logging.getLogger("bot")
T = TypeVar("T")


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")


def build_parser() -> argparse.ArgumentParser:
    """``--config`` is accepted before or after the command (``python -m bot console --config x.toml``)."""
    p = argparse.ArgumentParser(prog="python -m bot", description="A Discord chatbot that remembers people.")
    p.add_argument("--config", default="config.toml", help="path to the TOML config (default: ./config.toml)")
    after = argparse.ArgumentParser(add_help=False)  # the same option after the command; not set unless given
    after.add_argument("--config", default=argparse.SUPPRESS, help="path to the TOML config")
    sub = p.add_subparsers(dest="command")
    run = sub.add_parser("run", help="run the Discord bot (the default)", parents=[after])
    run.add_argument("--shards", help="run only these shards in this process, e.g. 0-3 (PostgreSQL only)")
    run.add_argument("--shard-count", type=int, help="how many shards the bot has in all (with --shards)")
    sub.add_parser("sync", help="push the slash commands to Discord now, then exit", parents=[after])
    c = sub.add_parser("console", help="chat with the engine in this terminal (no Discord token needed)",
                       parents=[after])
    c.add_argument("--user", required=True, help="who you are: used as both your name and your user ID")
    c.add_argument("--thread", default="main", help="conversation ID (default: main)")
    m = sub.add_parser("memories", help="administer what the bot remembers about someone", parents=[after])
    m.add_argument("action", choices=["list", "export", "wipe"])
    m.add_argument("--user", required=True, help="the person's user ID (a Discord user ID)")
    m.add_argument("--yes", action="store_true", help="wipe without asking")
    sub.add_parser("stats", help="print usage, the learning backlog and activity, from the database", parents=[after])
    sub.add_parser("health", help="ask the running bot's health endpoint; exit 0 when healthy (Docker HEALTHCHECK)",
                   parents=[after])
    sub.add_parser("migrate-storage", help="copy the SQLite data directory (bot.data_dir) into the empty "
                                          "PostgreSQL database at DATABASE_URL (storage.backend = \"postgres\")",
                   parents=[after])
    return p


async def _with_storage(settings: Settings, fn: Callable[[Storage], Awaitable[T]], *, writer: bool = True,
                        existing: bool = False) -> T:
    from bot.storage import open_storage

    async with open_storage(settings, writer=writer, existing=existing) as storage:
        return await fn(storage)


HANDOFF_WAIT_SECONDS = 120.0


async def _wipe_through_running_bot(settings: Settings, user: str, yes: bool) -> int:
    """The bot holds the data directory: record the wipe in its journal and wait until it has done it.

    Erasing beside a running bot is not safe (its extraction in flight would write back what was
    erased), so the running bot does it, as it does any erasure; this process only records and waits.
    """
    from bot.engine import MemoryRepository, request_erasure

    async def go(storage: Storage) -> int:
        count = len(await MemoryRepository(storage.store).list(user))
        if not yes and not _confirmed(f"Delete all {count} memories of user {user}? Type 'yes': "):
            _out("Nothing deleted.")
            return 1
        job = await request_erasure(storage, user)
        deadline = asyncio.get_running_loop().time() + HANDOFF_WAIT_SECONDS
        while any(j.id == job for j in await storage.erasures.unfinished()):
            if asyncio.get_running_loop().time() > deadline:
                _out(f"The running bot has the wipe of user {user} recorded but has not finished it yet; it will.")
                return 1
            await asyncio.sleep(0.5)
        # The row goes before the wipe's compaction (VACUUM, the WAL emptied) runs: until that is paid, a
        # file may still hold the words. Debts are paid oldest first; one owed since before now is ours.
        seen = time.time()
        while (owed := await storage.erasures.compaction_owed()) is not None and owed <= seen:
            if asyncio.get_running_loop().time() > deadline:
                _out(f"The running bot erased user {user} but has not compacted its files yet; it will.")
                return 1
            await asyncio.sleep(0.5)
        _out(f"Deleted {count} memories of user {user} (the running bot did the wipe).")
        log.info("shell wipe of user %s handed to the running bot", user)
        return 0

    return await _with_storage(settings, go, writer=False)


def _bad_user(user: str) -> str | None:
    """Why ``--user`` cannot name anyone (None: it can). A mention pasted as ``<@123>`` named nobody, and
    a wipe of it reported "Deleted 0 memories" while the person's data stayed; a dot or an empty name
    ended in a storage traceback."""
    if not user.strip():
        return "is empty"
    if user.startswith("<@"):
        return "is a mention: give the user ID alone (the digits)"
    if "." in user or "\x00" in user:
        return "cannot contain a dot or a NUL character"
    return None


def _confirmed(question: str) -> bool:
    sys.stdout.write(question)
    sys.stdout.flush()
    return sys.stdin.readline().strip().lower() == "yes"


async def _console(settings: Settings, user: str, thread: str) -> int:
    from bot.console import run_console
    from bot.engine import create_engine

    async def go(storage: Storage) -> int:
        engine = create_engine(settings, storage)
        await engine.start()
        try:
            await run_console(engine, user, thread)
        finally:
            await engine.close()
        return 0

    return await _with_storage(settings, go)


async def _memories(settings: Settings, action: str, user: str, yes: bool) -> int:
    from bot.engine import MemoryRepository, create_engine, export_memories

    async def go(storage: Storage) -> int:
        repo = MemoryRepository(storage.store)
        memories = await repo.list(user)
        if action == "list":
            for m in memories:
                _out(f"{m.short_id}  {m.created_at:%Y-%m-%d}  {str(m.origin.get('guild_id') or '?'):>20}  {m.content}")
            _out(f"{len(memories)} memories for user {user}")
        elif action == "export":
            _out(json.dumps(export_memories(user, memories), indent=2, ensure_ascii=False))
        else:
            if not yes and not _confirmed(f"Delete all {len(memories)} memories of user {user}? Type 'yes': "):
                _out("Nothing deleted.")
                return 1
            result = await create_engine(settings, storage).erase_person(user)
            _out(f"Deleted {result.memories} memories of user {user}.")
            log.info("shell wipe of user %s: %d memories", user, result.memories)
        return 0

    if action == "wipe":
        from bot.storage import StorageBusy

        try:
            return await _with_storage(settings, go, existing=True)
        except StorageBusy:
            return await _wipe_through_running_bot(settings, user, yes)
    return await _with_storage(settings, go, writer=False, existing=True)  # reading beside a running bot is safe


async def _stats(settings: Settings) -> int:
    from bot.stats import collect_stats, render_stats

    async def go(storage: Storage) -> int:
        for line in render_stats(await collect_stats(storage)):
            _out(line)
        return 0

    return await _with_storage(settings, go, writer=False, existing=True)


def _health(settings: Settings) -> int:
    from bot.probe import probe_health

    healthy, line = probe_health(settings.monitoring)
    _out(line)
    return 0 if healthy else 1


async def _migrate_storage(settings: Settings) -> int:
    if settings.storage.backend != "postgres":
        sys.stderr.write('error: migrate-storage copies into PostgreSQL: set storage.backend = "postgres" '
                         "and DATABASE_URL (bot.data_dir names the SQLite data directory to copy)\n")
        return 2
    from bot.storage.migrate import migrate_sqlite_to_postgres

    done = await migrate_sqlite_to_postgres(settings)
    _out(f"copied {done.threads} conversations, {done.items} memory-store items and {done.rows} rows "
         f"({done.pending_turns} turns still to learn from) from {settings.bot.data_dir} into PostgreSQL")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit code: 0 done, 1 not done (one line says why), 2 bad config or arguments, 130 interrupted."""
    args = build_parser().parse_args(argv)
    command = args.command or "run"
    try:
        settings = load_settings(
            Path(args.config),
            need_discord=command in ("run", "sync"),
            need_model=command in ("run", "console"),
        )
    except ConfigError as exc:
        sys.stderr.write(f"config error: {exc}\n")
        return 2
    from bot.logs import setup_logging

    if command == "health":  # no logging set-up, no storage: a probe that runs every few seconds
        return _health(settings)
    setup_logging(settings.bot.log_level, settings.secret_values())
    if settings.limits.cooldown_seconds is not None:
        log.warning("config key 'limits.cooldown_seconds' is no longer used: limits.burst and "
                    "limits.refill_seconds (a token bucket) replace it")
    user = getattr(args, "user", None)
    if user is not None and (problem := _bad_user(user)):
        sys.stderr.write(f"error: --user {user!r} {problem}\n")
        return 2
    from bot.engine import StorageUnavailable
    from bot.sharding import ShardError, parse_shards
    from bot.storage import StorageBusy

    try:
        shards = parse_shards(getattr(args, "shards", None), getattr(args, "shard_count", None),
                              backend=settings.storage.backend)
    except ShardError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    try:
        if command in ("run", "sync"):
            from bot.client import StartupError, run_discord
            from bot.malloc import return_freed_memory, trim_periodically
            from bot.metrics import Metrics

            return_freed_memory()  # a long-running process: resident memory follows use (bot/malloc.py)
            trim_periodically()

            metrics = Metrics(active_channel_seconds=settings.monitoring.active_channel_seconds)
            try:
                return asyncio.run(run_discord(settings, sync_only=command == "sync", metrics=metrics, shards=shards))
            except StartupError as exc:
                sys.stderr.write(f"cannot start: {exc}\n")
                return 1
        if command == "console":
            return asyncio.run(_console(settings, args.user, args.thread))
        if command == "migrate-storage":
            return asyncio.run(_migrate_storage(settings))
        if command == "memories":
            return asyncio.run(_memories(settings, args.action, args.user, args.yes))
        return asyncio.run(_stats(settings))
    except StorageBusy as exc:  # a second writer on an embedded database: one line, no traceback
        sys.stderr.write(f"error: {exc}; stop it first (one process per data directory)\n")
        return 1
    except KeyboardInterrupt:
        return 130
    except StorageUnavailable as exc:  # a wrong DATABASE_URL, a server that is not there: one line
        sys.stderr.write(f"storage error: {exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
