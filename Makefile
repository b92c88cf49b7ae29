# The two commands of the README: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-unit bench bench-scale chaos soak setup kafka-jars clean

# uv installs the same pinned set as pip (constraints.txt) in ~46 s instead of
# ~2.5 min on 2 cores; pip stays the fallback where uv cannot be had.
# --compile-bytecode: pip writes .pyc files at install and uv does not, and
# where PYTHONDONTWRITEBYTECODE is set (as on these machines) every process
# would compile faust, pandas and chDB from source again (+3.7 s of CPU per
# worker or CLI process; the suite took 16 min instead of 12).
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	( $(BIN)/pip install -q -c constraints.txt uv \
	  && $(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python -c constraints.txt -e ".[all]" ) \
	  || $(BIN)/pip install -q -c constraints.txt -e ".[all]"
	touch $(STAMP)

setup: $(STAMP) kafka-jars

kafka-jars: $(STAMP)
	$(BIN)/phasemeter kafka fetch

demo: setup
	$(BIN)/phasemeter demo

# Two test processes, whole files each (module fixtures stay in one process):
# most of the suite waits on brokers and workers, so two at a time roughly
# halves the wall time; the reliability tests' busy loops then also compete
# with another test, as a production worker competes with its neighbours.
# Three were measured too (11:45 against 13:27 back to back), but beside a
# third process load-sensitive tests failed in 2 of 5 full runs, one of them
# beside extra load (late duplicate phases became orphans; envelopes held
# fewer events; a caller blocked 65 ms; an SDK cancel came late).
# --no-loadscope-reorder: the files go out in the order tests/conftest.py
# puts them in (the slow ones first), not xdist's by-count order.
# --durations: the slowest tests in the log, as the suite runs close to CI's
# 15-minute limit on a slow host.
# PYTHONDONTWRITEBYTECODE= : the suite caches bytecode as Python does by
# default, where the variable is set (as on these machines). Without the
# cache every worker, CLI and test process compiled the project's modules
# again (~0.2 s of CPU each, some 300 processes a run); and a later run's
# test processes read the test modules' rewritten assertions from it
# instead of rewriting them (~8 s each; a fresh clone's first run still does).
test: setup
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=20 tests

test-unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

bench: setup
	$(BIN)/python bench/run_all.py

# Band queries over stores of 10M and 100M generations filled SQL-side (about
# 15 min, ~9 GiB of disk while it runs; docs/performance/queries.md). 300M: add
# --rows 300000000 (~25 GiB).
bench-scale: setup
	$(BIN)/python bench/bench_scale.py --rows 10000000 --rows 100000000

# The chaos matrix (about 1.5 h): faults x 0/1/2 busy loops x both protocols;
# writes its table into docs/delivery.md. One cell: see `bench/chaos.py --help`.
chaos: setup
	$(BIN)/python bench/chaos.py --negative-control --write-docs

# One hour of phase events at a steady rate, worker RSS every minute (bench/results/, then BENCHMARKS.md).
soak: setup
	$(BIN)/python bench/soak.py --minutes 60 --rate 200 --write-docs

clean:
	rm -rf $(VENV) .phasemeter demo-out build dist *.egg-info
