#!/usr/bin/env bash
# Configures and builds loom (Release, Ninja) into $BUILD_DIR (default: build/
# at the repository root). Extra arguments go to the configure step, e.g.
#   ./scripts/build.sh -DLOOM_BUILD_BENCH=OFF
# LOOM_JOBS sets the number of parallel compile jobs (default: nproc).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}

cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$build_dir" --parallel "${LOOM_JOBS:-$(nproc)}"
