"""The same workloads written for numpy, jax.jit and torch eager (when installed)."""
from __future__ import annotations

import importlib.util
import time

import numpy as np

C = np.float32(0.7978845608028654)


def available() -> list:
    names = ["numpy"]
    if importlib.util.find_spec("jax"):
        names.append("jax")
    if importlib.util.find_spec("torch"):
        names.append("torch")
    return names


def workload(peer: str, name: str, data: dict):
    """A zero-argument callable running workload `name` with `peer`, or None."""
    key = name.split()[0]
    return {"numpy": _numpy, "jax": _jax, "torch": _torch}[peer](key, data)


# -- numpy ---------------------------------------------------------------------------

def _numpy(key, d):
    x, a, b = d["x"], d["a"], d["b"]
    if key == "W1":
        def w1():
            z = x * a + b
            return 0.5 * z * (1 + np.tanh(C * (z + np.float32(0.044715) * z * z * z)))
        return w1
    if key == "W2":
        def w2():
            e = np.exp(x - x.max(1, keepdims=True))
            return e / e.sum(1, keepdims=True)
        return w2
    if key == "W3":
        def w3():
            mu = x.mean(1, keepdims=True)
            dd = x - mu
            return dd / np.sqrt((dd * dd).mean(1, keepdims=True) + np.float32(1e-5)) * a + b
        return w3
    if key == "W4":
        m1, m2, bias = d["m1"], d["m2"], d["bias"]

        def w4():
            z = m1 @ m2 + bias
            return 0.5 * z * (1 + np.tanh(C * (z + np.float32(0.044715) * z * z * z)))
        return w4
    if key == "W6":
        s1, s2 = np.ones(4, np.float32), np.ones(4, np.float32)
        return lambda: s1 + s2
    return None


# -- jax -------------------------------------------------------------------------------

def _jax(key, d):
    import jax
    put = jax.device_put
    if key in ("W1", "W2", "W3"):
        x, a, b = put(d["x"]), put(d["a"]), put(d["b"])
        fns = {
            "W1": lambda x, a, b: jax.nn.gelu(x * a + b, approximate=True),
            "W2": lambda x, a, b: jax.nn.softmax(x, axis=1),
            "W3": lambda x, a, b: (x - x.mean(1, keepdims=True)) *
            jax.lax.rsqrt(x.var(1, keepdims=True) + 1e-5) * a + b,
        }
        f = jax.jit(fns[key])
        return lambda: f(x, a, b).block_until_ready()
    if key == "W4":
        m1, m2, bias = put(d["m1"]), put(d["m2"]), put(d["bias"])
        f = jax.jit(lambda m1, m2, bias: jax.nn.gelu(m1 @ m2 + bias, approximate=True))
        return lambda: f(m1, m2, bias).block_until_ready()
    if key == "W6":
        s1, s2 = put(np.ones(4, np.float32)), put(np.ones(4, np.float32))
        f = jax.jit(lambda a, b: a + b)
        return lambda: f(s1, s2).block_until_ready()
    if key in ("W5", "W7"):
        step, state = _jax_mlp()
        xb, yb = put(d["mlp_x"]), put(d["mlp_y"])
        if key == "W7":
            def cold():
                s, st = _jax_mlp()
                t = time.perf_counter()
                s.lower(st, xb, yb).compile()
                return time.perf_counter() - t
            return cold
        holder = [state]

        def w5():
            holder[0], loss = step(holder[0], xb, yb)
            loss.block_until_ready()
        return w5
    if key == "W8":
        step, state = _jax_cnn()
        xb, yb = put(d["cnn_x"]), put(d["cnn_y"])
        holder = [state]

        def w8():
            holder[0], loss = step(holder[0], xb, yb)
            loss.block_until_ready()
        return w8
    return None


