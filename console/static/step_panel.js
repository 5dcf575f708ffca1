// The step panel: what one step was given (params as written and as resolved), what it gave
// back (a preview with its size, the whole value on demand), each attempt with its worker
// and times, the error with its kind, the idempotency key and the effects the ledger
// recorded, and the compensation when one ran. Read from /api/sessions/{sid}/steps/{id}.
"use strict";

function jsonBlock(value, attrs) {
  return el("pre", Object.assign({ class: "json" }, attrs || {}), JSON.stringify(value, null, 2));
}

function sizeText(bytes) {
  if (bytes >= 1048576) return (bytes / 1048576).toFixed(1) + " MB";
  if (bytes >= 1024) return (bytes / 1024).toFixed(1) + " kB";
  return bytes + " B";
}

function outputBlock(output) {
  if (!output) return el("div", { class: "muted", "data-output": "none" }, "(no output)");
  const head = el("div", {}, `${sizeText(output.bytes)} · stored as `,
    el("code", {}, output.ref.slice(0, 12) + "…"));
  if (output.complete) return el("div", { "data-output": "complete" }, head, jsonBlock(output.value));
  const whole = el("div");
  const button = el("button", { "data-action": "show-output", onclick: async () => {
    button.disabled = true;
    try {
      const answer = await getJSON(output.url);
      whole.replaceChildren(jsonBlock(answer.output, { "data-output-full": "" }));
    } catch (exc) {
      whole.replaceChildren(el("span", { class: "error" }, "cannot read the output: " + exc.message));
    }
  } }, "show all " + sizeText(output.bytes));
  return el("div", { "data-output": "preview" }, head, el("pre", { class: "json" }, output.preview + " …"),
    button, whole);
}

function attemptsTable(attempts) {
  if (!attempts.length) return el("div", { class: "muted" }, "(not run yet)");
  return el("table", { class: "attempts" },
    el("thead", {}, el("tr", {}, ...["#", "status", "worker", "queued", "start", "end", "duration",
      "error"].map((h) => el("th", {}, h)))),
    el("tbody", {}, ...attempts.map((a) => el("tr", { "data-attempt": a.attempt },
      el("td", {}, a.attempt), el("td", {}, badge(a.status)), el("td", { class: "mono" }, a.worker || ""),
      el("td", { class: "mono" }, clock(a.dispatched_at)), el("td", { class: "mono" }, clock(a.started_at)),
      el("td", { class: "mono" }, clock(a.finished_at)),
      el("td", {}, a.duration_s == null ? "" : a.duration_s.toFixed(3) + "s"),
      el("td", {}, a.error_kind ? el("span", { class: "kind" }, a.error_kind) : "", " ", a.error || "")))));
}

function effectsBlock(detail) {
  const rows = detail.effects.map((e) => el("tr", {},
    el("td", { class: "mono" }, e.idempotency_key), el("td", {}, e.attempt), el("td", { class: "mono" }, e.tool),
    el("td", { class: "mono" }, clock(e.at)), el("td", {}, jsonBlock(e.receipt))));
  return el("div", {},
    el("div", {}, "idempotency key ", el("code", { "data-key": "" }, detail.idempotency_key)),
    rows.length ? el("table", { class: "effects" }, el("thead", {}, el("tr", {},
      ...["key", "attempt", "tool", "at", "receipt"].map((h) => el("th", {}, h)))), el("tbody", {}, ...rows)) :
      el("div", { class: "muted" }, "(no effects recorded: not a write, or not run)"));
}

function compensationBlock(detail) {
  if (!detail.compensate && !detail.compensations.length) return null;
  const ran = detail.compensations.map((c) => el("div", { class: "compensation", "data-compensation": c.status },
    `compensated by ${c.tool}: `, badge(c.status), c.error ? " " + c.error : ""));
  return el("div", {}, el("h3", {}, "Compensation"),
    detail.compensate ? el("div", {}, "undone by ", el("code", {}, detail.compensate), " if the session fails") : null,
    ...(ran.length ? ran : [el("div", { class: "muted" }, "(no compensation ran)")]));
}

function renderStepPanel(box, detail) {
  const where = detail.in_latest ? "" : ` · dropped after plan v${detail.version}`;
  box.replaceChildren(...[
    el("div", { class: "step-head" }, badge(detail.status), " ", el("code", {}, detail.tool),
      detail.title ? " · " + detail.title : "", where, detail.note ? " · " + detail.note : ""),
    detail.error ? el("div", { class: "error", "data-error-kind": detail.error_kind },
      el("span", { class: "kind" }, detail.error_kind || "error"), " ", detail.error) : null,
    el("div", { class: "columns" },
      el("div", {}, el("h3", {}, "Params (as written)"), jsonBlock(detail.params)),
      el("div", { "data-resolved": "" }, el("h3", {}, "Params (resolved)"),
        detail.unresolved ? el("div", { class: "muted" }, detail.unresolved) : jsonBlock(detail.resolved_params)),
      el("div", { "data-output-box": "" }, el("h3", {}, "Output"), outputBlock(detail.output))),
    el("h3", {}, "Attempts"), attemptsTable(detail.attempts),
    el("h3", {}, "Effects"), effectsBlock(detail),
    compensationBlock(detail)].filter((part) => part != null));
}

async function openStep(base, id) {
  const panel = document.getElementById("step-panel");
  panel.hidden = false;
  panel.dataset.step = id;
  document.getElementById("step-name").textContent = id;
  const box = document.getElementById("step-detail");
  try {
    renderStepPanel(box, await getJSON(base + "/steps/" + encodeURIComponent(id)));
    box.dataset.shown = id;  // what the panel holds now (a script or a test waits on it)
  } catch (exc) {
    box.replaceChildren(el("span", { class: "error" }, "cannot load the step: " + exc.message));
  }
}
