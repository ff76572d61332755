"""How much each signal counts when memories are chosen (tuned on the hard recall set's tune split)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Weights:
    """How much each signal counts in the fused score (see the module docstring)."""

    lexical: float = 0.12
    semantic: float = 1.0
    recency: float = 0.05
    hub: float = 1.5  # cosine with the person's centre, above the hub_quantile's, taken off the semantic cosine
    hub_quantile: float = 0.25  # from which centrality on a memory counts as a hub (re-tuned 2026-12-05)
    time: float = 0.35  # a memory dated inside the time the question names
    dated: float = 0.1  # a "when" question: a memory whose text carries a time
    together: float = 0.1  # learned with one of the best candidates (share of that candidate's score)
    entity: float = 0.3  # names a rare name or place one of the best candidates names
    seeds: int = 5  # how many of the best candidates lend their score to memories learned with them
    entity_seeds: int = 20  # how many lend it to memories naming the same rare name
    feedback: float = 0.2  # near the centre of the first round's best (the second round, no new embedding)
    feedback_seeds: int = 6  # how many of the first round's best make that centre
    name: float = 0.4  # share of the person's own name's direction taken out of query and memory vectors
    hub_name: float = 0.7  # the share taken out when hubness is measured (short facts naming them are not hubs)
    rare: int = 200  # a name is rare when at most one memory in this many (and at least 2) names it
    mate: float = 0.0  # plus this much of the best cosine among those learned with it (off since 2026-12-07,
    # fourteenth session: with the benchmark's distractors borrowed a whole session at a time, it lifted them
    # as much as the evidence; see docs/decisions.md, issue 20, item 30)
    conversation: float = 0.25  # a memory's vector plus this much of the mean of those learned with it (ditto)
    disposition: float = 0.2  # a "would she ..." question: near the disposition sentences (2026-12-07)
    activity: float = 0.45  # "what has she taken up?": near the activity sentences (2026-12-07, fourteenth session)


DEFAULT_WEIGHTS = Weights()
