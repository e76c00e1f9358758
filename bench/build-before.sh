#!/usr/bin/env bash
# Builds the gateway of an earlier commit into .tether/before/, for benchmarks that compare two
# builds in one run (bench/tenancy.ts flood --before .tether/before/dist/gateway/src/cli.js).
# It shares this tree's node_modules; the protocol code is generated for that commit's proto.
#   bash bench/build-before.sh <commit>
set -euo pipefail
commit="${1:?usage: bench/build-before.sh <commit>}"
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/.tether/before"
rm -rf "$dest"
mkdir -p "$dest"
git -C "$root" archive "$commit" | tar -x -C "$dest"
ln -s "$root/node_modules" "$dest/node_modules"
cd "$dest"
npx buf generate proto
npx tsc -p tsconfig.json
bash scripts/copy-assets.sh
echo "$dest/dist/gateway/src/cli.js"
