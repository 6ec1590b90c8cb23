"""Artifacts as untrusted files: signatures, the plan digest that binds a manifest to its
code, strict layout (no trailing bytes), temporaries of killed saves, and a fuzz of edited
manifests whose checksums were recomputed (every one an ArtifactError)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import graphc as gc
import graphc_runtime
from graphc_runtime import artifact, plan_digest
from graphc_runtime.plan_digest import stamp_sections as stamp_code

KEY = b"0123456789abcdef-graphc-test-key"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _mlp(seed=0, hidden=8):
    rng = np.random.default_rng(seed)
    with gc.Graph("mlp"):
        x = gc.placeholder((4, 6), "float32", name="x")
        w = gc.variable(rng.standard_normal((6, hidden)).astype(np.float32), name="w")
        v = gc.variable(rng.standard_normal((hidden, 3)).astype(np.float32), name="v")
        y = gc.softmax(gc.tanh(x @ w) @ v, axis=1)
        return gc.compile({"y": y})


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    d = tmp_path_factory.mktemp("trust")
    exe = _mlp()
    exe.save(str(d / "plain.gcx"))
    exe.save(str(d / "signed.gcx"), key=KEY)
    _mlp(seed=1, hidden=5).save(str(d / "other.gcx"))
    return exe, d


def _x():
    return np.random.default_rng(9).standard_normal((4, 6)).astype(np.float32)


def test_signed_artifact_loads_with_its_key_and_runs(saved):
    exe, d = saved
    model = graphc_runtime.load(str(d / "signed.gcx"), key=KEY)
    np.testing.assert_array_equal(model(x=_x())["y"], exe(x=_x())["y"])
    # a model saved again with a key stays signed and verifies
    model.save(str(d / "resigned.gcx"), key=KEY)
    again = graphc_runtime.load(str(d / "resigned.gcx"), key=KEY, require_signed=True)
    np.testing.assert_array_equal(again(x=_x())["y"], exe(x=_x())["y"])


def test_signature_refusals(saved, monkeypatch):
    _, d = saved
    signed, plain = str(d / "signed.gcx"), str(d / "plain.gcx")
    with pytest.raises(gc.ArtifactError, match="does not verify"):
        graphc_runtime.load(signed, key=b"another key of sixteen bytes")
    with pytest.raises(gc.ArtifactError, match="not signed, and a key was given"):
        graphc_runtime.load(plain, key=KEY)
    with pytest.raises(gc.ArtifactError, match="signatures are required"):
        graphc_runtime.load(plain, require_signed=True)
    with pytest.raises(gc.ArtifactError, match="no key was given"):
        graphc_runtime.load(signed, require_signed=True)
    monkeypatch.setenv("GRAPHC_REQUIRE_SIGNED", "1")
    with pytest.raises(gc.ArtifactError, match="signatures are required"):
        graphc_runtime.load(plain)
    graphc_runtime.load(signed, key=KEY)
    monkeypatch.delenv("GRAPHC_REQUIRE_SIGNED")
    graphc_runtime.load(plain)                     # unsigned files load when not required
    with pytest.raises(gc.ArtifactError, match="at least 16 bytes"):
        graphc_runtime.load(signed, key=b"short")


def test_signed_file_changed_after_signing_is_refused(saved, tmp_path):
    _, d = saved
    data = (d / "signed.gcx").read_bytes()
    manifest, sections = artifact.parse(data)
    # rewritten with every checksum recomputed and signed again, but with another key
    sections["variable/w"] = bytes(len(sections["variable/w"]))
    body = {k: v for k, v in manifest.items() if k not in ("sections", "format_version")}
    p = tmp_path / "forged.gcx"
    p.write_bytes(artifact.encode(body, sections, key=b"the forger's own key, 32 bytes.."))
    with pytest.raises(gc.ArtifactError, match="does not verify"):
        graphc_runtime.load(str(p), key=KEY)
    # or with the original signature block kept
    unsigned = artifact.encode(body, sections)
    p.write_bytes(unsigned + data[-artifact.SIGNATURE_BYTES:])
    with pytest.raises(gc.ArtifactError):
        graphc_runtime.load(str(p), key=KEY)
    # the signature block cut off, or a byte of it changed
    for bad in (data[:-artifact.SIGNATURE_BYTES], data[:-1] + bytes([data[-1] ^ 1])):
        p.write_bytes(bad)
        with pytest.raises(gc.ArtifactError):
            graphc_runtime.load(str(p), key=KEY)


def test_trailing_bytes_are_refused(saved, tmp_path):
    _, d = saved
    for name in ("plain.gcx", "signed.gcx"):
        p = tmp_path / name
        p.write_bytes((d / name).read_bytes() + b"\0")
        with pytest.raises(gc.ArtifactError, match="unexpected bytes|signature"):
            graphc_runtime.load(str(p), key=KEY if name == "signed.gcx" else None)


def test_code_of_another_program_is_refused(saved, tmp_path):
    _, d = saved
    manifest, sections = artifact.parse((d / "plain.gcx").read_bytes())
    _, other = artifact.parse((d / "other.gcx").read_bytes())
    body = {k: v for k, v in manifest.items() if k not in ("sections", "format_version")}
    for name in ("object", "object_profile"):
        swapped = dict(sections, **{name: other[name]})
        p = tmp_path / f"swapped_{name}.gcx"
        p.write_bytes(artifact.encode(body, swapped))
        with pytest.raises(gc.ArtifactError, match="does not match its code"):
            graphc_runtime.load(str(p))


def test_older_format_is_refused_with_advice(saved, tmp_path):
    _, d = saved
    data = bytearray((d / "plain.gcx").read_bytes())
    data[8:12] = (2).to_bytes(4, "little")
    p = tmp_path / "old.gcx"
    p.write_bytes(bytes(data))
    with pytest.raises(gc.ArtifactError, match="older graphc.*save it again"):
        graphc_runtime.load(str(p))


def test_killed_save_leaves_no_temporary_after_the_next_save(saved, tmp_path):
    exe, _ = saved
    target = tmp_path / "m.gcx"
    script = (f"import os, sys; sys.path.insert(0, {os.path.join(ROOT, 'tests')!r})\n"
              f"from graphc_runtime import artifact\n"
              f"def killed(*a, **k):\n    os._exit(9)\n"
              f"os.fsync = killed\n"
              f"from test_artifact_trust import _mlp\n"
              f"_mlp().save({str(target)!r})\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120,
                         cwd=ROOT)
    assert out.returncode == 9, out.stderr[-2000:]
    left = [f for f in os.listdir(tmp_path) if f != "m.gcx"]
    assert left and all(f.startswith(".m.gcx.") for f in left), left   # the killed save's
    exe.save(str(target))
    assert sorted(os.listdir(tmp_path)) == ["m.gcx"]
    graphc_runtime.load(str(target))


def test_cli_signs_and_verifies(saved, tmp_path):
    from graphc.cli import main
    _, d = saved
    key_file = tmp_path / "key"
    key_file.write_bytes(KEY)
    assert main(["info", str(d / "signed.gcx"), "--key", str(key_file)]) == 0
    assert main(["info", str(d / "plain.gcx"), "--key", str(key_file)]) == 1
    np.save(tmp_path / "x.npy", _x())
    assert main(["run", str(d / "signed.gcx"), "--key", str(key_file), "--input",
                 f"x={tmp_path / 'x.npy'}", "--output-dir", str(tmp_path / "out")]) == 0
    wrong = tmp_path / "wrong"
    wrong.write_bytes(b"x" * 32)
    assert main(["run", str(d / "signed.gcx"), "--key", str(wrong), "--input",
                 f"x={tmp_path / 'x.npy'}"]) == 1


# -- the fuzz: edited manifests with recomputed checksums ----------------------------------

FUZZ = r"""
import json, sys, numpy as np
sys.path.insert(0, sys.argv[1])
import graphc_runtime
from graphc_runtime import artifact, errors
from graphc_runtime.model import Model
from graphc_runtime.plan_digest import stamp_sections as stamp_code

