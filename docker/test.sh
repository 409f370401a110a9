#!/usr/bin/env bash
# `make docker-test`: the stock-client scenario against the broker image, with a broker restart
# between its phases. Machines without a Docker engine skip it (`make test` runs the same
# scenario against the installed wheel).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
    echo "docker-test: skipped, no Docker engine here (make test runs the same scenario" \
         "against the installed wheel)"
    exit 0
fi
compose=(docker compose -f docker/compose.yaml --profile scenario)
cleanup() { "${compose[@]}" down --volumes --remove-orphans; }
trap cleanup EXIT
"${compose[@]}" build
"${compose[@]}" up --detach --wait broker
"${compose[@]}" run --rm scenario --phase first
"${compose[@]}" restart broker
"${compose[@]}" up --detach --wait broker
"${compose[@]}" run --rm scenario --phase resume
echo "docker-test: passed"
