// Draws a plan version's DAG as SVG from the server's layered layout (console/layout.py):
// one box per step coloured by its status, edges as curves, the diff to the previous
// version outlined (added: solid green, changed: dashed orange).
"use strict";
const SVG_NS = "http://www.w3.org/2000/svg";

function svgEl(tag, attrs) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  return node;
}

function drawDag(svg, version, steps, onPick) {
  const { nodes, edges, width, height, node_w: w, node_h: h } = version.layout;
  svg.replaceChildren();
  svg.setAttribute("width", Math.max(width, 200));
  svg.setAttribute("height", Math.max(height, 60));
  svg.setAttribute("viewBox", `0 0 ${Math.max(width, 200)} ${Math.max(height, 60)}`);
  const defs = svgEl("defs");
  const marker = svgEl("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
    markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" });
  marker.append(svgEl("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#8a92a1" }));
  defs.append(marker);
  svg.append(defs);
  const at = Object.fromEntries(nodes.map((n) => [n.id, n]));
  for (const [from, to] of edges) {
    const a = at[from], b = at[to];
    const x1 = a.x + w, y1 = a.y + h / 2, x2 = b.x - 2, y2 = b.y + h / 2;
    const mid = (x1 + x2) / 2;
    svg.append(svgEl("path", { class: "edge", "data-edge": from + "->" + to,
      d: `M ${x1} ${y1} C ${mid} ${y1}, ${mid} ${y2}, ${x2} ${y2}` }));
  }
  const added = new Set(version.added), changed = new Set(version.changed);
  for (const n of nodes) {
    const status = (steps[n.id] || {}).status || "pending";
    const classes = ["node"];
    if (added.has(n.id)) classes.push("added");
    if (changed.has(n.id)) classes.push("changed");
    const g = svgEl("g", { class: classes.join(" "), "data-step": n.id, "data-status": status,
      transform: `translate(${n.x},${n.y})` });
    const title = svgEl("title");
    title.textContent = `${n.id} (${n.tool}): ${status}`;
    g.append(title, svgEl("rect", { width: w, height: h, rx: 6, class: "fill-" + status }));
    const name = svgEl("text", { x: 10, y: 19 });
    name.textContent = n.id.length > 22 ? n.id.slice(0, 21) + "…" : n.id;
    const tool = svgEl("text", { x: 10, y: 36, class: "tool" });
    tool.textContent = n.tool.length > 28 ? n.tool.slice(0, 27) + "…" : n.tool;
    g.append(name, tool);
    g.addEventListener("click", () => onPick(n.id));
    svg.append(g);
  }
}

// Recolour the boxes in place (no redraw): what the live stream calls on every change.
function colourDag(svg, steps) {
  for (const g of svg.querySelectorAll("g.node")) {
    const step = steps[g.dataset.step];
    if (!step) continue;
    const awaiting = step.note === "awaiting approval" && ["pending", "ready"].includes(step.status);
    g.dataset.status = step.status;
    g.classList.toggle("awaiting", awaiting);
    g.querySelector("rect").setAttribute("class", "fill-" + step.status);
    g.querySelector("title").textContent = `${g.dataset.step}: ${step.status}` +
      (step.note ? ` (${step.note})` : "");
  }
}
