# Every target creates .venv itself and installs what it needs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench screenshots clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "==> installing a2a-push and dev dependencies into $(VENV)"
	@$(PY) -m pip install --quiet --upgrade pip
	@$(PY) -m pip install --quiet -e '.[dev,postgres,otel]'
	@touch $(STAMP)

demo: $(STAMP)
	$(PY) -m a2a_push demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

unit: $(STAMP)
	$(VENV)/bin/pytest -q

test: lint typecheck unit

bench: $(STAMP)
	$(PY) -m benchmarks

# The console's pictures in docs/images (needs Debian's chromium).
screenshots: $(STAMP)
	$(PY) scripts/console_screenshots.py docs/images

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
