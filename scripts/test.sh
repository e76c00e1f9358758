#!/usr/bin/env bash
# Runs every test. On a fresh machine it first sets everything up (Docker engine, base and
# runner images, npm dependencies, build) through scripts/setup.sh, and installs the host-side
# tools the cross-language client test needs.
#   scripts/test.sh                 all tests
#   scripts/test.sh test/unit       only the files under a folder (or a single file)
set -euo pipefail
cd "$(dirname "$0")/.."

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

scope=("${@:-test}")
files=()
for s in "${scope[@]}"; do
  s="${s%.ts}"; s="${s%.js}"
  if [ -d "dist/$s" ]; then
    while IFS= read -r f; do files+=("$f"); done < <(find "dist/$s" -name '*.test.js' | sort)
  else
    files+=("dist/$s.js")
  fi
done
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

# ---- Kubernetes: a loopback-only single-node cluster for the files under kubernetes/ --------
# scripts/cluster.sh builds it once (cached by version), starts it, and stops it again after.
if printf '%s\n' "${files[@]}" | grep -q '/kubernetes/'; then
  trap 'bash scripts/cluster.sh down || true; rm -f "$log"' EXIT
  bash scripts/cluster.sh up
  bash scripts/cluster.sh load-image "$TETHER_IMAGE"
  eval "$(bash scripts/cluster.sh env)"
fi
# ----------------------------------------------------------------------------------------------

echo "==> running ${#files[@]} test files"
status=0
node --test --test-reporter=spec "${files[@]}" 2>&1 | tee "$log" || status=$?
count() { sed -n "s/^ℹ $1 \([0-9]*\)$/\1/p" "$log" | tail -1; }
echo "tests: $(count pass) passed, $(count fail) failed, $(count skipped) skipped"
exit "$status"
