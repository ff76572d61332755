"""Exclusion across bot processes on one PostgreSQL database.

Channels: a session-level advisory lock per channel, taken on one dedicated connection per process for
the length of a turn. It is polled with ``pg_try_advisory_lock`` (never a blocking wait, which would hold
a snapshot open) and costs two round trips a turn, on that connection (not the pool's). If that connection
is lost (an outage) the server drops its locks; turns in flight keep their in-process lock and the next
turn reconnects: a lock connection known broken is replaced, one lost under the lock request is replaced
and asked once more.

People: a claim is a row in ``bot_claims`` with an owner token and a lease. A live holder renews it every
third of the lease; a process that dies stops renewing and its claim can be taken over once the lease has
run out. Every store batch written under a claim first locks the claim row and checks the lease is still
its own (``fence``), inside the batch's transaction: a holder that stalled past its lease and woke up to
find its work taken over writes nothing (``ClaimLost``). So each turn is learned exactly once, whichever
process dies when.

Cancellation (a reply deadline) may strike at any await. A lock or claim statement, once sent, is run to
its end (``bot.storage.shielding.run_through``) and its answer read, so whatever the server granted is
known and given back; releasing runs to its end the same way. A cancelled task leaves nothing held, and
sees its cancel once the releasing is done.

Within one process these are not exclusive on their own: advisory locks are re-entrant per session and
every channel lock of a process shares one session, and a claim of this process's own replaces its
earlier one. The engine's in-process locks (``bot.engine.concurrency``) keep a process to one holder each.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import AsyncIterator, Iterable

import psycopg
from psycopg.conninfo import conninfo_to_dict

from bot.engine.stores.locks import ERASURE, ERASURES_KEY, ClaimLost, ErasureLockLost
from bot.storage.postgres.db import PgDb
from bot.storage.shielding import run_through

log = logging.getLogger(__name__)

CHANNEL_LOCK_CLASS = 0x6D6E  # the first key of every channel's advisory lock (the second: hashtext(id))
POLL_SECONDS = 0.02


@dataclass(frozen=True)
class Claim:
    user_id: str
    owner: str


#: The claims the current task works under, every person it holds (set by ``person``; read by the store's
#: batches). All of them, not the latest: an erasure holding two people writes both people's memories, and a
#: batch checked against the other's claim could write after this one's lease ran out and was taken over.
CURRENT_CLAIM: contextvars.ContextVar[tuple[Claim, ...]] = contextvars.ContextVar("mnemo_claim", default=())
#: The connection the current task's erasure holds the global erasure lock on, and that task (set by
#: ``channel``). A task started inside an erasure copies the variable; the task names whose it is.
ERASURES_HELD: contextvars.ContextVar[tuple[psycopg.AsyncConnection, asyncio.Task | None] | None] = \
    contextvars.ContextVar("mnemo_erasures_held", default=None)
#: The lock connection holds every channel lock and the erasure lock, and is often idle between turns: a
#: peer gone without a word (a failed-over server, a dropped NAT entry) must be noticed in about a minute,
#: not after the kernel's two hours, or its locks look held here while the server has dropped them.
LOCK_CONN_KEEPALIVE = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3,
                       "tcp_user_timeout": 60_000}
#: The server's side of the same: a lock connection the client has given up on (its keepalives failed, a
#: new one was opened) must not live on in the server, idle and holding its locks for every process, for
#: the server's two hours. Settings any session may set; on a Unix socket they are ignored.
LOCK_CONN_SERVER_KEEPALIVE = ("-c tcp_keepalives_idle=30 -c tcp_keepalives_interval=10 -c tcp_keepalives_count=3"
                              " -c tcp_user_timeout=60000")
LOCK_CONNECT_SECONDS = 10  # a hung connect must not stall every lock request of the process for minutes
CHECK_GLOBAL_EVERY = 10  # polls of a person's claim (about 2 s) between checks that the erasure lock is held


def _granted(task: asyncio.Future[bool]) -> bool:
    """Whether a lock or claim attempt that ran to its end got what it asked for."""
    return not task.cancelled() and task.exception() is None and bool(task.result())


async def fence(conn: psycopg.AsyncConnection) -> None:
    """Inside a write transaction: stop unless every claim the task holds is still ours and unexpired."""
    claims = CURRENT_CLAIM.get()
    if not claims:
        return
    cur = await conn.execute(
        "SELECT user_id FROM bot_claims WHERE (user_id, owner) IN (SELECT * FROM unnest(%s::text[], %s::text[]))"
        " AND lease_until > now() ORDER BY user_id FOR UPDATE",
        ([c.user_id for c in claims], [c.owner for c in claims]))
    held = {row["user_id"] if isinstance(row, dict) else row[0] for row in await cur.fetchall()}
    for claim in claims:
        if claim.user_id not in held:
            raise ClaimLost(f"the claim on user {claim.user_id} ran out and was taken over")


def keepalive_params(dsn: str, *, server: bool = True) -> dict[str, object]:
    """The lock connection's keepalives (on both ends; the server's only with ``server``), and a connect
    timeout (the DSN's own, when it has one; its ``options`` are kept, the server keepalives added after)."""
    given = conninfo_to_dict(dsn)
    options = " ".join(str(o) for o in (given.get("options"), LOCK_CONN_SERVER_KEEPALIVE if server else None) if o)
    return {**LOCK_CONN_KEEPALIVE, "options": options, "connect_timeout": given.get("connect_timeout") or LOCK_CONNECT_SECONDS}


async def _session_of(conn: psycopg.AsyncConnection) -> tuple[int, object] | None:
    """The connection's server session: its backend pid and when it started (a pid alone can be reused)."""
    try:
        cur = await conn.execute("SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()")
        row = await cur.fetchone()
    except psycopg.Error as exc:
        log.debug("could not read the lock connection's session (%r)", exc)
        return None
    return (conn.info.backend_pid, row[0]) if row else None


async def _end_session(conn: psycopg.AsyncConnection, session: tuple[int, object]) -> None:
    """End a lock connection's session this process gave up on, if the server still has it (best effort).

    The client gave up first (a silent peer: its keepalives failed); the server may not have noticed yet,
    and until it does the session keeps every channel lock and the erasure lock it held, for every
    process. This process treats them as gone, so the server must too. The start time makes sure that the
    pid is still that session and not a newer one that reuses it."""
    pid, started = session
    try:
        await conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = %s AND backend_start = %s",
                           (pid, started))
    except psycopg.Error as exc:
        log.debug("could not end the lost lock connection's session %s (%r)", pid, exc)


