"""The console's DAG layout and its guard (basic auth, same-origin actions): no services."""

from __future__ import annotations

import base64

from starlette.requests import Request

from planloop.console.guard import basic_credentials, same_origin
from planloop.console.layout import NODE_H, NODE_W, layers_of, layout
from planloop.planner.plan import parse_plan

PLAN = parse_plan(
    """
steps:
  - {id: a, tool: bench.echo, params: {value: 1}}
  - {id: z, tool: bench.echo, params: {value: 1}}
  - {id: b, tool: bench.echo, params: {value: 2}, dependencies: [a]}
  - {id: c, tool: bench.echo, params: {value: 3}, dependencies: [z]}
  - {id: d, tool: bench.echo, params: {value: 4}, dependencies: [b, c, a]}
"""
)


def test_a_step_sits_one_layer_right_of_its_deepest_dependency() -> None:
    assert layers_of(PLAN) == {"a": 0, "z": 0, "b": 1, "c": 1, "d": 2}


def test_boxes_do_not_overlap_and_edges_follow_the_dependencies() -> None:
    drawn = layout(PLAN)
    boxes = {n["id"]: (n["x"], n["y"]) for n in drawn["nodes"]}
    assert len(set(boxes.values())) == len(boxes)
    for x, y in boxes.values():
        assert x + NODE_W <= drawn["width"]
        assert y + NODE_H <= drawn["height"]
    assert sorted(map(tuple, drawn["edges"])) == [
        ("a", "b"),
        ("a", "d"),
        ("b", "d"),
        ("c", "d"),
        ("z", "c"),
    ]
    # b under a's row, c under z's: the barycentre keeps the two chains straight
    assert boxes["b"][1] == boxes["a"][1]
    assert boxes["c"][1] == boxes["z"][1]


def basic(value: str) -> str:
    return "Basic " + base64.b64encode(value.encode()).decode()


def test_basic_credentials_are_read_from_the_header_only_when_well_formed() -> None:
    assert basic_credentials(basic("ada:pa:ss")) == ("ada", "pa:ss")
    assert basic_credentials(basic("no-colon")) is None
    assert basic_credentials("Basic !!!not-base64") is None
    assert basic_credentials("Bearer x") is None
    assert basic_credentials(None) is None


def request(headers: dict[str, str]) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    scope = {"type": "http", "method": "POST", "path": "/", "headers": raw, "scheme": "http"}
    scope["server"] = ("127.0.0.1", 8765)
    return Request(scope)


def test_an_action_from_another_origin_is_refused() -> None:
    assert same_origin(request({"host": "127.0.0.1:8765", "origin": "http://127.0.0.1:8765"}))
    assert same_origin(request({"host": "127.0.0.1:8765"}))  # a script: no Origin
    assert not same_origin(request({"host": "127.0.0.1:8765", "origin": "http://evil.test"}))
    assert not same_origin(request({"host": "127.0.0.1:8765", "origin": "null"}))
    assert not same_origin(request({"host": "127.0.0.1:8765", "origin": "https://127.0.0.1:8765"}))
