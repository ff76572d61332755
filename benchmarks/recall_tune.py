"""Tune the choice's weights on the hard set's tune split: index once, then score many weight sets.

    python -m benchmarks.recall_tune [--data benchmarks/data/hard_tune_locomo.json] [--limit N]

Prints any/all per setting at 1,000 memories and the default budget. Only the tune split is for this; the
figures to report come from ``benchmarks.recall`` on the test split.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from pathlib import Path

from benchmarks.recall import CachedEmbeddings, by_category, evaluate, grown, load
from bot.engine.recall import DEFAULT_WEIGHTS, SemanticIndex
from bot.engine.recall.embedders import LocalMiniLM
from bot.engine.recall.vectors import MemoryVectorCache

GRID = [{}, {"hub": 0.0}, {"time": 0.0, "dated": 0.0}, {"together": 0.0}, {"entity": 0.0},
        {"together": 0.0, "entity": 0.0}, {"hub": 0.0, "time": 0.0, "dated": 0.0, "together": 0.0, "entity": 0.0},
        {"hub": 0.5}, {"hub": 2.0}, {"time": 0.6}, {"together": 0.5}, {"entity": 0.5}, {"seeds": 3}, {"seeds": 10},
        {"lexical": 0.5}, {"dated": 0.0}]


async def run(args: argparse.Namespace) -> int:
    everyone, questions, _ = load(Path(args.data), args.limit)
    index = SemanticIndex(CachedEmbeddings(LocalMiniLM(threads=2)), MemoryVectorCache())  # type: ignore[arg-type]
    memories = {p.key: grown(p, everyone, args.memories) for p in everyone}
    for key, mems in memories.items():
        await index.index(key, mems)
    base = json.loads(args.base) if args.base else {}
    for change in json.loads(args.grid) if args.grid else GRID:
        w = dataclasses.replace(DEFAULT_WEIGHTS, **{**base, **change})
        row = await evaluate(questions, memories, "fused", args.memories, args.budget, index, w)
        cats = " ".join(f"{name[:8]}={a:.0f}/{b:.0f}" for name, _n, a, b in by_category(row.hits) if name != "all")
        print(f"{str(change):<60} any={row.pct(row.any_hit):5.1f} all={row.pct(row.all_hit):5.1f}  {cats}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.recall_tune")
    parser.add_argument("--data", default="benchmarks/data/hard_tune_locomo.json")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--memories", type=int, default=1000)
    parser.add_argument("--budget", type=int, default=1000)
    parser.add_argument("--base", help='JSON changes to the defaults under every setting, e.g. {"hub": 2.0}')
    parser.add_argument("--grid", help="JSON list of changes to try (default: a built-in grid)")
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
