"""The digits example trains both models to >= 95% held-out accuracy."""
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_train_digits_reaches_95_percent(capsys):
    pytest.importorskip("sklearn", reason="scikit-learn (extra 'examples') is not installed")
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import train_digits
        accuracy = train_digits.main(["--epochs", "10"])
    finally:
        sys.path.remove(str(ROOT / "examples"))
    out = capsys.readouterr().out
    assert "test accuracy" in out and "epoch 10" in out
    assert accuracy["mlp"] >= 0.95, accuracy
    assert accuracy["cnn"] >= 0.95, accuracy
