"""Regenerate docs/viewer-digits-cnn.png: the viewer on the digits CNN training step
(examples/train_digits.py), one kernel expanded and a node's details open.

    .venv/bin/python docs/screenshot_viewer.py      # needs Chromium and playwright
"""
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import graphc as gc  # noqa: E402
from train_digits import cnn  # noqa: E402


def main(out=os.path.join(HERE, "viewer-digits-cnn.png")) -> str:
    from playwright.sync_api import sync_playwright
    graph = gc.Graph("digits_cnn_step")
    with graph:
        forward, params = cnn(0)
        x = gc.placeholder((64, 8, 8), "float32", name="x")
        y = gc.placeholder((64,), "int32", name="y")
        loss = gc.nn.softmax_cross_entropy(forward(x), y).mean()
        step = gc.compile({"loss": loss}, updates=gc.optim.adam(loss, params, lr=1e-2))
    page_path = os.path.join(tempfile.mkdtemp(), "digits_cnn_step.html")
    step.viz(page_path)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1500, "height": 1050})
        page.goto(f"file://{page_path}")
        page.wait_for_function("document.body.dataset.ready === '1'")
        kernels = page.eval_on_selector_all(".kernel.collapsed", "els => els.map(e => "
                                            "[e.dataset.kernel, e.getBBox().width])")
        if kernels:                      # expand the first conv's patch kernel for a look
            page.click(f".kernel.collapsed[data-kernel='{kernels[0][0]}']")
            page.wait_for_function("document.body.dataset.ready === '1'")
        node = page.locator("[data-node]").nth(3)
        node.click()
        page.screenshot(path=out)
        browser.close()
    return out


if __name__ == "__main__":
    print("wrote", main())
