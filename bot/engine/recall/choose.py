"""The choice of memories for a reply prompt: all while they fit, the most relevant ones once they don't.

This is the one place that decides; the chat graph and ``benchmarks/recall.py`` both call
``choose_memories``. Relevance fuses signals, each scaled to [0, 1] over the person's memories:

- lexical: BM25 of the memory against the query (names, rare words, exact phrases);
- semantic: cosine similarity of embeddings (meaning without shared words), when an index is available,
  each memory's vector counting a quarter of the mean of those learned in the same conversation (half an
  hour), so the fact that matched lifts the rest of its episode a little, damped for hubs: a memory close
  to the centre of all the person's memories ("has been busy lately") is close to every question and would
  otherwise win for questions it does not answer (centrality measured with most of the person's name taken
  out, so a short fact naming them is not a hub through the name); and
  compared with part of the person's own name taken out of both vectors (their name is in most of their
  memories and says nothing about which one matters);
- recency: the memory's rank by when it was last changed, so of two equally relevant facts the newer wins;
- time: when the message names a time ("last year", "in May", "two weeks ago", relative to the message's
  own date ``now``), memories dated inside it gain, and that phrase is left out of the words and the vector
  compared (it has become dates; left in, "last month" matches every memory that says "last week"); a "when"
  question prefers facts whose text carries a time;
- dispositions: a question about what the person would do or like ("would she enjoy ...", "is he up for
  ...") prefers memories near a few general sentences about what a person is like (a fear, an allergy, a
  budget, what they like or want): those decide it, and rarely share its words (``recall.dispositions``);
- second round: the centre of the first round's few best memories' vectors is a second query (no second
  embedding); memories near it gain a little, since an answer's other facts sit near the one that matched;
- coverage: an answer often needs facts that share nothing with the question (her sister's name, then the
  sister's wedding; "camping" answered by "slept in a tent" from the same conversation). The best few
  candidates lend part of their score to the memories learned together with them (same message or
  within half an hour) and to those naming the same rare name or place.

The query is the current message plus the recent turns, with first-person words ("I", "my") read as the
speaker's name, since memories are written in the third person. The weights were tuned on the hard recall
set's tune split and are reported on its test split (docs/benchmarks.md, "Recall on the hard set"). The chosen
memories are shown oldest first, under one line a day with the date they were first learned (``memory_lines``;
the budget counts that date line once), so a newer fact visibly follows (and supersedes) an older one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Sequence

from bot.engine.memories.records import StoredMemory
from bot.engine.recall.dispositions import ACTIVITIES, PROTOTYPES, asks_about_activities, asks_about_disposition
from bot.engine.recall.lexical import bm25_scores, estimate_tokens
from bot.engine.recall.temporal import without_time
from bot.engine.recall.boosts import best_with_strength, conversation_cosines, coverage_boost, temporal_boost
from bot.engine.recall.vectors import Relevance, SemanticIndex
from bot.engine.recall.weights import DEFAULT_WEIGHTS, Weights

Mode = Literal["lexical", "semantic", "fused"]


@dataclass(frozen=True)
class Selection:
    """The memories chosen for a prompt (in display order, oldest first) and what they cost."""

    memories: list[StoredMemory]
    tokens: int
    total: int  # how many memories the person has (visible here)
    method: str  # "all" (everything fit), "lexical", "semantic" or "fused"


def memory_date(memory: StoredMemory) -> str:
    """The date a memory was first learned (UTC day), as the model sees it.

    ``created_at``, not ``updated_at``: any patch moves ``updated_at``, and a "when did ..." question needs
    the date of what the memory describes, which is when it was learned (the conversation's date).
    """
    return memory.created_at.strftime("%Y-%m-%d")


def memory_line(memory: StoredMemory) -> str:
    """One memory on its own, with its date: ``- [2026-05-08] Likes jazz`` (the prompt groups them by day:
    :func:`memory_lines`)."""
    return f"- [{memory_date(memory)}] {_one_line(memory.content)}"


def _one_line(text: str) -> str:
    """A memory's text on one line: a line break in it (an imported file can hold one) cannot start a date
    line or a memory line of its own."""
    return " ".join(text.split())


QUOTE = "> "  # how the prompt marks member-derived text: every memory line starts with it, and it is counted


def _item(memory: StoredMemory) -> str:
    """A memory's line under its date, as the prompt shows it: ``> Likes jazz``.

    The quote marker is the bullet: a second one (``> - Likes jazz``) would cost half a token a line for
    nothing. A text that starts with a bracket keeps a dash (``> - [1999-01-01] ...``), so it cannot read as
    a date line.
    """
    text = _one_line(memory.content)
    return f"{QUOTE}- {text}" if text.startswith("[") else f"{QUOTE}{text}"


def memory_lines(memories: Sequence[StoredMemory]) -> list[str]:
    """The prompt's memory lines, exactly as the prompt shows them and as the budget counts them, in the
    order given (display order, oldest first), each day's under one date line: ``> [2026-05-08]`` then
    ``> Likes jazz``, ``> Has a beagle``. Every line is quoted, like every member-derived text in a prompt;
    the quote marker is counted (until 2026-12-06 it was added after counting, half a token a line unpaid).

    The date once a day rather than on every line: facts are learned a conversation at a time, so most of a
    prompt's memories share their day with others, and a date costs about four tokens. At 1,000 tokens that
    is room for a tenth more memories at the same cost (docs/decisions.md, issue 20).
    """
    lines: list[str] = []
    day = None
    for memory in memories:
        if (date := memory_date(memory)) != day:
            lines.append(f"{QUOTE}[{date}]")
            day = date
        lines.append(_item(memory))
    return lines


DATE_LINE_TOKENS = estimate_tokens(f"{QUOTE}[2026-05-08]") + 1  # + the newline


def item_tokens(memory: StoredMemory) -> int:
    """A memory's line under its date (``> Likes jazz``), with the newline."""
    return estimate_tokens(_item(memory)) + 1


def line_tokens(memory: StoredMemory) -> int:
    """What one memory costs on its own: its line and its date line."""
    return item_tokens(memory) + DATE_LINE_TOKENS


def block_tokens(memories: Sequence[StoredMemory]) -> int:
    """What :func:`memory_lines` of these memories cost: each line, and one date line a day."""
    return sum(item_tokens(m) for m in memories) + DATE_LINE_TOKENS * len({memory_date(m) for m in memories})


def fits(memories: Sequence[StoredMemory], budget_tokens: int) -> bool:
    return block_tokens(memories) <= budget_tokens


def _display_order(m: StoredMemory) -> tuple:
    return (m.created_at, m.key)


def _scaled(values: Sequence[float]) -> list[float]:
    """Min-max scaling to [0, 1] (all zeros when the values do not differ)."""
    lo, hi = min(values), max(values)
    if hi - lo <= 1e-12:
        return [0.0] * len(values)
    return [(v - lo) / (hi - lo) for v in values]


def recency_scores(memories: Sequence[StoredMemory]) -> list[float]:
    """Each memory's rank by when it was last changed, scaled to (0, 1]: the newest is 1."""
    order = sorted(range(len(memories)), key=lambda i: (memories[i].updated_at, memories[i].key))
    out = [0.0] * len(memories)
    for pos, i in enumerate(order):
        out[i] = (pos + 1) / len(memories)
    return out


_FIRST_PERSON = [
    (r"\bam I\b", "is {n}"), (r"\bI am\b", "{n} is"), (r"\bI'm\b", "{n} is"), (r"\bhave I\b", "has {n}"),
    (r"\bI have\b", "{n} has"), (r"\bI've\b", "{n} has"), (r"\bdo I\b", "does {n}"), (r"\bI was\b", "{n} was"),
    (r"\bwas I\b", "was {n}"), (r"\bmy\b", "{n}'s"), (r"\bmine\b", "{n}'s"), (r"\bmyself\b", "{n}"),
    (r"\bme\b", "{n}"), (r"\bI\b", "{n}"),
]


def third_person(query: str, speaker: str | None) -> str:
    """The query with the speaker's first-person words as their name ("when did I" -> "when did Ann").

    Memories are written in the third person ("Ann adopted a beagle"), so "my dog" shares neither a word
    nor much meaning with them until it says whose dog.
    """
    name = (speaker or "").strip()
    if not name:
        return query
    out = query
    for pattern, repl in _FIRST_PERSON:
        flags = re.IGNORECASE if pattern not in (r"\bI\b",) else 0
        said = repl.replace("{n}", name)  # as text: a backslash in a name is no group reference
        out = re.sub(pattern, lambda _m, said=said: said, out, flags=flags)
    return out


def damped(cosines: Sequence[float | None], hubness: Sequence[float | None] | None,
           weights: Weights = DEFAULT_WEIGHTS) -> list[float]:
    """Cosines with hubs damped: a memory's centrality above the ``hub_quantile``'s, times ``hub``, is taken off.

    A memory with no vector yet counts as typical (the median cosine), not as unrelated.
    """
    known = sorted(c for c in cosines if c is not None)
    floor = known[len(known) // 2] if known else 0.0
    raw = [floor if c is None else c for c in cosines]
    if hubness is not None and weights.hub:
        hubs = sorted(h for h in hubness if h is not None)
        if hubs:
            middle = hubs[min(len(hubs) - 1, int(len(hubs) * weights.hub_quantile))]
            raw = [r - weights.hub * max(0.0, (h if h is not None else middle) - middle)
                   for r, h in zip(raw, hubness)]
    return raw


def feedback_boost(scores: Sequence[float], relevance: Relevance | None,
                   weights: Weights = DEFAULT_WEIGHTS) -> list[float] | None:
    """The second round: what each memory gains from being near the first round's best (None: no vectors).

    The centre of the ``feedback_seeds`` best memories (weighted by how far each stands above the median)
    is a second query that needs no embedding: the facts an answer needs besides the one that matched
    ("the hobbies she took up": pottery matched, the choir and the cello sit near it) are close to it even
    when they share nothing with the question's words.
    """
    if relevance is None or not weights.feedback:
        return None
    best = best_with_strength(scores, weights.feedback_seeds)
    if not best:
        return None
    near = relevance.near([i for i, _ in best], [w for _, w in best])
    if near is None:
        return None
    return [weights.feedback * v for v in _scaled(damped(near, relevance.hubness, weights))]


def fused_scores(
    memories: Sequence[StoredMemory],
    query: str,
    semantic: Sequence[float | None] | None,
    *,
    mode: Mode = "fused",
    weights: Weights = DEFAULT_WEIGHTS,
    hubness: Sequence[float | None] | None = None,
) -> list[float]:
    """One relevance score per memory from what matches the query itself (higher is better)."""
    lexical = _scaled(bm25_scores(query, [m.content for m in memories]))
    recency = recency_scores(memories)
    known = [s for s in semantic if s is not None] if semantic is not None and mode != "lexical" else []
    if not known:  # lexical by choice, or no memory has a vector yet
        return [weights.lexical * lx + weights.recency * rc for lx, rc in zip(lexical, recency)]
    sem = _scaled(damped(semantic, hubness, weights))
    if mode == "semantic":
        return [s + weights.recency * rc * 0.01 for s, rc in zip(sem, recency)]  # recency only breaks ties
    return [weights.lexical * lx + weights.semantic * s + weights.recency * rc
            for lx, s, rc in zip(lexical, sem, recency)]


def pack(memories: Sequence[StoredMemory], scores: Sequence[float], budget_tokens: int) -> tuple[list[StoredMemory], int]:
    """The best-scored memories that fit the budget (greedy, skipping one that does not fit), oldest first.
    A memory of a day already shown costs its line only; the first of a day also pays the date line."""
    chosen: list[int] = []
    days: set[str] = set()
    used = 0
    for i in sorted(range(len(memories)), key=lambda i: scores[i], reverse=True):
        day = memory_date(memories[i])
        cost = item_tokens(memories[i]) + (0 if day in days else DATE_LINE_TOKENS)
        if used + cost > budget_tokens:
            continue
        chosen.append(i)
        days.add(day)
        used += cost
    picked = [memories[i] for i in chosen]
    picked.sort(key=_display_order)
    return picked, used


def score_memories(
    memories: Sequence[StoredMemory],
    query: str,
    relevance: Relevance | None,
    *,
    mode: Mode = "fused",
    weights: Weights = DEFAULT_WEIGHTS,
    now: datetime | None = None,
    speaker: str | None = None,
    context: str = "",
    prior_weight: float = 0.0,
) -> list[float]:
    """The final score of every memory: what matches the query, the time it names, the second round, coverage.

    ``query`` is the person's words as they wrote them (see :func:`matched_text`); ``relevance`` is what the
    query vector says (None: lexical, no embedder or it failed); ``prior_weight`` how much its prior counts
    (:func:`prior_of`).
    """
    cosines = (conversation_cosines(memories, relevance.cosines, relevance.vectors, weights)
               if relevance is not None else None)
    scores = fused_scores(memories, matched_text(query, now, speaker, context), cosines, mode=mode, weights=weights,
                          hubness=relevance.hubness if relevance else None)
    boost = temporal_boost(memories, query, now, weights)
    if boost is not None:
        scores = [s + b for s, b in zip(scores, boost)]
    near = feedback_boost(scores, relevance, weights) if mode != "lexical" else None
    cover = coverage_boost(memories, scores, speaker, weights)
    if near is not None:
        cover = [c + f for c, f in zip(cover, near)]
    if relevance is not None and relevance.prior is not None and prior_weight and mode != "lexical":
        # Last, like the second round: what the person is like does not choose the seeds that lend their score.
        like = _scaled(damped(relevance.prior, None, weights))  # a memory without a vector: the median
        cover = [c + prior_weight * d for c, d in zip(cover, like)]
    return [s + c for s, c in zip(scores, cover)]


def prior_of(query: str, speaker: str | None, weights: Weights) -> tuple[tuple[str, ...], float]:
    """The general sentences a question's answer is near, and their weight (none: ``((), 0.0)``): what a
    person is like (``weights.disposition``: "Would she be up for an activity like kayaking?" turns on a
    fear or an allergy), else what they took up (``weights.activity``); see ``recall.dispositions``."""
    asked = third_person(query, speaker)
    if weights.disposition and asks_about_disposition(asked):
        return PROTOTYPES, weights.disposition
    if weights.activity and asks_about_activities(asked):
        return ACTIVITIES, weights.activity
    return (), 0.0


def matched_text(query: str, now: datetime | None, speaker: str | None, context: str = "") -> str:
    """The words memories are compared with: the person's question without the time it names (that is a
    window of dates by then), "I" and "my" as their name, then the context as it was written.

    The time is read from the question as written, before "my" becomes the name: a person called June
    asking "what is my sister called?" named no month."""
    asked = third_person(without_time(query, now), speaker)
    return f"{asked}\n{context}" if context else asked


async def choose_memories(
    memories: Sequence[StoredMemory],
    query: str,
    budget_tokens: int,
    *,
    user_id: str,
    index: SemanticIndex | None = None,
    mode: Mode = "fused",
    weights: Weights = DEFAULT_WEIGHTS,
    now: datetime | None = None,
    speaker: str | None = None,
    context: str = "",
) -> Selection:
    """Choose which of a person's memories go into a prompt.

    Args:
        memories: the memories the prompt may show (already filtered by where they may be shown).
        query: the person's message (this turn's messages of theirs): the time it names, whether it asks
            "when" or what someone would do, are read from it alone.
        context: what surrounds it (what they reply to, the recent turns; ``rendering.recall_query``),
            compared after the query and never read for times or "I".
        budget_tokens: the most the memory lines may cost (estimated tokens).
        user_id: whose memories (the vector cache is per person).
        index: semantic relevance, when available; consulted (one query vector) only when the memories
            do not all fit.
        mode: ``fused`` in production; ``lexical`` and ``semantic`` exist for the benchmark's comparison.
        now: the message's own date, for "last week", "in May", "two years ago"; without it only absolute
            times ("May 2023") are understood.
        speaker: the person's display name, so "I" and "my" in the query mean them.
    """
    memories = list(memories)
    ordered = sorted(memories, key=_display_order)
    if fits(ordered, budget_tokens):
        return Selection(ordered, block_tokens(ordered), len(memories), "all")
    prior, prior_weight = prior_of(query, speaker, weights)
    found = (await index.relevance(user_id, memories, matched_text(query, now, speaker, context), about=speaker,
                                   name_share=weights.name, hub_name_share=weights.hub_name, prior=prior)
             if index is not None and mode != "lexical" else None)
    method = mode if found is not None else "lexical"
    scores = score_memories(memories, query, found, mode=method, weights=weights, now=now, speaker=speaker,
                            context=context, prior_weight=prior_weight)
    picked, used = pack(memories, scores, budget_tokens)
    return Selection(picked, used, len(memories), method)


def related(memories: Sequence[StoredMemory], query: str, limit: int) -> list[StoredMemory]:
    """Up to ``limit`` memories most related to ``query``, the most related first, for extraction.

    Ranked even when all of them fit the limit: the extractor's token budget is filled in this order, so
    the memory a correction is about ("I moved out of Berlin") is shown however new it is.
    """
    if not memories:
        return []
    scores = fused_scores(memories, query, None, weights=Weights(lexical=0.9, semantic=0.0, recency=0.1))
    best = sorted(range(len(memories)), key=lambda i: scores[i], reverse=True)[:limit]
    return [memories[i] for i in best]
