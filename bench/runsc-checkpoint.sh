#!/usr/bin/env bash
# gVisor checkpoint and restore, straight through runsc (no engine), for each runsc given and
# each way of saving: a small shell container, and a Python process holding a 100 MiB object of
# random bytes (incompressible: the worst case for a compressed image). Each restored process is
# checked: the shell goes on counting from where it stopped, the Python process answers with the
# same sha-256 of its object as before the checkpoint. Run it alone, under the heavy lock.
#   bench/runsc-checkpoint.sh <rootfs image> [repeats=5] <label>=<runsc path> ...
# Writes bench/results/runsc-checkpoint.json: per runsc, platform, workload and way of saving,
# the checkpoint time, restore time, image size, each with p50/min/max over the repeats.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE="$1"; REPEATS="$2"; shift 2
WORK="$(mktemp -d /tmp/runsc-bench.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
ROOTFS="$WORK/rootfs"
mkdir -p "$ROOTFS" "$WORK/out"
cid="$(docker create "$IMAGE" true)"
docker export "$cid" | tar -C "$ROOTFS" -xf -
docker rm "$cid" >/dev/null
chmod 777 "$WORK/out"

ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

# bundle <dir> <args json>: an OCI bundle on the shared rootfs, /out bind-mounted from the host.
bundle() {
  local dir="$1" args="$2"
  mkdir -p "$dir"
  (cd "$dir" && "$RUNSC" spec >/dev/null)
  jq --arg root "$ROOTFS" --arg out "$WORK/out" --argjson args "$args" '
    .root = {path: $root, readonly: true} | .process.args = $args | .process.terminal = false
    | .process.user = {uid: 0, gid: 0} | .process.cwd = "/"
    | .mounts += [{destination: "/out", type: "bind", source: $out, options: ["rbind", "rw"]},
                  {destination: "/tmp", type: "tmpfs", source: "tmpfs", options: ["nosuid", "nodev"]}]' "$dir/config.json" >"$dir/config.tmp"
  mv "$dir/config.tmp" "$dir/config.json"
}

SMALL='["/bin/sh","-c","i=0; while true; do i=$((i+1)); echo $i > /out/count; sleep 0.05; done"]'
PY='["python3","-c","import hashlib,os,signal,time\nb=bytearray(os.urandom(100*2**20))\nh=hashlib.sha256(b).hexdigest()\nopen(\"/out/before\",\"w\").write(h)\ndef told(*_):\n    open(\"/out/after\",\"w\").write(hashlib.sha256(b).hexdigest())\nsignal.signal(signal.SIGUSR1, told)\nwhile True: time.sleep(1)"]'

waitfile() { for _ in $(seq 1 400); do [ -s "$1" ] && return 0; sleep 0.05; done; return 1; }

