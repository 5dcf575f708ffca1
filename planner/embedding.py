"""Text similarity for lessons: embeddings from the endpoint, or a lexical stand-in.

:class:`OpenAIEmbedder` asks the OpenAI-compatible ``/embeddings`` endpoint through the
``openai`` SDK (``PLANLOOP_LLM_EMBEDDING_MODEL``). An endpoint that has no embeddings (404,
400, a model it does not serve) is remembered and the embedder answers ``None`` from then
on, so lessons keep working on :func:`lexical_similarity`, a word-overlap cosine that is
weaker: it misses synonyms and counts shared words whatever their meaning.
:class:`LocalEmbedder` (planner/local_embedding.py, an optional extra) embeds in-process
and offline instead; ``PLANLOOP_LESSONS_EMBEDDING_BACKEND`` picks one (:func:`build_embedder`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Protocol

import openai
from openai import OpenAI

from planloop.config.settings import Settings
from planloop.core.errors import LLMBudgetSpentError
from planloop.core.llm_meter import UsageMeter, current_meter
from planloop.core.masking import mask_text
from planloop.core.similarity import cosine, cosine_many, lexical_similarity
from planloop.planner.local_embedding import LocalEmbedder

__all__ = [
    "Embedder",
    "LocalEmbedder",
    "NoEmbedder",
    "OpenAIEmbedder",
    "build_embedder",
    "cosine",
    "cosine_many",
    "lexical_similarity",
]

log = logging.getLogger(__name__)

# The role embeddings calls are recorded under (no prompt template: not a chat role).
EMBEDDING_ROLE = "embedding"


class Embedder(Protocol):
    """Texts in, one vector per text out; ``None`` when no embeddings can be had."""

    @property
    def model(self) -> str:
        """The embeddings model (vectors of different models are never compared)."""
        ...

    def embed(self, texts: Sequence[str]) -> list[list[float]] | None:
        """The vectors of ``texts``, or ``None`` (no endpoint: use lexical similarity)."""
        ...


class OpenAIEmbedder:
    """:class:`Embedder` on the endpoint's ``/embeddings``; gives up for good on a refusal."""

    def __init__(self, settings: Settings) -> None:
        self._model = settings.llm_embedding_model or ""
        self.available = bool(settings.llm_base_url and self._model)
        self._client: OpenAI | None = None
        if self.available:
            key = settings.llm_api_key.get_secret_value() or "no-key"
            self._client = OpenAI(
                base_url=settings.llm_base_url,
                api_key=key,
                timeout=settings.llm_timeout_s,
                max_retries=settings.llm_max_retries,
            )

    @property
    def model(self) -> str:
        return self._model

    def embed(self, texts: Sequence[str]) -> list[list[float]] | None:
        if not self.available or self._client is None or not texts:
            return None
        meter = current_meter()
        try:
            with nullcontext() if meter is None else meter.metered(EMBEDDING_ROLE):
                return self._embed(texts, meter)
        except LLMBudgetSpentError:
            # No call starts on a spent budget; lexical similarity costs nothing.
            log.info("session=%s LLM budget spent: lexical similarity this time", self._sid(meter))
            return None

    def _embed(self, texts: Sequence[str], meter: UsageMeter | None) -> list[list[float]] | None:
        """One embeddings call, charged to ``meter`` before its vectors are used."""
        assert self._client is not None
        started = time.monotonic()
        try:
            # texts leave through the one masker too (core/masking.py), like every prompt
            response = self._client.embeddings.create(
                model=self._model, input=[mask_text(t) for t in texts]
            )
        except openai.APIStatusError as exc:
            if exc.status_code in (400, 404, 405, 501):
                # The server has no embeddings (or not this model): lexical from now on.
                log.warning(
                    "embeddings endpoint refused model %s (HTTP %d); lessons fall back to "
                    "lexical similarity",
                    self._model,
                    exc.status_code,
                )
                self.available = False
            else:
                log.warning("embeddings call failed (HTTP %d): lexical this time", exc.status_code)
            return None
        except openai.APIConnectionError as exc:
            log.warning("embeddings endpoint unreachable (%s): lexical this time", exc)
            return None
        if meter is not None:  # charged before the vectors are used, like a chat call
            counted = response.usage
            meter.charge(
                EMBEDDING_ROLE,
                response.model or self._model,
                counted.prompt_tokens if counted else 0,
                0,
                time.monotonic() - started,
            )
        ordered = sorted(response.data, key=lambda d: d.index)
        return [list(d.embedding) for d in ordered]

    @staticmethod
    def _sid(meter: UsageMeter | None) -> str:
        return meter.sid if meter is not None else ""

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


class NoEmbedder:
    """No embeddings at all: every search is lexical."""

    model = ""

    def embed(self, texts: Sequence[str]) -> list[list[float]] | None:
        return None


def build_embedder(settings: Settings) -> Embedder:
    """The embedder ``PLANLOOP_LESSONS_EMBEDDING_BACKEND`` picks.

    ``endpoint``: the endpoint's when an endpoint and a model are set, else
    :class:`NoEmbedder`; ``local``: :class:`LocalEmbedder` (a ConfigError naming the pip
    command when the extra is not installed); ``lexical``: :class:`NoEmbedder`.
    """
    backend = settings.lessons_embedding_backend
    if backend == "local":
        return LocalEmbedder()
    if backend == "endpoint" and settings.llm_base_url and settings.llm_embedding_model:
        return OpenAIEmbedder(settings)
    return NoEmbedder()
