#!/usr/bin/env bash
# Installs what the Python and Go clients need to build and test, each cached:
#   - a venv at .tether/venv-clients-<hash of requirements-dev.txt, pyproject.toml, python version>
#     with the pinned packages and tether-client installed editable;
#   - the Python stubs (clients/python/gen_stubs.py: regenerated only when proto/ changes);
#   - protoc-gen-go / protoc-gen-go-grpc at .tether/go-tools-<versions>/bin, and a check that the
#     committed Go stubs in clients/go/tetherv1 are what proto/ generates.
# Prints the venv's path on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

PROTOC_GEN_GO=v1.36.12
PROTOC_GEN_GO_GRPC=v1.6.2

python=""
for p in python3.13 python3.12 python3.11 python3; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import sys, venv; sys.exit(sys.version_info < (3, 9))' 2>/dev/null; then
    python="$(command -v "$p")"; break
  fi
done
if [ -z "$python" ]; then
  echo "==> installing python3-venv"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
  python="$(command -v python3)"
fi

key="$( { cat clients/python/requirements-dev.txt clients/python/pyproject.toml; "$python" -c 'import sys; print(sys.version)'; } | sha256sum | cut -c1-16)"
venv=".tether/venv-clients-$key"
if [ ! -f "$venv/.installed" ]; then
  echo "==> creating $venv" >&2
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r clients/python/requirements-dev.txt >&2
  "$venv/bin/python" clients/python/gen_stubs.py
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps --no-build-isolation -e clients/python >&2
  touch "$venv/.installed"
fi
"$venv/bin/python" clients/python/gen_stubs.py

if ! command -v go >/dev/null 2>&1; then
  export PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null 2>&1 || { echo "Go is not installed (clients/go needs Go >= 1.26)" >&2; exit 1; }
tools=".tether/go-tools-pgg${PROTOC_GEN_GO#v}-pggg${PROTOC_GEN_GO_GRPC#v}"
if [ ! -x "$tools/bin/protoc-gen-go" ] || [ ! -x "$tools/bin/protoc-gen-go-grpc" ]; then
  echo "==> installing protoc-gen-go $PROTOC_GEN_GO, protoc-gen-go-grpc $PROTOC_GEN_GO_GRPC" >&2
  GOBIN="$PWD/$tools/bin" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO" >&2
  GOBIN="$PWD/$tools/bin" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC" >&2
fi
# The Go stubs are committed (a Go module is used from source); they must be what proto/ makes.
fresh="$(mktemp -d)"
trap 'rm -rf "$fresh"' EXIT
PATH="$PWD/$tools/bin:$PATH" npx --no-install buf generate proto --template clients/go/buf.gen.yaml -o "$fresh"
if ! diff -r "$fresh/clients/go/tetherv1" clients/go/tetherv1 >&2; then
  echo "clients/go/tetherv1 is stale: run scripts/clients-gen-go.sh and commit the result" >&2
  exit 1
fi
echo "$venv"
