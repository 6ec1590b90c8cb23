"""Artifacts: save -> load -> run, refusals, fuzzing, and the standalone runtime."""
import hashlib
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphc as gc
import graphc_runtime
from graphc_runtime import artifact

from test_fusion_memory import mlp_step


def rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.fixture(scope="module")
def inference(tmp_path_factory):
    g = gc.Graph("infer")
    with g:
        x = gc.placeholder((5, 8), name="x")
        w = gc.variable(rand((8, 4), 1), name="w")
        table = gc.constant(rand((4, 4), 2))
        y = gc.softmax(gc.tanh(x @ w) @ table)
        exe = gc.compile({"probs": y, "extra": [y.argmax(axis=1), x.sum()]})
    path = str(tmp_path_factory.mktemp("a") / "infer.gcx")
    exe.save(path)
    return exe, path


def test_save_load_run_identical(inference):
    exe, path = inference
    model = graphc_runtime.load(path)
    x = rand((5, 8), 3)
    a, b = exe(x=x), model(x=x)
    np.testing.assert_array_equal(a["probs"], b["probs"])
    np.testing.assert_array_equal(a["extra"][0], b["extra"][0])
    np.testing.assert_array_equal(a["extra"][1], b["extra"][1])
    assert isinstance(b["extra"], list)
    assert model.input_names == ["x"]
    assert "group" in model.dump("fused") and "define" in model.dump("llvm")


def test_training_artifact_keeps_training_and_saves_again(tmp_path):
    g, loss, updates = mlp_step(batch=16, sizes=(20, 16, 4))
    with g:
        exe = gc.compile({"loss": loss}, updates=updates)
    rng = np.random.default_rng(0)
    batches = [{"x": rng.standard_normal((16, 20)).astype(np.float32),
                "y": rng.integers(0, 4, 16).astype(np.int32)} for _ in range(4)]
    exe(**batches[0])
    path = str(tmp_path / "train.gcx")
    exe.save(path)
    model = graphc_runtime.load(path)
    for name, value in exe.variables.items():
        np.testing.assert_array_equal(model.variables[name], value)
    for b in batches[1:3]:
        np.testing.assert_array_equal(exe(**b)["loss"], model(**b)["loss"])
    for name, value in exe.variables.items():
        np.testing.assert_array_equal(model.variables[name], value)
    assert int(model.variables["adam/step"]) == 3
    path2 = str(tmp_path / "train2.gcx")
    model.save(path2)
    again = graphc_runtime.load(path2)
    np.testing.assert_array_equal(again(**batches[3])["loss"], exe(**batches[3])["loss"])


