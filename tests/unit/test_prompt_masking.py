"""No prompt reaches a model unmasked: every role, every template, both ways of asking.

The guard has two halves. The LLM client masks every message at its one send point
(``OpenAIChatModel._send``); these tests send each template filled with credentials, and
each role, through the real client and read the HTTP bodies it sent (an httpx2 transport in
place of the network). And the source is scanned: a request to a model made anywhere else,
or a send point that stops calling the masker, fails here.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from pathlib import Path
from string import Template

import httpx2
import pytest
from openai import OpenAI
from pydantic import BaseModel, SecretStr

from planloop.config.settings import Settings
from planloop.planner.embedding import OpenAIEmbedder
from planloop.planner.llm import Role
from planloop.planner.openai_chat import OpenAIChatModel
from planloop.planner.prompting import load_template, render_prompt

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("config", "core", "planner", "workers", "supervisor", "producer", "console", "planloop")
SECRETS = ("hunter2", "sk-abcdef0123456789XYZ", "AKIAIOSFODNN7EXAMPLE", "s3cr3t-pw")
HOSTILE = (
    "restock the shelf; db password=hunter2 and header Bearer sk-abcdef0123456789XYZ, "
    "aws AKIAIOSFODNN7EXAMPLE, passwd is s3cr3t-pw"
)
TEMPLATES = sorted(p.stem for p in (ROOT / "planner" / "prompts").glob("*.md"))


class Answer(BaseModel):
    ok: bool


def recording_transport(bodies: list[dict[str, object]]) -> httpx2.MockTransport:
    def answer(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        bodies.append(body)
        if request.url.path.endswith("/embeddings"):
            data = [
                {"object": "embedding", "index": i, "embedding": [1.0, 0.0]}
                for i, _ in enumerate(body["input"])
            ]
            return httpx2.Response(200, json={"object": "list", "data": data, "model": "e"})
        return httpx2.Response(
            200,
            json={
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": '{"ok": true}'},
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            },
        )

    return httpx2.MockTransport(answer)


def llm_settings() -> Settings:
    return Settings(
        llm_base_url="http://llm.invalid/v1",
        llm_api_key=SecretStr("test"),
        llm_max_retries=0,
        llm_stream_plans=True,
    )


def recording_chat(bodies: list[dict[str, object]]) -> OpenAIChatModel:
    chat = OpenAIChatModel(llm_settings())
    chat._client = OpenAI(  # the network swapped for a transport that records the bodies
        base_url="http://llm.invalid/v1",
        api_key="test",
        max_retries=0,
        http_client=httpx2.Client(transport=recording_transport(bodies)),
    )
    return chat


def filled(name: str) -> list[dict[str, str]]:
    """Template ``name`` with every placeholder holding the hostile text."""
    system, user = load_template(name)
    names = set(system.get_identifiers()) | set(user.get_identifiers())
    return render_prompt(name, **dict.fromkeys(names, HOSTILE))


def sent_text(bodies: list[dict[str, object]]) -> str:
    return json.dumps(bodies)


ASKS: dict[str, Callable[[OpenAIChatModel, Role, list[dict[str, str]]], object]] = {
    "complete_json": lambda chat, role, messages: chat.complete_json(role, messages, Answer),
    "stream_text": lambda chat, role, messages: chat.stream_text(
        role, messages, Answer, lambda piece: None
    ),
}


@pytest.mark.parametrize("ask", sorted(ASKS))
@pytest.mark.parametrize("name", TEMPLATES)
def test_every_template_reaches_the_model_masked(name: str, ask: str) -> None:
    bodies: list[dict[str, object]] = []
    messages = filled(name)
    role_line = messages[0]["content"].splitlines()[0]
    role = Role(role_line.removeprefix("ROLE: ").strip())
    ASKS[ask](recording_chat(bodies), role, messages)
    assert bodies, "nothing was sent"
    text = sent_text(bodies)
    assert role_line in text  # the server still reads the role
    assert "restock the shelf" in text  # the goal is there, its credentials are not
    for secret in SECRETS:
        assert secret not in text, f"{name} ({ask}) sent {secret}"


@pytest.mark.parametrize("role", list(Role))
def test_every_role_reaches_the_model_masked(role: Role) -> None:
    bodies: list[dict[str, object]] = []
    messages = [
        {"role": "system", "content": f"ROLE: {role}"},
        {"role": "user", "content": HOSTILE},
    ]
    recording_chat(bodies).complete_json(role, messages, Answer)
    for secret in SECRETS:
        assert secret not in sent_text(bodies)


@pytest.mark.parametrize("name", TEMPLATES)
def test_the_kept_transcript_is_of_the_masked_messages(name: str) -> None:
    """What the SQL record keeps of a call for the console's prompt viewer."""
    prompt, response = recording_chat([])._kept(filled(name), f"answer: {HOSTILE}")
    assert prompt is not None
    assert response is not None
    assert "restock the shelf" in prompt
    assert "restock the shelf" in response
    for secret in SECRETS:
        assert secret not in prompt + response, f"{name} kept {secret}"


