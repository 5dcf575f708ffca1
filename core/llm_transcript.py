"""An LLM call's prompt and response as the SQL record keeps them: masked (core/masking.py),
then cut to ``llm_transcript_max_chars`` with a marker saying how much was left out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from planloop.core.masking import mask_text


def clipped(text: str, max_chars: int) -> str | None:
    """``text`` masked and cut to ``max_chars`` (None when transcripts are off: 0)."""
    if max_chars <= 0:
        return None
    shown = mask_text(text)
    if len(shown) <= max_chars:
        return shown
    return shown[:max_chars] + f"\n… [{len(shown) - max_chars} more characters not kept]"


def prompt_text(messages: Iterable[Mapping[str, str]]) -> str:
    """A chat as plain text: one ``[role]`` header per message, then its content."""
    return "\n\n".join(f"[{m.get('role', '?')}]\n{m.get('content', '')}" for m in messages)


def transcript(
    messages: Iterable[Mapping[str, str]], response: str, max_chars: int
) -> tuple[str | None, str | None]:
    """The prompt and the response to keep for one call."""
    return clipped(prompt_text(messages), max_chars), clipped(response, max_chars)
