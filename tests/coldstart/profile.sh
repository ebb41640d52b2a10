#!/usr/bin/env bash
# LOOM_LOG=profile: every step of a CPU run is one line with its kernel's
# name, loops and wall time (runtime/cpu/cpu_executable.cpp, log_step). The
# coldstart program's first step has pointwise kernels and GEMMs.
set -euo pipefail
bin="$1"
cache="$(mktemp -d)"
trap 'rm -rf "$cache"' EXIT
log=$(LOOM_LOG=profile LOOM_CACHE_DIR="$cache" "$bin" 2>&1 >/dev/null)
echo "$log"
# A generated kernel ("k12_sum+k14_add", maybe a GEMM) or a library call ("library gather").
line='^\[loom:profile\] (k[0-9]+_[a-z_+0-9]+ \[[0-9x]*\]( gemm)?|library [a-z_0-9]+ \[[0-9x]*\]): [0-9]+\.[0-9]{3} ms$'
bad=$(grep '^\[loom:profile\]' <<<"$log" | grep -Ev "$line" || true)
[ -z "$bad" ] || { echo "FAIL: malformed profile lines:"; echo "$bad"; exit 1; }
grep -Eq '^\[loom:profile\] k[0-9]+_[a-z_+0-9]+ \[64x256\] gemm: ' <<<"$log" || { echo "FAIL: no line for the 64x256 GEMM"; exit 1; }
grep -Eq '^\[loom:profile\] k[0-9]+_[a-z_+0-9]+ \[[0-9x]*\]: ' <<<"$log" || { echo "FAIL: no line for a pointwise kernel"; exit 1; }
# Without the topic, nothing is printed.
[ -z "$(LOOM_CACHE_DIR="$cache" "$bin" 2>&1 >/dev/null | grep 'loom:profile' || true)" ] || { echo "FAIL: profile lines without LOOM_LOG"; exit 1; }
echo "ok: $(grep -c '^\[loom:profile\]' <<<"$log") profile lines"
