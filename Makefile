# Two commands: `make run` (bring the product up) and `make test` (the whole suite).
SHELL := /bin/bash
# The first interpreter that actually runs and is 3.11 or newer (pyenv shims may exist but fail).
PYTHON ?= $(shell for p in python3 python3.13 python3.12 python3.11; do $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 && { command -v $$p; break; }; done)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000
PG_URL ?= postgres://root@127.0.0.1:5432/root
REDIS_TEST_URL ?= redis://127.0.0.1:6379/15
VENDOR := static/vendor/plotly.min.js
# The server's flags, as measured by bench/fanout (docs/capacity.md): uvicorn's sans-I/O
# websockets protocol, and no permessage-deflate, which cost ~50 KiB of zlib state per idle
# device socket and a compression per socket and push.
UVICORN_FLAGS ?= --lifespan off --ws websockets-sansio --ws-per-message-deflate false
# `make run`'s simulated fleet (docs/simulator.md): small enough for embedded mode on 2 cores.
SIM ?= 1
SIM_DEVICES ?= 100
SIM_RATE ?= 5
# `make run`'s console: the banner, the simulator's progress line and warnings, not a line per
# request (RUN_LOG_LEVEL=INFO brings those back).
RUN_LOG_LEVEL ?= WARNING
RUN_UVICORN_LOG ?= $(if $(filter INFO DEBUG,$(RUN_LOG_LEVEL)),,--no-access-log --log-level warning)

.PHONY: run test lint install static migrate seed services-check format clean worker proto

$(STAMP): pyproject.toml
	@test -n "$(PYTHON)" || { echo "Python 3.11 or newer is needed (python3 on PATH)"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

# Plotly's JavaScript comes from the installed plotly package, never a CDN.
$(VENDOR): $(STAMP)
	@mkdir -p static/vendor
	$(BIN)/python -c 'import pathlib, plotly; src = pathlib.Path(plotly.__file__).parent / "package_data" / "plotly.min.js"; pathlib.Path("$(VENDOR)").write_bytes(src.read_bytes())'

static: $(VENDOR)

migrate: $(STAMP)
	@$(BIN)/python manage.py migrate --noinput -v0

seed: migrate
	@LOG_LEVEL=WARNING $(BIN)/python manage.py seed_demo -v0

# `make run` answers plain http on this machine with DEBUG off, so a wrong address shows the
# product's 404 page: HTTPS=0 (no redirect to https, cookies not Secure; controlplane/settings/)
# for the server, the worker, the simulator and the prerequisites. Without SECRET_KEY they all
# read the key generated once in var/secret_key.
run: export HTTPS ?= 0
run: static seed
	@echo ""
	@echo "  Edge routing control plane: http://$(HOST):$(PORT)/"
	@echo "  Logins: viewer/demo-viewer  editor/demo-editor  publisher/demo-publisher  admin/demo-admin"
	@echo "  Live dashboard of the simulated fleet: http://$(HOST):$(PORT)/fleets/voice-assistant-android/dashboard/"
	@echo "  API docs: http://$(HOST):$(PORT)/api/docs/   (Ctrl-C stops; RUN_LOG_LEVEL=INFO for every request)"
	@echo ""
	@# With REDIS_URL set (real services) a Celery worker with beat runs beside the server and
	@# stops with it; embedded (no REDIS_URL) everything runs in the one server process.
	@# A simulated fleet (SIM_DEVICES devices, SIM_RATE tasks/s in all; SIM=0: none) starts once
	@# the server answers and stops with it, so the demo shows live traffic within a minute.
	@# Ctrl-C (SIGINT to every process here) or SIGTERM: each process is asked to stop once
	@# with SIGTERM (a second SIGINT would make uvicorn drop its connections), the recipe waits
	@# for them and ends with 0; a server that stops by itself passes its exit code on.
	@export LOG_LEVEL=$(RUN_LOG_LEVEL); \
	trap 'trap "" INT TERM; kill -TERM $$server $$sim $$worker 2>/dev/null; wait; exit 0' INT TERM; \
	if [ -n "$$REDIS_URL" ]; then \
	  $(BIN)/celery -A controlplane worker -B --loglevel WARNING --schedule $${VAR_DIR:-var}/celerybeat-schedule & \
	  worker=$$!; \
	fi; \
	if [ "$(SIM)" != "0" ]; then \
	  ( $(BIN)/python scripts/wait_for.py --http http://$(HOST):$(PORT)/healthz --timeout 60 && \
	    exec $(BIN)/python manage.py simulate_fleet --url http://$(HOST):$(PORT) \
	      --devices $(SIM_DEVICES) --rate $(SIM_RATE) --connect-rate 20 --progress 30 ) & \
	  sim=$$!; \
	fi; \
	$(BIN)/python -m uvicorn controlplane.asgi:application --host $(HOST) --port $(PORT) $(UVICORN_FLAGS) $(RUN_UVICORN_LOG) & \
	server=$$!; \
	wait $$server; status=$$?; \
	trap "" INT TERM; kill -TERM $$sim $$worker 2>/dev/null; wait; exit $$status

# The suite runs against the real PostgreSQL and Redis on 127.0.0.1 when they answer; with
# CI=true it refuses to run (rather than skip) when either is missing.
test: static
	@source scripts/test_env.sh && $(BIN)/python -m pytest $(PYTEST_ARGS)

# Real-services mode: a Celery worker with an embedded beat (telemetry processing, the landed-
# batch sweeper, rollup compaction, partitions and retention). Needs DATABASE_URL and REDIS_URL.
worker: $(STAMP)
	$(BIN)/celery -A controlplane worker -B --loglevel INFO --schedule var/celerybeat-schedule

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	DEBUG=1 $(BIN)/mypy .
	$(BIN)/lint-imports --no-cache

# edge_sdk/wire/*_pb2.py from edge_sdk/wire/*.proto (protoc of the grpcio-tools dev
# dependency); the generated files are checked in, and a test keeps them in step.
proto: $(STAMP)
	PYTHON=$(BIN)/python scripts/gen_proto.sh

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf var/db.sqlite3 var/staticfiles
