// Draws a plan version's DAG as SVG, laid out by dagre (vendor/dagre.min.js, left to right).
// Edges are routed so none crosses a box: through a column of boxes an edge runs level, at
// the height dagre kept free for it; it only slants in the gaps between columns, where no box
// is. Steps an earlier version ran and this one dropped are drawn greyed ("ghost"), with how
// they ended. The diff to the previous version is outlined (added: green, changed: orange).
"use strict";
const SVG_NS = "http://www.w3.org/2000/svg";
const NODE_W = 184, NODE_H = 46;

function svgEl(tag, attrs) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  return node;
}

function clip(text, max) {
  return text.length > max ? text.slice(0, max - 1) + "…" : text;
}

// Boxes (top-left corners) and routed edges of a version: {nodes, edges, width, height}.
function layoutDag(version) {
  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: "LR", nodesep: 18, edgesep: 14, ranksep: 64, marginx: 14, marginy: 14 });
  g.setDefaultEdgeLabel(() => ({}));
  const ghosts = version.ghosts || [];
  for (const [id, step] of Object.entries(version.steps)) {
    g.setNode(id, { width: NODE_W, height: NODE_H, tool: step.tool, title: step.title || "" });
  }
  for (const ghost of ghosts) {
    g.setNode(ghost.id, { width: NODE_W, height: NODE_H, tool: ghost.tool, ghost });
  }
  for (const [from, to] of version.edges) g.setEdge(from, to);
  dagre.layout(g);
  const columns = new Set(g.nodes().map((id) => Math.round(g.node(id).x)));
  const nodes = g.nodes().map((id) => {
    const n = g.node(id);
    return { id, tool: n.tool, title: n.title, ghost: n.ghost || null,
      x: n.x - NODE_W / 2, y: n.y - NODE_H / 2 };
  });
  const edges = g.edges().map(({ v, w }) => {
    const a = g.node(v), b = g.node(w);
    const route = [[a.x + NODE_W / 2, a.y]];
    for (const p of g.edge(v, w).points.slice(1, -1)) {
      if (columns.has(Math.round(p.x))) route.push([p.x - NODE_W / 2, p.y], [p.x + NODE_W / 2, p.y]);
      else route.push([p.x, p.y]);
    }
    route.push([b.x - NODE_W / 2, b.y]);
    return { from: v, to: w, route, ghost: Boolean(a.ghost || b.ghost) };
  });
  const graph = g.graph();
  return { nodes, edges, width: Math.ceil(graph.width), height: Math.ceil(graph.height) };
}

function drawDag(svg, version, steps, onPick) {
  const drawn = layoutDag(version);
  const width = Math.max(drawn.width, 200), height = Math.max(drawn.height, 60);
  svg.replaceChildren();
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const defs = svgEl("defs");
  const marker = svgEl("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
    markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" });
  marker.append(svgEl("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrowhead" }));
  defs.append(marker);
  svg.append(defs);
  for (const e of drawn.edges) {
    const d = e.route.map(([x, y], i) => (i ? "L " : "M ") + x.toFixed(1) + " " + y.toFixed(1)).join(" ");
    svg.append(svgEl("path", { class: "edge" + (e.ghost ? " ghost" : ""),
      "data-edge": e.from + "->" + e.to, "data-points": JSON.stringify(e.route), d }));
  }
  const added = new Set(version.added), changed = new Set(Object.keys(version.changed || {}));
  for (const n of drawn.nodes) {
    const status = n.ghost ? n.ghost.status : (steps[n.id] || {}).status || "pending";
    const classes = ["node"];
    if (n.ghost) classes.push("ghost");
    if (added.has(n.id)) classes.push("added");
    if (changed.has(n.id)) classes.push("changed");
    const g = svgEl("g", { class: classes.join(" "), "data-step": n.id, "data-status": status,
      "data-box": [n.x, n.y, NODE_W, NODE_H].map((v) => v.toFixed(1)).join(","),
      transform: `translate(${n.x},${n.y})` });
    const title = svgEl("title");
    title.textContent = nodeTitle(n, status, steps[n.id]);
    g.append(title, svgEl("rect", { width: NODE_W, height: NODE_H, rx: 6,
      class: n.ghost ? "fill-ghost" : "fill-" + status }));
    const name = svgEl("text", { x: 10, y: 19 });
    name.textContent = clip(n.id, 24);
    const tool = svgEl("text", { x: 10, y: 36, class: "tool" });
    tool.textContent = n.ghost ? clip(`${status} in v${n.ghost.version} · ${n.tool}`, 32) : clip(n.tool, 30);
    g.append(name, tool);
    g.addEventListener("click", () => onPick(n.id));
    svg.append(g);
  }
}

function nodeTitle(n, status, live) {
  const head = `${n.id} (${n.tool})` + (n.title ? `\n${n.title}` : "");
  if (n.ghost) return `${head}\n${status} in plan v${n.ghost.version}, dropped since`;
  return `${head}\n${status}` + (live && live.note ? ` (${live.note})` : "");
}

// Recolour the boxes in place (no redraw): what the live stream calls on every change.
function colourDag(svg, steps) {
  for (const g of svg.querySelectorAll("g.node:not(.ghost)")) {
    const step = steps[g.dataset.step];
    if (!step) continue;
    const awaiting = step.note === "awaiting approval" && ["pending", "ready"].includes(step.status);
    g.dataset.status = step.status;
    g.classList.toggle("awaiting", awaiting);
    g.querySelector("rect").setAttribute("class", "fill-" + step.status);
    const title = g.querySelector("title");
    title.textContent = title.textContent.split("\n").slice(0, -1).concat(
      step.status + (step.note ? ` (${step.note})` : "")).join("\n");
  }
}
