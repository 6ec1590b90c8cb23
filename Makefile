# Set-up and the two main jobs. Only Python >= 3.10 is needed on the machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-slow test-lowest bench clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,examples,distributed,onnx,export]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/train_digits.py

test: $(STAMP)
	$(PY) -m pytest tests

# the long randomized runs (2,000+ random programs with control flow and gradients)
test-slow: $(STAMP)
	$(PY) -m pytest tests -m slow

# the dependency range's low end: the oldest numpy/llvmlite/... pyproject accepts
# (.ci/lowest.txt), then numba 0.65 beside graphc (it pins llvmlite 0.47, LLVM 20):
# the tests and a short speed check (bench/speed_check.py) on each
LOW_VENV := .venv-lowest
LOW_PY   := $(LOW_VENV)/bin/python
CODEGEN_TESTS := tests/test_vectorized.py tests/test_compile_primitives.py tests/test_mathlib.py \
	tests/test_cuda_ptx.py tests/test_aliasing.py tests/test_artifacts.py tests/test_threads.py

test-lowest:
	rm -rf $(LOW_VENV)
	$(PYTHON) -m venv $(LOW_VENV)
	$(LOW_PY) -m pip install -q --upgrade pip
	$(LOW_PY) -m pip install -q -c .ci/lowest.txt -e '.[test,onnx]'
	$(LOW_PY) -m pip list 2>/dev/null | grep -i -E '^(numpy|llvmlite|networkx|ml.dtypes|scipy-openblas32|onnx|onnxruntime) '
	$(LOW_PY) -m pytest tests --ignore=tests/test_examples.py --ignore=tests/test_distributed.py
	$(LOW_PY) -m bench.speed_check
	$(LOW_PY) -m pip install -q 'numba==0.65.*'
	$(LOW_PY) -m pytest $(CODEGEN_TESTS)
	$(LOW_PY) -m bench.speed_check

# benchmarks: graphc against numpy, and jax / torch (CPU builds) installed by the bench extra
BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) -m bench
	$(PY) -m bench.profiler
	$(PY) -m bench.onnx
	$(PY) -m bench.int8
	$(PY) -m bench.control
	$(PY) -m bench.symbolic
	$(PY) -m bench.compile_time

clean:
	rm -rf $(VENV) $(LOW_VENV) build *.egg-info
