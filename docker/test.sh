#!/usr/bin/env bash
# `make docker-test`: build the images (the broker from the project's wheel), start the compose
# broker on a free host port, and run tests/packaging/test_docker_image.py against it: a stock
# client on the host through the published port, kcat and the stock-client scenario from
# containers on the compose network (with a broker restart), the health check on a moved
# listener, and the one-line errors of a bad setting and of an unwritable volume. Then the
# SASL_SSL example (compose.sasl_ssl.yaml) with throwaway certificates, driven from the host by a
# stock client and the operators' CLI (tests/packaging/test_docker_sasl_ssl.py).
# Everything it starts is removed on the way out, failure or not. Without a Docker engine it
# says so and passes (`make test` runs the scenario against the installed wheel); once an
# engine answers, every failure fails.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v docker >/dev/null 2>&1 || ! timeout 20 docker info >/dev/null 2>&1; then
    echo "docker-test: SKIPPED: no Docker engine answers here (make test runs the same scenario" \
         "against the installed wheel)"
    exit 0
fi
if ! docker compose version >/dev/null 2>&1; then
    echo "docker-test: FAILED: a Docker engine answers but the Compose v2 plugin is missing" >&2
    exit 1
fi
PYTHON=${PYTHON:-.venv/bin/python}

# One compose project per run, on a host port free now: nothing fixed that another run or
# another program could hold.
export COMPOSE_PROJECT_NAME="rebalanced-test-$$"
REBALANCED_HOST_PORT=$("$PYTHON" -c 'from tests.broker_process import free_port; print(free_port())')
export REBALANCED_HOST_PORT
compose=(docker compose -f docker/compose.yaml --profile scenario --profile examples)
REBALANCED_SASL_HOST_PORT=$("$PYTHON" -c 'from tests.broker_process import free_port; print(free_port())')
REBALANCED_CERTS_DIR=$(mktemp -d)
export REBALANCED_SASL_HOST_PORT REBALANCED_CERTS_DIR
sasl_compose=(docker compose -f docker/compose.sasl_ssl.yaml -p "${COMPOSE_PROJECT_NAME}-sasl")

cleanup() {
    local status=$?
    "${compose[@]}" down --volumes --remove-orphans --timeout 10 >/dev/null 2>&1 || true
    REBALANCED_HOST_PORT=$REBALANCED_SASL_HOST_PORT "${sasl_compose[@]}" down --volumes \
        --remove-orphans --timeout 10 >/dev/null 2>&1 || true
    rm -rf "$REBALANCED_CERTS_DIR"
    # Containers the tests started outside compose carry the project's name.
    docker ps -aq --filter "name=^${COMPOSE_PROJECT_NAME}-" | xargs -r docker rm --force --volumes >/dev/null
    docker volume ls -q --filter "name=^${COMPOSE_PROJECT_NAME}-" | xargs -r docker volume rm \
        >/dev/null 2>&1 || true
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now_ms() { date +%s%3N; }
seconds() { awk -v ms="$1" 'BEGIN { printf "%.1f s", ms / 1000 }'; }
started=$(now_ms)
"${compose[@]}" build --quiet
built=$(now_ms)
"${compose[@]}" up --detach --wait --wait-timeout 60 broker
healthy=$(now_ms)
REBALANCED_DOCKER_COMPOSE="${compose[*]}" "$PYTHON" -m pytest -q -s -p no:cacheprovider \
    tests/packaging/test_docker_image.py
finished=$(now_ms)
# The SASL_SSL example, from the same image: certificates readable by the container's user.
sh docker/make-test-certs.sh "$REBALANCED_CERTS_DIR" >/dev/null
chmod 0755 "$REBALANCED_CERTS_DIR"
REBALANCED_HOST_PORT=$REBALANCED_SASL_HOST_PORT "${sasl_compose[@]}" up --detach --wait \
    --wait-timeout 60 broker
"$PYTHON" -m pytest -q -s -p no:cacheprovider tests/packaging/test_docker_sasl_ssl.py
sasl_finished=$(now_ms)
size=$(docker image inspect -f '{{.Size}}' rebalanced:local)
echo "docker-test: passed (build $(seconds $((built - started))), compose up to healthy" \
     "$(seconds $((healthy - built))), tests $(seconds $((finished - healthy))), SASL_SSL example" \
     "$(seconds $((sasl_finished - finished)));" \
     "image $((size / 1000000)) MB)"
