"""The digits example trains both models to >= 95% held-out accuracy."""
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
