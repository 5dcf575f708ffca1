// One session: the live DAG (server-sent events), plan versions and their diffs, the step
// panel, the timeline, decisions, LLM calls, the answer, and the actions a person takes.
"use strict";
const sid = decodeURIComponent(location.pathname.split("/").pop());
const base = "/api/sessions/" + encodeURIComponent(sid);
const page = { detail: null, steps: {}, status: "", awaiting: "", shown: 0, events: new Set(), timeline: null };
const $ = (id) => document.getElementById(id);

function ended() {
  return ["completed", "failed", "aborted", "cancelled"].includes(page.status);
}

function awaitingSteps() {
  return Object.entries(page.steps)
    .filter(([, s]) => s.note === "awaiting approval" && ["pending", "ready"].includes(s.status))
    .map(([id]) => id).sort();
}

async function act(name, body) {
  const out = $("action-result");
  try {
    await postJSON(base + "/" + name, body);
    out.className = "";
    out.textContent = name + " sent";
  } catch (exc) {
    out.className = "error";
    out.textContent = name + " refused: " + exc.message;
  }
}

// What changes a session's course asks first: a stray or tricked click must not approve,
// retry, skip or cancel anything (the browser's own dialog, which a page cannot restyle).
function confirmed(question, name, body) {
  if (confirm(question)) return act(name, body);
  const out = $("action-result");
  out.className = "";
  out.textContent = name + " not sent";
  return Promise.resolve();
}

function renderActions() {
  // after the end nothing can be sent: no disabled buttons or stale "sent" lines stay
  $("actions").hidden = ended();
  const box = $("approvals");
  const items = [];
  if (!ended()) {
    for (const step of awaitingSteps()) {
      items.push(el("span", { class: "approval", "data-approval": step },
        "step " + step + " waits for approval",
        el("button", { "data-action": "approve", "data-step": step,
          onclick: () => confirmed("Approve step " + step + "? It runs next.", "approve", { step }) },
          "Approve"),
        el("button", { "data-action": "reject", "data-step": step,
          onclick: () => confirmed("Reject step " + step + "? It is skipped.", "reject", { step }) },
          "Reject")));
    }
    if (page.awaiting === "approval") {
      items.push(el("span", { class: "approval", "data-approval": "budget" },
        "the re-plan budget is spent: ",
        ...["continue", "replan_remaining", "replan_full"].map((action) =>
          el("button", { "data-action": "approve", "data-choice": action,
            onclick: () => confirmed("Choose " + action.replace("_", " ") + " for this session?",
              "approve", { action }) }, action.replace("_", " "))),
        el("button", { "data-action": "reject",
          onclick: () => confirmed("Abort this session?", "reject", {}) }, "abort")));
    }
  }
  box.replaceChildren(...items);
}

function renderStatus() {
  $("status").textContent = page.status + (page.awaiting ? " (awaiting " + page.awaiting + ")" : "");
  $("status").className = "badge s-" + page.status;
  $("status").dataset.status = page.status;
}

function elapsedText(s) {
  if (s.status === "running" && s.started_at) return tickText(Math.max(0, serverNow() - s.started_at));
  return s.duration_s == null ? "" : s.duration_s.toFixed(2) + "s";
}

function stepRow(id, tool, s, ghost) {
  const buttons = [];
  if (!ghost && !ended() && ["failed", "interrupted"].includes(s.status)) {
    buttons.push(el("button", { "data-action": "retry", "data-step": id,
      onclick: () => confirmed("Retry step " + id + "?", "retry", { step: id }) }, "Retry"));
  }
  if (!ghost && !ended() && ["failed", "interrupted", "pending", "ready"].includes(s.status)) {
    buttons.push(el("button", { "data-action": "skip", "data-step": id,
      onclick: () => confirmed("Skip step " + id + "? It will not run.",
        "skip", { step: id }) }, "Skip"));
  }
  const duration = el("td", { class: "elapsed" }, elapsedText(s));
  if (s.status === "running") duration.dataset.running = "1";
  return el("tr", { "data-step": id, class: ghost ? "ghost" : "" },
    el("td", {}, el("a", { href: "#step-panel", onclick: () => openStep(base, id) }, id),
      ghost ? el("span", { class: "muted" }, ` (plan v${ghost.version}, dropped since)`) : ""),
    el("td", { class: "mono" }, tool), el("td", {}, badge(s.status)), el("td", {}, s.attempt), duration,
    el("td", { class: "mono" }, s.worker || ""),
    el("td", {}, s.error || s.note || ""), el("td", {}, ...buttons));
}

