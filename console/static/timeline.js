// The timeline (Gantt): one lane per step (a bar per attempt, coloured by how it ended; a
// running one grows to now), one for LLM calls, one for decisions and one for people's
// actions, on one time axis from the session's start. Times are the server's: the page
// measures "now" by the offset between its clock and the server's at the last fetch.
"use strict";
const TL = { label: 150, width: 900, lane: 20, top: 22 };
const clockSkew = { offset: 0 };

function serverNow() {
  return Date.now() / 1000 + clockSkew.offset;
}

function tickText(seconds) {
  return seconds < 60 ? seconds.toFixed(seconds < 10 ? 1 : 0) + "s" : ageText(seconds);
}

function drawTimeline(svg, tl) {
  clockSkew.offset = tl.now - Date.now() / 1000;
  const lanes = [];
  for (const item of tl.items) if (!lanes.includes(item.lane)) lanes.push(item.lane);
  const t0 = tl.created_at || (tl.items[0] || {}).start || tl.now;
  const t1 = Math.max(tl.finished_at || serverNow(), ...tl.items.map((i) => i.end || serverNow()), t0 + 1);
  const scale = TL.width / (t1 - t0);
  const x = (t) => TL.label + (t - t0) * scale;
  const height = TL.top + Math.max(1, lanes.length) * TL.lane + 6;
  svg.replaceChildren();
  svg.setAttribute("width", TL.label + TL.width + 40);
  svg.setAttribute("height", height);
  svg.setAttribute("viewBox", `0 0 ${TL.label + TL.width + 40} ${height}`);
  svg.dataset.t0 = t0;
  svg.dataset.scale = scale;
  for (let i = 0; i <= 5; i++) {
    const t = t0 + ((t1 - t0) * i) / 5;
    svg.append(svgEl("line", { class: "tick", x1: x(t), x2: x(t), y1: TL.top - 6, y2: height }));
    const label = svgEl("text", { class: "tick-label", x: x(t) + 2, y: 12 });
    label.textContent = "+" + tickText(t - t0);
    svg.append(label);
  }
  lanes.forEach((lane, i) => {
    const label = svgEl("text", { class: "lane-label", x: 4, y: TL.top + i * TL.lane + 14 });
    label.textContent = clip(lane, 22);
    svg.append(label);
  });
  for (const item of tl.items) {
    const y = TL.top + lanes.indexOf(item.lane) * TL.lane + 3;
    const title = svgEl("title");
    const running = item.kind === "attempt" && item.end == null;
    const end = item.end == null ? serverNow() : item.end;
    title.textContent = `${item.label}: ${item.status}` + (item.worker ? ` on ${item.worker}` : "") +
      ` · ${clock(item.start)}` + (item.end != null ? `–${clock(item.end)} (${(end - item.start).toFixed(3)}s)` : " (running)");
    let shape;
    if (item.start === item.end) {
      shape = svgEl("rect", { class: "mark tl-" + item.kind, x: x(item.start) - 4, y, width: 8, height: TL.lane - 6 });
    } else {
      shape = svgEl("rect", { class: "bar fill-" + item.status + " tl-" + item.kind, x: x(item.start), y,
        width: Math.max(2, (end - item.start) * scale), height: TL.lane - 6 });
    }
    shape.dataset.kind = item.kind;
    shape.dataset.lane = item.lane;
    shape.dataset.start = item.start;
    if (running) shape.dataset.running = "1";
    shape.append(title);
    svg.append(shape);
  }
}

// Running bars grow to now between fetches (the axis is redrawn at the next fetch).
function growTimeline(svg) {
  const t0 = Number(svg.dataset.t0), scale = Number(svg.dataset.scale);
  if (!scale) return;
  const limit = TL.label + TL.width + 40;
  for (const bar of svg.querySelectorAll("rect[data-running]")) {
    const x = Number(bar.getAttribute("x"));
    bar.setAttribute("width", Math.max(2, Math.min(limit - x, (serverNow() - Number(bar.dataset.start)) * scale)));
  }
}

function timesText(tl, status) {
  const over = tl.finished_at != null;
  const total = over ? tl.total_s : serverNow() - tl.created_at;
  return `started ${clock(tl.started_at || tl.created_at)}` + (over ? ` · ended ${clock(tl.finished_at)}` : "") +
    ` · ${over ? "total" : "running for"} ${tickText(Math.max(0, total || 0))}`;
}
