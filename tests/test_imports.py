"""No import cycles anywhere, and the adapters use only the engine's public face.

Why a test and not a linter: a cycle hidden in a function-local import still ties two modules together (one
cannot be read, tested or moved without the other), and ruff does not see cycles. Every ``import`` in a module
counts here, at any depth, function bodies and ``TYPE_CHECKING`` blocks included.

Edges are the imports a module writes; ``from pkg import sub`` is an edge to ``pkg`` too (it names the
package's ``__init__``). The implicit import of a parent package by ``import pkg.sub`` or
``from pkg.sub import x`` is not an edge: every module would otherwise sit in a cycle with a package
``__init__`` that re-exports it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bot", "cogs", "benchmarks")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def _absolute(node: ast.ImportFrom, current: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = current.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imported(path: Path, name: str, known: set[str]) -> set[str]:
    """The project modules this file imports, resolving relative imports and ``from pkg import submodule``."""
    found: set[str] = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, name, is_package)
            # ``from pkg import sub`` runs pkg's __init__ as written, so it is an edge to pkg as well as to sub.
            found.add(module)
            found |= {f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in known}
    return {m for m in found if m in known and m != name}


def graph() -> dict[str, set[str]]:
    modules = all_modules()
    known = set(modules)
    return {name: imported(path, name, known) for name, path in modules.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_the_cycle_finder_finds_a_cycle_through_a_function_local_import(tmp_path):
    """The checker itself can fail: a two-module cycle, one side imported inside a function."""
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [["a", "b", "c"]]
    source = tmp_path / "b.py"
    source.write_text("def late():\n    from a import thing\n    return thing\n", encoding="utf-8")
    assert imported(source, "b", {"a", "b"}) == {"a"}


def test_there_is_no_import_cycle_anywhere():
    found = cycles(graph())
    assert not found, f"import cycles: {found}"


# What the adapters may import from the engine: its public face only. Tests may import internals.
ADAPTERS = [*(ROOT / "cogs").rglob("*.py"), ROOT / "bot" / "client.py", ROOT / "bot" / "console.py",
            ROOT / "bot" / "__main__.py", ROOT / "bot" / "stats.py", *(ROOT / "benchmarks").rglob("*.py")]


def test_cogs_the_cli_and_the_benchmarks_import_only_the_engine_public_face():
    known = set(all_modules())
    for path in ADAPTERS:
        reached = imported(path, module_name(path), known)
        inside = sorted(m for m in reached if m.startswith("bot.engine."))
        assert not inside, f"{path.relative_to(ROOT)} imports engine internals {inside}; export them from bot.engine"
