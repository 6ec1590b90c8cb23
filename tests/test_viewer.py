"""The interactive viewer in a real browser (headless Chromium through Playwright): the
page opens without console errors, shows every kernel and node, search narrows the view,
clicks open the details panel, hovers give types, the views switch, and a 5,000-node
graph lays out in a few seconds. Skipped with the reason where no browser is installed
(README: apt-get install chromium; the test extra brings playwright)."""
import json
import os
import re
import shutil
import time

import numpy as np
import pytest

import graphc as gc
from graphc import viewer

HERE = os.path.basename(__file__)


def find_chromium():
    for name in (os.environ.get("GRAPHC_CHROMIUM"), "chromium", "chromium-browser",
                 "google-chrome"):
        path = name and shutil.which(name)
        if path:
            return path
    return None


CHROMIUM = find_chromium()
try:
    from playwright.sync_api import sync_playwright
except ImportError:
    sync_playwright = None

pytestmark = [
    pytest.mark.skipif(sync_playwright is None, reason="the playwright package is not "
                       "installed (pip install -e '.[test]')"),
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium found (Debian: apt-get install "
                       "chromium; or set GRAPHC_CHROMIUM to a Chromium/Chrome binary)"),
]

FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--disable-dev-shm-usage"]


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


class Page:
    """A loaded viewer page and the console errors it produced."""

    def __init__(self, browser, path, width=1400, height=1000):
        self.page = browser.new_page(viewport={"width": width, "height": height})
        self.errors = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error"
                     else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.requests = []
        self.page.on("request", lambda r: self.requests.append(r.url))
        start = time.perf_counter()
        self.page.goto(f"file://{path}")
        self.ready()
        self.seconds = time.perf_counter() - start
        self.data = json.loads(self.page.inner_text("#graphc-data"))

    def ready(self):
        self.page.wait_for_function("document.body.dataset.ready === '1'", timeout=60000)

    def count(self, selector):
        return self.page.locator(selector).count()


def mlp_step():
    g = gc.Graph("mlp_step")
    with g:
        x = gc.placeholder((32, 20), name="x")
        y = gc.placeholder((32,), "int32", name="y")
        w = gc.variable(np.random.default_rng(0).standard_normal((20, 10)).astype(np.float32)
                        * 0.1, name="w")
        b = gc.variable(np.zeros(10, np.float32), name="b")
        loss = gc.nn.softmax_cross_entropy(gc.relu(x @ w + b), y).mean()
        gw, gb = gc.grad(loss, [w, b])
        exe = gc.compile({"loss": loss}, updates={w: w - 0.1 * gw, b: b - 0.1 * gb})
    return exe


@pytest.fixture(scope="module")
def small_page(browser, tmp_path_factory):
    path = tmp_path_factory.mktemp("viewer") / "mlp.html"
    mlp_step().viz(str(path))
    page = Page(browser, str(path))
    yield page
    page.page.close()


def test_opens_without_errors_and_shows_every_kernel_and_node(small_page):
    page = small_page
    fused = page.data["views"]["fused"]
    assert len(fused["nodes"]) < page.data["collapse_above"]        # expanded at start
    assert page.errors == []
    shown = {int(v) for v in page.page.eval_on_selector_all(
        "[data-node]", "els => els.map(e => e.dataset.node)")}
    assert shown == {n["id"] for n in fused["nodes"]}
    kernels_with_nodes = {k["index"] for k in page.data["kernels"] if k["nodes"]}
    assert {int(v) for v in page.page.eval_on_selector_all(
        "[data-kernel]", "els => els.map(e => e.dataset.kernel)")} == kernels_with_nodes
    assert page.count("path.edge") >= len(fused["nodes"]) - 4      # arrowed edges drawn
    assert page.page.get_attribute("path.edge", "marker-end") == "url(#arrow)"
    assert page.count("#memory rect.buffer") == len(page.data["memory"]["buffers"])
    assert "live lower bound" in page.page.inner_text("#memory-summary")


def test_search_narrows_the_view_and_clearing_restores_it(small_page):
    page = small_page.page
    before = small_page.count("[data-node]")
    page.fill("#search", "dot_general")
    page.wait_for_function("document.getElementById('matches').textContent.includes('match')")
    small_page.ready()
    wanted = [n["id"] for n in small_page.data["views"]["fused"]["nodes"]
              if "dot_general" in n["op"]]
    assert 0 < small_page.count("[data-node]") == len(wanted) < before
    assert page.inner_text("#matches") == f"{len(wanted)} match" + ("es" if len(wanted) != 1
                                                                    else "")
    page.fill("#search", "")
    page.wait_for_function(f"document.querySelectorAll('[data-node]').length === {before}")


