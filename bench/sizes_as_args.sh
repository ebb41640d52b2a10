#!/usr/bin/env bash
# The static executables beside the ones whose kernels take their sizes as
# arguments (loom::set_dynamic_shapes Always), at the same fixed sizes:
# each workload alternately in each form, REPEATS times, so a slow spell
# of a shared machine falls on both. Usage:
#   bench/sizes_as_args.sh [build-dir] [cpu|cuda]
set -euo pipefail
build="${1:-build}"
device="${2:-cpu}"
only="${ONLY:-W1,W3,W4,W7}"
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(lscpu | sed -n 's/^Model name: *//p') $(nproc) cores, device $device"
for i in $(seq "${REPEATS:-3}"); do
  "$build/bench/loom-bench" --device "$device" --only "$only"
  "$build/bench/loom-bench" --device "$device" --only "$only" --sizes-as-args
done
