"""Two engines on one PostgreSQL database, as two bot processes: erasures of two people who quote each other,
started at once in each process, both finish (the global erasure lock orders them; neither deadlocks);
and a process's ``resume()`` never runs a job again that the other live process is running."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import pytest

from langchain_core.messages import HumanMessage

from bot.engine.state import Speaker
from tests.conftest import (
    Call,
    ScriptedChatModel,
    default_script,
    make_settings,
    running_engine,
)

ANN = Speaker(user_id="1", name="Ann", guild_id="900", channel_id="a", message_id="11")
BOB = Speaker(user_id="2", name="Bob", guild_id="900", channel_id="b", message_id="22")
ANN_SAYS = "the lighthouse keeper paints every door teal"
BOB_SAYS = "the ferry captain whistles old sea shanties"


def no_echo(call: Call):
    return default_script(call) if call.is_extraction else "Noted!"


async def two(tmp_path, pg_backend):
    stack = AsyncExitStack()
    a = await stack.enter_async_context(running_engine(make_settings(tmp_path / "a", pg_backend), ScriptedChatModel(no_echo)))
    b = await stack.enter_async_context(running_engine(make_settings(tmp_path / "b", pg_backend), ScriptedChatModel(no_echo)))
    return stack, a, b


async def test_two_processes_erase_two_people_who_quote_each_other_at_once(tmp_path, pg_backend):
    stack, a, b = await two(tmp_path, pg_backend)
    async with stack:
        await a.reply("a", ANN, ANN_SAYS)
        await a.reply("a", ANN, f"Bob told me {BOB_SAYS}")
        await b.reply("b", BOB, BOB_SAYS)
        await b.reply("b", BOB, f"Ann told me {ANN_SAYS}")
        await a.memories.apply("1", inserts=[(f"Ann heard {BOB_SAYS}", ANN.origin())])
        await b.memories.apply("2", inserts=[(f"Bob heard {ANN_SAYS}", BOB.origin())])
        await a.memories.apply("3", inserts=[(f"Cy heard {ANN_SAYS} and {BOB_SAYS}", ANN.origin())])
        first, second = await asyncio.wait_for(asyncio.gather(a.erase_person("1"), b.erase_person("2")), 60)
        assert first.memories == 1 and second.memories == 1
        for engine in (a, b):
            assert await engine.memories.list("1") == [] and await engine.memories.list("2") == []
            assert await engine.storage.erasures.unfinished() == []
        (cy,) = await a.memories.list("3")
        # (Which erasure runs first decides whether "heard" goes too: Bob's own "Bob heard ..." quotes it.)
        assert cy.content in ("Cy heard [erased] and [erased]", "Cy [erased] and [erased]")
        for thread in ("a", "b"):
            said = [m.text for m in (await a.thread_state(thread)).get("messages", []) if isinstance(m, HumanMessage)]
            assert said == []
        assert all(ANN_SAYS not in t.human and BOB_SAYS not in t.human for t in await b.storage.inbox.every_turn())


async def test_resume_never_runs_a_job_the_other_live_process_is_running(tmp_path, pg_backend, monkeypatch):
    stack, a, b = await two(tmp_path, pg_backend)
    async with stack:
        await a.reply("a", ANN, ANN_SAYS)
        await a.scheduler.flush()
        runs = {"a": 0, "b": 0}
        entered = asyncio.Event()

        def slowed(engine, name: str):
            real = engine.eraser.steps.person

            async def person(*args, **kwargs):
                runs[name] += 1
                entered.set()
                await asyncio.sleep(1.0)  # still erasing when the other process looks at the journal
                return await real(*args, **kwargs)

            monkeypatch.setattr(engine.eraser.steps, "person", person)

        slowed(a, "a")
        slowed(b, "b")
        erasing = asyncio.create_task(a.erase_person("1"))
        await asyncio.wait_for(entered.wait(), 20)
        assert len(await b.storage.erasures.unfinished()) == 1  # b sees a's row while a runs it
        assert await asyncio.wait_for(b.eraser.resume(), 30) == 0  # waited for a, then found it finished
        await erasing
        assert runs == {"a": 1, "b": 0}
        assert await b.storage.erasures.unfinished() == [] and await b.memories.list("1") == []


class HeldModel(ScriptedChatModel):
    """Holds each chat call (not extraction) until ``gate`` is set; ``entered`` says one is waiting."""

    gate: object = None
    entered: object = None

    async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs):
        if "New messages to learn from" not in str(messages[-1].content):
            self.entered.set()
            await self.gate.wait()
        return self._generate(messages, stop, run_manager, **kwargs)


async def test_a_wipe_in_one_process_reaches_a_new_thread_being_answered_in_the_other(tmp_path, pg_backend):
    """The other process's turn is not marked by the wipe (that mark is per process): the wipe must find the
    brand-new thread by its checkpoint and wait for the turn's lock, or the message would stay after Done."""
    held = HeldModel(default_script)
    held.gate, held.entered = asyncio.Event(), asyncio.Event()
    stack = AsyncExitStack()
    a = await stack.enter_async_context(running_engine(make_settings(tmp_path / "a", pg_backend), held))
    b = await stack.enter_async_context(running_engine(make_settings(tmp_path / "b", pg_backend), ScriptedChatModel(no_echo)))
    async with stack:
        answering = asyncio.create_task(a.reply("fresh", ANN, f"I like {ANN_SAYS}"))
        try:
            await asyncio.wait_for(held.entered.wait(), 20)
            wipe = asyncio.create_task(b.erase_person("1"))
            await asyncio.sleep(0.3)
            waited = not wipe.done()  # it found the thread and waits for the turn that holds it
        finally:
            held.gate.set()  # a failed check must not leave the turn (and the engines' close) waiting
        assert waited
        await answering  # Ann still gets her answer
        result = await asyncio.wait_for(wipe, 30)
        # her message and the answer to it went: by the wipe, or by the turn itself, which sees the wipe's
        # claim as it ends (``TurnRunner._mark_erased_elsewhere``) and takes them back out first
        assert result.messages in (0, 2)
        await a.scheduler.flush()
        assert [m for m in (await a.thread_state("fresh")).get("messages", []) if isinstance(m, HumanMessage)] == []
        assert all(ANN_SAYS not in t.human for t in await a.storage.inbox.every_turn())
        assert await a.memories.list("1") == []


