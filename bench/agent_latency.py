"""Answer latency of plan-and-execute (Planloop) vs a sequential ReAct loop, LLMCompiler style.

The same multi-hop questions (bench/qa_questions.py) go through:

(a) Planloop on a real stack (Redis, one supervisor, one worker): the goal is submitted, the
    supervisor's LLM planner writes the whole plan in one terse reply (an array per step,
    planner/compact_plan.py), the lookups run as a DAG (independent ones in parallel), and
    the session's own answer (the critic's, with its verdict, on a round that looks complete;
    else the summarizer's) is the answer; only a session without one gets a joiner call
    (role ``summarizer``) from the bench;
(b) a ReAct loop in this process: one model call per Thought/Action, each lookup run after
    the previous one, then a final-answer call.

Both talk to one scripted OpenAI-compatible server (bench/token_llm.py) that sleeps
200 ms per call plus 20 ms per output token (cl100k_base tokens), and both run the same
``qa.*`` tools (workers/toolsets/qa.py, fixed latencies 0.2-1.0 s). Questions run one at a
time, alternating (a) and (b), so machine load hits both alike.

Run from the repo root: ``python bench/agent_latency.py [--questions N] [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also runnable as a script

import openai
from pydantic import SecretStr

from bench.common import bench_env, console, planloop_stack, print_table
from bench.qa_questions import Question, by_tag, questions
from bench.token_llm import CALL_S, TOKEN_S, Meter, TokenLatencyLLM
from planloop.core.models import SessionOptions, SessionStatus
from planloop.core.tools import ToolContext, ToolRegistry, load_tools
from planloop.planner.prompting import tool_catalogue
from planloop.producer.client import Producer
from planloop.workers.toolsets import BENCH_TOOLS
from planloop.workers.toolsets.qa import QA_TOOLS, RELATIONS

TARGET = 1.8  # LLMCompiler: 1.8x (HotpotQA) to 3.7x (Movie Recommendation) over ReAct
MAX_REACT_TURNS = 12

REACT_SYSTEM = """ROLE: react
You answer questions by calling tools, one at a time. Reply in exactly this format:
Thought: what you need next
Action: the tool name
Action Input: the tool's params as one JSON object
After each action you receive "Observation: <tool output>". When you know the answer, reply:
Thought: why you can answer
Final Answer: the answer"""

JOINER_SYSTEM = """ROLE: summarizer
Answer the goal from the step outputs. Reply with one JSON object: {"text": "..."}."""

_ACTION = re.compile(r"^Action:\s*(\S+)\s*$", re.MULTILINE)
_ACTION_INPUT = re.compile(r"^Action Input:\s*(\{.*\})\s*$", re.MULTILINE)
_FINAL = re.compile(r"^Final Answer:\s*(.+)$", re.MULTILINE)


@dataclass(frozen=True)
class Outcome:
    """One question through one agent: wall time, model use, the answer."""

    wall_s: float
    llm: Meter
    answer: str
    # Planloop only, seconds after submit: first step dispatched, last step finished,
    # session ended (its finished_at)
    timeline: tuple[float, float, float] | None = None


def critical_path_s(question: Question) -> float:
    """The longest chain of lookup latencies: the least time any executor spends in tools."""
    finish: dict[str, float] = {}
    for lookup in question.ordered():
        before = finish[lookup.of] if lookup.of else 0.0
        finish[lookup.id] = before + RELATIONS[lookup.relation].latency_s
    return max(finish.values())


def tools_total_s(question: Question) -> float:
    return sum(RELATIONS[x.relation].latency_s for x in question.lookups)


# --- (a) Planloop ------------------------------------------------------------------------
def run_planloop(
    producer: Producer,
    llm: TokenLatencyLLM,
    client: openai.OpenAI,
    q: Question,
    options: SessionOptions | None = None,
) -> Outcome:
    """Submit the goal, wait for the session, then the joiner call (unless the session made
    one itself)."""
    before = llm.snapshot()
    started, submitted = time.monotonic(), time.time()
    sid = producer.submit_goal(q.tagged, tools=["qa"], options=options)
    record = producer.wait(sid, timeout_s=120, poll_s=0.01)
    if record.status != SessionStatus.COMPLETED:
        raise SystemExit(
            f"{q.qid}: session {sid} ended {record.status.value}: {record.error!r} "
            f"(logs under the bench's temp directory)"
        )
    answer = str((record.answer or {}).get("text", ""))
    answered = time.monotonic()  # the session's own answer is read: the question is done
    # The bench's checks of the step outputs are not part of answering (nor are ReAct's).
    states = producer.state.steps(sid, [x.id for x in q.lookups])
    outputs = {step_id: producer.state.output(st.output_ref) for step_id, st in states.items()}
    values = q.values()
    for step_id, output in outputs.items():
        if not output or output.get("value") != values[step_id]:
            raise SystemExit(f"{q.qid}: step {step_id} answered {output!r}, not {values[step_id]}")
    if not answer:
        reply = chat(
            client,
            [
                {"role": "system", "content": JOINER_SYSTEM},
                {
                    "role": "user",
                    "content": f"Goal: {q.tagged}\nStep outputs: {json.dumps(outputs)}",
                },
            ],
        )
        answer = str(json.loads(reply)["text"]).removeprefix("Final Answer: ")
        answered = time.monotonic()
    wall = answered - started
    timeline = (
        min(st.dispatched_at for st in states.values()) - submitted,
        max(st.finished_at for st in states.values()) - submitted,
        record.finished_at - submitted,
    )
    return Outcome(wall, llm.snapshot().minus(before), answer or "(in the session)", timeline)


# --- (b) sequential ReAct ----------------------------------------------------------------
def run_react(
    tools: ToolRegistry, llm: TokenLatencyLLM, client: openai.OpenAI, q: Question
) -> Outcome:
    """Thought -> Action -> Observation, one tool call at a time, until a Final Answer."""
    before = llm.snapshot()
    started = time.monotonic()
    catalogue = tool_catalogue(tools.subset(["qa"]))
    messages = [
        {"role": "system", "content": REACT_SYSTEM},
        {"role": "user", "content": f"## Tools\n{catalogue}\n\n## Question\n{q.tagged}"},
    ]
    for turn in range(MAX_REACT_TURNS):
        reply = chat(client, messages)
        messages.append({"role": "assistant", "content": reply})
        final = _FINAL.search(reply)
        if final:
            return Outcome(time.monotonic() - started, llm.snapshot().minus(before), final[1])
        action, action_input = _ACTION.search(reply), _ACTION_INPUT.search(reply)
        if action is None or action_input is None:
            raise SystemExit(f"{q.qid}: ReAct reply has no action: {reply!r}")
        ctx = ToolContext(
            session_id=f"react-{q.qid}",
            step_id=f"turn{turn}",
            attempt=1,
            idempotency_key=f"react-{q.qid}-{turn}",
        )
        output = tools.get(action[1]).run(json.loads(action_input[1]), ctx)
        messages.append({"role": "user", "content": f"Observation: {json.dumps(output)}"})
    raise SystemExit(f"{q.qid}: no final answer after {MAX_REACT_TURNS} ReAct turns")


def chat(client: openai.OpenAI, messages: list[dict[str, str]]) -> str:
    response = client.chat.completions.create(
        model="bench-model",
        messages=messages,  # type: ignore[arg-type]
    )
    return response.choices[0].message.content or ""


# --- the report --------------------------------------------------------------------------
def row(q: Question, ours: Outcome, react: Outcome) -> list[str]:
    return [
        q.qid,
        str(len(q.lookups)),
        f"{critical_path_s(q):.1f}/{tools_total_s(q):.1f}",
        f"{ours.wall_s:.2f}",
        f"{ours.llm.calls}",
        f"{ours.llm.completion_tokens}/{ours.llm.prompt_tokens}",
        f"{react.wall_s:.2f}",
        f"{react.llm.calls}",
        f"{react.llm.completion_tokens}/{react.llm.prompt_tokens}",
        f"{react.wall_s / ours.wall_s:.2f}x",
    ]


def mean_tokens(outcomes: list[Outcome]) -> str:
    """Mean output/prompt tokens per question."""
    out = sum(o.llm.completion_tokens for o in outcomes) / len(outcomes)
    prompt = sum(o.llm.prompt_tokens for o in outcomes) / len(outcomes)
    return f"{out:.0f}/{prompt:.0f}"


def overhead_s(q: Question, ours: Outcome) -> float:
    """Planloop's wall time beyond the model's sleeps and the lookups' critical path."""
    return ours.wall_s - ours.llm.sleep_s - critical_path_s(q)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--questions", type=int, default=21, help="How many questions (>= 1).")
    parser.add_argument("--quick", action="store_true", help="7 questions: one per template.")
    parser.add_argument(
        "--call-ms", type=float, default=CALL_S * 1000, help="Model latency per call, ms."
    )
    parser.add_argument(
        "--token-ms", type=float, default=TOKEN_S * 1000, help="Model latency per output token, ms."
    )
    parser.add_argument(
        "--no-stream",
        action="store_true",
        help="Planloop waits for the whole plan reply (PLANLOOP_LLM_STREAM_PLANS=false).",
    )
    parser.add_argument(
        "--mode",
        choices=("plan", "auto"),
        default="plan",
        help="Planloop's submit mode; auto asks the router first (one more call).",
    )
    args = parser.parse_args(argv)
    call_s, token_s = args.call_ms / 1000, args.token_ms / 1000
    qs = questions(7 if args.quick else max(1, args.questions))
    warmup = questions(len(qs) + 1)[-1]  # not measured: worker start-up, imports
    tools = load_tools([QA_TOOLS])
    load_before = os.getloadavg()
    console.print(
        f"{len(qs)} questions; model: {call_s * 1000:g} ms/call + {token_s * 1000:g} ms per "
        f"output token (cl100k_base); plans {'not ' if args.no_stream else ''}streamed; "
        f"mode {args.mode}; load average {load_before[0]:.2f} ({os.cpu_count()} CPUs)"
    )
    pairs: list[tuple[Question, Outcome, Outcome]] = []
    with TokenLatencyLLM(by_tag([*qs, warmup]), call_s, token_s) as llm:
        client = openai.OpenAI(base_url=llm.base_url, api_key="bench", max_retries=0)
        with (
            bench_env(
                "agent",
                tool_modules=[BENCH_TOOLS, QA_TOOLS],
                llm_base_url=llm.base_url,
                llm_api_key=SecretStr("bench"),
                llm_max_retries=0,
                llm_stream_plans=not args.no_stream,
            ) as bench,
            planloop_stack(bench) as (_, producer),
        ):
            options = SessionOptions(mode=args.mode)
            run_planloop(producer, llm, client, warmup, options)
            for q in qs:
                ours = run_planloop(producer, llm, client, q, options)
                react = run_react(tools, llm, client, q)
                if react.answer != q.answer():
                    raise SystemExit(f"{q.qid}: ReAct answered {react.answer!r}")
                pairs.append((q, ours, react))
                console.print(f"  {q.qid} planloop {ours.wall_s:.2f}s react {react.wall_s:.2f}s")
    load_after = os.getloadavg()
    rows = [row(q, ours, react) for q, ours, react in pairs]
    total_ours = sum(o.wall_s for _, o, _ in pairs)
    total_react = sum(r.wall_s for _, _, r in pairs)

    ours_all = [o for _, o, _ in pairs]
    react_all = [r for _, _, r in pairs]
    rows.append(
        [
            "mean",
            "",
            "",
            f"{total_ours / len(pairs):.2f}",
            f"{sum(o.llm.calls for _, o, _ in pairs) / len(pairs):.1f}",
            mean_tokens(ours_all),
            f"{total_react / len(pairs):.2f}",
            f"{sum(r.llm.calls for _, _, r in pairs) / len(pairs):.1f}",
            mean_tokens(react_all),
            f"{total_react / total_ours:.2f}x",
        ]
    )
    print_table(
        "Per question: wall s, LLM calls, tokens out/prompt (tools: critical path/sum s)",
        [
            "q",
            "lookups",
            "tools s",
            "planloop s",
            "calls",
            "tok out/in",
            "react s",
            "calls",
            "tok out/in",
            "speedup",
        ],
        rows,
    )
    n = len(pairs)
    console.print(
        f"Mean per question: model time planloop {sum(o.llm.sleep_s for o in ours_all) / n:.2f}s"
        f" vs react {sum(r.llm.sleep_s for r in react_all) / n:.2f}s; tool time planloop "
        f"{sum(critical_path_s(q) for q, _, _ in pairs) / n:.2f}s (critical path) vs react "
        f"{sum(tools_total_s(q) for q, _, _ in pairs) / n:.2f}s (sum)."
    )
    timelines = [o.timeline for o in ours_all if o.timeline is not None]
    if timelines:
        first, tools_end, ended = (sum(t[i] for t in timelines) / len(timelines) for i in range(3))
        console.print(
            f"Planloop timeline, mean seconds after submit: first step dispatched {first:.2f}, "
            f"last step finished {tools_end:.2f}, session ended {ended:.2f}, answer read "
            f"{sum(o.wall_s for o in ours_all) / n:.2f}."
        )
    overheads = sorted(overhead_s(q, o) for q, o, _ in pairs)
    console.print(
        f"Planloop orchestration overhead per question (wall - model sleeps - tool critical "
        f"path): median {overheads[len(overheads) // 2] * 1000:.0f} ms, "
        f"max {overheads[-1] * 1000:.0f} ms. Load average {load_before[0]:.2f} -> "
        f"{load_after[0]:.2f} on {os.cpu_count()} CPUs."
    )
    print(
        f"speedup (ReAct wall / Planloop wall, {len(pairs)} questions): "
        f"{total_react / total_ours:.2f}x (planloop {total_ours:.1f}s, react "
        f"{total_react:.1f}s; target >= {TARGET}x, LLMCompiler 1.8x-3.7x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
