#!/usr/bin/env bash
# One run, one machine: loom-bench (llvm) and the peers (peers.py) on the
# standard workloads, so every ratio in docs/PERFORMANCE.md comes from one
# run. Usage: bench/compare_cpu.sh [build-dir] [peers.py]
set -euo pipefail
build="${1:-build}"
peers="${2:-../shared/bench-peers/peers.py}"
only="W0,W1,W2,W3,W5"
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(lscpu | sed -n 's/^Model name: *//p') $(nproc) cores"
"$build/bench/loom-bench" --backend llvm --only "$only,O1,O2,O3"
if [ -f "$peers" ]; then
  python3 "$peers" --device cpu --only "$only" 2>/dev/null
else
  echo "peers.py not found at $peers: peer rows skipped"
fi
