// The LLM calls of a session: role, model, tokens, cost and latency of each, and for users
// whose role may read them (operators, admins) the prompt and response the record kept.
"use strict";

function llmTable(base, d) {
  if (!d.uses_llm) return [el("div", { class: "muted" }, "— (this session made no LLM call)")];
  const b = d.llm_budget;
  const head = el("div", {}, `${d.llm.calls} calls, tokens ${b.tokens}` +
    (b.max_tokens != null ? "/" + b.max_tokens : "") + `, cost $${Number(b.cost_usd).toFixed(4)}` +
    (b.max_cost_usd != null ? "/$" + b.max_cost_usd : ""));
  if (!d.llm_calls.length) return [head, el("div", { class: "muted" }, "(none)")];
  const viewer = el("div", { id: "transcript" });
  const rows = d.llm_calls.map((c) => el("tr", { "data-call": c.id },
    el("td", { class: "mono" }, clock(c.at)), el("td", {}, c.role), el("td", { class: "mono" }, c.model),
    el("td", {}, c.prompt_tokens), el("td", {}, c.completion_tokens),
    el("td", {}, "$" + Number(c.cost_usd).toFixed(5)), el("td", {}, c.latency_s.toFixed(3) + "s"),
    el("td", {}, c.step_id ? c.step_id + "#" + c.attempt : ""),
    el("td", {}, c.has_transcript && d.may_read_transcripts ?
      el("button", { "data-action": "transcript", onclick: () => showTranscript(base, c.id, viewer) },
        "prompt / response") : "")));
  return [head, el("table", {}, el("thead", {}, el("tr", {}, ...["time", "role", "model", "prompt",
    "completion", "cost", "latency", "step", ""].map((h) => el("th", {}, h)))), el("tbody", {}, ...rows)),
    d.may_read_transcripts ? viewer : el("div", { class: "muted" }, "prompts and responses: operators and admins only")];
}

async function showTranscript(base, id, viewer) {
  try {
    const t = await getJSON(base + "/llm/" + id);
    viewer.replaceChildren(el("h3", {}, `call ${t.id} (${t.role})`),
      el("div", { class: "columns" },
        el("div", {}, el("h3", {}, "Prompt"), el("pre", { class: "json", "data-prompt": "" }, t.prompt ?? "(not kept)")),
        el("div", {}, el("h3", {}, "Response"), el("pre", { class: "json", "data-response": "" }, t.response ?? "(not kept)"))));
  } catch (exc) {
    viewer.replaceChildren(el("span", { class: "error" }, exc.message));
  }
}
