"""What an endpoint's error means to the chat client, and the error a user reads for it."""

from __future__ import annotations

import openai

from planloop.core.errors import LLMUnavailableError

# Hints for statuses whose cause is usually the configuration, not the server.
_HINTS = {
    401: "; check PLANLOOP_LLM_API_KEY",
    403: "; check PLANLOOP_LLM_API_KEY",
    404: "; check PLANLOOP_LLM_BASE_URL (it usually ends in /v1) and the model name",
}


def unavailable(exc: openai.APIError, base_url: str, timeout_s: float) -> LLMUnavailableError:
    """An actionable error for an endpoint failure (``timeout_s``: the client's timeout)."""
    if isinstance(exc, openai.APIStatusError):
        status: int | None = exc.status_code
        hint = _HINTS.get(exc.status_code, "")
        what = f"answered HTTP {exc.status_code}: {brief(exc)}{hint}"
    else:
        status, what = None, f"could not be reached: {exc}; is the server running?"
    if isinstance(exc, openai.APITimeoutError):
        what = f"did not answer within {timeout_s:g}s"
    return LLMUnavailableError(
        f"the LLM endpoint {base_url} {what}", base_url=base_url, status=status
    )


def rejects_streaming(exc: openai.APIStatusError) -> bool:
    """Whether ``exc`` is the server refusing ``stream`` or ``stream_options``."""
    if exc.status_code not in (400, 422):
        return False
    return "stream" in f"{exc.message} {exc.body}".lower()


def brief(exc: openai.APIStatusError) -> str:
    """The server's error message, shortened for a user-facing line."""
    body = exc.body
    message = body.get("message") if isinstance(body, dict) else None
    text = str(message or exc.message)
    return text if len(text) <= 300 else text[:297] + "..."
