#!/usr/bin/env python3
"""Alpha-beta-gamma cost model of twohop's hop 2 (docs/cost_model.md).

For m bytes allreduced among N nodes (one rail):
  ring          2(N-1) a + 2(N-1)/N m b + (N-1)/N m g
  recursive     (ceil(log2 N) + 2 [N not a power of two]) (a + m b) + (ceil(log2 N) + 1 [...]) m g
  doubling      (fold: one transfer + one combine; unfold: one transfer)
  Rabenseifner  2 log2 P a + 2 (P-1)/P m b + (P-1)/P m g  with P = 2^floor(log2 N), plus, when
                N != P, a fold (a + m b + m g) and an unfold (a + m b)
a: seconds per message step, b: seconds per byte, g: seconds per byte reduced (Hockney's
alpha-beta model with a reduction term, as in Thakur, Rabenseifner, Gropp, IJHPCA 19(1), 2005).

usage: cost_model.py [--alpha US] [--beta NS_PER_B] [--gamma NS_PER_B] [--ranks-per-node L]
Prints, per node count, the predicted hop-2 time of each algorithm for a few sizes and the
size below which recursive doubling of the whole vector on one rail beats the ring on the
shards of all L rails (what coll_twohop_small_msg_bytes decides).
"""
import argparse
import math


def ring(n, m, a, b, g):
    if n < 2:
        return 0.0
    return 2 * (n - 1) * a + 2 * (n - 1) / n * m * b + (n - 1) / n * m * g


def rd(n, m, a, b, g):
    if n < 2:
        return 0.0
    p = 1 << int(math.floor(math.log2(n)))
    steps = int(math.log2(p))
    t = steps * (a + m * b + m * g)
    if p != n:
        t += (a + m * b + m * g) + (a + m * b)
    return t


def rabenseifner(n, m, a, b, g):
    if n < 2:
        return 0.0
    p = 1 << int(math.floor(math.log2(n)))
    k = int(math.log2(p))
    t = 2 * k * a + 2 * (p - 1) / p * m * b + (p - 1) / p * m * g
    if p != n:
        t += (a + m * b + m * g) + (a + m * b)
    return t


def crossover(n, L, a, b, g):
    """Largest message n_bytes (power of two) for which RD on the whole vector beats the ring
    on a 1/L shard (both on one rail; the L rails run the ring shards in parallel)."""
    best = 0
    m = 8
    while m <= 1 << 30:
        if rd(n, m, a, b, g) <= ring(n, m / L, a, b, g):
            best = m
        m *= 2
    return best


def fmt(t):
    return f"{t * 1e6:.1f}" if t < 1e-2 else f"{t * 1e3:.2f} ms"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--alpha", type=float, default=10.0, help="us per message step")
    ap.add_argument("--beta", type=float, default=1.5, help="ns per byte on one rail")
    ap.add_argument("--gamma", type=float, default=0.08, help="ns per byte reduced")
    ap.add_argument("--ranks-per-node", type=int, default=8)
    o = ap.parse_args()
    a, b, g = o.alpha * 1e-6, o.beta * 1e-9, o.gamma * 1e-9
    sizes = [8, 64 << 10, 1 << 20, 64 << 20]
    print(f"# alpha {o.alpha} us, beta {o.beta} ns/B, gamma {o.gamma} ns/B, L = {o.ranks_per_node}")
    hdr = "| nodes | " + " | ".join(f"{s} B: ring / RD / Rabenseifner (us)" for s in sizes)
    print(hdr + " | RD (whole vector) beats ring (1/L shard) up to |")
    print("|---" * (len(sizes) + 2) + "|")
    for n in [2, 3, 4, 8, 16, 64, 256, 1024, 4096]:
        cells = []
        for s in sizes:
            cells.append(" / ".join(fmt(f(n, s, a, b, g)) for f in (ring, rd, rabenseifner)))
        print(f"| {n} | " + " | ".join(cells) + f" | {crossover(n, o.ranks_per_node, a, b, g)} B |")


if __name__ == "__main__":
    main()