function renderSteps() {
  const version = page.detail.versions[page.detail.versions.length - 1];
  const body = $("steps").querySelector("tbody");
  if (!version) { body.replaceChildren(); return; }
  const rows = Object.keys(version.steps).map((id) =>
    stepRow(id, version.steps[id].tool, page.steps[id] || { status: "pending", attempt: 0 }, null));
  for (const ghost of version.ghosts) {
    rows.push(stepRow(ghost.id, ghost.tool, page.steps[ghost.id] || { status: ghost.status, attempt: 0 }, ghost));
  }
  body.replaceChildren(...rows);
}

// Every second: running steps' elapsed time, the session's, and the running timeline bars.
function tick() {
  for (const cell of document.querySelectorAll("#steps td.elapsed[data-running]")) {
    const id = cell.closest("tr").dataset.step;
    cell.textContent = elapsedText(page.steps[id] || {});
  }
  if (page.timeline) $("times").textContent = timesText(page.timeline, page.status);
  growTimeline($("timeline"));
}

function renderDag() {
  const versions = page.detail.versions;
  const version = versions[page.shown - 1];
  if (!version) return;
  drawDag($("dag"), version, page.steps, showStep);
  colourDag($("dag"), page.steps);
  const diff = $("diff");
  const parts = [version.reason ? version.reason + " " : ""];
  diff.replaceChildren(...parts,
    ...version.added.map((i) => el("span", { class: "added" }, " +" + i)),
    ...version.removed.map((i) => el("span", { class: "removed" }, " -" + i)),
    ...Object.entries(version.changed).map(([i, fields]) =>
      el("span", { class: "changed", title: fields.join(", ") + " changed" }, " ~" + i)),
    ...(version.ghosts.length ? [el("span", { class: "muted" },
      "  · greyed: steps an earlier version ran")] : []));
}

function showStep(id) {
  openStep(base, id);
}

function renderVersions() {
  const select = $("version");
  select.replaceChildren(...page.detail.versions.map((v) =>
    el("option", { value: v.version }, "v" + v.version)));
  select.value = String(page.shown);
}

function eventRow(ev) {
  return el("tr", { class: "sev-" + ev.severity, "data-event": ev.id },
    el("td", { class: "mono" }, clock(ev.occurred_at)), el("td", {}, ev.type),
    el("td", {}, ev.severity), el("td", {}, ev.step_id ? ev.step_id + "#" + ev.attempt : ""),
    el("td", { class: "actor" }, ev.actor || ""), el("td", {}, ev.description));
}

function addEvents(events) {
  const body = $("events").querySelector("tbody");
  for (const ev of events) {
    if (page.events.has(ev.id)) continue;
    page.events.add(ev.id);
    body.append(eventRow(ev));
  }
}

function renderHistory() {
  const d = page.detail;
  $("decisions").replaceChildren(...(d.decisions.length ? d.decisions.map((x) =>
    el("div", { class: "decision" },
      el("strong", {}, x.action), ` (${x.source}` +
      (x.confidence != null ? `, confidence ${x.confidence}` : "") +
      (x.prompt_tokens + x.completion_tokens ? `, ${x.prompt_tokens}+${x.completion_tokens} tokens` : "") +
      ")\n" + x.reasoning)) : ["(none: nothing needed deciding)"]));
  $("llm").replaceChildren(...llmTable(base, d));
  const answer = d.answer;
  // an explicit plan without an LLM has no answer to wait for: no section for it
  $("answer-section").hidden = !answer && !d.uses_llm;
  $("answer").textContent = answer ? answer.text + (answer.data != null ?
    "\n\ndata: " + JSON.stringify(answer.data, null, 2) : "") :
    (d.report ? "(no answer)" : "(none yet)");
  const s = d.session;
  $("summary").textContent = `goal: ${s.goal || "-"}  ·  plan v${s.plan_version}, ` +
    `${s.replans} re-plans  ·  owner ${s.owner || "-"} (epoch ${s.epoch})` +
    (s.error ? "  ·  " + s.error : "");
}

