#!/usr/bin/env python3
"""Peak GPU memory of peers.py's own model rows (W7, W10), beside loom-bench's
"peak-memory" rows: runs shared/bench-peers/peers.py's torch workloads
unchanged, with its median_time wrapped so that each (workload, mode) starts
from torch.cuda.reset_peak_memory_stats() and ends by reading
torch.cuda.max_memory_allocated(). peers.py itself is not edited.

Usage: python3 peer_memory.py PATH/TO/peers.py [--only W7,W10]
"""
import importlib.util
import sys

import torch


def main():
    path = sys.argv[1]
    only = {"W7", "W10"}
    if "--only" in sys.argv:
        only = set(sys.argv[sys.argv.index("--only") + 1].split(","))
    spec = importlib.util.spec_from_file_location("peers", path)
    peers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peers)
    original = peers.median_time
    peaks = []

    def measured(fn, sync, *args, **kwargs):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        t = original(fn, sync, *args, **kwargs)
        peaks.append(torch.cuda.max_memory_allocated())
        return t

    peers.median_time = measured
    rows = peers.torch_workloads("cuda", only)
    timed = [r for r in rows if "error" not in r]
    for r, peak in zip(timed, peaks):
        rate = " ".join(f"{k}={r[k]:.1f}" for k in peers.RATES if k in r)
        print(f"{r['workload']:<28} {r['peer']:<18} cuda  {r['ms']:10.4f} ms  {rate}  peak-memory MiB={peak / 2**20:.1f}")
    for r in rows:
        if "error" in r:
            print(f"{r['workload']:<28} {r['peer']:<18} cuda  ERROR {r['error']}")


if __name__ == "__main__":
    main()
