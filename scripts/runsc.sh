#!/usr/bin/env bash
# gVisor's runsc, built from its Go module (deploy/runsc, pinned by go.mod and go.sum) and cached
# per machine like the cluster's binaries:
#   ${TETHER_CACHE_DIR:-~/.cache/tether}/runsc-<version>-<hash of go.mod and go.sum>/runsc
#
#   scripts/runsc.sh build     builds it once (a few minutes on 2 cores; run it under the heavy lock)
#                              and prints the binary's path
#   scripts/runsc.sh path      prints the cached binary's path, or fails when it is not built
#
# Why a build: Debian's runsc (20221219) always compresses a checkpoint and reads all of it back
# on restore; a current one can write it uncompressed and load pages after the restore returns
# (docs/lifecycle.md, "Memory depth"). The module proxy serves gVisor's `go` branch, which is
# meant to build with plain `go build`.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
MOD="$ROOT/deploy/runsc"
export PATH="$PATH:/usr/local/go/bin"

VERSION="$(sed -n 's#^require gvisor.dev/gvisor \(v[^ ]*\)$#\1#p' "$MOD/go.mod")"
[ -n "$VERSION" ] || { echo "runsc: no gvisor.dev/gvisor version in $MOD/go.mod" >&2; exit 1; }
HASH="$(cat "$MOD/go.mod" "$MOD/go.sum" | sha256sum | cut -c1-12)"
CACHE="${TETHER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tether}"
BIN="$CACHE/runsc-$VERSION-$HASH"

build() {
  if [ -x "$BIN/runsc" ]; then echo "$BIN/runsc"; return; fi
  command -v go >/dev/null || { echo 'runsc: go is needed to build runsc' >&2; return 1; }
  echo "==> runsc: building gvisor.dev/gvisor/runsc $VERSION (once per machine)" >&2
  local start tmp
  start=$(date +%s)
  tmp="$BIN.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  # Static, as gVisor ships it: the sandbox re-executes this binary in a near-empty root.
  (cd "$MOD" && CGO_ENABLED=0 nice -n 19 go build -buildvcs=false -trimpath -ldflags '-s -w' -o "$tmp/runsc" gvisor.dev/gvisor/runsc) >&2
  "$tmp/runsc" --version >/dev/null
  rm -rf "$BIN"; mv "$tmp" "$BIN"
  echo "==> runsc: built in $(( $(date +%s) - start )) s into $BIN" >&2
  echo "$BIN/runsc"
}

case "${1:-}" in
  build) build ;;
  path) [ -x "$BIN/runsc" ] && echo "$BIN/runsc" ;;
  *) echo "usage: $0 build|path" >&2; exit 2 ;;
esac