def _adam_jax(params, grads, m, v, t, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    import jax
    t = t + 1
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
    v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
    c1, c2 = 1 - b1 ** t, 1 - b2 ** t
    params = jax.tree.map(lambda p, m, v: p - lr * (m / c1) / ((v / c2) ** 0.5 + eps),
                          params, m, v)
    return params, m, v, t


def _jax_train(loss_fn, params):
    import jax
    import jax.numpy as jnp

    def step(state, x, y):
        params, m, v, t = state
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        params, m, v, t = _adam_jax(params, grads, m, v, t)
        return (params, m, v, t), loss
    zeros = jax.tree.map(jnp.zeros_like, params)
    return jax.jit(step), (params, zeros, zeros, jnp.float32(0))


def _jax_mlp():
    import jax
    import jax.numpy as jnp
    rng = np.random.default_rng(0)
    sizes = (784, 512, 512, 10)
    params = [(jnp.asarray(rng.standard_normal((i, o)).astype(np.float32) * np.sqrt(2 / i)),
               jnp.zeros(o, jnp.float32)) for i, o in zip(sizes, sizes[1:])]

    def loss_fn(params, x, y):
        h = x
        for k, (w, b) in enumerate(params):
            h = h @ w + b
            if k < len(params) - 1:
                h = jax.nn.relu(h)
        logp = jax.nn.log_softmax(h)
        return -jnp.take_along_axis(logp, y[:, None], 1).mean()
    return _jax_train(loss_fn, params)


def _jax_cnn():
    import jax
    import jax.numpy as jnp
    rng = np.random.default_rng(0)
    params = {"k1": jnp.asarray(rng.standard_normal((8, 1, 3, 3)).astype(np.float32) * 0.47),
              "c1": jnp.zeros(8), "k2": jnp.asarray(rng.standard_normal((16, 8, 3, 3))
                                                    .astype(np.float32) * 0.17),
              "c2": jnp.zeros(16), "w": jnp.asarray(rng.standard_normal((784, 10))
                                                    .astype(np.float32) * 0.05),
              "b": jnp.zeros(10)}

    def conv(x, k, c):
        y = jax.lax.conv_general_dilated(x, k, (1, 1), ((1, 1), (1, 1)))
        return jax.nn.relu(y + c[None, :, None, None])

    def pool(x):
        return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

    def loss_fn(p, x, y):
        h = pool(conv(x, p["k1"], p["c1"]))
        h = pool(conv(h, p["k2"], p["c2"]))
        logits = h.reshape(x.shape[0], -1) @ p["w"] + p["b"]
        logp = jax.nn.log_softmax(logits)
        return -jnp.take_along_axis(logp, y[:, None], 1).mean()
    return _jax_train(loss_fn, params)


# -- torch ------------------------------------------------------------------------------

def _torch(key, d):
    import torch
    torch.set_grad_enabled(False)
    t = torch.from_numpy
    if key in ("W1", "W2", "W3"):
        x, a, b = t(d["x"]), t(d["a"]), t(d["b"])
        f = {"W1": lambda: torch.nn.functional.gelu(x * a + b, approximate="tanh"),
             "W2": lambda: torch.softmax(x, 1),
             "W3": lambda: torch.nn.functional.layer_norm(x, (x.shape[1],), a, b)}[key]
        return f
    if key == "W4":
        m1, m2, bias = t(d["m1"]), t(d["m2"]), t(d["bias"])
        return lambda: torch.nn.functional.gelu(torch.addmm(bias, m1, m2), approximate="tanh")
    if key == "W6":
        s1, s2 = torch.ones(4), torch.ones(4)
        return lambda: s1 + s2
    if key in ("W5", "W8"):
        torch.manual_seed(0)
        nn = torch.nn
        if key == "W5":
            model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                                  nn.Linear(512, 10))
            xb, yb = t(d["mlp_x"]), t(d["mlp_y"]).long()
        else:
            model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Flatten(), nn.Linear(784, 10))
            xb, yb = t(d["cnn_x"]), t(d["cnn_y"]).long()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        loss_fn = nn.CrossEntropyLoss()

        def step():
            with torch.enable_grad():
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(model(xb), yb)
                loss.backward()
                opt.step()
            return loss.item()
        return step
    return None
