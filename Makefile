# Two commands matter: `make demo` runs the product, `make test` runs the suite.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test screenshots venv lint typecheck imports deadcode check mutants evals bench browsers clean-data

$(STAMP): pyproject.toml
	@set -e; if [ ! -x "$(PY)" ]; then \
	  BASE=$$(scripts/find-python) || exit 1; \
	  echo "Creating $(VENV) with $$BASE"; \
	  "$$BASE" -m venv "$(VENV)"; \
	fi
	@echo "Installing Deskhand's Python packages into $(VENV) (first run or pyproject.toml changed: a few minutes)..."
	@$(PY) -m pip install --quiet --upgrade pip
	@$(PY) -m pip install --quiet -e . --group dev
	@echo "Installed."
	@touch $(STAMP)

venv: $(STAMP)

# `make demo PROVIDER=double`: the anthropic provider against the local Messages-API double.
# `make demo PAYMENTS=double`: Northwind's refunds at the local payments double.
# `make demo SHOP=double`: Northwind's orders (and refunds) at the local Shopify double.
demo: $(STAMP)
	$(PY) scripts/demo.py $(if $(PROVIDER),--provider $(PROVIDER)) $(if $(PAYMENTS),--payments $(PAYMENTS)) $(if $(SHOP),--shop $(SHOP))

# The tests start the embedded Postgres when DATABASE_URL is unset; stop it again
# afterwards unless it was already running (e.g. under `make demo`). They run in
# TEST_WORKERS pytest processes (pytest-xdist), each on its own test database: a test mostly
# waits on workers, Postgres and timers, so four keep two cores busy (six measured slower).
TEST_WORKERS ?= 4
test: $(STAMP) browsers
	@was_running=$$(test -f .deskhand/pgdata/postmaster.pid && echo yes); \
	DESKHAND_CHECK_TREE=1 $(PY) -m pytest -n $(TEST_WORKERS) --dist load $(PYTEST_ARGS); rc=$$?; \
	if [ -z "$$was_running" ] && [ -z "$$DATABASE_URL" ]; then \
	  $(PY) -c "from deskhand.infra import embedded_pg; embedded_pg.stop()"; \
	fi; exit $$rc

# The README's screenshots, from the browser tests (make test writes them to a temporary folder).
screenshots: $(STAMP) browsers
	DESKHAND_SCREENSHOTS=$(CURDIR)/docs/screenshots $(PY) -m pytest tests/console/test_browser.py -q

# Debian's Chromium for Playwright, and axe-core (package.json, pinned) into node_modules/.
browsers: $(STAMP)
	@$(PY) scripts/ensure_chromium.py
	@$(PY) scripts/ensure_axe.py

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

typecheck: $(STAMP)
	$(PY) -m mypy deskhand agent approvals

# The import contracts of [tool.importlinter] in pyproject.toml: layers, who may import dbos.
imports: $(STAMP)
	$(VENV)/bin/lint-imports

# Dead code; names only frameworks reach are in scripts/vulture_allowlist.py.
deadcode: $(STAMP)
	$(PY) -m vulture

# Static checks only (the tests are `make test`). Runs every part, fails if any failed.
check: $(STAMP)
	@failed=""; \
	for part in lint typecheck imports deadcode; do \
	  $(MAKE) --no-print-directory $$part || failed="$$failed $$part"; \
	done; \
	if [ -n "$$failed" ]; then echo "make check: failed:$$failed" >&2; exit 1; fi; \
	echo "make check: lint, typecheck, imports and deadcode passed"

evals: $(STAMP)
	$(PY) manage.py evals

mutants: $(STAMP)
	$(PY) scripts/mutants.py

bench: $(STAMP)
	$(PY) manage.py bench

clean-data:
	$(PY) -c "from deskhand.infra import embedded_pg; embedded_pg.stop()" || true
	rm -rf .deskhand
