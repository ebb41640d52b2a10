#!/usr/bin/env bash
# W9 (WORKLOADS.md): 32 inference calls at changing lengths from a cold
# start: loom-bench in a process of its own with an empty disk cache, then
# the peers (peers.py) on the same machine. Usage:
#   bench/w9.sh [build-dir] [peers.py] [cpu|cuda]
set -euo pipefail
build="${1:-build}"
peers="${2:-../shared/bench-peers/peers.py}"
device="${3:-cpu}"
cache="$(mktemp -d)"
trap 'rm -rf "$cache"' EXIT
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(lscpu | sed -n 's/^Model name: *//p') $(nproc) cores, device $device"
LOOM_CACHE_DIR="$cache/loom" "$build/bench/loom-bench" --device "$device" --only W9
if [ -f "$peers" ]; then
  # torch.compile's cold start too: its on-disk caches (Inductor's FX graph
  # and autotuning caches, Triton's kernels) in a fresh folder, as loom's.
  TORCHINDUCTOR_CACHE_DIR="$cache/inductor" TRITON_CACHE_DIR="$cache/triton" \
    python3 "$peers" --device "$device" --only W9 2>/dev/null || echo "peers.py failed: peer rows skipped"
else
  echo "peers.py not found at $peers: peer rows skipped"
fi
