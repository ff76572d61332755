"""Shared test fixtures: a scripted chat model (the only fake inside the engine) and real storage.

Storage is real on both backends: every test that takes ``settings`` or ``backend`` runs once on SQLite
files and once on a fresh PostgreSQL database (created with a unique name on the server at
``MNEMO_TEST_POSTGRES``, default ``postgresql://postgres@127.0.0.1:5432/test``, and dropped afterwards).
An unreachable server fails those tests loudly; ``MNEMO_TEST_BACKENDS=sqlite`` leaves the PostgreSQL
half out on purpose.
"""

from __future__ import annotations

import os
import re
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field, SecretStr

from bot.settings import Settings

if TYPE_CHECKING:
    from bot.engine.engine import ChatEngine


@dataclass
class Call:
    """One request the scripted model received."""

    messages: list[BaseMessage]
    kwargs: dict[str, Any]

    @property
    def system(self) -> str:
        return "\n".join(m.text for m in self.messages if isinstance(m, SystemMessage))

    @property
    def prompt_text(self) -> str:
        return "\n".join(m.text for m in self.messages)

    @property
    def is_extraction(self) -> bool:
        return bool(self.kwargs.get("tools"))


Script = Callable[[Call], AIMessage | str]


def _usage(text: str, out: str) -> dict:
    i, o = max(1, len(text) // 4), max(1, len(out) // 4)
    return {"input_tokens": i, "output_tokens": o, "total_tokens": i + o}


class ScriptedChatModel(BaseChatModel):
    """A chat model whose answers come from a Python function; it records every call it gets."""

    script: Any = None
    calls: list = Field(default_factory=list)

    def __init__(self, script: Script, **kw: Any) -> None:
        super().__init__(script=script, **kw)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools, *, tool_choice=None, **kwargs):
        formatted = [convert_to_openai_tool(t) for t in tools]
        return self.bind(tools=formatted, tool_choice=tool_choice, **kwargs)

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        call = Call(list(messages), kwargs)
        self.calls.append(call)
        out = self.script(call)
        if isinstance(out, str):
            out = AIMessage(content=out)
        if out.usage_metadata is None and not out.additional_kwargs.pop("no_usage", False):
            out.usage_metadata = _usage(call.prompt_text, out.text)  # a script's own figures are kept
        return ChatResult(generations=[ChatGeneration(message=out)])

    @property
    def chat_calls(self) -> list[Call]:
        return [c for c in self.calls if not c.is_extraction]

    @property
    def extraction_calls(self) -> list[Call]:
        return [c for c in self.calls if c.is_extraction]


def tool_call(name: str, args: dict, n: int = 0) -> dict:
    return {"name": name, "args": args, "id": f"call_{name}_{n}", "type": "tool_call"}


FACT = re.compile(r"(my name is [\w ]+|i (?:also )?(?:like|enjoy|love|live|work)[\w ,']*)", re.IGNORECASE)


def new_section(call: Call) -> str:
    """The 'new messages' part of an extraction prompt."""
    body = call.messages[-1].text if call.messages else ""
    return body.split("New messages to learn from", 1)[-1]


HEADER = re.compile(r'^#(\d+) · .* · user (\S+) "(.*)" wrote:$')
PERSON = re.compile(r"The person is user (\S+), who goes by:\n    \| (.*)")


def fact_lines(call: Call) -> list[str]:
    """Facts a person stated in the new messages of an extraction prompt (only their own text)."""
    return [fact for fact, _n in cited_facts(call)]


def cited_facts(call: Call) -> list[tuple[str, int]]:
    """(fact, message number) as a literal-minded model reads the prompt.

    It reads the numbered messages' indented text (not the assistant's answers), and, like a model fooled
    by a forged speaker line, also takes any line of the prompt that starts with "<the person's name>:" as
    theirs: a transcript that lets a message's text start a line fails the speaker tests.
    """
    person = PERSON.search(call.prompt_text)
    name = person.group(2) if person else None
    facts: list[tuple[str, int]] = []
    number, in_reply = 0, False
    for line in new_section(call).splitlines():
        header = HEADER.match(line)
        if header:
            number, in_reply = int(header.group(1)), False
        elif line.startswith("  the assistant answered"):
            in_reply = True
        elif line.startswith("    | ") and number and not in_reply:
            facts += [(m.group(1).strip().rstrip("."), number) for m in FACT.finditer(line[6:])]
    if name:
        for line in call.prompt_text.splitlines():
            if line.startswith(f"{name}:"):
                facts += [(m.group(1).strip().rstrip("."), 0) for m in FACT.finditer(line)]
    return facts


def doc_id(call: Call, content: str) -> str:
    """The ID Trustcall showed the model for the existing memory with this text (what a model would cite)."""
    found = re.search(r"<instance id=(\S+) schema_type=\"Memory\">\n\{'content': '" + re.escape(content) + "'",
                      call.prompt_text)
    assert found, f"memory {content!r} was not shown to the extractor"
    return found.group(1)


def default_script(call: Call) -> AIMessage | str:
    """Chat: a short echo. Extraction: one Memory insert per stated fact."""
    if call.is_extraction:
        facts = cited_facts(call)
        return AIMessage(content="", tool_calls=[
            tool_call("Memory", {"content": f, "source_messages": [n] if n else []}, i) for i, (f, n) in enumerate(facts)
        ])
    if any("Summarize" in m.text or "Extend the summary" in m.text for m in call.messages[-1:]):
        return "SUMMARY: " + " / ".join(m.text[:40] for m in call.messages[:-1])
    last = next((m.text for m in reversed(call.messages) if isinstance(m, HumanMessage)), "")
    return f"reply to {last[-60:]}"


