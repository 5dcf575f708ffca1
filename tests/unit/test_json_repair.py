"""Tolerant JSON extraction from model answers."""

from __future__ import annotations

import pytest

from planloop.core.errors import LLMResponseError
from planloop.planner.json_repair import extract_json, strip_trailing_commas


def test_plain_json_object() -> None:
    assert extract_json('{"a": 1, "b": [1, 2]}') == {"a": 1, "b": [1, 2]}


def test_top_level_array() -> None:
    assert extract_json("  [1, 2, 3]\n") == [1, 2, 3]


def test_fenced_json_block_with_prose_around() -> None:
    text = 'Here is the plan:\n```json\n{"goal": "g", "steps": []}\n```\nHope this helps!'
    assert extract_json(text) == {"goal": "g", "steps": []}


def test_unlabelled_fence() -> None:
    assert extract_json('```\n{"x": true}\n```') == {"x": True}


def test_first_fence_that_parses_wins() -> None:
    text = "```python\nprint('hi')\n```\nthen\n```json\n{\"ok\": 1}\n```"
    assert extract_json(text) == {"ok": 1}


def test_prose_before_and_after_without_fence() -> None:
    text = 'Sure! The decision is {"action": "CONTINUE", "confidence": 0.9}. Done.'
    assert extract_json(text) == {"action": "CONTINUE", "confidence": 0.9}


def test_trailing_commas_are_dropped() -> None:
    text = '{"steps": [{"id": "a",}, {"id": "b"},],}'
    assert extract_json(text) == {"steps": [{"id": "a"}, {"id": "b"}]}


def test_commas_inside_strings_are_kept() -> None:
    assert strip_trailing_commas('{"s": "a,}", "t": [1,]}') == '{"s": "a,}", "t": [1]}'


def test_braces_and_escaped_quotes_inside_strings() -> None:
    text = 'Answer: {"instruction": "use {{orders.output.total}} and \\"}\\" here", "n": 2} ok'
    assert extract_json(text) == {
        "instruction": 'use {{orders.output.total}} and "}" here',
        "n": 2,
    }


def test_stray_brackets_in_prose_before_the_json() -> None:
    text = 'See [note] and {this}. Result: {"a": [1, {"b": 2}]}'
    assert extract_json(text) == {"a": [1, {"b": 2}]}


def test_nested_object_is_taken_whole_not_its_inner_part() -> None:
    assert extract_json('x {"outer": {"inner": 1}} y') == {"outer": {"inner": 1}}


def test_garbage_raises_with_the_raw_text() -> None:
    with pytest.raises(LLMResponseError, match="no JSON object or array") as info:
        extract_json("I cannot help with that.")
    assert info.value.raw == "I cannot help with that."


def test_broken_json_names_the_decode_error() -> None:
    with pytest.raises(LLMResponseError, match=r"does not parse: .*line 1 column"):
        extract_json('{"a": 1 "b": 2}')


def test_scalar_is_not_accepted() -> None:
    with pytest.raises(LLMResponseError):
        extract_json("42")


def test_unbalanced_object_raises() -> None:
    with pytest.raises(LLMResponseError):
        extract_json('{"a": [1, 2}')
