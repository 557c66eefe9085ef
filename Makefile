# Quick start:
#   make run    the heat example's collective report on 4 simulated CPU devices
#   make test   unit tests (pytest) and regression tests (lit + FileCheck)
#   make test-fast  the unit tests that take no browser, TPU compile, extra
#                   processes or long programs (markers in pyproject.toml),
#                   and lit's IR and pass tests: under 3 minutes, for the
#                   edit-test loop (`make lit` runs every lit test)
# Both create .venv on first use: `make run` installs irshard and JAX only,
# the test targets add the test, TPU (libtpu) and Ray extras.
#
#   make test-latest   the same suite on the newest JAX (JAX_LATEST) in
#                      .venv-latest, on CPython 3.13 (the machine's, or one
#                      built once from Debian's source package by
#                      tools/build-python.sh where it has none)
#   make docs          the documentation site (Sphinx + MyST) into
#                      docs/_build/html, warnings as errors, from .venv-docs

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
STAMP_EXTRAS := $(VENV)/.installed-extras
PIP    := -m pip install --quiet --disable-pip-version-check

# The unit tests run in this many pytest-xdist workers (processes): most
# tests trace and compile on one core, so two workers keep two cores busy.
# 1 runs them in this process. The tests that start several processes
# (jax.distributed, Ray; marked multiprocess) run after them in one process:
# they time how promptly processes start, answer and exit, which a second
# worker's compiles would make flaky.
TEST_JOBS ?= 2
PYTEST_JOBS = $(if $(filter 1,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist loadgroup)
# Which of the other unit tests `make test` runs: all of them by default.
# CI leaves out the `once` tests there (UNIT_MARKS='not once'): the
# searches and suggestions of the large examples, minutes each, which it
# runs in `make test-latest`.
UNIT_MARKS ?=
UNIT_SELECT = not multiprocess$(if $(UNIT_MARKS), and ($(UNIT_MARKS)))

# The newest JAX the suite runs on (Python >= 3.12).
JAX_LATEST    ?= 0.12.0.1
VENV_LATEST   := .venv-latest
BIN_LATEST    := $(VENV_LATEST)/bin
STAMP_LATEST  := $(VENV_LATEST)/.installed-$(JAX_LATEST)

# The documentation's tools (pinned in docs/requirements.txt) and irshard,
# whose parser, pass registry and docstrings the reference is built from.
VENV_DOCS  := .venv-docs
BIN_DOCS   := $(VENV_DOCS)/bin
STAMP_DOCS := $(VENV_DOCS)/.installed

.PHONY: run test test-fast unit lit test-latest unit-latest lit-latest bench docs clean browser

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python $(PIP) -e .
	touch $(STAMP)

# What the tests use besides irshard: pytest, lit, libtpu, Ray, Playwright,
# and the frameworks whose own jitted steps they compile.
$(STAMP_EXTRAS): $(STAMP)
	$(BIN)/python $(PIP) -e '.[test,tpu,ray,frameworks]'
	touch $(STAMP_EXTRAS)

$(STAMP_LATEST): pyproject.toml tools/build-python.sh
	rm -rf $(VENV_LATEST)
	"$$(tools/build-python.sh)" -m venv $(VENV_LATEST)
	$(BIN_LATEST)/python $(PIP) -e '.[test,tpu,ray,frameworks]' \
	  'jax[tpu]==$(JAX_LATEST)' 'jaxlib==$(JAX_LATEST)'
	touch $(STAMP_LATEST)

$(STAMP_DOCS): pyproject.toml docs/requirements.txt
	$(PYTHON) -m venv $(VENV_DOCS)
	$(BIN_DOCS)/python $(PIP) -r docs/requirements.txt -e .
	touch $(STAMP_DOCS)

run: $(STAMP)
	$(BIN)/irshard compile examples/heat1d.py --fn simulate_set --mesh x=4
	@echo
	$(BIN)/irshard compile examples/heat1d.py --fn simulate_roll --mesh x=4

test: unit lit

unit: $(STAMP_EXTRAS) browser
	$(BIN)/python -m pytest $(PYTEST_JOBS) -m '$(UNIT_SELECT)'
	$(BIN)/python -m pytest -m multiprocess

FAST := not (slow or multiprocess or browser or tpu)

test-fast: $(STAMP_EXTRAS)
	$(BIN)/python -m pytest $(PYTEST_JOBS) -m '$(FAST)'
	$(BIN)/lit -v tests/lit/opt tests/lit/ir

# The HTML report's tests drive a real Chromium (Debian's package): installed
# here when missing and this user may install packages; otherwise those
# tests are skipped (CI requires them: IRSHARD_REQUIRE_BROWSER=1).
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing Debian's chromium for the HTML report's tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	else \
	  echo "note: no chromium; the HTML report's browser tests will be skipped"; \
	fi

lit: $(STAMP_EXTRAS)
	$(BIN)/lit -v tests/lit
	@test -c /dev/null || { echo "error: a test replaced /dev/null" >&2; exit 1; }

test-latest: unit-latest lit-latest

unit-latest: $(STAMP_LATEST) browser
	$(BIN_LATEST)/python -m pytest $(PYTEST_JOBS) -m 'not multiprocess'
	$(BIN_LATEST)/python -m pytest -m multiprocess

lit-latest: $(STAMP_LATEST)
	$(BIN_LATEST)/lit -v tests/lit
	@test -c /dev/null || { echo "error: a test replaced /dev/null" >&2; exit 1; }

docs: $(STAMP_DOCS)
	$(BIN_DOCS)/sphinx-build -W --keep-going -q -b html docs docs/_build/html
	@echo "docs: docs/_build/html/index.html"

bench: $(STAMP)
	$(BIN)/python benchmarks/overhead.py

clean:
	rm -rf $(VENV) $(VENV_LATEST) $(VENV_DOCS) build docs/_build *.egg-info .pytest_cache
	find . -name __pycache__ -prune -exec rm -rf {} +
	find tests/lit -name Output -prune -exec rm -rf {} +
