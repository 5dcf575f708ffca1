"""The LLM client: prompts in, validated JSON out, over any OpenAI-compatible endpoint.

Structured output is asked for in the strongest form the server accepts, tried in this order
and remembered per client once a server rejects one:

1. ``json_schema`` — OpenAI, vLLM, Ollama;
2. ``json_object`` with a ``schema`` beside it — llama.cpp's server, which answers 500 to (1);
3. plain prompting with the schema in the system message, parsed tolerantly.

An answer that does not parse or does not fit the schema goes back to the model with the
exact error, at most ``plan_max_repairs`` times. Prompts are logged at debug level only.

Every message passes the one masker (:func:`planloop.core.masking.mask_messages`) at the
one place a request leaves (:meth:`OpenAIChatModel._send`): whichever role built a prompt,
from whatever text, no credential in it reaches the model.

Every HTTP call is metered (core/llm_meter.py): none starts once the session of the current
context has spent its budget, and each answer's usage is written to the session's ledger as
soon as it is read, repairs and unusable answers included.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Literal, Protocol, TypeVar, cast

import openai
from openai import OpenAI, Stream
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessageParam
from pydantic import BaseModel, ValidationError
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from planloop.config.settings import Settings
from planloop.core.errors import ConfigError, LLMResponseError, LLMUnavailableError
from planloop.core.llm_meter import current_meter
from planloop.core.llm_transcript import transcript
from planloop.core.masking import mask_messages
from planloop.planner.json_repair import extract_json
from planloop.planner.llm_stream import read_stream

logger = logging.getLogger(__name__)

T = TypeVar("T", bound=BaseModel)
StructuredMode = Literal["json_schema", "json_object", "none"]

# What each form falls back to when the server rejects it.
_FALLBACK: dict[StructuredMode, StructuredMode | None] = {
    "json_schema": "json_object",
    "json_object": "none",
    "none": None,
}
# Statuses a server answers a response_format it does not support with (llama.cpp: 500).
RECENT_USAGES = 100  # usages an OpenAIChatModel keeps for inspection (tests, debugging)
_REJECTION_STATUSES = frozenset({400, 422, 500})
_TRANSIENT_STATUSES = frozenset({408, 409, 429})

NO_ENDPOINT_MESSAGE = """\
no LLM endpoint is configured; point Planloop at any OpenAI-compatible server:
  OpenAI:    PLANLOOP_LLM_BASE_URL=https://api.openai.com/v1 PLANLOOP_LLM_API_KEY=sk-...
  vLLM:      PLANLOOP_LLM_BASE_URL=http://HOST:8000/v1 PLANLOOP_LLM_MODEL=<served model>
  Ollama:    PLANLOOP_LLM_BASE_URL=http://localhost:11434/v1 PLANLOOP_LLM_MODEL=llama3.1
  llama.cpp: PLANLOOP_LLM_BASE_URL=http://HOST:8080/v1 (llama-server)
or submit an explicit plan file instead of --goal."""


class Role(StrEnum):
    """Who is asking the model; picks the model and names the call in usage records."""

    PLANNER = "planner"  # goal + tools -> first plan
    REPLANNER = "replanner"  # situation report -> sub-graph or new plan
    DECIDER = "decider"  # situation report -> ReplanDecision
    CRITIC = "critic"  # round output -> {passed, feedback}
    SUMMARIZER = "summarizer"  # completed session -> final report
    COMPRESSOR = "compressor"  # old outputs -> compact context
    REACT = "react"  # agent step: instruction + observations -> next tool call or answer
    ROUTER = "router"  # goal -> one open-ended agent step or a multi-step plan
    REFLECTOR = "reflector"  # an ended session that went wrong -> lessons for later ones


@dataclass(frozen=True)
class Usage:
    """Token counts and latency of one model call (or the sum of several)."""

    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    model: str
    role: str
    # Charged to the session's ledger as it arrived (core/llm_meter.py): the caller must
    # not record it again, only count it.
    recorded: bool = False

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


class ChatModel(Protocol):
    """The small interface the planner talks to: prompts in, validated JSON out."""

    def complete_json(
        self, role: Role, messages: list[dict[str, str]], schema: type[T]
    ) -> tuple[T, Usage]:
        """Ask the model for an instance of ``schema``; return it with the summed usage."""
        ...


class StreamingChatModel(ChatModel, Protocol):
    """A :class:`ChatModel` that can also hand over an answer's text while it is written."""

    @property
    def streams_plans(self) -> bool:
        """Whether first plans should be streamed (the setting, and the endpoint allows)."""
        ...

    def stream_text(
        self,
        role: Role,
        messages: list[dict[str, str]],
        schema: type[BaseModel],
        on_text: Callable[[str], None],
    ) -> tuple[str, Usage]:
        """One answer's text, ``on_text`` called with each piece as it arrives; the whole
        text (not validated: the caller validates and repairs) and the call's usage."""
        ...


