#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with .carry/ made by
# scripts/gpu_carry.sh. Writes full logs under $OUT (default ./gpu-out):
#   gpu.txt        the GPU and driver
#   tests.log      the op suite and the differential test on cuda (SHARDS=n: in
#                  n processes at once)
#   sanitizer.log  compute-sanitizer memcheck over the GPU GEMMs, the cuda
#                  training tests and 20 differential graphs (SANITIZER_FILTER:
#                  others; the whole cuda op suite, less the out-of-memory and
#                  resident-memory tests, took more than 540 s on a fresh H200:
#                  give it a call of its own)
#   bench.log      loom-bench --device cuda beside peers.py --device cuda
#                  (and linear_peer.py when BENCH_ONLY names G1); the same rows
#                  as JSON in loom.json and peers.json (bench/charts.py)
#   coldstart.log  a second process with a warm disk cache: NVRTC compiles
#   gpt.log        (step "gpt") samples/tiny_gpt on the GPU, batches stacked from
#                  slices and from index_select, 200 steps each with LOOM_LOG=cache
#                  (every file the disk cache reads or writes after the first steps
#                  is listed), the same on the machine's CPU, and 20 sliced steps
#                  under compute-sanitizer memcheck
#   gptbench.log   (step "gptbench") loom-gpt-bench --device cuda (GPTBENCH_ONLY)
#   models.log     (step "models") the real-model rows in one process each:
#                  loom-bench W6, W7, W7L, W8 and W10 (MODELS_ONLY), then peers.py's
#                  W8, its W7 and W10 through bench/peer_memory.py (the same
#                  torch code, with torch.cuda.max_memory_allocated per row),
#                  and linear_peer.py (cuBLAS's bfloat16 W6); JSON in
#                  models_loom.json
#   conv.log       (step "conv") bench/micro/conv_check.cu built with nvcc: the
#                  implicit-GEMM convolution kernels against a float64 host
#                  reference in every dtype, the bfloat16 kernels timed on
#                  ResNet-18's shapes, and the check again under compute-sanitizer
#   varlen.log     (step "varlen") W9 from a cold start (loom-bench in a fresh
#                  process with an empty cache dir, then peers.py's W9), the
#                  GPT-2 decode loop (train_gpt2 --generate), and the static
#                  rows beside the sizes-as-arguments ones (VARLEN_ONLY,
#                  default W1,W3,W4,W7: loom-bench and --sizes-as-args)
#   w9.log         (step "w9") W9 alone from a cold start with LOOM_LOG=cache,
#                  recompiles,kernels (each compile, why, and the functions it
#                  sent to NVRTC), then peers.py's W9
#   diff<i>.log    (step "diff", not in the default) the differential test on
#                  cuda over DIFF_PROCS processes of DIFF_PER seeds each from
#                  DIFF_FIRST (default 14 x 200 from 100001)
# Steps to run are chosen by $STEPS (default: all but diff).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
carry=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ -d "$carry/bin" ] || carry=$PWD/.carry
export LD_LIBRARY_PATH=$carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
bin=$carry/bin
STEPS=${STEPS:-"info tests sanitizer bench coldstart"}
export LOOM_CACHE_DIR=${LOOM_CACHE_DIR:-/tmp/loom-cache}

