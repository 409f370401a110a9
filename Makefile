# Everything a fresh machine needs is installed by these targets: a virtualenv in .venv with the
# broker, the stock Kafka clients the tests drive, and the linters.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test test-unit test-integration lint bench forensics clean docker-test

$(STAMP): pyproject.toml setup.py storage/_legacy_speedups.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/rebalanced --log.dirs ./data --listeners PLAINTEXT://127.0.0.1:9092

test: $(STAMP)
	$(BIN)/ruff check protocol coordinator storage tests
	$(BIN)/mypy
	$(BIN)/pytest -q -p no:cacheprovider tests

test-unit: $(STAMP)
	$(BIN)/pytest -q tests/unit tests/property tests/golden

test-integration: $(STAMP)
	$(BIN)/pytest -q tests/integration

lint: $(STAMP)
	$(BIN)/ruff check protocol coordinator storage tests
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[test,bench]'
	$(BIN)/python -m tests.bench.run

# The stock-client scenario against the Docker image (skipped where there is no Docker engine).
docker-test:
	docker/test.sh

clean:
	rm -rf $(VENV) data
