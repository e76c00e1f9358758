#!/usr/bin/env bash
# Regenerates the committed Go stubs (clients/go/tetherv1) from proto/ with the pinned plugins.
set -euo pipefail
cd "$(dirname "$0")/.."
PROTOC_GEN_GO="$(sed -n 's/^PROTOC_GEN_GO=//p' scripts/clients-setup.sh)"
PROTOC_GEN_GO_GRPC="$(sed -n 's/^PROTOC_GEN_GO_GRPC=//p' scripts/clients-setup.sh)"
tools=".tether/go-tools-pgg${PROTOC_GEN_GO#v}-pggg${PROTOC_GEN_GO_GRPC#v}"
command -v go >/dev/null 2>&1 || export PATH="/usr/local/go/bin:$PATH"
GOBIN="$PWD/$tools/bin" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO"
GOBIN="$PWD/$tools/bin" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC"
rm -rf clients/go/tetherv1
PATH="$PWD/$tools/bin:$PATH" npx --no-install buf generate proto --template clients/go/buf.gen.yaml
echo "generated clients/go/tetherv1"
