#!/usr/bin/env python3
"""torch's side of loom-bench's G1 rows: nn.Linear's layout at 4096.

Times, each as the median wall time of one call ending in
torch.cuda.synchronize() (as peers.py and loom-bench do), float32 without
TF32:
  G0  y = x @ W.t()                       the vendor GEMM (cuBLAS) alone
  G1e gelu(y + b) on a ready y            the separate epilogue: one more
                                          pass over y (read 64 MiB, write 64 MiB)
  G1  gelu(F.linear(x, W, b))             eager: GEMM (bias in cuBLAS's
                                          epilogue) + a GELU kernel
and prints G0 + G1e, the cost of "vendor GEMM + separate epilogue", so the
fused loom kernel can be compared with both; then W6 (4096^3) and x @ W.t()
with TF32 allowed and W6 in bfloat16, beside loom-bench's rows.
Usage: python3 linear_peer.py [--device cuda]
"""
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def median_time(fn, warmup=3, reps=20, min_s=0.5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    end = time.perf_counter() + min_s
    while len(times) < reps or time.perf_counter() < end:
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    n = 4096
    x = torch.randn(n, n, device="cuda")
    W = torch.randn(n, n, device="cuda") * 0.02
    b = torch.randn(n, device="cuda")
    y = x @ W.t()
    flops = 2.0 * n ** 3
    rows = [
        ("G0 linear-nobias 4096 f32", "torch-eager", median_time(lambda: x @ W.t()), flops),
        ("G1 epilogue-pass 4096 f32", "torch-eager", median_time(lambda: F.gelu(y + b)), None),
        ("G1 linear-gelu 4096 f32", "torch-eager", median_time(lambda: F.gelu(F.linear(x, W, b))), flops),
    ]
    rows.append(("G1 = G0 + epilogue-pass (sum)", "torch-eager", rows[0][2] + rows[1][2], flops))
    # W6 with TF32 tensor cores (loom-bench's "W6 matmul 4096 tf32" row).
    a, c = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    rows.append(("W6 matmul 4096 tf32", "torch-eager", median_time(lambda: a @ c), flops))
    # x W^T with TF32 (loom-bench's "G0 linear-nobias 4096 tf32" row).
    rows.append(("G0 linear-nobias 4096 tf32", "torch-eager", median_time(lambda: x @ W.t()), flops))
    torch.backends.cuda.matmul.allow_tf32 = False
    # W6 in bfloat16 (loom-bench's "W6 matmul 4096 bf16" row): cuBLAS, float32 sums.
    ah, ch = a.bfloat16(), c.bfloat16()
    rows.append(("W6 matmul 4096 bf16", "torch-eager", median_time(lambda: ah @ ch), flops))
    for name, peer, t, f in rows:
        extra = f"GFLOP/s={f / t / 1e9:.1f}" if f else f"GB/s={2 * 4 * n * n / t / 1e9:.1f}"
        print(f"{name:<28} {peer:<18} cuda  {t * 1e3:10.4f} ms  {extra}")
    print(f"# {torch.cuda.get_device_name()} torch {torch.__version__}", file=sys.stderr)


if __name__ == "__main__":
    main()
