"""Questions about what a person would do or like prefer what the person is like (``recall/dispositions.py``)."""

from __future__ import annotations

import dataclasses

import pytest

from bot.engine.recall import DEFAULT_WEIGHTS, SemanticIndex, choose_memories
from bot.engine.recall.choose import block_tokens, line_tokens
from bot.engine.recall.dispositions import PROTOTYPES, asks_about_disposition
from bot.engine.recall.vectors import MemoryVectorCache
from tests.engine.recall.test_choose import FILLER, ConceptEmbeddings, mem

# Two more concepts at the edge: boats, and words about what a person is like (the prototypes' among them).
BOATING = ("boat", "cruise", "kayak", "yacht", "sail")
TRAITS = ("fear", "terrified", "afraid", "injur", "health", "budget", "dietary", "dislike", "like", "want",
          "believe")


class TraitEmbeddings(ConceptEmbeddings):
    def _vec(self, text: str) -> list[float]:
        words = text.lower().replace("?", " ").replace(".", " ").split()
        return super()._vec(text) + [float(sum(w.startswith(t) for w in words for t in group))
                                     for group in (BOATING, TRAITS)]


# Decides a boat trip and shares no word with it; its line is longer than any filler's, so a filler always fits
# where it would.
FEAR = mem(300, "Is terrified of deep water and has been since early childhood, never learned to swim", days=-200)
BOATS = [mem(310 + i, f"Crewed on a yacht, trip {i}") for i in range(6)]
BUDGET = block_tokens(BOATS) + line_tokens(FEAR)  # the boat trips and one more memory


@pytest.mark.parametrize("question", [
    "Would Sam enjoy a jazz cruise?", "Is Sam up for a kayaking trip?", "Could I join a ski weekend right now?",
    "What should the host leave off the menu when Sam comes?", "Which food should Sam keep off the plate?",
    "Is Sam likely to book a cruise soon?",
    "Do I like crowded parties?", "¿Le gustaría a Sam un crucero?", "Würde Sam gern segeln?",
    "That sounds fun.\nWould Sam come along?",
])
def test_questions_about_what_someone_would_do_are_told(question):
    assert asks_about_disposition(question)


@pytest.mark.parametrize("question", [
    "When did I go camping?", "What did Sam buy last month?", "Where does Ottilie live?",
    "Was arbeitet Sam jetzt?", "How has Sam's career changed?", "Which jazz concert did we go to?",
    "I would love a croissant",  # "would" inside a sentence is not a question about them
    "Can you remind me where Ottilie lives?", "Do you remember my sister's name?",  # asking the bot to recall
    "I should buy milk.", "Will said hi.",
])
def test_other_questions_are_not(question):
    assert not asks_about_disposition(question)


async def test_a_would_question_brings_in_what_the_person_is_like_and_others_do_not_pay_for_it():
    embed = TraitEmbeddings()
    index = SemanticIndex(embed, MemoryVectorCache())
    memories = FILLER + BOATS + [FEAR]
    await index.index("u", memories)
    documents = embed.documents
    asked = "Would Sam enjoy a kayak trip?"
    off = dataclasses.replace(DEFAULT_WEIGHTS, disposition=0.0)
    without = await choose_memories(memories, asked, BUDGET, user_id="u", index=index, weights=off)
    keys = {m.key for m in without.memories}
    assert {b.key for b in BOATS} < keys and FEAR.key not in keys  # a filler took the last place
    assert embed.documents == documents  # and nothing more was embedded
    chosen = await choose_memories(memories, asked, BUDGET, user_id="u", index=index)
    keys = {m.key for m in chosen.memories}
    assert {b.key for b in BOATS} < keys and FEAR.key in keys  # over the filler, not over the boats
    assert embed.documents == documents + len(PROTOTYPES)  # the sentences, embedded once
    await choose_memories(memories, "Could Sam come on the cruise?", BUDGET, user_id="u", index=index)
    assert embed.documents == documents + len(PROTOTYPES)
    other = await choose_memories(memories, "Which yacht trip was it?", BUDGET, user_id="u", index=index)
    assert FEAR.key not in {m.key for m in other.memories}  # not asked what they are like: no prior


async def test_sentences_that_fail_to_embed_leave_the_prior_out_and_are_not_asked_for_on_every_question():
    class NoSentences(TraitEmbeddings):
        asked = 0

        def embed_documents(self, texts):
            if list(texts) == list(PROTOTYPES):
                NoSentences.asked += 1
                raise ConnectionError("rate limited")
            return super().embed_documents(texts)

    index = SemanticIndex(NoSentences(), MemoryVectorCache())
    memories = FILLER + BOATS + [FEAR]
    await index.index("u", memories)
    for asked in ("Would Sam enjoy a kayak trip?", "Could Sam come on the cruise?"):
        chosen = await choose_memories(memories, asked, BUDGET, user_id="u", index=index)
        assert chosen.method == "fused" and FEAR.key not in {m.key for m in chosen.memories}
    assert NoSentences.asked == 1
