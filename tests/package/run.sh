#!/usr/bin/env bash
# The package_install_consumer test: installs a built loom into a fresh prefix,
# then configures, builds and runs tests/package (an outside project) against
# that prefix alone.
# Usage: run.sh <loom build dir> <scratch dir> [cmake] [generator]
set -euo pipefail

build_dir=$1
scratch=$2
cmake=${3:-cmake}
generator=${4:-Ninja}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

rm -rf "$scratch"
mkdir -p "$scratch"
"$cmake" --install "$build_dir" --prefix "$scratch/prefix"
"$cmake" -S "$here" -B "$scratch/build" -G "$generator" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$scratch/prefix"
"$cmake" --build "$scratch/build"
"$scratch/build/loom_consumer"
