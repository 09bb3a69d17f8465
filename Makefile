# `make run` and `make test` do all set-up on a fresh machine: they create .venv when missing
# and install the pinned project (pyproject.toml + the resolved set in constraints.txt).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

export PREFECT_HOME := $(CURDIR)/.prefect
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DO_NOT_TRACK := 1
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS := 90
export MLFLOW_TRACKING_URI ?= sqlite:///$(CURDIR)/mlflow.db
export MLFLOW_DISABLE_TELEMETRY := true
export DVC_NO_ANALYTICS := 1
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export MPLBACKEND := Agg
export RAY_USAGE_STATS_ENABLED := 0
export FLWR_TELEMETRY_ENABLED := 0
export FLWR_DISABLE_UPDATE_CHECK := 1
export FLWR_HOME := $(CURDIR)/.flwr
# `python` in dvc.yaml commands is the project venv's
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

PREFECT_PORT ?= 4200
MLFLOW_PORT ?= 5000

.PHONY: install browser run test ui ui-stop serve lock clean

$(STAMP): pyproject.toml constraints.txt requirements-flower.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[dev]"
	# Flower (LEFF) beside our pins, without its declared dependencies: see requirements-flower.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-flower.txt
	touch $(STAMP)

install: $(STAMP)

# The embedded default of every method, versioned by DVC; ends with the results table. The stages'
# flows share one Prefect server (`make ui`'s when it is up, else one started for this run and
# stopped after it) instead of starting a temporary one each. One line per stage as it starts and ends
# (flows/progress.py); every flow's own output goes to .ui/make-run.log.
run: install
	$(PY) -m flows.prefect_server --port $(PREFECT_PORT) -- $(PY) -m flows.progress -- $(VENV)/bin/dvc repro
	@cat reports/results.md

# Debian's chromium draws the `dvc plots show` page in the tests (tests/test_plots_offline.py): installed
# with apt-get where it is missing and we are root; elsewhere those checks are skipped, saying why.
browser:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
		&& apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium \
		>/dev/null; } || echo "no chromium (needs root and apt-get): the headless render checks are skipped"

test: install browser
	$(VENV)/bin/ruff check paperline tasks flows tests benchmarks
	$(VENV)/bin/mypy
	$(PY) -m pytest

# Prefect and MLflow servers on 127.0.0.1 (logs in .ui/). Flows report to this Prefect server
# when PREFECT_API_URL is set, as `make serve` does.
ui: install
	@mkdir -p .ui
	@nohup $(VENV)/bin/prefect server start --host 127.0.0.1 --port $(PREFECT_PORT) > .ui/prefect.log 2>&1 & echo $$! > .ui/prefect.pid
	@nohup $(VENV)/bin/mlflow server --backend-store-uri "$(MLFLOW_TRACKING_URI)" \
		--artifacts-destination "$(CURDIR)/mlartifacts" --host 127.0.0.1 --port $(MLFLOW_PORT) \
		> .ui/mlflow.log 2>&1 & echo $$! > .ui/mlflow.pid
	@echo "Prefect UI: http://127.0.0.1:$(PREFECT_PORT)"
	@echo "MLflow UI:  http://127.0.0.1:$(MLFLOW_PORT)/#/experiments?workflowType=machine_learning"
	@echo "            (MLflow 3.17 opens on its GenAI pages until the Model training switch is set; this link sets it)"
	@echo "(up in ~15-60 s on 2 cores; logs in .ui/; stop with 'make ui-stop')"

ui-stop:
	-@for f in .ui/*.pid; do [ -f "$$f" ] && kill "$$(cat $$f)" 2>/dev/null; rm -f "$$f"; done

# Every method, and the whole pipeline, as a Prefect deployment that runs it through DVC, with its
# schedule from its params file (docs/running.md). Needs `make ui`: schedules fire only on a
# long-lived server.
serve: install
	PREFECT_API_URL=http://127.0.0.1:$(PREFECT_PORT)/api $(PY) -m flows serve

# Re-resolve the pinned set after changing pyproject.toml.
lock: install
	$(PY) -m pip freeze --exclude-editable | sed -e 's/^torch==\(.*\)+cpu$$/torch==\1/' > constraints.txt

clean:
	rm -rf .prefect mlflow.db mlartifacts .ui
