// Helpers shared by the console pages: element building, fetch with JSON, durations.
"use strict";
const STATUSES = ["pending", "ready", "running", "completed", "failed", "interrupted", "skipped", "cancelled"];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

async function getJSON(url) {
  const response = await fetch(url, { headers: { Accept: "application/json" } });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

// Actions are same-origin POSTs with a JSON body (see console/guard.py).
async function postJSON(url, body) {
  const response = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body || {}),
  });
  const answer = await response.json();
  if (!response.ok) throw new Error(answer.error || response.statusText);
  return answer;
}

function ageText(seconds) {
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60]]) {
    if (seconds >= size) return Math.floor(seconds / size) + unit;
  }
  return Math.floor(seconds) + "s";
}

function clock(ts) {
  if (!ts) return "";
  const d = new Date(ts * 1000);
  return d.toLocaleTimeString([], { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
}

function badge(status) {
  return el("span", { class: "badge s-" + status, "data-status": status }, status);
}

// Who is logged in: shown in the header; a viewer's page hides the actions (the server
// refuses them anyway, console/guard.py).
async function whoAmI() {
  const me = await getJSON("/api/me");
  document.body.dataset.role = me.role;
  const slot = document.getElementById("me");
  if (slot) slot.textContent = me.user + " (" + me.role + ")";
  return me;
}