async function load(followNewest) {
  const detail = await getJSON(base);
  const latest = detail.versions.length;
  page.detail = detail;
  // a reply that left Redis before the stream's latest change must not undo it
  const rank = (st) => ({ pending: 0, ready: 1, running: 2 })[st] ?? 3;
  for (const [id, s] of Object.entries(detail.steps)) {
    const mine = page.steps[id];
    if (!mine || s.attempt > mine.attempt ||
        (s.attempt === mine.attempt && rank(s.status) >= rank(mine.status))) page.steps[id] = s;
  }
  page.status = detail.session.status;
  page.awaiting = detail.session.awaiting || "";
  if (followNewest || !page.shown || page.shown > latest) page.shown = latest;
  $("sid").textContent = sid;
  page.timeline = detail.timeline;
  renderStatus(); renderVersions(); renderDag(); renderSteps(); renderHistory(); renderActions();
  if (typeof renderLineage === "function") renderLineage();  // lineage.js, loaded after this
  drawTimeline($("timeline"), detail.timeline);
  tick();
  addEvents(detail.events);
  const open = $("step-panel").dataset.step;
  if (open) openStep(base, open);
}

// The timeline again (attempts, LLM calls, decisions, people), at most once a second.
let timelineDue = null;
function refreshTimeline() {
  if (timelineDue) return;
  timelineDue = setTimeout(async () => {
    timelineDue = null;
    try {
      page.timeline = await getJSON(base + "/timeline");
      drawTimeline($("timeline"), page.timeline);
    } catch (exc) { /* the next change tries again */ }
  }, 1000);
}

function follow() {
  const source = new EventSource(base + "/stream");
  $("live").textContent = "● live";
  source.addEventListener("steps", (msg) => {
    Object.assign(page.steps, JSON.parse(msg.data));
    colourDag($("dag"), page.steps);
    renderSteps(); renderActions(); refreshTimeline();
  });
  source.addEventListener("events", (msg) => { addEvents(JSON.parse(msg.data).events); refreshTimeline(); });
  source.addEventListener("session", (msg) => {
    const data = JSON.parse(msg.data);
    page.status = data.status; page.awaiting = data.awaiting;
    renderStatus(); renderActions();
    load(false).catch(() => {});
  });
  source.addEventListener("plan", () => load(true).catch(() => {}));
  source.addEventListener("end", () => {
    source.close();
    $("live").textContent = "";
    load(false).catch(() => {});
  });
  source.onerror = () => {
    // CLOSED: the console refused the stream (too many open: close a tab) or went away
    $("live").textContent = source.readyState === EventSource.CLOSED ?
      "○ live updates off (too many open pages, or the console is away): reload later" :
      "○ reconnecting";
  };
}

$("version").addEventListener("change", (e) => {
  page.shown = Number(e.target.value); renderDag(); renderLineage();
});
$("cancel").addEventListener("click", () => confirmed("Cancel session " + sid + "?", "cancel", {}));
$("signal-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("signal-text").value.trim();
  if (text) act("signal", { text }).then(() => { $("signal-text").value = ""; });
});
$("legend").replaceChildren(...STATUSES.map((s) => el("span", { class: "s-" + s }, s)));

setInterval(tick, 1000);
whoAmI().then(() => { if (page.detail) renderLineage(); }).catch(() => {});
load(true).then(() => { if (!ended()) follow(); }).catch((exc) => {
  $("summary").replaceChildren(el("span", { class: "error" }, "cannot load the session: " + exc.message));
});
