# The one entry point for developers and CI. Every target sets up what it needs itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: dev test test-slow lint demo bench dist gpu-check clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

dev: $(STAMP)

# The fast tier; test-slow runs the rest (tests/support/tiers.py says what and why). CI runs both.
test: $(STAMP)
	$(BIN)/python -m pytest -n auto --maxprocesses 4 -m "not slow" --cov --cov-branch --cov-report=term

test-slow: $(STAMP)
	$(BIN)/python -m pytest -n auto --maxprocesses 4 -m slow

lint: $(STAMP)
	$(BIN)/ruff format --check src tests patches benchmarks
	$(BIN)/ruff check src tests patches benchmarks
	$(BIN)/mypy

# For users: fi-patch as a user installs it (no developer extras), in build/demo-tool.
DEMO_TOOL := build/demo-tool

demo:
	rm -rf $(DEMO_TOOL)
	$(PYTHON) -m venv $(DEMO_TOOL)
	$(DEMO_TOOL)/bin/python -m pip install -qq --disable-pip-version-check .
	PATH="$(CURDIR)/$(DEMO_TOOL)/bin:$$PATH" bash scripts/demo.sh build/demo-venv

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

# The wheel and sdist to install fi-patch from (it is not on the package index): dist/.
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

# On a machine with a GPU: apply every patch to TARGET (a venv with torch and FlashInfer), then
# compare compiled fp4_quantize, the entry points made ops by the declared-ops patches and those
# the op-* patches give a boundary, with eager, and replay them in a CUDA graph. CI never runs it.
gpu-check: $(STAMP)
	@test -n "$(TARGET)" || { echo "usage: make gpu-check TARGET=/path/to/venv" >&2; exit 2; }
	$(BIN)/fi-patch apply --venv $(TARGET)
	@mkdir -p build
	$(TARGET)/bin/python scripts/gpu/fp4_compiled.py --out build/fp4-gpu.json
	$(TARGET)/bin/python scripts/gpu/declared_ops.py --out build/declared-gpu.json
	$(TARGET)/bin/python scripts/gpu/boundaries.py --out build/boundaries-gpu.json

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache .coverage