def test_click_opens_details_and_edges_show_types(small_page):
    page = small_page.page
    dot = next(n for n in small_page.data["views"]["fused"]["nodes"] if n["op"] == "dot_general")
    page.click(f"[data-node='{dot['id']}']")
    panel = page.inner_text("#details")
    assert f"%{dot['id']} dot_general" in panel and dot["type"] in panel
    assert HERE in panel                                  # the user's file:line
    assert "kernel" in panel and "bytes read" in panel and "arena" in panel
    assert page.get_attribute("#details", "data-selected-node") == str(dot["id"])
    x, y = page.evaluate("""() => {
        const path = document.querySelector('path.edge');
        const p = path.getPointAtLength(path.getTotalLength() / 2);
        const m = path.getScreenCTM();
        return [p.x * m.a + p.y * m.c + m.e, p.x * m.b + p.y * m.d + m.f]; }""")
    page.mouse.move(x, y)
    tip = page.inner_text("#tooltip")
    assert re.search(r"(f32|i32|bool)\[", tip) and "→" in tip
    page.locator("#memory rect.buffer").first.hover(force=True)
    assert "bytes at offset" in page.inner_text("#tooltip") or \
        "at offset" in page.inner_text("#tooltip")


def test_views_switch_between_graph_optimized_and_fused(small_page):
    page = small_page.page
    views = small_page.data["views"]
    assert set(views) == {"graph", "optimized", "fused"}
    for key in ("graph", "optimized", "fused"):
        page.select_option("#view", key)
        page.wait_for_function(
            f"document.querySelectorAll('[data-node]').length === {len(views[key]['nodes'])}")
        small_page.ready()
        assert (small_page.count("[data-kernel]") > 0) == (key == "fused")
    assert small_page.errors == []


def cnn_page(browser, tmp_path) -> Page:
    """The viewer page of the digits CNN's training step (over 200 nodes)."""
    from bench.__main__ import cnn_graph
    g, loss, updates = cnn_graph(batch=8)
    with g:
        exe = gc.compile({"loss": loss}, updates=updates, opt_level=0)
    path = tmp_path / "cnn.html"
    exe.viz(str(path))
    return Page(browser, str(path))


def test_cnn_step_starts_collapsed_and_kernels_expand(browser, tmp_path):
    page = cnn_page(browser, tmp_path)
    data = page.data
    assert len(data["views"]["fused"]["nodes"]) > data["collapse_above"]
    kernels = [k for k in data["kernels"] if k["nodes"]]
    assert page.count(".kernel.collapsed") == len(kernels)
    biggest = max(kernels, key=lambda k: len(k["nodes"]))
    before = page.count("[data-node]")
    page.page.click(f".kernel.collapsed[data-kernel='{biggest['index']}']")
    page.page.wait_for_function(
        f"document.querySelectorAll('[data-node]').length === {before + len(biggest['nodes'])}")
    assert "fused ops" in page.page.inner_text("#details")
    page.page.click("#expand-all")
    page.page.wait_for_function("document.querySelectorAll('[data-node]').length === "
                                f"{len(data['views']['fused']['nodes'])}")
    assert page.errors == []


def test_a_5000_node_graph_lays_out_in_a_few_seconds(browser, tmp_path):
    with gc.Graph("big") as g:
        x = gc.placeholder((64, 16), name="x")
        outs = [gc.tanh(x[i % 64] * (1.0 + i / 1000.0) + 0.01 * i).sum() * (i + 1.0)
                for i in range(400)]
        exe = gc.compile(gc.stack(outs).sum(), opt_level=0)
    path = tmp_path / "big.html"
    exe.viz(str(path))
    page = Page(browser, str(path))
    nodes = len(page.data["views"]["fused"]["nodes"])
    assert nodes >= 4000
    assert page.seconds < 20, f"{nodes} nodes took {page.seconds:.1f} s to open and lay out"
    assert page.count("[data-kernel]") == len([k for k in page.data["kernels"] if k["nodes"]])
    assert page.errors == []
    print(f"{nodes} nodes: opened and laid out in {page.seconds:.2f} s "
          f"(layout {page.page.get_attribute('body', 'data-layout-ms')} ms)")


def test_artifact_page_from_the_command_line(browser, tmp_path):
    from graphc.cli import main as cli
    exe = mlp_step()
    exe.save(str(tmp_path / "m.gcx"))
    assert cli(["viz", str(tmp_path / "m.gcx"), "-o", str(tmp_path / "m.html")]) == 0
    page = Page(browser, str(tmp_path / "m.html"))
    assert set(page.data["views"]) == {"graph", "optimized", "fused"}
    # self-contained: the page fetches nothing but itself
    assert [u for u in page.requests if not u.startswith(("file://", "data:"))] == []
    assert page.errors == []


def test_page_data_without_a_browser():
    """The data behind the page (runs everywhere, browser or not)."""
    exe = mlp_step()
    manifest = exe.manifest()
    sections = exe._info["sections"]
    data = viewer.page_data("m", sections["graph.json"].decode(),
                            json.loads(sections["fusion.json"]), manifest,
                            sections["source_graph.json"].decode())
    fused = data["views"]["fused"]
    ids = {n["id"] for n in fused["nodes"]}
    assert all(e["from"] in ids and e["to"] in ids for e in fused["edges"])
    assert all(n.get("kernel") is None or 0 <= n["kernel"] < len(data["kernels"])
               for n in fused["nodes"])
    assert sum(len(k["nodes"]) for k in data["kernels"]) == \
        len([n for n in fused["nodes"] if "kernel" in n])
    assert any(n["loc"] and HERE in n["loc"] for n in data["views"]["graph"]["nodes"])


