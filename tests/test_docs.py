"""Every Python code block in README.md and docs/ runs as written, pasted into a fresh
interpreter (the ONNX page's block is given the model.onnx file it names)."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md"] + sorted(os.path.join("docs", f) for f in os.listdir(
    os.path.join(ROOT, "docs")) if f.endswith(".md"))


def _blocks():
    out = []
    for page in PAGES:
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            text = f.read()
        for k, m in enumerate(re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M)):
            line = text[:m.start()].count("\n") + 2
            out.append(pytest.param(page, line, m.group(1), id=f"{page}:{line}"))
    return out


def _classifier_onnx(path):
    """A small text classifier (bench's BERT-style encoder, mean-pooled, 2 classes)."""
    onnx = pytest.importorskip("onnx", reason="the onnx extra is not installed")
    from onnx import TensorProto, helper, numpy_helper
    from bench import onnx_models
    m, _ = onnx_models.bert(2, seq=16, hidden=32, heads=2, layers=1)
    g = m.graph
    w = np.random.default_rng(1).standard_normal((32, 2)).astype(np.float32) * 0.1
    g.initializer.append(numpy_helper.from_array(w, "classifier_w"))
    g.initializer.append(numpy_helper.from_array(np.array([1], np.int64), "pool_axes"))
    opset = next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
    pool = helper.make_node("ReduceMean", ["last_hidden_state", "pool_axes"], ["pooled"],
                            keepdims=0) if opset >= 18 else \
        helper.make_node("ReduceMean", ["last_hidden_state"], ["pooled"], axes=[1], keepdims=0)
    g.node.extend([pool, helper.make_node("MatMul", ["pooled", "classifier_w"], ["logits"])])
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 2]))
    onnx.save(m, str(path))


def test_pages_have_blocks():
    assert len(_blocks()) >= 4


@pytest.mark.parametrize("page,line,code", _blocks())
def test_code_block_runs_as_written(page, line, code, tmp_path):
    if "model.onnx" in code:
        _classifier_onnx(tmp_path / "model.onnx")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, f"{page} line {line}:\n{out.stderr[-3000:]}"


def test_the_architecture_page_lists_every_pass_of_every_backend():
    """docs/architecture.md's table of passes is the pipeline's list, in order, with each
    backend's lowering passes in their place."""
    from graphc.backends import backend_for, backends
    from graphc.passes.pipeline import graph_pipeline
    text = open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8").read()
    table = text[text.index("<!-- passes:"):]
    listed = re.findall(r"^\| `(\w+)` \|", table, re.M)
    for kind in backends():
        names = [name for name, _ in graph_pipeline(backend_for(kind, {}).lowering_passes())]
        assert [n for n in listed if n in names] == names, kind
    everything = {name for kind in backends()
                  for name, _ in graph_pipeline(backend_for(kind, {}).lowering_passes())}
    assert set(listed) == everything