def test_embedded_texts_reach_the_model_masked() -> None:
    bodies: list[dict[str, object]] = []
    embedder = OpenAIEmbedder(llm_settings())
    embedder._client = OpenAI(
        base_url="http://llm.invalid/v1",
        api_key="test",
        max_retries=0,
        http_client=httpx2.Client(transport=recording_transport(bodies)),
    )
    assert embedder.embed([HOSTILE]) is not None
    assert bodies
    for secret in SECRETS:
        assert secret not in sent_text(bodies)


def calls_to_a_model(tree: ast.AST) -> list[ast.Call]:
    """``<x>.completions.create(...)`` and ``<x>.embeddings.create(...)`` calls."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "create"
            and isinstance(node.func.value, ast.Attribute)
            and node.func.value.attr in ("completions", "embeddings")
        ):
            found.append(node)
    return found


def sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_models_are_asked_only_at_the_masked_send_points() -> None:
    senders: dict[str, int] = {}
    for path in sources():
        tree = ast.parse(path.read_text(), str(path))
        imports_openai = any(
            (isinstance(n, ast.Import) and any(a.name.split(".")[0] == "openai" for a in n.names))
            or (isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "openai")
            for n in ast.walk(tree)
        )
        where = str(path.relative_to(ROOT))
        if imports_openai or calls_to_a_model(tree):
            senders[where] = len(calls_to_a_model(tree))
    # A new module that talks to a model must send through planner/openai_chat.py instead;
    # one that imports openai for its types only (planner/llm_stream.py reads chunks, the
    # client's retries and error reading look at its exceptions) sends nothing.
    assert {where: n for where, n in senders.items() if n} == {
        "planner/openai_chat.py": 1,
        "planner/embedding.py": 1,
    }


def function_named(tree: ast.AST, name: str) -> ast.FunctionDef:
    (found,) = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
    return found


def test_the_send_points_mask_what_they_send() -> None:
    llm = ast.parse((ROOT / "planner" / "openai_chat.py").read_text())
    send = function_named(llm, "_send")
    (call,) = calls_to_a_model(send)
    # the request's messages are the masked ones, and they come from mask_messages
    (messages,) = [k.value for k in call.keywords if k.arg == "messages"]
    assert "masked" in ast.unparse(messages)
    assert "masked = mask_messages(messages)" in ast.unparse(send)
    embedding = ast.parse((ROOT / "planner" / "embedding.py").read_text())
    (embed_call,) = calls_to_a_model(embedding)
    (given,) = [k.value for k in embed_call.keywords if k.arg == "input"]
    assert "mask_text" in ast.unparse(given)


def test_the_templates_all_have_placeholders_to_fill() -> None:
    # A template with nothing to fill would make the first test vacuous for it.
    for name in TEMPLATES:
        system, user = load_template(name)
        assert isinstance(user, Template)
        assert user.get_identifiers() or system.get_identifiers(), name
