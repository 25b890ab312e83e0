// The bank view: the Query Graph (cytoscape.js, fCoSE layout), the selected node, the Insight Doc timeline.
// Every piece of bank text reaches the page through textContent or a canvas label, never as HTML.
(function () {
  "use strict";
  const bank = JSON.parse(document.getElementById("bank-data").textContent);
  const LARGE = 1000; // above this many nodes: no labels when zoomed out, edges hidden while panning, no fading
  const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  const nodesById = new Map(bank.nodes.map((n) => [n.id, n]));

  // el("li", {class: "x"}, "text", child): an element whose strings become text nodes.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "class") node.className = value;
      else if (key === "onclick") node.addEventListener("click", value);
      else node.setAttribute(key, value);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined) continue;
      node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }

  function stepColour(step) {
    const t = bank.steps > 1 ? step / (bank.steps - 1) : 0;
    const x = t * (VIRIDIS.length - 1), i = Math.min(Math.floor(x), VIRIDIS.length - 2), f = x - i;
    const rgb = VIRIDIS[i].map((c, k) => Math.round(c + f * (VIRIDIS[i + 1][k] - c)));
    return `rgb(${rgb.join(",")})`;
  }

  const when = (seconds) => new Date(seconds * 1000).toLocaleString();
  const shortId = (id) => id.slice(0, 8);
  const clip = (text, n) => (text.length > n ? text.slice(0, n - 1) + "\u2026" : text);

  // --- the graph ---------------------------------------------------------------------------
  const large = bank.nodes.length > LARGE;
  const elements = bank.nodes.map((n) => ({
    group: "nodes",
    data: { id: n.id, label: clip(n.context || n.summary, 32), colour: stepColour(n.step),
            size: Math.min(80, 16 + 12 * Math.sqrt(n.entries.length)) },
    classes: n.merged_from.length ? "merged" : "",
  })).concat(bank.edges.map(([a, b]) => ({ group: "edges", data: { id: `${a}|${b}`, source: a, target: b } })));

  if (window.cytoscapeFcose) cytoscape.use(window.cytoscapeFcose);
  const cy = cytoscape({
    container: document.getElementById("graph"),
    elements: [], // added in draw(), after the page around the graph has been painted
    layout: { name: "preset" },
    textureOnViewport: large,
    hideEdgesOnViewport: large,
    pixelRatio: large ? 1 : "auto",
    minZoom: 0.05,
    maxZoom: 4,
    style: [
      { selector: "node", style: {
        "background-color": "data(colour)", width: "data(size)", height: "data(size)", label: "data(label)",
        "font-size": 10, "text-valign": "bottom", "text-margin-y": 3, color: "#1f2328",
        "text-outline-color": "#fff", "text-outline-width": 2, "min-zoomed-font-size": large ? 9 : 0,
        "border-width": 1, "border-color": "#fff" } },
      { selector: "node.merged", style: { shape: "round-diamond", "border-width": 4, "border-color": "#d6336c" } },
      { selector: "edge", style: { width: 1.5, "line-color": "#afb8c1", "curve-style": "haystack" } },
      { selector: "node:selected", style: { "border-width": 5, "border-color": "#0969da" } },
      { selector: ".faded", style: { opacity: 0.15 } },
      { selector: "node.near", style: { "border-width": 3, "border-color": "#0969da" } },
      { selector: "edge.near", style: { width: 3, "line-color": "#0969da" } },
      { selector: "node.match", style: { "border-width": 4, "border-color": "#bf8700" } },
    ],
  });

  // Add the elements and lay them out in one go, so no frame is drawn with every node at the origin.
  function draw() {
    const status = document.getElementById("status");
    cy.batch(() => cy.add(elements));
    if (bank.nodes.length && window.cytoscapeFcose) {
      // "default" quality: "draft" is faster but piles up disconnected nodes, and banks have many of them
      // (fCoSE tiles them in a grid beside the connected part).
      cy.layout({ name: "fcose", quality: "default", randomize: true, animate: false,
                  nodeRepulsion: 6000, idealEdgeLength: 60, packComponents: true }).run();
    } else if (bank.nodes.length) {
      cy.layout({ name: "grid", animate: false }).run();
    }
    cy.fit(undefined, 30);
    if (cy.zoom() > 1.5) { cy.zoom(1.5); cy.center(); } // a few nodes: keep labels at a readable size
    status.textContent = bank.nodes.length ? "" : "this bank has no nodes";
    status.hidden = bank.nodes.length > 0;
    document.getElementById("stats").textContent = `${cy.nodes().length} nodes \u00b7 ${cy.edges().length} edges \u00b7 ` +
      `${Object.keys(bank.entries).length} entries \u00b7 ${bank.merges.length} merges`;
    // "painted": the first frame drawn after the layout, so a reader of the canvas (a test, a screenshot)
    // waits for the pixels rather than for the data.
    cy.one("render", () => { document.body.dataset.painted = "1"; });
    document.body.dataset.ready = "1";
  }

  // --- the selected node -------------------------------------------------------------------
  const panel = document.getElementById("panel");

  function nodeButton(id) {
    const node = nodesById.get(id);
    if (!node) return el("span", { class: "mono muted" }, shortId(id) + " (no longer in the graph)");
    return el("button", { class: "link", onclick: () => select(id) }, clip(node.context || node.summary, 80));
  }

  function entryText(entry, spans) {
    const pre = el("pre");
    let at = 0;
    for (const [start, end] of spans) {
      if (start < at) continue;
      pre.appendChild(document.createTextNode(entry.text.slice(at, start)));
      pre.appendChild(el("mark", {}, entry.text.slice(start, end)));
      at = end;
    }
    pre.appendChild(document.createTextNode(entry.text.slice(at)));
    return pre;
  }

  function entryBlock(id, node) {
    const entry = bank.entries[id];
    const spans = node.sources.filter((s) => s.entry_id === id).map((s) => [s.start, s.end]).sort((a, b) => a[0] - b[0]);
    const extra = Object.keys(entry.metadata).length ? el("pre", { class: "muted" }, JSON.stringify(entry.metadata, null, 1)) : null;
    return el("details", { class: "entry", open: "" },
      el("summary", {}, `${entry.source} \u00b7 ${when(entry.time)}` + (spans.length ? ` \u00b7 ${spans.length} source span(s)` : "")),
      entryText(entry, spans), extra,
      entry.attachments.length ? el("div", { class: "muted" }, "attachments: " + entry.attachments.join(", ")) : null);
  }

  function mergeItem(merge) {
    return el("li", { class: "merge" },
      el("div", { class: "muted" }, when(merge.time)),
      el("div", {}, `merged ${merge.merged.map(shortId).join(", ")} into ${shortId(merge.into)}`),
      merge.description ? el("div", {}, merge.description) : null);
  }

  function history(id) { // the merges that led to a node, oldest first
    const byInto = new Map(bank.merges.map((m) => [m.into, m]));
    const found = [], todo = [id], seen = new Set();
    while (todo.length) {
      const merge = byInto.get(todo.pop());
      if (!merge || seen.has(merge)) continue;
      seen.add(merge); found.push(merge); todo.push(...merge.merged);
    }
    return found.sort((a, b) => a.time - b.time);
  }

  function showNode(node) {
    const neighbours = cy.getElementById(node.id).neighborhood("node").map((n) => n.id());
    const merges = history(node.id);
    panel.replaceChildren(...[
      el("h2", { id: "node-topic" }, node.context || "(no topic)"),
      el("div", { class: "mono muted", id: "node-id" }, node.id),
      node.merged_from.length ? el("span", { class: "badge merged" }, "made by a merge") : null,
      el("div", { class: "muted" }, `created ${when(node.created)} \u00b7 step ${node.step}`),
      el("div", { id: "node-keywords" }, node.keywords.map((k) => el("span", { class: "chip" }, k))),
      el("h3", {}, "Summary"), el("p", { id: "node-summary" }, node.summary),
      el("h3", {}, `Neighbours (${neighbours.length})`),
      el("ul", { class: "plain" }, neighbours.map((id) => el("li", {}, nodeButton(id)))),
      el("h3", {}, `Entries (${node.entries.length})`), node.entries.map((id) => entryBlock(id, node)),
      merges.length ? el("h3", {}, "Merge history") : null,
      merges.length ? el("ol", { class: "timeline" }, merges.map(mergeItem)) : null,
    ].flat().filter(Boolean));
  }

  function showNothing() {
    panel.replaceChildren(el("p", { class: "muted" },
      "Click a node to see its summary, keywords, entries and merge history."));
  }

  function select(id) {
    const node = nodesById.get(id);
    if (!node) return;
    const target = cy.getElementById(id);
    cy.batch(() => {
      cy.elements().unselect();
      // Fading the rest restyles every element: on a large graph only the neighbourhood is marked.
      if (large) {
        cy.elements(".near").removeClass("near");
        target.closedNeighborhood().addClass("near");
      } else {
        cy.elements().addClass("faded");
        target.closedNeighborhood().removeClass("faded");
      }
      target.select();
    });
    showNode(node);
  }

  function clearSelection() {
    cy.batch(() => cy.elements().unselect().removeClass("faded near"));
    showNothing();
  }

  cy.on("tap", "node", (event) => select(event.target.id()));
  cy.on("tap", (event) => { if (event.target === cy) clearSelection(); });
  document.addEventListener("keydown", (event) => { if (event.key === "Escape") clearSelection(); });

  // --- search ------------------------------------------------------------------------------
  const search = document.getElementById("search");
  const searchCount = document.getElementById("search-count");
  let matches = [];
  search.addEventListener("input", () => {
    const words = search.value.toLowerCase().split(/\s+/).filter(Boolean);
    matches = words.length ? bank.nodes.filter((n) => {
      const text = `${n.context} ${n.summary} ${n.keywords.join(" ")}`.toLowerCase();
      return words.every((w) => text.includes(w));
    }).map((n) => n.id) : [];
    const ids = new Set(matches);
    cy.batch(() => {
      cy.nodes().removeClass("match faded");
      if (words.length) cy.nodes().forEach((n) => n.addClass(ids.has(n.id()) ? "match" : "faded"));
    });
    searchCount.textContent = words.length ? `${matches.length} found` : "";
  });
  search.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && matches.length) {
      select(matches[0]);
      cy.animate({ center: { eles: cy.getElementById(matches[0]) }, duration: 200 });
    }
  });

  // --- header, legend and the Insight Doc timeline --------------------------------------------
  function header() {
    const doc = bank.insight_doc;
    document.getElementById("goal").textContent = doc ? doc.task_goal : "(no Insight Doc)";
    const gradient = el("span", { class: "gradient" });
    gradient.style.background = `linear-gradient(to right, ${[0, 0.25, 0.5, 0.75, 1].map((t) => stepColour(t * (bank.steps - 1))).join(",")})`;
    document.getElementById("legend").replaceChildren(
      el("div", {}, "colour: creation step 0", gradient, String(bank.steps - 1)),
      el("div", {}, "size: entries \u00b7 pink diamond: made by a merge"));
  }

  function timeline() {
    const doc = bank.insight_doc;
    const items = [];
    if (doc) {
      doc.completed_tasks.forEach((task) => items.push(el("li", { class: task.status },
        el("span", { class: `badge ${task.status}` }, task.status),
        task.type !== "NORMAL" ? el("span", { class: "badge type" }, task.type) : null,
        el("div", {}, task.description), task.context ? el("div", { class: "muted" }, task.context) : null)));
      doc.pending_tasks.forEach((task) => items.push(el("li", { class: "pending" },
        el("span", { class: "badge pending" }, "next"), el("div", {}, task))));
    }
    document.getElementById("timeline").replaceChildren(
      el("h2", {}, "Insight Doc"),
      el("p", {}, el("strong", {}, "Goal: "), doc ? doc.task_goal : "(none)"),
      items.length ? el("ol", { class: "timeline", id: "tasks" }, items) : el("p", { class: "muted" }, "no tasks yet"),
      el("h3", {}, `Merge events (${bank.merges.length})`),
      bank.merges.length ? el("ol", { class: "timeline" }, bank.merges.map(mergeItem)) : el("p", { class: "muted" }, "none"));
  }

  header();
  timeline();
  showNothing();
  window.ambView = { cy: cy, bank: bank, select: select };
  // Draw the page first, then lay out (a large graph takes a moment).
  requestAnimationFrame(() => setTimeout(draw, 0));
})();
