"""The benchmark harness runs end to end (tiny sizes) and records what it prints."""
import json

from bench.__main__ import main


def test_bench_runs_every_workload_and_writes_json(tmp_path, capsys):
    out = tmp_path / "results.json"
    result = main(["--n", "256", "--repeat", "2", "--json", str(out)])
    names = [r["workload"][:2] for r in result["rows"]]
    assert names == ["W1", "W2", "W3", "W4", "W5", "W6", "W7", "W8"]
    for row in result["rows"]:
        assert row["graphc_ms"] > 0
        assert row["peers"].get("numpy", {"ratio": 1})["ratio"] > 0
    for row in result["rows"][:3]:
        assert 0 < row["fraction_of_bandwidth"]
    assert 0 < result["rows"][3]["fraction_of_sgemm"]
    assert json.loads(out.read_text())["rows"][0]["workload"].startswith("W1")
    printed = capsys.readouterr().out
    assert "machine: copy" in printed and "W8 CNN step" in printed
    import llvmlite
    assert f"llvmlite {llvmlite.__version__}, llvm " in printed
    assert result["versions"]["llvmlite"] == llvmlite.__version__


def test_onnx_bench_compares_with_onnxruntime(capsys):
    import pytest
    pytest.importorskip("onnxruntime", reason="onnxruntime (test extra) is not installed")
    from bench.onnx import main as onnx_main
    assert onnx_main(["--quick", "--models", "mobilenet", "gpt"]) == 0
    printed = capsys.readouterr().out
    assert "graphc vs onnxruntime" in printed and "geometric mean ratio" in printed
    assert "mobilenet" in printed and "gpt" in printed
    # a CNN at 224 x 224 (the real sizes' table): it matches onnxruntime (the exit code)
    assert onnx_main(["--quick", "--real", "--models", "mobilenet_v2"]) == 0
    assert "mobilenet_v2     1" in capsys.readouterr().out


def test_control_flow_bench_runs(capsys):
    from bench.control import main as control_main
    assert control_main(["--quick"]) == 0
    printed = capsys.readouterr().out
    assert "W9 LSTM step" in printed and "W10 CG Poisson" in printed
    assert "numpy/graphc" in printed and "at 4x the steps" in printed
    residual = float(printed.split("residual ")[1].split()[0])
    assert residual < 1e-3


def test_symbolic_bench_runs(capsys):
    from bench.symbolic import main as symbolic_main
    assert symbolic_main(["--quick", "--repeat", "2"]) == 0
    printed = capsys.readouterr().out
    assert "W5s MLP Adam step, symbolic batch at 64" in printed and "static" in printed
    assert "W6s x+y" in printed


def test_fma_peak_runs_and_its_loop_computes(capsys):
    """bench.fma_peak: the register FMA loop compiles for the host, runs on every core
    and returns a finite value (the kernel's sum: nothing optimized away)."""
    import math
    from bench import fma_peak
    call, _engine = fma_peak._kernel(8, 4)
    assert math.isfinite(call(10)) and call(10) != call(20)
    assert fma_peak.peak(8, accumulators=4, rounds=10_000, threads=2) > 0
    fma_peak.main(["--rounds", "10000"])
    assert "GFLOP/s" in capsys.readouterr().out


def test_recompute_bench_runs_and_checkpointing_shrinks_the_arena(capsys):
    from bench.recompute import main as recompute_main
    assert recompute_main(["--layers", "2", "--hidden", "64", "--seq", "32", "--batch", "2",
                           "--vocab", "128", "--repeat", "1"]) == 0
    printed = capsys.readouterr().out
    first = printed.split("first-step loss: plain ")[1]
    assert first.split(",")[0] == first.split("checkpointed ")[1].split()[0]
    lower = int(printed.split("MiB (")[1].split("%")[0])
    assert lower > 20, printed


def test_pipeline_bench_runs_in_one_process(capsys):
    from bench.pipeline import main as pipeline_main
    assert pipeline_main(["--layers", "2", "--hidden", "32", "--seq", "16", "--vocab", "64",
                          "--microbatches", "2", "--repeat", "1"]) == 0
    printed = capsys.readouterr().out
    for name in ("gpipe", "1f1b", "1f1b recomputing"):
        assert f"rank 0 {name}" in printed
    losses = {line.split("loss ")[1] for line in printed.splitlines() if "loss " in line}
    assert len(losses) == 1, printed          # every schedule computes the same step


def test_low_precision_bench_runs_and_checks_its_products(capsys):
    from bench.lowp import main as lowp_main
    assert lowp_main(["--shapes", "square 1024", "--repeat", "3", "--no-training"]) == 0
    out = capsys.readouterr().out
    assert "1024x1024x1024" in out and "bfloat16 products:" in out
