"""Control-flow workloads: `python -m bench.control` (in `make bench`).

W9  an LSTM training step (T=64, B=32, I=H=256: forward, backward through the scan, an
    SGD update of the weights) against torch eager `nn.LSTM` (+ backward + SGD) and a
    jax.jit of `lax.scan` with `jax.value_and_grad`.
W10 a conjugate-gradient solve of a 2-D Poisson problem (5-point stencil on a 128x128
    grid, until the residual norm falls below 1e-4 of the start) written with while_loop,
    against numpy (a Python loop) and jax.jit of `lax.while_loop`.
Both print the ratio peer/graphc (> 1: graphc is faster), measured in the same run, and
graphc's compile time at two trip counts (it must not grow with the trip count).
"""
from __future__ import annotations

import argparse
import importlib.util
import time

import numpy as np

import graphc as gc


def interleaved_ms(fns, repeat):
    from .__main__ import interleaved_ms
    return interleaved_ms(fns, repeat)


# -- W9: LSTM training step ------------------------------------------------------------

def lstm_data(T=64, B=32, H=256, seed=0):
    rng = np.random.default_rng(seed)
    s = 1 / np.sqrt(H)
    return {"xs": rng.standard_normal((T, B, H)).astype(np.float32),
            "target": rng.standard_normal((T, B, H)).astype(np.float32),
            "w_ih": rng.uniform(-s, s, (H, 4 * H)).astype(np.float32),
            "w_hh": rng.uniform(-s, s, (H, 4 * H)).astype(np.float32),
            "b": np.zeros(4 * H, np.float32)}


LR = 0.01


def lstm_graphc(d, checkpoint=False):
    with gc.Graph("w9"):
        xs = gc.placeholder(d["xs"].shape, name="xs")
        target = gc.placeholder(d["target"].shape, name="target")
        params = [gc.variable(d[k].copy(), name=k) for k in ("w_ih", "w_hh", "b")]
        ys, _ = gc.nn.lstm(xs, *params, checkpoint=checkpoint)
        loss = ((ys - target) ** 2).mean()
        grads = gc.grad(loss, params)
        step = gc.compile(loss, updates={p: p - LR * g for p, g in zip(params, grads)})
    return step


def lstm_torch(d):
    import torch
    T, B, H = d["xs"].shape
    torch.set_num_threads(max(1, __import__("os").cpu_count() or 1))
    m = torch.nn.LSTM(H, H)
    with torch.no_grad():
        m.weight_ih_l0.copy_(torch.tensor(d["w_ih"].T))
        m.weight_hh_l0.copy_(torch.tensor(d["w_hh"].T))
        m.bias_ih_l0.zero_()
        m.bias_hh_l0.zero_()
    opt = torch.optim.SGD(m.parameters(), lr=LR)
    xs, target = torch.tensor(d["xs"]), torch.tensor(d["target"])

    def step():
        with torch.enable_grad():       # whatever the caller's grad mode
            opt.zero_grad()
            ys, _ = m(xs)
            loss = ((ys - target) ** 2).mean()
            loss.backward()
            opt.step()
            return loss.item()
    return step


def lstm_jax(d):
    import jax
    import jax.numpy as jnp
    H = d["xs"].shape[2]

    def loss_fn(params, xs, target):
        w_ih, w_hh, b = params
        proj = xs @ w_ih + b

        def cell(carry, p):
            h, c = carry
            z = p + h @ w_hh
            i, f = jax.nn.sigmoid(z[:, :H]), jax.nn.sigmoid(z[:, H:2 * H])
            g, o = jnp.tanh(z[:, 2 * H:3 * H]), jax.nn.sigmoid(z[:, 3 * H:])
            c = f * c + i * g
            h = o * jnp.tanh(c)
            return (h, c), h
        zeros = jnp.zeros(xs.shape[1:], xs.dtype)
        _, ys = jax.lax.scan(cell, (zeros, zeros), proj)
        return ((ys - target) ** 2).mean()

    @jax.jit
    def update(params, xs, target):
        loss, g = jax.value_and_grad(loss_fn)(params, xs, target)
        return loss, [p - LR * gi for p, gi in zip(params, g)]
    state = {"p": [jnp.asarray(d[k]) for k in ("w_ih", "w_hh", "b")]}
    xs, target = jnp.asarray(d["xs"]), jnp.asarray(d["target"])

    def step():
        loss, state["p"] = update(state["p"], xs, target)
        return float(loss)
    return step


# -- W10: conjugate gradients ---------------------------------------------------------------

def poisson_rhs(n=128, seed=0):
    return np.random.default_rng(seed).standard_normal((n, n)).astype(np.float32)


TOL = 1e-4
MAX_STEPS = 2000


def _laplacian_graphc(u):
    p = gc.pad(u, ((1, 1), (1, 1)))
    return 4.0 * u - p[:-2, 1:-1] - p[2:, 1:-1] - p[1:-1, :-2] - p[1:-1, 2:]


