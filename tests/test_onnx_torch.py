"""Models exported by torch.onnx.export (torch 2.13, dynamo exporter with onnxscript):
Hugging Face BERT and GPT-2 built from configs with random weights (HF_HUB_OFFLINE=1,
nothing downloaded), a ResNet-style and a MobileNet-style CNN; each imported, compiled and
compared with onnxruntime (rtol 1e-3) on random inputs."""
import os
import warnings

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the onnx extra is not installed")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime (test extra) is not installed")
torch = pytest.importorskip("torch", reason="torch is not installed (extra 'export')")
pytest.importorskip("onnxscript", reason="onnxscript is not installed (extra 'export')")
transformers = pytest.importorskip("transformers",
                                   reason="transformers is not installed (extra 'export')")
os.environ["HF_HUB_OFFLINE"] = "1"

import graphc.onnx as gonnx  # noqa: E402

nn = torch.nn


class _Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c),
                                  nn.ReLU(), nn.Conv2d(c, c, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(c))

    def forward(self, x):
        return torch.relu(x + self.body(x))


class _GPT2Logits(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.m = transformers.GPT2LMHeadModel(cfg)

    def forward(self, ids):
        return self.m(ids, use_cache=False).logits


def _randomize_batch_norms(model):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
    return model


def _models():
    torch.manual_seed(0)
    ids = torch.randint(0, 1000, (2, 32))
    mask = torch.ones(2, 32, dtype=torch.int64)
    mask[1, 20:] = 0
    bert = transformers.BertModel(transformers.BertConfig(
        vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=512, max_position_embeddings=128))
    gpt2 = _GPT2Logits(transformers.GPT2Config(vocab_size=1000, n_embd=128, n_layer=2,
                                               n_head=4, n_positions=128, bos_token_id=0,
                                               eos_token_id=0))
    resnet = _randomize_batch_norms(nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), _Block(16),
        nn.MaxPool2d(2), _Block(16), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)))
    mobilenet = _randomize_batch_norms(nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU6(),
        nn.Conv2d(16, 16, 3, 1, 1, groups=16), nn.BatchNorm2d(16), nn.ReLU6(),
        nn.Conv2d(16, 32, 1), nn.BatchNorm2d(32), nn.ReLU6(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(32, 10)))
    image = torch.randn(2, 3, 32, 32)
    return {"bert": (bert, (ids, mask), ["input_ids", "attention_mask"]),
            "gpt2": (gpt2, (ids,), ["input_ids"]),
            "resnet": (resnet, (image,), ["image"]),
            "mobilenet": (mobilenet, (image,), ["image"])}


@pytest.mark.parametrize("name", ["bert", "gpt2", "resnet", "mobilenet"])
def test_exported_model_matches_onnxruntime(name, tmp_path, rng):
    model, args, names = _models()[name]
    model.eval()
    path = str(tmp_path / f"{name}.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, path, input_names=names, dynamo=True)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    exe = gonnx.compile(path)
    for trial in range(2):
        feeds = {n: a.numpy() for n, a in zip(names, args)}
        if trial:                                   # fresh inputs, same shapes
            feeds = {n: (rng.integers(0, 1000, v.shape).astype(v.dtype) if n == "input_ids"
                         else v if n == "attention_mask"
                         else rng.normal(size=v.shape).astype(v.dtype))
                     for n, v in feeds.items()}
        want = sess.run(None, feeds)
        got = list(exe(**feeds).values())
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-3 * np.abs(w).max())


@pytest.mark.parametrize("name", ["bert", "gpt2", "mobilenet"])
def test_exported_with_a_dynamic_batch_imports_one_symbolic_program(name, tmp_path, rng):
    """torch.onnx.export(..., dynamic_shapes=) writes dim_params; graphc imports them as
    one symbolic batch and the compiled model matches onnxruntime at several sizes."""
    model, args, names = _models()[name]
    model.eval()
    path = str(tmp_path / f"{name}_dynamic.onnx")
    batch = torch.export.Dim("batch", min=1, max=64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, path, input_names=names, dynamo=True,
                          dynamic_shapes=tuple({0: batch} for _ in names))
    imported = gonnx.import_model(path)
    assert all(str(t.shape[0]) == "batch" for t in imported.inputs.values())
    exe = gonnx.compile(path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for n in (1, 3, 5):
        feeds = {}
        for nm, a in zip(names, args):
            shape = (n,) + tuple(a.shape[1:])
            feeds[nm] = (rng.integers(0, 1000, shape).astype(np.int64) if nm == "input_ids"
                         else np.ones(shape, np.int64) if nm == "attention_mask"
                         else rng.normal(size=shape).astype(np.float32))
        want = sess.run(None, feeds)
        got = list(exe(**feeds).values())
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-3 * np.abs(w).max())
