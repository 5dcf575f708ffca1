// Where a session came from and what came of it (links both ways), and the admin's two ways
// to start again: fork from the plan version shown (or an edited plan), continue a session
// its deadline or a budget ended. Both ask first, like every action (session.js).
"use strict";

function sessionLink(id) {
  return el("a", { href: "/sessions/" + encodeURIComponent(id), class: "mono" }, id);
}

// The shown version as a plan to edit: goal, and each step's id, tool, params, dependencies.
function planText(version) {
  const steps = Object.entries(version.steps).map(([id, s]) => {
    const step = { id, tool: s.tool, params: s.params };
    if (s.dependencies.length) step.dependencies = s.dependencies;
    return step;
  });
  return JSON.stringify({ goal: page.detail.session.goal || "", steps }, null, 2);
}

// Its own result line: the actions' one is hidden once the session has ended.
async function startFork(body) {
  const out = $("lineage-result");
  try {
    const answer = await postJSON(base + "/fork", body);
    out.className = "";
    out.replaceChildren("forked: ", sessionLink(answer.result));
  } catch (exc) {
    out.className = "error";
    out.textContent = "fork refused: " + exc.message;
  }
}

function forkConfirmed(question, body) {
  if (confirm(question)) return startFork(body);
  $("lineage-result").className = "";
  $("lineage-result").textContent = "fork not sent";
  return Promise.resolve();
}

function renderLineage() {
  const l = page.detail.lineage;
  const lines = [];
  if (l.forked_from) {
    lines.push(el("div", { id: "forked-from" }, "forked from ", sessionLink(l.forked_from),
      ` at plan v${l.forked_version}; carried over (not run again): ${l.carried.join(", ") || "none"}`));
  }
  if (l.continued) lines.push(el("div", {}, `continued ${l.continued} time(s)`));
  if (l.forks.length) {
    lines.push(el("div", { id: "forks" }, "forks: ", ...l.forks.flatMap((f, i) =>
      [i ? ", " : "", sessionLink(f.id), ` (from v${f.version})`])));
  }
  $("lineage-links").replaceChildren(...lines);
  const admin = document.body.dataset.role === "admin";
  $("lineage-actions").hidden = !admin;
  $("continue").hidden = !admin || l.continue_refused !== null;
  $("fork").textContent = "Fork from v" + page.shown;
}

$("fork").addEventListener("click", () => forkConfirmed(
  `Start a new session from plan v${page.shown} of ${sid}? Completed steps it keeps run no more.`,
  { version: page.shown }));
$("fork-edit").addEventListener("click", () => {
  const box = $("fork-editor");
  box.hidden = !box.hidden;
  if (!box.hidden) $("fork-plan").value = planText(page.detail.versions[page.shown - 1]);
});
$("fork-edited").addEventListener("click", () => forkConfirmed(
  "Start a new session from this edited plan? Only steps that changed (and what depends on them) run.",
  { plan: $("fork-plan").value }));
$("continue").addEventListener("click", async () => {
  if (!confirm(`Continue ${sid}? What completed stays; what did not runs again.`)) {
    $("lineage-result").textContent = "continue not sent";
    return;
  }
  try {
    await postJSON(base + "/continue", { deadline_s: Number($("continue-deadline").value) || null });
    $("lineage-result").className = "";
    $("lineage-result").textContent = "continuing";
    await load(false);
    follow();
  } catch (exc) {
    $("lineage-result").className = "error";
    $("lineage-result").textContent = "continue refused: " + exc.message;
  }
});
