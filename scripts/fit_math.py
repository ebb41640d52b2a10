#!/usr/bin/env python3
"""Minimax polynomial fits for jit/llvm/math.cpp (mpmath, 60 digits).

    python3 scripts/fit_math.py

Prints each fit's coefficients rounded to float32 and to float64 (C hex
literals) and the weighted error of the rounded coefficients on a dense grid,
in float / double ulps. math.cpp says which fit each table comes from; the
ulp errors it documents are measured by tests/internal/math_test.cpp on the
emitted code, not taken from here.

The fit is the classical Remez exchange for a linear basis and a weight:
minimize max |w(x) (f(x) - sum c_j phi_j(x))| over [a, b].
"""
import mpmath as mp

mp.mp.dps = 40


def remez(f, basis, w, a, b, iters=40):
    n = len(basis)
    # Chebyshev extrema as the first reference.
    xs = [(a + b) / 2 - (b - a) / 2 * mp.cos(mp.pi * i / n) for i in range(n + 1)]
    c = None
    for _ in range(iters):
        rows = [[phi(x) for phi in basis] + [(-1) ** i / w(x)] for i, x in enumerate(xs)]
        sol = mp.lu_solve(mp.matrix(rows), mp.matrix([f(x) for x in xs]))
        c = [sol[j] for j in range(n)]
        err = lambda x: w(x) * (f(x) - sum(cj * phi(x) for cj, phi in zip(c, basis)))
        # New reference: the extremum of |err| in each sign-alternating segment.
        grid = [a + (b - a) * i / 1000 for i in range(1001)]
        vals = [err(x) for x in grid]
        segs, cur = [], [0]
        for i in range(1, len(grid)):
            if mp.sign(vals[i]) != mp.sign(vals[cur[-1]]) and vals[i] != 0:
                segs.append(cur)
                cur = []
            cur.append(i)
        segs.append(cur)
        ext = [max(s, key=lambda i: abs(vals[i])) for s in segs]
        while len(ext) > n + 1:  # drop the smallest at either end
            ext.pop(0 if abs(vals[ext[0]]) < abs(vals[ext[-1]]) else -1)
        if len(ext) < n + 1:
            break
        xs = [grid[i] for i in ext]
    return c


def to_f32(x):
    import struct
    return struct.unpack('f', struct.pack('f', float(x)))[0]


def hexf(x):
    return float(x).hex().replace('0x1.', '0x1.').replace('+', '')


def report(name, f, basis, w, a, b, ulp_bits):
    c = remez(f, basis, w, a, b)
    for label, conv, ulp in (("f32", to_f32, 2.0 ** -23), ("f64", float, 2.0 ** -52)):
        cr = [mp.mpf(conv(x)) for x in c]
        err = max(abs(w(x) * (f(x) - sum(cj * phi(x) for cj, phi in zip(cr, basis))))
                  for x in [a + (b - a) * i / 4000 for i in range(4001)])
        print(f"{name} {label}: max weighted error {mp.nstr(err, 4)} = {mp.nstr(err / ulp, 3)} ulp")
        print("  {" + ", ".join(hexf(conv(x)) for x in c) + "}")


if __name__ == "__main__":
    ln2h = mp.log(2) / 2
    # exp(r) on |r| <= ln2/2, relative error, every coefficient free.
    for deg in (5, 6):
        report(f"exp deg {deg}", mp.exp, [(lambda j: (lambda r: r ** j))(j) for j in range(deg + 1)],
               lambda r: 1 / mp.exp(r), -ln2h, ln2h, 24)
    # expm1(r) = r + r^2 Q(r) on |r| <= ln2/2 (a hair more), float: Q of degree
    # 4 for the relative error of expm1 (the weight; floored near r = 0, where
    # r^2 Q is far below r's ulp).
    g = lambda r: (mp.expm1(r) - r) / r ** 2 if r != 0 else mp.mpf(1) / 2
    wq = lambda r: max(abs(r * r / mp.expm1(r)) if r != 0 else 0, mp.mpf('1e-3'))
    half = ln2h * (1 + mp.mpf('1e-6'))
    c = remez(g, [(lambda j: (lambda r: r ** j))(j) for j in range(5)], wq, -half, half)
    cf = [mp.mpf(to_f32(x)) for x in c]
    err = max(abs((r + r * r * sum(cj * r ** j for j, cj in enumerate(cf))) / mp.expm1(r) - 1)
              for r in [-half + 2 * half * i / 4000 for i in range(4001)] if r != 0)
    print(f"expm1 Q deg 4 f32: max relative error {mp.nstr(err, 4)} = {mp.nstr(err / 2.0 ** -23, 3)} ulp")
    print("  {" + ", ".join(hexf(to_f32(x)) for x in c) + "}")
