# The two commands of the README: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-unit bench setup kafka-jars clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -c constraints.txt -e ".[all]"
	touch $(STAMP)

setup: $(STAMP) kafka-jars

kafka-jars: $(STAMP)
	$(BIN)/phasemeter kafka fetch

demo: setup
	$(BIN)/phasemeter demo

test: setup
	$(BIN)/python -m pytest -q tests

test-unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

bench: setup
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) .phasemeter demo-out build dist *.egg-info
