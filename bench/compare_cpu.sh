#!/usr/bin/env bash
# One run, one machine: loom-bench (llvm) and the peers (peers.py) on the
# standard workloads, so every ratio in docs/PERFORMANCE.md comes from one
# run. Usage: bench/compare_cpu.sh [build-dir] [peers.py]
# JSON_DIR=dir also writes the rows as dir/loom.json and dir/peers.json,
# which bench/charts.py draws.
set -euo pipefail
build="${1:-build}"
peers="${2:-../shared/bench-peers/peers.py}"
only="${ONLY:-W0,W1,W2,W3,W4,W5,W6}"
loom_json=() peers_json=()
if [ -n "${JSON_DIR:-}" ]; then
  mkdir -p "$JSON_DIR"
  loom_json=(--json "$JSON_DIR/loom.json") peers_json=(--json "$JSON_DIR/peers.json")
fi
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(lscpu | sed -n 's/^Model name: *//p') $(nproc) cores"
"$build/bench/loom-bench" --backend llvm --only "$only,O1,O2,O3" "${loom_json[@]}"
if [ -f "$peers" ]; then
  python3 "$peers" --device cpu --only "$only" "${peers_json[@]}" 2>/dev/null
else
  echo "peers.py not found at $peers: peer rows skipped"
fi
