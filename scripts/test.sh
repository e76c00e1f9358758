#!/usr/bin/env bash
# Runs the tests.
#   scripts/test.sh               the gate first (lint, typecheck, unit tests: no Docker, no root),
#                                 then the machine's set-up (scripts/setup.sh) and every other test
#   scripts/test.sh test/unit     only the files under a folder (or single files); the Docker
#                                 set-up runs only when one of them is outside test/unit
set -euo pipefail
cd "$(dirname "$0")/.."

full=0
[ $# -eq 0 ] && full=1
scope=("${@:-test}")

needs_engine=0
for s in "${scope[@]}"; do
  case "$s" in test/unit | test/unit/*) ;; *) needs_engine=1 ;; esac
done

if [ "$full" = 1 ]; then
  bash scripts/build.sh --deps-only
  echo "==> lint"
  npm run --silent lint
fi
echo "==> typecheck and compile"
bash scripts/build.sh

# test_files <scope>...: the compiled test files under each folder, or the single files named.
test_files() {
  for s in "$@"; do
    s="${s%.ts}"; s="${s%.js}"
    if [ -d "dist/$s" ]; then find "dist/$s" -name '*.test.js' | sort
    else echo "dist/$s.js"; fi
  done
}

log="$(mktemp)"
trap 'rm -f "$log"' EXIT

status=0
run_tests() { # label files...
  local label="$1"; shift
  [ $# -gt 0 ] || { echo "==> $label: no test files"; return; }
  echo "==> $label: $# test files"
  node --test --test-reporter=spec "$@" 2>&1 | tee -a "$log" || status=$?
}

if [ "$full" = 1 ]; then
  mapfile -t unit < <(test_files test/unit)
  run_tests "unit tests" "${unit[@]}"
  [ "$status" = 0 ] || { echo "the unit gate failed; not starting the Docker tests" >&2; }
fi

if [ "$status" = 0 ] && [ "$needs_engine" = 1 ]; then
  # gVisor too, so the runtime test runs a run under runsc instead of skipping.
  TETHER_WITH_RUNSC=1 bash scripts/setup.sh
  # shellcheck disable=SC1091
  set -a; source .tether/images.env; set +a

  need=()
  command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
  [ -x /usr/bin/grpc_python_plugin ] || need+=(protobuf-compiler-grpc)
  /usr/bin/python3 -c 'import grpc, google.protobuf' >/dev/null 2>&1 || need+=(python3-grpcio python3-protobuf)
  [ -f /usr/include/google/protobuf/timestamp.proto ] || need+=(libprotobuf-dev)
  if [ ${#need[@]} -gt 0 ]; then
    echo "==> installing test tools: ${need[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi

  # Tool families are tested against the real servers, adapters and kernels in the runner image.
  export TETHER_TEST_PROVIDER=docker
  export TETHER_LOG_LEVEL="${TETHER_LOG_LEVEL:-warn}"
  export TESTCONTAINERS_RYUK_DISABLED=true TESTCONTAINERS_HOST_OVERRIDE=localhost
fi

if [ "$status" = 0 ]; then
  if [ "$full" = 1 ]; then
    mapfile -t rest < <(test_files test | grep -v '^dist/test/unit/')
  else
    mapfile -t rest < <(test_files "${scope[@]}")
  fi

  # ---- Kubernetes: a loopback-only single-node cluster for the files under kubernetes/ ------
  # `up` builds its binaries first on a machine that lacks them (4–10 minutes cold, cached
  # per machine; docs/kubernetes.md).
  if printf '%s\n' "${rest[@]}" | grep -q '/integration/kubernetes/'; then
    trap 'bash scripts/cluster.sh down || true; rm -f "$log"' EXIT
    bash scripts/cluster.sh up
    bash scripts/cluster.sh load-image "$TETHER_IMAGE"
    eval "$(bash scripts/cluster.sh env)"
  fi

  run_tests "tests" "${rest[@]}"
fi

total() { sed -n "s/^ℹ $1 \([0-9]*\)$/\1/p" "$log" | awk '{ n += $1 } END { print n + 0 }'; }
# A test whose promise never settled is cancelled, not failed: it fails the run all the same.
cancelled="$(total cancelled)"
echo "tests: $(total pass) passed, $(total fail) failed, $(total skipped) skipped$([ "$cancelled" = 0 ] || echo ", $cancelled cancelled")"
exit "$status"
