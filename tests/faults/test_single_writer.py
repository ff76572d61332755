"""One writer per SQLite data directory, with real processes: a second bot (or console) on the same data
directory refuses with one line; list, export and stats work beside it; a shell wipe while it runs is
done by the running process itself, and nothing the wipe removed is written back."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from tests.fakes.openai_server import FakeOpenAIServer, Reply, ToolCall

ROOT = Path(__file__).resolve().parents[2]
CANARY = "my name is Zanzibar-Quokka-5531"


def model(request: dict) -> Reply:
    """Chat: a short answer. Extraction: remember what the user said (so a write-back would show)."""
    if request.get("tools"):
        said = [m.get("content", "") for m in request.get("messages", []) if m.get("role") == "user"]
        if any("Zanzibar" in s for s in said):
            return Reply(tool_calls=[ToolCall("Memory", {"content": "Their name is Zanzibar-Quokka-5531"})])
        return Reply(tool_calls=[])
    return Reply(text="Nice to meet you!")


async def run(args: list[str], env: dict, stdin: bytes = b"") -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args, cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **env},
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(stdin), 120)
    return proc.returncode, out.decode(), err.decode()


async def read_until(stream: asyncio.StreamReader, marker: str, timeout: float = 60) -> str:
    seen = ""
    while marker not in seen:
        chunk = await asyncio.wait_for(stream.read(200), timeout)
        if not chunk:
            break
        seen += chunk.decode()
    return seen


async def test_a_second_writer_refuses_and_a_shell_wipe_is_done_by_the_running_bot(tmp_path):
    async with FakeOpenAIServer(handler=model) as server:
        cfg = tmp_path / "config.toml"
        cfg.write_text(f'[bot]\ndata_dir = "data"\n[model]\nbase_url = "{server.base_url}"\nstreaming = false\n'
                       '[memory]\nextraction_quiet_seconds = 3600\n')
        env = {"DEEPSEEK_API_KEY": "sk-single-writer-test", "DISCORD_TOKEN": "MTIz.not-a-real-token.abc"}
        first = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "--config", str(cfg), "console", "--user", "lance", cwd=ROOT,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **env},
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            first.stdin.write(f"Hi, {CANARY}\n/memories\n".encode())
            await first.stdin.drain()
            seen = await read_until(first.stdout, "Zanzibar-Quokka-5531\n")
            assert "Their name is Zanzibar-Quokka-5531" in seen, seen
            first.stdin.write(f"and again, {CANARY}\n".encode())  # a turn pending extraction
            await first.stdin.drain()
            await read_until(first.stdout, "bot> Nice to meet you!")

            attempts = 0
            for args in (["console", "--user", "other"], ["run"]):
                code, out, err = await run(["--config", str(cfg), *args], env, b"/quit\n")
                attempts += 1
                lines = [line for line in err.splitlines() if line.strip()]
                assert code == 1 and len(lines) == 1, (args, err)
                assert "already using the data directory" in lines[0] and f"pid {first.pid}" in lines[0]

            code, out, _ = await run(["--config", str(cfg), "memories", "list", "--user", "lance"], env)
            assert code == 0 and "1 memories for user lance" in out
            code, out, _ = await run(["--config", str(cfg), "memories", "export", "--user", "lance"], env)
            assert code == 0 and json.loads(out)["memories"][0]["content"].startswith("Their name")
            code, out, _ = await run(["--config", str(cfg), "stats"], env)
            assert code == 0 and "total:" in out

            code, out, err = await run(["--config", str(cfg), "memories", "wipe", "--user", "lance", "--yes"], env)
            attempts += 1
            assert code == 0 and "the running bot did the wipe" in out, (out, err)
            # "Deleted" once the bot's compaction ran too, not when its journal row went (before it)
            held = [p for p in (tmp_path / "data").rglob("*") if p.is_file() and b"Zanzibar" in p.read_bytes()]
            assert held == [], held
            first.stdin.write(b"/quit\n")  # close: the flush must not write the wiped turn back
            await first.stdin.drain()
            await asyncio.wait_for(first.wait(), 60)
            assert first.returncode == 0
        finally:
            if first.returncode is None:
                first.kill()
                await first.wait()
        code, out, _ = await run(["--config", str(cfg), "memories", "list", "--user", "lance"], env)
        assert "0 memories for user lance" in out, out
        files = [p for p in (tmp_path / "data").rglob("*") if p.is_file() and b"Zanzibar" in p.read_bytes()]
        assert files == []
    from tests.conftest import record_figure

    record_figure("two-process attempts", attempts,
                  "second writers refused with one line; a shell wipe beside the bot done by the bot, 0 written back")
