#!/usr/bin/env bash
# Builds the code: npm dependencies (when the lockfile changed), the generated protocol code
# (when the proto changed) and the TypeScript in dist/. Needs no Docker and no root.
#   scripts/build.sh --deps-only    only the dependencies and the generated code
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .tether

step() { printf '\n==> %s\n' "$*"; }

if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  step "installing npm dependencies"
  npm ci --no-fund --no-audit
fi

# Regenerated when any proto file or the generator's configuration changes.
proto_hash="$(find proto contract/e2b buf.gen.yaml -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"
# One output, contract/src/gen (@tether/contract), which the gateway and @tether/client import.
if [ ! -d contract/src/gen ] || [ "$(cat .tether/gen.hash 2>/dev/null)" != "$proto_hash" ]; then
  step "generating the protocol code"
  rm -rf contract/src/gen
  npx buf generate
  echo "$proto_hash" >.tether/gen.hash
fi

[ "${1:-}" = --deps-only ] && exit 0

step "compiling TypeScript"
npx tsc -p tsconfig.json
# The workspace packages as npm installs them (each its own dist/, behind node_modules/@tether/*):
# the contract first, since @tether/client compiles against its declarations.
npx tsc -p contract/tsconfig.json
npx tsc -p clients/typescript/tsconfig.json
bash scripts/copy-assets.sh
# The runner as one file, which its image starts: loading its 516 modules (247 of them
# TypeBox's) from as many files took about 1.6 times as long as one bundle (docs/pool.md,
# "Cold start"). Beside main.js, so that runnerFile() finds the workers and drivers from either.
# Left outside: what finds files of its own by its own __dirname (tree-sitter's wasm). pino is
# inside: the runner logs through pino.destination, never a transport (the worker thread pino
# would start from its own files), and under gVisor each file a start opens costs a gofer trip.
npx esbuild dist/runner/src/main.js --bundle --platform=node --format=cjs --target=node22 \
  --outfile=dist/runner/src/main.bundle.js --log-level=warning \
  --external:web-tree-sitter --external:tree-sitter-wasms
for f in dist/runner/src/main.js dist/runner/src/main.bundle.js dist/runner/src/tools/eval/python/driver.py \
  dist/runner/src/tools/process/ptyhost.py dist/protocol/src/run.js; do
  [ -f "$f" ] || { echo "$f is missing after the build" >&2; exit 1; }
done