def cg_graphc(n=128, max_steps=MAX_STEPS, device="cpu"):
    with gc.Graph("w10"):
        b = gc.placeholder((n, n), name="b")
        x0 = gc.zeros((n, n))
        rr0 = (b * b).sum()
        stop = rr0 * (TOL * TOL)

        def cond(s):
            k, x, r, p, rr = s
            return (rr > stop) & (k < max_steps)

        def body(s):
            k, x, r, p, rr = s
            ap = _laplacian_graphc(p)
            alpha = rr / (p * ap).sum()
            x = x + alpha * p
            r = r - alpha * ap
            rr_new = (r * r).sum()
            p = r + (rr_new / rr) * p
            return k + 1, x, r, p, rr_new
        k, x, *_ = gc.while_loop(cond, body, (0, x0, b, b, rr0))
        return gc.compile({"x": x, "steps": k}, device=device)


def _laplacian_np(u):
    p = np.pad(u, 1)
    return 4 * u - p[:-2, 1:-1] - p[2:, 1:-1] - p[1:-1, :-2] - p[1:-1, 2:]


def cg_numpy(b, max_steps=MAX_STEPS):
    x = np.zeros_like(b)
    r = b.copy()
    p = r.copy()
    rr = np.float32((r * r).sum())
    stop = rr * np.float32(TOL * TOL)
    k = 0
    while rr > stop and k < max_steps:
        ap = _laplacian_np(p)
        alpha = rr / (p * ap).sum()
        x = x + alpha * p
        r = r - alpha * ap
        rr_new = (r * r).sum()
        p = r + (rr_new / rr) * p
        rr, k = rr_new, k + 1
    return x, k


def cg_jax(max_steps=MAX_STEPS):
    import jax
    import jax.numpy as jnp

    def lap(u):
        p = jnp.pad(u, 1)
        return 4 * u - p[:-2, 1:-1] - p[2:, 1:-1] - p[1:-1, :-2] - p[1:-1, 2:]

    @jax.jit
    def solve(b):
        rr0 = (b * b).sum()
        stop = rr0 * TOL * TOL

        def cond(s):
            return (s[4] > stop) & (s[0] < max_steps)

        def body(s):
            k, x, r, p, rr = s
            ap = lap(p)
            alpha = rr / (p * ap).sum()
            x, r = x + alpha * p, r - alpha * ap
            rr_new = (r * r).sum()
            return k + 1, x, r, r + (rr_new / rr) * p, rr_new
        k, x, *_ = jax.lax.while_loop(cond, body, (0, jnp.zeros_like(b), b, b, rr0))
        return x, k
    return solve


# -- the run ---------------------------------------------------------------------------------

def run(repeat: int = 5, quick: bool = False) -> list[dict]:
    rows = []
    have_torch = importlib.util.find_spec("torch") is not None
    have_jax = importlib.util.find_spec("jax") is not None

    d = lstm_data(T=8, B=8, H=64) if quick else lstm_data()
    t0 = time.perf_counter()
    step = lstm_graphc(d)
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    T, B, H = d["xs"].shape
    lstm_graphc(lstm_data(T=4 * T, B=B, H=H, seed=1))
    compile_4x = time.perf_counter() - t0
    fns = {"graphc": lambda: step(xs=d["xs"], target=d["target"])}
    if have_torch:
        fns["torch"] = lstm_torch(d)
    if have_jax:
        fns["jax"] = lstm_jax(d)
    row = {"workload": f"W9 LSTM step T={T} B={B} H={H}", "compile_s": compile_s,
           "compile_s_4x_steps": compile_4x}
    row.update({f"{name}_ms": ms for name, ms in interleaved_ms(fns, repeat).items()})
    rows.append(row)

    n = 64 if quick else 128
    b = poisson_rhs(n)
    t0 = time.perf_counter()
    solve = cg_graphc(n)
    compile_s = time.perf_counter() - t0
    out = solve(b=b)
    x_np, k_np = cg_numpy(b)
    err = float(np.abs(_laplacian_np(out["x"]) - b).max() / np.abs(b).max())
    fns = {"graphc": lambda: solve(b=b), "numpy": lambda: cg_numpy(b)}
    if have_jax:
        jsolve = cg_jax()
        fns["jax"] = lambda: jsolve(b)[0].block_until_ready()
    row = {"workload": f"W10 CG Poisson {n}x{n}", "steps": int(out["steps"]),
           "numpy_steps": k_np, "residual": err, "compile_s": compile_s}
    row.update({f"{name}_ms": ms for name, ms in interleaved_ms(fns, repeat).items()})
    rows.append(row)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true", help="smaller problems, fewer repeats")
    args = p.parse_args(argv)
    rows = run(repeat=3 if args.quick else 15, quick=args.quick)
    for r in rows:
        line = f"{r['workload']:<32} graphc {r['graphc_ms']:9.2f} ms"
        for peer in ("numpy", "torch", "jax"):
            if f"{peer}_ms" in r:
                line += f"   {peer}/graphc {r[f'{peer}_ms'] / r['graphc_ms']:6.2f}"
        line += f"   compile {r['compile_s']:.2f} s"
        if "compile_s_4x_steps" in r:
            line += f" ({r['compile_s_4x_steps']:.2f} s at 4x the steps)"
        if "steps" in r:
            line += f"   {r['steps']} steps (numpy {r['numpy_steps']}), residual {r['residual']:.1e}"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