results=()
# one <label> <runsc> <platform> <workload> <save flags> <restore flags>
one() {
  local label="$1" platform="$3" workload="$4" save="$5" restore="$6"
  RUNSC="$2"
  local id="b-$RANDOM$RANDOM" root="$WORK/root-$label" b="$WORK/bundle-$workload-$label" img="$WORK/img"
  local g=(--root "$root" --platform="$platform" --network=none)
  mkdir -p "$root"
  if [ "$workload" = small ]; then bundle "$b" "$SMALL"; else bundle "$b" "$PY"; fi
  rm -rf "$img" "$WORK/out"/*
  "$RUNSC" "${g[@]}" run --bundle "$b" --detach "$id" >/dev/null 2>"$WORK/err" || { cat "$WORK/err" >&2; return 1; }
  if [ "$workload" = small ]; then waitfile "$WORK/out/count"; sleep 0.3; else waitfile "$WORK/out/before"; fi
  local t0 c r before count0
  count0="$(cat "$WORK/out/count" 2>/dev/null || echo 0)"
  t0=$(date +%s%N)
  # shellcheck disable=SC2086
  "$RUNSC" "${g[@]}" checkpoint --image-path "$img" $save "$id" 2>"$WORK/err" || { cat "$WORK/err" >&2; "$RUNSC" "${g[@]}" delete -force "$id" || true; return 1; }
  c=$(ms "$t0")
  "$RUNSC" "${g[@]}" delete -force "$id" >/dev/null 2>&1 || true
  local size; size=$(du -sb "$img" | cut -f1)
  t0=$(date +%s%N)
  # shellcheck disable=SC2086
  "$RUNSC" "${g[@]}" restore --image-path "$img" --bundle "$b" --detach $restore "$id" 2>"$WORK/err" || { cat "$WORK/err" >&2; return 1; }
  r=$(ms "$t0")
  local ok=false
  if [ "$workload" = small ]; then
    sleep 0.3
    [ "$(cat "$WORK/out/count")" -gt "$count0" ] && ok=true
  else
    before="$(cat "$WORK/out/before")"
    "$RUNSC" "${g[@]}" kill "$id" USR1
    waitfile "$WORK/out/after" && [ "$(cat "$WORK/out/after")" = "$before" ] && ok=true
  fi
  "$RUNSC" "${g[@]}" kill "$id" KILL >/dev/null 2>&1 || true
  "$RUNSC" "${g[@]}" delete -force "$id" >/dev/null 2>&1 || true
  echo "$label $platform $workload save[$save] restore[$restore]: checkpoint ${c} ms, restore ${r} ms, image $((size / 1048576)) MiB, state intact: $ok" >&2
  results+=("$(jq -nc --arg runsc "$label" --arg platform "$platform" --arg workload "$workload" --arg save "$save" \
    --arg restore "$restore" --argjson c "$c" --argjson r "$r" --argjson s "$size" --argjson ok "$ok" \
    '{runsc: $runsc, platform: $platform, workload: $workload, save: $save, restore: $restore, checkpointMs: $c, restoreMs: $r, imageBytes: $s, intact: $ok}')")
}

for spec in "$@"; do
  label="${spec%%=*}"; bin="${spec#*=}"
  version="$("$bin" --version 2>&1 | sed -n 1p)"
  echo "== $label: $version" >&2
  ways=("|")
  # A runsc that can leave the image uncompressed, and load it after the restore returns.
  if "$bin" checkpoint --help 2>&1 | grep -- '-compression' >/dev/null; then
    ways=("|" "-compression=none|" "-compression=none|-background")
  fi
  platforms=(ptrace)
  if "$bin" help platforms 2>/dev/null | grep systrap >/dev/null; then platforms+=(systrap); fi
  for platform in "${platforms[@]}"; do
    for workload in small python100; do
      for way in "${ways[@]}"; do
        for _ in $(seq 1 "$REPEATS"); do one "$label" "$bin" "$platform" "$workload" "${way%%|*}" "${way#*|}" || echo "failed" >&2; done
      done
    done
  done
done

printf '%s\n' "${results[@]}" | jq -s --arg machine "$(nproc) cores, $(awk '/MemTotal/ {print int($2/1024)" MiB"}' /proc/meminfo), kernel $(uname -r)" \
  --arg load "$LOAD_BEFORE" --arg when "$(date -u +%FT%TZ)" '
  def stats(f): (map(f) | sort) as $v | {p50: $v[(($v|length)/2|floor)], min: $v[0], max: $v[-1]};
  {machine: $machine, loadBefore: $load, when: $when,
   rows: (group_by([.runsc, .platform, .workload, .save, .restore]) | map({
     runsc: .[0].runsc, platform: .[0].platform, workload: .[0].workload, save: .[0].save, restore: .[0].restore,
     repeats: length, intact: (map(select(.intact)) | length),
     checkpointMs: stats(.checkpointMs), restoreMs: stats(.restoreMs), imageMiB: stats(.imageBytes / 1048576 | floor)}))}' \
  >bench/results/runsc-checkpoint.json
cat bench/results/runsc-checkpoint.json
