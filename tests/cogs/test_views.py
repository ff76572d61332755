"""The prompts with buttons (``cogs/views.py``): what a click no live view answers is told, kept cheaply."""

from __future__ import annotations

import gc
import weakref

import discord

from cogs.views import PagerView, Prompts


async def test_a_finished_pagers_pages_are_not_kept_by_the_list_of_prompts():
    """Found in review 2026-12-07 (fourteenth session): the list kept each prompt's whole view for its last
    2,000 prompts; a pager's view holds every page of a listing (MBs at the memory cap)."""
    prompts = Prompts()
    view = PagerView(1, [discord.Embed(description="x" * 4000) for _ in range(3)])
    view.taken.add(5)
    prompts.shown(1, view)
    gone = weakref.ref(view)
    view.stop()
    del view
    gc.collect()
    assert gone() is None
    assert prompts.unanswered(1, 5) is None and prompts.unanswered(1, 6) == "answered"
    assert prompts.unanswered(2, 5) == "expired"
