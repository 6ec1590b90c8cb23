"""Exporter-shaped models (bench/onnx_models.py: ResNet-style, MobileNet-style, BERT-style,
GPT-style) imported and compiled, against onnxruntime on random inputs; one fine-tuned."""
import numpy as np
import pytest

pytest.importorskip("onnx", reason="the onnx extra is not installed")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime (test extra) is not installed")

import graphc as gc  # noqa: E402
import graphc.onnx as gonnx  # noqa: E402
from bench.onnx_models import MODELS, REAL_MODELS  # noqa: E402


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("batch", [1, 3])
def test_model_matches_onnxruntime(name, batch, rng):
    model, make_feeds = MODELS[name](batch)
    exe = gonnx.compile(model)
    for _ in range(2):                       # fresh inputs each call
        feeds = make_feeds(rng)
        want = _ort(model, feeds)
        got = exe(**feeds)
        assert got.keys() == want.keys()
        for k in want:
            assert got[k].shape == want[k].shape and got[k].dtype == want[k].dtype
            np.testing.assert_allclose(got[k], want[k], rtol=1e-3,
                                       atol=1e-3 * np.abs(want[k]).max())


@pytest.mark.parametrize("name, build", [
    ("resnext50", lambda: REAL_MODELS["resnext50"](2, size=64, depths=(1, 1, 1, 1))),
    ("wav2vec2", lambda: REAL_MODELS["wav2vec2"](2, seconds=0.25, layers=1))])
def test_grouped_convolution_models_match_onnxruntime(name, build, rng):
    """ResNeXt-style (3 x 3 convolutions with 32 groups) and wav2vec2-style (1-D feature
    convolutions, the 16-group positional convolution), reduced in size."""
    model, make_feeds = build()
    exe = gonnx.compile(model)
    feeds = make_feeds(rng)
    want = _ort(model, feeds)
    got = exe(**feeds)
    for k in want:
        assert got[k].shape == want[k].shape
        np.testing.assert_allclose(got[k], want[k], rtol=1e-3,
                                   atol=1e-3 * np.abs(want[k]).max())
    assert "dot_general(" in exe.dump("optimized")


def test_efficientnet_style_model_matches_onnxruntime(rng):
    """EfficientNet-style MBConv blocks (SiLU, depthwise 3 x 3 and 5 x 5 at strides 1
    and 2, squeeze-and-excitation) at 64 x 64, batch 2: against onnxruntime, and the
    depthwise convolutions run as the product kernels' layout nests or loop kernels and
    the squeeze-and-excitation's 1 x 1 convolutions of one position as products of the
    images' channel vectors, never as the direct convolution."""
    model, make_feeds = REAL_MODELS["efficientnet"](2, size=64)
    exe = gonnx.compile(model)
    feeds = make_feeds(rng)
    want = _ort(model, feeds)
    got = exe(**feeds)
    assert got["logits"].shape == want["logits"].shape == (2, 1000)
    np.testing.assert_allclose(got["logits"], want["logits"], rtol=1e-3,
                               atol=1e-3 * np.abs(want["logits"]).max())
    optimized = exe.dump("optimized").splitlines()
    assert not [line for line in optimized if " conv(" in line]
    squeeze_excite = [line for line in optimized if "dot_general(" in line and
                      "rhs_contracting=(1,)" in line and "(Conv)" in line]
    assert len(squeeze_excite) == 2 * 16          # two per MBConv block


def test_batch_norm_folds_into_the_convolutions(rng):
    from graphc.onnx.rewrites import fold_batch_norm
    model, make_feeds = MODELS["resnet"](1)
    n_bn = sum(n.op_type == "BatchNormalization" for n in model.graph.node)
    folded, count = fold_batch_norm(model)
    assert count == n_bn > 0
    assert not any(n.op_type == "BatchNormalization" for n in folded.graph.node)
    assert sum(n.op_type == "BatchNormalization" for n in model.graph.node) == n_bn
    feeds = make_feeds(rng)
    np.testing.assert_allclose(_ort(folded, feeds)["logits"], _ort(model, feeds)["logits"],
                               rtol=1e-4, atol=1e-5)
    text = gonnx.compile(model).dump("optimized")
    # the per-channel (x - mean) * scale + beta is gone: only the conv bias remains
    assert " sub(" not in text


@pytest.mark.parametrize("name", ["resnet", "bert"])
def test_imported_model_fine_tunes(name, rng):
    model, make_feeds = MODELS[name](4)
    imported = gonnx.import_model(model, trainable=True)
    params = list(imported.params.values())
    assert len(params) > 10
    feeds = make_feeds(rng)
    (out,) = imported.outputs.values()
    with imported.graph:
        flat = gc.reshape(out, (out.shape[0], -1))
        target = gc.constant(rng.normal(size=flat.shape).astype(np.float32))
        loss = ((flat - target) ** 2).mean()
        step = gc.compile({"loss": loss}, inputs=list(imported.inputs.values()),
                          updates=gc.optim.adam(loss, params, lr=1e-3))
    losses = [float(step(**feeds)["loss"]) for _ in range(8)]
    assert losses[-1] < losses[0] * 0.9, losses
