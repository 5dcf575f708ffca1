"""Retries of one chat request: which errors are worth another try, and how long to wait.

Retries are the client's own (tenacity), not the SDK's: the SDK would also retry llama.cpp's
500 that rejects a response_format, which must step down instead (planner/structured_output.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import openai
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from planloop.planner.structured_output import StructuredMode, rejects_format

logger = logging.getLogger(__name__)

_TRANSIENT_STATUSES = frozenset({408, 409, 429})


@dataclass(frozen=True)
class RetryPolicy:
    """How one request to ``base_url`` is tried again.

    Attributes:
        max_retries: Tries after the first (``llm_max_retries``).
        backoff_s: First delay in seconds, doubled per retry; a server's ``Retry-After``
            takes precedence.
        backoff_max_s: Longest delay between two tries, seconds.
        base_url: The endpoint, named in the log lines.
    """

    max_retries: int
    backoff_s: float
    backoff_max_s: float
    base_url: str

    def retrying(self, mode: StructuredMode) -> Retrying:
        """Retries of one request sent with ``mode``: transient errors, with back-off."""
        return Retrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=self.wait,
            retry=retry_if_exception(lambda exc: is_transient(exc, mode)),
            before_sleep=self.log_retry,
            reraise=True,
        )

    def wait(self, state: RetryCallState) -> float:
        """Seconds before the next try: the server's Retry-After, else exponential."""
        exc = state.outcome.exception() if state.outcome else None
        hinted = retry_after_s(exc)
        if hinted is None:
            hinted = self.backoff_s * 2 ** (state.attempt_number - 1)
        return max(0.0, min(hinted, self.backoff_max_s))

    def log_retry(self, state: RetryCallState) -> None:
        """One warning per failed try that will be tried again."""
        exc = state.outcome.exception() if state.outcome else None
        logger.warning(
            "LLM call to %s failed (try %d of %d): %s",
            self.base_url,
            state.attempt_number,
            self.max_retries + 1,
            exc,
        )


def is_transient(exc: BaseException, mode: StructuredMode) -> bool:
    """Worth another try: lost connection, timeout, 408/409/429, or a 5xx that is not a
    rejection of the response_format."""
    if isinstance(exc, openai.APIConnectionError):
        return True
    if not isinstance(exc, openai.APIStatusError) or rejects_format(exc, mode):
        return False
    return exc.status_code in _TRANSIENT_STATUSES or exc.status_code >= 500


def retry_after_s(exc: BaseException | None) -> float | None:
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