class PostgresLocks:
    def __init__(self, db: PgDb, dsn: str, lease_seconds: float) -> None:
        self._db = db
        self._dsn = dsn
        self.lease_seconds = lease_seconds
        self.sweep_seconds: float | None = max(0.5, lease_seconds / 4)
        self._conn: psycopg.AsyncConnection | None = None
        self._session: tuple[int, object] | None = None  # the lock connection's server session (pid, start)
        self._server_keepalive_refused = False
        self._connecting = asyncio.Lock()
        # Claims carry this process's token: the engine's in-process lock means a claim row of our own
        # that we did not release (the database was away at the time) is stale, and can be taken back.
        self.process = uuid.uuid4().hex[:16]

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
            self._session = None

    async def _lock_conn(self) -> psycopg.AsyncConnection:
        async with self._connecting:
            # Shared by every channel of the process, so often mid-statement: a look at its socket (the
            # pool's check) would take another channel's answer for a closing server. Known broken, it is
            # replaced; broken unknown, the lock request fails and is asked once more (_try_lock).
            if self._conn is None or self._conn.closed or self._conn.broken:
                conn = await self._connect()
                old, self._session = self._session, await _session_of(conn)
                self._conn = conn
                if old is not None:
                    await _end_session(conn, old)
            return self._conn

    async def _connect(self) -> psycopg.AsyncConnection:
        """A new lock connection with keepalives on both ends. A pooler that refuses the ``options`` startup
        parameter (PgBouncer unless told to ignore it) gets the connection without the server's half, as
        before it was added, and the log says so once."""
        if not self._server_keepalive_refused:
            try:
                return await psycopg.AsyncConnection.connect(self._dsn, autocommit=True, **keepalive_params(self._dsn))
            except psycopg.OperationalError as exc:
                if "options" not in str(exc).lower() and "startup parameter" not in str(exc).lower():
                    raise
                self._server_keepalive_refused = True
                log.warning("the database refused the lock connection's server keepalives (a pooler?); "
                            "connecting without them")
        return await psycopg.AsyncConnection.connect(self._dsn, autocommit=True, **keepalive_params(self._dsn, server=False))

    async def _try_lock(self, thread_id: str) -> tuple[psycopg.AsyncConnection, bool]:
        """One attempt at the channel's lock: the connection it was asked on, and whether it was granted.

        A lock connection lost under the attempt (a restarted or failed-over server: it held no lock
        then, the server dropped them with it) is replaced and asked once more.
        """
        for again in (False, True):
            conn = await self._lock_conn()
            try:
                cur = await conn.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", (CHANNEL_LOCK_CLASS, thread_id))
                return conn, bool((await cur.fetchone())[0])
            except psycopg.OperationalError as exc:
                if again or not (conn.broken or conn.closed):
                    raise
                log.debug("the channel-lock connection was lost (%r); once more on a new one", exc)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _unlock(self, conn: psycopg.AsyncConnection, thread_id: str) -> None:
        try:
            await conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (CHANNEL_LOCK_CLASS, thread_id))
        except psycopg.Error:  # the connection went: the server released the lock with it
            log.debug("channel lock of %s released with its connection", thread_id)

    @asynccontextmanager
    async def channel(self, thread_id: str) -> AsyncIterator[None]:
        while True:
            attempt, cancelled = await run_through(self._try_lock(thread_id))
            granted = not attempt.cancelled() and attempt.exception() is None and attempt.result()[1]
            if cancelled:
                if granted:  # granted as the cancel came: give it back before going
                    await run_through(self._unlock(attempt.result()[0], thread_id))
                raise asyncio.CancelledError
            conn, granted = attempt.result()
            if granted:
                break
            await asyncio.sleep(POLL_SECONDS)  # another process is answering in this channel
        token = ERASURES_HELD.set((conn, asyncio.current_task())) if thread_id == ERASURES_KEY else None
        try:
            yield
        finally:
            if token is not None:
                ERASURES_HELD.reset(token)
            _, cancelled = await run_through(self._unlock(conn, thread_id))
            if cancelled:
                raise asyncio.CancelledError

    async def _check_erasures_held(self) -> None:
        """Inside an erasure waiting for a person: raise :class:`ErasureLockLost` if the global erasure lock
        went with its connection (a restarted server, a killed backend, an idle timeout).

        The server drops a session's advisory locks with the session, and nothing tells this process;
        another process's erasure can then take the lock, hold a person this one wants and wait for one
        this one holds, and both would wait for ever. This one gives way instead. Any hold the erasure
        waits for counts, a light one (``extraction``, on a bystander) as much as its own people's; a task
        started inside the erasure (which inherits the variable and outlives it) is not the erasure.
        """
        held = ERASURES_HELD.get()
        if held is None or held[1] is not asyncio.current_task():
            return
        conn = held[0]
        try:
            if conn is not self._conn or conn.closed or conn.broken:
                raise ErasureLockLost("the erasure lock's connection was replaced")
            cur = await conn.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
                " AND pid = pg_backend_pid() AND classid = %s AND objid = hashtext(%s)::oid AND objsubid = 2)",
                (CHANNEL_LOCK_CLASS, ERASURES_KEY))
            held = bool((await cur.fetchone())[0])
        except psycopg.Error as exc:
            raise ErasureLockLost(f"the erasure lock could not be checked: {type(exc).__name__}") from exc
        if not held:
            raise ErasureLockLost("the erasure lock went with its connection")

    async def _try_claim(self, user_id: str, owner: str, kind: str) -> bool:
        async with self._db.connection() as conn:
            cur = await conn.execute(
                "INSERT INTO bot_claims (user_id, owner, kind, lease_until)"
                " VALUES (%s, %s, %s, now() + make_interval(secs => %s))"
                " ON CONFLICT (user_id) DO UPDATE SET owner = EXCLUDED.owner, kind = EXCLUDED.kind,"
                " lease_until = EXCLUDED.lease_until"
                " WHERE bot_claims.lease_until < now() OR split_part(bot_claims.owner, ':', 1) = %s"
                " RETURNING user_id", (user_id, owner, kind, self.lease_seconds, self.process))
            return await cur.fetchone() is not None

    async def _renew(self, claim: Claim) -> None:
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                async with self._db.connection() as conn:
                    # Not once it ran out: brought back silently, a lapse (renewals starved of a pooled
                    # connection) would go unnoticed by the holder, while every other process saw the
                    # person as free meanwhile. The fence and ``still_held`` then stop the holder.
                    cur = await conn.execute(
                        "UPDATE bot_claims SET lease_until = now() + make_interval(secs => %s)"
                        " WHERE user_id = %s AND owner = %s AND lease_until > now()",
                        (self.lease_seconds, claim.user_id, claim.owner))
                if cur.rowcount == 0:
                    log.warning("the claim on user %s ran out or was taken over; this run will write nothing",
                                claim.user_id)
                    return
            except psycopg.Error as exc:  # an outage: the fence decides at write time
                log.debug("renewing the claim on user %s failed: %r", claim.user_id, exc)

    async def _release(self, claim: Claim, renewing: asyncio.Task | None = None) -> None:
        if renewing is not None:
            renewing.cancel()
            await asyncio.wait((renewing,))  # its connection is back in the pool before the row goes
        try:
            async with self._db.connection() as conn:
                await conn.execute("DELETE FROM bot_claims WHERE user_id = %s AND owner = %s",
                                   (claim.user_id, claim.owner))
        except psycopg.Error as exc:  # it runs out by itself
            log.debug("releasing the claim on user %s failed: %r", claim.user_id, exc)

    @asynccontextmanager
    async def person(self, user_id: str, *, kind: str, wait: bool) -> AsyncIterator[bool]:
        claim = Claim(user_id, f"{self.process}:{kind}:{uuid.uuid4().hex[:12]}")
        polls = 0
        while True:
            attempt, cancelled = await run_through(self._try_claim(user_id, claim.owner, kind))
            if cancelled:
                if _granted(attempt):  # the row was written as the cancel came: take it back out
                    await run_through(self._release(claim))
                raise asyncio.CancelledError
            if attempt.result():
                break
            if not wait:
                yield False
                return
            polls += 1
            if polls % CHECK_GLOBAL_EVERY == 0:
                await self._check_erasures_held()  # waiting while holding others: are we still the one?
            await asyncio.sleep(POLL_SECONDS * 10)
        renewing = asyncio.create_task(self._renew(claim), name=f"claim:{user_id}")
        token = CURRENT_CLAIM.set((*CURRENT_CLAIM.get(), claim))
        try:
            yield True
        finally:
            CURRENT_CLAIM.reset(token)
            _, cancelled = await run_through(self._release(claim, renewing))
            if cancelled:
                raise asyncio.CancelledError

    async def still_held(self) -> None:
        if not CURRENT_CLAIM.get():
            return
        async with self._db.connection() as conn, conn.transaction():
            await fence(conn)

    async def erasing(self, user_ids: Iterable[str]) -> set[str]:
        wanted = sorted(set(user_ids))
        if not wanted:
            return set()
        async with self._db.connection() as conn:
            cur = await conn.execute(
                "SELECT user_id FROM bot_claims WHERE user_id = ANY(%s) AND kind = %s AND lease_until > now()",
                (wanted, ERASURE))
            return {r["user_id"] for r in await cur.fetchall()}

    @staticmethod
    def erasing_clause() -> str:
        """SQL that is true while an erasure of the person ``%(user)s`` holds its claim."""
        return ("EXISTS (SELECT 1 FROM bot_claims WHERE user_id = %(user)s AND kind = '" + ERASURE + "'"
                " AND lease_until > now())")
