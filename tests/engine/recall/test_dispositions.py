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


# ---------------------------------------------------------------- what a person took up (issue 20, item 31)
HOBBY = ("hobby", "club", "classes", "instrument", "sport", "craft", "rowing", "pottery", "cello")


class HobbyEmbeddings(ConceptEmbeddings):
    def _vec(self, text: str) -> list[float]:
        words = text.lower().replace("?", " ").replace(".", " ").split()
        return super()._vec(text) + [float(sum(w.startswith(t) for w in words for t in HOBBY))]


TOOK_UP = [mem(400, "Joined a rowing club on the river", days=-300), mem(401, "Signed up for pottery classes", days=-100)]
CHATTER = [mem(410 + i, f"Watched the new football match, week {i}") for i in range(8)]


@pytest.mark.parametrize("question", [
    "What new pastimes have I picked up?", "What leisure activities has Sam taken up over time?",
    "What hobbies does Sam have?", "What does Sam do in her free time?", "¿Qué pasatiempos tiene Sam?",
    "¿Cuál es su afición?", "Welche Freizeitaktivitäten hat Sam?", "tell me what Sam took up this year",
])
def test_questions_about_what_someone_took_up_are_told(question):
    from bot.engine.recall.choose import prior_of
    from bot.engine.recall.dispositions import ACTIVITIES, asks_about_activities

    assert asks_about_activities(question)
    assert prior_of(question, "Sam", DEFAULT_WEIGHTS) == (ACTIVITIES, DEFAULT_WEIGHTS.activity)


@pytest.mark.parametrize("question", ["What did I pick up at the shop?", "Where does Ottilie live?",
                                      "When is the new opening time?", "I picked up the kids at five.",
                                      "That took up my whole afternoon.", "Just for fun, here's a photo.",
                                      "Any activity on the server today."])
def test_other_questions_do_not_ask_about_activities(question):
    from bot.engine.recall.dispositions import asks_about_activities

    assert not asks_about_activities(question)


async def test_a_question_about_what_someone_took_up_brings_in_the_clubs_and_classes():
    """"What new pastimes have I picked up?" shares no word with "Joined a rowing club": the activity
    sentences are embedded once, by the first such question, and lift the clubs and classes over chatter;
    a question of another kind embeds nothing more and gets no prior."""
    from bot.engine.recall.choose import score_memories
    from bot.engine.recall.dispositions import ACTIVITIES
    from bot.engine.recall.vectors import Relevance

    embed = HobbyEmbeddings()
    index = SemanticIndex(embed, MemoryVectorCache())
    memories = CHATTER + TOOK_UP
    await index.index("u", memories)
    documents = embed.documents
    budget = block_tokens(TOOK_UP) + line_tokens(CHATTER[0])
    asked = "What new pastimes have I picked up?"
    chosen = await choose_memories(memories, asked, budget, user_id="u", index=index, speaker="Sam")
    assert {m.key for m in TOOK_UP} <= {m.key for m in chosen.memories}
    assert embed.documents == documents + len(ACTIVITIES)
    await choose_memories(memories, "What hobbies does Sam have?", budget, user_id="u", index=index, speaker="Sam")
    await choose_memories(memories, "Which match did Sam watch?", budget, user_id="u", index=index, speaker="Sam")
    assert embed.documents == documents + len(ACTIVITIES)
    # the weighing itself: two facts the question's vector ranks below two others (among a best and a
    # worst match), near the sentences
    two = [mem(500, "Joined a chess club"), mem(501, "Began a watercolour course")]
    rest = [mem(502 + i, f"note {i}") for i in range(4)]
    relevance = Relevance([None] * 6, [0.30, 0.32, 0.50, 0.48, 0.9, 0.0], [None] * 6,
                          prior=[0.9, 0.85, 0.1, 0.12, 0.5, 0.5])
    plain = score_memories(two + rest, "What new pastimes?", relevance, prior_weight=0.0)
    lifted = score_memories(two + rest, "What new pastimes?", relevance, prior_weight=DEFAULT_WEIGHTS.activity)
    assert max(plain[:2]) < min(plain[2:4]) and min(lifted[:2]) > max(lifted[2:4])
