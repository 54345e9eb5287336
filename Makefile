# Two commands matter: `make demo` runs the product, `make test` runs the suite.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test venv lint typecheck check mutants evals bench browsers clean-data

$(STAMP): pyproject.toml
	@set -e; if [ ! -x "$(PY)" ]; then \
	  BASE=$$(scripts/find-python) || exit 1; \
	  echo "Creating $(VENV) with $$BASE"; \
	  "$$BASE" -m venv "$(VENV)"; \
	fi
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) scripts/demo.py

# The tests start the embedded Postgres when DATABASE_URL is unset; stop it again
# afterwards unless it was already running (e.g. under `make demo`).
test: $(STAMP) browsers
	@was_running=$$(test -f .deskhand/pgdata/postmaster.pid && echo yes); \
	$(PY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ -z "$$was_running" ] && [ -z "$$DATABASE_URL" ]; then \
	  $(PY) -c "from deskhand import embedded_pg; embedded_pg.stop()"; \
	fi; exit $$rc

browsers: $(STAMP)
	@$(PY) scripts/ensure_chromium.py

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

typecheck: $(STAMP)
	$(PY) -m mypy deskhand agent approvals

check: lint typecheck test

evals: $(STAMP)
	$(PY) manage.py evals

mutants: $(STAMP)
	$(PY) scripts/mutants.py

bench: $(STAMP)
	$(PY) manage.py bench

clean-data:
	$(PY) -c "from deskhand import embedded_pg; embedded_pg.stop()" || true
	rm -rf .deskhand
