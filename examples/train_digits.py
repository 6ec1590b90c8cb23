"""Train an MLP and a small CNN on scikit-learn's bundled 8x8 digits (no download).

Run: python examples/train_digits.py [--epochs N] [--seed S] [--precision bf16]
Builds each model as one graph (forward, symbolic gradients, Adam updates), compiles the
training step and the prediction to native code with gc.compile, trains step by step and
prints the loss per epoch and the held-out accuracy. The batch dimension is symbolic
("batch"): one compiled step takes the full batches and the epoch's last short one, and
the saved predictor (an artifact) takes any number of images.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import graphc as gc


def load_data(seed: int):
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)          # (1797, 8, 8) in [0, 1]
    y = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    n_test = len(x) // 5
    return (x[n_test:], y[n_test:]), (x[:n_test], y[:n_test])


def mlp(seed: int):
    init = gc.nn.init
    w1 = gc.variable(init.he_normal((64, 128), seed), name="w1")
    b1 = gc.variable(np.zeros(128, np.float32), name="b1")
    w2 = gc.variable(init.glorot_uniform((128, 10), seed + 1), name="w2")
    b2 = gc.variable(np.zeros(10, np.float32), name="b2")

    def forward(images):
        h = gc.relu(gc.nn.linear(images.reshape(images.shape[0], 64), w1, b1))
        return gc.nn.linear(h, w2, b2)
    return forward, [w1, b1, w2, b2]


def cnn(seed: int):
    init = gc.nn.init
    k1 = gc.variable(init.he_normal((8, 1, 3, 3), seed), name="k1")
    c1 = gc.variable(np.zeros(8, np.float32), name="c1")
    k2 = gc.variable(init.he_normal((16, 8, 3, 3), seed + 1), name="k2")
    c2 = gc.variable(np.zeros(16, np.float32), name="c2")
    w = gc.variable(init.glorot_uniform((64, 10), seed + 2), name="w")
    b = gc.variable(np.zeros(10, np.float32), name="b")

    def forward(images):
        n = images.shape[0]
        h = images.reshape(n, 1, 8, 8)
        h = gc.nn.max_pool2d(gc.relu(gc.nn.conv2d(h, k1, c1, padding=1)), 2)   # 8x4x4
        h = gc.nn.max_pool2d(gc.relu(gc.nn.conv2d(h, k2, c2, padding=1)), 2)   # 16x2x2
        return gc.nn.linear(h.reshape(n, 64), w, b)
    return forward, [k1, c1, k2, c2, w, b]


def train(name, build, data, epochs: int, batch: int, lr: float, seed: int,
          precision: str = "float32") -> float:
    (xtr, ytr), (xte, yte) = data
    graph = gc.Graph(name)
    with graph:
        forward, params = build(seed)
        x = gc.placeholder(("batch", 8, 8), "float32", name="x")
        y = gc.placeholder(("batch",), "int32", name="y")
        loss = gc.nn.softmax_cross_entropy(forward(x), y).mean()
        updates = gc.optim.adam(loss, params, lr=lr)
        x_test = gc.placeholder(("n", 8, 8), "float32", name="x_test")
        predictions = gc.argmax(forward(x_test), axis=-1)
    with graph:
        step = gc.compile({"loss": loss}, updates=updates, precision=precision)
        predict = gc.compile(predictions, precision=precision)
    print(f"[{name}] graph: {len(graph.nodes)} nodes, "
          f"{sum(v.size for v in graph.variables.values())} parameters and optimizer state; "
          f"training step: {step.stats['kernels']} kernels, arena "
          f"{step.stats['arena_bytes']} bytes (at batch {batch}: "
          f"{step.stats['arena_bytes'].evaluate({'batch': batch}) / 1024:.0f} KiB), compiled in "
          f"{step.stats['compile_seconds']:.2f} s")
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(xtr))
        losses, sizes = [], set()
        for i in range(0, len(order), batch):      # the last batch may be short
            idx = order[i:i + batch]
            out = step(x=xtr[idx], y=ytr[idx])
            losses.append(float(out["loss"]) * len(idx))
            sizes.add(len(idx))
        print(f"[{name}] epoch {epoch:2d}  loss {np.sum(losses) / len(order):.4f}  "
              f"(batches of {', '.join(map(str, sorted(sizes, reverse=True)))})")
    elapsed = time.perf_counter() - start
    predict.variables.update({k: v for k, v in step.variables.items() if k in predict.variables})
    pred = predict(x_test=xte)
    accuracy = float((pred == yte).mean())
    print(f"[{name}] test accuracy {accuracy:.4f} on {len(yte)} held-out digits "
          f"({epochs} epochs, {elapsed:.3f} s of training)")
    return accuracy, predict


def save_artifacts(name: str, predict, x_test, out_dir: str) -> None:
    """The trained model as an artifact, its drawing, and test inputs to run it on."""
    import os
    from graphc import viewer
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"digits_{name}.gcx")
    predict.save(path)
    np.save(os.path.join(out_dir, "x_test.npy"), x_test)
    import graphc_runtime
    model = graphc_runtime.load(path)
    with open(os.path.join(out_dir, f"digits_{name}.html"), "w") as f:
        f.write(viewer.model_page(model, f"digits_{name}"))     # the interactive viewer
    print(f"[{name}] saved {path} and {os.path.join(out_dir, f'digits_{name}.html')}")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="out", help="where to write artifacts ('' for none)")
    parser.add_argument("--precision", default="float32", choices=["float32", "bf16"],
                        help="bf16: products in bfloat16, master weights in float32")
    args = parser.parse_args(argv)
    data = load_data(args.seed)
    results = {}
    for name, build in (("mlp", mlp), ("cnn", cnn)):
        results[name], predict = train(name, build, data, args.epochs, 64, 3e-3, args.seed,
                                       args.precision)
        if args.out:
            save_artifacts(name, predict, data[1][0], args.out)
    return results


if __name__ == "__main__":
    main()
