"""The quote rule: what counts as a person's words repeated somewhere else, and how they are cut out.

When a person's messages are erased (a wipe, a purge, a deleted message), the bot may have repeated
their words elsewhere: in its answers to other people, in summaries, in someone else's message that
quoted them, in another person's memories. The rule for "repeated" is:

    any run of **four or more consecutive words**, or of **twenty or more characters** (whole words,
    counting one space between them), copied from an erased message.

Words are compared case-insensitively, with punctuation, quotes and Markdown around a word ignored
(``"Zebra-quartz-7731,"`` is the word ``zebra-quartz-7731``), so a quote survives no reformatting. A matched
run is replaced by ``[erased]``; the rest of the text stays, so other people lose only the quoted part.

Limits (stated in docs/privacy-and-erasure.md): a paraphrase, a translation or a summary in other words is
not a copy and is not found; nor are runs of up to three short words (under twenty characters together),
which would match everyday phrases. Summaries that were *built from* the person's messages are dropped whole
elsewhere (see ``bot.engine.erasure.conversations``); this rule is for text that only quotes them.

The rule keeps no words: erased text is reduced to keyed 64-bit hashes of its word runs, so it can be
written to disk (the erasure journal) while an erasure is under way without storing what is being erased.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Iterable

MIN_WORDS = 4
MIN_CHARS = 20
REDACTED = "[erased]"
_HASH_BYTES = 8
_WORD = re.compile(r"\S+")
_EDGE = "\"'`*_~|()[]{}<>.,;:!?¡¿…“”‘’«»„‚-–—/\\"


def _words(text: str) -> list[tuple[str, int, int]]:
    """The normalized words of ``text`` with their character spans (words that are all punctuation drop)."""
    out = []
    for m in _WORD.finditer(text):
        raw = m.group()
        core = raw.strip(_EDGE)
        if core:  # the span is the word itself, so quotes and punctuation around it stay in the text
            start = m.start() + len(raw) - len(raw.lstrip(_EDGE))
            out.append((core.casefold(), start, start + len(core)))
    return out


class QuoteRule:
    """The word runs of erased messages (as keyed hashes), and the redaction of any text that copies one."""

    def __init__(self, key: bytes | None = None, grams: Iterable[bytes] = ()) -> None:
        self.key = key or os.urandom(16)
        self.grams: set[bytes] = set(grams)

    @classmethod
    def from_texts(cls, texts: Iterable[str], key: bytes | None = None) -> "QuoteRule":
        rule = cls(key)
        for text in texts:
            rule.add(text)
        return rule

    def __bool__(self) -> bool:
        return bool(self.grams)

    def _hash(self, run: list[str]) -> bytes:
        data = "\x1f".join(run).encode("utf-8")
        return hashlib.blake2b(data, digest_size=_HASH_BYTES, key=self.key).digest()

    def _runs(self, words: list[str]):
        """Every run the rule looks at: each 4-word run, and each shorter one of 20+ characters."""
        for i in range(len(words)):
            length = -1
            for n in range(1, MIN_WORDS + 1):
                if i + n > len(words):
                    break
                length += len(words[i + n - 1]) + 1
                if n == MIN_WORDS or length >= MIN_CHARS:
                    yield i, n, self._hash(words[i : i + n])

    def add(self, text: str) -> None:
        """Add an erased message's runs to the rule."""
        words = [w for w, _, _ in _words(text or "")]
        self.grams.update(h for _, _, h in self._runs(words))

    def merge(self, other: "QuoteRule") -> None:
        """Take in another rule's runs (rehashing is impossible, so the keys must match)."""
        if other.key != self.key:
            raise ValueError("quote rules with different keys cannot be merged")
        self.grams |= other.grams

    def redact(self, text: str) -> str:
        """``text`` with every copied run replaced by ``[erased]`` (the same string when nothing matched)."""
        if not self.grams or not text:
            return text
        words = _words(text)
        covered = [False] * len(words)
        for i, n, h in self._runs([w for w, _, _ in words]):
            if h in self.grams:
                for j in range(i, i + n):
                    covered[j] = True
        if not any(covered):
            return text
        out, pos, i = [], 0, 0
        while i < len(words):
            if not covered[i]:
                i += 1
                continue
            start = words[i][1]
            while i < len(words) and covered[i]:
                i += 1
            out += [text[pos:start], REDACTED]
            pos = words[i - 1][2]
        out.append(text[pos:])
        return "".join(out)

    def quotes(self, text: str) -> bool:
        """Whether ``text`` copies a run of an erased message."""
        return self.redact(text) != text

    def to_bytes(self) -> bytes:
        """The rule as bytes, for the erasure journal: the key, then the sorted hashes (no words)."""
        return self.key + b"".join(sorted(self.grams))

    @classmethod
    def from_bytes(cls, data: bytes) -> "QuoteRule":
        key, rest = data[:16], data[16:]
        return cls(key, (rest[i : i + _HASH_BYTES] for i in range(0, len(rest), _HASH_BYTES)))


def taken_back(old_texts: Iterable[str], new: str, key: bytes | None = None) -> QuoteRule:
    """The words an edit takes back, as a rule: every run of the old text that covers a word the new text
    no longer has.

    So "my door code is 4417" edited to "my door code is secret" takes back "door code is 4417" (and the
    other runs through "4417"): the bot's answer "your door code is 4417" loses it, while runs the new text
    still says ("my door code is") stay everywhere. A lone short word is covered through the runs around it,
    without redacting whole messages that merely share the unchanged words.
    """
    kept = {w for w, _, _ in _words(new or "")}
    rule = QuoteRule(key)
    for old in old_texts:
        words = [w for w, _, _ in _words(old or "")]
        dropped = {i for i, w in enumerate(words) if w not in kept}
        rule.grams.update(h for i, n, h in rule._runs(words) if any(j in dropped for j in range(i, i + n)))
    return rule


def redaction_of(stored: str, text: str) -> bool:
    """Whether ``stored`` is ``text`` with some runs replaced by ``[erased]`` (and nothing else changed).

    An update Discord sends for a link preview, a pin or a thread started from a message carries the
    message's text as the member wrote it, while the bot's copy may have had someone else's words cut out
    of it by an erasure since: the two differ only where the copy says ``[erased]``. Such an update is not
    an edit, and applying it would write the erased words back.
    """
    if REDACTED not in stored:
        return False
    first, *middle, last = stored.split(REDACTED)
    if not text.startswith(first) or not text.endswith(last) or len(first) + len(last) >= len(text):
        return False
    at, end = len(first), len(text) - len(last)
    for piece in middle:  # in order, each after at least one cut character (leftmost is always best)
        found = text.find(piece, at + 1, end - 1) if piece else at + 1
        if found < 0 or found >= end:
            return False
        at = found + len(piece)
    return at < end

