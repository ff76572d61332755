"""The layers hold: the engine imports neither Discord nor the storage backends, and SQL lives only in them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SQL = re.compile(r"\b(SELECT\s.+\sFROM|INSERT\s+INTO|DELETE\s+FROM|UPDATE\s+\w+\s+SET|CREATE\s+(TABLE|INDEX)|PRAGMA\s|VACUUM\b)",
                 re.IGNORECASE)


def imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def strings(path: Path) -> list[str]:
    return [n.value for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def test_the_engine_imports_no_discord_and_no_storage_backend():
    for path in (ROOT / "bot" / "engine").rglob("*.py"):
        bad = {m for m in imports(path) if m.split(".")[0] == "discord" or m == "bot.storage" or m.startswith("bot.storage.")}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_sql_lives_only_in_the_backend_folders():
    backends = {ROOT / "bot" / "storage" / name for name in ("sqlite", "postgres")}
    for folder in ("bot", "cogs"):
        for path in (ROOT / folder).rglob("*.py"):
            if any(b in path.parents for b in backends):
                continue
            found = [s[:60] for s in strings(path) if SQL.search(s)]
            assert not found, f"SQL outside a storage backend in {path.relative_to(ROOT)}: {found}"


def test_backends_import_the_engine_interfaces_not_the_other_way():
    used = set().union(*(imports(p) for p in (ROOT / "bot" / "storage").rglob("*.py")))
    assert "bot.engine.stores" in used