@pytest.mark.parametrize("second_hold", ["erasure", "extraction"])
async def test_an_erasure_whose_lock_connection_dropped_gives_way_instead_of_waiting_for_ever(tmp_path, pg_backend,
                                                                                             second_hold):
    """The global erasure lock is an advisory lock of one connection; the server drops it with the
    connection (a restart, a killed backend) and tells nobody. Another process's erasure then takes it,
    holds Q and waits for P, while the first holds P and waits for Q. The first now notices, while
    waiting, that its lock is gone and gives way (ErasureLockLost), so the other finishes. The same when
    the first waits with a light hold (``extraction``: a deletion's or an edit's hold on a bystander)."""
    import psycopg

    from bot.engine.concurrency import Locks
    from bot.engine.stores.locks import ERASURE, ErasureLockLost
    from bot.storage import open_storage

    async with open_storage(make_settings(tmp_path / "a", pg_backend)) as sa, \
            open_storage(make_settings(tmp_path / "b", pg_backend)) as sb:
        la, lb = Locks(sa.locks), Locks(sb.locks)
        inside, go = {"A": asyncio.Event(), "B": asyncio.Event()}, asyncio.Event()
        holding = {"A": asyncio.Event(), "B": asyncio.Event()}
        got: list[str] = []

        async def erasure(locks, first: str, second: str, name: str) -> None:
            async with locks.erasures():
                inside[name].set()
                async with locks.person(first, kind=ERASURE, wait=True):
                    holding[name].set()
                    await go.wait()
                    async with locks.person(second, kind=ERASURE if name == "B" else second_hold, wait=True):
                        got.append(name)

        a = asyncio.create_task(erasure(la, "P", "Q", "A"))
        await inside["A"].wait()
        async with await psycopg.AsyncConnection.connect(pg_backend.database_url, autocommit=True) as conn:
            await conn.execute("SELECT pg_terminate_backend(%s)", (sa.locks._conn.info.backend_pid,))
        b = asyncio.create_task(erasure(lb, "Q", "P", "B"))
        await asyncio.wait_for(inside["B"].wait(), 10)  # the lock was free for B: A's went with its connection
        await asyncio.wait_for(holding["B"].wait(), 10)
        go.set()
        done, pending = await asyncio.wait({a, b}, timeout=30)
        for t in pending:
            t.cancel()
        assert not pending, "the two erasures waited for each other"
        assert got == ["B"] and isinstance(a.exception(), ErasureLockLost)


async def test_what_the_person_says_in_the_other_process_during_their_wipe_is_not_kept(tmp_path, pg_backend):
    """Process A wipes Pat (asked in a DM) and has passed every thread when Pat writes in a server
    process B answers. B's turn was not marked (the marks are per process): it kept the message after
    A's "Done". A turn now asks the database which of its people an erasure holds, as it starts (answered
    without their memories) and as it ends (their messages taken back out)."""
    pat_dm = Speaker(user_id="77", name="Pat", guild_id="dm", channel_id="dm77", message_id="1001")
    pat_srv = Speaker(user_id="77", name="Pat", guild_id="5", channel_id="srv", message_id="1002")
    during = Speaker(user_id="77", name="Pat", guild_id="5", channel_id="srv", message_id="1003")
    stack, a, b = await two(tmp_path, pg_backend)
    async with stack:
        await a.reply("dm77", pat_dm, "my secret is wipecanary_one")
        await b.reply("srv", pat_srv, "earlier in the server: canary_zero")
        real = a.eraser.steps.cut_quotes_in_learning

        async def talking_meanwhile(*args, **kwargs):
            await b.reply("srv", during, "said during the wipe: wipecanary_two")
            return await real(*args, **kwargs)

        a.eraser.steps.cut_quotes_in_learning = talking_meanwhile
        await a.erase_person("77")
        for engine, thread in ((a, "dm77"), (b, "srv")):
            kept = [m.text for m in (await engine.thread_state(thread)).get("messages", [])
                    if isinstance(m, HumanMessage)]
            assert kept == [], (thread, kept)
        assert [t for t in await b.storage.inbox.every_turn() if t.user_id == "77"] == []
