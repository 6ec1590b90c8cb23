"""What `make test` tells a newcomer: which optional parts are missing, at the top, and
why each skipped test was skipped, at the end."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_run_names_missing_parts_and_skip_reasons():
    import graphc as gc
    out = subprocess.run([sys.executable, "-m", "pytest", "tests/test_devices.py",
                          "-p", "no:cacheprovider"], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    first = out.stdout.splitlines()[0]
    assert first.startswith("optional parts"), out.stdout[:500]
    if not gc.cuda.is_available():
        assert "GPU: missing" in out.stdout
        assert "SKIPPED [1] tests/test_devices.py" in out.stdout and \
            "no CUDA device on this machine" in out.stdout
