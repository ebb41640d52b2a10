#!/usr/bin/env python3
"""Charts for docs/PERFORMANCE.md: loom against its peers, per workload.

Reads the JSON rows of `loom-bench --json FILE` and `peers.py --json FILE`
(both: a list of {"workload", "peer", "device", "ms" | "error", ...}) taken
in the same run on one machine, and writes one PNG: for each workload a
group of bars, each peer's time relative to loom's (loom = 1; higher is
slower than loom), so workloads of very different sizes share one axis.

  python3 bench/charts.py --title "NVIDIA H200, 2026-12-02" \
      --out docs/perf_h200.png loom.json peers.json

Rows with an error, and workloads only one side ran, are left out (and
listed on stderr). Needs matplotlib; benchmarks only, never the library.
"""
import argparse
import json
import sys


def workload_id(name):
    return name.split()[0]  # "W2 softmax 8192x4096 f32" -> "W2"


def load_rows(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            rows += json.load(f)
    return rows


# loom's row of a workload: the plain one (a call waited for, recording
# included), not its -events, -pipelined or -compiled variants.
LOOM_PEERS = ("loom-llvm", "loom-cuda", "loom-reference", "loom-interp", "loom")


def table(rows):
    """{workload id: {peer: ms}}, loom's plain row under "loom"."""
    out, names = {}, {}
    for r in rows:
        if "ms" not in r or r.get("workload", "*") == "*":
            if "error" in r:
                print(f"left out: {r['workload']} {r['peer']}: {r['error'][:80]}", file=sys.stderr)
            continue
        w = workload_id(r["workload"])
        if names.setdefault(w, r["workload"]) != r["workload"]:
            continue  # another variant under the same id (W6 tf32, bf16): peers.py has no such row
        if r["peer"].startswith("loom"):
            if r["peer"] not in LOOM_PEERS:
                continue
            peer = "loom"
        else:
            peer = r["peer"]
        out.setdefault(w, {})[peer] = r["ms"]
    return out, names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--title", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="", help="workload ids, e.g. W1,W2,W3")
    ap.add_argument("json", nargs="+")
    a = ap.parse_args()
    only = set(a.only.split(",")) - {""}
    data, names = table(load_rows(a.json))
    workloads = sorted((w for w in data if "loom" in data[w] and len(data[w]) > 1 and (not only or w in only)),
                       key=lambda w: (len(w), w))
    for w in sorted(set(data) - set(workloads)):
        print(f"left out: {w} (loom or every peer missing)", file=sys.stderr)
    if not workloads:
        sys.exit("no workload has both loom and a peer")
    peers = sorted({p for w in workloads for p in data[w]} - {"loom"})
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = ["loom"] + peers
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(workloads)), 4))
    for i, p in enumerate(series):
        xs = [k + (i - (len(series) - 1) / 2) * width for k in range(len(workloads))]
        ys = [data[w][p] / data[w]["loom"] if p in data[w] else 0 for w in workloads]
        bars = ax.bar(xs, ys, width, label=p)
        for b, w in zip(bars, workloads):
            if p in data[w]:
                ax.annotate(f"{data[w][p]:.3g}", (b.get_x() + b.get_width() / 2, b.get_height()),
                            ha="center", va="bottom", fontsize=6, rotation=90)
    ax.axhline(1.0, color="black", linewidth=0.6)
    ax.set_yscale("log")
    lowest = min(data[w][p] / data[w]["loom"] for w in workloads for p in data[w])
    ax.set_ylim(bottom=min(lowest, 1.0) * 0.5)  # bars from below the smallest ratio, not from 1
    ax.set_xticks(range(len(workloads)))
    ax.set_xticklabels([w for w in workloads])
    ax.set_ylabel("time relative to loom (log; above 1: slower than loom)")
    ax.set_title(a.title + " — labels: ms per call")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}: " + ", ".join(f"{w} ({names[w]})" for w in workloads))


if __name__ == "__main__":
    main()
