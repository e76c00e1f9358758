#!/usr/bin/env bash
# Lints, format-checks and type-checks the project's Python (runner/**/*.py, bench/*.py,
# test/python/*.py; settings in ruff.toml and pyrightconfig.json): ruff from PyPI, installed once
# per version into .tether/cache, and pyright from the npm devDependencies.
set -euo pipefail
cd "$(dirname "$0")/.."

RUFF_VERSION=0.17.5
ruff_dir=".tether/cache/ruff-$RUFF_VERSION"
if [ ! -x "$ruff_dir/bin/ruff" ]; then
  echo "==> installing ruff $RUFF_VERSION from PyPI"
  if ! python3 -m pip --version >/dev/null 2>&1; then
    as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
    as_root apt-get update -qq && DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq python3-pip >/dev/null
  fi
  rm -rf .tether/cache/ruff-*
  mkdir -p .tether/cache
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --only-binary=:all: \
    --target "$ruff_dir.tmp" "ruff==$RUFF_VERSION"
  mv "$ruff_dir.tmp" "$ruff_dir"
fi
if [ ! -x node_modules/.bin/pyright ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-fund --no-audit
fi

paths=(runner bench test/python)
status=0
"$ruff_dir/bin/ruff" check "${paths[@]}" || status=1
"$ruff_dir/bin/ruff" format --check "${paths[@]}" || status=1
node_modules/.bin/pyright --project pyrightconfig.json || status=1
exit "$status"
