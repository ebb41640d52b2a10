#!/usr/bin/env python3
"""torch's side of loom-bench's W8m row: W8's causal attention, forward and
backward, [8, 12, 1024, 64], with the causal mask given as a bool [T, T]
tensor (SDPA then takes its memory-efficient kernel, which reads the mask),
and W8 itself (is_causal) in bfloat16 and float16, each as the median wall
time of one call ending in torch.cuda.synchronize(), as peers.py times.
GFLOP/s count W8's 3.5 x 2 x 2 x B*H*T^2*D / 2 for every row.
Usage: python3 attention_mask_peer.py
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from linear_peer import median_time  # noqa: E402  (the same timing as G1's peer)


def main():
    B, H, T, D = 8, 12, 1024, 64
    flop = 3.5 * 2 * 2 * B * H * T * T * D / 2
    mask = torch.ones(T, T, dtype=torch.bool, device="cuda").tril()
    for dtype, name in ((torch.bfloat16, "bf16"), (torch.float16, "f16")):
        q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
        go = torch.randn(B, H, T, D, device="cuda", dtype=dtype)
        for label, kwargs in (("W8 causal", {"is_causal": True}), ("W8m causal-as-mask-tensor", {"attn_mask": mask})):
            def step():
                q.grad = k.grad = v.grad = None
                F.scaled_dot_product_attention(q, k, v, **kwargs).backward(go)
            t = median_time(step)
            print(f"{label + ' ' + name:<34} torch-eager        cuda  {t * 1e3:10.4f} ms  GFLOP/s={flop / t / 1e9:.1f}",
                  flush=True)


if __name__ == "__main__":
    main()
