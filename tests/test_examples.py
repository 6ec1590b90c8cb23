"""The examples: digits trains both models to >= 95% held-out accuracy; the char-RNN's
loss falls and its compiled while_loop sampler matches a numpy sampler."""
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_train_digits_reaches_95_percent(capsys, tmp_path):
    pytest.importorskip("sklearn", reason="scikit-learn (extra 'examples') is not installed")
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import train_digits
        accuracy = train_digits.main(["--epochs", "10", "--out", str(tmp_path)])
    finally:
        sys.path.remove(str(ROOT / "examples"))
    out = capsys.readouterr().out
    assert "test accuracy" in out and "epoch 10" in out
    assert accuracy["mlp"] >= 0.95, accuracy
    assert accuracy["cnn"] >= 0.95, accuracy
    import graphc_runtime
    import numpy as np
    model = graphc_runtime.load(str(tmp_path / "digits_mlp.gcx"))
    x = np.load(tmp_path / "x_test.npy")
    assert model(x_test=x).shape == (len(x),)
    assert (tmp_path / "digits_cnn.html").read_text().startswith("<!DOCTYPE html>")


def test_char_rnn_loss_falls_and_the_sampler_matches_the_reference(capsys, tmp_path):
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import char_rnn
        char_rnn.main(["--steps", "60", "--out", str(tmp_path / "rnn.gcx")])
    finally:
        sys.path.remove(str(ROOT / "examples"))
    import json
    import numpy as np
    out = capsys.readouterr().out
    result = json.loads(out.strip().splitlines()[-1])
    assert result["last_loss"] < 0.75 * result["first_loss"], result
    assert (tmp_path / "rnn.gcx").exists()
    # the compiled greedy sampler (a while_loop) against the reference interpreter
    V, E, H = 7, 4, 8
    _, step, _ = char_rnn.build_step(V, E, H, T=5, B=2)
    sampler = char_rnn.build_sampler(step, V, E, H, length=12)
    got = sampler(start=np.int32(3))
    assert 0 < int(got["n"]) <= 12
    ref = char_rnn.reference_sample(step, V, H, 3, 12)
    assert int(got["n"]) == len(ref) and list(got["text"][:len(ref)]) == ref
