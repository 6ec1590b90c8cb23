"""A CNN training step at real size against torch eager: `python -m bench.cnn_train`.

ResNet-18-sized: a 7 x 7 stride-2 stem (64 channels), a 2 x 2 max pool, four stages of
two basic blocks (3 x 3 convolutions, 64 / 128 / 256 / 512 channels, batch
normalization with the batch's statistics, ReLU, a strided 1 x 1 projection where the
shape changes), global average pooling and a 1000-way classifier; softmax cross-entropy
and SGD with momentum 0.9. 224 x 224 images, batch 8 by default. The same network in
torch (nn.Conv2d / BatchNorm2d in training mode, torch.optim.SGD) from the same initial
weights, eager, with torch's threads set to graphc's. Both run in this process,
alternately (median of `--steps` steps each, after a warm-up step); graphc also with
precision="bf16" (products and convolutions in bfloat16, float32 master weights). First
the losses of the first step are checked against each other (float32). The issue's
target: graphc's float32 step at least 1.2x torch eager.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import graphc as gc

STAGES = (64, 128, 256, 512)


def weights(seed: int = 0, classes: int = 1000) -> dict:
    """He-normal convolution filters, unit BN scales, zero shifts, a glorot classifier."""
    rng = np.random.default_rng(seed)
    he = lambda o, c, k: (rng.standard_normal((o, c, k, k)) *
                          np.sqrt(2.0 / (c * k * k))).astype(np.float32)
    w = {"stem": he(64, 3, 7)}
    w["stem_bn"] = (np.ones(64, np.float32), np.zeros(64, np.float32))
    cin = 64
    for s, width in enumerate(STAGES):
        for k in range(2):
            p = f"s{s}b{k}"
            stride = 2 if s and not k else 1
            w[p + "c1"], w[p + "c2"] = he(width, cin, 3), he(width, width, 3)
            for bn in ("bn1", "bn2"):
                w[p + bn] = (np.ones(width, np.float32), np.zeros(width, np.float32))
            if stride != 1 or cin != width:
                w[p + "proj"] = he(width, cin, 1)
                w[p + "proj_bn"] = (np.ones(width, np.float32), np.zeros(width, np.float32))
            cin = width
    limit = np.sqrt(6.0 / (512 + classes))
    w["fc"] = rng.uniform(-limit, limit, (512, classes)).astype(np.float32)
    w["fc_b"] = np.zeros(classes, np.float32)
    return w


def graphc_step(init: dict, batch: int, size: int, lr: float, precision: str):
    g = gc.Graph("resnet18")
    with g:
        x = gc.placeholder((batch, 3, size, size), name="x")
        y = gc.placeholder((batch,), "int32", name="y")
        params = {}

        def var(name, value):
            params[name] = gc.variable(value, name=name)
            return params[name]

        def bn(h, name):
            gamma, beta = (var(f"{name}/gamma", init[name][0]), var(f"{name}/beta", init[name][1]))
            mean = gc.mean(h, axis=(0, 2, 3), keepdims=True)
            var_ = gc.mean((h - mean) ** 2, axis=(0, 2, 3), keepdims=True)
            scale = gamma.reshape(1, -1, 1, 1) / gc.sqrt(var_ + 1e-5)
            return (h - mean) * scale + beta.reshape(1, -1, 1, 1)

        h = gc.relu(bn(gc.nn.conv2d(x, var("stem", init["stem"]), stride=2, padding=3),
                       "stem_bn"))
        h = gc.nn.max_pool2d(h, 2)
        for s, _ in enumerate(STAGES):
            for k in range(2):
                p = f"s{s}b{k}"
                stride = 2 if s and not k else 1
                o = gc.relu(bn(gc.nn.conv2d(h, var(p + "c1", init[p + "c1"]), stride=stride,
                                            padding=1), p + "bn1"))
                o = bn(gc.nn.conv2d(o, var(p + "c2", init[p + "c2"]), padding=1), p + "bn2")
                skip = h if p + "proj" not in init else bn(gc.nn.conv2d(
                    h, var(p + "proj", init[p + "proj"]), stride=stride), p + "proj_bn")
                h = gc.relu(o + skip)
        h = gc.mean(h, axis=(2, 3))
        logits = gc.nn.linear(h, var("fc", init["fc"]), var("fc_b", init["fc_b"]))
        loss = gc.nn.softmax_cross_entropy(logits, y).mean()
        updates = gc.optim.momentum(loss, list(params.values()), lr=lr, beta=0.9)
        t = time.perf_counter()
        exe = gc.compile({"loss": loss}, updates=updates, precision=precision)
    return exe, time.perf_counter() - t


def torch_step(init: dict, lr: float, threads: int):
    import torch
    from torch import nn
    torch.set_num_threads(threads)

    def conv(w, stride=1, padding=0):
        c = nn.Conv2d(w.shape[1], w.shape[0], w.shape[2], stride, padding, bias=False)
        c.weight.data = torch.from_numpy(w.copy())
        return c

    class Block(nn.Module):
        def __init__(self, p, stride):
            super().__init__()
            self.c1, self.b1 = conv(init[p + "c1"], stride, 1), nn.BatchNorm2d(init[p + "c1"].shape[0])
            self.c2, self.b2 = conv(init[p + "c2"], 1, 1), nn.BatchNorm2d(init[p + "c2"].shape[0])
            self.proj = nn.Sequential(conv(init[p + "proj"], stride), nn.BatchNorm2d(
                init[p + "proj"].shape[0])) if p + "proj" in init else nn.Identity()

        def forward(self, h):
            o = torch.relu(self.b1(self.c1(h)))
            return torch.relu(self.b2(self.c2(o)) + self.proj(h))

    blocks = [Block(f"s{s}b{k}", 2 if s and not k else 1) for s in range(4) for k in range(2)]
    fc = nn.Linear(512, init["fc"].shape[1])
    fc.weight.data = torch.from_numpy(init["fc"].T.copy())
    fc.bias.data = torch.from_numpy(init["fc_b"].copy())
    model = nn.Sequential(conv(init["stem"], 2, 3), nn.BatchNorm2d(64), nn.ReLU(),
                          nn.MaxPool2d(2), *blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), fc)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    return step, torch


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--no-bf16", action="store_true")
    args = p.parse_args(argv)
    init = weights()
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((args.batch, 3, args.size, args.size)).astype(np.float32)
    ys = rng.integers(0, 1000, args.batch).astype(np.int32)
    lr = 0.01
    runs, compile_s = {}, {}
    for precision in ("float32",) + (() if args.no_bf16 else ("bf16",)):
        exe, compile_s[precision] = graphc_step(init, args.batch, args.size, lr, precision)
        runs[f"graphc {precision}"] = (lambda exe=exe: float(exe(x=xs, y=ys)["loss"]))
    threads = exe.stats["num_threads"]
    try:
        step, torch = torch_step(init, lr, threads)
        tx, ty = torch.from_numpy(xs), torch.from_numpy(ys.astype(np.int64))
        runs["torch eager"] = lambda: step(tx, ty)
    except ImportError:
        torch = None
    first = {name: run() for name, run in runs.items()}      # warm-up, and the check
    if torch is not None and not abs(first["graphc float32"] - first["torch eager"]) <= \
            1e-3 * abs(first["torch eager"]):
        raise SystemExit(f"first-step losses differ: {first}")
    times = {name: [] for name in runs}
    for _ in range(args.steps):
        for name, run in runs.items():
            t = time.perf_counter()
            run()
            times[name].append((time.perf_counter() - t) * 1e3)
    print(f"ResNet-18-sized training step, {args.size} x {args.size}, batch {args.batch}, "
          f"{threads} threads; graphc compile: " +
          ", ".join(f"{k} {v:.1f} s" for k, v in compile_s.items()))
    base = statistics.median(times["torch eager"]) if torch is not None else None
    for name, ts in times.items():
        ms = statistics.median(ts)
        vs = f"  torch / this {base / ms:.2f}x" if base else ""
        print(f"{name:16s} {ms:9.1f} ms  first loss {first[name]:.4f}{vs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
