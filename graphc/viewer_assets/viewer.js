// graphc's viewer: renders the page data (script#graphc-data) with ELK's layered layout.
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("graphc-data").textContent);
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.getElementById("canvas");
  const viewport = document.getElementById("viewport");
  const details = document.getElementById("details");
  const tooltip = document.getElementById("tooltip");
  const status = document.getElementById("status");
  const elk = new ELK();
  const kernels = data.kernels;
  const state = {
    view: data.views[data.default_view] ? data.default_view : Object.keys(data.views)[0],
    collapsed: new Set(), query: "", tx: 20, ty: 20, scale: 1, size: null, run: 0,
  };

  // -- helpers -----------------------------------------------------------------------
  function el(tag, attrs, parent, text) {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function html(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  }
  const fmtBytes = (b) => b >= 1 << 20 ? (b / (1 << 20)).toFixed(2) + " MiB"
    : b >= 1024 ? (b / 1024).toFixed(1) + " KiB" : b + " B";
  const textWidth = (s) => Math.max(60, 7 * s.length + 18);
  const nodeLines = (n) => [`%${n.id} ${n.op}` + (n.name ? ` ${n.name}` : ""), n.type];
  const kernelTitle = (k) => `kernel ${k.index} · ${k.kind} · ${k.nodes.length} ops`;
  const compactOps = (k) => k.fused;           // graphc_runtime.profile.compact_ops
  function matches(n, q) {
    return String(n.id) === q.replace(/^%/, "") || n.op.toLowerCase().includes(q) ||
      (n.name || "").toLowerCase().includes(q);
  }
  function showTooltip(evt, text) {
    tooltip.textContent = text;
    tooltip.hidden = false;
    tooltip.style.left = evt.clientX + 12 + "px";
    tooltip.style.top = evt.clientY + 12 + "px";
  }
  const hideTooltip = () => { tooltip.hidden = true; };

  // -- what is visible ---------------------------------------------------------------
  function visibleModel() {
    const view = data.views[state.view];
    const q = state.query.trim().toLowerCase();
    const shown = q ? view.nodes.filter((n) => matches(n, q)) : view.nodes;
    const shownIds = new Set(shown.map((n) => n.id));
    const rep = new Map();                 // node id -> layout element id
    const clusters = new Map();            // kernel index -> shown member nodes
    const loose = [];
    for (const n of shown) {
      if (view.clusters && n.kernel !== undefined) {
        if (!clusters.has(n.kernel)) clusters.set(n.kernel, []);
        clusters.get(n.kernel).push(n);
        const collapsed = state.collapsed.has(n.kernel) && !q;
        rep.set(n.id, collapsed ? "k" + n.kernel : "n" + n.id);
      } else {
        loose.push(n);
        rep.set(n.id, "n" + n.id);
      }
    }
    const edges = new Map();
    for (const e of view.edges) {
      if (!shownIds.has(e.from) || !shownIds.has(e.to)) continue;
      const a = rep.get(e.from), b = rep.get(e.to);
      if (a === b) continue;
      const key = a + ">" + b;
      if (!edges.has(key)) edges.set(key, { a, b, types: new Set(), from: e.from, to: e.to });
      edges.get(key).types.add(e.type);
    }
    return { view, shown, clusters, loose, edges: [...edges.values()], q };
  }

  function elkGraph(model) {
    const big = model.shown.length > 400;
    const root = {
      id: "root", children: [], edges: [],
      layoutOptions: {
        "elk.algorithm": "layered", "elk.direction": "DOWN",
        "elk.hierarchyHandling": "INCLUDE_CHILDREN",
        "elk.edgeRouting": big ? "POLYLINE" : "ORTHOGONAL",
        "elk.layered.thoroughness": big ? "1" : "7",
        "elk.layered.nodePlacement.strategy": big ? "SIMPLE" : "BRANDES_KOEPF",
        "elk.spacing.nodeNode": "18", "elk.layered.spacing.nodeNodeBetweenLayers": "28",
        "elk.padding": "[top=10,left=10,bottom=10,right=10]",
      },
    };
    const leaf = (n) => {
      const [a, b] = nodeLines(n);
      return { id: "n" + n.id, width: Math.max(textWidth(a), textWidth(b)), height: 38 };
    };
    for (const n of model.loose) root.children.push(leaf(n));
    for (const [k, members] of model.clusters) {
      const kern = kernels[k];
      if (state.collapsed.has(k) && !model.q) {
        const title = kernelTitle(kern), ops = compactOps(kern);
        root.children.push({ id: "k" + k, width: Math.max(textWidth(title),
          Math.min(textWidth(ops), 320)), height: 42 });
      } else {
        root.children.push({
          id: "c" + k, children: members.map(leaf),
          layoutOptions: { "elk.padding": "[top=26,left=10,bottom=10,right=10]" },
        });
      }
    }
    model.edges.forEach((e, i) => root.edges.push({ id: "e" + i, sources: [e.a], targets: [e.b] }));
    return root;
  }

  // -- drawing -----------------------------------------------------------------------
  function absolute(layout) {
    const pos = new Map();
    (function walk(node, x, y) {
      const ax = x + (node.x || 0), ay = y + (node.y || 0);
      pos.set(node.id, { x: ax, y: ay, w: node.width, h: node.height, node });
      for (const c of node.children || []) walk(c, ax, ay);
    })(layout, 0, 0);
    return pos;
  }

  function draw(model, layout) {
    viewport.textContent = "";
    const pos = absolute(layout);
    const layers = { clusters: el("g", {}, viewport), edges: el("g", {}, viewport),
                     nodes: el("g", {}, viewport) };
    const byId = new Map(model.view.nodes.map((n) => [n.id, n]));
    for (const [k] of model.clusters) {
      const kern = kernels[k];
      if (pos.has("k" + k)) {
        const p = pos.get("k" + k);
        const g = el("g", { class: "kernel collapsed", "data-kernel": k,
                            transform: `translate(${p.x},${p.y})` }, layers.nodes);
        el("rect", { width: p.w, height: p.h, rx: 6, class: "k" + (k % 10) }, g);
        el("text", { x: 8, y: 16, class: "title" }, g, kernelTitle(kern));
        el("text", { x: 8, y: 32, class: "sub" }, g, compactOps(kern).slice(0, 46));
        g.addEventListener("click", (evt) => { evt.stopPropagation(); showKernel(k);
          state.collapsed.delete(k); render(); });
      } else if (pos.has("c" + k)) {
        const p = pos.get("c" + k);
        const g = el("g", { class: "kernel expanded", "data-kernel": k,
                            transform: `translate(${p.x},${p.y})` }, layers.clusters);
        el("rect", { width: p.w, height: p.h, rx: 8, class: "k" + (k % 10) }, g);
        const t = el("text", { x: 8, y: 17, class: "title" }, g, "▾ " + kernelTitle(kern));
        t.addEventListener("click", (evt) => { evt.stopPropagation(); showKernel(k);
          if (!model.q) { state.collapsed.add(k); render(); } });
      }
    }
    (layout.edges || []).forEach((e, i) => {
      const m = model.edges[i];
      const offset = e.container && pos.has(e.container) && e.container !== "root"
        ? pos.get(e.container) : { x: 0, y: 0 };
      for (const s of e.sections || []) {
        const pts = [s.startPoint, ...(s.bendPoints || []), s.endPoint];
        const d = pts.map((p, j) => (j ? "L" : "M") + (p.x + offset.x) + "," + (p.y + offset.y))
          .join(" ");
        const types = [...m.types].join(", ");
        const path = el("path", { d, class: "edge", "marker-end": "url(#arrow)",
                                  "data-from": m.from, "data-to": m.to }, layers.edges);
        el("title", {}, path, types);
        const hit = el("path", { d, class: "edge-hit" }, layers.edges);
        for (const target of [path, hit]) {
          target.addEventListener("mousemove", (evt) => showTooltip(evt,
            `${types}  (%${m.from} → %${m.to})`));
          target.addEventListener("mouseleave", hideTooltip);
        }
      }
    });
    for (const n of model.shown) {
      const p = pos.get("n" + n.id);
      if (!p) continue;
      const g = el("g", { class: "node op-" + n.op + (n.output ? " output" : ""),
                          "data-node": n.id, transform: `translate(${p.x},${p.y})` },
                   layers.nodes);
      el("rect", { width: p.w, height: p.h, rx: n.op === "parameter" ||
                   n.op === "variable" ? 16 : 5 }, g);
      const [a, b] = nodeLines(n);
      el("text", { x: 8, y: 16 }, g, a);
      el("text", { x: 8, y: 31, class: "sub" }, g, b);
      g.addEventListener("click", (evt) => { evt.stopPropagation(); showNode(byId.get(n.id)); });
    }
    state.size = { w: layout.width || 100, h: layout.height || 100 };
  }

  function applyTransform() {
    viewport.setAttribute("transform",
      `translate(${state.tx},${state.ty}) scale(${state.scale})`);
  }
  function fit() {
    if (!state.size) return;
    const box = svg.getBoundingClientRect();
    const s = Math.min(box.width / (state.size.w + 40), box.height / (state.size.h + 40), 1.5);
    state.scale = Math.max(s, 0.02);
    state.tx = (box.width - state.size.w * state.scale) / 2;
    state.ty = 20;
    applyTransform();
  }

  // -- panels ------------------------------------------------------------------------
  function table(rows) {
    const t = html("table");
    for (const [k, v] of rows) {
      const tr = html("tr");
      tr.appendChild(html("th", k));
      const td = html("td");
      if (v instanceof Node) td.appendChild(v); else td.textContent = v;
      tr.appendChild(td);
      t.appendChild(tr);
    }
    return t;
  }
  function kernelRows(k) {
    const kern = kernels[k];
    const rows = [["kernel", `${kern.index} (${kern.name})`], ["kind", kern.kind],
                  ["fused ops", compactOps(kern)], ["bytes read", fmtBytes(kern.read)],
                  ["bytes written", fmtBytes(kern.written)]];
    if (kern.flops) rows.push(["flops", kern.flops.toLocaleString()]);
    for (const w of kern.writes) {
      rows.push(["arena", `${w.buffer}: ${fmtBytes(w.bytes)} at offset ${w.offset}`]);
    }
    return rows;
  }
  function showNode(n) {
    details.textContent = "";
    details.dataset.selectedNode = n.id;
    delete details.dataset.selectedKernel;
    details.appendChild(html("h2", `%${n.id} ${n.op}`));
    const rows = [["op", n.op], ["type", n.type]];
    if (n.name) rows.push(["name", n.name]);
    rows.push(["defined at", n.loc || "(unknown)"]);
    for (const [k, v] of Object.entries(n.attrs)) rows.push(["attr " + k, v]);
    const view = data.views[state.view];
    const types = new Map(view.nodes.map((m) => [m.id, m.type]));
    rows.push(["inputs", n.inputs.map((i) => `%${i} ${types.get(i) || ""}`).join(", ") || "none"]);
    if (n.output) rows.push(["output", "yes"]);
    details.appendChild(table(rows));
    if (view.clusters && n.kernel !== undefined) {
      details.appendChild(html("h3", "kernel"));
      details.appendChild(table(kernelRows(n.kernel)));
    }
    for (const g of viewport.querySelectorAll(".node.selected")) g.classList.remove("selected");
    const g = viewport.querySelector(`[data-node="${n.id}"]`);
    if (g) g.classList.add("selected");
  }
  function showKernel(k) {
    details.textContent = "";
    details.dataset.selectedKernel = k;
    delete details.dataset.selectedNode;
    details.appendChild(html("h2", kernelTitle(kernels[k])));
    details.appendChild(table(kernelRows(k)));
    const list = html("p", "nodes: " + kernels[k].nodes.map((i) => "%" + i).join(" "), "small");
    details.appendChild(list);
  }

  // -- memory timeline ---------------------------------------------------------------
  function drawMemory() {
    const mem = data.memory || {};
    const buffers = mem.buffers || [];
    const summary = document.getElementById("memory-summary");
    summary.textContent = `arena ${fmtBytes(mem.arena_bytes || 0)}; live lower bound ` +
      `${fmtBytes(mem.live_bytes_lower_bound || 0)}; one buffer per value ` +
      `${fmtBytes(mem.naive_bytes || 0)}; ${buffers.length} buffers over ` +
      `${kernels.length} kernels`;
    const m = document.getElementById("memory");
    const W = 960, H = 260, L = 70, T = 10, B = 24;
    m.setAttribute("viewBox", `0 0 ${W} ${H}`);
    const arena = Math.max(mem.arena_bytes || 0, 1);
    const steps = Math.max(kernels.length, 1 + Math.max(0, ...buffers.map((b) => b.last)));
    const sx = (W - L - 10) / steps, sy = (H - T - B) / arena;
    el("rect", { x: L, y: T, width: steps * sx, height: arena * sy, class: "arena" }, m);
    buffers.forEach((b, i) => {
      const r = el("rect", { x: L + b.first * sx, y: T + b.offset * sy,
        width: Math.max((b.last - b.first + 1) * sx, 2), height: Math.max(b.bytes * sy, 1.5),
        class: "buffer k" + (i % 10), "data-buffer": i }, m);
      r.addEventListener("mousemove", (evt) => showTooltip(evt, `${b.buffer}: ` +
        `${fmtBytes(b.bytes)} at offset ${b.offset}, live in kernels ${b.first}..${b.last}`));
      r.addEventListener("mouseleave", hideTooltip);
    });
    if (mem.live_bytes_lower_bound) {
      const y = T + mem.live_bytes_lower_bound * sy;
      el("line", { x1: L, x2: L + steps * sx, y1: y, y2: y, class: "bound" }, m);
      el("text", { x: 4, y: y + 4, class: "axis" }, m, "live bound");
    }
    el("text", { x: L, y: H - 6, class: "axis" }, m, `kernel 0 .. ${steps - 1} →`);
    el("text", { x: 4, y: T + 10, class: "axis" }, m, "offset 0");
  }

  // -- the render loop ---------------------------------------------------------------
  function render() {
    const run = ++state.run;
    const model = visibleModel();
    status.textContent = `laying out ${model.shown.length} nodes...`;
    document.body.dataset.ready = "0";
    const t0 = performance.now();
    elk.layout(elkGraph(model)).then((layout) => {
      if (run !== state.run) return;               // a newer render superseded this one
      draw(model, layout);
      const ms = Math.round(performance.now() - t0);
      const total = model.view.nodes.length;
      const shownKernels = [...model.clusters.keys()].length;
      status.textContent = `${model.shown.length} of ${total} nodes` +
        (model.view.clusters ? `, ${shownKernels} kernels` : "") + ` · layout ${ms} ms`;
      document.getElementById("matches").textContent = model.q
        ? `${model.shown.length} match${model.shown.length === 1 ? "" : "es"}` : "";
      document.body.dataset.layoutMs = ms;
      document.body.dataset.ready = "1";
      if (!state.kept) fit();
    }).catch((err) => {
      status.textContent = "layout failed: " + err;
      console.error(err);
    });
  }

  // -- controls ----------------------------------------------------------------------
  document.getElementById("title").textContent = data.name;
  const select = document.getElementById("view");
  for (const [key, v] of Object.entries(data.views)) {
    const o = document.createElement("option");
    o.value = key;
    o.textContent = v.label;
    select.appendChild(o);
  }
  select.value = state.view;
  select.addEventListener("change", () => { state.view = select.value; state.kept = false;
                                            render(); });
  let timer = null;
  document.getElementById("search").addEventListener("input", (evt) => {
    clearTimeout(timer);
    timer = setTimeout(() => { state.query = evt.target.value; state.kept = false; render(); },
                       120);
  });
  document.getElementById("expand-all").addEventListener("click", () => {
    state.collapsed.clear(); state.kept = false; render(); });
  document.getElementById("collapse-all").addEventListener("click", () => {
    kernels.forEach((k) => { if (k.nodes.length) state.collapsed.add(k.index); });
    state.kept = false; render(); });
  document.getElementById("fit").addEventListener("click", fit);
  svg.addEventListener("wheel", (evt) => {
    evt.preventDefault();
    const box = svg.getBoundingClientRect();
    const mx = evt.clientX - box.left, my = evt.clientY - box.top;
    const factor = Math.exp(-evt.deltaY * 0.0015);
    const s = Math.min(Math.max(state.scale * factor, 0.02), 8);
    state.tx = mx - (mx - state.tx) * (s / state.scale);
    state.ty = my - (my - state.ty) * (s / state.scale);
    state.scale = s;
    state.kept = true;
    applyTransform();
  }, { passive: false });
  let drag = null;
  svg.addEventListener("mousedown", (evt) => { drag = { x: evt.clientX, y: evt.clientY,
                                                        tx: state.tx, ty: state.ty }; });
  window.addEventListener("mousemove", (evt) => {
    if (!drag) return;
    state.tx = drag.tx + evt.clientX - drag.x;
    state.ty = drag.ty + evt.clientY - drag.y;
    state.kept = true;
    applyTransform();
  });
  window.addEventListener("mouseup", () => { drag = null; });
  const fused = data.views.fused;
  if (fused && fused.nodes.length > data.collapse_above) {
    kernels.forEach((k) => { if (k.nodes.length) state.collapsed.add(k.index); });
  }
  drawMemory();
  render();
})();
