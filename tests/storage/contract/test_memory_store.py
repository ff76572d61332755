"""LangGraph's store as the engine and ``migrate-storage`` use it: memories per person, read back with
``limit``/``offset`` paging, a batch all-or-nothing in one call, and deleted for good."""

from __future__ import annotations

from langgraph.store.base import GetOp, PutOp

NS = ("memories", "42")


async def test_a_put_item_reads_back_and_a_delete_removes_it(storage):
    await storage.store.aput(NS, "k", {"content": "I like tea", "n": 1})
    item = await storage.store.aget(NS, "k")
    assert (tuple(item.namespace), item.key, item.value) == (NS, "k", {"content": "I like tea", "n": 1})
    await storage.store.aput(NS, "k", {"content": "I like jam"})  # replaced by key
    assert (await storage.store.aget(NS, "k")).value == {"content": "I like jam"}
    await storage.store.adelete(NS, "k")
    assert await storage.store.aget(NS, "k") is None
    assert await storage.store.asearch(NS) == []


async def test_search_pages_through_every_item_exactly_once(storage):
    await storage.store.abatch([PutOp(NS, f"k{n:02}", {"content": str(n)}) for n in range(23)])
    await storage.store.aput(("memories", "7"), "k00", {"content": "someone else"})
    seen, offset = [], 0
    while True:
        page = await storage.store.asearch(NS, limit=10, offset=offset)
        assert len(page) <= 10
        seen += [i.key for i in page]
        if len(page) < 10:
            break
        offset += 10
    assert sorted(seen) == [f"k{n:02}" for n in range(23)]  # none twice, none missed, nobody else's
    assert len(await storage.store.asearch(NS, limit=5)) == 5


async def test_one_batch_writes_and_deletes_together_and_reads_in_order(storage):
    await storage.store.aput(NS, "old", {"content": "old"})
    await storage.store.abatch([PutOp(NS, "old", None), PutOp(NS, "new", {"content": "new"}),
                                PutOp(("memory_history", "42"), "h1", {"memory_key": "new"})])
    found = await storage.store.abatch([GetOp(NS, "old"), GetOp(NS, "new"), GetOp(("memory_history", "42"), "h1")])
    assert [None if i is None else i.value for i in found] == [None, {"content": "new"}, {"memory_key": "new"}]


async def test_namespaces_are_listed_with_paging(storage):
    for user in ("1", "2", "3"):
        await storage.store.aput(("memories", user), "k", {"content": user})
    listed = await storage.store.alist_namespaces(prefix=("memories",), limit=2)
    rest = await storage.store.alist_namespaces(prefix=("memories",), limit=2, offset=2)
    assert sorted(listed + rest) == [("memories", "1"), ("memories", "2"), ("memories", "3")]


async def test_memories_survive_reopening(open_again):
    async with open_again() as storage:
        await storage.store.aput(NS, "k", {"content": "kept"})
    async with open_again() as storage:
        assert (await storage.store.aget(NS, "k")).value == {"content": "kept"}


async def test_items_written_together_page_through_exactly_once(storage):
    """One batch writes its items with one ``updated_at`` (an import, a wipe's history). Paged by that
    alone, PostgreSQL ordered the ties differently for each page: pages overlapped and skipped items, and
    a wipe listing a person's memories this way left some behind. Paged as the engine pages (500)."""
    await storage.store.abatch([PutOp(NS, f"k{n:04}", {"content": str(n)}) for n in range(1000)])  # an import
    for b in range(100):  # then extractions, three memories each
        await storage.store.abatch([PutOp(NS, f"k{1000 + 3 * b + i:04}", {"content": "x"}) for i in range(3)])
    seen, offset = [], 0
    while True:
        page = await storage.store.asearch(NS, limit=500, offset=offset)
        seen += [i.key for i in page]
        if len(page) < 500:
            break
        offset += 500
    assert len(seen) == 1300 and sorted(seen) == [f"k{n:04}" for n in range(1300)]
