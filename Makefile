# Everything a fresh machine needs is installed by these targets: a virtualenv in .venv with the
# broker, the stock Kafka clients the tests drive, and the linters.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test test-unit test-integration lint bench bench-pause forensics bench-forensics clean docker-test fuzz soak browser kafka-go other-clients

$(STAMP): pyproject.toml setup.py storage/_legacy_speedups.c storage/_fsync_worker.c \
		protocol/_tls_records.c forensics/_grouplog_speedups.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,forensics]'
	touch $(STAMP)

install: $(STAMP) browser kafka-go other-clients

# A headless browser for the group page's screenshot test: chromium-headless-shell (the
# smallest Debian chromium package), only when running as root with apt and no chromium yet.
# Quiet; if apt cannot reach its mirror the install goes on and that one test skips.
BROWSERS := chromium chromium-browser chromium-headless-shell chrome-headless-shell
browser:
	@found=; for b in $(BROWSERS); do command -v $$b >/dev/null 2>&1 && found=$$b; done; \
	if [ -z "$$found" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing chromium-headless-shell (apt) for the page screenshot test"; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends chromium-headless-shell; } >/dev/null 2>&1 || \
			echo "chromium not installed (apt failed): the screenshot test will skip"; \
	fi

# Go and kafka-go 0.2.1 (Debian's packages) for the kafka-go consumer tests, which build their
# worker offline against /usr/share/gocode: only as root with apt, quietly; elsewhere, or if apt
# cannot reach its mirror, those tests skip and say why.
KAFKA_GO_PACKAGES := golang-go golang-github-segmentio-kafka-go-dev
kafka-go:
	@if command -v go >/dev/null 2>&1 && [ -d /usr/share/gocode/src/github.com/segmentio/kafka-go ]; then \
		:; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing $(KAFKA_GO_PACKAGES) (apt) for the kafka-go tests"; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends $(KAFKA_GO_PACKAGES); } >/dev/null 2>&1 || \
			echo "kafka-go not installed (apt failed): the kafka-go tests will skip"; \
	else \
		echo "kafka-go not installed (needs root and apt: $(KAFKA_GO_PACKAGES)): the kafka-go tests will skip"; \
	fi

# Other clients and tools for the compatibility tests (docs/compatibility.md): kcat, sarama,
# Burrow with the ZooKeeper it needs for itself, from apt (as root), and kafkajs from npm into
# .venv/kafkajs where npm is there. Quiet and optional: whatever cannot be installed makes its
# test skip.
OTHER_CLIENT_PACKAGES := kcat golang-github-shopify-sarama-dev burrow zookeeper
KAFKAJS_VERSION := 2.2.4
other-clients:
	@if ! command -v kcat >/dev/null 2>&1 || [ ! -d /usr/share/gocode/src/github.com/Shopify/sarama ] \
			|| ! command -v Burrow >/dev/null 2>&1 || [ ! -f /usr/share/java/zookeeper.jar ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing $(OTHER_CLIENT_PACKAGES) (apt) for the compatibility tests"; \
			{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
				--no-install-recommends $(OTHER_CLIENT_PACKAGES); } >/dev/null 2>&1 || \
				echo "other clients not installed (apt failed): their compatibility tests will skip"; \
		else \
			echo "other clients not installed (needs root and apt): their compatibility tests will skip"; \
		fi; \
	fi
	@if [ ! -f $(VENV)/kafkajs/node_modules/kafkajs/package.json ]; then \
		if command -v npm >/dev/null 2>&1; then \
			npm install --silent --no-audit --no-fund --prefix $(VENV)/kafkajs \
				kafkajs@$(KAFKAJS_VERSION) >/dev/null 2>&1 || \
				echo "kafkajs not installed (npm failed): its compatibility test will skip"; \
		else \
			echo "kafkajs not installed (no npm; Debian: nodejs npm): its compatibility test will skip"; \
		fi; \
	fi

run: $(STAMP)
	$(BIN)/rebalanced --log.dirs ./data --listeners PLAINTEXT://127.0.0.1:9092 \
		--metrics.listener 127.0.0.1:9404

test: $(STAMP) browser kafka-go other-clients
	$(BIN)/ruff check protocol coordinator storage forensics tests
	$(BIN)/mypy
	$(BIN)/pytest -q -p no:cacheprovider tests

test-unit: $(STAMP)
	$(BIN)/pytest -q tests/unit tests/property tests/golden

test-integration: $(STAMP)
	$(BIN)/pytest -q tests/integration

lint: $(STAMP)
	$(BIN)/ruff check protocol coordinator storage forensics tests
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[test,bench]'
	$(BIN)/python -m tests.bench.run
	$(BIN)/python -m tests.bench.pause
	# KIP-848 consumer groups beside the librdkafka mock (~2 min; bounded at 15).
	timeout 900 $(BIN)/python -m tests.bench.consumer_group_bench --quick

# The pause of a consumer group when one consumer dies, rebalanced beside Tansu (~15 min;
# `$(BIN)/python -m tests.bench.pause --quick` runs a ~4 min subset).
bench-pause: $(STAMP)
	$(BIN)/pip install --quiet -e '.[test,bench]'
	$(BIN)/python -m tests.bench.pause

# Rebalance forensics (docs/forensics.md): the report on ./data, and its benchmark.
FORENSICS_OUT ?= forensics-report

forensics: $(STAMP)
	$(BIN)/python -m forensics --data ./data --out $(FORENSICS_OUT)

bench-forensics: $(STAMP)
	$(BIN)/python -m tests.bench.forensics_bench

# The image built and run: host and container clients, the stock-client scenario across a
# restart (docker/test.sh; says SKIPPED where no Docker engine answers).
docker-test: $(STAMP)
	PYTHON=$(BIN)/python docker/test.sh

# Fuzzing for longer than make test does, then random and mutated frames against a running
# broker while a stock consumer group consumes (bounded in frames and seconds).
fuzz: $(STAMP)
	REBALANCED_FUZZ_EXAMPLES=20000 $(BIN)/pytest -q -p no:cacheprovider tests/property/test_fuzz_inputs.py
	$(BIN)/python -m tests.bench.live_fuzz --frames 1000000 --seconds 600

# Group churn, commits, producers and fetchers for 10 minutes; RSS and descriptors sampled.
soak: $(STAMP)
	$(BIN)/python -m tests.bench.soak --minutes 10

clean:
	rm -rf $(VENV) data $(FORENSICS_OUT)
