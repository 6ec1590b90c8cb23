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
  // a cluster is a fused kernel (the fused view) or a namespace of an imported model's
  // nodes (the graph views); its key is "k<index>" or "g<view>:<index>"
  const kernelKey = (index) => "k" + index;
  const groupKey = (index) => "g" + state.view + ":" + index;
  function clusterOf(view, n) {
    if (view.clusters) return n.kernel !== undefined ? kernelKey(n.kernel) : undefined;
    if (view.groups && n.group !== undefined) return groupKey(n.group);
    return undefined;
  }
  function clusterInfo(key) {
    if (key[0] === "k") {
      const kern = kernels[Number(key.slice(1))];
      return { title: kernelTitle(kern), sub: compactOps(kern), kernel: kern.index,
               short: `k${kern.index} ${kern.kind}` };
    }
    const index = Number(key.slice(key.indexOf(":") + 1));
    const g = data.views[state.view].groups[index];
    return { title: g.name, sub: `${g.count} nodes`, group: index,
             short: g.name.split("/").slice(-2).join("/") };
  }
  // text cut to what `width` pixels hold (12px monospace: about 7.2 px a character)
  function fitText(text, width, px) {
    const room = Math.max(Math.floor((width - 16) / (px || 7.2)), 3);
    return text.length <= room ? text : text.slice(0, room - 1) + "…";
  }
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
      const key = clusterOf(view, n);
      if (key !== undefined) {
        if (!clusters.has(key)) clusters.set(key, []);
        clusters.get(key).push(n);
        const collapsed = state.collapsed.has(key) && !q;
        rep.set(n.id, collapsed ? "x" + key : "n" + n.id);
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
    for (const [key, members] of model.clusters) {
      const info = clusterInfo(key);
      if (state.collapsed.has(key) && !model.q) {
        root.children.push({ id: "x" + key, width: Math.min(Math.max(textWidth(info.title),
          textWidth(info.sub)), 320), height: 42 });
      } else {
        root.children.push({
          id: "c" + key, children: members.map(leaf),
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
    const content = el("g", { id: "graph-content" }, viewport);
    const layers = { clusters: el("g", {}, content), edges: el("g", {}, content),
                     nodes: el("g", {}, content), labels: el("g", {}, content) };
    const byId = new Map(model.view.nodes.map((n) => [n.id, n]));
    let colour = 0;
    for (const [key] of model.clusters) {
      const info = clusterInfo(key);
      const attrs = info.kernel !== undefined ? { "data-kernel": info.kernel }
        : { "data-group": info.group };
      const shade = "k" + ((info.kernel !== undefined ? info.kernel : colour++) % 10);
      const show = () => info.kernel !== undefined ? showKernel(info.kernel)
        : showGroup(info.group, model.clusters.get(key));
      let g, p;
      if (pos.has("x" + key)) {
        p = pos.get("x" + key);
        g = el("g", { class: "kernel collapsed", ...attrs,
                      transform: `translate(${p.x},${p.y})` }, layers.nodes);
        el("rect", { width: p.w, height: p.h, rx: 6, class: shade }, g);
        el("text", { x: 8, y: 16, class: "title" }, g, fitText(info.title, p.w));
        el("text", { x: 8, y: 32, class: "sub" }, g, fitText(info.sub, p.w, 6.6));
        g.addEventListener("click", (evt) => { evt.stopPropagation(); show();
          state.collapsed.delete(key); render(); });
      } else if (pos.has("c" + key)) {
        p = pos.get("c" + key);
        g = el("g", { class: "kernel expanded", ...attrs,
                      transform: `translate(${p.x},${p.y})` }, layers.clusters);
        el("rect", { width: p.w, height: p.h, rx: 8, class: shade }, g);
        const t = el("text", { x: 8, y: 17, class: "title" }, g,
                     fitText("▾ " + info.title, p.w));
        t.addEventListener("click", (evt) => { evt.stopPropagation(); show();
          if (!model.q) { state.collapsed.add(key); render(); } });
      }
      if (g) {                  // read when zoomed out, where node labels are too small
        const at = el("g", { transform: `translate(${p.x},${p.y})` }, layers.labels);
        el("text", { class: "far-label", "data-w": p.w, "data-h": p.h }, at, info.short);
        el("title", {}, g, info.title);
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
      el("text", { class: "far-node", x: p.w / 2, y: p.h / 2, "data-w": p.w, "data-h": p.h },
         g, n.op);
      g.addEventListener("click", (evt) => { evt.stopPropagation(); showNode(byId.get(n.id)); });
    }
    state.size = { w: layout.width || 100, h: layout.height || 100 };
  }

  const FAR = 0.45;             // below this zoom, node labels give way to cluster labels
  function applyTransform() {
    viewport.setAttribute("transform",
      `translate(${state.tx},${state.ty}) scale(${state.scale})`);
    const far = state.scale < FAR;
    svg.classList.toggle("far", far);
    if (far) {
      // cluster labels at 12 px on screen (over their box's corner, with a halo), for
      // boxes big enough on screen to be told apart; nodes keep their op name where it
      // fits at 10 px
      const s = state.scale;
      for (const t of viewport.querySelectorAll(".far-label")) {
        const w = Number(t.dataset.w) * s, h = Number(t.dataset.h) * s;
        t.setAttribute("visibility", w >= 30 && h >= 10 ? "visible" : "hidden");
        t.setAttribute("font-size", (12 / s).toFixed(2));
        t.setAttribute("x", (3 / s).toFixed(2));
        t.setAttribute("y", (13 / s).toFixed(2));
        t.setAttribute("stroke-width", (3 / s).toFixed(2));
      }
      for (const t of viewport.querySelectorAll(".far-node")) {
        const w = Number(t.dataset.w) * s, h = Number(t.dataset.h) * s;
        const fits = w >= 6.2 * t.textContent.length + 4 && h >= 11;
        t.setAttribute("visibility", fits ? "visible" : "hidden");
        t.setAttribute("font-size", (10 / s).toFixed(2));
      }
    }
    drawMinimapView();
  }
  // -- minimap: the whole graph, and where the view is ---------------------------------
  const minimap = document.getElementById("minimap");
  function drawMinimap() {
    if (!state.size) return;
    minimap.textContent = "";
    minimap.setAttribute("viewBox", `0 0 ${state.size.w} ${state.size.h}`);
    el("use", { href: "#graph-content" }, minimap);
    el("rect", { id: "minimap-view", class: "minimap-view" }, minimap);
  }
  function drawMinimapView() {
    const r = document.getElementById("minimap-view");
    if (!r || !state.size) return;
    const box = svg.getBoundingClientRect();
    r.setAttribute("x", -state.tx / state.scale);
    r.setAttribute("y", -state.ty / state.scale);
    r.setAttribute("width", box.width / state.scale);
    r.setAttribute("height", box.height / state.scale);
    r.setAttribute("stroke-width", Math.max(state.size.w, state.size.h) / 120);
  }
  function centreOn(evt) {      // a click or drag on the minimap moves the view there
    const m = minimap.getScreenCTM().inverse();
    const x = evt.clientX * m.a + evt.clientY * m.c + m.e;
    const y = evt.clientX * m.b + evt.clientY * m.d + m.f;
    const box = svg.getBoundingClientRect();
    state.tx = box.width / 2 - x * state.scale;
    state.ty = box.height / 2 - y * state.scale;
    state.kept = true;
    applyTransform();
  }
  let minimapDrag = false;
  minimap.addEventListener("mousedown", (evt) => { evt.stopPropagation(); minimapDrag = true;
                                                   centreOn(evt); });
  window.addEventListener("mousemove", (evt) => { if (minimapDrag) centreOn(evt); });
  window.addEventListener("mouseup", () => { minimapDrag = false; });
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

  function showGroup(index, members) {
    const g = data.views[state.view].groups[index];
    details.textContent = "";
    details.dataset.selectedGroup = index;
    delete details.dataset.selectedNode;
    delete details.dataset.selectedKernel;
    details.appendChild(html("h2", g.name));
    details.appendChild(table([["namespace", g.name], ["nodes", String(g.count)]]));
    details.appendChild(html("p", "nodes: " + (members || []).map((n) => `%${n.id} ${n.op}`)
      .join(", "), "small"));
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
      drawMinimap();
      const ms = Math.round(performance.now() - t0);
      const total = model.view.nodes.length;
      const shownKernels = [...model.clusters.keys()].length;
      status.textContent = `${model.shown.length} of ${total} nodes` +
        (model.view.clusters ? `, ${shownKernels} kernels` : "") + ` · layout ${ms} ms`;
      document.getElementById("matches").textContent = model.q
        ? `${model.shown.length} match${model.shown.length === 1 ? "" : "es"}` : "";
      document.body.dataset.layoutMs = ms;
      document.body.dataset.ready = "1";
      if (!state.kept) fit(); else applyTransform();
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
  function collapseAll() {
    const view = data.views[state.view];
    if (view.clusters) {
      kernels.forEach((k) => { if (k.nodes.length) state.collapsed.add(kernelKey(k.index)); });
    }
    (view.groups || []).forEach((g, i) => state.collapsed.add(groupKey(i)));
  }
  document.getElementById("expand-all").addEventListener("click", () => {
    state.collapsed.clear(); state.kept = false; render(); });
  document.getElementById("collapse-all").addEventListener("click", () => {
    collapseAll(); state.kept = false; render(); });
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
  for (const [key, view] of Object.entries(data.views)) {    // big views start collapsed
    if (view.nodes.length > data.collapse_above) {
      const current = state.view;
      state.view = key;
      collapseAll();
      state.view = current;
    }
  }
  drawMemory();
  render();
})();
