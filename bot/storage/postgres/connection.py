"""Connecting to PostgreSQL: a clear one-line refusal at start-up, one pool, and one log line per outage.

The pool's connections are what LangGraph's saver and store expect (autocommit, no prepared statements,
dict rows), so the bot's own tables share the same pool. ``still_open`` looks at a connection before the
pool hands it out, without a query: an idle connection the server has written to (a restarted server
says "terminating connection" and closes it) is replaced instead of failing a request. A round trip on
every checkout (psycopg's ``check_connection``) cost as much as a short statement; what a look cannot
see is retried once (``db.py``).
"""

from __future__ import annotations

import logging
import select
import time

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from bot.engine.stores import StorageUnavailable
from bot.settings import StorageSection, dsn_secrets

log = logging.getLogger(__name__)

CONNECTION_KWARGS = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
POOL_LOGGER = "psycopg.pool"
PSYCOPG_LOGGER = "psycopg"
OUTAGE_HINTS = ("error connecting", "discarding broken", "discarding closed", "reconnection attempt")
# psycopg could not end a pipeline (a connection broken under it): psycopg itself ignores the error, and the
# request it belonged to fails (and reports an outage) on its own; the line is kept at DEBUG.
IGNORED_HINTS = ("error ignored terminating",)


def describe(dsn: str) -> str:
    """Where a DSN points, without its password: ``user@host:port/dbname``."""
    try:
        info = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "(unparseable DATABASE_URL)"
    host = info.get("host") or info.get("hostaddr") or "localhost"
    port, dbname = str(info.get("port") or 5432), info.get("dbname") or "?"
    # A misparsed URL puts the password, or pieces of it, into the host, port or database (not the user
    # name, which often is the same word as the password on a development machine).
    misparsed = [x for x in secrets(dsn) if x != info.get("password")]  # a clean parse leaks into no field
    for secret in sorted(misparsed and secrets(dsn), key=len, reverse=True):
        host, port, dbname = (part.replace(secret, "***") for part in (host, port, dbname))
    return f"{info.get('user') or '?'}@{host}:{port}/{dbname}"


def first_line(exc: BaseException, secrets: tuple[str, ...] = ()) -> str:
    """An error's message as one line, with any secret blanked out."""
    lines = [part.strip() for part in str(exc).splitlines() if part.strip()]
    text = lines[0] if lines else type(exc).__name__
    for secret in sorted(secrets, key=len, reverse=True):  # a whole password before its pieces
        if secret:
            text = text.replace(secret, "***")
    return text


def secrets(dsn: str) -> tuple[str, ...]:
    """The DSN's password in every form an error could quote, so log lines and errors can blank it out
    (``bot.settings.dsn_secrets``: a URL libpq misparses too)."""
    return dsn_secrets(dsn)


async def check_reachable(dsn: str, timeout: float) -> None:
    """Connect once, so a wrong DSN or a server that is not there stops start-up with one clear line."""
    where, secret = describe(dsn), secrets(dsn)
    try:
        conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        raise StorageUnavailable(f"DATABASE_URL is not a valid PostgreSQL connection string: {first_line(exc, secret)}") from None
    try:
        conn = await psycopg.AsyncConnection.connect(dsn, connect_timeout=max(1, round(timeout)))
    except psycopg.Error as exc:
        raise StorageUnavailable(f"cannot connect to PostgreSQL at {where}: {first_line(exc, secret)}") from None
    await conn.close()


class Outages:
    """Turns a flood of connection errors into one warning when the database goes away, and one info
    line when it is back.

    It is told by the pool (a failed check, a failed connect: the pool's own warnings are absorbed by
    :meth:`filter` while the outage lasts) and by the stores (an ``OperationalError``); the pool's
    ``configure`` hook (a new connection works) ends the outage.
    """

    def __init__(self, where: str, secrets: tuple[str, ...] = ()) -> None:
        self.where = where
        self.secrets = secrets
        self.down_since: float | None = None
        self.count = 0

    def down(self, reason: BaseException | str) -> None:
        if self.down_since is not None:
            return
        self.down_since = time.monotonic()
        self.count += 1
        text = reason if isinstance(reason, str) else first_line(reason, self.secrets)
        log.warning("PostgreSQL at %s is unreachable (%s); requests fail until it is back", self.where, text)

    def up(self) -> None:
        if self.down_since is None:
            return
        took, self.down_since = time.monotonic() - self.down_since, None
        log.info("PostgreSQL at %s is reachable again after %.1f s", self.where, took)

    def filter(self, record: logging.LogRecord) -> bool:
        """A logging filter for the pool's and psycopg's loggers: outage symptoms become :meth:`down`, then
        go quiet."""
        if record.levelno < logging.WARNING:
            return True
        message = record.getMessage()
        if any(hint in message for hint in IGNORED_HINTS):
            log.debug("psycopg: %s", message)
            return False
        if any(hint in message for hint in OUTAGE_HINTS):
            # "error connecting in 'mnemo': <why>" says why; the others only name a connection object.
            self.down(message.split(": ", 1)[-1] if message.startswith("error connecting") else "connections were cut")
            return False
        return self.down_since is None  # during an outage, nothing else from the pool either

    async def configure(self, conn: psycopg.AsyncConnection) -> None:
        self.up()


def still_open(conn: psycopg.AsyncConnection) -> None:
    """Raise ``OperationalError`` unless an idle connection looks usable, without a round trip.

    Nothing is sent: an idle connection's socket has nothing to read unless the server wrote to it
    unasked, which for a pooled connection (no LISTEN) means it is going away ("terminating connection
    due to administrator command", then end of file). So a readable socket, a connection libpq already
    knows is bad, or one closed on our side is refused, and the pool takes another.
    """
    if conn.closed or conn.broken or conn.pgconn.status != psycopg.pq.ConnStatus.OK:
        raise psycopg.OperationalError("the connection is closed")
    poll = select.poll()
    poll.register(conn.pgconn.socket, select.POLLIN | select.POLLERR | select.POLLHUP)
    if poll.poll(0):
        raise psycopg.OperationalError("the server closed the connection while it was idle")


def make_pool(dsn: str, config: StorageSection, outages: Outages) -> AsyncConnectionPool:
    """The process's one pool (not yet opened); sizes and the wait for a connection come from config."""

    async def check(conn: psycopg.AsyncConnection) -> None:
        # A connection the server closed is replaced, not an outage: if the server is really gone, making
        # the replacement fails and the pool's "error connecting" line reports it (Outages.filter).
        try:
            still_open(conn)
        except psycopg.OperationalError:
            await conn.close()  # closed, the pool drops it and opens a replacement
            raise

    kwargs = dict(CONNECTION_KWARGS)
    if not config.synchronous_commit:  # see config.toml: the SQLite backend's durability, far fewer fsyncs
        kwargs["options"] = "-c synchronous_commit=off"
    return AsyncConnectionPool(
        dsn,
        min_size=config.pool_min_size,
        max_size=config.pool_max_size,
        timeout=config.pool_timeout_seconds,
        kwargs=kwargs,
        check=check,
        configure=outages.configure,
        open=False,
        name="mnemo",
    )
