#!/usr/bin/env bash
# Tests language packs against their real servers, including those the default suite leaves to
# this command because their build is long (rust: rust-analyzer from crates.io, about ten minutes
# on a fresh machine, then cached).
#   scripts/test-packs.sh            every pack
#   scripts/test-packs.sh rust go    those packs, in one template
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -gt 0 ]; then packs="$(IFS=,; echo "$*")"
else packs="$(for d in packs/*/expect.json; do basename "$(dirname "$d")"; done | paste -sd,)"; fi
TETHER_TEST_PACKS="$packs" exec bash scripts/test.sh test/integration/packs/packs.test.ts
