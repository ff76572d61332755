"""Reply splitting: Discord's 2,000-character limit, paragraph-first cuts, balanced code fences."""

from __future__ import annotations

import random

from bot.chunking import split_message


def fences_balanced(part: str) -> bool:
    return sum(1 for line in part.split("\n") if line.strip().startswith("```")) % 2 == 0


def test_short_text_is_one_part():
    assert split_message("hello") == ["hello"]
    assert split_message("") == []


def test_5000_characters_become_three_parts_with_balanced_fences():
    random.seed(7)
    paragraphs = []
    while sum(len(p) + 2 for p in paragraphs) < 5000:
        if len(paragraphs) % 4 == 2:
            code = "\n".join(f"    value_{i} = compute({i})  # step" for i in range(random.randint(5, 30)))
            paragraphs.append(f"```python\n{code}\n```")
        else:
            paragraphs.append(" ".join(random.choice(["memory", "discord", "bakery", "bike"]) for _ in range(40)))
    text = "\n\n".join(paragraphs)[:5000].rstrip()
    if not fences_balanced(text):
        text += "\n```"
    parts = split_message(text)
    assert len(parts) == 3
    assert all(len(p) <= 2000 for p in parts)
    assert all(fences_balanced(p) for p in parts)


def test_cut_inside_code_block_closes_and_reopens_with_language():
    code = "\n".join(f"print({i})" + " " * 30 for i in range(200))
    parts = split_message(f"Here:\n```python\n{code}\n```\nDone.")
    assert len(parts) >= 2
    assert parts[0].endswith("```") and parts[1].startswith("```python\n")
    assert all(len(p) <= 2000 and fences_balanced(p) for p in parts)
    rebuilt = "".join(p for p in parts)
    assert rebuilt.count("print(") == 200


def test_prefers_paragraph_boundaries():
    a, b = "a" * 1200, "b" * 1200
    parts = split_message(f"{a}\n\n{b}")
    assert parts == [a, b]


def test_a_single_huge_line_is_cut_at_spaces():
    words = " ".join(["word"] * 1500)
    parts = split_message(words)
    assert all(len(p) <= 2000 for p in parts)
    assert " ".join(parts).split() == words.split()


def test_an_unclosed_fence_is_closed():
    assert split_message("look:\n```js\nlet x = 1") == ["look:\n```js\nlet x = 1\n```"]


def test_random_text_never_makes_an_oversize_or_unbalanced_part():
    """Fuzz: fences with content on the opening line, long lines, blank lines, in any order."""
    rng = random.Random(11)
    pieces = ["```", "```python", '```json {"a": ' + "1" * 3000, "word " * 300, "", "x" * 2500, "short line",
              "```  ", "~~~", "> quote " * 50]
    for _ in range(2000):
        text = "\n".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
        for part in split_message(text):
            assert 0 < len(part) <= 2000
            assert fences_balanced(part)


def test_a_code_block_on_one_line_opens_nothing():
    """"```x = 1```" opens and closes on its line: the text after it is prose, not code, so no part gets a
    closing fence of its own (which Discord would show as an empty block) or prose wrapped as code."""
    prose = "\n\n".join("A paragraph about bakeries and bikes, long enough to need cutting. " * 3 for _ in range(30))
    text = "Try ```x = 1``` here, or:\n```x = 1```\n\n" + prose
    parts = split_message(text)
    assert len(parts) >= 2 and all(len(p) <= 2000 for p in parts)
    assert parts[0].startswith("Try ```x = 1``` here")
    assert all(p.count("```") % 2 == 0 for p in parts), [p[-40:] for p in parts]
    assert split_message("```x = 1```") == ["```x = 1```"]
