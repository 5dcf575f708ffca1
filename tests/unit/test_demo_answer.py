"""The demo's e-commerce plan ends with stock and pricing advice when an LLM is configured."""

from __future__ import annotations

from pathlib import Path

from planloop.config.settings import Settings
from planloop.producer.up import DEMO_PLAN, demo_options


def test_with_an_llm_the_demo_asks_for_stock_and_pricing_advice() -> None:
    options = demo_options(Settings(llm_base_url="http://127.0.0.1:9/v1"), None)

    assert options is not None
    assert options.answer_schema is not None
    assert options.answer_schema["required"] == ["stock_advice", "pricing_advice"]
    assert demo_options(Settings(llm_base_url="http://x/v1"), DEMO_PLAN) is not None


def test_without_an_llm_or_with_another_plan_the_demo_is_as_before(tmp_path: Path) -> None:
    assert demo_options(Settings(llm_base_url=None), None) is None
    other = tmp_path / "plan.yaml"
    assert demo_options(Settings(llm_base_url="http://x/v1"), other) is None
