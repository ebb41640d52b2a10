#!/usr/bin/env bash
# Packs what the GPU machine needs into .carry/ (ignored by git): the GPU
# machine has CUDA, PyTorch and JAX but no LLVM, TBB or xxHash, so the
# binaries built here travel with the shared libraries they need, and the
# peers' benchmark script travels beside them. See docs/PERFORMANCE.md.
#   ./scripts/gpu_carry.sh [build-dir]     then, on the GPU machine:
#   ./scripts/gpu_run.sh  (reads .carry/, writes logs under $OUT)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
carry=${CARRY_DIR:-$root/.carry}
rm -rf "$carry" && mkdir -p "$carry/lib" "$carry/bin"
cp -L "$build/libloom.so.0" "$carry/lib/libloom.so.0"
strip --strip-unneeded "$carry/lib/libloom.so.0"
for lib in libtbb.so.12 libxxhash.so.0 libtinfo.so.6; do cp -L "/lib/x86_64-linux-gnu/$lib" "$carry/lib/"; done
cp "$build/tests/loom_tests" "$build/bench/loom-bench" "$build/bench/loom-gpt-bench" "$carry/bin/"
for s in quickstart tiny_gpt train_gpt2 resnet; do [ -x "$build/samples/$s" ] && cp "$build/samples/$s" "$carry/bin/"; done
cp -r "$root/../shared/bench-peers" "$carry/bench-peers"
cp "$root/scripts/gpu_run.sh" "$root/bench/linear_peer.py" "$root/bench/peer_memory.py" "$root/bench/attention_mask_peer.py" "$carry/"
du -sh "$carry"
