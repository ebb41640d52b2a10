#!/usr/bin/env bash
# Cold start: the same program twice with one LOOM_CACHE_DIR. The second
# process must compile nothing (all objects from disk) and its first step
# must be at least 10x faster than the cold one.
set -euo pipefail
bin="$1"
cache="$(mktemp -d)"
trap 'rm -rf "$cache"' EXIT
cold=$(LOOM_CACHE_DIR="$cache" "$bin")
warm=$(LOOM_CACHE_DIR="$cache" "$bin")
echo "cold: $cold"
echo "warm: $warm"
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
[ "$(field jit_compiles "$cold")" -gt 0 ] || { echo "FAIL: the cold run compiled nothing"; exit 1; }
[ "$(field jit_compiles "$warm")" -eq 0 ] || { echo "FAIL: the warm run compiled"; exit 1; }
[ "$(field disk_cache_hits "$warm")" -gt 0 ] || { echo "FAIL: the warm run read no cached object"; exit 1; }
[ "$(field check "$cold")" = "$(field check "$warm")" ] || { echo "FAIL: results differ"; exit 1; }
awk -v c="$(field first_step_ms "$cold")" -v w="$(field first_step_ms "$warm")" \
  'BEGIN { printf "speedup %.1fx\n", c / w; exit !(c >= 10 * w) }' || { echo "FAIL: warm first step not 10x faster"; exit 1; }
