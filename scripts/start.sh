#!/usr/bin/env bash
# One command for a local try: sets the machine up (engine, images; see scripts/setup.sh),
# then serves gRPC on 127.0.0.1:50051 and HTTP (Connect and JSON, docs/http.md) on
# 127.0.0.1:50052 with the docker provider. Without TETHER_TOKENS a dev token for tenant "dev"
# is generated and printed once.
# Extra arguments go to `tether serve` (e.g. --listen 127.0.0.1:6000, --config file.json).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
set -a
# shellcheck disable=SC1091
. .tether/images.env
set +a

export TETHER_LISTEN="${TETHER_LISTEN:-127.0.0.1:50051}"
export TETHER_HTTP_LISTEN="${TETHER_HTTP_LISTEN:-127.0.0.1:50052}"
if [ -z "${TETHER_TOKENS:-}" ]; then
  token="dev-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  export TETHER_TOKENS="$token=dev"
  cat <<MSG

==> dev token for tenant "dev" (shown once):
    export TETHER_TOKEN=$token TETHER_ADDRESS=$TETHER_LISTEN
    node bin/tether run create            # prints a run id
    node bin/tether tools <run-id>

==> the same API as HTTP/JSON on $TETHER_HTTP_LISTEN (docs/http.md):
    curl -H "authorization: Bearer \$TETHER_TOKEN" -H 'content-type: application/json' \\
      -d '{}' http://$TETHER_HTTP_LISTEN/tether.v1.Gateway/ListRuns

MSG
fi
exec node bin/tether serve "$@"