def streams_plans(chat: ChatModel) -> bool:
    """Whether ``chat`` streams first plans (a :class:`StreamingChatModel`, switched on)."""
    return bool(getattr(chat, "streams_plans", False)) and hasattr(chat, "stream_text")


class OpenAIChatModel:
    """:class:`ChatModel` on the ``openai`` SDK against any OpenAI-compatible endpoint.

    Attributes:
        usages: One :class:`Usage` per recent HTTP call that got an answer, repairs
            included; the newest ``RECENT_USAGES`` only, since a supervisor's client lives
            as long as the supervisor (callers get each call's usage from its return value).
    """

    def __init__(
        self, settings: Settings, *, backoff_s: float = 0.5, backoff_max_s: float = 8.0
    ) -> None:
        """Build the client.

        Args:
            settings: Endpoint, key, models, timeout, retries and structured-output mode.
            backoff_s: First retry delay in seconds, doubled per retry; a server's
                ``Retry-After`` takes precedence.
            backoff_max_s: Longest delay between two retries, seconds.

        Raises:
            ConfigError: ``settings.llm_base_url`` is not set.
        """
        if settings.llm_base_url is None:
            raise ConfigError(NO_ENDPOINT_MESSAGE)
        self.base_url = settings.llm_base_url
        self._settings = settings
        self._backoff_s = backoff_s
        self._backoff_max_s = backoff_max_s
        # Local servers need no key, but the SDK insists on one and would otherwise read
        # OPENAI_API_KEY from the environment; a placeholder keeps config in Settings.
        key = settings.llm_api_key.get_secret_value() or "no-key"
        # Retries are ours (tenacity): the SDK would also retry llama.cpp's 500 rejection.
        self._client = OpenAI(
            base_url=self.base_url, api_key=key, timeout=settings.llm_timeout_s, max_retries=0
        )
        forced = settings.llm_structured_output
        self._auto = forced == "auto"
        self._mode: StructuredMode = "json_schema" if forced == "auto" else forced
        self._streams = settings.llm_stream_plans  # off for good once the server refuses
        self.usages: deque[Usage] = deque(maxlen=RECENT_USAGES)

    @property
    def structured_mode(self) -> StructuredMode:
        """The form of structured output this client asks for now."""
        return self._mode

    @property
    def streams_plans(self) -> bool:
        """Whether first plans are streamed: ``llm_stream_plans``, unless the endpoint
        refused a streamed request (then every call is a whole reply)."""
        return self._streams

    def model_for(self, role: Role) -> str:
        """The model that serves ``role``: its override, else ``llm_model``."""
        s = self._settings
        override = {
            Role.PLANNER: s.llm_planner_model,
            Role.REPLANNER: s.llm_planner_model,
            Role.DECIDER: s.llm_decider_model,
            Role.CRITIC: s.llm_critic_model,
            Role.ROUTER: s.llm_router_model,
        }.get(role)
        return override or s.llm_model

    def complete_json(
        self, role: Role, messages: list[dict[str, str]], schema: type[T]
    ) -> tuple[T, Usage]:
        """Ask the model for an instance of ``schema``, repairing unusable answers.

        Args:
            role: Who asks; picks the model and labels the usage.
            messages: The chat so far (``role``/``content`` dicts); not modified.
            schema: The pydantic model the answer must validate against.

        Returns:
            The validated instance and the usage summed over every call it took.

        Raises:
            LLMResponseError: Still unusable after ``plan_max_repairs`` repairs.
            LLMUnavailableError: The endpoint failed, refused, or kept failing.
        """
        chat = [dict(m) for m in messages]
        usages: list[Usage] = []
        max_repairs = self._settings.plan_max_repairs
        for repair in range(max_repairs + 1):
            raw, usage = self._complete(role, chat, schema)
            usages.append(usage)
            try:
                return _validate(raw, schema), _sum_usages(usages)
            except LLMResponseError as exc:
                error = str(exc)
            logger.info(
                "%s answer unusable (repair %d of %d): %s", role, repair, max_repairs, error
            )
            if repair == max_repairs:
                raise LLMResponseError(
                    f"the {role} model's answer is still unusable after {max_repairs} "
                    f"repair(s): {error}",
                    raw=raw,
                    role=str(role),
                )
            chat += [{"role": "assistant", "content": raw}, _repair_request(error)]
        raise AssertionError("unreachable")  # the loop returns or raises

    def stream_text(
        self,
        role: Role,
        messages: list[dict[str, str]],
        schema: type[BaseModel],
        on_text: Callable[[str], None],
    ) -> tuple[str, Usage]:
        """One answer, streamed: ``on_text`` gets each piece of its text as it arrives.

        The request is the one :meth:`complete_json` makes (same model, structured-output
        form and retries of the request itself) with ``stream=True`` and, for the usage,
        ``stream_options.include_usage``. A server that answers a whole JSON completion
        instead of an event stream is read as such (``on_text`` then gets the whole text
        once); one that refuses streaming is not asked to stream again. A stream cut off
        half-way returns the text so far: the caller's validation finds it unusable and
        repairs it like any other unusable answer.

        Returns:
            The answer's whole text (not validated) and the call's usage, which is also
            counted in :attr:`usages` like any call's.

        Raises:
            LLMUnavailableError: The endpoint failed, refused, or kept failing.
        """
        if not self._streams:
            text, usage = self._complete(role, [dict(m) for m in messages], schema)
            on_text(text)
            return text, usage
        chat = [dict(m) for m in messages]
        model = self.model_for(role)
        while True:
            mode = self._mode
            with _metered(role):
                started = time.monotonic()
                try:
                    stream = cast(
                        Stream[ChatCompletionChunk],
                        self._send(model, _shape(chat, schema, mode), mode, schema, stream=True),
                    )
                except openai.APIStatusError as exc:
                    if _rejects_streaming(exc):
                        logger.warning(
                            "%s refused a streamed request (HTTP %d); plans are not streamed "
                            "from now on",
                            self.base_url,
                            exc.status_code,
                        )
                        self._streams = False
                        break  # asked again whole, once the slot is free
                    if not _rejects_format(exc, mode):
                        raise self._unavailable(exc) from exc
                    self._step_down(mode, exc)
                    continue
                except openai.APIConnectionError as exc:
                    raise self._unavailable(exc) from exc
                text, usage, reported = self._read_stream(stream, on_text, started, model, role)
                # A stream cut before its usage chunk served no usage: nothing to record.
                usage = (
                    _charged(usage, self._kept(chat, text))
                    if reported
                    else replace(usage, recorded=True)
                )
            self.usages.append(usage)
            logger.debug("%s answer (%s, streamed): %s", role, model, text)
            return text, usage
        return self.stream_text(role, messages, schema, on_text)

    def close(self) -> None:
        """Close the HTTP connections."""
        self._client.close()

    # --- one answer -----------------------------------------------------------------------

    def _complete(
        self, role: Role, chat: list[dict[str, str]], schema: type[BaseModel]
    ) -> tuple[str, Usage]:
        """One answer's text, stepping down the structured-output forms on rejection."""
        model = self.model_for(role)
        while True:
            mode = self._mode
            with _metered(role):
                started = time.monotonic()
                try:
                    response = cast(
                        ChatCompletion,
                        self._send(model, _shape(chat, schema, mode), mode, schema, stream=False),
                    )
                except openai.APIStatusError as exc:
                    if not _rejects_format(exc, mode):
                        raise self._unavailable(exc) from exc
                    self._step_down(mode, exc)
                    continue
                except openai.APIConnectionError as exc:
                    raise self._unavailable(exc) from exc
                usage = _usage_of(response, time.monotonic() - started, model, role)
                content = response.choices[0].message.content if response.choices else None
                usage = _charged(usage, self._kept(chat, content or ""))
            self.usages.append(usage)
            logger.debug("%s answer (%s): %s", role, model, content)
            return content or "", usage

    def _kept(self, chat: list[dict[str, str]], answer: str) -> tuple[str | None, str | None]:
        """The prompt and response the record keeps of one call: of the messages as masked
        for sending (never the unmasked ones), cut to ``llm_transcript_max_chars``."""
        return transcript(mask_messages(chat), answer, self._settings.llm_transcript_max_chars)

    def _retrying(self, mode: StructuredMode) -> Retrying:
        """Retries of one request: transient errors, with the endpoint's back-off."""
        return Retrying(
            stop=stop_after_attempt(self._settings.llm_max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception(lambda exc: _is_transient(exc, mode)),
            before_sleep=self._log_retry,
            reraise=True,
        )

    def _send(
        self,
        model: str,
        messages: list[dict[str, str]],
        mode: StructuredMode,
        schema: type[BaseModel],
        *,
        stream: bool,
    ) -> ChatCompletion | Stream[ChatCompletionChunk]:
        """POST one chat completion (or open a stream), the one place a request leaves:
        masked messages, the structured-output form, retries of 429s, 5xx and lost
        connections (only of the request: a stream cut off after its first piece is not
        asked again)."""
        masked = mask_messages(messages)
        logger.debug("prompt to %s (%s, stream=%s): %s", model, mode, stream, masked)
        extra: dict[str, Any] = {}
        if mode != "none":
            # Through extra_body: llama.cpp's json_object + schema is not in the SDK's types.
            extra["response_format"] = _response_format(mode, schema)
        streaming: dict[str, Any] = (
            {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
        )

        def call() -> ChatCompletion | Stream[ChatCompletionChunk]:
            return self._client.chat.completions.create(  # type: ignore[no-any-return]
                model=model,
                messages=cast("list[ChatCompletionMessageParam]", masked),
                extra_body=extra or None,
                **streaming,
            )

        return self._retrying(mode)(call)

    def _read_stream(
        self,
        stream: Stream[ChatCompletionChunk],
        on_text: Callable[[str], None],
        started: float,
        model: str,
        role: Role,
    ) -> tuple[str, Usage, bool]:
        """The text and usage of an opened stream (planner/llm_stream.py), and whether the
        endpoint reported its usage (a stream cut before its usage chunk did not)."""
        read = read_stream(stream, on_text, model=model, role=str(role), base_url=self.base_url)
        latency = time.monotonic() - started
        usage = Usage(read.prompt_tokens, read.completion_tokens, latency, read.model, str(role))
        return read.text, usage, read.reported

    def _step_down(self, mode: StructuredMode, exc: openai.APIStatusError) -> None:
        """Remember that the server rejects ``mode``; raise when there is nothing to fall to."""
        fallback = _FALLBACK[mode]
        if not self._auto or fallback is None:
            raise LLMUnavailableError(
                f"{self.base_url} rejected response_format {mode!r} (HTTP {exc.status_code}: "
                f"{_brief(exc)}); set PLANLOOP_LLM_STRUCTURED_OUTPUT=auto to let Planloop "
                "pick a form it accepts",
                base_url=self.base_url,
                status=exc.status_code,
            )
        logger.warning(
            "%s rejected response_format %s (HTTP %d); using %s from now on",
            self.base_url,
            mode,
            exc.status_code,
            fallback,
        )
        self._mode = fallback

    def _unavailable(self, exc: openai.APIError) -> LLMUnavailableError:
        """An actionable error for an endpoint failure."""
        if isinstance(exc, openai.APIStatusError):
            status: int | None = exc.status_code
            hint = {
                401: "; check PLANLOOP_LLM_API_KEY",
                403: "; check PLANLOOP_LLM_API_KEY",
                404: "; check PLANLOOP_LLM_BASE_URL (it usually ends in /v1) and the model name",
            }.get(exc.status_code, "")
            what = f"answered HTTP {exc.status_code}: {_brief(exc)}{hint}"
        else:
            status, what = None, f"could not be reached: {exc}; is the server running?"
        if isinstance(exc, openai.APITimeoutError):
            what = f"did not answer within {self._settings.llm_timeout_s:g}s"
        return LLMUnavailableError(
            f"the LLM endpoint {self.base_url} {what}", base_url=self.base_url, status=status
        )

    def _wait(self, state: RetryCallState) -> float:
        """Seconds before the next try: the server's Retry-After, else exponential."""
        exc = state.outcome.exception() if state.outcome else None
        hinted = _retry_after_s(exc)
        if hinted is None:
            hinted = self._backoff_s * 2 ** (state.attempt_number - 1)
        return max(0.0, min(hinted, self._backoff_max_s))

    def _log_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        logger.warning(
            "LLM call to %s failed (try %d of %d): %s",
            self.base_url,
            state.attempt_number,
            self._settings.llm_max_retries + 1,
            exc,
        )


def build_chat_model(settings: Settings) -> OpenAIChatModel:
    """The configured chat model.

    Raises:
        ConfigError: No endpoint configured; the message says how to point Planloop at
            OpenAI, vLLM, Ollama or a llama.cpp server.
    """
    return OpenAIChatModel(settings)


# --- helpers ------------------------------------------------------------------------------


def validate_answer(raw: str, schema: type[T]) -> T:
    """Extract the JSON from ``raw`` and validate it against ``schema``, as
    :meth:`OpenAIChatModel.complete_json` does (for a streamed answer read whole).

    Raises:
        LLMResponseError: not JSON, or not fitting the schema; phrased for the model.
    """
    return _validate(raw, schema)


def _validate(raw: str, schema: type[T]) -> T:
    """Extract the JSON from ``raw`` and validate it; errors phrased for the model to fix."""
    data = extract_json(raw)
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
            for err in exc.errors(include_url=False)
        )
        raise LLMResponseError(
            f"the JSON does not fit the {schema.__name__} schema: {problems}", raw=raw
        ) from exc


def _repair_request(error: str) -> dict[str, str]:
    return {
        "role": "user",
        "content": f"Your previous answer could not be used: {error}\n"
        "Reply with the corrected JSON only: no prose, no code fences.",
    }


def _response_format(mode: StructuredMode, schema: type[BaseModel]) -> dict[str, Any]:
    json_schema = schema.model_json_schema()
    if mode == "json_schema":
        return {
            "type": "json_schema",
            "json_schema": {"name": schema.__name__, "schema": json_schema, "strict": False},
        }
    return {"type": "json_object", "schema": json_schema}  # llama.cpp's form


def _shape(
    chat: list[dict[str, str]], schema: type[BaseModel], mode: StructuredMode
) -> list[dict[str, str]]:
    """The messages as sent: without json_schema support the schema goes into the prompt.

    It is appended to the first system message so that message's other lines (the
    ``ROLE:`` line the templates start with) stay where they are.
    """
    if mode == "json_schema":
        return chat
    hint = (
        "Reply with one JSON value and nothing else. It must fit this JSON schema:\n"
        + json.dumps(schema.model_json_schema(), separators=(",", ":"))
    )
    shaped = [dict(m) for m in chat]
    if shaped and shaped[0].get("role") == "system":
        shaped[0]["content"] = f"{shaped[0].get('content', '')}\n\n{hint}"
    else:
        shaped.insert(0, {"role": "system", "content": hint})
    return shaped


def _rejects_format(exc: openai.APIStatusError, mode: StructuredMode) -> bool:
    """Whether ``exc`` is the server refusing the response_format we sent."""
    if mode == "none" or exc.status_code not in _REJECTION_STATUSES:
        return False
    text = f"{exc.message} {exc.body}".lower()
    return any(word in text for word in ("response_format", "json_schema", mode))


def _rejects_streaming(exc: openai.APIStatusError) -> bool:
    """Whether ``exc`` is the server refusing ``stream`` or ``stream_options``."""
    if exc.status_code not in (400, 422):
        return False
    return "stream" in f"{exc.message} {exc.body}".lower()


def _is_transient(exc: BaseException, mode: StructuredMode) -> bool:
    """Worth another try: lost connection, timeout, 408/409/429, or a 5xx that is not a
    rejection of the response_format."""
    if isinstance(exc, openai.APIConnectionError):
        return True
    if not isinstance(exc, openai.APIStatusError) or _rejects_format(exc, mode):
        return False
    return exc.status_code in _TRANSIENT_STATUSES or exc.status_code >= 500


def _retry_after_s(exc: BaseException | None) -> float | None:
    """The server's ``retry-after-ms`` / ``retry-after`` (seconds) hint, if any."""
    if not isinstance(exc, openai.APIStatusError):
        return None
    headers = exc.response.headers
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return float(value) * scale
        except ValueError:
            continue  # an HTTP date: fall back to our own back-off
    return None


def _brief(exc: openai.APIStatusError) -> str:
    """The server's error message, shortened for a user-facing line."""
    body = exc.body
    message = body.get("message") if isinstance(body, dict) else None
    text = str(message or exc.message)
    return text if len(text) <= 300 else text[:297] + "..."


def _usage_of(response: ChatCompletion, latency_s: float, model: str, role: Role) -> Usage:
    counted = response.usage
    return Usage(
        prompt_tokens=counted.prompt_tokens if counted else 0,
        completion_tokens=counted.completion_tokens if counted else 0,
        latency_s=latency_s,
        model=response.model or model,
        role=str(role),
    )


def _sum_usages(usages: list[Usage]) -> Usage:
    last = usages[-1]
    return Usage(
        prompt_tokens=sum(u.prompt_tokens for u in usages),
        completion_tokens=sum(u.completion_tokens for u in usages),
        latency_s=sum(u.latency_s for u in usages),
        model=last.model,
        role=last.role,
        recorded=all(u.recorded for u in usages),
    )


def _metered(role: Role) -> AbstractContextManager[object]:
    """Around one call: refuse to start it once the current session's budget is spent, and
    hold the session's call slot until it is charged (core/llm_meter.py).

    Raises:
        LLMBudgetSpentError: The meter of the current context says the budget is spent.
    """
    meter = current_meter()
    return nullcontext() if meter is None else meter.metered(str(role))


def _charged(usage: Usage, kept: tuple[str | None, str | None] = (None, None)) -> Usage:
    """``usage``, charged to the current session's meter first when there is one, with the
    call's ``kept`` prompt and response (masked and cut: core/llm_transcript.py)."""
    meter = current_meter()
    if meter is None:
        return usage
    meter.charge(
        usage.role,
        usage.model,
        usage.prompt_tokens,
        usage.completion_tokens,
        usage.latency_s,
        prompt=kept[0],
        response=kept[1],
    )
    return replace(usage, recorded=True)