paths, edits, forge = sys.argv[2].split(","), int(sys.argv[3]), sys.argv[4] == "forge"
rng = np.random.default_rng(int(sys.argv[5]))
NASTY = [0, -1, 1, 2, 3, 7, 2**31, 2**40, 2**62, -2**63, 10**30, 0.5, None, "", "float64",
         "int8", [], {}, [1], {"dim": [[["n"], 1]]}, True]

def leaves(obj, path=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from leaves(v, path + (k,))
    elif isinstance(obj, list):
        for k, v in enumerate(obj):
            yield from leaves(v, path + (k,))
    yield path

def edit(manifest):
    spots = [p for p in leaves(manifest) if p]
    path = spots[int(rng.integers(len(spots)))]
    parent = manifest
    for k in path[:-1]:
        parent = parent[k]
    old = parent[path[-1]]
    what = int(rng.integers(4))
    if what == 0 and isinstance(old, int) and not isinstance(old, bool):
        new = old + int(rng.choice([-1, 1, 8, -8, 4096])) if rng.random() < 0.7 else old * 2
    elif what == 1 and isinstance(parent, list) and rng.random() < 0.5:
        del parent[path[-1]]
        return
    elif what == 2 and isinstance(old, list):
        new = old + old[:1] if rng.random() < 0.5 else old[1:]
    else:
        new = NASTY[int(rng.integers(len(NASTY)))]
    if new == old and type(new) is type(old):
        new = [old]
    parent[path[-1]] = new

counts = {"refused": 0, "loaded": 0, "other": 0}
others = []
originals = [artifact.read(p) for p in paths]
for k in range(edits):
    manifest, sections = originals[k % len(originals)]
    body = json.loads(json.dumps({a: b for a, b in manifest.items()
                                  if a not in ("sections", "format_version")},
                                 default=lambda d: d.to_json() if hasattr(d, "to_json") else str(d)))
    edit(body)
    try:
        code = stamp_code(body, sections) if forge else sections
    except Exception:               # the forger's own tool fails on this edit: not a file
        counts["unforgeable"] = counts.get("unforgeable", 0) + 1
        continue
    blob = artifact.encode(body, code)
    try:
        Model(*artifact.parse(blob), label="fuzzed")
        counts["loaded"] += 1
    except errors.ArtifactError:
        counts["refused"] += 1
    except BaseException as e:
        counts["other"] += 1
        others.append(f"{type(e).__name__}: {e}"[:300])
print(json.dumps(counts))
for line in others[:10]:
    print("OTHER", line)
"""


def _fuzz(paths, edits, mode, seed):
    out = subprocess.run([sys.executable, "-c", FUZZ, os.path.join(ROOT, "tests"),
                          ",".join(map(str, paths)), str(edits), mode, str(seed)],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, f"the loader crashed (rc {out.returncode}):\n" + \
        out.stderr[-3000:]
    counts = json.loads(out.stdout.splitlines()[0])
    return counts, out.stdout


@pytest.fixture(scope="module")
def fuzz_artifacts(saved, tmp_path_factory):
    exe, d = saved
    d2 = tmp_path_factory.mktemp("fuzz")
    with gc.Graph("train"):
        x = gc.placeholder((8, 5), "float32", name="x")
        w = gc.variable(np.ones((5, 2), np.float32), name="w")
        loss = gc.mean((x @ w) ** 2)
        (gw,) = gc.grad(loss, [w])
        gc.compile({"loss": loss}, updates={w: w - 0.1 * gw}).save(str(d2 / "train.gcx"))
    with gc.Graph("symbolic"):
        x = gc.placeholder(("n", 3), "float32", name="x")
        gc.compile(gc.tanh(x).sum(axis=1)).save(str(d2 / "sym.gcx"))
    return [d / "plain.gcx", d2 / "train.gcx", d2 / "sym.gcx"]


def test_every_edited_manifest_is_refused(fuzz_artifacts):
    """1,500 edits (a number, a list, a dtype, a shape, a field dropped...) of three
    artifacts' manifests, each written back with every checksum recomputed: the plan
    digest refuses each one, and nothing else is raised."""
    counts, out = _fuzz(fuzz_artifacts, 1500, "plain", 1)
    assert counts == {"refused": 1500, "loaded": 0, "other": 0}, out


def test_forged_manifests_raise_only_artifact_errors(fuzz_artifacts):
    """The same edits with the code's digest patched to agree (a forger's file): the
    manifest's own validation refuses what is malformed; what loads is a consistent
    file, and the loader never raises anything but an ArtifactError or crashes."""
    counts, out = _fuzz(fuzz_artifacts, 600, "forge", 2)
    assert counts["other"] == 0 and counts["refused"] >= 200, out


def test_plan_digest_placeholder_is_in_the_code():
    exe = _mlp()
    code = exe._info["sections"]["object"]
    assert code.count(plan_digest.MARKER) == 1
    assert plan_digest.carried(code, "object") == bytes(32)
    manifest = exe.manifest()
    stamped = stamp_code(manifest, {"object": code})["object"]
    assert plan_digest.carried(stamped, "object") == plan_digest.digest(manifest)


def test_cuda_artifact_ptx_carries_the_digest(tmp_path):
    """The PTX of a CUDA artifact is bound to its manifest like the CPU object (checked
    at load, which needs no GPU)."""
    with gc.Graph():
        x = gc.placeholder((8, 5), name="x")
        exe = gc.compile({"y": gc.tanh(x) * 2}, device="cuda")
    path = tmp_path / "gpu.gcx"
    exe.save(str(path))
    model = graphc_runtime.load(str(path))
    assert model.dump("ptx")
    manifest, sections = artifact.parse(path.read_bytes())
    assert sections["ptx"].startswith(plan_digest.PTX_MARKER)
    body = {k: v for k, v in manifest.items() if k not in ("sections", "format_version")}
    body["arena_bytes"] = body["arena_bytes"] + 64
    path.write_bytes(artifact.encode(body, sections))
    with pytest.raises(gc.ArtifactError, match="does not match its code"):
        graphc_runtime.load(str(path))
