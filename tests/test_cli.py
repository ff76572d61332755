"""The shell commands: console chat and memories list/export/wipe, as real processes on real files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(args: list[str], env: dict, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bot", *args], input=stdin, capture_output=True, text=True, cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **env}, timeout=120,
    )


def write_config(tmp_path: Path, base_url: str) -> Path:
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        f'[bot]\ndata_dir = "data"\n[model]\nbase_url = "{base_url}"\nstreaming = false\n'
        '[memory]\nextraction_quiet_seconds = 3600\n'
    )
    return cfg


def test_console_then_memories_list_export_wipe(tmp_path):
    # A standalone fake endpoint in its own process (the console is a separate process too).
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.openai_server", "--port", "0", "--text", "Nice to meet you!"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        line = server.stdout.readline()
        base_url = re.search(r"(http://127\.0\.0\.1:\d+/v1)", line).group(1)
        assert base_url.startswith("http://127.0.0.1:"), line
        cfg = write_config(tmp_path, base_url)
        env = {"DEEPSEEK_API_KEY": "sk-console-test"}
        chat = run(["--config", str(cfg), "console", "--user", "lance"], env, stdin="Hi, my name is Lance\n/quit\n")
        assert chat.returncode == 0, chat.stderr
        assert "bot> Nice to meet you!" in chat.stdout
        assert "sk-console-test" not in chat.stderr
    finally:
        server.terminate()
        server.wait(timeout=10)

    # The fake answered extraction with plain text (no tool calls), so nothing was learned; seed two
    # memories through the same files the console used, then administer them from the shell.
    listed = run(["--config", str(cfg), "memories", "list", "--user", "lance"], {})
    assert listed.returncode == 0 and "0 memories for user lance" in listed.stdout

    seed = (
        "import asyncio\nfrom bot.settings import load_settings\nfrom bot.storage import open_storage\n"
        "from bot.engine.memories.repository import MemoryRepository\n"
        f"s = load_settings({str(cfg)!r}, {{}}, need_model=False)\n"
        "async def go():\n    async with open_storage(s) as st:\n"
        "        await MemoryRepository(st.store).apply('lance', inserts=[('Likes bikes', {'guild_id': 'dm'}),"
        " ('Eats bread', {'guild_id': 'dm'})])\n"
        "asyncio.run(go())\n"
    )
    subprocess.run([sys.executable, "-c", seed], cwd=ROOT, check=True, timeout=60)
    listed = run(["--config", str(cfg), "memories", "list", "--user", "lance"], {})
    assert "2 memories for user lance" in listed.stdout and "Likes bikes" in listed.stdout
    exported = run(["--config", str(cfg), "memories", "export", "--user", "lance"], {})
    doc = json.loads(exported.stdout)
    assert sorted(m["content"] for m in doc["memories"]) == ["Eats bread", "Likes bikes"]
    refused = run(["--config", str(cfg), "memories", "wipe", "--user", "lance"], {}, stdin="no\n")
    assert refused.returncode == 1 and "Nothing deleted" in refused.stdout
    wiped = run(["--config", str(cfg), "memories", "wipe", "--user", "lance", "--yes"], {})
    assert "Deleted 2 memories" in wiped.stdout
    assert "0 memories" in run(["--config", str(cfg), "memories", "list", "--user", "lance"], {}).stdout
    stats = run(["--config", str(cfg), "stats"], {})
    assert stats.returncode == 0 and "total:" in stats.stdout
    after = run(["stats", "--config", str(cfg)], {})  # --config after the command works the same
    assert after.returncode == 0 and after.stdout == stats.stdout


def test_a_data_file_that_is_not_sqlite_stops_a_command_with_one_line(tmp_path):
    """A file in the way (a copy gone wrong, a directory mixed up) ended ``stats`` and ``run`` with
    ``sqlite3.DatabaseError: file is not a database`` and a traceback."""
    cfg = tmp_path / "config.toml"
    cfg.write_text('[bot]\ndata_dir = "data"\n')
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "ledger.sqlite").write_bytes(b"this is not a database at all, " * 100)
    out = run(["stats", "--config", str(cfg)], env={})
    lines = [line for line in out.stderr.splitlines() if line.strip() and " INFO " not in line]
    assert out.returncode == 1, out.stderr
    assert lines == [f"storage error: cannot open the SQLite files in {tmp_path / 'data'}: file is not a database"]


def test_the_health_probe_does_not_load_the_engine(tmp_path):
    """Docker runs ``python -m bot health`` every 30 s: importing LangGraph and LangChain for it cost 1.5 s
    of CPU and 110 MB each time."""
    cfg = tmp_path / "config.toml"
    cfg.write_text('[monitoring]\nhealth = true\nport = 1\n')
    probe = ("import sys; from bot.__main__ import main; code = main(['health', '--config', sys.argv[1]]); "
             "print(code, sorted(m for m in ('bot.engine', 'langgraph', 'langchain_core') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe, str(cfg)], capture_output=True, text=True, cwd=ROOT,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "1 []", out.stdout + out.stderr


def test_operator_mistakes_stop_with_one_line(tmp_path):
    """A mistyped data directory was created empty and reported zeros ("Deleted 0 memories", exit 0); a
    pasted mention named nobody; a dot ended in a storage traceback."""
    cfg = tmp_path / "config.toml"
    cfg.write_text('[bot]\ndata_dir = "no-such-dir"\n')
    for args in (["stats"], ["memories", "list", "--user", "123"], ["memories", "wipe", "--user", "123", "--yes"]):
        out = run([*args, "--config", str(cfg)], env={})
        assert out.returncode == 1 and out.stderr.strip().splitlines() == [
            f"storage error: no SQLite data directory at {tmp_path / 'no-such-dir'} (no ledger.sqlite)"], args
    assert not (tmp_path / "no-such-dir").exists()
    for user, says in (("<@123>", "is a mention"), ("j.doe", "cannot contain a dot"), ("", "is empty")):
        out = run(["memories", "wipe", "--user", user, "--yes", "--config", str(cfg)], env={})
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and says in out.stderr, out.stderr
