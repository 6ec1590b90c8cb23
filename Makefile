# Set-up and the two main jobs. Only Python >= 3.10 is needed on the machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,examples]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/train_digits.py

test: $(STAMP)
	$(PY) -m pytest tests

clean:
	rm -rf $(VENV) build *.egg-info