def test_runtime_works_without_the_compiler(inference, tmp_path):
    _, path = inference
    x = rand((5, 8), 3)
    np.save(tmp_path / "x.npy", x)
    script = f"""
import sys
sys.modules['graphc'] = None          # any import of the compiler fails
import numpy as np
import graphc_runtime
try:
    import graphc
except ImportError:
    pass
else:
    raise SystemExit('graphc importable')
m = graphc_runtime.load({path!r})
out = m(x=np.load({str(tmp_path / 'x.npy')!r}))
np.save({str(tmp_path / 'out.npy')!r}, out['probs'])
assert not any(k == 'graphc' or k.startswith('graphc.') for k in sys.modules if sys.modules[k] is not None)
print('ok')
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), inference[0](x=x)["probs"])


def rewrite_manifest(data: bytes, edit) -> bytes:
    _, version, n = struct.unpack_from("<8sIQ", data)
    manifest = json.loads(data[20:20 + n])
    edit(manifest)
    head = json.dumps(manifest, sort_keys=True).encode()
    return (struct.pack("<8sIQ", b"GRAPHCAR", version, len(head)) + head +
            hashlib.sha256(head).digest() + data[20 + n + 32:])


def reencode(data: bytes, edit) -> bytes:
    """The artifact with its manifest edited and its code's plan digest set to match (as
    only a deliberate forger would): what the checks after the digest see."""
    from graphc_runtime.plan_digest import stamp_sections as stamp_code
    manifest, sections = artifact.parse(data)
    manifest = {k: v for k, v in manifest.items() if k not in ("sections", "format_version")}
    edit(manifest)
    return artifact.encode(manifest, stamp_code(manifest, sections))


def refused(tmp_path, data: bytes, match: str):
    p = tmp_path / "bad.gcx"
    p.write_bytes(data)
    with pytest.raises(gc.ArtifactError, match=match):
        graphc_runtime.load(str(p))


def test_refusals(inference, tmp_path):
    _, path = inference
    data = open(path, "rb").read()
    refused(tmp_path, data[: len(data) // 2], "truncated")
    refused(tmp_path, data[:10], "truncated")
    refused(tmp_path, b"PK\x03\x04 not an artifact at all", "not a graphc artifact")
    flipped = bytearray(data)
    flipped[-100] ^= 0x40
    refused(tmp_path, bytes(flipped), "checksum mismatch")
    newer = bytearray(data)
    newer[8:12] = struct.pack("<I", 99)
    refused(tmp_path, bytes(newer), "format version 99 by a newer graphc")
    tampered = bytearray(data)
    pos = data.index(b'"arena_bytes"')
    tampered[pos + 16] = ord("9") if tampered[pos + 16] != ord("9") else ord("8")
    refused(tmp_path, bytes(tampered), "manifest checksum mismatch")

    def future_cpu(m):
        m["target"]["features"] += ",+graphc-imaginary-feature"
    refused(tmp_path, rewrite_manifest(data, future_cpu), "does not match its code")
    refused(tmp_path, reencode(data, future_cpu), "lacks features.*graphc-imaginary")

    def other_triple(m):
        m["target"]["triple"] = "riscv64-unknown-linux-gnu"
    refused(tmp_path, reencode(data, other_triple), "built for 'riscv64")

    def no_signature(m):
        del m["signature"]
    refused(tmp_path, rewrite_manifest(data, no_signature), "'signature' is missing")
    refused(tmp_path, reencode(data, no_signature), "'signature' is missing")
    with pytest.raises(gc.ArtifactError, match="cannot read"):
        graphc_runtime.load(str(tmp_path / "missing.gcx"))


def test_save_is_atomic_and_leaves_no_temporaries(inference, tmp_path):
    exe, _ = inference
    target = tmp_path / "m.gcx"
    exe.save(str(target))
    exe.save(str(target))
    assert sorted(os.listdir(tmp_path)) == ["m.gcx"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.data())
def test_fuzzed_artifacts_only_raise_artifact_error(inference, data):
    _, path = inference
    blob = bytearray(open(path, "rb").read())
    kind = data.draw(st.sampled_from(["flip", "truncate", "splice", "header"]))
    if kind == "flip":
        for _ in range(data.draw(st.integers(1, 8))):
            i = data.draw(st.integers(0, len(blob) - 1))
            blob[i] ^= 1 << data.draw(st.integers(0, 7))
    elif kind == "truncate":
        blob = blob[: data.draw(st.integers(0, len(blob) - 1))]
    elif kind == "splice":
        i = data.draw(st.integers(0, len(blob) - 1))
        blob[i:i] = data.draw(st.binary(min_size=1, max_size=16))
    else:
        i = data.draw(st.integers(0, 19))
        blob[i] = data.draw(st.integers(0, 255))
        if bytes(blob) == open(path, "rb").read():
            return
    try:
        manifest, sections = artifact.parse(bytes(blob))
    except gc.ArtifactError:
        return
    graphc_runtime.Model(manifest, sections)     # an intact parse must load and run


def test_each_tensor_is_stored_once(tmp_path):
    """A model's weights are in the artifact once: the graphs (optimized and as built)
    refer to them by digest instead of holding them in base64; the references resolve,
    so nothing is lost."""
    from graphc.ir import serialize
    rng = np.random.default_rng(0)
    ws = [rng.standard_normal((256, 256)).astype(np.float32) for _ in range(4)]
    with gc.Graph("weights"):
        x = gc.placeholder((8, 256), name="x")
        h = x
        for w in ws:
            h = gc.tanh(h @ gc.constant(w))
        exe = gc.compile({"y": h})
    path = tmp_path / "w.gcx"
    exe.save(str(path))
    model = graphc_runtime.load(str(path))
    sections = model.manifest["sections"]
    weights = sum(w.nbytes for w in ws)
    code = sum(r["length"] for k, r in sections.items() if k.startswith(("object", "dump/")))
    assert os.path.getsize(path) <= 1.1 * (weights + code), (os.path.getsize(path), weights,
                                                              code)
    for name in ("graph.json", "source_graph.json"):
        text = model._sections[name].decode()
        assert "__ndarray__" not in text or len(text) < 20_000
        graph, _ = serialize.loads(text, model.tensor_bytes)
        found = [n.attrs["value"] for n in graph.nodes if n.op == "constant" and
                 n.attrs["value"].size > 1]
        for w in ws:
            assert any(np.array_equal(f, w) or np.array_equal(f, w.T) for f in found)
    np.testing.assert_array_equal(model(x=np.ones((8, 256), np.float32))["y"],
                                  exe(x=np.ones((8, 256), np.float32))["y"])


def test_loaded_arrays_are_views_where_aligned_else_copies():
    """runtime.model.bytes_array: a read-only view of aligned little-endian bytes, a copy
    of bytes that lie misaligned (a section inside a larger buffer)."""
    from graphc_runtime.model import bytes_array
    values = np.arange(12, dtype=np.float32)
    blob = values.tobytes()
    got = bytes_array(blob, (3, 4), "float32", "t")
    np.testing.assert_array_equal(got, values.reshape(3, 4))
    assert not got.flags.writeable
    assert np.shares_memory(got, np.frombuffer(blob, np.uint8)) == \
        (np.frombuffer(blob, np.uint8).ctypes.data % 16 == 0)
    shifted = memoryview(b"x" + blob)[1:]
    moved = bytes_array(shifted, (12,), "float32", "t")
    np.testing.assert_array_equal(moved, values)
    misaligned = np.frombuffer(shifted, np.uint8).ctypes.data % 16 != 0
    assert np.shares_memory(moved, np.frombuffer(shifted, np.uint8)) != misaligned
    with pytest.raises(gc.ArtifactError, match="holds 48 bytes"):
        bytes_array(blob, (13,), "float32", "t")
