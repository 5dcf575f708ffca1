// The sessions list: search, filters (status, age, tool), counts per status, paging; each
// row's progress bar is coloured by how its steps ended. Refreshed every two seconds.
"use strict";
const SESSION_STATUSES = ["pending", "running", "completed", "failed", "aborted", "cancelled"];
const BAR_ORDER = ["completed", "failed", "interrupted", "cancelled", "skipped", "running", "ready"];
const list = { statuses: new Set(), page: 1, pageSize: 25, total: 0 };

function progressBar(s) {
  const width = 120, total = Math.max(1, s.steps_total);
  const svg = svgEl("svg", { class: "progress", width, height: 10, viewBox: `0 0 ${width} 10`,
    "data-outcome": s.status });
  svg.append(svgEl("rect", { class: "track", x: 0, y: 0, width, height: 10, rx: 3 }));
  let x = 0;
  for (const status of BAR_ORDER) {
    const n = (s.counts || {})[status] || 0;
    if (!n) continue;
    const w = (n / total) * width;
    svg.append(svgEl("rect", { class: "fill-" + status, "data-segment": status, x, y: 0, width: w, height: 10 }));
    x += w;
  }
  return svg;
}

function query() {
  const params = new URLSearchParams({ page: list.page, page_size: list.pageSize });
  const q = document.getElementById("q").value.trim();
  const age = document.getElementById("age").value;
  const tool = document.getElementById("tool").value.trim();
  if (q) params.set("q", q);
  if (age) params.set("max_age_s", age);
  if (tool) params.set("tool", tool);
  if (list.statuses.size) params.set("status", [...list.statuses].join(","));
  return params;
}

function renderCounts(counts) {
  document.getElementById("counts").replaceChildren(...SESSION_STATUSES.map((status) =>
    el("button", { type: "button", class: list.statuses.has(status) ? "on" : "", "data-filter": status,
      onclick: () => {
        if (list.statuses.has(status)) list.statuses.delete(status); else list.statuses.add(status);
        list.page = 1; refresh();
      } }, `${status} ${counts[status] || 0}`)));
}

const money = (v) => (v == null ? "—" : "$" + Number(v).toFixed(4));

async function refresh() {
  const error = document.getElementById("error");
  try {
    const answer = await getJSON("/api/sessions?" + query());
    const body = document.querySelector("#sessions tbody");
    body.replaceChildren(...answer.sessions.map((s) => el("tr", { "data-sid": s.id },
      el("td", {}, el("a", { href: "/sessions/" + encodeURIComponent(s.id) }, s.id)),
      el("td", {}, badge(s.status), s.awaiting ? " (awaiting " + s.awaiting + ")" : ""),
      el("td", {}, progressBar(s), " " + s.steps_done + "/" + s.steps_total),
      el("td", {}, ageText(s.age_s)),
      el("td", {}, s.replans),
      el("td", {}, s.tokens == null ? "—" : s.tokens),
      el("td", {}, money(s.cost_usd)),
      el("td", {}, s.goal))));
    list.total = answer.total;
    renderCounts(answer.counts);
    const pages = Math.max(1, Math.ceil(answer.total / list.pageSize));
    document.getElementById("page-info").textContent = `page ${list.page} of ${pages} · ${answer.total} sessions`;
    document.getElementById("prev").disabled = list.page <= 1;
    document.getElementById("next").disabled = list.page >= pages;
    document.getElementById("empty").hidden = answer.sessions.length > 0;
    error.hidden = true;
  } catch (exc) {
    error.textContent = "cannot list sessions: " + exc.message;
    error.hidden = false;
  }
}

let typing = null;
for (const id of ["q", "tool"]) {
  document.getElementById(id).addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => { list.page = 1; refresh(); }, 250);
  });
}
document.getElementById("age").addEventListener("change", () => { list.page = 1; refresh(); });
document.getElementById("filters").addEventListener("submit", (e) => { e.preventDefault(); refresh(); });
document.getElementById("prev").addEventListener("click", () => { list.page -= 1; refresh(); });
document.getElementById("next").addEventListener("click", () => { list.page += 1; refresh(); });
whoAmI().catch(() => {});
refresh();
setInterval(refresh, 2000);