for step in $STEPS; do
  case $step in
    info)
      { nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$OUT/gpu.txt" 2>&1
      cat "$OUT/gpu.txt" ;;
    tests)
      # SHARDS=n runs the tests in n processes at once (gtest sharding): a
      # fresh machine spends most of the run in NVRTC, one compile per core.
      shards=${SHARDS:-1}
      for i in $(seq 0 $((shards - 1))); do
        GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i "$bin/loom_tests" --gtest_filter="${TEST_FILTER:-*cuda*:*Cuda*}" \
          > "$OUT/tests.$i.log" 2>&1 &
      done
      wait
      cat "$OUT"/tests.*.log > "$OUT/tests.log" && rm "$OUT"/tests.*.log
      echo "tests: $(grep -c '^\[       OK' "$OUT/tests.log") passed, $(grep -c '^\[  SKIPPED \] .* ms)$' "$OUT/tests.log") skipped, $(grep -c '^\[  FAILED  \] .* ms)$' "$OUT/tests.log") failed; $(grep -c 'tests\? from .* ran' "$OUT/tests.log") of $shards processes finished"
      grep -h -E "^\[  FAILED  \] [A-Z]|Failure" "$OUT/tests.log" | sort -u | head -40 ;;
    sanitizer)
      LOOM_DIFF_GRAPHS=20 compute-sanitizer --tool memcheck --error-exitcode 9 \
        "$bin/loom_tests" --gtest_filter="${SANITIZER_FILTER:-CudaGemm.*:*Training*cuda*:*Training*Cuda*:Differential.*Cuda*}" --gtest_brief=1 \
        > "$OUT/sanitizer.log" 2>&1
      echo "sanitizer rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/sanitizer.log" | head -10 ;;
    bench)
      { "$bin/loom-bench" --device cuda --only "${BENCH_ONLY:-W0,W1,W2,W3,W4,W5}" --json "$OUT/loom.json"
        python3 $carry/bench-peers/peers.py --device cuda --only "${BENCH_ONLY:-W0,W1,W2,W3,W4,W5}" --json "$OUT/peers.json"
        case ",${BENCH_ONLY:-}," in *,G1,*) python3 $carry/linear_peer.py ;; esac; } > "$OUT/bench.log" 2>&1
      cat "$OUT/bench.log" | grep -v "^#" | head -60 ;;
    coldstart)
      rm -rf /tmp/loom-coldstart
      { echo "cold:"; LOOM_CACHE_DIR=/tmp/loom-coldstart "$bin/loom-bench" --device cuda --only W5,W4 --metrics
        echo "warm:"; LOOM_CACHE_DIR=/tmp/loom-coldstart "$bin/loom-bench" --device cuda --only W5,W4 --metrics; } \
        > "$OUT/coldstart.log" 2>&1
      grep -E "cold:|warm:|nvrtc|W5|W4" "$OUT/coldstart.log" ;;
    gpt)
      { for b in slice index_select; do
          echo "== cuda, $b batching"
          LOOM_LOG=cache "$bin/tiny_gpt" --device cuda --batching "$b" --steps 200 > "$OUT/gpt_$b.cache" 2>&1
          echo "rc=$?"; grep -v '^\[loom:cache\]' "$OUT/gpt_$b.cache"
          echo "cache lines after the first 50 steps: $(awk '/^step   50/{on=1} on && /^\[loom:cache\] disk/' "$OUT/gpt_$b.cache" | wc -l)"
        done
        echo "== cpu (this machine's), slice batching"; "$bin/tiny_gpt" --device cpu --steps 100; echo "rc=$?"
        echo "== compute-sanitizer memcheck, cuda, slice batching, 20 steps"
        compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/tiny_gpt" --device cuda --steps 20 --target 99 2>&1 | tail -6
        echo "rc=$?"; } > "$OUT/gpt.log" 2>&1
      grep -E "^==|rc=|steps in|graphs run|cache lines|ERROR SUMMARY" "$OUT/gpt.log" ;;
    gptbench)
      "$bin/loom-gpt-bench" --device cuda --only "${GPTBENCH_ONLY:-K1,G1,S1}" > "$OUT/gptbench.log" 2>&1
      grep -v "^$" "$OUT/gptbench.log" ;;
    conv)
      # From the repository root's sources (the run's working tree).
      { nvcc -O3 -std=c++17 -arch=sm_90a -I. -o /tmp/conv_check bench/micro/conv_check.cu &&
          /tmp/conv_check && compute-sanitizer --print-limit 20 /tmp/conv_check --quick | tail -3; } > "$OUT/conv.log" 2>&1
      grep -v "^PASS" "$OUT/conv.log" | tail -50 ;;
    models)
      { for id in ${MODELS_ONLY:-W6 W7 W7L W8 W10}; do "$bin/loom-bench" --device cuda --only "$id" --json "$OUT/models_$id.json"; done
        python3 $carry/bench-peers/peers.py --device cuda --only W8
        python3 $carry/peer_memory.py $carry/bench-peers/peers.py --only W7,W10
        python3 $carry/linear_peer.py; } > "$OUT/models.log" 2>&1
      grep -v "^#" "$OUT/models.log" | head -80 ;;
    varlen)
      { rm -rf /tmp/loom-w9; LOOM_CACHE_DIR=/tmp/loom-w9 LOOM_LOG=cache "$bin/loom-bench" --device cuda --only W9 --metrics 2>&1 |
          grep -v "disk \(hit\|miss\|write\)"
        rm -rf /tmp/w9-inductor; TORCHINDUCTOR_CACHE_DIR=/tmp/w9-inductor TRITON_CACHE_DIR=/tmp/w9-inductor/triton \
          python3 $carry/bench-peers/peers.py --device cuda --only W9
        "$bin/train_gpt2" --size gpu --device cuda --amp bf16 --steps 3 --generate 64
        for i in 1 2; do
          "$bin/loom-bench" --device cuda --only "${VARLEN_ONLY:-W1,W3,W4,W7}"
          "$bin/loom-bench" --device cuda --only "${VARLEN_ONLY:-W1,W3,W4,W7}" --sizes-as-args
        done; } > "$OUT/varlen.log" 2>&1
      grep -v "^#" "$OUT/varlen.log" | grep -v "^step" | head -60 ;;
    w9)
      { rm -rf /tmp/loom-w9; LOOM_CACHE_DIR=/tmp/loom-w9 LOOM_LOG=cache,recompiles,kernels \
          "$bin/loom-bench" --device cuda --only W9 --metrics 2>&1 | grep -v "disk \(hit\|miss\|write\)"
        rm -rf /tmp/w9-inductor; TORCHINDUCTOR_CACHE_DIR=/tmp/w9-inductor TRITON_CACHE_DIR=/tmp/w9-inductor/triton \
          python3 $carry/bench-peers/peers.py --device cuda --only W9; } > "$OUT/w9.log" 2>&1
      grep "^W9\|compiled in" "$OUT/w9.log" ;;
    diff)
      procs=${DIFF_PROCS:-14} per=${DIFF_PER:-200} first=${DIFF_FIRST:-100001}
      for i in $(seq 0 $((procs - 1))); do
        LOOM_CACHE_DIR=/tmp/loom-diff$i LOOM_DIFF_GRAPHS=$per LOOM_DIFF_SEED=$((first + i * per)) \
          "$bin/loom_tests" --gtest_filter=Differential.RandomGraphsCudaVsReference > "$OUT/diff$i.log" 2>&1 &
      done
      wait
      grep -h "\[ differential \]" "$OUT"/diff*.log
      echo "diff: $(grep -l '^\[  PASSED  \]' "$OUT"/diff*.log | wc -l) of $procs processes passed"
      # No failure is the usual case: grep's "no match" is not this step's status.
      grep -h -A14 "Failure" "$OUT"/diff*.log | head -120 || true ;;
  esac
done
