"""Command line: ``python -m bot [--config PATH] [run|sync|console|memories|stats]``.

Order of start-up: settings (exit 2 with one line on any problem) -> logging -> storage -> engine -> bot.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path

from bot.engine.stores import StorageUnavailable
from bot.settings import ConfigError, Settings, load_settings

log = logging.getLogger("bot")


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bot", description="A Discord chatbot that remembers people.")
    p.add_argument("--config", default="config.toml", help="path to the TOML config (default: ./config.toml)")
    sub = p.add_subparsers(dest="command")
    sub.add_parser("run", help="run the Discord bot (the default)")
    sub.add_parser("sync", help="push the slash commands to Discord now, then exit")
    c = sub.add_parser("console", help="chat with the engine in this terminal (no Discord token needed)")
    c.add_argument("--user", required=True, help="who you are: used as both your name and your user ID")
    c.add_argument("--thread", default="main", help="conversation ID (default: main)")
    m = sub.add_parser("memories", help="administer what the bot remembers about someone")
    m.add_argument("action", choices=["list", "export", "wipe"])
    m.add_argument("--user", required=True, help="the person's user ID (a Discord user ID)")
    m.add_argument("--yes", action="store_true", help="wipe without asking")
    sub.add_parser("stats", help="print token usage per server and person")
    return p


async def _with_storage(settings: Settings, fn):
    from bot.storage import open_storage

    async with open_storage(settings) as storage:
        return await fn(storage)


async def _console(settings: Settings, user: str, thread: str) -> int:
    from bot.console import run_console
    from bot.engine.service import create_engine

    async def go(storage) -> int:
        engine = create_engine(settings, storage)
        await engine.start()
        try:
            await run_console(engine, user, thread)
        finally:
            await engine.close()
        return 0

    return await _with_storage(settings, go)


async def _memories(settings: Settings, action: str, user: str, yes: bool) -> int:
    from bot.engine.export import export_memories
    from bot.engine.memory import MemoryRepository
    from bot.engine.service import create_engine

    async def go(storage) -> int:
        repo = MemoryRepository(storage.store)
        memories = await repo.list(user)
        if action == "list":
            for m in memories:
                _out(f"{m.short_id}  {m.updated_at:%Y-%m-%d}  {m.origin.get('guild_id', '?'):>20}  {m.content}")
            _out(f"{len(memories)} memories for user {user}")
        elif action == "export":
            _out(json.dumps(export_memories(user, memories), indent=2, ensure_ascii=False))
        else:
            if not yes:
                sys.stdout.write(f"Delete all {len(memories)} memories of user {user}? Type 'yes': ")
                sys.stdout.flush()
                if sys.stdin.readline().strip().lower() != "yes":
                    _out("Nothing deleted.")
                    return 1
            result = await create_engine(settings, storage).erase_person(user)
            _out(f"Deleted {result.memories} memories of user {user}.")
            log.info("shell wipe of user %s: %d memories", user, result.memories)
        return 0

    return await _with_storage(settings, go)


async def _stats(settings: Settings) -> int:
    async def go(storage) -> int:
        rows = await storage.usage.totals()
        _out(f"{'server':>20}  {'user':>20}  {'calls':>7}  {'prompt':>10}  {'completion':>10}")
        for r in rows:
            _out(f"{r.guild_id:>20}  {r.user_id:>20}  {r.calls:>7}  {r.prompt_tokens:>10}  {r.completion_tokens:>10}")
        _out(f"total: {sum(r.prompt_tokens + r.completion_tokens for r in rows)} tokens in {sum(r.calls for r in rows)} calls")
        return 0

    return await _with_storage(settings, go)


def main(argv: list[str] | None = None) -> int:
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

    setup_logging(settings.bot.log_level, settings.secret_values())
    try:
        if command in ("run", "sync"):
            from bot.client import run_discord

            return asyncio.run(run_discord(settings, sync_only=command == "sync"))
        if command == "console":
            return asyncio.run(_console(settings, args.user, args.thread))
        if command == "memories":
            return asyncio.run(_memories(settings, args.action, args.user, args.yes))
        return asyncio.run(_stats(settings))
    except KeyboardInterrupt:
        return 130
    except StorageUnavailable as exc:  # a wrong DATABASE_URL, a server that is not there: one line
        sys.stderr.write(f"storage error: {exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
