# The commands of the README. Each bootstraps .venv from the pinned versions first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.bootstrapped
PIP_VERSION := 24.3.1

.PHONY: bootstrap demo check test docs emulator bench reliability

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check "pip==$(PIP_VERSION)"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[test]"
	touch $(STAMP)

bootstrap: $(STAMP)

demo: $(STAMP)
	$(BIN)/airflow-gpu-sched demo

# the docs extra too: tests/test_docs_site.py builds the site, and a test make test cannot run is
# a test left out
DOCS_STAMP := $(VENV)/.docs-installed
$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[test,docs]"
	touch $(DOCS_STAMP)

# tests/suite.py: check runs every test that starts no Airflow deployment on 2 pytest-xdist workers
# (the one to run after every change); test runs that, then the deployed tests (PostgreSQL, Redis,
# Airflow's components as processes, both executors) in a second pytest, also on 2 workers (one
# deployment per worker at a time, tests/e2e/conftest.py): together the tests of
# `pytest -m "not reliability"`. Exit code: the first failing run's. docs/testing.md: the timings.
check: $(DOCS_STAMP)
	$(BIN)/python tests/suite.py check $(PYTEST_ARGS)

test: $(DOCS_STAMP)
	$(BIN)/python tests/suite.py test $(PYTEST_ARGS)

# the site in site/: README, CHANGELOG, docs/ and an API reference from the docstrings (mkdocs,
# warnings as errors: a broken link or an unreadable docstring fails it)
docs: $(DOCS_STAMP)
	$(BIN)/python docs/build_site.py

# docs/reliability.md: runs the deployed scenarios (both executors, the `reliability`-marked ones
# that make test leaves out included), security checks and bad-input catalogue; installs the Debian
# packages they need first, as .ci/run does
reliability: $(STAMP)
	bash .ci/system-packages
	$(BIN)/python tests/reliability_report.py

emulator: $(STAMP)
	$(BIN)/airflow-gpu-sched emulator

bench: $(STAMP)
	$(BIN)/python benchmarks/triggerer_scale.py --jobs 1000 --interval 10
	$(BIN)/python benchmarks/import_cost.py
	$(BIN)/python benchmarks/emulator_throughput.py
	$(BIN)/python benchmarks/api_calls_per_task.py