@pytest.fixture
def scripted_model() -> ScriptedChatModel:
    return ScriptedChatModel(default_script)


@dataclass(frozen=True)
class Backend:
    """Which storage a test runs on: ``sqlite`` (files in the data dir) or ``postgres`` (its database)."""

    name: str
    database_url: str | None = None


SQLITE = Backend("sqlite")
POSTGRES_SERVER = os.environ.get("MNEMO_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
BACKENDS = [b.strip() for b in os.environ.get("MNEMO_TEST_BACKENDS", "sqlite,postgres").split(",") if b.strip()]


def make_settings(data_dir: Path, backend: Backend = SQLITE, **sections: dict) -> Settings:
    """Settings for tests: defaults, a temp data dir, quick extraction, and any section overrides."""
    raw: dict[str, dict] = {
        "bot": {"data_dir": str(data_dir), "persona": "You are TestBot."},
        "memory": {"extraction_quiet_seconds": 3600, "extraction_after_messages": 100, "semantic": "off"},
        # Small pools: the test server is shared, and a small pool is the harder case.
        "storage": {"backend": backend.name, "pool_min_size": 1, "pool_max_size": 4},
    }
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    settings = Settings.model_validate(raw)
    if backend.database_url:
        settings = settings.model_copy(update={"secrets": settings.secrets.model_copy(
            update={"database_url": SecretStr(backend.database_url)})})
    return settings


def postgres_url(dbname: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    return make_conninfo(**{**conninfo_to_dict(POSTGRES_SERVER), "dbname": dbname})


class FreshDatabase:
    """A database with a unique name on the test server, dropped (connections and all) on exit."""

    def __init__(self) -> None:
        self.name = f"mnemo_test_{uuid.uuid4().hex[:12]}"
        self.url = postgres_url(self.name)

    def _admin(self):
        import psycopg

        try:
            return psycopg.connect(POSTGRES_SERVER, autocommit=True, connect_timeout=5)
        except psycopg.OperationalError as exc:
            pytest.fail(f"the PostgreSQL test server at {POSTGRES_SERVER} is unreachable ({str(exc).strip()}); "
                        "start it, or set MNEMO_TEST_BACKENDS=sqlite to leave the PostgreSQL half out", pytrace=False)

    def __enter__(self) -> "FreshDatabase":
        with self._admin() as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')  # a generated name, not input
        return self

    def __exit__(self, *exc) -> None:
        with self._admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


@pytest.fixture(params=BACKENDS)
def backend(request) -> Backend:
    """Each test that uses it runs on every backend; a PostgreSQL run gets a database of its own."""
    if request.param == "sqlite":
        yield SQLITE
        return
    with FreshDatabase() as db:
        yield Backend("postgres", db.url)


@pytest.fixture
def pg_backend() -> Backend:
    """A fresh PostgreSQL database for a PostgreSQL-only test (dropped afterwards)."""
    with FreshDatabase() as db:
        yield Backend("postgres", db.url)


@pytest.fixture
def settings(tmp_path: Path, backend: Backend) -> Settings:
    return make_settings(tmp_path / "data", backend)


@asynccontextmanager
async def running_engine(settings: Settings, model: BaseChatModel, **kw: Any) -> AsyncIterator["ChatEngine"]:
    """A real engine on the settings' storage (SQLite files or a PostgreSQL database); closed (and flushed) on exit."""
    from bot.engine.engine import ChatEngine
    from bot.storage import open_storage

    async with open_storage(settings) as storage:
        engine = ChatEngine(settings=settings, storage=storage, chat_model=model, **kw)
        await engine.start()
        try:
            yield engine
        finally:
            await engine.close()


@asynccontextmanager
async def real_chat_model(settings: Settings, **kw: Any) -> AsyncIterator[BaseChatModel]:
    """The configured real client (ChatDeepSeek or ChatOpenAI) on a connection pool closed on the way out.

    Without it the OpenAI SDK gives the model its own pool, closed by garbage collection on whatever event
    loop runs then: its connections belong to a closed loop, the close fails, and asyncio logs an error in a
    later test (a CI run failed on one, in a test that checks nothing else is logged during an outage).
    """
    from bot.engine.model import build_chat_model, model_http_client

    pool = model_http_client()
    try:
        yield build_chat_model(settings, http_async_client=pool, **kw)
    finally:
        await pool.aclose()


# ---------------------------------------------------------------- fault-suite figures
FAULT_FIGURES: list[tuple[str, str, str]] = []
_RUNNING_ON = {"backend": ""}  # the backend of the test now running, for its figures


@pytest.fixture(autouse=True)
def _figures_name_their_backend(request):
    callspec = getattr(request.node, "callspec", None)
    _RUNNING_ON["backend"] = callspec.params.get("backend", "") if callspec else ""


def record_figure(name: str, value: object, note: str = "") -> None:
    """Add a line to the fault-suite table printed at the end of the test run (per backend, when parametrized)."""
    if _RUNNING_ON["backend"]:
        name = f"{name} [{_RUNNING_ON['backend']}]"
    FAULT_FIGURES.append((name, str(value), note))


def pytest_terminal_summary(terminalreporter) -> None:
    if not FAULT_FIGURES:
        return
    terminalreporter.section("fault suite figures")
    width = max(len(n) for n, _, _ in FAULT_FIGURES)
    for name, value, note in FAULT_FIGURES:
        terminalreporter.write_line(f"{name.ljust(width)}  {value:>8}  {note}")
