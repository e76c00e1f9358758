#!/usr/bin/env bash
# Runs every benchmark against the real components (the runner image through the docker
# provider, unless noted), each next to its baseline measured in the same run, and writes
# bench/results/*.json with the machine they ran on.
#   bench/run.sh            all of them
#   bench/run.sh lsp eval   only these
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
# shellcheck disable=SC1091
set -a; source .tether/images.env; set +a
export TETHER_LOG_LEVEL=warn TETHER_TEST_PROVIDER=docker

# The eval baseline is a Jupyter kernel on the host (Debian's packages, for /usr/bin/python3).
need=()
/usr/bin/python3 -c 'import ipykernel, jupyter_client' >/dev/null 2>&1 || need+=(python3-ipykernel python3-jupyter-client)
/usr/bin/python3 -c 'import pandas, matplotlib' >/dev/null 2>&1 || need+=(python3-pandas python3-matplotlib)
if [ ${#need[@]} -gt 0 ]; then
  echo "==> installing benchmark baselines: ${need[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

all=(call-latency connect e2b transport clients cpu-per-call containers cold-create warm-start pool lifecycle density lsp ast debug eval cards-and-workers tenancy observability packs)
chosen=("${@:-${all[@]}}")
for b in "${chosen[@]}"; do
  echo "==> bench $b"
  case "$b" in
    call-latency) node dist/bench/call-latency.js 10000 process ;;
    connect) node dist/bench/connect.js 2000 5 process ;;
    e2b)
      [ -d test/integration/e2b/js/node_modules/e2b ] || (cd test/integration/e2b/js && npm ci --no-audit --no-fund)
      node dist/bench/e2b.js 10 200 3 ;;
    transport) node dist/bench/transport.js 500 ;;
    clients) node dist/bench/clients.js 10 300 ;;
    containers) node dist/bench/containers.js ;;
    cold-create)
      node dist/bench/cold-create.js 10 3 runc
      if docker info --format '{{json .Runtimes}}' | grep -q '"runsc"'; then node dist/bench/cold-create.js 10 3 runsc; fi ;;
    warm-start) node dist/bench/warm-start.js 5 ;;
    pool) node dist/bench/pool.js 20 50 10 ;;
    lifecycle) node dist/bench/lifecycle.js 5 10 ;;
    density) node dist/bench/density.js 190 10 ;;
    cpu-per-call) node dist/bench/cpu-per-call.js 2000 3 ;;
    lsp) node dist/bench/lsp.js 40 docker ;;
    ast) node dist/bench/ast.js ;;
    debug) node dist/bench/debug.js 5 30 docker ;;
    eval) node dist/bench/eval.js 200 docker ;;
    cards-and-workers) node dist/bench/cards-and-workers.js 500 docker ;;
    tenancy) node dist/bench/tenancy.js 8 512 ;;
    observability) node dist/bench/observability.js 4000 process ;;
    packs) node dist/bench/packs.js 10 ;;
    # Not in the default list: the cluster's binaries take long to build cold (docs/kubernetes.md).
    kubernetes)
      bash scripts/cluster.sh up && bash scripts/cluster.sh load-image "$TETHER_IMAGE"
      eval "$(bash scripts/cluster.sh env)"
      # The cluster goes down again: it holds ports a test run's cluster needs.
      status=0; node dist/bench/kubernetes.js 6 2000 10 10 || status=$?
      bash scripts/cluster.sh down; [ "$status" = 0 ] ;;
    *) echo "unknown benchmark $b (one of: ${all[*]})" >&2; exit 2 ;;
  esac
done
echo "==> results in bench/results/"
