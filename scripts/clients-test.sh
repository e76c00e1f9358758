#!/usr/bin/env bash
# Lints and tests the Python and Go clients against a live gateway, which the caller names:
#   TETHER_ADDRESS, TETHER_TOKEN_A, TETHER_TOKEN_B (two tenants).
# test/e2e/conformance-clients.test.ts starts such a gateway and runs this script.
#   scripts/clients-test.sh [python|go]...     (both when none is named)
set -euo pipefail
cd "$(dirname "$0")/.."
: "${TETHER_ADDRESS:?set TETHER_ADDRESS (and TETHER_TOKEN_A, TETHER_TOKEN_B) to a live gateway}"
: "${TETHER_TOKEN_A:?}" "${TETHER_TOKEN_B:?}"

venv="$(bash scripts/clients-setup.sh | tail -1)"
root="$PWD"
langs=("${@:-python go}")
# shellcheck disable=SC2068
for lang in ${langs[@]}; do
  case "$lang" in
    python)
      echo "==> python: ruff, pyright, pytest"
      (cd clients/python && "$root/$venv/bin/ruff" check . && "$root/$venv/bin/ruff" format --check . \
        && "$root/$venv/bin/pyright" --pythonpath "$root/$venv/bin/python" \
        && "$root/$venv/bin/pyright" --pythonpath "$root/$venv/bin/python" "$root/bench/clients/driver.py" \
        && "$root/$venv/bin/python" -m pytest -v -p no:cacheprovider)
      ;;
    go)
      command -v go >/dev/null 2>&1 || export PATH="/usr/local/go/bin:$PATH"
      # The race detector needs cgo's C compiler; without one the tests run plain.
      race=()
      if command -v cc >/dev/null 2>&1; then race=(-race); else echo "no C compiler: go test without -race" >&2; fi
      echo "==> go: vet, test ${race[*]}"
      (cd clients/go && go vet ./... && go test -count=1 "${race[@]}" -v ./...)
      ;;
    *) echo "unknown client: $lang" >&2; exit 2 ;;
  esac
done
