#!/usr/bin/env bash
# Builds the Debian bookworm base image offline when no image registry can be reached:
# debootstrap a minimal bookworm from Debian's archive and `docker import` it.
# Usage: images/base/build-base.sh [image-name]   (default tether-base:bookworm)
set -euo pipefail
name="${1:-tether-base:bookworm}"
mirror="${TETHER_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if docker image inspect "$name" >/dev/null 2>&1; then
  echo "base image $name exists"
  exit 0
fi
if ! command -v debootstrap >/dev/null 2>&1; then
  echo "installing debootstrap"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi
dir="$(mktemp -d /tmp/tether-base.XXXXXX)"
trap 'rm -rf "$dir"' EXIT
echo "debootstrap bookworm into $dir (about a minute)"
debootstrap --variant=minbase bookworm "$dir" "$mirror" >"$dir.log" 2>&1 || { tail -20 "$dir.log"; exit 1; }
rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
echo "importing as $name"
tar -C "$dir" -c . | docker import - "$name" >/dev/null
rm -f "$dir.log"
echo "base image $name ready"
