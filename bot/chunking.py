"""Split a long reply into Discord-sized messages without breaking paragraphs or code blocks.

Discord refuses messages over 2,000 characters. Cuts prefer a blank line (a paragraph boundary), then
any line boundary, and only split inside a line when a single line is too long. A cut inside a code
fence closes the fence at the end of the part and reopens it (with its language) at the start of the next,
so every part renders as valid Markdown on its own; a block the model left open is closed at the end.
"""

from __future__ import annotations

import re

DISCORD_LIMIT = 2000
_LANG = re.compile(r"[\w+#.-]{0,20}")
_FENCE_ROOM = 40  # room for a closing fence and a reopened "```language" line


def _fence_after(state: str | None, line: str) -> str | None:
    """The open fence (its opening line) after ``line``, given the one before it."""
    stripped = line.strip()
    if not stripped.startswith("```") or stripped.count("```") % 2 == 0:
        return state  # prose, or a block opened and closed on this one line ("```x = 1```")
    if state is not None:
        return None
    # Reopen with the fence and its language only: the opening line may carry content (even a whole
    # minified document), which must not be repeated at the top of every part.
    lang = stripped[3:].split(maxsplit=1)[0] if stripped[3:].strip() else ""
    return "```" + lang if _LANG.fullmatch(lang) else "```"


def _wrap(lines: list[str], width: int) -> list[str]:
    """Break lines longer than ``width`` at the last space before it (or hard, if there is none)."""
    out: list[str] = []
    for line in lines:
        while len(line) > width:
            cut = line.rfind(" ", 0, width)
            if cut <= width // 2:
                cut = width
            out.append(line[:cut])
            line = line[cut:].lstrip(" ") if cut < width else line[cut:]
        out.append(line)
    return out


def split_message(text: str, limit: int = DISCORD_LIMIT) -> list[str]:
    """Split ``text`` into parts of at most ``limit`` characters each (see module docstring)."""
    text = text.strip("\n")
    if not text.strip():
        return []
    state: str | None = None
    for line in text.split("\n"):
        state = _fence_after(state, line)
    if state:  # the model left a code block open: close it, so no part renders everything after as code
        text += "\n```"
    if len(text) <= limit:
        return [text]
    lines = _wrap(text.split("\n"), limit - _FENCE_ROOM)
    parts: list[str] = []
    i = 0
    open_fence: str | None = None
    while i < len(lines):
        body = [open_fence] if open_fence else []
        size = len(body[0]) + 1 if body else 0
        state = open_fence
        cut: tuple[int, int] | None = None  # (len(body), next line index) at the best paragraph break
        j = i
        while j < len(lines):
            line = lines[j]
            after = _fence_after(state, line)
            closing = 4 if after else 0
            if size + len(line) + 1 + closing > limit and len(body) > (1 if open_fence else 0):
                break
            body.append(line)
            size += len(line) + 1
            state = after
            j += 1
            if not line.strip() and state is None and size >= limit // 2:
                cut = (len(body), j)
        if j < len(lines) and cut is not None:
            body, j, state = body[: cut[0]], cut[1], None
        part = "\n".join(body).strip("\n")
        if state:
            part += "\n```"
        if part.strip():
            parts.append(part)
        open_fence = state
        i = j
    return parts
