"""Questions whose answer is a kind of fact the question's words do not reach, and the facts that answer them.

"Would Egon enjoy the seafood place?", "Is Priyanka up for a kayaking trip?", "What should the host leave
off the menu?": the answer is what the person is like (an allergy, a fear, an injury, a diet, a tight
budget; what they like, want or believe), and it rarely shares words or meaning with the question. What
does share them are episodes: "crewed on a friend's yacht" wins for the kayaking trip over "has been
terrified of deep water since childhood", which decides it.

So when a message asks such a question (a yes/no or "should" question: :func:`asks_about_disposition`),
memories near the centre of a few general sentences about dispositions gain a little
(``Weights.disposition``; ``SemanticIndex.relevance(prior=PROTOTYPES)`` measures it). The sentences name
the kinds of fact, in general words, never the hard set's own wording; the kinds were chosen for what
such questions turn on in conversations (health, fears, diet, money, likes, plans, beliefs), and the
weight on the hard set's tune split (docs/decisions.md, issue 20, item 29).

A question about what a person took up or does in their free time ("What new pastimes have I picked up?",
"What leisure activities has Kirsi taken up?") is answered by a list of facts that name the activity and
never the word for the kind ("joined a rowing club", "began a watercolour course"): MiniLM ranks them in
the hundreds. When a message asks one (:func:`asks_about_activities`), memories near the centre of a few
general sentences about taking something up gain (``Weights.activity``; item 31).
"""

from __future__ import annotations

import re

#: General sentences about what a person is like (the centre of their vectors is the direction measured).
PROTOTYPES = (
    "A person has a health condition",
    "A person has a fear",
    "A person has a dietary restriction",
    "A person has a tight budget",
    "A person has an injury",
    "A person dislikes something",
    "A person wants to become something",
    "A person believes in something",
    "A person likes something",
)

#: General sentences about taking up an activity (hobbies, sports, clubs, classes, instruments, crafts).
ACTIVITIES = (
    "A person took up a new hobby",
    "A person joined a club",
    "A person signed up for classes",
    "A person started learning to play an instrument",
    "A person took up a sport",
    "A person started a craft",
)

_START = r"(?:^|[.!?]\s+|\n)\s*[¿¡]?\s*"
_ASKS = re.compile(
    # English yes/no questions about someone, at the start of a sentence: "Would she ...", "Is he up for
    # ...", "Do I ..."; not a request to the bot ("Can you remind me ...", "Do you remember ...")
    _START + r"(?:would|could|should|might|can|is|are|am|does|do)\b(?!\s+you\b)"
    # ... and "what should", "which food should", "is likely to", "up for", anywhere
    + r"|\b(?:what|which|where|how)(?:\s+\w+){0,2}\s+should\b|\b(?:likely|up for)\b"
    # Spanish and German ones the embedded model half understands: "¿Le gustaría ...?", "Würde sie ...?"
    + "|" + _START + r"(?:le gustar[ií]a|podr[ií]a|deber[ií]a|w[üu]rde|k[öo]nnte|sollte|w[äa]re)\b",
    re.IGNORECASE,
)


_ACTIVITY = re.compile(
    r"\b(?:hobb(?:y|ies)|pastimes?|leisure|activit(?:y|ies)|free time|spare time|for fun"
    r"|(?:take|taken|took|taking|picked|picking)\s+up|pasatiempos?|afici[oó]n(?:es)?|Hobbys?|Freizeit\w*)\b",
    re.IGNORECASE,
)
#: ... asked as a question: "I picked up the kids", "it took up my afternoon", "just for fun" are not one.
_QUESTION = re.compile(r"\?|^\s*(?:what|which|how|list|name|tell)\b", re.IGNORECASE)


def asks_about_disposition(query: str) -> bool:
    """Whether the message asks what someone would do, like or manage (see the module docstring)."""
    return bool(_ASKS.search(query))


def asks_about_activities(query: str) -> bool:
    """Whether the message asks what someone took up or does for fun (see the module docstring)."""
    return bool(_ACTIVITY.search(query)) and bool(_QUESTION.search(query))
