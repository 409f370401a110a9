# Everything a fresh machine needs is installed by these targets: a virtualenv in .venv with the
# broker, the stock Kafka clients the tests drive, and the linters.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test test-unit test-integration lint bench forensics clean docker-test fuzz soak

$(STAMP): pyproject.toml
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

# Fuzzing for longer than make test does, then random and mutated frames against a running
# broker while a stock consumer group consumes (bounded in frames and seconds).
fuzz: $(STAMP)
	REBALANCED_FUZZ_EXAMPLES=20000 $(BIN)/pytest -q -p no:cacheprovider tests/property/test_fuzz_inputs.py
	$(BIN)/python -m tests.fuzz.live --frames 1000000 --seconds 600

# Group churn, commits, producers and fetchers for 10 minutes; RSS and descriptors sampled.
soak: $(STAMP)
	$(BIN)/python -m tests.fuzz.soak --minutes 10

clean:
	rm -rf $(VENV) data