def _namespaced_onnx(path, layers=3):
    """An ONNX model whose node names carry namespaces, as torch.onnx.export writes them."""
    onnx = pytest.importorskip("onnx", reason="the onnx extra is not installed")
    from onnx import TensorProto, helper, numpy_helper
    nodes, inits, h = [], [], "x"
    for k in range(layers):
        for part in ("attention", "output"):
            ns = f"/encoder/layer.{k}/{part}"
            w = f"encoder.layer.{k}.{part}.weight"
            inits.append(numpy_helper.from_array(
                np.random.default_rng(k).standard_normal((8, 8)).astype(np.float32), w))
            nodes += [helper.make_node("MatMul", [h, w], [f"{ns}/mm"], name=f"{ns}/MatMul"),
                      helper.make_node("Tanh", [f"{ns}/mm"], [f"{ns}/t"], name=f"{ns}/Tanh"),
                      helper.make_node("Add", [f"{ns}/t", h], [f"{ns}/out"], name=f"{ns}/Add")]
            h = f"{ns}/out"
    g = helper.make_graph(nodes, "encoder",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info(h, TensorProto.FLOAT, [4, 8])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_imported_model_namespaces_are_collapsible_groups(browser, tmp_path):
    from graphc.cli import main as cli
    _namespaced_onnx(tmp_path / "enc.onnx")
    assert cli(["viz", str(tmp_path / "enc.onnx"), "-o", str(tmp_path / "enc.html")]) == 0
    page = Page(browser, str(tmp_path / "enc.html"))
    graph = page.data["views"]["graph"]
    names = {g["name"] for g in graph["groups"]}
    assert "encoder/layer.1/attention" in names and len(names) == 6
    page.page.select_option("#view", "graph")
    page.page.wait_for_function("document.querySelectorAll('[data-group]').length === 6")
    page.ready()
    before = page.count("[data-node]")
    page.page.click("#collapse-all")
    page.page.wait_for_function("document.querySelectorAll('.kernel.collapsed[data-group]')"
                                ".length === 6")
    page.ready()
    assert page.count("[data-node]") < before
    group = page.page.locator(".kernel.collapsed[data-group]").first
    group.click()
    page.page.wait_for_function("document.querySelectorAll('.kernel.collapsed[data-group]')"
                                ".length === 5")
    assert "namespace" in page.page.inner_text("#details")
    node = next(n for n in graph["nodes"] if n["op"] == "tanh")
    assert "enc.onnx node '/encoder/layer." in node["loc"]
    assert page.errors == []


def test_zoomed_out_labels_stay_readable_and_the_minimap_follows(browser, tmp_path):
    """Zoomed out, node labels give way to kernel labels drawn at a readable size; the
    minimap shows the whole graph and where the view is; titles never run past their
    kernel's box."""
    page = cnn_page(browser, tmp_path)
    p = page.page
    assert page.count("#minimap use") == 1 and page.count("#minimap-view") == 1
    p.click("#expand-all")
    p.wait_for_function("document.querySelectorAll('.kernel.expanded').length > 0")
    page.ready()
    overflow = p.evaluate("""() => [...document.querySelectorAll('#viewport .kernel')].filter(
        g => { const r = g.querySelector('rect'), t = g.querySelector('text.title');
               return t && t.getComputedTextLength() > r.width.baseVal.value - 4; }).length""")
    assert overflow == 0
    view_before = p.get_attribute("#minimap-view", "width")
    box = p.locator("#canvas").bounding_box()
    p.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    for _ in range(40):                         # zoom out until labels give way
        if p.evaluate("document.getElementById('canvas').classList.contains('far')"):
            break
        p.mouse.wheel(0, 120)
    p.mouse.wheel(0, 120)
    p.wait_for_function("document.getElementById('canvas').classList.contains('far')")
    assert float(p.get_attribute("#minimap-view", "width")) > float(view_before)
    sizes = p.evaluate("""() => { const m = document.getElementById('viewport').getCTM();
        return [...document.querySelectorAll('#viewport .far-label, #viewport .far-node')]
          .filter(t => t.getAttribute('visibility') === 'visible' &&
                       getComputedStyle(t).display !== 'none')
          .map(t => Number(t.getAttribute('font-size')) * m.a); }""")
    assert sizes, "no label is shown when zoomed out"
    assert all(px >= 9.9 for px in sizes), sizes          # every shown label reads
    hidden = p.evaluate("getComputedStyle(document.querySelector('#viewport .node text'))"
                        ".display")
    assert hidden == "none"                               # the small, detailed lines
    p.screenshot(path=str(tmp_path / "far.png"))
    assert page.errors == []
