"""The engine's public face: what the cogs, the console, the CLI and the benchmarks may import.

Everything else under ``bot/engine/`` is internal (tests may import the internals of the module they
test). The front door is :class:`ChatEngine` (``bot/engine/engine.py``); see ``docs/architecture.md`` for
where each concern lives.
"""

from bot.engine.concurrency import BoundedDict
from bot.engine.conversation.rendering import safe_name
from bot.engine.conversation.side import side_thread
from bot.engine.engine import ChatEngine, Reply, TurnResult, create_engine
from bot.engine.erasure.eraser import request_erasure
from bot.engine.errors import EmptyAnswer, ImportRefused, SettingRefused, StorageUnavailable, is_transient
from bot.engine.learning.extraction import WriteRequest
from bot.engine.memories.export import (MAX_CONTENT, MAX_HISTORY, MAX_IMPORT_BYTES, export_file, export_memories,
                                        parse_import)
from bot.engine.memories.records import Actor, HistoryEntry, StoredMemory, is_snowflake
from bot.engine.memories.repository import MemoryRepository
from bot.engine.policy.limits import TokenBucket
from bot.engine.policy.server_settings import OPERATOR, Edit, GuildPolicy, channel_listed, channel_persona, reset, set_field
from bot.engine.recall import DEFAULT_WEIGHTS, Mode, SemanticIndex, Weights, bm25_scores, choose_memories, estimate_tokens, memory_line
from bot.engine.recall.choose import matched_text, prior_of, score_memories  # for benchmarks/recall_tune.py's reading of misses
from bot.engine.recall.embedders import local_embedder, local_model_installed
from bot.engine.recall.minilm import LocalMiniLM
from bot.engine.recall.vectors import MemoryVectorCache
from bot.engine.state import Image, Incoming, Quote, Speaker
from bot.engine.stores import Prefs, ServerSettings, Storage

__all__ = [
    "DEFAULT_WEIGHTS", "MAX_CONTENT", "MAX_HISTORY", "MAX_IMPORT_BYTES",
    "OPERATOR", "Actor", "BoundedDict", "ChatEngine", "Edit", "EmptyAnswer", "GuildPolicy", "HistoryEntry", "Image", "ImportRefused",
    "Incoming", "LocalMiniLM", "MemoryRepository", "MemoryVectorCache", "Mode", "Prefs", "Quote", "Reply", "SemanticIndex",
    "ServerSettings", "SettingRefused", "Speaker", "Storage", "StorageUnavailable", "StoredMemory", "TokenBucket", "TurnResult", "Weights",
    "WriteRequest", "bm25_scores", "channel_listed", "channel_persona", "choose_memories", "create_engine", "estimate_tokens",
    "export_file", "export_memories",
    "is_snowflake", "is_transient", "local_embedder", "local_model_installed", "memory_line", "parse_import", "request_erasure", "reset",
    "safe_name",
    "matched_text", "prior_of", "score_memories", "set_field", "side_thread",
]
