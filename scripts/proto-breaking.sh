#!/usr/bin/env bash
# Checks that the proto contract stays compatible with the last release: `buf breaking` of a
# proto module (default: proto/) against the newest descriptor image in proto/releases/.
#   scripts/proto-breaking.sh [proto-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
module="${1:-proto}"
last="$(find proto/releases -name 'tether-v*.binpb' | sort -V | tail -1)"
[ -n "$last" ] || { echo "no release image in proto/releases/" >&2; exit 2; }
echo "buf breaking $module against $last"
npx --no-install buf breaking "$module" --against "$last"
