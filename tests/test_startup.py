"""Start-up: `import graphc` and `import graphc_runtime` import what every path needs and
leave the rest (ml_dtypes' extension, networkx) to the paths that need it; bfloat16 still
works once asked for. (Their times are in bench/startup.py.)"""
import json
import subprocess
import sys

import numpy as np

import graphc as gc

PROBE = ("import json, sys; import {mod}; "
         "print(json.dumps([m for m in ('ml_dtypes', 'networkx', 'onnx', 'pycuda') "
         "if m in sys.modules]))")


def _loaded(mod):
    out = subprocess.run([sys.executable, "-c", PROBE.format(mod=mod)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_imports_leave_what_a_path_does_not_need():
    assert _loaded("graphc_runtime") == []
    assert _loaded("graphc") == []


def test_bfloat16_works_when_asked_for():
    with gc.Graph("bf16"):
        x = gc.placeholder((4,), "bfloat16", name="x")
        exe = gc.compile(x * 2.0)
        import ml_dtypes
        feed = np.array([1, 2, 3, 4], dtype=ml_dtypes.bfloat16)
        out = exe(feed)
        assert out.dtype == np.dtype(ml_dtypes.bfloat16)
        np.testing.assert_array_equal(out.astype(np.float32), [2, 4, 6, 8])
        assert gc.dtypes_supported[4] == "bfloat16"
