"""The chat client: prompts in, validated JSON out, over any OpenAI-compatible endpoint.

Structured output is asked for in the strongest form the server accepts, stepping down once
a server rejects one (planner/structured_output.py). An answer that does not parse or does
not fit the schema goes back to the model with the exact error, at most
``plan_max_repairs`` times. Prompts are logged at debug level only.

Every message passes the one masker (:func:`planloop.core.masking.mask_messages`) at the
one place a request leaves (:meth:`OpenAIChatModel._send`): whichever role built a prompt,
from whatever text, no credential in it reaches the model.

Every HTTP call is metered (planner/llm_metering.py): none starts once the session of the
current context has spent its budget, and each answer's usage is written to the session's
ledger as soon as it is read, repairs and unusable answers included.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar, cast

import openai
from openai import OpenAI, Stream
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessageParam
from pydantic import BaseModel

from planloop.config.settings import Settings
from planloop.core.errors import ConfigError, LLMResponseError, LLMUnavailableError
from planloop.core.llm_transcript import transcript
from planloop.core.masking import mask_messages
from planloop.planner.answer_validation import repair_request, validate_answer
from planloop.planner.llm import Role, Usage
from planloop.planner.llm_errors import rejects_streaming, unavailable
from planloop.planner.llm_metering import charged, metered, sum_usages, usage_of
from planloop.planner.llm_retries import RetryPolicy
from planloop.planner.llm_stream import read_stream
from planloop.planner.structured_output import (
    StructuredMode,
    fallback_after,
    rejects_format,
    response_format,
    shape_messages,
)

logger = logging.getLogger(__name__)

T = TypeVar("T", bound=BaseModel)

RECENT_USAGES = 100  # usages an OpenAIChatModel keeps for inspection (tests, debugging)

NO_ENDPOINT_MESSAGE = """\
no LLM endpoint is configured; point Planloop at any OpenAI-compatible server:
  OpenAI:    PLANLOOP_LLM_BASE_URL=https://api.openai.com/v1 PLANLOOP_LLM_API_KEY=sk-...
  vLLM:      PLANLOOP_LLM_BASE_URL=http://HOST:8000/v1 PLANLOOP_LLM_MODEL=<served model>
  Ollama:    PLANLOOP_LLM_BASE_URL=http://localhost:11434/v1 PLANLOOP_LLM_MODEL=llama3.1
  llama.cpp: PLANLOOP_LLM_BASE_URL=http://HOST:8080/v1 (llama-server)
or submit an explicit plan file instead of --goal."""


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
        self._retries = RetryPolicy(
            settings.llm_max_retries, backoff_s, backoff_max_s, self.base_url
        )
        # Local servers need no key, but the SDK insists on one and would otherwise read
        # OPENAI_API_KEY from the environment; a placeholder keeps config in Settings.
        key = settings.llm_api_key.get_secret_value() or "no-key"
        # Retries are ours (planner/llm_retries.py), hence max_retries=0 for the SDK.
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
                return validate_answer(raw, schema), sum_usages(usages)
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
            chat += [{"role": "assistant", "content": raw}, repair_request(error)]
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
            with metered(role):
                started = time.monotonic()
                try:
                    stream = cast(
                        Stream[ChatCompletionChunk],
                        self._send(
                            model, shape_messages(chat, schema, mode), mode, schema, stream=True
                        ),
                    )
                except openai.APIStatusError as exc:
                    if rejects_streaming(exc):
                        logger.warning(
                            "%s refused a streamed request (HTTP %d); plans are not streamed "
                            "from now on",
                            self.base_url,
                            exc.status_code,
                        )
                        self._streams = False
                        break  # asked again whole, once the slot is free
                    if not rejects_format(exc, mode):
                        raise self._unavailable(exc) from exc
                    self._step_down(mode, exc)
                    continue
                except openai.APIConnectionError as exc:
                    raise self._unavailable(exc) from exc
                text, usage, reported = self._read_stream(stream, on_text, started, model, role)
                # A stream cut before its usage chunk served no usage: nothing to record.
                usage = (
                    charged(usage, self._kept(chat, text))
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
            with metered(role):
                started = time.monotonic()
                try:
                    response = cast(
                        ChatCompletion,
                        self._send(
                            model, shape_messages(chat, schema, mode), mode, schema, stream=False
                        ),
                    )
                except openai.APIStatusError as exc:
                    if not rejects_format(exc, mode):
                        raise self._unavailable(exc) from exc
                    self._step_down(mode, exc)
                    continue
                except openai.APIConnectionError as exc:
                    raise self._unavailable(exc) from exc
                usage = usage_of(response, time.monotonic() - started, model, role)
                content = response.choices[0].message.content if response.choices else None
                usage = charged(usage, self._kept(chat, content or ""))
            self.usages.append(usage)
            logger.debug("%s answer (%s): %s", role, model, content)
            return content or "", usage

    def _kept(self, chat: list[dict[str, str]], answer: str) -> tuple[str | None, str | None]:
        """The prompt and response the record keeps of one call: of the messages as masked
        for sending (never the unmasked ones), cut to ``llm_transcript_max_chars``."""
        return transcript(mask_messages(chat), answer, self._settings.llm_transcript_max_chars)

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
            extra["response_format"] = response_format(mode, schema)
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

        return self._retries.retrying(mode)(call)

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
        self._mode = fallback_after(mode, exc, auto=self._auto, base_url=self.base_url)

    def _unavailable(self, exc: openai.APIError) -> LLMUnavailableError:
        """An actionable error for an endpoint failure (planner/llm_errors.py)."""
        return unavailable(exc, self.base_url, self._settings.llm_timeout_s)


def build_chat_model(settings: Settings) -> OpenAIChatModel:
    """The configured chat model.

    Raises:
        ConfigError: No endpoint configured; the message says how to point Planloop at
            OpenAI, vLLM, Ollama or a llama.cpp server.
    """
    return OpenAIChatModel(settings)
