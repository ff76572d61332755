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
import pickle
import sys
from pathlib import Path

from benchmarks.recall import CachedEmbeddings, by_category, evaluate, grown, load
from bot.engine import DEFAULT_WEIGHTS, MemoryVectorCache, SemanticIndex, local_embedder

GRID = [{}, {"hub": 0.0}, {"time": 0.0, "dated": 0.0}, {"together": 0.0}, {"entity": 0.0},
        {"together": 0.0, "entity": 0.0}, {"hub": 0.0, "time": 0.0, "dated": 0.0, "together": 0.0, "entity": 0.0},
        {"hub": 0.5}, {"hub": 2.0}, {"time": 0.6}, {"together": 0.5}, {"entity": 0.5}, {"seeds": 3}, {"seeds": 10},
        {"lexical": 0.5}, {"dated": 0.0}]


async def run(args: argparse.Namespace) -> int:
    everyone, questions, _ = load(Path(args.data), args.limit)
    embedder = CachedEmbeddings(local_embedder(threads=2))
    saved = Path(args.vectors) if args.vectors else None
    if saved is not None and saved.exists():
        embedder.cache = pickle.loads(saved.read_bytes())
    index = SemanticIndex(embedder, MemoryVectorCache())  # type: ignore[arg-type]
    memories = {p.key: grown(p, everyone, args.memories) for p in everyone}
    for key, mems in memories.items():
        await index.index(key, mems)
    if saved is not None:
        saved.write_bytes(pickle.dumps(embedder.cache))
    if args.show:
        await show(questions, memories, index, args)
        return 0
    base = json.loads(args.base) if args.base else {}
    for change in json.loads(args.grid) if args.grid else GRID:
        w = dataclasses.replace(DEFAULT_WEIGHTS, **{**base, **change})
        row = await evaluate(questions, memories, "fused", args.memories, args.budget, index, w)
        cats = " ".join(f"{name[:8]}={a:.0f}/{b:.0f}" for name, _n, a, b in by_category(row.hits) if name != "all")
        print(f"{str(change):<60} any={row.pct(row.any_hit):5.1f} all={row.pct(row.all_hit):5.1f}  {cats}", flush=True)
    return 0


async def show(questions, memories, index, args) -> None:
    """Where each evidence memory of the missed questions ranked (for reading misses, not for figures)."""
    from bot.engine import matched_text, prior_of, score_memories

    w = dataclasses.replace(DEFAULT_WEIGHTS, **(json.loads(args.base) if args.base else {}))
    for q in questions:
        if args.show != "all" and str(q.category) != args.show:
            continue
        mems = memories[q.person.key]
        prior, prior_weight = prior_of(q.text, q.person.name, w)
        rel = await index.relevance(q.person.key, mems, matched_text(q.text, q.now, q.person.name), about=q.person.name,
                                    name_share=w.name, hub_name_share=w.hub_name, prior=prior)
        scores = score_memories(mems, q.text, rel, weights=w, now=q.now, speaker=q.person.name,
                                prior_weight=prior_weight)
        order = sorted(range(len(mems)), key=lambda i: scores[i], reverse=True)
        rank = {mems[i].key: r for r, i in enumerate(order)}
        print(f"\n{q.text}  [{q.category}]")
        for k in sorted(q.evidence, key=lambda k: rank[k]):
            m = next(m for m in mems if m.key == k)
            print(f"   rank {rank[k]:>4}  {m.created_at:%Y-%m-%d}  {m.content}")
        for i in order[:5]:
            print(f"      top {mems[i].created_at:%Y-%m-%d} {scores[i]:.2f} {mems[i].content}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.recall_tune")
    parser.add_argument("--data", default="benchmarks/data/hard_tune_locomo.json")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--memories", type=int, default=1000)
    parser.add_argument("--budget", type=int, default=1000)
    parser.add_argument("--base", help='JSON changes to the defaults under every setting, e.g. {"hub": 2.0}')
    parser.add_argument("--vectors", help="a file keeping memory vectors between runs (tuning only)")
    parser.add_argument("--show", help="print evidence ranks for one category (or 'all') instead of tuning")
    parser.add_argument("--grid", help="JSON list of changes to try (default: a built-in grid)")
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
