# The one entry point for developers and CI. Every target sets up what it needs itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: dev test test-slow lint demo bench bench-proofs dist gpu-check clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

dev: $(STAMP)

# The fast tier; test-slow runs the rest (tests/support/tiers.py says what and why). CI runs both.
test: $(STAMP)
	$(BIN)/python -m pytest -n auto --maxprocesses 4 -m "not slow" --durations=20 --cov --cov-branch --cov-report=term

test-slow: $(STAMP)
	$(BIN)/python -m pytest -n auto --maxprocesses 4 -m slow --durations=20

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

bench-proofs: $(STAMP)
	$(BIN)/python benchmarks/run.py --proofs-only

# The wheel and sdist to install fi-patch from (it is not on the package index): dist/.
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

# On a machine with a GPU: apply every patch to TARGET (a venv with torch and FlashInfer), then
# compare compiled fp4_quantize, the entry points made ops by the declared-ops patches and those
# the op-* patches give a boundary, with eager, and replay them in a CUDA graph (docs/gpu.md). All
# three run; it fails if one failed (exit 1), or if none had a device (77). CI never runs it.
GPU_SCRIPTS := fp4_compiled declared_ops boundaries

gpu-check: $(STAMP)
	@test -n "$(TARGET)" || { echo "usage: make gpu-check TARGET=/path/to/venv" >&2; exit 2; }
	$(BIN)/fi-patch apply --venv $(TARGET)
	@mkdir -p build
	@failed=0; devices=0; \
	for script in $(GPU_SCRIPTS); do \
		$(TARGET)/bin/python scripts/gpu/$$script.py --out build/$$script-gpu.json; status=$$?; \
		[ $$status = 77 ] || devices=1; [ $$status = 0 ] || [ $$status = 3 ] || [ $$status = 77 ] || failed=1; \
	done; \
	[ $$failed = 0 ] || exit 1; [ $$devices = 1 ] || exit 77

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache .coverage
